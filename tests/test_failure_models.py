"""Hardware failure models (oak.failures.hardware): paired events, node downtime, lemons, domains, lost work."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from oak.engine.rules import PhysicsOptions
from oak.errors import OakInputError
from oak.failures.hardware import PRESETS, HardwareModel, parse_failure_model
from oak.model.cluster import cluster_preset
from oak.policies import make_policy
from oak.sim import Simulator
from oak.workloads import load_workload

#: rates compressed so that a 12-GPU, few-hour simulation sees many node events
STORMY = "llama3:scale=20000,repair_s=1800"


def _sim(model: str, workload: str = "medium") -> Simulator:
    return Simulator(load_workload(workload), physics=PhysicsOptions(failure_model=model))


def test_paper_model_changes_nothing() -> None:
    a = Simulator(load_workload("small")).run(make_policy("oak"), 0.1, 3)
    b = _sim("paper", "small").run(make_policy("oak"), 0.1, 3)
    assert [j.to_json() for j in a.jobs] == [j.to_json() for j in b.jobs]
    assert b.failure_model == "" and b.hardware_events == () and "node_failures" not in b.summary()


@pytest.mark.parametrize("model", [STORMY, "domain:scale=20000,repair_s=1800", "lemon:scale=20000,repair_s=1800"])
def test_hardware_events_are_the_same_for_every_policy(model: str) -> None:
    """Up to the earlier end of two runs, both meet exactly the same node events at the same times."""
    sim = _sim(model, "small")
    budget = {"pollux": {"population": 20, "generations": 10}}
    runs = {
        p: sim.run(make_policy(p, seed=1, **budget.get(p, {})), 0.0, 1) for p in ("oak", "sia", "oak-paper", "pollux")
    }
    end = min(r.end_time_s for r in runs.values())
    seen = {p: [t for t in r.hardware_events if t <= end] for p, r in runs.items()}
    first = next(iter(seen.values()))
    assert len(first) >= 3, "the stormy model should produce node events"
    assert all(v == first for v in seen.values()), {p: len(v) for p, v in seen.items()}
    assert all(r.summary()["node_failures"] >= len(first) for r in runs.values())


@pytest.mark.long
def test_no_job_is_placed_on_a_node_under_repair() -> None:
    sim = _sim(STORMY)
    seen_down = []

    def check(snap, alloc, placed) -> None:  # type: ignore[no-untyped-def]
        down = np.flatnonzero(snap.node_gpus == 0)
        if len(down):
            seen_down.append(len(down))
            assert int(snap.capacity.sum()) == int(snap.node_gpus.sum())  # capacity shrinks with the node
            for gpus in placed:
                assert not any(int(sim.model.gpu_node[g]) in set(down.tolist()) for g in gpus)

    res = sim.run(make_policy("oak"), 0.0, 2, on_round=check)
    assert seen_down, "no round saw a node under repair"
    assert res.finished and sum(j.failures for j in res.jobs) > 0


def test_a_node_failure_loses_work_since_the_last_checkpoint() -> None:
    """With lost work the GPU-seconds lost exceed what the restores alone cost, and effective training falls."""
    calm = _sim("paper").run(make_policy("sia"), 0.0, 0)
    stormy = _sim(STORMY).run(make_policy("sia"), 0.0, 0)
    s_calm, s_storm = calm.summary(), stormy.summary()
    assert s_storm["lost_gpu_hours"] > s_calm["lost_gpu_hours"]
    assert s_storm["effective_training"] < s_calm["effective_training"] <= 1.0
    # the ledger's progress is conserved: every job still finishes exactly its work
    assert stormy.finished


def test_lemon_nodes_fail_far_more_often() -> None:
    m = parse_failure_model("lemon:lemon_fraction=0.25,lemon_factor=50,scale=100")
    n = 64
    lemons = m.lemons(0, n)
    counts = np.zeros(n)
    for k in range(2000):
        for _, nodes, _ in m.interval_events(0, n, k, 60.0):
            counts[list(nodes)] += 1
    assert 0 < lemons.sum() < n
    assert counts[lemons].mean() > 10 * max(counts[~lemons].mean(), 1e-9)


def test_a_domain_failure_takes_down_all_its_nodes_at_once() -> None:
    m = HardwareModel("d", domain_nodes=4, domain_rate=500.0, scale=100.0)
    events = [e for k in range(200) for e in m.interval_events(3, 10, k, 60.0)]
    assert events
    for _, nodes, _ in events:
        assert nodes in ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9))  # the last rack is partial


def test_events_are_counter_based() -> None:
    m = parse_failure_model("rsc1:scale=5000")
    a = [m.interval_events(7, 30, k, 60.0) for k in range(300)]
    b = [m.interval_events(7, 30, k, 60.0) for k in reversed(range(300))][::-1]
    assert a == b and any(a)
    assert a != [m.interval_events(8, 30, k, 60.0) for k in range(300)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nope", "unknown model 'nope'"),
        ("llama3:scale=0", "scale=0.0: expected a number > 0"),
        ("llama3:speed=2", "expected key=value with key one of"),
        ("llama3:scale=lots", "scale='lots': expected a number"),
        ("lemon:lemon_factor=0.5", "lemon_factor=0.5: expected >= 1"),
        ("domain:domain_nodes=0", "domain_rate needs domain_nodes >= 1"),
        # each was accepted: ignored (paper), the last value taken, or the empty items dropped
        ("paper:scale=2", "the paper's model takes no parameters"),
        ("llama3:scale=300,scale=1", "scale given twice"),
        ("llama3:node_rate=3,,", "an empty item"),
        ("llama3:", "an empty item"),
        ("domain:domain_nodes=2.5", "domain_nodes='2.5': expected an integer"),
    ],
)
def test_bad_failure_models_are_input_errors(text: str, message: str) -> None:
    with pytest.raises(OakInputError, match=message.replace("(", r"\(").replace("[", r"\[")):
        PhysicsOptions(failure_model=text)


def test_presets_name_their_source() -> None:
    assert {"paper", "llama3", "rsc1", "lemon", "domain"} <= set(PRESETS)
    assert all(m.source for m in PRESETS.values())
    assert "×300" in parse_failure_model("llama3:scale=300").describe()


def test_compare_reports_paired_node_failures(tmp_path: Path) -> None:
    """The issue's command, on a 64 × 4-GPU cluster: node failures equal across policies per seed, lost
    GPU-hours and effective training time reported."""
    from oak.workloads.philly import synth_workload_text

    text, _ = synth_workload_text(60, "sia-64x4", 4.0, 0)
    wl = tmp_path / "philly-60.csv"
    wl.write_text(text, encoding="utf-8")
    out = tmp_path / "out.json"
    cmd = [sys.executable, "-m", "oak", "compare", "--workload", str(wl), "--cluster", "sia-64x4"]
    cmd += ["--policies", "oak,sia", "--failure-model", "llama3:scale=300", "--seeds", "2", "--failure-rates", "0"]
    res = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr
    assert "rates ×300" in res.stdout
    runs = json.loads(out.read_text())["runs"]
    for seed in (0, 1):
        pair = [r for r in runs if r["seed"] == seed]
        assert len(pair) == 2 and pair[0]["node_failures"] == pair[1]["node_failures"]
        assert all(r["node_failures_in_run"] >= r["node_failures"] for r in pair)
        assert all(r["lost_gpu_hours"] > 0 and 0 < r["effective_training"] < 1 for r in pair)
    bad = subprocess.run([*cmd[:-6], "--failure-model", "llama3:scale=-1"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "scale=-1.0" in bad.stderr and "Traceback" not in bad.stderr


def test_failures_list_command() -> None:
    res = subprocess.run([sys.executable, "-m", "oak", "failures", "list"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "llama3" in res.stdout and "419" in res.stdout.replace("\n", " ")


def test_cluster_capacity_is_restored_after_repair() -> None:
    """Events and repairs: capacity falls by whole nodes when they fail and comes back when they are repaired."""
    sim = Simulator(load_workload("medium"), cluster_preset("paper-12"), physics=PhysicsOptions(failure_model=STORMY))
    caps: list[int] = []
    sim.run(make_policy("goodput"), 0.0, 4, on_round=lambda snap, a, p: caps.append(int(snap.capacity.sum())))
    assert set(caps) <= {0, 4, 8, 12} and min(caps) < 12
    first_down = next(i for i, c in enumerate(caps) if c < 12)
    assert 12 in caps[first_down:], "a repaired node never came back"
    assert dataclasses.replace(PhysicsOptions(), failure_model="rsc1").failure_model == "rsc1"


POLS = "oak,oak-unaware,sia"


@pytest.mark.long
def test_failure_study_quick(tmp_path: Path) -> None:
    """``scripts/failure-study --quick``: the study's table, plots and runs; paired node failures per model."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "failure-study"
    res = subprocess.run(
        # three of the study's five policies: the script's tables, plots and pairing do not depend on the policy
        # (every policy meets the same hardware events: test_hardware_events_are_the_same_for_every_policy)
        [sys.executable, str(script), "--quick", "--out", str(tmp_path), "--workers", "2", "--policies", POLS],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    runs = json.loads((tmp_path / "runs.json").read_text())["runs"]
    assert len(runs) == 4 * 3
    for model in {r["model"] for r in runs}:
        counts = {r["node_failures_paired"] for r in runs if r["model"] == model}
        assert len(counts) == 1, (model, counts)  # every policy met the same hardware events
    table = (tmp_path / "study.md").read_text()
    assert table.count("| oak |") == 4 and table.count("| oak-unaware |") == 4 and "effective" in table
    assert (tmp_path / "jct-cdf.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "lost-gpu-hours.png").read_bytes()[:4] == b"\x89PNG"


def test_failure_aware_placement_prefers_healthy_nodes() -> None:
    """New placements go to the nodes with the fewest observed failures; without health the usual order."""
    from oak.model.cluster import homogeneous_cluster
    from oak.model.config import Configuration
    from oak.placement.placer import place

    c = homogeneous_cluster("aws", 3, 4)
    one = Configuration("aws", 1, 2)
    assert place(c, [one], [()], [None]) == [(0, 1)]
    assert place(c, [one], [()], [None], health=[2, 0, 1]) == [(4, 5)]
    two = Configuration("aws", 2, 8)
    assert place(c, [two], [()], [None]) == [tuple(range(4, 12))]
    assert place(c, [two], [()], [None], health=[0, 0, 5]) == [tuple(range(0, 8))]
    # kept jobs keep their GPUs whatever the health
    assert place(c, [one], [(8, 9)], [one], health=[0, 0, 9]) == [(8, 9)]


def test_failure_aware_oak_meets_the_same_events_and_acts_under_lemon_nodes() -> None:
    """The ablation on one stormy lemon cluster: for each seed both meet the same hardware events, and placing new
    work away from the nodes it saw fail changes what oak loses in some seed. Whether it loses *less* depends on
    the seed (docs/failures.md: over 8 seeds it is ahead in some, behind in others); that placement prefers the
    healthier nodes is tested above."""
    sim = _sim("lemon:scale=3000,lemon_fraction=0.34,lemon_factor=20")
    assert make_policy("oak").avoids_failing_nodes and not make_policy("oak", failure_aware=False).avoids_failing_nodes
    lost = []
    for seed in range(2):
        aware = sim.run(make_policy("oak"), 0.0, seed)
        unaware = sim.run(make_policy("oak", failure_aware=False), 0.0, seed)
        end = min(aware.end_time_s, unaware.end_time_s)
        assert [t for t in aware.hardware_events if t <= end] == [t for t in unaware.hardware_events if t <= end]
        lost.append((aware.summary()["lost_gpu_hours"], unaware.summary()["lost_gpu_hours"]))
    assert any(a != u for a, u in lost), lost


def test_events_at_the_start_of_an_interval_are_not_dropped() -> None:
    """An event at exactly k·round_s (v = 0) happens, for every policy (the loop enters the interval there)."""

    @dataclasses.dataclass(frozen=True)
    class AtRoundStart(HardwareModel):
        def interval_events(
            self, seed: int, n_nodes: int, k: int, round_s: float, *, first: bool = False
        ) -> list[tuple[float, tuple[int, ...], float]]:
            return [(k * round_s, ({10: 0, 40: 2}[k],), self.repair_s)] if k in (10, 40) else []

    import oak.sim.simulator as simulator_module

    model = AtRoundStart("start", node_rate=1.0)
    original = simulator_module.parse_failure_model
    simulator_module.parse_failure_model = lambda text: model  # type: ignore[assignment]
    try:
        for pol in ("oak", "sia"):
            res = _sim("llama3").run(make_policy(pol), 0.0, 0)
            assert res.hardware_events[:2] == (600.0, 2400.0), (pol, res.hardware_events)
    finally:
        simulator_module.parse_failure_model = original


def test_zero_restart_penalty_loses_nothing_and_does_not_crash() -> None:
    wl = load_workload("medium")
    free = dataclasses.replace(wl, jobs=tuple(dataclasses.replace(j, restart_penalty_s=0.0) for j in wl.jobs))
    res = Simulator(free, physics=PhysicsOptions(failure_model=STORMY)).run(make_policy("sia"), 0.0, 0)
    assert res.finished and sum(j.failures for j in res.jobs) > 0
    assert res.summary()["lost_gpu_hours"] == pytest.approx(0.0, abs=1e-9)  # free checkpoints, free restores


def test_repair_time_must_be_positive_and_idle_runs_are_fully_effective() -> None:
    with pytest.raises(OakInputError, match=r"repair_s=0\.0"):
        parse_failure_model("llama3:repair_s=0")
    from oak.engine.metrics import RunResult

    empty = RunResult("p", "w", 0.0, 0, (), (), 0.0, 0.0, 0.0)
    assert empty.failure_summary()["effective_training"] == 1.0
