"""``oak serve``: the runtime scheduler as a long-running service with a live queue.

:class:`Service` composes: a :class:`~oak.runtime.scheduler.RuntimeScheduler` with a live job set (the same
rounds, engine step, policy, executors, measurement and crash-safe store as ``oak run``), a
:class:`RequestInbox` and a :class:`StatePublisher` (the two collaborators of :mod:`oak.runtime.frontend`).
Requests (:mod:`oak.service.protocol`) arrive on listener threads; reads (status, metrics) are answered from
the state the publisher took after the scheduler's last tick; writes (submit, cancel, retry) wait in the inbox
and are applied by the scheduler's own thread at the start of its next tick, through the scheduler's public
operations, committed to ``state.sqlite`` before the reply. A submission is parsed and checked in full
(fields, names unique in the run, device bounds within the cluster, a feasible model) and either every job of
it is accepted or none.

After each tick the publisher writes ``metrics.prom`` (Prometheus text format) atomically and, per round and
per request applied, one JSON line to ``rounds.jsonl`` and to the service's log.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oak.catalog import Catalog
from oak.engine import RunResult
from oak.errors import OakInputError
from oak.io_util import write_atomic
from oak.policies.base import Policy
from oak.runtime.clock import Clock
from oak.runtime.executor import Executor
from oak.runtime.jobs_file import RuntimeJob, parse_jobs
from oak.runtime.scheduler import RuntimeOptions, RuntimeScheduler

STATES = ("queued", "restoring", "running", "done", "failed", "cancelled")
REQUEST_TIMEOUT_S = 300.0
"""How long a listener waits for the scheduler's thread to apply a write (a round that stops jobs may take up
to the stop timeout)."""
WRITES = ("submit", "cancel", "retry")


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


class StatePublisher:
    """The service's :class:`~oak.runtime.frontend.Publisher`: after every tick, the state ``oak status``
    reads (every job's row, kept under a lock for the listener threads) and, at most once a second,
    ``metrics.prom``; each event of the run one line of ``rounds.jsonl`` and of the log."""

    def __init__(self, run_dir: Path, log: Callable[[str], None] | None = None) -> None:
        self.run_dir = run_dir
        self.rounds_log = run_dir / "rounds.jsonl"
        self._log = log
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {"jobs": [], "time_s": 0.0, "started": False}
        #: job → (its state key, its published row) for jobs that are not arrived or over (``_rows``)
        self._row_cache: dict[str, tuple[Any, dict[str, Any]]] = {}
        self._metrics_at = -1.0
        self._decision_s = 0.0

    # ------------------------------------------------------------------ reads (any thread)
    def status(self) -> dict[str, Any]:
        """A deep copy of the last published state."""
        with self._lock:
            copy: dict[str, Any] = json.loads(json.dumps(self._state))
        return copy

    def metrics(self) -> str:
        with self._lock:
            return self._metrics_text()

    # ------------------------------------------------------------------ the scheduler's thread
    def publish(self, sched: RuntimeScheduler, now: float, force: bool = False) -> None:
        rows = self._rows(sched)
        with self._lock:
            self._state = {
                "jobs": rows,
                "time_s": round(now, 3),
                "started": True,
                "devices": sched.opts.devices,
                "device_kind": sched.opts.device_kind,
                "policy": sched.policy.name,
                "rounds": len(sched.decision_ms),
                "policy_error": sched.policy_error,
            }
            self._decision_s = sched.decision_ms[-1] / 1e3 if sched.decision_ms else 0.0
        if force or now - self._metrics_at >= 1.0:
            self._metrics_at = now
            try:
                write_atomic(self.run_dir / "metrics.prom", self.metrics(), mode=0o600)
            except OSError as exc:  # a full disk, no descriptor left: the scheduler goes on; /metrics still answers
                if self._log is not None:
                    self._log(json.dumps({"event": "metrics-file", "error": str(exc)}))

    def note(self, event: dict[str, Any]) -> None:
        """One structured log line: appended to ``rounds.jsonl`` and passed to the service's log."""
        text = json.dumps(event, sort_keys=True)
        fd = os.open(self.rounds_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # job names and events: private
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
        if self._log is not None:
            self._log(text)

    def _rows(self, sched: RuntimeScheduler) -> list[dict[str, Any]]:
        """Every job's row of the published state. A job that has not arrived or is over (and holds nothing)
        changes only when its state does: its row is reused, so thousands of them cost nothing per tick."""
        rows = []
        cache = self._row_cache
        for j, r in zip(sched.jobs, sched.records, strict=True):
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
                    "total_steps": sched.learned.total(j, r) if (j.target_steps or r.total_steps) else None,
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
                    "why": "" if r.over else r.why,  # the last round's, until the job is over
                    "why_code": "" if r.over else r.why_code,
                    "learned": _learned_row(sched, j, r),
                    "phase": r.phase,
                    "history": r.history,
                }
            )
            if settled:
                cache[j.name] = (key, rows[-1])
        return rows

    def _metrics_text(self) -> str:
        """Prometheus text exposition of the published state (call with the lock held)."""
        st = self._state
        rows: list[dict[str, Any]] = st["jobs"]
        counts = Counter(r["state"] for r in rows)
        held = sum(len(r["devices"]) for r in rows)
        # jobs that have arrived: one submitted with a later submit_s is queued, but not yet waiting
        queued_age = [
            st["time_s"] - r["submitted_s"] for r in rows if r["state"] == "queued" and r["submitted_s"] <= st["time_s"]
        ]
        reasons = Counter(r.get("why_code") or "" for r in rows if r["state"] in ("queued", "restoring", "running"))
        reasons = Counter({c: n for c, n in reasons.items() if c not in ("", "max")})
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
            f"oak_device_utilisation {held / max(int(st.get('devices', 1)), 1):.6f}",
            "# HELP oak_lost_device_seconds_total Device-seconds spent restoring or lost to failures.",
            "# TYPE oak_lost_device_seconds_total counter",
            f"oak_lost_device_seconds_total {sum(r['gpu_s_lost'] for r in rows):.3f}",
            "# HELP oak_jobs_waiting Jobs queued or below their maximum, by the reason of the last round (docs/jobs.md).",
            "# TYPE oak_jobs_waiting gauge",
            *(f'oak_jobs_waiting{{reason="{c}"}} {n}' for c, n in sorted(reasons.items())),
            "# HELP oak_job_devices Devices each job that is not over holds.",
            "# TYPE oak_job_devices gauge",
            *(
                f'oak_job_devices{{job="{r["name"]}"}} {len(r["devices"])}'
                for r in rows
                if r["state"] in ("queued", "restoring", "running")
            ),
            "# HELP oak_decision_seconds Time the last round's decision took.",
            "# TYPE oak_decision_seconds gauge",
            f"oak_decision_seconds {self._decision_s:.6f}",
            "# HELP oak_rounds_total Rounds decided by this scheduler process.",
            "# TYPE oak_rounds_total counter",
            f"oak_rounds_total {int(st.get('rounds', 0))}",
        ]
        return "\n".join(lines) + "\n"


