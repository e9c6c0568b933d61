"""The product's OAK (``oak``, oak.policies.restart_aware): staying is free and moving pays, idling is never
rewarded, restores are not interrupted, no job starves under heavy failures; ``oak-paper`` stays the paper's."""

from __future__ import annotations

import dataclasses
import math
from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oak.errors import OakInputError
from oak.model.job import JobSpec
from oak.model.snapshot import Allocation, RoundSnapshot, frozen_array
from oak.policies import OakPolicy, make_policy
from oak.policies.restart_aware import (
    RestartAwareOakPolicy,
    WaitLedger,
    move_factor,
    move_restore_time,
    starts_and_moves,
    stint_factor,
    stint_starts,
    switching_factor,
)
from oak.scoring import UtilityParams
from oak.sim import PhysicsOptions, Simulator
from oak.workloads import Workload, load_workload
from support.snapshots import MIXED_12, PAPER_12, check_feasible, random_snapshot


def _held_snapshot(seed: int, cluster: object = PAPER_12, jobs: int = 4) -> RoundSnapshot:
    """A random snapshot in which every job holds one of its valid configurations, none restoring."""
    rng = np.random.default_rng(seed)
    snap = random_snapshot(rng, cluster, jobs)  # type: ignore[arg-type]
    current = np.array([rng.choice(np.flatnonzero(row)) for row in snap.valid], dtype=np.int64)
    return dataclasses.replace(
        snap,
        current=frozen_array(current, np.int64),
        restoring=frozen_array(np.zeros(jobs, bool), bool),
        remaining_work=frozen_array(rng.uniform(1e3, 1e5, jobs), np.float64),
    )


