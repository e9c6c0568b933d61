"""The run's twin: a real run replayed in the simulator, under its own policy and others (``oak replay``).

From a run's trace (:mod:`oak.runtime.export`) the simulator gets:

* the jobs as submitted (submit time on the run clock, device bounds, global batch);
* each job's goodput: the Pollux/Sia throughput model fitted to the step times it measured at the allocations
  it ran (:func:`oak.goodput.online.fit_online` from a linear-scaling prior), as a single-batch application of
  its measured total steps (:func:`oak.runtime.learned.learned_app`) — the same model for every policy, and
  for the simulator's physics: known goodput, not learned again;
* each (re)start's cost, measured from the job's incarnations (:func:`_start_costs`: an incarnation's wall time
  beyond its steps at its measured step time), the first start's apart; the policies still see the jobs
  file's P_restart and the T_ckpt they measure, as the run's did;
* each job's stop latency: a stopped or moved job releases its devices when it has checkpointed and exited, and
  a job started on them begins its start-up only then (``Simulator(stop_s=)``);
* a failure takes the job off its devices and the round it triggers places it again (failure mode
  "requeue"): the relaunch is the restart, as in the runtime;
* the cluster: the run's devices as one node of ``profile_type``, or its nodes (``--cluster-from``);
* failures: the run's injected ones are drawn again from the run's seed and failure rate — the runtime's
  injector and the simulator draw from the same stream (:mod:`oak.failures`), so under the run's own policy the
  same job meets the same kills where it holds devices at the same times, and under another policy the jobs
  meet the draws of the devices they hold there (failures a policy's placement caused are re-drawn); every
  other logged failure (a rank's crash, a stall, a node lost) stays at its time, as a failure log line
  (:mod:`oak.failures.trace`): a job's line fires if that job holds devices then, a node's takes the node down
  for as long as it was;
* each job's exit: from its last step until done it holds its devices with no work left (``Simulator(exit_s=)``);
* the work a job's failure lost: the steps its relaunch redid (``Simulator(lost_s=)``).

What it cannot see: a worker's start-up varying from one launch to the next (the mean is used), a tick, step
times at sizes a job never ran (extrapolated by the fitted model), and the work a failure loses beyond what
the run's own failures of that job lost (a job that never failed in the run loses none). ``docs/twin.md``
measures the gap.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oak.catalog import AppProfile, Catalog
from oak.engine.metrics import JobResult, RunResult
from oak.engine.rules import PhysicsOptions
from oak.errors import OakInputError
from oak.failures.rng import SEED_LIMIT
from oak.failures.trace import failure_log_csv
from oak.goodput.online import StepTimeLog, fit_online, linear_scaling_prior
from oak.model import JobSpec
from oak.model.cluster import Cluster, homogeneous_cluster
from oak.policies import make_policy
from oak.runtime.export import failure_events
from oak.runtime.learned import learned_app
from oak.runtime.nodes import RuntimeNode, nodes_cluster
from oak.sim.simulator import Simulator
from oak.workloads import Workload
from oak.workloads.loader import MAX_TIME_S


@dataclass(frozen=True)
class Twin:
    """A run's simulator inputs (module docstring): workload, catalog, cluster, physics, λ and seed."""

    workload: Workload
    catalog: Catalog
    cluster: Cluster
    physics: PhysicsOptions
    failure_rate: float
    seed: int
    policy: str
    measured: RunResult
    believed: dict[str, AppProfile]
    """Job → the catalog application the run's scheduler scored it with (packaged workers)."""
    restore_s: dict[str, float]
    """Job → its measured restore time (s)."""
    learn: frozenset[str]
    """The command jobs without a catalog application: their goodput was learned online in the run."""
    first_start_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """Job → its first launch's measured start-up (s)."""
    stop_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """Job → its measured stop latency (s): asked to checkpoint and exit, until it had."""
    exit_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """Job → its measured exit (s): from its last step until it was done."""
    lost_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """Job → the running time (s) a failure of it lost in the run (the steps its relaunch redid)."""
    credit_s: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    """Job → the running its first start's and a restart's delay include (:class:`Simulator`'s ``credit_s``)."""
    arrival_lag_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """Job → the seconds from its submission until the run's scheduler took it in (its tick)."""
    counted_s: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    """Job → the restore time the run's scheduler counted at its (first start, a restart) (``Simulator``'s
    ``counted_s``)."""
    left_out: tuple[str, ...] = ()
    """The run's jobs that never ran a timed step: no model of their goodput, so not replayed (nor measured)."""

    def simulator(self) -> Simulator:
        return Simulator(
            self.workload,
            self.cluster,
            self.catalog,
            self.physics,
            believed=self.believed,
            restore_s=self.restore_s,
            learn=self.learn,
            first_start_s=self.first_start_s,
            stop_s=self.stop_s,
            exit_s=self.exit_s,
            lost_s=self.lost_s,
            credit_s=self.credit_s,
            arrival_lag_s=self.arrival_lag_s,
            counted_s=self.counted_s,
        )


