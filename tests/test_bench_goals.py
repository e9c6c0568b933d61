"""The [fast-at-scale] goals the benchmarks print: which configuration measures which goal, and the verdict with
how far a missed goal is from its target (pure data: no run, no clock)."""

from __future__ import annotations

import pytest

from oak.cli.bench import Goal, reproduce_goal, sim_goals, sweep_goal


def _row(rounds_per_s: float = 1000.0, median_ms: float = 0.2, wall_s: float = 2.0) -> dict[str, float]:
    return {"rounds_per_s": rounds_per_s, "decision_ms_median": median_ms, "wall_s": wall_s}


def test_paper_scale_goals_are_met_at_their_thresholds_and_missed_by_a_stated_factor() -> None:
    met = sim_goals("oak", "medium", 12, "paper-12", 0.1, _row(5000.0, 0.05), None)
    assert [g.met for g in met] == [True, True]
    assert all("short" not in g.measured and "over" not in g.measured for g in met)
    missed = sim_goals("oak", "medium", 12, "paper-12", 0.1, _row(1250.0, 0.2), None)
    assert [g.met for g in missed] == [False, False]
    assert "1,250 rounds/s, 4.00x short" in missed[0].measured and "0.200 ms, 4.00x over" in missed[1].measured
    assert missed[0].line().endswith("— missed") and "[fast-at-scale]" in missed[0].line()


@pytest.mark.parametrize(
    ("workload", "jobs", "cluster", "lam"),
    [
        ("small", 6, "paper-12", 0.1),
        ("medium", 12, "sia-64", 0.1),
        ("t", 1000, "sia-64x32", 0.1),
        ("t", 999, "sia-64x8", 0.1),
    ],
)
def test_other_configurations_measure_no_goal(workload: str, jobs: int, cluster: str, lam: float) -> None:
    assert sim_goals("oak", workload, jobs, cluster, lam, _row(), 2.0) == []


def test_the_goals_are_the_products_only() -> None:
    assert sim_goals("oak", "medium", 12, "paper-12", 0.1, _row(), None) != []
    assert sim_goals("sia", "medium", 12, "paper-12", 0.1, _row(), None) == []


def test_the_large_trace_goals() -> None:
    (philly,) = sim_goals("oak", "philly", 1000, "sia-64x32", 0.05, _row(wall_s=12.5), None)
    assert philly.met is False and "12.5 s, 1.25x over" in philly.measured
    (ok,) = sim_goals("oak", "philly", 1000, "sia-64x32", 0.05, _row(wall_s=7.6), None)
    assert ok.met is True
    # ≥ 5x against the code before warm starts: an older commit, so one run states its figures, no verdict
    (big,) = sim_goals("oak", "synth", 1280, "sia-64x8", 0.1, _row(wall_s=15.5), 2.42)
    assert big.met is None and "2.42x faster than the cold reference" in big.measured
    assert big.line().endswith("not decided by one run")


def test_the_pool_and_reproduce_goals() -> None:
    assert sweep_goal(4, 3.0) is None
    good, bad = sweep_goal(2, 1.92), sweep_goal(2, 1.5)
    assert isinstance(good, Goal) and good.met and isinstance(bad, Goal) and not bad.met
    assert "1.50x, 1.20x short" in bad.measured
    slow = reproduce_goal(2034.0, 2, 2)
    assert not slow.met and "33.9 min on 2 core(s), 2 worker(s), 6.78x over" in slow.measured
    assert reproduce_goal(299.0, 2, 2).met