def test_registry_names_the_product_and_the_paper() -> None:
    assert isinstance(make_policy("oak"), RestartAwareOakPolicy)
    paper = make_policy("oak-paper")
    assert isinstance(paper, OakPolicy) and paper.params == UtilityParams() and paper.name == "oak-paper"
    for name in ("oak-no-age", "oak-no-restart", "oak-aggregate"):  # ablations of the paper's reading
        assert isinstance(make_policy(name), OakPolicy)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"p": -0.5}, "p="),
        ({"theta": 1.0}, "theta="),
        ({"theta": -0.1}, "theta="),
        ({"k_max": 0.5}, "k_max="),
        ({"max_wait_s": 0.0}, "max_wait_s="),
        ({"max_wait_s": math.nan}, "max_wait_s="),
        ({"guard_run_s": -1.0}, "guard_run_s="),
        ({"first_come": "no"}, "first_come='no'; expected True or False"),
        ({"switching": 1}, "switching=1; expected True or False"),
        (
            {"move_restart_factor": "failures"},
            "move_restart_factor='failures'; expected one of moves, all, none, stint, stint-moved",
        ),
    ],
)
def test_bad_parameters_are_input_errors(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(OakInputError, match=field):
        RestartAwareOakPolicy(**kwargs)


@given(st.integers(0, 10_000), st.sampled_from([PAPER_12, MIXED_12]))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_staying_is_free_and_moving_pays(seed: int, cluster: object) -> None:
    snap = _held_snapshot(seed, cluster)
    m = move_factor(snap)
    rows = np.arange(snap.num_jobs)
    assert np.all(m[rows, snap.current] == 1.0)
    assert np.all((m >= 0) & (m <= 1))
    s = switching_factor(snap)
    assert np.all((s >= 0) & (s <= 1))
    # a job without GPUs pays its restart whatever it gets: no configuration is discounted against another
    idle = dataclasses.replace(snap, current=frozen_array(np.full(snap.num_jobs, -1), np.int64))
    assert np.all(move_factor(idle) == 1.0)


@given(st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_no_restart_without_gain(seed: int) -> None:
    """A running job whose alternatives are no better than where it is (equal goodput) is never moved."""
    snap = _held_snapshot(seed, PAPER_12, jobs=3)
    good = np.where(snap.valid, snap.goodput[np.arange(3), snap.current][:, None], 0.0)
    # capacity for everyone's largest valid configuration, so nothing forces a move
    snap = dataclasses.replace(snap, goodput=frozen_array(good, np.float64), capacity=frozen_array([36], np.int64))
    alloc = make_policy("oak").decide(snap)
    assert np.array_equal(alloc.config, snap.current)


def test_a_job_whose_remaining_run_is_shorter_than_its_restore_never_moves() -> None:
    snap = _held_snapshot(1)
    near_done = dataclasses.replace(
        snap,
        remaining_work=frozen_array(np.full(snap.num_jobs, 1e-3), np.float64),
        goodput=frozen_array(np.where(snap.valid, snap.goodput * 10.0, 0.0), np.float64),
    )
    s = switching_factor(near_done)
    assert np.all(s[near_done.valid & (near_done.progress_rate > 0)] == 0.0)


@given(st.integers(0, 10_000), st.integers(0, 50), st.integers(0, 50), st.sampled_from([0, 1, 2]))
@settings(max_examples=60, deadline=None)
def test_failures_count_as_starts_not_moves_whatever_they_add_to_restarts(
    seed: int, moves: int, failures: int, k: int
) -> None:
    """A world where a failure adds k restarts (``--failure-restarts k``): the same history of moves and failures
    gives the same starts, moves, move restore time and move factor for every k (a failure adding 2 restarts
    once made every failure count as a move too, and locked a long job that failed often at its size)."""
    snap = _held_snapshot(seed)
    n = snap.num_jobs

    def world(k: int) -> RoundSnapshot:
        return dataclasses.replace(
            snap,
            restarts=frozen_array(np.full(n, moves + k * failures), np.int64),
            failures=frozen_array(np.full(n, failures), np.int64),
            t_ckpt_s=frozen_array(np.full(n, 60.0 * (1 + moves + failures)), np.float64),
            failure_restarts=k,
        )

    starts, got = starts_and_moves(world(k))
    assert np.all(starts == 1 + moves + failures) and np.all(got == moves)
    assert np.allclose(move_restore_time(world(k)), 60.0 * (1 + moves))  # 60 s per start: the moves' own
    assert np.array_equal(move_factor(world(k)), move_factor(world(1)))
    # a failure adding one restart (every runtime): starts = 1 + restarts, as the snapshot counts them
    assert np.all(starts_and_moves(world(1))[0] == 1 + world(1).restarts)


@given(st.integers(0, 10_000))
@settings(max_examples=40, deadline=None)
def test_with_keep_restoring_a_restoring_job_keeps_its_configuration(seed: int) -> None:
    snap = _held_snapshot(seed, PAPER_12, jobs=5)
    restoring = np.zeros(5, bool)
    restoring[0] = True
    snap = dataclasses.replace(snap, restoring=frozen_array(restoring, bool))
    alloc = make_policy("oak", keep_restoring=True).decide(snap)
    check_feasible(snap, alloc.config)
    if snap.config_gpus[snap.current[0]] <= snap.capacity[0]:
        assert alloc.config[0] == snap.current[0]


@given(st.integers(0, 10_000))
@settings(max_examples=40, deadline=None)
def test_a_restoring_job_is_valued_as_one_that_holds_its_gpus(seed: int) -> None:
    """By default a restore is priced, not protected: whether a job is inside its restore changes nothing in
    ``oak``'s decision (its move factor already charges the restart), unless the world keeps restores
    (``RoundSnapshot.kept``)."""
    snap = _held_snapshot(seed, PAPER_12, jobs=5)
    restoring = np.zeros(5, bool)
    restoring[: 1 + seed % 3] = True
    inside = dataclasses.replace(snap, restoring=frozen_array(restoring, bool))
    policy = make_policy("oak", max_wait_s=math.inf)
    assert np.array_equal(policy.decide(inside).config, policy.decide(snap).config)


def test_a_short_newcomer_takes_the_gpus_of_a_long_job_still_restoring() -> None:
    """One 12-GPU configuration for both jobs: job 0 holds it and is restoring (no progress yet), job 1 waits with
    a hundredth of its work left. Priced, the restore yields to the newcomer's lower admission cost, as a running
    job would; kept (``keep_restoring=True``) or kept by the world (``kept``), job 0 stays."""
    base = _two_waiting((1e6, 1e4))
    twelve = int(np.flatnonzero(base.valid[0])[0])
    snap = dataclasses.replace(
        base,
        current=frozen_array([twelve, -1], np.int64),
        restoring=frozen_array([True, False], bool),
        t_progress_s=frozen_array([0.0, 0.0], np.float64),
    )
    priced = make_policy("oak", max_wait_s=math.inf).decide(snap)
    assert priced.config[0] < 0 and priced.config[1] == twelve
    kept = make_policy("oak", max_wait_s=math.inf, keep_restoring=True).decide(snap)
    assert kept.config[0] == twelve and kept.config[1] < 0
    world = dataclasses.replace(snap, kept=frozen_array([twelve, -1], np.int64))
    assert make_policy("oak", max_wait_s=math.inf).decide(world).config[0] == twelve


@pytest.mark.parametrize(("workload", "lam", "seed"), [("small", 0.5, 0), ("medium", 0.3, 1), ("congestion", 0.2, 2)])
def test_no_job_starves_under_heavy_failures(workload: str, lam: float, seed: int) -> None:
    """Failure rates far above the paper's (λ per job per round): every job still finishes before the horizon."""
    result = Simulator(load_workload(workload), physics=PhysicsOptions(horizon_s=3e6)).run(
        make_policy("oak"), lam, seed
    )
    assert all(j.jct_s is not None for j in result.jobs), [j.name for j in result.jobs if j.jct_s is None]


def test_product_restarts_less_than_the_paper_reading_on_medium() -> None:
    """The mechanism the product fixes, on the paper's medium workload at λ = 0 (deterministic): the literal
    reading preempts jobs whose U fell below μ_na and moves jobs whose r dropped (8.25 restarts per job at
    commit 82ab4b9); the product moves only for gain."""
    sim = Simulator(load_workload("medium"))
    paper = sim.run(make_policy("oak-paper"), 0.0, 0)
    product = sim.run(make_policy("oak"), 0.0, 0)
    assert product.to_json()["restarts_per_job"] < 0.5 * paper.to_json()["restarts_per_job"]


def _waiting_snapshot(seed: int, jobs: int = 6) -> RoundSnapshot:
    """A random snapshot in which no job holds GPUs (so ages are waiting streaks)."""
    snap = random_snapshot(np.random.default_rng(seed), PAPER_12, jobs)
    return dataclasses.replace(
        snap,
        current=frozen_array(np.full(jobs, -1), np.int64),
        restoring=frozen_array(np.zeros(jobs, bool), bool),
    )


@given(st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_starving_jobs_are_admitted_longest_wait_first(seed: int) -> None:
    """Jobs that waited max_wait_s at a stretch get GPUs, oldest first, while their smallest configurations fit;
    the first that does not fit blocks younger ones (none passes it by the guard)."""
    snap = _waiting_snapshot(seed)
    policy = RestartAwareOakPolicy(max_wait_s=1000.0)
    alloc = policy.decide(snap)
    check_feasible(snap, alloc.config)
    starving = sorted(np.flatnonzero(snap.age_s >= 1000.0).tolist(), key=lambda i: -snap.age_s[i])
    free = int(snap.capacity[0])
    for i in starving:
        need = int(snap.config_gpus[snap.valid[i]].min())
        if need > free:
            break
        assert alloc.config[i] >= 0, (i, need, free)
        free -= need
    # the state names when every job last held GPUs: now for those allocated, never for the rest
    assert isinstance(alloc.state, WaitLedger)
    assert set(alloc.state.last_held_s) == {snap.job_names[i] for i in np.flatnonzero(alloc.config >= 0)}


def test_a_job_admitted_by_the_guard_keeps_its_configuration_while_protected() -> None:
    snap = _held_snapshot(3, PAPER_12, jobs=4)
    name = snap.job_names[0]
    t = snap.time_s
    ledger = WaitLedger(MappingProxyType({n: t - 60.0 for n in snap.job_names}), MappingProxyType({name: t + 600.0}))
    # every other job values every configuration far above job 0's: unprotected, job 0 would be moved or dropped
    good = np.where(snap.valid, snap.goodput * np.array([1.0, 50.0, 50.0, 50.0])[:, None], 0.0)
    snap = dataclasses.replace(snap, goodput=frozen_array(good, np.float64), policy_state=ledger)
    policy = RestartAwareOakPolicy(max_wait_s=1000.0)
    assert policy.decide(snap).config[0] == snap.current[0]
    expired = WaitLedger(ledger.last_held_s, MappingProxyType({name: t}))
    assert policy.decide(dataclasses.replace(snap, policy_state=expired)).state.protected_until_s == {}


def _stream_behind_a_big_job(gap_s: float = 1200.0, small: int = 40) -> Workload:
    """A job needing the whole of paper-12 behind a stream of small jobs that, two at a time, outvalue it."""
    jobs = [JobSpec(f"s{i:03d}", "cifar10", gap_s * i, 1, 4) for i in range(small)]
    jobs.append(JobSpec("big", "imagenet", 1.0, 12, 12))
    return Workload("stream", tuple(sorted(jobs, key=lambda j: j.submit_time_s)))


def _longest_waits(sim: Simulator, policy: RestartAwareOakPolicy, lam: float, seed: int) -> dict[str, float]:
    """Per job, its longest stretch without GPUs, from the decisions of every round."""
    last: dict[str, float] = {}
    worst: dict[str, float] = {}

    def observe(snap: RoundSnapshot, alloc: Allocation, placed: object) -> None:
        for i, n in enumerate(snap.job_names):
            arrived = snap.time_s - snap.age_s[i]
            if snap.current[i] >= 0 or alloc.config[i] >= 0:
                last[n] = snap.time_s
            worst[n] = max(worst.get(n, 0.0), snap.time_s - max(last.get(n, arrived), arrived))

    result = sim.run(policy, lam, seed, on_round=observe)
    assert all(j.jct_s is not None for j in result.jobs)
    return worst


@pytest.mark.parametrize(("lam", "seed"), [(0.0, 0), (0.1, 1)])
def test_the_waiting_guard_bounds_every_wait(lam: float, seed: int) -> None:
    """Without the guard the big job waits out most of the stream; with it no job waits longer than max_wait_s
    + guard_run_s (a protected job ahead) + the longest restore + two rounds (detection and the restore's)."""
    sim = Simulator(_stream_behind_a_big_job())
    off = _longest_waits(sim, RestartAwareOakPolicy(max_wait_s=math.inf), lam, seed)
    max_wait, guard_run = 1800.0, 600.0
    bound = max_wait + guard_run + float(sim.model.restore_delay.max()) + 2 * 60.0
    assert off["big"] > 3 * bound  # the stream starves it: the scenario tests something
    on = _longest_waits(sim, RestartAwareOakPolicy(max_wait_s=max_wait, guard_run_s=guard_run), lam, seed)
    assert max(on.values()) <= bound, sorted(on.items(), key=lambda kv: -kv[1])[:3]


def test_a_displaced_job_takes_idle_gpus_rather_than_wait() -> None:
    """A running job whose restore would outlast its remaining run (s = 0 on every move) and that loses its
    configuration to a far more valuable job still takes the GPUs left idle: a move is worth more than idling."""
    snap = _held_snapshot(5, PAPER_12, jobs=2)
    gpus = snap.config_gpus
    valid = np.array([(gpus == 8) | (gpus == 4), gpus == 8])  # job 0 on 8 GPUs or 4; job 1 only on 8
    good = np.where(valid, np.array([[1.0], [50.0]]), 0.0)  # job 1 is worth 50x per configuration
    snap = dataclasses.replace(
        snap,
        valid=frozen_array(valid, bool),
        goodput=frozen_array(good, np.float64),
        progress_rate=frozen_array(np.where(valid, 1.0, 0.0), np.float64),
        current=frozen_array([int(np.flatnonzero(gpus == 8)[0]), -1], np.int64),
        remaining_work=frozen_array([1e-9, 1e4], np.float64),
    )
    assert switching_factor(snap)[0, gpus == 4] == 0.0
    alloc = RestartAwareOakPolicy(max_wait_s=math.inf).decide(snap)
    assert snap.config_gpus[alloc.config[1]] == 8  # the valuable job displaces it
    assert alloc.config[0] >= 0 and snap.config_gpus[alloc.config[0]] == 4  # and it moves rather than idles


def test_failures_do_not_keep_a_job_from_doubling() -> None:
    """The lock-in under the Sia artifact's 2× exploration cap, on one round: a job alone on the cluster holds 2
    GPUs and may grow to 4, which nearly doubles its goodput (×1.97, as ImageNet's on paper-12); failures have
    taken half its time (r = T_progress/(T_progress + T_ckpt + P) ≈ 0.49), and its remaining run dwarfs one
    restore (s ≈ 1). With r from all its restore time (``move_restart_factor="all"``) moving is worth
    (1.97·r·s)^p < 1^p and the job stays on 2 GPUs for good. r from its own moves' restores ("moves": 1 start of
    41 here, r ≈ 0.95) takes the 4, as s alone does and as the product's r from its stint does (10,000 s of
    progress against one 244-s restore); under "moves" a job that moved as often as this one failed keeps r ≈ 0.49
    and stays (r damps a job that keeps moving; the stint rule damps each move as it happens instead)."""
    snap, two, four = _doubling_round(10_000.0, 40, 40, ckpt_s=10_000.0, penalty_s=250.0, remaining=1e6)
    s = switching_factor(snap)[0, four]
    r = 10_000.0 / (20_000.0 + 250.0)
    assert s > 0.99 and 1.97 * r * s < 1.0  # the bar a doubling must clear: G_4/G_2 > 1/(r·s)
    moves = RestartAwareOakPolicy(move_restart_factor="moves")
    assert RestartAwareOakPolicy(move_restart_factor="all").decide(snap).config[0] == two
    assert moves.decide(snap).config[0] == four
    assert make_policy("oak").decide(snap).config[0] == four  # by its stint: 10,000 s against a 244-s restore
    assert RestartAwareOakPolicy(move_restart_factor="none").decide(snap).config[0] == four
    mover = dataclasses.replace(snap, failures=frozen_array([0], np.int64))  # the same restores, all its own moves
    assert moves.decide(mover).config[0] == two


def _doubling_round(
    progress_s: float,
    restarts: int,
    failures: int = 0,
    *,
    ckpt_s: float | None = None,
    penalty_s: float = 50.0,
    remaining: float = 1e7,
) -> tuple[RoundSnapshot, int, int]:
    """One job alone on paper-12 on 2 GPUs that may grow to 4 (×1.97 goodput), its remaining run long (s ≈ 1),
    a 50-s restore per start measured unless ``ckpt_s`` says otherwise; (snapshot, index of 2 GPUs, index of 4)."""
    base = random_snapshot(np.random.default_rng(3), PAPER_12, 1)
    gpus = np.asarray(base.config_gpus)
    two, four = (int(np.flatnonzero(gpus == g)[0]) for g in (2, 4))
    valid = (gpus <= 4)[None, :]
    goodput = np.zeros(valid.shape)
    goodput[0, gpus == 1], goodput[0, gpus == 2], goodput[0, gpus == 4] = 0.55, 1.0, 1.97
    snap = dataclasses.replace(
        base,
        goodput=frozen_array(goodput, np.float64),
        progress_rate=frozen_array(goodput, np.float64),
        valid=frozen_array(valid, bool),
        current=frozen_array([two], np.int64),
        restoring=frozen_array([False], bool),
        t_progress_s=frozen_array([progress_s], np.float64),
        t_ckpt_s=frozen_array([50.0 * (restarts + 1) if ckpt_s is None else ckpt_s], np.float64),
        restarts=frozen_array([restarts], np.int64),
        failures=frozen_array([failures], np.int64),
        restart_penalty_s=frozen_array([penalty_s], np.float64),
        remaining_work=frozen_array([remaining], np.float64),
        policy_state=None,
    )
    return snap, two, four


def test_a_stint_pays_for_its_move_before_the_next_and_old_moves_are_forgotten() -> None:
    """``move_restart_factor="stint"``: r = τ/(τ + D), τ the progress since the job's last move. A job that has
    moved four times in its first 300 s of progress (lifetime r = 300/(300 + 250 + 50) = 0.5: a doubling worth
    1.97 is worth 0.985 < 1, the lock under the "moves" rule) but has run 260 s since its last move doubles
    (r = 260/310); one that moved 10 s of progress ago stays (r = 10/60), where s alone would move it again. A
    failure's restart does not start a stint; the ledger the policy returns carries the stint to the next round."""
    policy = RestartAwareOakPolicy(move_restart_factor="stint")
    snap, two, four = _doubling_round(300.0, restarts=4)
    ledger = WaitLedger(
        moves=MappingProxyType({snap.job_names[0]: 4}),
        progress_s=MappingProxyType({snap.job_names[0]: 280.0}),
        stint_from_s=MappingProxyType({snap.job_names[0]: 40.0}),
    )
    snap = dataclasses.replace(snap, policy_state=ledger)
    assert stint_starts(snap, ledger)[0] == 40.0
    assert stint_factor(snap, snap.t_progress_s - 40.0)[0] == pytest.approx(260.0 / 310.0)
    assert RestartAwareOakPolicy(move_restart_factor="moves").decide(snap).config[0] == two  # the lifetime count
    assert policy.decide(snap).config[0] == four
    assert make_policy("oak").decide(snap).config[0] == four  # the product's rule

    just = dataclasses.replace(  # the previous round saw 3 moves at 290 s of progress: the 4th came after it
        snap,
        policy_state=dataclasses.replace(
            ledger,
            moves=MappingProxyType({snap.job_names[0]: 3}),
            progress_s=MappingProxyType({snap.job_names[0]: 290.0}),
        ),
    )
    assert stint_starts(just, just.policy_state)[0] == 290.0  # type: ignore[arg-type]
    assert policy.decide(just).config[0] == two
    assert RestartAwareOakPolicy(move_restart_factor="none").decide(just).config[0] == four
    note = policy.notes(just, policy.decide(just))[0]  # why it stays (oak explain, oak status)
    assert "last move was 10 s of progress ago" in note and "r = 0.17" in note and "4 GPUs" in note, note
    assert policy.notes(snap, policy.decide(snap)) == {}  # it moves: nothing to explain

    failed = dataclasses.replace(  # a failure since: one more restart, the same moves, the same stint
        snap,
        restarts=frozen_array([5], np.int64),
        failures=frozen_array([1], np.int64),
        t_ckpt_s=frozen_array([300.0], np.float64),
    )
    assert stint_starts(failed, ledger)[0] == 40.0
    assert policy.decide(failed).config[0] == four

    state = policy.decide(just).state
    assert isinstance(state, WaitLedger)
    name = snap.job_names[0]
    assert (state.moves[name], state.progress_s[name], state.stint_from_s[name]) == (4, 300.0, 290.0)
    later = dataclasses.replace(just, t_progress_s=frozen_array([360.0], np.float64), policy_state=state)
    assert policy.decide(later).config[0] == four  # 70 s since the move: r = 70/120, 1.97·r > 1


def test_a_first_stint_is_held_only_where_the_rule_says() -> None:
    """``move_restart_factor="stint-moved"``: a job that has not moved since its first start is not held (r = 1:
    that start was no move, nothing is owed for it), so 10 s into its run it doubles where s alone would, while
    "stint" holds it (r = 10/60). Once it has moved, both hold it until its progress pays for that restore; the
    policy's note says why it stays."""
    snap, two, four = _doubling_round(10.0, restarts=0)
    first_free = RestartAwareOakPolicy(move_restart_factor="stint-moved")
    assert RestartAwareOakPolicy(move_restart_factor="stint").decide(snap).config[0] == two
    assert first_free.decide(snap).config[0] == four
    assert RestartAwareOakPolicy(move_restart_factor="none").decide(snap).config[0] == four
    assert first_free.notes(snap, first_free.decide(snap)) == {}

    name = snap.job_names[0]
    moved = dataclasses.replace(  # the previous round saw no move at 5 s of progress: the move came after it
        snap,
        restarts=frozen_array([1], np.int64),
        t_ckpt_s=frozen_array([100.0], np.float64),
        policy_state=WaitLedger(
            moves=MappingProxyType({name: 0}),
            progress_s=MappingProxyType({name: 5.0}),
            stint_from_s=MappingProxyType({name: 0.0}),
        ),
    )
    assert first_free.decide(moved).config[0] == two  # r = 5/(5 + 50)
    assert RestartAwareOakPolicy(move_restart_factor="stint").decide(moved).config[0] == two
    note = first_free.notes(moved, first_free.decide(moved))[0]
    assert "last move was 5 s of progress ago" in note and "r = 0.09" in note, note


def _two_waiting(remaining: tuple[float, float]) -> RoundSnapshot:
    """Two jobs without GPUs, alike but for their remaining work, both valid only on the whole 12-GPU cluster."""
    base = random_snapshot(np.random.default_rng(5), PAPER_12, 2)
    gpus = np.asarray(base.config_gpus)
    valid = np.repeat((gpus == 12)[None, :], 2, axis=0)
    goodput = np.where(valid, 1.0, 0.0)
    return dataclasses.replace(
        base,
        goodput=frozen_array(goodput, np.float64),
        progress_rate=frozen_array(goodput * 10.0, np.float64),
        valid=frozen_array(valid, bool),
        current=frozen_array([-1, -1], np.int64),
        restoring=frozen_array([False, False], bool),
        remaining_work=frozen_array(remaining, np.float64),
        kept=None,
        tie_config=None,
    )


@pytest.mark.parametrize("order", [(1e6, 1e4), (1e4, 1e6)])
def test_the_job_closer_to_its_end_is_admitted_first(order: tuple[float, float]) -> None:
    """Admission cost by remaining time: of two otherwise equal jobs that cannot both run, the one with less work
    left takes the GPUs, in either order; with one θ for all (``remaining_exponent=0``) they tie."""
    snap = _two_waiting(order)
    short = int(np.argmin(order))
    alloc = RestartAwareOakPolicy(max_wait_s=math.inf).decide(snap)
    assert alloc.config[short] >= 0 and alloc.config[1 - short] < 0
    flat = RestartAwareOakPolicy(max_wait_s=math.inf, remaining_exponent=0).decide(snap)
    assert flat.values is not None
    assert flat.values[0].max() == flat.values[1].max()


@pytest.mark.parametrize("jobs", [2, 3, 5])
def test_of_equal_jobs_the_first_come_is_served_first(jobs: int) -> None:
    """``first_come``: of equal waiting jobs (the same values everywhere) of which one can run, the first listed
    (the engine lists jobs by submission) takes the GPUs, whatever exact method solves the round; the exact DP's
    own tie rule (``first_come=False``, the rule before) gives them to the last. Either is worth the same."""
    two = _two_waiting((1e4, 1e4))
    snap = dataclasses.replace(
        random_snapshot(np.random.default_rng(5), PAPER_12, jobs),
        **{
            f: frozen_array(np.repeat(np.asarray(getattr(two, f))[:1], jobs, axis=0), getattr(two, f).dtype)
            for f in ("goodput", "progress_rate", "valid", "current", "restoring", "remaining_work")
        },
        age_s=frozen_array(np.linspace(1000.0, 100.0, jobs), np.float64),  # listed oldest first, as submitted
        kept=None,
        tie_config=None,
    )
    for solver in ("auto", "highs"):
        first = RestartAwareOakPolicy(max_wait_s=math.inf, solver=solver).decide(snap)
        assert first.config[0] >= 0 and (first.config[1:] < 0).all(), solver
    before = RestartAwareOakPolicy(max_wait_s=math.inf, first_come=False).decide(snap)
    assert before.config[-1] >= 0 and (before.config[:-1] < 0).all()
    assert before.objective == pytest.approx(first.objective, rel=1e-12)
    # listed out of order (a delayed arrival, a job sent to `oak serve` to start later): the oldest still first
    oldest = jobs // 2
    ages = np.full(jobs, 100.0)
    ages[oldest] = 500.0
    shuffled = dataclasses.replace(snap, age_s=frozen_array(ages, np.float64))
    alloc = RestartAwareOakPolicy(max_wait_s=math.inf).decide(shuffled)
    assert alloc.config[oldest] >= 0 and (np.delete(alloc.config, oldest) < 0).all()
    assert alloc.objective == pytest.approx(first.objective, rel=1e-12)


@pytest.mark.parametrize("mode", ["soft", "full"])
def test_a_long_wait_is_credited_against_the_remaining_time(mode: str) -> None:
    """Admission by slowdown (``credit_wait``): of two jobs that cannot both run, the shorter is admitted, unless
    the longer has waited many times its own remaining run; the credit is scale-free (seconds cancel) and
    changes nothing for jobs that have not waited."""
    from oak.policies.restart_aware import admission_costs

    snap = dataclasses.replace(_two_waiting((1e4, 4e4)), t_queue_s=frozen_array([0.0, 0.0], np.float64))
    # remaining times 1e3 and 4e3 s (rate 10), neither has waited
    policy = RestartAwareOakPolicy(max_wait_s=math.inf, credit_wait=mode)
    np.testing.assert_array_equal(admission_costs(snap, 0.5, 0.5, mode), admission_costs(snap, 0.5, 0.5))
    assert policy.decide(snap).config[0] >= 0
    waited = dataclasses.replace(snap, t_queue_s=frozen_array([0.0, 20 * 4e3], np.float64))
    alloc = policy.decide(waited)
    assert alloc.config[1] >= 0 and alloc.config[0] < 0
    assert RestartAwareOakPolicy(max_wait_s=math.inf).decide(waited).config[0] >= 0  # no credit: the shorter
    scaled = dataclasses.replace(
        waited,
        remaining_work=frozen_array(np.asarray(waited.remaining_work) * 1000.0, np.float64),
        t_queue_s=frozen_array(np.asarray(waited.t_queue_s) * 1000.0, np.float64),
    )
    np.testing.assert_allclose(
        admission_costs(scaled, 0.5, 0.5, mode), admission_costs(waited, 0.5, 0.5, mode), rtol=1e-12
    )
    with pytest.raises(OakInputError, match="credit_wait"):
        RestartAwareOakPolicy(credit_wait="yes")


def test_admission_costs_follow_remaining_time_and_are_scale_free() -> None:
    from oak.policies.restart_aware import THETA_MAX, admission_costs

    snap = random_snapshot(np.random.default_rng(11), PAPER_12, 6)
    work = np.array([1e3, 1e4, 1e5, 1e6, 1e7, 0.0])
    snap = dataclasses.replace(snap, remaining_work=frozen_array(work, np.float64))
    cost = admission_costs(snap, 0.5, 0.5)
    rate = np.where(snap.valid, snap.progress_rate, 0).max(axis=1)
    assert np.all(rate > 0)
    order = np.argsort(work[:5] / rate[:5])
    assert np.all(np.diff(cost[:5][order]) >= 0)  # longer left, dearer admission
    assert len(set(cost[:5].round(12))) > 1 and cost[5] == 0.5  # they differ; no work left: plain θ
    assert np.all((cost >= 0) & (cost <= THETA_MAX))
    scaled = dataclasses.replace(snap, remaining_work=frozen_array(work * 1000.0, np.float64))
    np.testing.assert_allclose(admission_costs(scaled, 0.5, 0.5), cost, rtol=1e-12)  # seconds cancel
    assert np.all(admission_costs(snap, 0.5, 0.0) == 0.5)
    with pytest.raises(OakInputError, match="remaining_exponent"):
        RestartAwareOakPolicy(remaining_exponent=-1)


def test_a_job_of_unknown_length_pays_the_plain_admission_cost() -> None:
    """A runtime's command job that has not reported its length and speed (``work_known`` False) pays θ and is
    left out of the reference R̄: its placeholder work (a few steps) does not make it look about to finish."""
    from oak.policies.restart_aware import admission_costs

    snap = dataclasses.replace(_two_waiting((1e4, 10.0)), work_known=frozen_array([True, False], bool))
    cost = admission_costs(snap, 0.5, 0.5)
    assert cost[1] == 0.5 and cost[0] == pytest.approx(0.5)  # the known job alone: its own reference
    alloc = RestartAwareOakPolicy(max_wait_s=math.inf).decide(
        dataclasses.replace(_two_waiting((1e4, 10.0)), work_known=None)
    )
    assert alloc.config[1] >= 0  # taken at its word, the 10-unit job would go first


def test_length_known_only_once_a_command_job_reports_it() -> None:
    from oak.runtime.jobs_file import parse_jobs
    from oak.runtime.learned import LearnedGoodput
    from oak.runtime.store import JobRecord

    text = (
        "jobs:\n  - {name: c, command: [python, x.py], max_gpus: 2}\n"
        "  - {name: t, command: [python, x.py], target_steps: 50, max_gpus: 2}\n"
        "  - {name: w, model: tiny, target_steps: 50, max_gpus: 2}\n"
    )
    c, t, w = parse_jobs(text, "j.yaml").jobs
    assert LearnedGoodput.length_known(w, None)  # a packaged worker: target steps and catalog speed
    assert not LearnedGoodput.length_known(c, None) and not LearnedGoodput.length_known(t, None)
    r = JobRecord(name="t")
    assert not LearnedGoodput.length_known(t, r)  # its length is declared, its speed not yet measured
    r.steplog = {"version": 1, "entries": []}
    assert not LearnedGoodput.length_known(t, r)  # a log without entries
    r.steplog = {"version": 1, "entries": [{"nodes": 1, "replicas": 1, "local_bsz": 64, "elapsed_s": 2.0, "steps": 10}]}
    assert LearnedGoodput.length_known(t, r)
    r.total_steps = 0
    assert not LearnedGoodput.length_known(c, r)  # measured speed, unknown length
    r.total_steps = 300
    assert LearnedGoodput.length_known(c, r)


def test_a_running_job_is_not_displaced_for_being_long() -> None:
    """A job that holds GPUs pays at most θ: a waiting job longer than the round's typical one (θ_1 > θ) does
    not preempt a running job that is longer still, as it would if the running job paid its own θ_0 > θ_1. Jobs
    0 and 1 fit only on 8 GPUs (not both at once), job 2 on 4 beside either; remaining times 1e4, 5e3, 1e3 s."""
    from oak.policies.restart_aware import admission_costs

    base = random_snapshot(np.random.default_rng(7), PAPER_12, 3)
    gpus = np.asarray(base.config_gpus)
    valid = np.stack([gpus == 8, gpus == 8, gpus == 4])
    goodput = np.where(valid, 1.0, 0.0)
    eight = int(np.flatnonzero(gpus == 8)[0])
    snap = dataclasses.replace(
        base,
        goodput=frozen_array(goodput, np.float64),
        progress_rate=frozen_array(goodput * 10.0, np.float64),
        valid=frozen_array(valid, bool),
        current=frozen_array([eight, -1, -1], np.int64),
        restoring=frozen_array([False] * 3, bool),
        remaining_work=frozen_array([1e5, 5e4, 1e4], np.float64),
        kept=None,
        tie_config=None,
    )
    cost = admission_costs(snap, 0.5, 0.5)
    assert cost[0] == 0.5 and 0.5 < cost[1] < 0.95 and cost[2] < 0.5
    alloc = RestartAwareOakPolicy(max_wait_s=math.inf).decide(snap)
    assert alloc.config[0] == eight and alloc.config[1] < 0 and alloc.config[2] >= 0
    # the same round with job 0 waiting too: job 1, the shorter, is admitted
    idle = dataclasses.replace(snap, current=frozen_array([-1, -1, -1], np.int64))
    alloc = RestartAwareOakPolicy(max_wait_s=math.inf).decide(idle)
    assert alloc.config[0] < 0 and alloc.config[1] >= 0


def test_a_replayed_command_job_is_of_unknown_length_until_it_has_measured_steps() -> None:
    """``oak replay`` models what the runtime knew: a learned (command) job's length and speed are placeholders
    (``work_known`` False) until it has run and measured a step time; the other jobs' are known throughout."""
    wl = load_workload("small")
    learn = wl.jobs[1].name
    seen: list[tuple[bool, bool, bool]] = []

    def observe(snap: RoundSnapshot, alloc: Allocation, *_: object) -> None:
        if learn in snap.job_names:
            assert snap.work_known is not None
            i = snap.job_names.index(learn)
            others = [k for k in range(snap.num_jobs) if k != i]
            assert snap.work_known[others].all()
            seen.append((bool(snap.work_known[i]), bool(snap.current[i] >= 0), bool(snap.restoring[i])))

    Simulator(wl, learn={learn}).run(make_policy("oak"), 0.0, 0, on_round=observe)
    assert seen[0] == (False, False, False)  # before its first start
    first = next(k for k, (known, _, _) in enumerate(seen) if known)  # once it has measured steps
    assert seen[first][1] and first > 0  # it ran before its length counted, and counts from the next round
    assert all(not held or restoring for _, held, restoring in seen[:first])  # not before it made progress
    assert all(known for known, _, _ in seen[first:])


@pytest.mark.parametrize("max_wait_s", [86_400.0, 900.0])
def test_the_ledger_as_arrays_and_as_dictionaries_gives_the_same_runs(
    max_wait_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large rounds keep the ledger as arrays, small ones as dictionaries (``ARRAY_LEDGER_MIN_JOBS``): forcing
    either on a whole run (with the waiting guard idle, and with it admitting and protecting jobs) gives the
    same job completion times and the same final ledger."""
    import oak.policies.restart_aware as ra
    from oak.model.cluster import cluster_preset
    from oak.sim.simulator import Simulator
    from oak.workloads import load_workload

    sim = Simulator(load_workload("medium"), cluster_preset("paper-12"))
    runs = []
    for threshold in (0, 10**9):
        monkeypatch.setattr(ra, "ARRAY_LEDGER_MIN_JOBS", threshold)
        states: list[object] = []

        def keep(snap: object, alloc: Allocation, placed: object, states: list[object] = states) -> None:
            states.append(alloc.state)

        res = sim.run(RestartAwareOakPolicy(max_wait_s=max_wait_s), 0.1, 1, on_round=keep)
        runs.append(([j.jct_s for j in res.jobs], states))
    (jct_a, states_a), (jct_b, states_b) = runs
    assert jct_a == jct_b
    assert len(states_a) == len(states_b) > 100
    assert all(a == b for a, b in zip(states_a, states_b, strict=True))
    assert type(states_a[-1].moves).__name__ == "_Column" and type(states_b[-1].moves).__name__ == "mappingproxy"
    if max_wait_s < 3_600:  # the guard admitted and protected jobs: both forms carried protections
        assert any(len(s.protected_until_s) for s in states_a)
