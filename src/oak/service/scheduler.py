"""``oak serve``: the runtime scheduler as a long-running service with a live queue.

:class:`ServiceScheduler` is :class:`~oak.runtime.scheduler.RuntimeScheduler` — the same rounds, engine step,
policy, executors, measurement and crash-safe store — with a job set that grows while it runs. Requests
(:mod:`oak.service.protocol`) arrive on listener threads; reads (status) are answered from the state the
scheduler published after its last tick, writes (submit, cancel) are queued and applied by the scheduler's own
thread at the start of its next tick, committed to ``state.sqlite`` before the reply. A submission is parsed
and checked in full (fields, names unique in the run, device bounds within the cluster, a feasible model) and
either every job of it is accepted or none.

After each tick the service writes ``metrics.prom`` (Prometheus text format) atomically and, per round, one
JSON line to ``rounds.jsonl`` and to its log.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from oak.catalog import Catalog
from oak.engine.ledger import JobsState
from oak.errors import OakInputError
from oak.io_util import write_atomic
from oak.policies.base import Policy
from oak.runtime.clock import Clock
from oak.runtime.executor import Executor
from oak.runtime.jobs_file import JobsFile, RuntimeJob, parse_jobs
from oak.runtime.scheduler import RuntimeOptions, RuntimeScheduler
from oak.runtime.store import JobRecord

STATES = ("queued", "restoring", "running", "done", "failed", "cancelled")
REQUEST_TIMEOUT_S = 300.0
"""How long a listener waits for the scheduler's thread to apply a write (a round that stops jobs may take up
to the stop timeout)."""


def job_to_dict(job: RuntimeJob) -> dict[str, Any]:
    d = dataclasses.asdict(job)
    d["command"] = list(job.command)
    d["env"] = [list(kv) for kv in job.env]
    return d


def job_from_dict(d: dict[str, Any]) -> RuntimeJob:
    d = dict(d)
    d["command"] = tuple(d.get("command") or ())
    d["env"] = tuple((str(k), str(v)) for k, v in d.get("env") or ())
    return RuntimeJob(**d)


@dataclass
class _Request:
    """A write waiting for the scheduler's thread. ``claim`` and ``abandon`` decide, under one lock, whether
    the scheduler applies it or the waiting client gives up on it: never both."""

    op: str
    args: dict[str, Any]
    done: threading.Event = field(default_factory=threading.Event)
    reply: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _state: str = "waiting"

    def claim(self) -> bool:
        with self._lock:
            if self._state == "waiting":
                self._state = "claimed"
            return self._state == "claimed"

    def abandon(self) -> bool:
        with self._lock:
            if self._state == "waiting":
                self._state = "abandoned"
            return self._state == "abandoned"


class ServiceScheduler(RuntimeScheduler):
    """The scheduler of ``oak serve --run-dir D``: starts empty (or with the run directory's jobs)."""

    serving = True

    def __init__(
        self,
        policy: Policy,
        run_dir: str | Path,
        opts: RuntimeOptions,
        executor: Executor | None = None,
        catalog: Catalog | None = None,
        log: Any = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(JobsFile(path="serve", jobs=()), policy, run_dir, opts, executor, catalog, clock)
        self._inbox: queue.Queue[_Request] = queue.Queue()
        self._lock = threading.Lock()
        self._published_state: dict[str, Any] = {"jobs": [], "time_s": 0.0, "started": False}
        #: job → (its state key, its published row) for jobs that are not arrived or over (``_rows``)
        self._row_cache: dict[str, tuple[Any, dict[str, Any]]] = {}
        #: the last round's policy error (None once a round is decided again): in ``oak status --json``
        self.policy_error: str | None = None
        self._metrics_at = -1.0
        self._log = log
        self.rounds_log = self.run_dir / "rounds.jsonl"

    # ------------------------------------------------------------------ identity and resume
    def _fingerprint(self) -> str:
        o = self.opts
        return json.dumps(
            {
                "serve": 1,
                "policy": self.policy.name,
                "seed": o.seed,
                "devices": o.devices,
                "kind": o.device_kind,
                "profile_type": o.profile_type,
            },
            sort_keys=True,
        )

    def _open(self) -> tuple[list[JobRecord], float]:
        meta = self.store.meta()
        self._check_state_intact(meta)
        fp = self._fingerprint()
        if meta:
            if meta.get("fingerprint") != fp:
                was = meta.get("fingerprint", "")
                raise OakInputError(
                    f"{self.run_dir}: its service was started with other settings ({was or 'an oak run of a jobs file'}); "
                    f"restart it with the same --policy, --seed and devices, or use a new --run-dir"
                )
            jobs = [job_from_dict(d) for d in self.store.submissions()]
            saved = self.store.jobs()
            records = [saved.get(j.name, JobRecord(j.name)) for j in jobs]
            self._start_wall = float(meta["start_wall"])
            if jobs:
                self._build(jobs, records)
            self._resume_running(records)
            self.store.save(records, {"resumed": int(meta.get("resumed", 0)) + 1})
            return records, float(meta["start_wall"])
        start = self.clock.time()
        self.store.save([], {"fingerprint": fp, "start_wall": start, "policy": self.policy.name})
        self._mark_run(start)
        return [], start

    def _build(self, jobs: list[RuntimeJob], records: list[JobRecord] | None = None) -> None:
        if not jobs:  # nothing submitted yet: no model to build
            self.jobs, self.names = (), []
            self.keys = np.zeros(0, dtype=np.uint64)
            self.st = JobsState.initial(np.zeros(0))
            return
        super()._build(jobs, records)

    def _inject_failures(self, records: list[JobRecord], now: float) -> bool:
        return bool(self.jobs) and super()._inject_failures(records, now)

    # ------------------------------------------------------------------ requests (any thread)
    def request(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Answer one request: ``status`` from the published state, ``submit`` / ``cancel`` through the
        scheduler's thread (waits for it, at most ``REQUEST_TIMEOUT_S``)."""
        if op == "status":
            with self._lock:
                return {"ok": True, **json.loads(json.dumps(self._published_state))}
        if op == "metrics":
            with self._lock:
                return {"ok": True, "text": self._metrics_text()}
        if op not in ("submit", "cancel", "retry", "ping"):
            return {"ok": False, "error": f"unknown request {op!r}; expected status, submit, cancel, retry, metrics"}
        if op == "ping":
            return {"ok": True}
        req = _Request(op, args)
        self._inbox.put(req)
        if not req.done.wait(REQUEST_TIMEOUT_S) and req.abandon():
            return {
                "ok": False,
                "error": f"the scheduler did not take the request within {REQUEST_TIMEOUT_S:g} s (it is busy "
                "stopping or starting jobs); nothing was changed: try again",
            }
        req.done.wait()  # claimed: the scheduler is applying it
        return req.reply

    # ------------------------------------------------------------------ the scheduler's thread
    def _service(self, now: float) -> bool:
        changed = False
        while True:
            try:
                req = self._inbox.get_nowait()
            except queue.Empty:
                break
            if not req.claim():
                continue  # its client gave up waiting and was told nothing changed
            try:
                if req.op == "submit":
                    req.reply = self._submit(req.args, now)
                elif req.op == "retry":
                    req.reply = self._retry(req.args, now)
                else:
                    req.reply = self._cancel(req.args, now)
                changed = True
            except OakInputError as exc:
                req.reply = {"ok": False, "error": str(exc)}
            except Exception as exc:  # a bug must not kill the service; the client sees it
                req.reply = {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}
            finally:
                if changed:
                    self._published(now, force=True)  # a status right after the reply shows the change
                req.done.set()
        return changed

    def _submit(self, args: dict[str, Any], now: float) -> dict[str, Any]:
        text, source = str(args.get("text", "")), str(args.get("source", "<submission>"))
        parsed = parse_jobs(text, source, tuple(self.catalog.apps))
        cwd = args.get("cwd")
        if isinstance(cwd, str) and os.path.isabs(cwd) and os.path.isdir(cwd):  # as sbatch: the submitter's
            parsed = dataclasses.replace(  # directory, for a command job that names none
                parsed,
                jobs=tuple(
                    dataclasses.replace(j, workdir=cwd) if j.is_command and j.workdir is None else j
                    for j in parsed.jobs
                ),
            )
        have = {j.name: r for j, r in zip(self.jobs, self.records, strict=True)}
        for j in parsed.jobs:
            if j.name in have:
                raise OakInputError(
                    f"{source}: job {j.name!r} is already in this run ({have[j.name].state}); job names are unique "
                    "within a run directory: pick another name"
                )
            kind = "CPU slot(s)" if self.opts.device_kind == "cpu" else "GPU(s)"
            for f in ("min_gpus", "max_gpus"):
                if getattr(j, f) > self.opts.devices:
                    raise OakInputError(
                        f"{source}: job {j.name!r}: {f}={getattr(j, f)} exceeds the {self.opts.devices} {kind} "
                        "this scheduler has"
                    )
        new = [dataclasses.replace(j, submit_s=now + j.submit_s) for j in parsed.jobs]
        new_records = [JobRecord(j.name) for j in new]
        old_jobs, old_records = list(self.jobs), list(self.records)
        try:  # the whole job set must build (feasible configurations for every job) and commit, or nothing is kept
            self._build(old_jobs + new, old_records + new_records)
            self.store.submit([job_to_dict(j) for j in new], new_records)
        except Exception as exc:
            self._build(old_jobs, old_records)
            if isinstance(exc, OakInputError):
                raise OakInputError(f"{source}: refused, nothing submitted: {exc}") from None
            raise OakInputError(f"{source}: not submitted ({type(exc).__name__}: {exc})") from None
        self.records = old_records + new_records
        self._note({"event": "submit", "jobs": [j.name for j in new], "t": round(now, 3)})
        return {"ok": True, "submitted": [j.name for j in new]}

    def _named(self, args: dict[str, Any]) -> tuple[str, int]:
        """The request's job name and its index; an unknown name is an input error listing the run's jobs."""
        name = str(args.get("name", ""))
        idx = {j.name: i for i, j in enumerate(self.jobs)}
        if name not in idx:
            known = ", ".join(sorted(idx)) or "none"
            raise OakInputError(f"no job {name!r} in this run (jobs: {known})")
        return name, idx[name]

    def _cancel(self, args: dict[str, Any], now: float) -> dict[str, Any]:
        name, i = self._named(args)
        r = self.records[i]
        if r.over:
            raise OakInputError(f"job {name!r} is already {r.state}")
        r.cancelled = True
        r.finish_s = now
        if r.launched_at_s is not None:  # stopped with a checkpoint, as at any stop; the scheduler does not wait
            self.request_stops([i], self.records, now)  # commits the record before it signals the job
        self._settle(r, now, "cancelled")
        self.store.save([r])
        self._note({"event": "cancel", "job": name, "t": round(now, 3)})
        return {"ok": True, "cancelled": name}

    def _retry(self, args: dict[str, Any], now: float) -> dict[str, Any]:
        """Queue a failed or cancelled job again: it resumes from its newest checkpoint, with a fresh retry
        count (its failures and restarts so far stay counted)."""
        name, i = self._named(args)
        r = self.records[i]
        if r.state not in ("failed", "cancelled"):
            raise OakInputError(f"job {name!r} is {r.state}; only a failed or cancelled job can be retried")
        if i in self._live.stopping:
            raise OakInputError(f"job {name!r} is still stopping; retry it once it has exited")
        r.gave_up, r.cancelled, r.fail_streak, r.retry_at_s, r.finish_s = None, False, 0, 0.0, None
        self._live.committed_over.discard(name)
        self.failure_notes.pop(name, None)
        self._settle(r, now, "retried")
        self.store.save([r])
        self._note({"event": "retry", "job": name, "t": round(now, 3)})
        return {"ok": True, "retried": name}

    # ------------------------------------------------------------------ publishing
    def _rows(self) -> list[dict[str, Any]]:
        """Every job's row of the published state. A job that has not arrived or is over (and holds nothing)
        changes only when its state does: its row is reused, so thousands of them cost nothing per tick."""
        rows = []
        cache = self._row_cache
        for j, r in zip(self.jobs, self.records, strict=True):
            settled = (not r.arrived or r.over) and not r.devices
            key = (
                (r.arrived, r.phase, len(r.history), r.finish_s, r.failures, r.step, r.gave_up, j.submit_s)
                if settled
                else None
            )
            hit = cache.get(j.name) if settled else None
            if hit is not None and hit[0] == key:
                rows.append(hit[1])
                continue
            rows.append(
                {
                    "name": j.name,
                    "state": r.state,
                    "devices": list(r.devices),
                    "restarts": r.restarts,
                    "incarnations": r.incarnations,
                    "adopted": r.adopted,
                    "failures": r.failures,
                    "step": r.step,
                    "total_steps": self.learned.total(j, r) if (j.target_steps or r.total_steps) else None,
                    "t_progress_s": round(r.t_progress_s, 3),
                    "t_ckpt_s": round(r.t_ckpt_s, 3),
                    "t_queue_s": round(r.t_queue_s, 3),
                    "submitted_s": round(j.submit_s, 3),
                    "finish_s": None if r.finish_s is None else round(r.finish_s, 3),
                    "lost_steps": r.lost_steps,
                    "gpu_s": round(r.gpu_s, 3),
                    "gpu_s_lost": round(r.gpu_s_lost, 3),
                    "kind": "command" if j.is_command else j.model,
                    "reason": r.gave_up,
                    "learned": self._learned_row(j, r),
                    "phase": r.phase,
                    "history": r.history,
                }
            )
            if settled:
                cache[j.name] = (key, rows[-1])
        return rows

    def _learned_row(self, j: RuntimeJob, r: JobRecord) -> dict[str, Any] | None:
        if not j.is_command:
            return None
        p = self.learned.params(j, r)
        return {
            "prior": j.application or "linear-scaling",
            "samples": len(self.learned.samples(r)),
            "params": dataclasses.asdict(p),
            "max_devices_offered": self.learned.max_gpus(j, r),
        }

    def _published(self, now: float, force: bool = False) -> None:
        rows = self._rows()
        with self._lock:
            self._published_state = {
                "jobs": rows,
                "time_s": round(now, 3),
                "started": True,
                "devices": self.opts.devices,
                "device_kind": self.opts.device_kind,
                "policy": self.policy.name,
                "rounds": len(self.decision_ms),
                "policy_error": self.policy_error,
            }
        if force or now - self._metrics_at >= 1.0:
            self._metrics_at = now
            with self._lock:
                text = self._metrics_text()
            write_atomic(self.run_dir / "metrics.prom", text, mode=0o600)

    def _metrics_text(self) -> str:
        """Prometheus text exposition of the published state (call with the lock held)."""
        st = self._published_state
        rows: list[dict[str, Any]] = st["jobs"]
        counts = Counter(r["state"] for r in rows)
        held = sum(len(r["devices"]) for r in rows)
        queued_age = [st["time_s"] - r["submitted_s"] for r in rows if r["state"] == "queued"]
        lines = [
            "# HELP oak_jobs Jobs of this run by state.",
            "# TYPE oak_jobs gauge",
            *(f'oak_jobs{{state="{s}"}} {counts.get(s, 0)}' for s in STATES),
            "# HELP oak_job_restarts_total Restarts of each job.",
            "# TYPE oak_job_restarts_total counter",
            *(f'oak_job_restarts_total{{job="{r["name"]}"}} {r["restarts"]}' for r in rows),
            "# HELP oak_job_failures_total Failures of each job.",
            "# TYPE oak_job_failures_total counter",
            *(f'oak_job_failures_total{{job="{r["name"]}"}} {r["failures"]}' for r in rows),
            "# HELP oak_queue_age_seconds Age of the oldest queued job.",
            "# TYPE oak_queue_age_seconds gauge",
            f"oak_queue_age_seconds {max(queued_age, default=0.0):.3f}",
            "# HELP oak_device_utilisation Devices held by jobs over the devices of the cluster.",
            "# TYPE oak_device_utilisation gauge",
            f"oak_device_utilisation {held / max(self.opts.devices, 1):.6f}",
            "# HELP oak_lost_device_seconds_total Device-seconds spent restoring or lost to failures.",
            "# TYPE oak_lost_device_seconds_total counter",
            f"oak_lost_device_seconds_total {sum(r['gpu_s_lost'] for r in rows):.3f}",
            "# HELP oak_decision_seconds Time the last round's decision took.",
            "# TYPE oak_decision_seconds gauge",
            f"oak_decision_seconds {self.decision_ms[-1] / 1e3 if self.decision_ms else 0.0:.6f}",
            "# HELP oak_rounds_total Rounds decided by this scheduler process.",
            "# TYPE oak_rounds_total counter",
            f"oak_rounds_total {len(self.decision_ms)}",
        ]
        return "\n".join(lines) + "\n"

    def _decide(self, records: list[JobRecord], st: JobsState, now: float) -> None:
        try:
            super()._decide(records, st, now)
        except Exception as exc:  # a policy (a user's plugin) that raises must not stop the service
            # the policy raised before anything was stopped or started: every job keeps what it holds, and the
            # next round asks the policy again
            msg = f"policy {self.policy.name!r} raised {type(exc).__name__}: {str(exc)[:300]}"
            if msg != self.policy_error:
                print(f"oak serve: {msg}; jobs keep their devices, the next round asks again", file=sys.stderr)
            self.policy_error = msg
            self._note({"event": "policy-error", "t": round(now, 3), "error": msg})
            return
        self.policy_error = None
        self._note(
            {
                "event": "round",
                "k": len(self.decision_ms) - 1,
                "t": round(now, 3),
                "decision_ms": round(self.decision_ms[-1], 3),
                "allocation": {r.name: r.devices for r in records if r.devices},
                "states": dict(Counter(r.state for r in records)),
            }
        )

    def _note(self, line: dict[str, Any]) -> None:
        """One structured log line: appended to ``rounds.jsonl`` and passed to the service's log."""
        text = json.dumps(line, sort_keys=True)
        fd = os.open(self.rounds_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # job names and events: private
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
        if self._log is not None:
            self._log(text)
