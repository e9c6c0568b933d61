"""The order in which a sweep's pool takes its runs (``oak.sim.compare.LongestFirst``): every run once, one probe
of each group first, then the longest groups; ``run_many`` gives the same results on one process and on a pool."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from oak.engine.metrics import RunResult
from oak.sim.compare import InOrder, LongestFirst, RunSpec, run_many


def _sweep(policies: list[str], lams: list[float], seeds: int) -> list[RunSpec]:
    return [RunSpec(p, "small", lam, s) for lam in lams for p in policies for s in range(seeds)]


def test_one_probe_per_group_then_the_longest_group_first() -> None:
    specs = _sweep(["oak", "gavel", "sia"], [0.1], 3)  # groups in sweep order: oak, gavel, sia
    order = LongestFirst(specs)
    probes = [order.pop() for _ in range(3)]
    assert [specs[i].policy for i in probes] == ["oak", "gavel", "sia"] and all(specs[i].seed == 0 for i in probes)
    for i, wall in zip(probes, (1.0, 8.0, 0.5), strict=True):
        order.observed(specs[i], wall)
    rest = [specs[order.pop()] for _ in range(len(order))]
    assert [s.policy for s in rest] == ["gavel", "gavel", "oak", "oak", "sia", "sia"]
    assert [s.seed for s in rest] == [1, 2, 1, 2, 1, 2]  # within a group, the sweep's order


def test_a_group_whose_probe_is_still_running_waits_behind_measured_groups() -> None:
    specs = _sweep(["oak", "sia"], [0.1], 2)
    order = LongestFirst(specs)
    a, b = order.pop(), order.pop()  # probes of oak and sia
    order.observed(specs[b], 0.1)  # sia's probe ended, oak's is still running
    assert specs[order.pop()].policy == "sia"
    assert specs[order.pop()].policy == "oak"
    assert len(order) == 0 and a != b


@settings(max_examples=50, deadline=None)
@given(
    n_pol=st.integers(1, 4),
    n_lam=st.integers(1, 3),
    seeds=st.integers(1, 4),
    walls=st.lists(st.floats(0.0, 100.0), min_size=48, max_size=48),
    finish_first=st.booleans(),
)
def test_every_run_is_taken_exactly_once(
    n_pol: int, n_lam: int, seeds: int, walls: list[float], finish_first: bool
) -> None:
    specs = _sweep(["oak", "sia", "gavel", "drf"][:n_pol], [0.0, 0.05, 0.1][:n_lam], seeds)
    for cls in (LongestFirst, InOrder):
        order = cls(specs)
        taken: list[int] = []
        running: list[int] = []
        while len(order):
            i = order.pop()
            taken.append(i)
            running.append(i)
            if finish_first or len(running) > 2:  # results come back in some order, some runs still going
                j = running.pop(0)
                order.observed(specs[j], walls[j])
        assert sorted(taken) == list(range(len(specs)))
        if cls is InOrder:
            assert taken == list(range(len(specs)))


def test_run_many_on_a_pool_equals_one_process() -> None:
    specs = _sweep(["oak", "sia"], [0.1], 2)
    one = run_many(specs, workers=1)
    pool = run_many(specs, workers=2)
    assert [r.seed for r in pool] == [s.seed for s in specs] and [r.policy for r in pool] == [s.policy for s in specs]
    assert [[j.jct_s for j in r.jobs] for r in one] == [[j.jct_s for j in r.jobs] for r in pool]

    def measured(r: RunResult) -> dict[str, object]:  # what the run computed, not how long it took here
        return {k: v for k, v in r.summary().items() if k != "wall_s" and not k.startswith("decision_ms")}

    assert [measured(r) for r in one] == [measured(r) for r in pool]


def test_bench_sweep_reports_three_ways_with_the_same_results(tmp_path: Path) -> None:
    from oak.cli.main import app

    out = tmp_path / "sweep.json"
    args = ["bench", "sweep", "--workload", "small", "--policies", "oak,sia", "--failure-rates", "0.1"]
    res = CliRunner().invoke(app, [*args, "--seeds", "2", "--json", str(out)])
    assert res.exit_code == 0, res.output
    ways = json.loads(out.read_text())["ways"]
    assert [w["workers"] for w in ways] == [1, 2, 2] and all(w["same_results"] for w in ways)
    assert all(w["wall_s"] > 0 and w["floor_s"] > 0 for w in ways)
    (goal,) = json.loads(out.read_text())["goals"]  # 2 workers: the pool goal, with its verdict either way
    assert goal["goal"] == "2 workers ≥ 1.8x one process" and isinstance(goal["met"], bool)
    assert "goal (issue [fast-at-scale]): 2 workers ≥ 1.8x one process" in " ".join(res.output.split())
    bad = CliRunner().invoke(app, [*args, "--workers", "0"])
    assert bad.exit_code == 2 and "--workers 0: expected a positive integer" in bad.output


def test_workers_leave_ctrl_c_to_the_parent() -> None:
    """A terminal's Ctrl-C reaches every process of the group. Workers ignore it (the parent ends them): one
    interrupted while it read the pool's task queue died holding the queue's lock and hung the others and the
    parent's exit. Here every worker gets SIGINT after the first result, and the sweep still ends whole."""
    import multiprocessing
    import os
    import signal

    from oak.sim.compare import run_pool

    specs = _sweep(["oak", "sia"], [0.0, 0.1], 2)
    got: dict[int, RunResult] = {}

    def done(i: int, res: RunResult) -> None:
        if not got:
            workers = multiprocessing.active_children()
            assert workers
            for proc in workers:
                assert proc.pid is not None
                os.kill(proc.pid, signal.SIGINT)
        got[i] = res

    run_pool(specs, 2, done)
    assert sorted(got) == list(range(len(specs)))
    alone = run_many(specs, workers=1)
    assert [[j.jct_s for j in got[i].jobs] for i in range(len(specs))] == [[j.jct_s for j in r.jobs] for r in alone]


def test_an_interrupted_sweep_ends_its_workers() -> None:
    """Ctrl-C in the parent (here: from the callback of the first result) ends the sweep at once: the runs still
    going are abandoned, their workers ended, nothing more delivered."""
    import multiprocessing

    import pytest

    from oak.sim.compare import run_pool

    before = set(multiprocessing.active_children())
    specs = [RunSpec("oak", "small", 0.0, 0), *(RunSpec("sia", "stress", 0.1, s) for s in range(3))]
    got: list[int] = []

    def done(i: int, res: RunResult) -> None:
        got.append(i)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_pool(specs, 2, done)
    assert len(got) == 1
    assert set(multiprocessing.active_children()) - before == set()
