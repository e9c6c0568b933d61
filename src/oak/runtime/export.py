"""What a run recorded, as a simulator's input: ``oak export-trace RUN_DIR --out T.json`` (docs/twin.md).

A run directory's ``state.sqlite`` holds, besides the scheduler's state, what the simulator needs to replay the
run: the run's settings and jobs (meta ``run``, written when the run began; a live run's jobs are its
submissions, with their submit times on the run clock), each job's measured step times per allocation (its
step-time log: the packaged worker's and ``oak.job.report``'s timed steps), its measured restore time (the time
from each launch to its first step beyond the checkpoint it resumed from: T_ckpt over its incarnations), its
incarnations one by one (:func:`incarnations`: when each was launched on how many devices, reached its first
step, ended and how, how long a stop took, what a failure lost, from the job's phase history), its measured
result, and the failure log (``RunStore.failures``: injected kills, crashes, stalls, nodes lost and back).

The trace is one JSON document (``FORMAT``, version ``VERSION``); its failures are also written as a failure
log CSV (:mod:`oak.failures.trace`) that ``--failure-model trace:FILE`` reads.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from oak.errors import OakInputError
from oak.failures.trace import KINDS, FailureEvent
from oak.runtime.jobs_file import RuntimeJob, job_from_dict
from oak.runtime.learned import LearnedGoodput
from oak.runtime.store import JobRecord, RunStore

FORMAT = "oak-run-trace"
VERSION = 1


def export_trace(run_dir: str | Path) -> dict[str, Any]:
    """The trace of the run in ``run_dir`` (module docstring); OakInputError if it holds no run, a run begun
    before runs recorded their settings, or state that cannot be read (damaged, or edited by hand)."""
    try:
        doc = _export_trace(run_dir)
    except OakInputError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:  # JSONDecodeError is a ValueError
        raise OakInputError(
            f"{run_dir}: the run's state cannot be read ({type(exc).__name__}: {exc}): damaged, or edited by hand?"
        ) from None
    check_trace(doc, str(run_dir))
    return doc


def _export_trace(run_dir: str | Path) -> dict[str, Any]:
    run = Path(run_dir)
    db = run / "state.sqlite"
    if not db.is_file():
        raise OakInputError(f"{run}: no run here (no state.sqlite); expected an oak run or oak serve run directory")
    store = RunStore.for_reading(db)
    try:
        meta = store.meta()
        if not meta:
            raise OakInputError(f"{db}: holds no run")
        desc = meta.get("run")
        if not isinstance(desc, dict):
            raise OakInputError(
                f"{db}: the run does not record its settings (begun by an older oak); run it again to export it"
            )
        records = store.jobs()
        failures = store.failures()
        dicts = store.submissions() if desc.get("serving") else list(desc.get("jobs") or [])
    finally:
        store.close()
    jobs = [job_from_dict(d) for d in dicts]
    end_s = float(meta.get("last_tick_s", 0.0))
    node_names = [str(n[0]) for n in desc.get("nodes") or []]
    return {
        "format": FORMAT,
        "version": VERSION,
        "run": {**{k: v for k, v in desc.items() if k != "jobs"}, "end_s": end_s, "run_dir": str(run.resolve())},
        "jobs": [_job(j, records.get(j.name, JobRecord(j.name))) for j in jobs],
        "failures": _failures(failures, node_names, end_s),
    }


_LAUNCH = re.compile(r"launched on device\(s\) \[([0-9, ]*)\] from step (\d+)")
_FINISH = re.compile(r"finished at step (\d+)")
_RESUMED = re.compile(r"past its resume step \((\d+)\)(?: after ([0-9.]+) s restoring)?")


def incarnations(history: list[list[Any]], last_step_s: float | None = None) -> list[dict[str, Any]]:
    """A job's incarnations from its phase history (``JobRecord.history``: the scheduler's notes), in order:
    ``launch_s``, ``devices`` (how many), ``from_step``; ``running_s`` when it got past the step it resumed
    from (None: never); how it ended, ``end`` ("stop": asked to checkpoint and exit, "done", "failed"; None:
    still running) at ``end_s``; ``to_step``, the step it had reached when it ended by a stop or finished
    (None after a failure: the steps since its checkpoint were lost); ``stop_s``, how long a stop took;
    ``last_step_s``, for the incarnation that finished, when it was first seen at its last step
    (``JobRecord.last_step_s``; None: not recorded): from then to ``end_s`` it exited. One that failed and was
    relaunched also has ``reached_step`` (the step it had reported) and ``lost_steps`` (those its relaunch
    redid: beyond the checkpoint it resumed from). One that got past its resume step under a scheduler that
    notes it also has ``restore_s``: the restore time (T_ckpt) its scheduler counted, from the launch to the
    tick before the one that saw it past that step (that tick's time counted as running)."""
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for t, phase, note in history:
        t = float(t)
        if phase == "restoring":
            m = _LAUNCH.search(str(note))
            if cur is not None and cur["end"] == "stop" and cur["to_step"] is None and m:
                cur["to_step"] = int(m.group(2))  # a stop checkpoints: the next launch resumes where it ended
            if m and out and out[-1]["end"] == "failed":  # the step it had reported (its relaunch is noted from it)
                out[-1]["reached_step"] = int(m.group(2))
            cur = None
            if m:
                devices = [d for d in m.group(1).split(",") if d.strip()]
                cur = {
                    "launch_s": t,
                    "devices": len(devices),
                    "from_step": int(m.group(2)),
                    "running_s": None,
                    "end": None,
                    "end_s": None,
                    "to_step": None,
                    "stop_s": None,
                    "last_step_s": None,
                }
                out.append(cur)
            continue
        if cur is None:
            continue
        if phase == "running" and cur["running_s"] is None and cur["end"] is None:
            cur["running_s"] = t
            m = _RESUMED.search(str(note))
            if m:  # the checkpoint it resumed from (after a failure, behind the last step it reported)
                cur["from_step"] = int(m.group(1))
                if m.group(2) is not None:  # the restore time its scheduler counted (T_ckpt)
                    cur["restore_s"] = float(m.group(2))
                before = out[-2] if len(out) > 1 else None
                if before is not None and before["end"] == "failed" and before.get("reached_step") is not None:
                    before["lost_steps"] = max(int(before["reached_step"]) - cur["from_step"], 0)
        elif phase == "stopping" and cur["end"] is None:
            cur["end"], cur["end_s"] = "stop", t
        elif phase == "done":
            m = _FINISH.search(str(note))
            if cur["end"] is None:
                cur["end"], cur["end_s"] = "done", t
            elif cur["end"] == "stop":
                cur["stop_s"] = t - float(cur["end_s"])
            cur["to_step"] = int(m.group(1)) if m else None
            cur = None
        elif cur["end"] == "stop":  # stopped (or failed while stopping): it has exited
            cur["stop_s"] = t - float(cur["end_s"])
            if phase != "queued":
                cur["to_step"] = None
                cur = None
        elif cur["end"] is None and phase in ("queued", "backoff", "failed", "cancelled"):
            cur["end"], cur["end_s"] = "failed", t
            cur = None
    if out and last_step_s is not None:
        last = out[-1]
        if last["end"] == "done" and last["launch_s"] <= last_step_s <= last["end_s"]:
            last["last_step_s"] = float(last_step_s)
    return out


def arrived(history: list[list[Any]]) -> float | None:
    """When the scheduler took the job in (its first "arrived" note: the tick after its submission); None if
    the history has none."""
    return next((float(t) for t, _, note in history if note == "arrived"), None)


def _job(job: RuntimeJob, r: JobRecord) -> dict[str, Any]:
    restore = r.t_ckpt_s / r.incarnations if r.incarnations else None
    return {
        "name": job.name,
        "submit_s": job.submit_s,
        "min_gpus": job.min_gpus,
        "max_gpus": job.max_gpus,
        "batch_size": int(r.batch_size or job.batch_size),
        "restart_penalty_s": job.restart_penalty_s,
        "application": job.application,
        "command": job.is_command,
        "model": job.model,
        "total_steps": LearnedGoodput.total(job, r),
        "steplog": r.steplog,
        "restore_s": restore,
        "incarnations": incarnations(r.history, r.last_step_s),
        "arrived_s": arrived(r.history),
        "measured": {
            "state": r.state,
            "jct_s": (r.finish_s - job.submit_s) if r.done and r.finish_s is not None else None,
            "restarts": r.restarts,
            "failures": r.failures,
            "incarnations": r.incarnations,
            "t_progress_s": r.t_progress_s,
            "t_ckpt_s": r.t_ckpt_s,
            "t_queue_s": r.t_queue_s,
            "gpu_s_used": r.gpu_s,
            "gpu_s_lost": r.gpu_s_lost,
            "step": r.step,
        },
    }


def _failures(rows: list[dict[str, Any]], node_names: list[str], end_s: float) -> list[dict[str, Any]]:
    """The failure log as trace lines: a node's loss with how long it stayed down (until its ``node-back``, or
    the run's end), a job's failures as they were logged."""
    out: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        kind, t = str(row["kind"]), float(row["time_s"])
        if kind == "node-back":
            continue
        line: dict[str, Any] = {"time_s": t, "kind": kind, "detail": row["detail"]}
        if row["job"]:
            line["job"] = row["job"]
        else:
            name = str(row["node"])
            back = next(
                (float(b["time_s"]) for b in rows[i + 1 :] if b["kind"] == "node-back" and b["node"] == name), None
            )
            line["node"] = node_names.index(name) if name in node_names else -1
            line["node_name"] = name
            line["down_s"] = max((back if back is not None else end_s) - t, 1e-3)
        out.append(line)
    return out


def failure_events(trace: dict[str, Any], *, injected: bool = True) -> list[FailureEvent]:
    """The trace's failures as failure-log events (``injected=False`` leaves out the runtime's injected kills:
    a replay draws those again from the run's seed and failure rate)."""
    events = []
    for f in trace.get("failures") or []:
        if f["kind"] == "injected" and not injected:
            continue
        if "job" in f:
            events.append(FailureEvent(float(f["time_s"]), str(f["kind"]), job=str(f["job"])))
        elif int(f.get("node", -1)) >= 0:
            events.append(FailureEvent(float(f["time_s"]), str(f["kind"]), node=int(f["node"]), down_s=f["down_s"]))
    return events


def load_trace(path: str | Path) -> dict[str, Any]:
    """A trace written by ``oak export-trace`` (checked: format, version, the fields a replay reads)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8-sig"))  # json refuses a leading BOM
    except (OSError, UnicodeDecodeError) as exc:
        raise OakInputError(f"{p}: cannot read the trace ({exc})") from None
    except ValueError as exc:
        raise OakInputError(f"{p}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise OakInputError(f'{p}: not a run trace (expected "format": "{FORMAT}"; oak export-trace writes one)')
    if doc.get("version") != VERSION:
        raise OakInputError(f"{p}: trace version {doc.get('version')!r}; this oak reads version {VERSION}")
    for key, kind in (("run", dict), ("jobs", list), ("failures", list)):
        if not isinstance(doc.get(key), kind):
            raise OakInputError(f"{p}: field {key!r}: expected a JSON {'object' if kind is dict else 'array'}")
    check_trace(doc, str(p))
    return doc


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _integer(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_trace(doc: dict[str, Any], where: str) -> None:
    """The values a replay reads, checked where a hand-edited or damaged trace would otherwise be replayed as
    something else (``"seed": 1.5`` as seed 1, a negative ``total_steps`` as a job done at once) or end in a
    traceback. ``where``: the file or run directory, for the message."""
    from oak.failures.rng import seed_problem

    run = doc["run"]
    for key in ("policy", "seed", "round_s", "failure_rate", "devices"):
        if key not in run:
            raise OakInputError(f"{where}: run: missing field {key!r}")
    if (problem := seed_problem(run["seed"])) is not None:
        raise OakInputError(f"{where}: run.seed {problem}")
    if not (_number(run["round_s"]) and run["round_s"] > 0):
        raise OakInputError(f"{where}: run.round_s {run['round_s']!r}: expected a number of seconds > 0")
    if not (_number(run["failure_rate"]) and 0 <= run["failure_rate"] <= 1):
        raise OakInputError(f"{where}: run.failure_rate {run['failure_rate']!r}: expected a probability in [0, 1]")
    if not (_integer(run["devices"]) and run["devices"] >= 1):
        raise OakInputError(f"{where}: run.devices {run['devices']!r}: expected an integer >= 1")
    seen: set[str] = set()
    for i, j in enumerate(doc["jobs"]):
        for key in ("name", "submit_s", "min_gpus", "max_gpus", "batch_size", "total_steps", "measured"):
            if not isinstance(j, dict) or key not in j:
                raise OakInputError(f"{where}: jobs[{i}]: missing field {key!r}")
        if not isinstance(j["name"], str) or not j["name"]:
            raise OakInputError(f"{where}: jobs[{i}].name {j['name']!r}: expected a job name")
        if j["name"] in seen:
            raise OakInputError(f"{where}: jobs[{i}]: job name {j['name']!r} given twice")
        seen.add(j["name"])
        if not (_number(j["submit_s"]) and j["submit_s"] >= 0):
            raise OakInputError(f"{where}: jobs[{i}].submit_s {j['submit_s']!r}: expected a number >= 0")
        for key in ("min_gpus", "max_gpus", "batch_size", "total_steps"):
            if not (_integer(j[key]) and j[key] >= 1):
                raise OakInputError(f"{where}: jobs[{i}].{key} {j[key]!r}: expected an integer >= 1")
        if j["min_gpus"] > j["max_gpus"]:
            raise OakInputError(f"{where}: jobs[{i}]: min_gpus {j['min_gpus']} above max_gpus {j['max_gpus']}")
        restore = j.get("restore_s")
        if restore is not None and not (_number(restore) and restore >= 0):
            raise OakInputError(f"{where}: jobs[{i}].restore_s {restore!r}: expected a number of seconds >= 0")
        if not isinstance(j["measured"], dict):
            raise OakInputError(f"{where}: jobs[{i}].measured: expected a JSON object")
    for i, f in enumerate(doc["failures"]):
        if not isinstance(f, dict) or "kind" not in f or "time_s" not in f:
            raise OakInputError(f"{where}: failures[{i}]: expected an object with kind and time_s")
        if f["kind"] not in KINDS:
            raise OakInputError(f"{where}: failures[{i}].kind {f['kind']!r}: expected one of {', '.join(KINDS)}")
        if not (_number(f["time_s"]) and f["time_s"] >= 0):
            raise OakInputError(f"{where}: failures[{i}].time_s {f['time_s']!r}: expected a number of seconds >= 0")
        _check_failure_target(f, f"{where}: failures[{i}]", seen, _node_count(run))


def _node_count(run: dict[str, Any]) -> int:
    """How many nodes a replay of the run has: its nodes, or one node of ``devices`` devices."""
    nodes = run.get("nodes")
    return len(nodes) if isinstance(nodes, list) and nodes else 1


def _check_failure_target(f: dict[str, Any], where: str, jobs: set[str], n_nodes: int) -> None:
    """A failure line names one of the trace's jobs, or a node of the run (its index; -1: a node the run did not
    know, which a replay leaves out) with how long it stayed down."""
    if ("job" in f) == ("node" in f):
        raise OakInputError(f"{where}: expected exactly one of job (a job's failure) and node (a node's)")
    if "job" in f:
        if f["job"] not in jobs:
            raise OakInputError(f"{where}.job {f['job']!r}: expected the name of one of the trace's jobs")
        return
    node = f["node"]
    if not (_integer(node) and -1 <= node < n_nodes):
        raise OakInputError(
            f"{where}.node {node!r}: expected a node index from 0 to {n_nodes - 1} (the run has {n_nodes} "
            "node(s)), or -1 for a node the run did not know"
        )
    if "down_s" not in f:
        raise OakInputError(f"{where}: missing field 'down_s' (how long the node stayed down)")
    if not (_number(f["down_s"]) and f["down_s"] > 0):
        raise OakInputError(f"{where}.down_s {f['down_s']!r}: expected a number of seconds > 0")