@dataclass
class _Starts:
    """A job's measured latencies from its incarnations (:func:`_start_costs`)."""

    first: tuple[float, float] | None = None
    """Its first launch: (delay as the scheduler saw it, its credit)."""
    restarts: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    """Each later launch's (delay as the scheduler saw it, its credit)."""
    first_counted: float | None = None
    """Its first launch's restore time as its scheduler counted it (T_ckpt; None: not noted)."""
    restarts_counted: list[float] = dataclasses.field(default_factory=list)
    """Each later launch's, where noted."""
    stops: list[float] = dataclasses.field(default_factory=list)
    exits: list[float] = dataclasses.field(default_factory=list)
    lost: list[float] = dataclasses.field(default_factory=list)


def _start_costs(job: dict[str, Any]) -> _Starts:
    """A job's measured start-ups, stop latencies, exits and lost work, from its incarnations
    (:func:`oak.runtime.export.incarnations`). A start's delay is as the run's scheduler saw it: from the launch
    until it saw the job past its resume step. Its cost is what the steps did not take: an incarnation that ended
    by a stop or at the end of the job costs its wall time (to its last step, where that was seen) beyond its
    steps at the step time it measured at that size (start-up, checkpoint read, warm-up); one that failed, its
    delay. Its credit: delay minus cost, the running its delay includes (the steps taken before the scheduler
    saw them; where its steps took longer than their step time, so that its cost exceeds the delay seen, the
    delay is its cost and there is none). Its exit: from its last step to done. A failure's lost work: the steps
    its relaunch redid, at its step time."""
    per_size: dict[int, list[float]] = {}
    for sample in StepTimeLog.from_dict(job["steplog"]).samples() if job.get("steplog") else ():
        acc = per_size.setdefault(sample.replicas, [0.0, 0.0])
        acc[0] += sample.step_time_s * sample.steps
        acc[1] += sample.steps
    out = _Starts()
    for k, inc in enumerate(job.get("incarnations") or ()):
        if inc.get("stop_s") is not None:
            out.stops.append(max(float(inc["stop_s"]), 0.0))
        size = per_size.get(int(inc["devices"]))
        if inc.get("lost_steps") is not None and size and size[1] > 0:
            out.lost.append(int(inc["lost_steps"]) * size[0] / size[1])
        if inc.get("running_s") is None:
            continue
        seen = max(float(inc["running_s"]) - float(inc["launch_s"]), 0.0)
        cost = seen
        end = inc.get("end_s")
        if inc.get("end") == "done" and inc.get("last_step_s") is not None:
            end = float(inc["last_step_s"])
            out.exits.append(max(float(inc["end_s"]) - end, 0.0))
        if inc.get("end") in ("stop", "done") and inc.get("to_step") is not None and size and size[1] > 0:
            steps = int(inc["to_step"]) - int(inc["from_step"])
            cost = max(float(end) - float(inc["launch_s"]) - steps * size[0] / size[1], 0.0)
        delay = max(seen, cost)
        counted = None if inc.get("restore_s") is None else min(max(float(inc["restore_s"]), 0.0), delay)
        if k == 0:
            out.first = (delay, delay - cost)
            out.first_counted = counted
        else:
            out.restarts.append((delay, delay - cost))
            if counted is not None:
                out.restarts_counted.append(counted)
    return out


