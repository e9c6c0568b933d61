"""The run's twin: a real run replayed in the simulator, under its own policy and others (``oak replay``).

From a run's trace (:mod:`oak.runtime.export`) the simulator gets:

* the jobs as submitted (submit time on the run clock, device bounds, global batch);
* each job's goodput: the Pollux/Sia throughput model fitted to the step times it measured at the allocations
  it ran (:func:`oak.goodput.online.fit_online` from a linear-scaling prior), as a single-batch application of
  its measured total steps (:func:`oak.runtime.learned.learned_app`) — the same model for every policy, and
  for the simulator's physics: known goodput, not learned again;
* each (re)start's cost: the job's measured restore time (its T_ckpt over its incarnations: start-up, data,
  checkpoint read, up to its first step), used as its restart penalty (the policies' P_restart and the
  simulator's restore delay);
* the cluster: the run's devices as one node of ``profile_type``, or its nodes (``--cluster-from``);
* failures: the run's injected ones are drawn again from the run's seed and failure rate — the runtime's
  injector and the simulator draw from the same stream (:mod:`oak.failures`), so under the run's own policy the
  same job meets the same kills where it holds devices at the same times, and under another policy the jobs
  meet the draws of the devices they hold there (failures a policy's placement caused are re-drawn); every
  other logged failure (a rank's crash, a stall, a node lost) stays at its time, as a failure log line
  (:mod:`oak.failures.trace`): a job's line fires if that job holds devices then, a node's takes the node down
  for as long as it was.

What it cannot see: the runtime's latencies between a decision and the processes it causes (a stopped job's
devices go to the next one when it has checkpointed and exited; a tick; a relaunch after a crash), a worker's
start-up varying from one launch to the next (the mean is used), step times at sizes a job never ran
(extrapolated by the fitted model), and work a command job loses at a failure (its checkpoint interval is its
own). ``docs/twin.md`` measures the gap.
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

    def simulator(self) -> Simulator:
        return Simulator(
            self.workload,
            self.cluster,
            self.catalog,
            self.physics,
            believed=self.believed,
            restore_s=self.restore_s,
            learn=self.learn,
        )


def build_twin(trace: dict[str, Any], failure_log: Path, *, base: Catalog | None = None) -> Twin:
    """The twin of ``trace``; its failure log (every logged failure but the injected ones) is written to
    ``failure_log``, which the returned physics reads (``trace:FILE``)."""
    run = trace["run"]
    profile = str(run.get("profile_type") or "aws")
    base = base if base is not None else Catalog.load()
    apps = dict(base.apps)
    specs = []
    measured = []
    believed: dict[str, AppProfile] = {}
    restores: dict[str, float] = {}
    learn: set[str] = set()
    for j in trace["jobs"]:
        name = str(j["name"])
        samples = tuple(StepTimeLog.from_dict(j["steplog"]).samples()) if j.get("steplog") else ()
        if not samples:
            raise OakInputError(
                f"job {name!r}: no measured step time (it never ran a timed step): the replay has no model of it"
            )
        params = fit_online(samples, linear_scaling_prior(samples)).params
        restore = j.get("restore_s")
        if isinstance(restore, int | float) and math.isfinite(restore) and restore >= 0:
            restores[name] = float(restore)
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
    physics = PhysicsOptions(round_s=float(run["round_s"]), horizon_s=MAX_TIME_S, failure_model=model)
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
        restores,
        frozenset(learn),
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
        twin = build_twin(trace, Path(tmp) / "failures.csv")
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
