"""The Sia artifact's simulator rules (``--rules sia-artifact``, each also a ``PhysicsOptions`` field): every rule
does what docs/model.md says, alone and together, and the default rules change nothing."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from oak.engine.rules import RULES, SIA_ARTIFACT_RULES, rules_of, with_rules
from oak.errors import OakInputError
from oak.model.job import JobSpec
from oak.model.snapshot import Allocation, RoundSnapshot
from oak.policies import PolicyBase, make_policy
from oak.policies.sia import SiaPolicy
from oak.sim import PhysicsOptions, Simulator
from oak.sim.compare import RunSpec
from oak.sim.trace import TRACE_COLUMNS, run_traced
from oak.workloads import Workload, load_workload
from support.cli import oak

ARTIFACT = with_rules(PhysicsOptions(), "sia-artifact")


def _trace(policy: str, physics: PhysicsOptions, lam: float = 0.0, seed: int = 0, workload: str = "small"):
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "trace.parquet"
        result, _ = run_traced(RunSpec(policy, workload, lam, seed, "paper-12", physics), path)
        frame = pd.read_parquet(path)
    assert list(frame.columns) == list(TRACE_COLUMNS)
    return result, frame


def test_rule_sets_name_their_options() -> None:
    assert RULES == ("default", "sia-artifact")
    assert with_rules(PhysicsOptions(), "default") == PhysicsOptions()
    assert PhysicsOptions().non_default() == {}
    assert ARTIFACT.non_default() == SIA_ARTIFACT_RULES
    assert rules_of(ARTIFACT) == "sia-artifact" and rules_of(PhysicsOptions(bootstrap=True)) == "default"
    with pytest.raises(OakInputError, match="--rules 'sia'"):
        with_rules(PhysicsOptions(), "sia")


@pytest.mark.parametrize(
    ("field", "value"),
    [("restart_on", "never"), ("failure_mode", "zombie"), ("failure_restarts", 3), ("bootstrap", "yes"),
     ("lost_work", "all")],
)  # fmt: skip
def test_bad_rule_values_are_input_errors(field: str, value: object) -> None:
    with pytest.raises(OakInputError, match=field):
        PhysicsOptions(**{field: value})


@pytest.mark.parametrize("policy", ["sia-paper", "oak-paper", "pollux"])
def test_bootstrap_and_exploration_cap(policy: str) -> None:
    """A job starts on 1 GPU and grows at most one doubling per reallocation (all small's jobs may take 1 GPU)."""
    physics = PhysicsOptions(bootstrap=True, exploration_cap=True)
    _, tr = _trace(policy, physics)
    for _, job in tr.groupby("job"):
        held = job["gpus"].to_numpy()
        ran = np.maximum.accumulate(np.concatenate([[0], held]))[:-1]  # most GPUs held before each round
        assert np.all(held[ran == 0] <= 1)
        assert np.all(held[ran > 0] <= 2 * ran[ran > 0])


def test_without_the_cap_jobs_jump() -> None:
    """The test above can fail: under the default rules some job goes from nothing to more than 2 GPUs."""
    _, tr = _trace("sia-paper", PhysicsOptions())
    first = tr[tr["gpus"] > 0].groupby("job")["gpus"].first()
    assert (first > 2).any()


def test_fixed_steps_decide_only_on_the_grid() -> None:
    _, free = _trace("oak-paper", PhysicsOptions(), lam=0.1)
    assert (free["time_s"] % 60.0 != 0).any()  # arrivals, completions and failures re-decide at once by default
    _, fixed = _trace("oak-paper", PhysicsOptions(fixed_steps=True), lam=0.1)
    assert np.all(fixed["time_s"] % 60.0 == 0)


@pytest.mark.long
@pytest.mark.parametrize("policy", ["oak-paper", "goodput", "gavel", "drf"])
def test_restores_are_not_preempted(policy: str) -> None:
    """Policies that honour ``kept`` (the round programs) and those the simulator holds to it (gavel, drf)."""
    # the first 100,000 s: every round is checked, and at λ = 0.2 hundreds of them hold restoring jobs
    physics = PhysicsOptions(restores_preemptible=False, horizon_s=1e5)
    _, tr = _trace(policy, physics, lam=0.2, seed=3, workload="medium")
    restoring = tr[tr["restoring"]]
    assert len(restoring) > 100
    assert np.all(restoring["gpus"] == restoring["gpus_before"])


def test_failure_restarts_add_that_many() -> None:
    """With a policy that never reads restart counts (``goodput``: r = K = 1) the decisions, and so each job's
    failures and scheduler-caused restarts, are the same whatever a failure adds: restarts = moves + k·failures."""
    wl = load_workload("small")
    runs = {
        k: Simulator(wl, physics=PhysicsOptions(failure_restarts=k)).run(make_policy("goodput"), 0.1, 2)
        for k in (0, 1, 2)
    }
    assert sum(j.failures for j in runs[1].jobs) > 0
    for k in (0, 2):
        for a, b in zip(runs[1].jobs, runs[k].jobs, strict=True):
            assert b.failures == a.failures and b.jct_s == a.jct_s
            assert b.restarts - k * b.failures == a.restarts - a.failures


@dataclasses.dataclass(frozen=True)
class _Hopper(PolicyBase):
    """Places its one job on 2 GPUs of node 0 in even rounds and of node 1 in odd ones: the same per-node shape
    on other nodes every round."""

    name: str = "hopper"

    def decide(self, snap: RoundSnapshot) -> Allocation:
        rep = np.zeros((snap.num_jobs, len(snap.node_gpus)), dtype=np.int64)
        rep[0, int(snap.time_s // 60) % 2] = 2
        return Allocation(config=np.full(snap.num_jobs, -1), replicas=rep)


def test_restarts_on_shape_ignore_moves_to_other_nodes_in_the_same_shape() -> None:
    wl = Workload("one", (JobSpec("j", "cifar10", 0.0, min_gpus=2, max_gpus=2),))
    move = Simulator(wl).run(_Hopper(), 0.0, 0)
    shape = Simulator(wl, physics=PhysicsOptions(restart_on="shape")).run(_Hopper(), 0.0, 0)
    assert move.jobs[0].restarts > 10 and move.jobs[0].t_ckpt_s > 10 * 50  # every hop restores
    assert shape.jobs[0].restarts == 0 and shape.jobs[0].t_ckpt_s == pytest.approx(50.0)  # only the first start
    assert shape.jobs[0].jct_s < move.jobs[0].jct_s


def test_per_node_shape_ignores_which_nodes() -> None:
    sim = Simulator(load_workload("small"))  # paper-12: 3 nodes of 4 GPUs, ids 0-3, 4-7, 8-11
    assert sim.model._per_node((0, 1)) == sim.model._per_node((6, 7))
    assert sim.model._per_node((0, 1, 4, 5)) == sim.model._per_node((8, 9, 2, 3))
    assert sim.model._per_node((0, 1, 4, 5)) != sim.model._per_node((0, 1, 2, 4))


def test_lost_work_since_restart_rolls_back_to_the_last_start() -> None:
    """A failure that rolls back to the job's last (re)start loses more GPU time than one that loses nothing.

    At λ = 0.05 a job that needs more than ~1,200 s uninterrupted may never finish under the rollback, so both runs
    stop at 60,000 s (the run without loss ends at ~14,000 s) instead of stepping idle rounds to the horizon."""
    none, _ = _trace("sia", PhysicsOptions(horizon_s=60_000.0), lam=0.05, seed=1)
    lost, _ = _trace("sia", PhysicsOptions(lost_work="since-restart", horizon_s=60_000.0), lam=0.05, seed=1)
    assert sum(j.failures for j in lost.jobs) > 0
    assert sum(j.gpu_s_lost for j in lost.jobs) > sum(j.gpu_s_lost for j in none.jobs)


def _longest_stall(tr: pd.DataFrame) -> int:
    """The most consecutive rounds any job holds the same GPUs without its remaining work moving."""
    best = 0
    for _, job in tr.groupby("job"):
        held = ((job["gpus"] == job["gpus_before"]) & (job["gpus"] > 0)).to_numpy()
        still = np.concatenate([[False], np.diff(job["remaining_fraction"].to_numpy()) == 0])
        run = 0
        for stalled in held & still:
            run = run + 1 if stalled else 0
            best = max(best, run)
    return best


def test_ghost_failures_hold_gpus_without_progress() -> None:
    """A ghost keeps its GPUs and never progresses while the policy leaves it there (Sia keeps what a job holds);
    a failure that restores stalls a job only for its restore (≤ 250 s, a few rounds)."""
    physics = PhysicsOptions(failure_mode="ghost", horizon_s=2e5)
    res, ghost = _trace("sia", physics, lam=0.05, seed=0)
    _, restore = _trace("sia", PhysicsOptions(horizon_s=2e5), lam=0.05, seed=0)
    assert _longest_stall(restore) <= 6
    assert _longest_stall(ghost) > 100
    assert res.end_time_s <= 2e5 + 60


def test_sia_paper_is_sias_policy_at_positive_p_with_a_penalty() -> None:
    pol = make_policy("sia-paper")
    assert isinstance(pol, SiaPolicy) and pol.p == 0.5 and pol.lambda_n == -1.1 and pol.name == "sia-paper"


def test_the_reward_reading_cannot_start_a_job_under_the_bootstrap() -> None:
    """The reference's consequence: offered only 1 GPU (G = 1, U = 1), ``goodput`` with μ_na = +1.1 (a reward for
    idling) leaves every job waiting; Sia's penalty reading (``sia-paper``) runs them all."""
    physics = dataclasses.replace(ARTIFACT, horizon_s=5e4)
    wl = load_workload("small")
    idle = Simulator(wl, physics=physics).run(make_policy("goodput"), 0.0, 0)
    assert all(j.jct_s is None for j in idle.jobs)
    ran = Simulator(wl, physics=dataclasses.replace(ARTIFACT, horizon_s=3e6)).run(make_policy("sia-paper"), 0.0, 0)
    assert all(j.jct_s is not None for j in ran.jobs)


def test_cli_rules_and_job_trace(tmp_path: Path) -> None:
    out = tmp_path / "trace.parquet"
    png = tmp_path / "trace.png"
    res = oak("simulate", "--workload", "small", "--policy", "sia-paper", "--rules", "sia-artifact",
              "--failure-rate", "0.05", "--trace-jobs", str(out), "--trace-plot", str(png))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    tr = pd.read_parquet(out)
    assert list(tr.columns) == list(TRACE_COLUMNS) and len(tr) > 0
    assert np.all(tr["time_s"] % 60.0 == 0)
    for args, msg in (
        (("--rules", "sia"), "--rules 'sia'"),
        (("--failure-restarts", "3"), "--failure-restarts 3"),
        (("--failure-mode", "zombie"), "--failure-mode 'zombie'"),
    ):
        bad = oak("simulate", "--workload", "small", *args)
        assert bad.returncode == 2 and msg in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_the_trace_plot_shows_the_jobs_that_ran_longest_not_the_ones_that_waited() -> None:
    """The plot chose jobs by their span in the trace, waiting included: a job that waited all run and never
    held a GPU came first. It now ranks by the span of the rounds a job held GPUs (name order on ties), and by
    the trace's span only where no job ever held any."""
    from oak.sim.trace import longest_running

    rows = [("waiter", t, 0) for t in range(0, 1000, 60)] + [("waiter", 1000, 1)]
    rows += [("runner", t, 2) for t in range(0, 600, 60)] + [("brief", 0, 1), ("brief", 60, 1)]
    times = pd.DataFrame(rows, columns=["job", "time_s", "gpus"])
    assert longest_running(times, 2) == ["runner", "brief"]
    idle = times.assign(gpus=0)
    assert longest_running(idle, 1) == ["waiter"]


def test_sia_factor_ablation_scales_only_moves() -> None:
    """``oak-sia-factor`` (Table III cell (b) under the ``sia-paper`` reading): Sia's factor multiplies every
    configuration but the current one; the current one keeps OAK's U = G^p·K."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from oak.scoring import utility_matrix
    from oak.scoring.utility import RestartFactor, sia_move_factor
    from test_hybrid import PAPER_12, random_snapshot

    snap = random_snapshot(np.random.default_rng(7), PAPER_12, 6)
    snap = dataclasses.replace(snap, restarts=np.full(6, 150), age_s=np.full(6, 5000.0))  # r ≈ 0.1
    pol = make_policy("oak-sia-factor")
    assert pol.params.restart_factor is RestartFactor.SIA
    m = sia_move_factor(snap)
    held = np.flatnonzero(snap.current >= 0)
    assert np.all(m[held, snap.current[held]] == 1.0) and np.all(m < 1.0 + 1e-12)
    assert np.any(m < 0.5)
    off = utility_matrix(snap, make_policy("oak-no-restart").params)  # same age key, r = 1
    u = utility_matrix(snap, pol.params)
    rows = held[snap.valid[held, snap.current[held]]]
    assert np.allclose(u[rows, snap.current[rows]], off[rows, snap.current[rows]])
    assert np.all(u <= off + 1e-12)


def _sia_trace(tmp_path: Path, rows: list[str]) -> Workload:
    path = tmp_path / "trace.csv"
    path.write_text("name,time,application,num_replicas,batch_size\n" + "\n".join(rows) + "\n")
    return load_workload(str(path))


def _peak_and_first_type(workload: Workload, physics: PhysicsOptions, policy: str = "sia") -> tuple[dict, dict]:
    from oak.model.cluster import cluster_preset

    peak: dict[str, int] = {}
    first: dict[str, str] = {}

    def observe(snap: RoundSnapshot, alloc: Allocation, placed: list) -> None:
        for i, name in enumerate(snap.job_names):
            peak[name] = max(peak.get(name, 0), len(placed[i]))
            if name not in first and len(placed[i]) > 0:
                first[name] = snap.configs[int(alloc.config[i])].gpu_type

    Simulator(workload, cluster_preset("sia-64"), physics=physics).run(make_policy(policy), 0.0, 0, on_round=observe)
    return peak, first


def test_num_replicas_caps_adaptive_jobs_only_under_the_default_rules(tmp_path: Path) -> None:
    """A Sia trace's num_replicas is the job's maximum by default; under ``replicas_cap = False`` (part of
    sia-artifact) it is only the demand of rigid policies: an adaptive job alone on the cluster grows past it
    (through the exploration cap), and Gavel still runs it at exactly that demand."""
    wl = _sia_trace(tmp_path, ["big,0,imagenet,2,200"])
    assert wl.jobs[0].replicas_from_trace and wl.jobs[0].max_gpus == 2 and wl.jobs[0].requested_gpus == 2
    capped, _ = _peak_and_first_type(wl, dataclasses.replace(ARTIFACT, replicas_cap=True))
    lifted, _ = _peak_and_first_type(wl, ARTIFACT)
    assert capped["big"] <= 2 < lifted["big"], (capped, lifted)
    rigid, _ = _peak_and_first_type(wl, ARTIFACT, policy="gavel-throughput")
    assert rigid["big"] == 2
    oak_format = Workload("w", (JobSpec("big", "imagenet", 0.0, 1, 2),))
    assert _peak_and_first_type(oak_format, ARTIFACT)[0]["big"] <= 2  # an OAK-format bound is a bound


def test_a_never_run_jobs_first_type_is_a_tie_the_emptiest_type_takes(tmp_path: Path) -> None:
    """Under ``first_type_tie`` a job that has never run is worth the same on every type's 1-GPU configuration,
    and starts on the type with the most free GPUs (sia-64: aws and rtx have 24 each, aws first): without the
    rule Sia sends a lone cifar10 job to the fastest type (the A100s, dgx-ext)."""
    wl = _sia_trace(tmp_path, ["c,0,cifar10,1,128"])
    _, tie = _peak_and_first_type(wl, ARTIFACT)
    _, known = _peak_and_first_type(wl, dataclasses.replace(ARTIFACT, first_type_tie=False))
    assert tie["c"] == "aws" and known["c"] == "dgx-ext", (tie, known)
    from oak.engine.ledger import JobsState
    from oak.engine.model import ClusterModel
    from oak.model.cluster import cluster_preset

    model = ClusterModel(wl, cluster_preset("sia-64"), physics=ARTIFACT)
    st = JobsState.initial(np.zeros(1))
    st.arrived[:] = True
    snap = model.snapshot(st, 0.0, np.array([0]))
    offered = np.flatnonzero(snap.valid[0])
    assert len({snap.config_type[c] for c in offered}) == 3 and set(snap.config_gpus[offered]) == {1}
    assert np.all(snap.goodput[0, offered] == 1.0)
    assert snap.tie_config is not None and snap.configs[int(snap.tie_config[0])].gpu_type == "aws"