@dataclass(frozen=True)
class RunLatencies:
    """Each job's measured latencies (s) for the replay (:func:`_run_latencies`)."""

    restore_s: dict[str, float]
    first_start_s: dict[str, float]
    stop_s: dict[str, float]
    exit_s: dict[str, float]
    lost_s: dict[str, float]
    credit_s: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    """Job → the running its (first start's, a restart's) delay includes (:class:`Simulator`'s ``credit_s``)."""
    counted_s: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    """Job → the restore time its scheduler counted at its (first start, a restart) (``Simulator``'s
    ``counted_s``)."""


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _run_latencies(jobs: list[dict[str, Any]]) -> RunLatencies:
    """Each job's restore delay at a restart and its credit, its first start's, its stop latency and its exit,
    from the trace's incarnations (:func:`_start_costs`; a trace without them: the mean restore, nothing else). A
    job that never restarted (stopped, finished) in the run does so in the replay at the mean over the run's:
    the same machine's, measured (a job that finished with its last step unseen has its exit in its cost)."""
    costs = {str(j["name"]): _start_costs(j) for j in jobs if "incarnations" in j}
    every_restart = [x for c in costs.values() for x in c.restarts]
    every_counted = [x for c in costs.values() for x in c.restarts_counted]
    every_stop = [x for c in costs.values() for x in c.stops]
    every_exit = [x for c in costs.values() for x in c.exits]
    out = RunLatencies({}, {}, {}, {}, {})
    for j in jobs:
        name = str(j["name"])
        mean = j.get("restore_s")
        if name not in costs:  # a trace without incarnations: the mean restore, as before
            if isinstance(mean, int | float) and math.isfinite(mean) and mean >= 0:
                out.restore_s[name] = float(mean)
            continue
        c = costs[name]
        if c.lost:  # its own failures' (another job's checkpoints are not its own)
            out.lost_s[name] = _mean(c.lost)
        pool = c.restarts or every_restart or ([c.first] if c.first is not None else [])
        restart = (0.0, 0.0)
        if pool:
            restart = (_mean([d for d, _ in pool]), _mean([x for _, x in pool]))
            out.restore_s[name] = restart[0]
        if c.first is not None:
            out.first_start_s[name] = c.first[0]
        if (c.first is not None and c.first[1]) or restart[1]:
            out.credit_s[name] = (c.first[1] if c.first is not None else restart[1], restart[1])
        # the restore its scheduler counted (T_ckpt), where the run noted it: from the same starts as the delay
        if c.restarts:
            noted = c.restarts_counted
        elif every_restart:
            noted = every_counted
        else:
            noted = [c.first_counted] if c.first_counted is not None else []
        if c.first_counted is not None or noted:
            first = c.first_counted if c.first_counted is not None else (c.first[0] if c.first else restart[0])
            out.counted_s[name] = (first, _mean(noted) if noted else restart[0])
        if c.stops or every_stop:
            out.stop_s[name] = _mean(c.stops or every_stop)
        # a finish without its last step seen has its exit in its last incarnation's cost already
        unseen = any(i.get("end") == "done" and i.get("last_step_s") is None for i in j["incarnations"] or ())
        if c.exits or (every_exit and not unseen):
            out.exit_s[name] = _mean(c.exits or every_exit)
    return out


def _samples(job: dict[str, Any]) -> tuple[Any, ...]:
    """The step-time samples the run measured of ``job`` (trace row)."""
    return tuple(StepTimeLog.from_dict(job["steplog"]).samples()) if job.get("steplog") else ()