def _learned_row(sched: RuntimeScheduler, j: RuntimeJob, r: Any) -> dict[str, Any] | None:
    if not j.is_command:
        return None
    p = sched.learned.params(j, r)
    return {
        "prior": j.application or "linear-scaling",
        "samples": len(sched.learned.samples(r)),
        "params": dataclasses.asdict(p),
        "max_devices_offered": sched.learned.max_gpus(j, r),
    }


class RequestInbox:
    """The service's :class:`~oak.runtime.frontend.Inbox`: writes queued by the listener threads (``put``),
    applied on the scheduler's thread (``take``) through its public operations; each applied write is noted
    and published at once (a status right after the reply shows it)."""

    def __init__(self, publisher: StatePublisher) -> None:
        self._queue: queue.Queue[_Request] = queue.Queue()
        self._publisher = publisher

    def put(self, req: _Request) -> None:
        self._queue.put(req)

    def take(self, sched: RuntimeScheduler, now: float) -> bool:
        changed = False
        while True:
            try:
                req = self._queue.get_nowait()
            except queue.Empty:
                break
            if not req.claim():
                continue  # its client gave up waiting and was told nothing changed
            try:
                req.reply = self._apply(sched, req, now)
                changed = True
            except OakInputError as exc:
                req.reply = {"ok": False, "error": str(exc)}
            except Exception as exc:  # a bug must not kill the service; the client sees it
                req.reply = {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}
            finally:
                if changed:
                    self._publisher.publish(sched, now, force=True)
                req.done.set()
        return changed

    def _apply(self, sched: RuntimeScheduler, req: _Request, now: float) -> dict[str, Any]:
        t = round(now, 3)
        if req.op == "submit":
            names = sched.submit(self._parsed(sched, req.args), now, str(req.args.get("source", "<submission>")))
            self._publisher.note({"event": "submit", "jobs": names, "t": t})
            return {"ok": True, "submitted": names}
        name = str(req.args.get("name", ""))
        if req.op == "retry":
            sched.retry(name, now)
            self._publisher.note({"event": "retry", "job": name, "t": t})
            return {"ok": True, "retried": name}
        sched.cancel(name, now)
        self._publisher.note({"event": "cancel", "job": name, "t": t})
        return {"ok": True, "cancelled": name}

    @staticmethod
    def _parsed(sched: RuntimeScheduler, args: dict[str, Any]) -> list[RuntimeJob]:
        text, source = str(args.get("text", "")), str(args.get("source", "<submission>"))
        jobs = parse_jobs(text, source, tuple(sched.catalog.apps)).jobs
        cwd = args.get("cwd")
        if isinstance(cwd, str) and os.path.isabs(cwd) and os.path.isdir(cwd):
            # as sbatch: the submitter's directory, for a command job that names none
            jobs = tuple(dataclasses.replace(j, workdir=cwd) if j.is_command and j.workdir is None else j for j in jobs)
        return list(jobs)


