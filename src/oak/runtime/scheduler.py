"""The runtime scheduler of ``oak run``: the simulator's rounds, enacted on real training processes.

Each round (every ``round_s`` seconds, and at once when a job arrives, finishes or fails) takes one engine
step (:func:`oak.engine.step`: the same :class:`~oak.model.snapshot.RoundSnapshot`, policy object, validation
and placement the simulator uses), over a ledger (:class:`~oak.engine.ledger.JobsState`) filled with
T_progress, T_ckpt and T_queue *measured* here, then enacts the plan's intents through its executor: STOP
(SIGTERM: the job checkpoints and exits), START, and RESTART (stop, then start on the new devices, resuming
from its newest valid checkpoint).

Measurement (seconds of the run clock, between scheduler ticks of ``tick_s``):

* a job *restores* from the moment it is launched until its worker reports a step beyond the one it resumed
  from: that time, plus the time its workers take to checkpoint and exit when stopped, is T_ckpt;
* a job *runs* while its worker is past that point: T_progress;
* T_queue: waiting (arrived, no devices) or restoring, as in the simulator.

Progress is mapped onto the scoring application's scale: ``progress = step / target_steps × total`` so that the
goodput model's epoch and the snapshot's remaining work follow the real job.

Failures: the simulator's failure model (:mod:`oak.failures`, per job: in grid interval k a running job is
killed with SIGKILL at (k + v)·round_s if u < λ, with (u, v) the counter-based draws for (seed, job, k)) —
the same failure events the simulator draws for that workload and seed. Workers that die on their own are
failures too.

State is committed to ``RUN_DIR/state.sqlite`` (:mod:`oak.runtime.store`) on every change, so a scheduler
killed at any point resumes with ``oak run`` on the same run directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from oak.catalog import Catalog
from oak.catalog.checkpoint import checkpoint_write_s
from oak.engine import ClusterModel, Intent, JobIntent, JobResult, JobsState, Plan, RunResult, step
from oak.engine.reasons import RoundReasons, round_reasons
from oak.engine.rules import PhysicsOptions, advised_checkpoint_interval
from oak.errors import OakInputError, PolicyError
from oak.failures import FailureStream, PerJobBernoulli, rng
from oak.job import ADVICE_FILE
from oak.model.cluster import Cluster, homogeneous_cluster
from oak.model.job import JobSpec
from oak.policies.base import Policy, PolicyBase
from oak.runtime.clock import Clock, SystemClock
from oak.runtime.executor import Executor, Launch, LocalExecutor
from oak.runtime.frontend import Inbox, Publisher
from oak.runtime.jobs_file import JobsFile, RuntimeJob, job_from_dict, job_to_dict
from oak.runtime.launch import log_tail, private_folders, read_status
from oak.runtime.learned import LearnedGoodput
from oak.runtime.lifecycle import JobPhase, enter, phase_of
from oak.runtime.nodes import NodeListing, NodeLost, RuntimeNode, check_nodes, hosts_of, nodes_cluster
from oak.runtime.procs import exit_file, gone, is_rank_of, ranks_under, read_exit_status, wait_gone
from oak.runtime.store import JobRecord, RunStore
from oak.workloads import Workload
from oak.workloads.loader import MAX_TIME_S

Progress = Callable[[float, int, int], None]


@dataclass(frozen=True)
class RuntimeOptions:
    """Run settings. ``devices``: CPU slots or GPUs the scheduler owns (one node of that many, unless
    ``nodes`` lists the cluster's nodes it owns: ``--cluster-from``, whose slots add up to ``devices``);
    ``profile_type``: the catalog GPU type whose goodput model scores allocations; ``round_s``: seconds per
    round; ``tick_s``: polling interval (s); ``stop_timeout_s``: wait for a checkpointing stop before SIGKILL;
    ``time_limit_s``: stop the run (unfinished jobs reported) after this many seconds of run clock;
    ``stall_s``: a running job whose ``status.json`` (rewritten after every step) is older than this — or that
    wrote none this long after its launch — is killed as failed (a hung collective; default: the worker's
    process-group timeout, 120 s, plus 60 s); ``max_retries``: a job that fails this many times in a row
    without a step beyond the one it resumed from fails for good; ``retry_backoff_s``: after the n-th such
    failure the job is not placed again for ``retry_backoff_s · 2^(n−1)`` seconds (at most 600). A job whose
    ranks exit 2 (the worker's usage error: bad data, model or checkpoint) fails for good at once."""

    devices: int
    device_kind: str = "cpu"
    profile_type: str = "aws"
    failure_rate: float = 0.0
    round_s: float = 60.0
    seed: int = 0
    tick_s: float = 0.2
    stop_timeout_s: float = 60.0
    time_limit_s: float | None = None
    stall_s: float = 180.0
    max_retries: int = 3
    retry_backoff_s: float = 30.0
    retry_failed: bool = False
    nodes: tuple[RuntimeNode, ...] = ()

    def __post_init__(self) -> None:
        if self.nodes:
            check_nodes(self.nodes)
            if sum(n.slots for n in self.nodes) != self.devices:
                raise OakInputError(
                    f"devices={self.devices!r}: expected the nodes' {sum(n.slots for n in self.nodes)} slots in all"
                )
        if isinstance(self.devices, bool) or not isinstance(self.devices, int) or self.devices < 1:
            raise OakInputError(f"devices={self.devices!r}: expected a positive integer (CPU slots or GPUs)")
        if self.device_kind not in ("cpu", "gpu"):
            raise OakInputError(f"device_kind={self.device_kind!r}: expected 'cpu' or 'gpu'")
        if not (math.isfinite(self.failure_rate) and 0.0 <= self.failure_rate <= 1.0):
            raise OakInputError(f"failure rate {self.failure_rate!r}: expected a probability in [0, 1]")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 1:
            raise OakInputError(f"max_retries={self.max_retries!r}: expected a positive integer")
        if not (math.isfinite(self.retry_backoff_s) and self.retry_backoff_s >= 0):
            raise OakInputError(f"retry_backoff_s={self.retry_backoff_s!r}: expected a number of seconds >= 0")
        for name in ("round_s", "tick_s", "stop_timeout_s", "stall_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise OakInputError(f"{name}={v!r}: expected a positive number of seconds")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise OakInputError(f"time_limit_s={self.time_limit_s!r}: expected a positive number of seconds")
        if (problem := rng.seed_problem(self.seed)) is not None:
            # the failure streams mix it modulo 2^64; the workers seed numpy's SeedSequence, which rejects negatives
            raise OakInputError(f"seed={problem}")


def runtime_cluster(opts: RuntimeOptions) -> Cluster:
    """The run's nodes (one node holding the run's devices, unless ``opts.nodes`` lists them), scored with
    ``profile_type``'s goodput model."""
    if opts.nodes:
        name = f"{len(opts.nodes)}x-{opts.device_kind}"
        return nodes_cluster(opts.nodes, opts.profile_type, name)
    return homogeneous_cluster(opts.profile_type, 1, opts.devices, name=f"{opts.devices}-{opts.device_kind}")


NODE_RATE_PRIOR_S = 3.8 / 1000.0 / 86_400.0
"""Failures per second of one node before any is seen: Llama 3's 3.8 per 1,000 node-days (the ``llama3`` preset)."""
ADVICE_CHANGE = 0.2
"""A job's checkpoint advice is rewritten when the interval moves by more than this (relative)."""
NODE_POLL_S = 2.0
"""How often (s) a run over a cluster's nodes looks at their state."""
NODE_HOLD_S = 30.0
"""How long (s) a node a launch found unreachable stays down before the cluster's listing decides again."""
MAX_BACKOFF_S = 600.0
MAX_STEP_S = 86_400.0
MAX_TIMED_STEPS = 10**9
"""Bounds of a command job's reported step time (s) and timed steps; reports outside them are ignored."""
SILENT_AFTER_S = 30.0
"""A command job whose first incarnation has not reported after this long does not use ``oak.job.report``:
it is scheduled on its elapsed time only (running from launch, never a stall)."""
EXIT_INPUT = 2  # the worker's exit status for bad input (oak.runtime.worker.EXIT_INPUT; no torch import here)


@dataclass
class _Live:
    """Per-run scratch: failure times already fired, the last decision interval."""

    fired: set[tuple[int, int]] = field(default_factory=set)
    last_round_k: int = -1
    heard: dict[str, tuple[float | None, float]] = field(default_factory=dict)
    """Job → (its last status's ``updated_at``, when this scheduler first saw it; at launch: when launched)."""
    timed: dict[str, tuple[float, int]] = field(default_factory=dict)
    """Job → ``updated_at`` and step of the last report this incarnation read (the base of a report after
    ones it missed)."""
    first_report: dict[str, bool] = field(default_factory=dict)
    """Command job → its current incarnation has not reported yet."""
    stopping: dict[int, float] = field(default_factory=dict)
    """Job index → run-clock deadline of a stop asked for (SIGTERM sent; SIGKILL at the deadline)."""
    committed_over: set[str] = field(default_factory=set)
    """Jobs committed since they were over (they change no more)."""
    pending: list[JobIntent] = field(default_factory=list)
    """Starts of the last decision waiting for devices (or a job) still held by a stop in flight."""


class RuntimeScheduler:
    """Schedules the jobs of ``jobs`` on ``opts.devices`` devices with ``policy`` in ``run_dir``.

    ``jobs=None``: a live job set (``oak serve``): the run starts with the jobs submitted to it so far and takes
    more while it runs (``submit``); it goes on when every job is over, and a policy that raises costs a round,
    not the run. ``inbox`` and ``publisher`` (:mod:`oak.runtime.frontend`) are how a front end composes with it:
    requests applied at the start of each tick, the state handed out at its end."""

    def __init__(
        self,
        jobs: JobsFile | None,
        policy: Policy,
        run_dir: str | Path,
        opts: RuntimeOptions,
        executor: Executor | None = None,
        catalog: Catalog | None = None,
        clock: Clock | None = None,
        *,
        inbox: Inbox | None = None,
        publisher: Publisher | None = None,
    ) -> None:
        self.serving = jobs is None
        """A live job set: keep running when every job is over (new ones may be submitted)."""
        self.inbox, self.publisher = inbox, publisher
        self.policy_error: str | None = None
        """The last round's policy error (a live job set only; None once a round is decided again)."""
        self.jobs = jobs.jobs if jobs is not None else ()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.policy = policy
        self.opts = opts
        # absolute: the jobs' contract paths (checkpoints, status file) must not depend on their working directory
        self.run_dir = Path(run_dir).absolute()
        self.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        # private whatever mode it had: only its owner may enter it (jobs' commands, environments, checkpoints)
        if self.run_dir.stat().st_mode & 0o077 and self.run_dir.stat().st_uid == os.getuid():
            self.run_dir.chmod(0o700)
        self.executor: Executor = (
            executor if executor is not None else LocalExecutor("gpu" if opts.device_kind == "gpu" else "cpu")
        )
        self.catalog = catalog if catalog is not None else Catalog.load()
        self.source = Path(jobs.path).stem if jobs is not None else "serve"
        if jobs is not None:  # said in the file's terms before the model reports "no feasible configuration"
            self._check_bounds(self.jobs, str(jobs.path), ("min_gpus",))
        self.st: JobsState | None = None
        self.learned = LearnedGoodput(self.catalog, opts.profile_type)
        self._build(list(self.jobs))
        self.failure_model = PerJobBernoulli(opts.failure_rate)
        self.store = RunStore(self.run_dir / "state.sqlite")
        self.decision_ms: list[float] = []
        self.records: list[JobRecord] = []
        self.interrupted = False
        self._live = _Live()
        self._restop: list[int] = []
        self._due = True  # a round is due at the next step_next
        self._start_wall = 0.0
        self._last_tick_s: float | None = None  # the run clock of the last committed tick (a resumed run's)
        self.failure_notes: dict[str, str] = {}
        """Job → the last failure's description and its ranks' log tails (for ``oak run``'s report)."""
        self.node_down = np.zeros(len(opts.nodes), dtype=bool)
        """Per node of ``opts.nodes``: down (or no longer listed) at the last look (``_watch_nodes``)."""
        self.node_failures = np.zeros(len(opts.nodes), dtype=np.int64)
        """Per node of ``opts.nodes``: how often this scheduler saw it go down (the failure-aware placement's
        node health, as the simulator's ``JobsState.node_failures``)."""
        self._nodes_seen_at = -math.inf
        self._node_hold = np.full(len(opts.nodes), -math.inf)
        """Per node: until when (scheduler clock) it stays down whatever the cluster lists (a launch's probe
        found it unreachable before the cluster did)."""

    def _build(self, jobs: list[RuntimeJob], records: list[JobRecord] | None = None) -> None:
        """(Re)build the model of the job set: once at start, and in ``oak serve`` whenever jobs are submitted
        or a job's learned goodput model changes. Job indices are stable: jobs are only ever appended."""
        self.jobs = tuple(jobs)
        if not jobs:  # a live job set before its first submission: no model to build
            self.names, self._index = [], {}
            self.keys = np.zeros(0, dtype=np.uint64)
            self.st = JobsState.initial(np.zeros(0))
            return
        recs = records if records is not None else [None] * len(jobs)
        catalog = self.learned.catalog(self.jobs, recs)
        workload = Workload(
            name=self.source,
            jobs=tuple(
                JobSpec(
                    name=j.name,
                    application=self.learned.app_name(j),
                    submit_time_s=j.submit_s,
                    min_gpus=j.min_gpus,
                    max_gpus=self.learned.max_gpus(j, r),
                    restart_penalty_s=j.restart_penalty_s,
                    batch_size=j.batch_size,
                )
                for j, r in zip(self.jobs, recs, strict=True)
            ),
        )
        # no horizon: a real run lasts as long as its jobs (the simulator's --horizon is not an option here)
        self.model = ClusterModel(workload, runtime_cluster(self.opts), catalog, PhysicsOptions(horizon_s=MAX_TIME_S))
        self.names = [j.name for j in self.jobs]
        self._index = {n: i for i, n in enumerate(self.names)}
        self.keys = np.array([rng.job_key(n) for n in self.names], dtype=np.uint64)
        self.failure_stream = FailureStream(self.opts.seed, self.keys, self.opts.round_s)
        previous = self.st
        self.st = JobsState.initial(np.array([j.submit_s for j in self.jobs], dtype=np.float64))
        if previous is not None:
            self.st.policy_state = previous.policy_state  # keyed by job name (reindexed by the policy)
            self.st.solver_prices = previous.solver_prices  # per GPU type: the same cluster
        self.learned.built(self.jobs, recs)

    # ------------------------------------------------------------------ paths
    def job_dir(self, job: RuntimeJob) -> Path:
        """``RUN_DIR/jobs/NAME``: the only place the job's workers write."""
        return self.run_dir / "jobs" / job.name

    def _fingerprint(self) -> str:
        """What a run directory's run is: a resumed run must be the same one."""
        o = self.opts
        if self.serving:  # the job set is what was submitted (in the store), not part of the identity
            fields: dict[str, Any] = {"policy": self.policy.name, "seed": o.seed, "devices": o.devices}
            fields["kind"] = o.device_kind
            if o.nodes:  # which node is which is part of every placement recorded
                fields["nodes"] = [[n.name, n.slots] for n in o.nodes]
            return json.dumps({"serve": 1, **fields, "profile_type": o.profile_type}, sort_keys=True)
        ident: tuple[Any, ...] = (self.jobs, self.policy.name, o.seed, o.devices, o.profile_type)
        if o.nodes:
            ident += (tuple((n.name, n.slots) for n in o.nodes),)
        text = repr(ident)
        return hashlib.sha256(text.encode()).hexdigest()

    # ------------------------------------------------------------------ run
    def run(self, progress: Progress | None = None) -> RunResult:
        """Run until every job is done (or the time limit); returns the same metrics as ``oak simulate``."""
        wall0 = time.perf_counter()
        start_wall = self.begin()
        last = self.clock.time() - start_wall
        self._due = True
        # not reset here: a stop asked for before the loop starts (another thread, a signal) must still stop it
        previous = self._install_stop_handlers()
        try:
            while not self.interrupted:
                now = self.clock.time() - start_wall
                dt = max(0.0, now - last)
                last = now
                self.sync(now, dt)
                if self._ended(now):
                    break
                self.step_next(now)
                if progress is not None:
                    progress(now, sum(r.done for r in self.records), len(self.records))
                self.clock.sleep(self.opts.tick_s)
        finally:
            records = self.records
            self._stop_all(records, self.clock.time() - start_wall)
            self.executor.shutdown()
            self.store.save(records, {"last_tick_s": self.clock.time() - start_wall})
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        end = self.clock.time() - start_wall
        return self._result(self.records, end, time.perf_counter() - wall0)

    def begin(self) -> float:
        """Open the run directory — fresh records, or the committed ones of an earlier scheduler of this run, its
        running jobs adopted — and return the run clock's origin (a time of ``clock``). ``run`` starts with it;
        a test drives ``sync`` and ``step_next`` after it by hand."""
        records, start_wall = self._open()
        self._start_wall = start_wall
        self.records = records
        if self._restop:  # adopted while a stop of the dead scheduler's was under way: ask it again, and wait
            self.request_stops(self._restop, records, self.clock.time() - start_wall)
            self._restop = []
        if any(j.is_command for j in self.jobs):  # their learned models, from the committed step times
            self._build(list(self.jobs), records)
        return start_wall

    # ------------------------------------------------------------------ the tick: sync, then step to the next state
    def sync(self, now: float, dt: float) -> None:
        """The tick's first half (Ray autoscaler v2's reconciler: sync from the world): take in what happened
        since the last tick, ``dt`` seconds ago — requests (``oak serve``), the ranks' reports and exits, stops
        that ended, injected failures, arrivals, back-offs that ended — into the records, and note whether a
        round is due (``step_next`` takes it)."""
        if self.inbox is not None and self.inbox.take(self, now):
            self._due = True
        records = self.records
        changed = self._observe(records, now, dt)
        changed |= self._advance_stops(records, now)
        changed |= self._inject_failures(records, now)
        changed |= self._watch_nodes(records, now)
        if changed:
            self._due = True
        for j, r in zip(self.jobs, records, strict=True):
            if not r.arrived and j.submit_s <= now:
                enter(r, JobPhase.QUEUED, now, "arrived")
                self._due = True
            if r.retry_at_s and now >= r.retry_at_s:  # a back-off ended: the job may be placed again
                r.retry_at_s = 0.0
                self._settle(r, now, "back-off over")
                self._due = True
        if math.floor(now / self.opts.round_s) != self._live.last_round_k:
            self._due = True

    def _ended(self, now: float) -> bool:
        """Every job is over (``oak run``; a service goes on), or the run's time limit has come."""
        if all(r.over for r in self.records) and not self.serving:
            return True
        return self.opts.time_limit_s is not None and now >= self.opts.time_limit_s

    def step_next(self, now: float) -> None:
        """The tick's second half (step to the next state): launch the starts a stop has released; if a round
        is due, one engine step (``oak.engine.step``) and its plan enacted; commit what changed; publish."""
        records = self.records
        if self._live.pending:
            self._launch(records, now)  # starts whose devices a stop has released
        if self._due and self.learned.changed(self.jobs, records):
            self._build(list(self.jobs), records)
        if self._due and any(r.arrived and not r.over for r in records):
            assert self.st is not None
            self._due = False  # before the round: what its enactment finds (a node lost at launch) asks for another
            self._decide(records, self.st, now)
            self._live.last_round_k = math.floor(now / self.opts.round_s)
        changing = self._changing(records)
        for r in changing:  # what no event recorded (none should be left: the suite checks it strictly)
            self._settle(r, now, "observed")
        self.store.save(changing, {"last_tick_s": now})
        if self.publisher is not None:
            self.publisher.publish(self, now)

    def _finish(self, r: JobRecord, now: float, why: str) -> None:
        """The job reached its target: done (a stop in flight for a cancel notwithstanding)."""
        r.finish_s, r.ending = now, ""
        enter(r, JobPhase.DONE, now, why)

    def _settle(self, r: JobRecord, now: float, why: str) -> None:
        """Record the job's change of phase, if its fields describe a new one, with the event's reason
        (``oak.runtime.lifecycle``)."""
        stopping = self._index.get(r.name, -1) in self._live.stopping
        enter(r, phase_of(r, stopping=stopping), now, why)

    def _changing(self, records: list[JobRecord]) -> list[JobRecord]:
        """The records a tick's commit must write: every job that has arrived and is not over, and each job
        that is over once more (the tick it ended). A job not yet arrived changes only when it is submitted
        (committed then) or arrives; one over no more — so thousands of future or finished jobs cost nothing
        per tick. A job stopping is live until it has exited."""
        stopping = {records[i].name for i in self._live.stopping}  # a cancelled job still on its way out
        ended = [r for r in records if r.over and r.name not in self._live.committed_over and r.name not in stopping]
        self._live.committed_over.update(r.name for r in ended)
        return [r for r in records if r.arrived and (not r.over or r.name in stopping)] + ended

    def _install_stop_handlers(self) -> dict[int, Any]:
        """SIGTERM/SIGINT end the run at the next tick: running jobs are stopped with a checkpoint and the
        state is committed, so ``oak run`` on the same run directory resumes it (main thread only)."""
        import threading

        if threading.current_thread() is not threading.main_thread():
            return {}

        def handler(signum: int, frame: Any) -> None:
            self.interrupted = True

        return {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}

    def _stop_all(self, records: list[JobRecord], now: float) -> None:
        """Stop every running job gracefully (checkpoint, exit) and record it as not placed."""
        running = [i for i, r in enumerate(records) if r.launched_at_s is not None]
        if not running:
            return
        for i in running:
            records[i].stop_asked_s = now
        self.store.save([records[i] for i in running])
        results = self.executor.stop([self.names[i] for i in running], self.opts.stop_timeout_s)
        for i in running:
            r = records[i]
            self._live.stopping.pop(i, None)  # every stop ended here (stop waits, then kills)
            self._release(self.jobs[i], r)
            why = f"the scheduler shut down: {results.get(self.names[i], 'stopped')}"
            if results.get(self.names[i]) == "done":
                self._finish(r, now, why)
            else:
                self._settle(r, now, why)

    def _check_state_intact(self, meta: dict[str, Any]) -> None:
        """Refuse to begin a new run in a directory whose earlier run's state is gone: its marker
        (``RUN_MARKER``, written when the run began) is there but state.sqlite holds no run — the database or
        its write-ahead log was deleted or replaced while no scheduler ran. The earlier run's ranks still
        running (found through /proc, as orphans are) are stopped with a checkpoint first."""
        marker = self.run_dir / RUN_MARKER
        if meta or not marker.is_file():
            return
        try:
            began = json.loads(marker.read_text(encoding="utf-8")).get("started", "")
        except (OSError, ValueError, AttributeError):
            began = ""
        stopped = self._stop_pids(ranks_under(self.run_dir / "jobs"))
        folders = sorted(p.name for p in (self.run_dir / "jobs").glob("*") if p.is_dir())
        raise OakInputError(
            f"{self.run_dir}: the run that began here{f' at {began}' if began else ''} left no state: state.sqlite "
            f"holds no run (the database or its write-ahead log state.sqlite-wal was deleted or replaced). "
            f"Nothing was started"
            + (f"; {len(stopped)} rank process(es) of that run were still running and were stopped" if stopped else "")
            + (
                f". Its {len(folders)} job folder(s) and their checkpoints are in {self.run_dir / 'jobs'}"
                if folders
                else ""
            )
            + f". Restore state.sqlite together with state.sqlite-wal from a backup, or move {self.run_dir} away "
            f"(or use a new --run-dir) to begin again."
        )

    def _open(self) -> tuple[list[JobRecord], float]:
        """Fresh records, or the committed ones of an interrupted run in the same directory."""
        meta = self.store.meta()
        self._check_state_intact(meta)
        self.check_same_run(meta)
        if meta:
            saved = self.store.jobs()
            self._start_wall = float(meta["start_wall"])
            tick = meta.get("last_tick_s")
            self._last_tick_s = float(tick) if isinstance(tick, (int, float)) else None
            if self.serving:  # the jobs submitted so far, in the order they were
                submitted = [job_from_dict(d) for d in self.store.submissions()]
                self._build(submitted, [saved.get(j.name, JobRecord(j.name)) for j in submitted])
            records = [saved.get(n, JobRecord(n)) for n in self.names]
            self._resume_running(records)
            for r in records:
                if self.opts.retry_failed and r.failed:
                    r.gave_up, r.fail_streak, r.retry_at_s = None, 0, 0.0
                    enter(r, JobPhase.QUEUED, self.clock.time() - self._start_wall, "--retry-failed")
            if self.st is not None and isinstance(self.policy, PolicyBase) and "policy_state" in meta:
                # the state the last committed round left (the waiting guard's ledger, each job's stint)
                self.st.policy_state = self.policy.state_from_json(meta["policy_state"])
            self.store.save(records, {"resumed": int(meta.get("resumed", 0)) + 1})
            return records, float(meta["start_wall"])
        records = [JobRecord(n) for n in self.names]
        start = self.clock.time()
        self.store.save(
            records,
            {
                "fingerprint": self._fingerprint(),
                "start_wall": start,
                "policy": self.policy.name,
                "run": self.describe(),
            },
        )
        self._mark_run(start)
        return records, start

    def describe(self) -> dict[str, Any]:
        """What a simulator needs of this run's settings (``oak export-trace``): policy, seed, round, injected
        failure rate, devices and nodes, and the jobs file's jobs (a live run's are its submissions)."""
        o = self.opts
        d: dict[str, Any] = {
            "policy": self.policy.name,
            "seed": int(o.seed),
            "round_s": o.round_s,
            "failure_rate": o.failure_rate,
            "devices": o.devices,
            "device_kind": o.device_kind,
            "profile_type": o.profile_type,
            "nodes": [[n.name, n.slots] for n in o.nodes],
            "serving": self.serving,
        }
        if not self.serving:
            d["jobs"] = [job_to_dict(j) for j in self.jobs]
        return d

    def check_same_run(self, meta: dict[str, Any] | None = None) -> None:
        """OakInputError if the run directory holds another run than this one (other jobs, settings, or a
        service's run where this is an ``oak run``, or the reverse); ``oak serve`` asks before it listens."""
        meta = self.store.meta() if meta is None else meta
        if meta and meta.get("fingerprint") != self._fingerprint():
            raise OakInputError(self._other_run(str(meta.get("fingerprint", "")), meta.get("run")))
        was = meta.get("run") if meta and not self.serving else None
        rate = was.get("failure_rate") if isinstance(was, dict) else None
        if isinstance(rate, int | float) and float(rate) != self.opts.failure_rate:  # results would carry its label
            raise OakInputError(
                f"{self.run_dir}: its run was begun at --failure-rate {float(rate):g}, not "
                f"{self.opts.failure_rate:g}; resume it with the same, or use a new --run-dir"
            )

    def _other_run(self, was: str, described: Any = None) -> str:
        """Why a run directory's run is not this one (``was``: its fingerprint; a service's is JSON, an
        ``oak run``'s a hash; ``described``: its recorded settings, ``describe()``, where it has them)."""
        was_service = was.startswith("{")
        if not self.serving and was_service:
            return f"{self.run_dir}: holds the run of an oak serve service, not of a jobs file; use a new --run-dir"
        if not self.serving:
            differ = self._differences(described) if isinstance(described, dict) else []
            what = "; ".join(differ) if differ else "other jobs, policy, seed or devices"
            return f"{self.run_dir}: holds a run of {what}; use a new --run-dir"
        if not was_service:
            return f"{self.run_dir}: holds an oak run of a jobs file, not a service's run; use a new --run-dir"
        return (
            f"{self.run_dir}: its service was started with other settings ({was}); "
            f"restart it with the same --policy, --seed and devices, or use a new --run-dir"
        )

    def _differences(self, was: dict[str, Any]) -> list[str]:
        """How the recorded settings ``was`` (``describe()`` of the run that began here) differ from this run's."""
        now = self.describe()
        out = [
            f"{label} {was[key]} (now {now[key]})"
            for key, label in (
                ("policy", "--policy"),
                ("seed", "--seed"),
                ("devices", "devices"),
                ("device_kind", "devices of kind"),
                ("profile_type", "--profile-type"),
            )
            if key in was and was[key] != now[key]
        ]
        if "jobs" in was and was["jobs"] != json.loads(json.dumps(now.get("jobs"))):  # as it was stored
            out.append("other jobs (the jobs file changed)")
        return out

    def _mark_run(self, start: float) -> None:
        """Write ``RUN_MARKER``: this directory holds a run, whatever happens to its database."""
        from oak.io_util import write_atomic

        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(start))
        write_atomic(self.run_dir / RUN_MARKER, json.dumps({"started": stamp, "start_wall": start}) + "\n", mode=0o600)

    def _item(self, job: RuntimeJob, devices: tuple[int, ...]) -> Launch:
        """One incarnation of ``job`` on ``devices``, each rank's node named when the run owns a cluster's nodes."""
        hosts = hosts_of(self.opts.nodes, devices) if self.opts.nodes else ()
        return Launch(job, self.job_dir(job), devices, self.opts.seed, hosts)

    def _resume_running(self, records: list[JobRecord]) -> None:
        """After a scheduler restart: adopt every job whose recorded incarnation still runs whole (all its
        ranks alive and its own, and a backend that can follow it), so that the restart costs it nothing; then
        reap what is left of the others (``_reap_orphans``)."""
        t = self.clock.time() - self._start_wall
        for job, r in zip(self.jobs, records, strict=True):
            if r.launched_at_s is None or r.over or not r.pids:
                continue
            item = self._item(job, tuple(r.devices))
            if self.executor.adopt(item, list(r.pids)):
                r.adopted += 1
                r.history.append([round(t, 3), r.phase, "adopted by a restarted scheduler"])
                self._live.heard[job.name] = (None, self.clock.time())  # its stall clock starts again here
                if r.stop_asked_s is not None:  # the dead scheduler was stopping it: so does this one
                    self._restop.append(self.names.index(job.name))
        self._reap_orphans(records)

    def _reap_orphans(self, records: list[JobRecord]) -> None:
        """After a scheduler crash: stop the rank processes of this run that no adopted job owns — SIGTERM to all
        at once, so that they checkpoint and exit as at any stop, SIGKILL to what is left after one stop timeout
        — and mark their jobs unplaced. A pid is only signalled if it is its job's: a packaged worker of its
        directory (``/proc/PID/cmdline``) or a command with its ``OAK_JOB_DIR`` (``/proc/PID/environ``). A job
        whose incarnation ended while no scheduler ran is done if it finished (the worker's ``done`` marker, or
        every rank of a command exited 0)."""
        followed = {n for n in self.names if self.executor.state(n) is not None}
        kept = {pid for r in records if r.name in followed for pid in r.pids}
        ours = [
            pid
            for r in records
            if r.name not in followed
            for pid in r.pids
            if is_rank_of(pid, self.run_dir / "jobs" / r.name)
        ]
        # ranks of this run that no committed record names (launched after the last commit); an adopted
        # command's rank runs under a wrapper that is its recorded pid, which keeps its whole group
        ours += [pid for pid in ranks_under(self.run_dir / "jobs") if pid not in ours and not self._in_kept(pid, kept)]
        # how each incarnation ended on its own, read before the stops below (a stopped command exits 0 too)
        finished = {
            r.name: all(read_exit_status(self.job_dir(job), rank, pid) == 0 for rank, pid in enumerate(r.pids))
            for job, r in zip(self.jobs, records, strict=True)
            if job.is_command and r.pids and r.name not in followed and r.stop_asked_s is None
        }
        self._stop_pids(ours)
        for job, r in zip(self.jobs, records, strict=True):
            if r.pids and r.name not in followed:
                job_dir = self.job_dir(job)
                done = finished.get(r.name, False) if job.is_command else (job_dir / "done").is_file()
                finished_now = done and not r.over
                if finished_now:  # finished while no scheduler ran: its last status has its final step
                    if r.finish_s is None:
                        self._account_unseen_end(job, r)
                    status = read_status(job_dir) or {}
                    with contextlib.suppress(TypeError, ValueError):
                        r.step = max(r.step, int(status.get("step", 0)))
                    if job.is_command:
                        r.step = max(r.step, self._target(job, r))
                r.unplace()
                t = self.clock.time() - self._start_wall
                if finished_now:
                    enter(r, JobPhase.DONE, t, "finished while no scheduler ran")
                else:
                    self._settle(r, t, "stopped by a restarted scheduler")

    def _account_unseen_end(self, job: RuntimeJob, r: JobRecord) -> None:
        """A job that finished while no scheduler ran: its finish time is when its incarnation ended (the
        newest of its ranks' exit files, or the packaged worker's ``done`` marker), within [launch, now] on
        the run clock; the time from the last committed tick to then is accounted as the ticks would have
        (progress if it was past its restore, else restore time)."""
        now = self.clock.time() - self._start_wall
        launched = r.launched_at_s if r.launched_at_s is not None else 0.0
        job_dir = self.job_dir(job)
        marks = [exit_file(job_dir, rank) for rank in range(len(r.pids))] if job.is_command else [job_dir / "done"]
        ended = [m.stat().st_mtime - self._start_wall for m in marks if m.is_file()]
        r.finish_s = min(max(max(ended), launched), now) if ended else launched
        last = self._last_tick_s
        gap = r.finish_s - max(launched, last) if last is not None else 0.0
        if gap > 0:
            r.gpu_s += len(r.devices) * gap
            if r.ready:
                r.t_progress_s += gap
            else:
                r.t_ckpt_s += gap
                r.t_queue_s += gap
                r.gpu_s_lost += len(r.devices) * gap

    @staticmethod
    def _in_kept(pid: int, kept: set[int]) -> bool:
        """Whether ``pid`` belongs to the session of one of the ``kept`` (adopted) rank processes."""
        try:
            return os.getsid(pid) in kept
        except OSError:
            return False

    def _stop_pids(self, ours: list[int]) -> list[int]:
        """SIGTERM the rank processes ``ours`` (each leads its own session) at once, SIGKILL what is left after
        one stop timeout; returns the ones that were running."""
        running = [pid for pid in ours if not gone(pid)]
        for sig, wait_s in ((signal.SIGTERM, self.opts.stop_timeout_s), (signal.SIGKILL, 10.0)):
            live = [pid for pid in ours if not gone(pid)]
            for pid in live:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, sig)  # each rank leads its own session (launch.spawn_rank)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait_s
            for pid in live:
                wait_gone(pid, max(0.0, deadline - time.monotonic()))
        return running

    # ------------------------------------------------------------------ measure
    def _observe(self, records: list[JobRecord], now: float, dt: float) -> bool:
        """Account dt to each job's counters and poll its workers; True if a job finished or failed."""
        changed = False
        for i, (job, r) in enumerate(zip(self.jobs, records, strict=True)):
            stopping = i in self._live.stopping
            if (r.over and not stopping) or not r.arrived:
                continue
            g = len(r.devices)
            if r.launched_at_s is None:
                r.t_queue_s += dt
                continue
            r.gpu_s += g * dt
            status = self.executor.status(job.name)
            pids = self.executor.pids(job.name)
            reported: float | None = None
            # a command's status file was removed at launch: any status is this incarnation's (oak.job.report)
            ours = status is not None and (job.is_command or (bool(pids) and status.get("pid") == pids[0]))
            if status is not None and ours and job.is_command:
                self._observe_command(job, r, status)
            elif job.is_command and not r.reported and not r.ready:
                # a command that has never reported: restoring until SILENT_AFTER_S of its first incarnation
                # without a report, after which it is a silent job, running from its launch on
                waited = now - (r.launched_at_s if r.launched_at_s is not None else now)
                if r.silent or waited >= SILENT_AFTER_S:
                    r.silent = r.ready = True
            elif status is not None and ours:
                step = int(status.get("step", r.step))
                r.corrupt_skipped = max(r.corrupt_skipped, int(status.get("corrupt_skipped", 0) or 0))
                r.lost_steps = max(r.lost_steps, int(status.get("lost_steps", 0) or 0))
                if not r.ready and (step > r.launch_step or bool(status.get("done"))):
                    r.ready = True
                r.step = max(r.step, step) if r.ready else r.step
                with contextlib.suppress(TypeError, ValueError, OverflowError, ZeroDivisionError):
                    saves = int(status.get("n_ckpt_saves") or 0)
                    if saves > 0:  # its mean checkpoint write time (the worker's counters span its incarnations)
                        r.ckpt_write_s = float(status.get("t_ckpt_save_s") or 0.0) / saves
                with contextlib.suppress(TypeError, ValueError, OverflowError):  # the packaged worker's timing
                    self._record_step_time(
                        job,
                        r,
                        int(status.get("steps_timed") or 0),
                        float(status.get("step_time_s") or 0.0),
                        float(status.get("updated_at") or 0.0),
                        step,
                    )
            if status is not None and ours:
                with contextlib.suppress(TypeError, ValueError):
                    reported = float(status.get("updated_at"))  # type: ignore[arg-type]
            if reported is not None and self._live.heard.get(job.name, (None, 0.0))[0] != reported:
                # a new status, timed on this scheduler's clock (the worker's host clock may differ: Ray nodes)
                self._live.heard[job.name] = (reported, self.clock.time())
            if r.ready and not stopping:
                counted = r.t_ckpt_s - r.launch_ckpt_s  # its ticks before this one: the tick that saw it ran
                self._settle(r, now, f"past its resume step ({r.launch_step}) after {counted:.3f} s restoring")
                r.t_progress_s += dt
                target = self._target(job, r)
                if r.last_step_s is None and target > 0 and r.step >= target:
                    r.last_step_s = now  # its steps are done; it is writing its last checkpoint and exiting
            else:  # restoring, or checkpointing to stop: restore time (T_ckpt), as in the simulator
                r.t_ckpt_s += dt
                r.t_queue_s += dt
                r.gpu_s_lost += g * dt
            if stopping:
                continue  # its exit is the stop's outcome (_advance_stops)
            state = self.executor.state(job.name)
            if state == "running" and (job.is_command and not r.reported):
                pass  # no status to go stale: a command that does not report is never a stall
            elif state == "running":
                last, since = self._live.heard.get(job.name, (None, self.clock.time()))
                silent = self.clock.time() - since
                if silent > self.opts.stall_s:
                    what = "no status since its launch" if last is None else "its status stopped updating"
                    self._fail(job, r, now, f"stalled: {what} for {silent:,.0f} s (> {self.opts.stall_s:g} s)", g)
                    changed = True
            elif state == "done":
                self.executor.kill(job.name)
                self._live.heard.pop(job.name, None)
                r.step = max(r.step, self._target(job, r)) if job.is_command else job.target_steps
                r.unplace()
                r.fail_streak = 0
                self._finish(r, now, f"finished at step {r.step}")
                changed = True
            elif state == "stopped":
                self.executor.kill(job.name)
                self._release(job, r)
                self._settle(r, now, "stopped unasked (exited after a checkpoint)")
                changed = True
            elif state == "failed":
                codes = self.executor.exit_codes(job.name)
                own = [c for c in codes if c is not None and c != 0 and c != -signal.SIGKILL]
                why = f"rank exit statuses {codes}" + (f" (first failure: {own[0]})" if own else "")
                self._fail(job, r, now, why, g, usage_error=EXIT_INPUT in codes)
                changed = True
        return changed

    def _observe_command(self, job: RuntimeJob, r: JobRecord, status: dict[str, Any]) -> None:
        """A command job's report (``oak.job.report``): its step (the first report of an incarnation is the
        step after the one it resumed from: steps it had reported beyond that are counted as lost, and a resume
        point beyond the previous one is durable progress, which ends a run of failures without progress), its
        total and batch, and its measured step time at this allocation (for the learned goodput model)."""
        try:
            step = int(status.get("step", 0))
            total = int(status.get("total_steps") or 0)
            batch = int(status.get("batch_size") or 0)
            steps_timed = int(status.get("steps_timed") or 0)
            step_time = float(status.get("step_time_s") or 0.0)
            updated = float(status.get("updated_at") or 0.0)
        except (TypeError, ValueError, OverflowError):
            return
        if step < 0:
            return
        if total > 0:
            r.total_steps = total
        if batch > 0:
            r.batch_size = batch
        with contextlib.suppress(TypeError, ValueError, OverflowError):
            ckpt_s = float(status.get("checkpoint_s", -1.0))
            if 0 <= ckpt_s <= MAX_STEP_S:
                r.ckpt_write_s = ckpt_s
        r.reported = True
        if self._live.first_report.pop(job.name, False):
            resume = max(0, step - 1)
            r.lost_steps += max(0, r.step - resume)
            if resume > r.resume_step:
                r.fail_streak = 0
            r.resume_step = resume
            r.launch_step = resume
            r.step = step
            r.ready = True
        else:
            r.ready = True
            r.step = max(r.step, step)
        self._record_step_time(job, r, steps_timed, step_time, updated, step)

    def _record_step_time(
        self, job: RuntimeJob, r: JobRecord, steps_timed: int, step_time: float, updated: float, step: int
    ) -> None:
        """Add a report's measured step time at the job's allocation to its step-time log: a command job's
        learned goodput model, and for every job what ``oak export-trace`` gives the simulator. A report times
        the steps since the one before it (both the packaged worker and ``oak.job`` write contiguous windows);
        where this scheduler missed reports in between — it reads only the newest, and a machine that stalls
        stalls it too, so the slow windows are the ones it misses — the sample spans the steps and the time
        (``updated_at``, the job's clock) since the last report it read, so that no stretch goes unmeasured."""
        last = self._live.timed.get(job.name)
        if last is not None and updated == last[0]:
            return  # read before
        self._live.timed[job.name] = (updated, step)
        ok = 0 < steps_timed <= MAX_TIMED_STEPS and math.isfinite(step_time) and 0 < step_time <= MAX_STEP_S
        if ok and last is not None and step - last[1] > steps_timed and math.isfinite(updated) and updated > last[0]:
            steps_timed, step_time = step - last[1], (updated - last[0]) / (step - last[1])  # reports it missed
            ok = steps_timed <= MAX_TIMED_STEPS and step_time <= MAX_STEP_S
        if ok:
            world = max(1, len(r.devices))
            bsz = (r.batch_size or job.batch_size) / world
            with contextlib.suppress(ValueError):  # a sample the fitter refuses is dropped, never fatal
                self.learned.record(
                    r, nodes=1, replicas=world, local_bsz=bsz, elapsed_s=step_time * steps_timed, steps=steps_timed
                )

    def _launch_failed(self, job: RuntimeJob, r: JobRecord, now: float, exc: BaseException) -> None:
        """A launch the backend refused: the job's own fault (its command cannot start: OakInputError) fails
        it for good; the backend's (sbatch failed, SLURM did not start it in time, ...) counts as a failure
        without progress, with the usual back-off and retry limit. The run goes on either way."""
        with contextlib.suppress(Exception):
            self.executor.kill(job.name)
        r.unplace()
        why = f"launch failed: {exc}"
        self._count_failure(r, now, why, progressed=False, fatal=isinstance(exc, OakInputError))
        self.store.log_failure(now, "crash", job=job.name, detail=why)
        self.failure_notes[job.name] = r.gave_up or why
        self._settle(r, now, r.gave_up or why)

    def _count_failure(
        self, r: JobRecord, now: float, why: str, *, progressed: bool, fatal: bool, advanced: bool = False
    ) -> None:
        """Count a failure of the job's own: ``fatal`` (its input is bad) gives up on it at once;
        ``max_retries`` in a row without progress give up on it; otherwise it backs off before its next try —
        unless it ``advanced`` (a command job that reported steps beyond where it resumed: whether they were
        checkpointed shows only when it resumes, so the failure still counts towards the limit, but a job that
        was making progress is placed again at once instead of leaving its devices idle)."""
        r.failures += 1
        r.fail_streak = 0 if progressed else r.fail_streak + 1
        if fatal:
            r.gave_up = why
        elif r.fail_streak >= self.opts.max_retries:
            r.gave_up = f"{r.fail_streak} failures in a row without progress; last: {why}"
        elif r.fail_streak and not advanced:
            r.retry_at_s = now + min(self.opts.retry_backoff_s * 2 ** (r.fail_streak - 1), MAX_BACKOFF_S)
        if r.gave_up is not None:
            enter(r, JobPhase.FAILED, now, r.gave_up)

    def _target(self, job: RuntimeJob, r: JobRecord) -> int:
        """Steps to completion: the jobs file's, else what the job reported (0: unknown)."""
        return job.target_steps or r.total_steps

    def _fail(
        self, job: RuntimeJob, r: JobRecord, now: float, why: str, ranks: int, *, usage_error: bool = False
    ) -> None:
        """A failure of the job's own (not an injected one): kill what is left of it, count it, and give up on
        it after a usage error or ``max_retries`` failures in a row without progress; else back off."""
        self.executor.kill(job.name)
        stuck = self.executor.unreaped(job.name)
        advanced = job.is_command and r.reported and r.step > r.launch_step
        progressed = self._release(job, r)
        tail = log_tail(self.job_dir(job), max(1, ranks))
        if stuck:
            why += f"; rank process(es) {stuck} not reaped after SIGKILL (stuck in the kernel or GPU driver)"
        if usage_error:
            why = f"its workers reported an input error ({why})"
        self._count_failure(r, now, why, progressed=progressed, fatal=usage_error, advanced=advanced)
        self.store.log_failure(now, "stall" if why.startswith("stalled") else "crash", job=job.name, detail=why)
        self.failure_notes[job.name] = (r.gave_up or why) + (f"\n{tail}" if tail else "")
        self._settle(r, now, r.gave_up or why)

    def _release(self, job: RuntimeJob, r: JobRecord) -> bool:
        """The job holds nothing now; its step is its newest checkpoint's. Returns whether this incarnation
        made durable progress (a checkpoint beyond the step it resumed from), which ends a run of failures
        without progress however the incarnation ended (own failure, injected kill, stop)."""
        was_placed = r.launched_at_s is not None
        r.unplace()
        self._live.heard.pop(job.name, None)
        self._read_step(job, r)
        # a command job's durable progress shows only where its next incarnation resumes (_observe_command)
        progressed = was_placed and r.step > r.launch_step and not job.is_command
        if progressed:
            r.fail_streak = 0
        return progressed

    def _read_step(self, job: RuntimeJob, r: JobRecord) -> None:
        """Set the job's step to its newest checkpoint's (a file with its checksum sidecar): what a restart
        resumes from. The worker verifies the checksum; a corrupt newest file makes it resume earlier, which
        its first status report then shows. A command job's checkpoints are its own: its step stays the last
        reported one until its next incarnation reports where it resumed."""
        if job.is_command:
            return
        r.step = min(newest_checkpoint_step(self.job_dir(job)), job.target_steps)

    def _inject_failures(self, records: list[JobRecord], now: float) -> bool:
        if self.failure_model.rate <= 0 or not self.jobs:
            return False
        k = math.floor(now / self.opts.round_s)
        u, at = self.failure_stream.interval(k)
        held = np.array([len(r.devices) if r.launched_at_s is not None else 0 for r in records], dtype=np.int64)
        p = self.failure_model.probability(held)
        hit = False
        for i, (job, r) in enumerate(zip(self.jobs, records, strict=True)):
            if held[i] == 0 or u[i] >= (p if isinstance(p, float) else p[i]) or now < at[i]:
                continue
            if i in self._live.stopping:  # already on its way out
                continue
            if (i, k) in self._live.fired:
                continue
            self._live.fired.add((i, k))
            self.executor.kill(job.name)
            self._release(job, r)
            r.failures += 1
            r.injected += 1
            self.store.log_failure(now, "injected", job=job.name, detail="injected failure (SIGKILL)")
            self._settle(r, now, "injected failure (SIGKILL)")
            hit = True
        return hit

    def _watch_nodes(self, records: list[JobRecord], now: float) -> bool:
        """A run over a cluster's nodes whose backend lists them (``NodeListing``): look at the nodes at most
        every ``NODE_POLL_S`` s. A node that went down (or left the listing) holds no devices from the next
        round on and counts one observed failure for the failure-aware placement; every job with a rank on
        it is killed and failed there, as an injected failure is (a lost node is not the job's fault: no
        back-off). A node that is up again takes jobs again. True if a node changed state."""
        if not self.opts.nodes or not isinstance(self.executor, NodeListing):
            return False
        t = self.clock.time()
        if t - self._nodes_seen_at < NODE_POLL_S:
            return False
        self._nodes_seen_at = t
        try:
            listing = {n.name: n for n in self.executor.nodes(fresh=True)}
        except (RuntimeError, OSError) as exc:  # the cluster does not answer now: the next look asks again
            self._event({"event": "nodes-unknown", "t": round(now, 3), "error": str(exc)[:300]})
            return False
        changed = False
        for k, node in enumerate(self.opts.nodes):
            seen = listing.get(node.name)
            down = seen is None or not seen.up or t < self._node_hold[k]
            if down == bool(self.node_down[k]):
                continue
            changed = True
            if down:
                self._node_down(
                    k, records, now, "the cluster lists it down" if seen is not None else "no longer listed"
                )
            else:
                self.node_down[k] = False
                self._event({"event": "node-up", "t": round(now, 3), "node": node.name})
                self.store.log_failure(now, "node-back", node=node.name)
        return changed

    def _node_down(self, k: int, records: list[JobRecord], now: float, why: str) -> None:
        """Node ``k`` is down (``why``): it holds no devices from the next round on, counts one observed failure,
        and every job with a rank on it is killed and failed there, as an injected failure is."""
        node = self.opts.nodes[k]
        self.node_down[k] = True
        self.node_failures[k] += 1
        self._event({"event": "node-down", "t": round(now, 3), "node": node.name, "why": why})
        self.store.log_failure(now, "node-loss", node=node.name, detail=why)
        for i, (job, r) in enumerate(zip(self.jobs, records, strict=True)):
            if r.launched_at_s is None or i in self._live.stopping:
                continue
            if not any(h.name == node.name for h in hosts_of(self.opts.nodes, r.devices)):
                continue
            self.executor.kill(job.name)
            self._release(job, r)
            r.failures += 1
            self.failure_notes[job.name] = f"node {node.name} went down under it ({why})"
            self._settle(r, now, f"node {node.name} went down ({why}; SIGKILL to what is left)")

    def _node_lost(self, job: RuntimeJob, r: JobRecord, now: float, exc: NodeLost) -> None:
        """A launch found a node it was planned on unreachable before the cluster noticed: the node is held
        down for ``NODE_HOLD_S`` (the cluster's listing decides after that) and the next round plans again; the
        job waits, no failure of its own."""
        with contextlib.suppress(Exception):
            self.executor.kill(job.name)
        r.unplace()
        self._due = True
        k = next((k for k, n in enumerate(self.opts.nodes) if n.name == exc.node), None)
        if k is not None:
            self._node_hold[k] = self.clock.time() + NODE_HOLD_S
            if not self.node_down[k]:
                self._node_down(k, self.records, now, f"a launch found it unreachable: {exc}")
        self._settle(r, now, f"launch deferred: {exc}")

    # ------------------------------------------------------------------ decide
    def _fill_state(self, records: list[JobRecord], st: JobsState) -> None:
        total = self.model.total
        st.pinned = np.zeros(len(records), dtype=bool)
        st.work_known = np.array([self.learned.length_known(j, r) for j, r in zip(self.jobs, records, strict=True)])
        for i, (job, r) in enumerate(zip(self.jobs, records, strict=True)):
            st.arrived[i] = r.arrived
            st.pinned[i] = i in self._live.stopping  # holds its devices until it exits, even if cancelled
            st.done[i] = r.over and not st.pinned[i]
            st.progress[i] = self.learned.fraction(job, r) * total[i]
            st.t_progress[i], st.t_ckpt[i], st.t_queue[i] = r.t_progress_s, r.t_ckpt_s, r.t_queue_s
            st.restarts[i], st.failures[i], st.started[i] = r.restarts, r.failures, r.started
            st.gpu_s[i], st.gpu_lost[i] = r.gpu_s, r.gpu_s_lost
            st.config[i], st.shape[i] = r.config, r.shape
            st.gpus[i] = tuple(r.devices)
            st.restore_left[i] = 1.0 if (r.launched_at_s is not None and not r.ready) else 0.0
        st.node_down = self.node_down.copy()
        st.node_failures = self.node_failures.copy()

    def checkpoint_advice(self, job: RuntimeJob, r: JobRecord, devices: tuple[int, ...]) -> tuple[float, int | None]:
        """The checkpoint interval to advise ``job`` on ``devices`` (s) and, once its step time there is measured, in
        steps: ``advised_checkpoint_interval`` — Young/Daly's √(2·C/rate), with the end of the run in view once its
        steps left and step time are known (where no checkpoint pays before the end: its running time left, so the
        next one falls at about its end). C: its measured checkpoint write time, else its application's
        (``oak.catalog.checkpoint``). rate (per s): the injected failure rate (λ per round, known to the
        scheduler) plus its other failures as observed — (failures + 1) over its time on devices + the prior's
        mean time between failures, ``NODE_RATE_PRIOR_S`` per node it spans: the prior is worth one failure."""
        c = r.ckpt_write_s if r.ckpt_write_s > 0 else checkpoint_write_s(job.application or "")
        nodes = len({h.name for h in hosts_of(self.opts.nodes, devices)}) if self.opts.nodes else 1
        own = max(r.failures - r.injected, 0)
        rate = self.opts.failure_rate / self.opts.round_s
        rate += (own + 1.0) / (r.t_progress_s + r.t_ckpt_s + 1.0 / (max(nodes, 1) * NODE_RATE_PRIOR_S))
        world = max(1, len(devices))
        times = [s.step_time_s for s in self.learned.samples(r) if s.replicas == world]
        step_s = sum(times) / len(times) if times else None
        target = self._target(job, r)
        left = max(target - r.step, 0) * step_s if (step_s is not None and target > 0) else math.inf
        interval = advised_checkpoint_interval(max(c, 1e-3), rate, left)
        if not math.isfinite(interval):  # no checkpoint pays before the end: the next one at about the end
            interval = max(left, math.sqrt(2.0 * max(c, 1e-3) / rate))
        steps = max(1, round(interval / step_s)) if step_s is not None else None
        return interval, steps

    def _advise(self, job: RuntimeJob, r: JobRecord, devices: tuple[int, ...], *, force: bool = False) -> None:
        """Write ``job``'s checkpoint advice (``oak.job.ADVICE_FILE``) when it is new or moved by more than a
        fifth; ``oak.job.checkpoint_interval`` reads it, a launch passes it on (``OAK_CHECKPOINT_INTERVAL_S``, a
        packaged worker's ``ckpt_every: advised``)."""
        interval, steps = self.checkpoint_advice(job, r, devices)
        if not force and r.advice_s > 0 and abs(interval / r.advice_s - 1.0) <= ADVICE_CHANGE:
            return
        from oak.io_util import write_atomic

        doc = {"checkpoint_interval_s": round(interval, 3), "ckpt_every": steps}
        try:
            private_folders(self.job_dir(job))
            write_atomic(self.job_dir(job) / ADVICE_FILE, json.dumps(doc) + "\n", mode=0o600)
        except OSError:
            return  # the job's folder is not writable: its launch reports that
        r.advice_s = interval

    def _decide(self, records: list[JobRecord], st: JobsState, now: float) -> None:
        for job, r in zip(self.jobs, records, strict=True):  # advice follows what is learned while jobs run
            if r.launched_at_s is not None and not r.over and r.devices:
                self._advise(job, r, tuple(r.devices))
        self._fill_state(records, st)
        waiting_out = np.array([r.retry_at_s > 0 for r in records], dtype=bool)  # backing off: not placed
        active = np.flatnonzero((st.arrived & ~st.done & ~waiting_out) | st.pinned)
        try:
            plan = step(self.model, st, now, active, self.policy)
        except Exception as exc:
            if not self.serving:
                raise
            # a live run outlives a policy (a user's plugin) that raises: nothing was stopped or started, every
            # job keeps what it holds, and the next round asks the policy again
            what = exc.what if isinstance(exc, PolicyError) else None  # a user's decide: without the round's time
            raised = what[:400] if what else f"raised {type(exc).__name__}: {str(exc)[:300]}"
            msg = f"policy {self.policy.name!r} {raised}"
            if msg != self.policy_error:
                print(f"oak serve: {msg}; jobs keep their devices, the next round asks again", file=sys.stderr)
            self.policy_error = msg
            self._event({"event": "policy-error", "t": round(now, 3), "error": msg})
            return
        self.policy_error = None
        ms = plan.decision_ms
        self.decision_ms.append(ms)
        st.policy_state = plan.allocation.state
        st.solver_prices = plan.allocation.prices
        try:
            kinds = {t: self.opts.device_kind for t in plan.snapshot.gpu_types}  # the profile type scores them
            reasons: RoundReasons | None = round_reasons(
                self.model,
                st,
                active,
                self.policy,
                plan.snapshot,
                plan.allocation,
                plan.placed,
                declared_max=np.array([self.jobs[i].max_gpus for i in active.tolist()], dtype=np.int64),
                unit="GPU" if self.opts.device_kind == "gpu" else "device",
                type_names=kinds,
            )
        except Exception as exc:  # a plug-in's notes that raise cost the reasons, never the round
            if not self.serving:
                raise
            print(f"oak serve: the round's reasons failed ({type(exc).__name__}: {exc})", file=sys.stderr)
            reasons = None
        try:
            self._enact(plan, active, records, now, reasons)
        except Exception as exc:
            if not self.serving:
                raise
            # a live run outlives a backend that fails a round (a SLURM command, a Ray call): what was done is
            # committed, the rest is the next round's to decide again
            msg = f"the round was not enacted: {type(exc).__name__}: {str(exc)[:300]}"
            print(f"oak serve: {msg}; the next round decides again", file=sys.stderr)
            self.policy_error = msg
            self.store.save(self._changing(records))  # what was enacted before the error
            self._event({"event": "round-error", "t": round(now, 3), "error": msg})

    def _why(
        self, reasons: RoundReasons | None, active: np.ndarray, records: list[JobRecord], now: float
    ) -> list[tuple[str, str, dict[str, Any]]]:
        """Each job's reason after this round (``JobRecord.why``), and the rows ``oak explain`` reads: the engine's
        for the jobs it decided; backing off and waiting for a stop from what only the runtime knows."""
        rows: list[tuple[str, str, dict[str, Any]]] = []
        waiting = {it.job for it in self._live.pending}
        decided = {int(i): pos for pos, i in enumerate(active.tolist())}
        for i, r in enumerate(records):
            if not r.arrived or r.over:
                r.why, r.why_code = "", ""
                continue
            pos = decided.get(i)
            if pos is not None and reasons is not None:
                jr = reasons.reason(pos)
                code, text, detail = jr.code, jr.text, jr.as_dict()
            elif r.retry_at_s > 0:
                code = "backoff"
                text = (
                    f"backing off after {r.fail_streak} failure{'s' if r.fail_streak != 1 else ''} without progress "
                    f"(next try in {max(r.retry_at_s - now, 0.0):,.0f} s)"
                )
                detail = {"job": r.name, "code": code, "text": text, "gpus": len(r.devices)}
            else:
                continue
            if i in waiting:
                text = f"starting: waiting for a stopping job to release its devices ({text})"
                detail = {**detail, "text": text}
            r.why, r.why_code = ("" if code == "max" else text), code
            rows.append((r.name, code, detail))
        return rows

    def _policy_state_json(self) -> object | None:
        """The policy's state after this round as JSON values, if the policy keeps it (``PolicyBase.state_to_json``)."""
        if self.st is None or not isinstance(self.policy, PolicyBase):
            return None
        return self.policy.state_to_json(self.st.policy_state)

    def _enact(
        self, plan: Plan, active: np.ndarray, records: list[JobRecord], now: float, reasons: RoundReasons | None = None
    ) -> None:
        """Carry out a round's plan: stops asked, starts launched (or left pending on a stop), what runs
        reconciled with what is intended, the round committed."""
        ms = plan.decision_ms
        stops = [it.job for it in plan.intents if it.intent in (Intent.STOP, Intent.RESTART, Intent.RELOCATE)]
        stops = [i for i in stops if records[i].launched_at_s is not None]
        starts = [it for it in plan.intents if it.intent in (Intent.START, Intent.RESTART, Intent.RELOCATE)]
        self.request_stops(stops, records, now)
        self._live.pending = starts  # a new decision supersedes the starts the last one could not launch yet
        self._launch(records, now)
        allocation: dict[str, Any] = {self.names[i]: records[i].devices for i in active.tolist()}
        # what the backend runs vs. what this round intends (Ray autoscaler v2's reconciler): the devices each
        # job holds now — a stopping job its old ones, a start still waiting for them none yet
        waiting = {it.job for it in self._live.pending}
        issues = self.executor.reconcile({n: tuple(d) for n, d in allocation.items() if d})
        if issues:
            allocation["_reconcile"] = list(issues)  # job names cannot start with '_'
        if waiting:
            allocation["_waiting_for_stops"] = sorted(self.names[i] for i in waiting)
        k = self.store.rounds()
        why = self._why(reasons, active, records, now)
        kept = self._policy_state_json()
        self.store.save(
            self._changing(records),
            None if kept is None else {"policy_state": kept},
            (k, now, ms, json.dumps(allocation, sort_keys=True)),
            why,
        )
        self._event(
            {
                "event": "round",
                "k": len(self.decision_ms) - 1,
                "t": round(now, 3),
                "decision_ms": round(ms, 3),
                "allocation": {r.name: r.devices for r in records if r.devices},
                "states": dict(Counter(r.state for r in records)),
            }
        )

    def _event(self, event: dict[str, Any]) -> None:
        if self.publisher is not None:
            self.publisher.note(event)

    def request_stops(self, idx: list[int], records: list[JobRecord], now: float) -> None:
        """Ask jobs ``idx`` to checkpoint and exit, without waiting: the scheduler goes on ticking (observing,
        serving, publishing) and ``_advance_stops`` ends each stop when its job has exited, or SIGKILLs it
        ``stop_timeout_s`` after the request. A stopping job checkpoints: its time counts as restore time."""
        new = [i for i in idx if i not in self._live.stopping and records[i].launched_at_s is not None]
        if not new:
            return
        for i in new:
            records[i].stop_asked_s = now
        self.store.save([records[i] for i in new])  # before the signal: a restarted scheduler must know
        self.executor.request_stop([self.names[i] for i in new])
        for i in new:
            self._live.stopping[i] = now + self.opts.stop_timeout_s
            self._settle(records[i], now, "asked to checkpoint and exit")

    # ------------------------------------------------------------------ operations on a live run (its inbox's)
    def _check_bounds(self, jobs: Sequence[RuntimeJob], source: str, fields: tuple[str, ...]) -> None:
        """OakInputError if a job's device bound among ``fields`` is above the devices this run has."""
        kind = "CPU slot(s)" if self.opts.device_kind == "cpu" else "GPU(s)"
        for j in jobs:
            for f in fields:
                if getattr(j, f) > self.opts.devices:
                    raise OakInputError(
                        f"{source}: job {j.name!r}: {f}={getattr(j, f)} exceeds the {self.opts.devices} {kind} "
                        "this run has"
                    )

    def submit(self, jobs: list[RuntimeJob], now: float, source: str) -> list[str]:
        """Add ``jobs`` (parsed and checked by ``parse_jobs``; ``submit_s`` relative to ``now``) to a live run:
        all of them, committed, or none (``OakInputError`` says why: a name already in the run, a device bound
        beyond the cluster, no feasible configuration). Returns their names."""
        if not self.serving:
            raise OakInputError("this run's job set is its jobs file: jobs are submitted to `oak serve`")
        have = {j.name: r for j, r in zip(self.jobs, self.records, strict=True)}
        for j in jobs:
            if j.name in have:
                raise OakInputError(
                    f"{source}: job {j.name!r} is already in this run ({have[j.name].state}); job names are unique "
                    "within a run directory: pick another name"
                )
        self._check_bounds(jobs, source, ("min_gpus", "max_gpus"))
        new = [dataclasses.replace(j, submit_s=now + j.submit_s) for j in jobs]
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
        return [j.name for j in new]

    def _named(self, name: str) -> int:
        """The index of job ``name``; an unknown name is an input error listing the run's jobs."""
        if name not in self._index:
            known = ", ".join(sorted(self._index)) or "none"
            raise OakInputError(f"no job {name!r} in this run (jobs: {known})")
        return self._index[name]

    def cancel(self, name: str, now: float) -> None:
        """Cancel job ``name``: a running one is asked to checkpoint and exit (the scheduler does not wait);
        committed before it returns."""
        i = self._named(name)
        r = self.records[i]
        if r.over:
            raise OakInputError(f"job {name!r} is already {r.state}")
        r.finish_s = now
        if r.launched_at_s is not None:  # stopped with a checkpoint, as at any stop: cancelled once it exited
            r.ending = JobPhase.CANCELLED
            self.request_stops([i], self.records, now)  # commits the record before it signals the job
        else:
            enter(r, JobPhase.CANCELLED, now, "cancelled")
        self.store.save([r])

    def retry(self, name: str, now: float) -> None:
        """Queue a failed or cancelled job again: it resumes from its newest checkpoint, with a fresh retry
        count (its failures and restarts so far stay counted); committed before it returns."""
        i = self._named(name)
        r = self.records[i]
        if r.state not in ("failed", "cancelled"):
            raise OakInputError(f"job {name!r} is {r.state}; only a failed or cancelled job can be retried")
        if i in self._live.stopping:
            raise OakInputError(f"job {name!r} is still stopping; retry it once it has exited")
        r.gave_up, r.ending, r.fail_streak, r.retry_at_s, r.finish_s = None, "", 0, 0.0, None
        self._live.committed_over.discard(name)
        self.failure_notes.pop(name, None)
        enter(r, JobPhase.QUEUED if self.jobs[i].submit_s <= now else JobPhase.PENDING, now, "retried")
        self.store.save([r])

    def _advance_stops(self, records: list[JobRecord], now: float) -> bool:
        """End the stops whose jobs have exited (or SIGKILL them past their deadline); True if one ended whose
        devices no decided start is waiting for (the next round should place them)."""
        event = False
        waiting = {it.job for it in self._live.pending}
        for i, deadline in list(self._live.stopping.items()):
            job, r = self.jobs[i], records[i]
            state = self.executor.state(job.name)
            if state == "running" and now < deadline:
                continue
            if state == "running":
                state = "failed"  # did not checkpoint and exit in time: SIGKILLed below
                self.failure_notes[job.name] = f"did not stop within {self.opts.stop_timeout_s:g} s of SIGTERM"
            del self._live.stopping[i]
            self.executor.kill(job.name)
            self._release(job, r)
            if state == "done" and not r.over:
                self._finish(r, now, "finished while stopping")
            elif state == "failed":
                r.failures += 1
            why = {"done": "finished while stopping", "failed": "failed while stopping"}.get(str(state), "stopped")
            self._settle(r, now, why)
            event |= i not in waiting
        return event

    def _launch(self, records: list[JobRecord], now: float) -> None:
        """Launch the pending starts that can run now: not a job still stopping, no device a stopping job
        holds; the others stay pending."""
        held = {d for i in self._live.stopping for d in records[i].devices}
        starts: list[JobIntent] = []
        blocked: list[JobIntent] = []
        for it in self._live.pending:
            (blocked if it.job in self._live.stopping or held & set(it.gpus) else starts).append(it)
        self._live.pending = blocked
        for it in starts:  # real processes cannot move without a restart: RELOCATE restarts too
            i, r = it.job, records[it.job]
            if r.over:
                continue
            job = self.jobs[i]
            self._read_step(job, r)
            devs = tuple(int(g) for g in it.gpus)
            try:  # a job's own I/O error (its folder made unwritable, its disk full) fails that job, not the scheduler
                if job.is_command:  # its first report after this launch is the new incarnation's
                    with contextlib.suppress(FileNotFoundError):
                        (self.job_dir(job) / "status.json").unlink()
                self._advise(job, r, devs, force=True)
                self.executor.launch(self._item(job, devs))
            except NodeLost as exc:
                self._node_lost(job, r, now, exc)
                continue
            except (OakInputError, RuntimeError, OSError) as exc:
                self._launch_failed(job, r, now, exc)
                continue
            if r.started:
                r.restarts += 1
            r.started = True
            r.incarnations += 1
            self._live.heard[job.name] = (None, self.clock.time())  # the stall clock starts once it is launched
            self._live.first_report[job.name] = True
            self._live.timed.pop(job.name, None)  # its step times are timed from this incarnation's reports
            r.shape, r.config = it.shape, it.config
            r.devices = list(devs)
            r.pids = self.executor.pids(job.name)
            r.launched_at_s = now
            r.launch_ckpt_s = r.t_ckpt_s
            r.launch_step = r.step
            r.last_step_s = None
            r.ready = False
            self._settle(r, now, f"launched on device(s) {list(devs)} from step {r.step}")

    # ------------------------------------------------------------------ results
    def _result(self, records: list[JobRecord], end: float, wall: float) -> RunResult:
        jobs = tuple(
            JobResult(
                name=j.name,
                application=j.application or ("learned" if j.is_command else ""),
                submit_s=j.submit_s,
                jct_s=(r.finish_s - j.submit_s) if r.done and r.finish_s is not None else None,
                restarts=r.restarts,
                failures=r.failures,
                t_progress_s=r.t_progress_s,
                t_ckpt_s=r.t_ckpt_s,
                t_queue_s=r.t_queue_s,
                gpu_s_used=r.gpu_s,
                gpu_s_lost=r.gpu_s_lost,
            )
            for j, r in zip(self.jobs, records, strict=True)
        )
        finishes = [r.finish_s for r in records if r.finish_s is not None]
        first = min((j.submit_s for j in self.jobs), default=0.0)
        last = max(finishes) if finishes and len(finishes) == len(records) else end
        return RunResult(
            policy=self.policy.name,
            workload=Path(self.run_dir).name,
            failure_rate=self.opts.failure_rate,
            seed=self.opts.seed,
            jobs=jobs,
            decision_ms=tuple(self.decision_ms),
            makespan_s=last - first,
            end_time_s=end,
            wall_s=wall,
        )


def newest_checkpoint_step(job_dir: Path) -> int:
    """Largest step with a ``ckpt-<step>.pt`` and its ``.sha256`` sidecar in ``job_dir`` (0 if none)."""
    best = 0
    with contextlib.suppress(OSError):
        for name in os.listdir(job_dir):
            if name.startswith("ckpt-") and name.endswith(".pt") and name[5:-3].isdigit():
                step = int(name[5:-3])
                if step > best and (job_dir / f"ckpt-{name[5:-3]}.sha256").is_file():
                    best = step
    return best


RUN_MARKER = "run.json"
"""Written in the run directory when a run begins (its start time): a directory with it but no run in
state.sqlite has lost its state (``RuntimeScheduler._check_state_intact``)."""