def _modelled(trace: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The trace without its jobs that never ran a timed step (a command that never reported, one that could
    not start, one still queued) and without the failures logged for them: the replay has no model of their
    goodput, so it simulates the others, measured and simulated alike. Returns it and the names left out; an
    input error if no job is left."""
    kept = [j for j in trace["jobs"] if _samples(j)]
    names = {str(j["name"]) for j in kept}
    left_out = tuple(str(j["name"]) for j in trace["jobs"] if str(j["name"]) not in names)
    if not kept:
        raise OakInputError(
            "no job of the run ran a timed step (steps reported by the packaged worker or oak.job.report): "
            "the replay has no model of any job"
        )
    if not left_out:
        return trace, ()
    failures = [f for f in trace.get("failures") or [] if "job" not in f or str(f["job"]) in names]
    return {**trace, "jobs": kept, "failures": failures}, left_out


def build_twin(trace: dict[str, Any], failure_log: Path, *, base: Catalog | None = None) -> Twin:
    """The twin of ``trace``; its failure log (every logged failure but the injected ones) is written to
    ``failure_log``, which the returned physics reads (``trace:FILE``)."""
    trace, left_out = _modelled(trace)
    run = trace["run"]
    profile = str(run.get("profile_type") or "aws")
    base = base if base is not None else Catalog.load()
    apps = dict(base.apps)
    specs = []
    measured = []
    believed: dict[str, AppProfile] = {}
    latencies = _run_latencies(list(trace["jobs"]))
    learn: set[str] = set()
    lag: dict[str, float] = {}
    for j in trace["jobs"]:
        name = str(j["name"])
        if j.get("arrived_s") is not None and float(j["arrived_s"]) > float(j["submit_s"]):
            lag[name] = float(j["arrived_s"]) - float(j["submit_s"])
        samples = _samples(j)
        params = fit_online(samples, linear_scaling_prior(samples)).params
        penalty = float(j["restart_penalty_s"])  # what the run's policy was told; the restore is measured
        application = str(j.get("application") or "")
        if not j.get("command") and application in base.apps:
            believed[name] = base.app(application)
        elif j.get("command") and not application:
            learn.add(name)
        app = f"job:{name}"
        apps[app] = learned_app(app, int(j["batch_size"]), params, samples, float(j["total_steps"]), penalty, profile)
        specs.append(
            JobSpec(
                name=name,
                application=app,
                submit_time_s=float(j["submit_s"]),
                min_gpus=int(j["min_gpus"]),
                max_gpus=int(j["max_gpus"]),
                restart_penalty_s=penalty,
                batch_size=int(j["batch_size"]),
            )
        )
        m = j["measured"]
        measured.append(
            JobResult(
                name=name,
                application=app,
                submit_s=float(j["submit_s"]),
                jct_s=None if m.get("jct_s") is None else float(m["jct_s"]),
                restarts=int(m["restarts"]),
                failures=int(m["failures"]),
                t_progress_s=float(m["t_progress_s"]),
                t_ckpt_s=float(m["t_ckpt_s"]),
                t_queue_s=float(m["t_queue_s"]),
                gpu_s_used=float(m["gpu_s_used"]),
                gpu_s_lost=float(m["gpu_s_lost"]),
            )
        )
    workload = Workload(name=Path(str(run.get("run_dir", "run"))).name, jobs=tuple(specs))
    nodes = run.get("nodes") or []
    if nodes:
        cluster = nodes_cluster(
            [RuntimeNode(str(n), str(n), int(s)) for n, s in nodes], profile, f"{len(nodes)}x-{run['device_kind']}"
        )
    else:
        cluster = homogeneous_cluster(profile, 1, int(run["devices"]), name=f"{run['devices']}-{run['device_kind']}")
    events = failure_events(trace, injected=False)
    model = "paper"
    if events:
        failure_log.write_text(failure_log_csv(events), encoding="utf-8")
        model = f"trace:{failure_log}"
    # a failed job gives its devices up and is placed again by the round its failure triggers, as in the runtime
    physics = PhysicsOptions(
        round_s=float(run["round_s"]), horizon_s=MAX_TIME_S, failure_model=model, failure_mode="requeue"
    )
    first = min((s.submit_time_s for s in specs), default=0.0)
    finishes = [r.submit_s + r.jct_s for r in measured if r.jct_s is not None]
    end = float(run.get("end_s", 0.0))
    last = max(finishes) if finishes and len(finishes) == len(measured) else end
    result = RunResult(
        policy=f"measured ({run['policy']})",
        workload=workload.name,
        failure_rate=float(run["failure_rate"]),
        seed=int(run["seed"]),
        jobs=tuple(measured),
        decision_ms=(),
        makespan_s=last - first,
        end_time_s=end,
        wall_s=0.0,
    )
    catalog = dataclasses.replace(base, apps=apps)
    return Twin(
        workload,
        catalog,
        cluster,
        physics,
        float(run["failure_rate"]),
        int(run["seed"]),
        str(run["policy"]),
        result,
        believed,
        latencies.restore_s,
        frozenset(learn),
        latencies.first_start_s,
        latencies.stop_s,
        latencies.exit_s,
        latencies.lost_s,
        latencies.credit_s,
        lag,
        latencies.counted_s,
        left_out,
    )


KNOWLEDGE = ("run", "hindsight")
"""What a replayed policy knows of the jobs' goodput: what the run's scheduler knew (``run``), or every job's
fitted model from the start (``hindsight``: what the policy would have done had it known)."""


def replay(
    trace: dict[str, Any],
    policies: Sequence[str],
    seeds: int = 1,
    progress: Callable[[RunResult], None] | None = None,
    knowledge: str = "run",
) -> tuple[Twin, list[RunResult]]:
    """Simulate the run of ``trace`` under each of ``policies`` for ``seeds`` seeds (the run's seed first, then
    the next ones: paired across policies), the policies knowing ``knowledge`` (:data:`KNOWLEDGE`). Returns
    the twin and the results, policy-major."""
    if seeds < 1:
        raise OakInputError(f"--seeds {seeds}: expected a positive integer")
    if knowledge not in KNOWLEDGE:
        raise OakInputError(f"--knowledge {knowledge!r}: expected one of {', '.join(KNOWLEDGE)}")
    with tempfile.TemporaryDirectory(prefix="oak-replay-") as tmp:
        try:
            twin = build_twin(trace, Path(tmp) / "failures.csv")
        except OakInputError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:  # what check_trace cannot see
            raise OakInputError(
                f"the trace cannot be read ({type(exc).__name__}: {exc}): damaged or edited by hand? "
                "Export it again with oak export-trace"
            ) from None
        if twin.seed + seeds - 1 >= SEED_LIMIT:
            raise OakInputError(
                f"--seeds {seeds}: from the run's seed {twin.seed}, the seeds would pass 2^64 - 1 (seeds are 64-bit)"
            )
        if knowledge == "hindsight":
            twin = dataclasses.replace(twin, believed={}, learn=frozenset())
        sim = twin.simulator()
        results = []
        for pol in policies:
            for k in range(seeds):
                seed = twin.seed + k
                r = sim.run(make_policy(pol, seed=seed), twin.failure_rate, seed)
                results.append(r)
                if progress is not None:
                    progress(r)
    return twin, results


def gap(measured: RunResult, simulated: RunResult) -> dict[str, Any]:
    """Simulated against measured, per job and overall: JCT ratio (simulated / measured), restarts, failures
    and T_ckpt; over the jobs that finished in both."""
    sim = {j.name: j for j in simulated.jobs}
    rows: list[dict[str, Any]] = []
    for m in measured.jobs:
        s = sim[m.name]
        ratio = s.jct_s / m.jct_s if m.jct_s and s.jct_s is not None else math.nan
        rows.append(
            {
                "job": m.name,
                "measured_jct_s": m.jct_s,
                "simulated_jct_s": s.jct_s,
                "jct_ratio": ratio,
                "measured_restarts": m.restarts,
                "simulated_restarts": s.restarts,
                "measured_failures": m.failures,
                "simulated_failures": s.failures,
                "measured_t_ckpt_s": m.t_ckpt_s,
                "simulated_t_ckpt_s": s.t_ckpt_s,
            }
        )
    both = [r for r in rows if not math.isnan(r["jct_ratio"])]
    mean_m = sum(r["measured_jct_s"] for r in both) / len(both) if both else math.nan
    mean_s = sum(r["simulated_jct_s"] for r in both) / len(both) if both else math.nan
    return {
        "jobs": rows,
        "mean_jct_ratio": mean_s / mean_m if both else math.nan,
        "worst_job_jct_error": max((abs(r["jct_ratio"] - 1.0) for r in both), default=math.nan),
        "restarts_equal": sum(r["measured_restarts"] == r["simulated_restarts"] for r in rows),
        "jobs_compared": len(both),
    }