class Service:
    """``oak serve --run-dir D``: a scheduler of a live job set (empty at first, or the run directory's jobs,
    its running ones adopted), its inbox and its publisher."""

    def __init__(
        self,
        policy: Policy,
        run_dir: str | Path,
        opts: RuntimeOptions,
        executor: Executor | None = None,
        catalog: Catalog | None = None,
        log: Callable[[str], None] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.publisher = StatePublisher(Path(run_dir), log)
        self.inbox = RequestInbox(self.publisher)
        self.scheduler = RuntimeScheduler(
            None, policy, run_dir, opts, executor, catalog, clock, inbox=self.inbox, publisher=self.publisher
        )

    def run(self) -> RunResult:
        """Serve until ``stop`` (or SIGTERM / SIGINT in the main thread); every running job is then stopped
        with a checkpoint."""
        return self.scheduler.run()

    def stop(self) -> None:
        """End ``run`` at its next tick (any thread)."""
        self.scheduler.interrupted = True

    def request(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Answer one request: ``status`` and ``metrics`` from the published state, ``submit`` / ``cancel`` /
        ``retry`` through the scheduler's thread (waits for it, at most ``REQUEST_TIMEOUT_S``)."""
        if op == "status":
            return {"ok": True, **self.publisher.status()}
        if op == "metrics":
            return {"ok": True, "text": self.publisher.metrics()}
        if op == "ping":
            return {"ok": True}
        if op == "page":
            from oak.service.page import REFRESH_S, read_history, render_page

            refresh = args.get("refresh", REFRESH_S)
            history = read_history(self.publisher.run_dir / "state.sqlite")
            refresh_s = int(refresh) if isinstance(refresh, int) else REFRESH_S
            return {"ok": True, "html": render_page(self.publisher.status(), history, refresh_s=refresh_s)}
        if op not in WRITES:
            return {
                "ok": False,
                "error": f"unknown request {op!r}; expected status, submit, cancel, retry, metrics, page",
            }
        req = _Request(op, args)
        self.inbox.put(req)
        if not req.done.wait(REQUEST_TIMEOUT_S) and req.abandon():
            return {
                "ok": False,
                "error": f"the scheduler did not take the request within {REQUEST_TIMEOUT_S:g} s (it is busy "
                "stopping or starting jobs); nothing was changed: try again",
            }
        req.done.wait()  # claimed: the scheduler is applying it
        return req.reply
