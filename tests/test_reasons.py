"""Why a job waits (issue [why-waiting], item 1): reasons derived from the round's own decision
(``oak.engine.reasons``), for every registered policy, in the simulator's trace, and in the runtime's state
(``oak status``, ``oak explain``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from oak.engine.reasons import CODES, RoundReasons, explain_round
from oak.engine.rules import PhysicsOptions, with_rules
from oak.model.snapshot import frozen_array
from oak.policies import make_policy
from oak.policies.registry import REGISTRY
from oak.sim.simulator import Simulator
from oak.workloads import load_workload
from support.snapshots import PAPER_12, random_snapshot

#: policies whose values are those of the program they solve exactly (the solver's certified optimum)
EXACT = ("oak", "oak-paper", "sia")


def _reasons(
    policy: str, workload: str = "congestion", rules: str = "default", rounds: int = 400
) -> list[RoundReasons]:
    """The reasons of the first ``rounds`` decided rounds of ``policy`` on ``workload`` (λ = 0.05, seed 0)."""
    sim = Simulator(load_workload(workload), physics=with_rules(PhysicsOptions(), rules))
    seen: list[RoundReasons] = []

    class _Enough(Exception):
        pass

    def observe(r: RoundReasons) -> None:
        seen.append(r)
        if len(seen) >= rounds:
            raise _Enough

    pol = make_policy(
        policy, seed=0, **({"population": 16, "generations": 4} if "population" in REGISTRY[policy].params else {})
    )
    with contextlib.suppress(_Enough):
        sim.run(pol, 0.05, 0, on_reasons=observe)
    return seen


@pytest.mark.parametrize("policy", sorted(REGISTRY))
def test_every_policy_gets_a_reason_for_every_job_below_its_maximum(policy: str) -> None:
    """One code per active job, ``max`` exactly for the jobs at their bound, and a rendered text for each other
    one that names no NaN; policies that expose values give them for every valid configuration."""
    seen = _reasons(policy, rounds=150)
    assert seen
    waiting = 0
    for r in seen:
        snap = r.snap
        assert len(r.codes()) == snap.num_jobs
        at_max = r.gpus >= r.declared_max
        assert np.array_equal(np.array([c == "max" for c in r.codes()]), at_max)
        if r.alloc.values is not None:
            assert r.alloc.values.shape == snap.goodput.shape
            offered = snap.valid & np.isfinite(r.alloc.values)
            assert offered.any(axis=1)[snap.valid.any(axis=1)].all()  # every job with options has a value for one
        for i in np.flatnonzero(~at_max).tolist():
            jr = r.reason(i)
            assert jr.code in CODES and jr.text and "nan" not in jr.text, jr
            waiting += jr.gpus == 0
    assert waiting > 0  # the congested workload makes some job wait under every policy


@pytest.mark.parametrize("policy", EXACT)
def test_outbid_reasons_agree_with_the_optimum(policy: str) -> None:
    """An exact round program can only have kept a job off its best option when displacing the jobs that hold
    those GPUs costs at least the gain: the cheapest holders the reason names are worth no less than it."""
    checked = 0
    for r in _reasons(policy):
        for i in np.flatnonzero(r.code == CODES.index("outbid")).tolist():
            jr = r.reason(i)
            assert jr.best is not None and jr.rivals, jr
            gain = jr.best.value - (jr.value if jr.gpus > 0 and jr.value is not None else 0.0)
            total = sum(v for _, v in jr.rivals)
            assert gain <= total + 1e-6 * max(1.0, abs(total)), jr
            checked += 1
    assert checked > 100


def test_exploration_rules_say_so() -> None:
    """Under the Sia artifact's rules a job that has not run is offered its smallest configuration only
    (bootstrap) and one that has is capped at twice the most it ran on: the reasons say which, and the job
    holds exactly what the rule allows."""
    codes: dict[str, int] = {}
    for r in _reasons("sia", rules="sia-artifact"):
        for i, c in enumerate(r.codes()):
            codes[c] = codes.get(c, 0) + 1
            if c in ("bootstrap", "cap"):
                assert r.gpus[i] == r.snap.max_gpus[i] < r.declared_max[i]
                assert ("not run yet" in r.reason(i).text) == (c == "bootstrap")
    assert codes.get("cap", 0) > 0 and codes.get("bootstrap", 0) > 0, codes


def test_restoring_jobs_and_the_waiting_guard_are_named() -> None:
    """A job inside its restore keeps its configuration (with the seconds left); one the waiting guard admitted
    is protected, as the policy's own note says; one whose last move is not paid for yet says so (the stint)."""
    restoring = guard = stint = 0
    sim = Simulator(load_workload("congestion"))
    policy = make_policy("oak", max_wait_s=3_600.0)

    def observe(r: RoundReasons) -> None:
        nonlocal restoring, guard, stint
        for i, c in enumerate(r.codes()):
            text = r.reason(i).text if c != "max" else ""
            if c == "restoring":
                restoring += 1
                assert text.startswith("restoring (kept its configuration") and " s left" in text
                assert r.alloc.config[i] == r.snap.current[i]
            if c == "policy" and "waiting guard" in text:
                guard += 1
            elif c == "policy":
                stint += 1
                assert "s of progress ago" in text and "needs r >" in text, text

    sim.run(policy, 0.0, 0, on_reasons=observe)
    assert restoring > 0 and guard > 0 and stint > 0


def test_a_job_moved_inside_its_restore_is_not_said_to_keep_its_configuration() -> None:
    """``oak`` prices a restore: a long job restoring on 8 GPUs shrinks to 4 for a short newcomer that only fits
    on 8. Its reason is where it now stands (outbid at 4 GPUs), not "restoring (kept its configuration …)"."""
    base = random_snapshot(np.random.default_rng(5), PAPER_12, 2)
    gpus = np.asarray(base.config_gpus)
    four, eight = int(np.flatnonzero(gpus == 4)[0]), int(np.flatnonzero(gpus == 8)[0])
    valid = np.zeros((2, len(gpus)), bool)
    valid[0, [four, eight]] = True
    valid[1, eight] = True
    goodput = np.where(valid, 1.0, 0.0)
    snap = dataclasses.replace(
        base,
        goodput=frozen_array(goodput, np.float64),
        progress_rate=frozen_array(goodput * 10.0, np.float64),
        valid=frozen_array(valid, bool),
        current=frozen_array([eight, -1], np.int64),
        restoring=frozen_array([True, False], bool),
        t_progress_s=frozen_array([0.0, 0.0], np.float64),
        remaining_work=frozen_array([1e6, 1e4], np.float64),
        kept=None,
        tie_config=None,
    )
    alloc = make_policy("oak", max_wait_s=math.inf).decide(snap)
    assert alloc.config.tolist() == [four, eight]
    placed = [(0, 1, 2, 3), tuple(range(4, 12))]
    r = explain_round(snap, alloc, placed, restore_left_s=frozen_array([30.0, 0.0], np.float64))
    assert r.codes()[0] == "outbid" and "kept its configuration" not in r.reason(0).text
    kept = make_policy("oak", max_wait_s=math.inf, keep_restoring=True).decide(snap)
    assert kept.config.tolist() == [eight, -1]
    held = explain_round(snap, kept, [tuple(range(8)), ()], restore_left_s=frozen_array([30.0, 0.0], np.float64))
    assert held.codes()[0] == "restoring" and held.reason(0).text.startswith("restoring (kept its configuration")


def test_a_job_no_configuration_fits_says_so() -> None:
    from oak.engine.reasons import explain_round

    seen = _reasons("oak", workload="small", rounds=1)
    r = seen[0]
    snap = r.snap
    import dataclasses

    valid = snap.valid.copy()
    valid[0] = False
    alloc = dataclasses.replace(r.alloc, config=np.where(np.arange(snap.num_jobs) == 0, -1, r.alloc.config))
    placed = [() if i == 0 else p for i, p in enumerate(r.placed)]
    again = explain_round(dataclasses.replace(snap, valid=valid), alloc, placed, declared_max=r.declared_max)
    assert again.codes()[0] == "no-fit" and "no configuration fits its bounds" in again.reason(0).text


def test_the_simulators_trace_carries_the_reasons(tmp_path: Path) -> None:
    import pandas as pd

    from oak.sim.compare import RunSpec
    from oak.sim.trace import TRACE_COLUMNS, run_traced

    path = tmp_path / "trace.parquet"
    _, counts = run_traced(RunSpec("oak", "congestion", 0.05, 0, "paper-12"), path)
    rows = pd.read_parquet(path)
    assert list(rows.columns) == list(TRACE_COLUMNS) and len(rows) > 0
    assert counts == rows["why_code"].value_counts().to_dict() and counts.get("outbid", 0) > 0
    assert list(counts.values()) == sorted(counts.values(), reverse=True)
    assert ((rows["why"] == "") == rows["why_code"].isin(["max", ""])).all()
    assert not [p for p in tmp_path.iterdir() if p.name != "trace.parquet"]  # no temporary file left


def test_the_runtime_records_why_a_job_waits_and_oak_explain_shows_its_rounds(tmp_path: Path) -> None:
    """Two jobs for one device on a scripted executor: the one left out has a reason in its record (what
    ``oak status`` shows), the store keeps its rounds' options and rivals (what ``oak explain`` prints)."""
    from tests.support.cli import oak
    from tests.support.scripted import Fate, ScriptedExecutor

    from oak.runtime.jobs_file import parse_jobs
    from oak.runtime.scheduler import RuntimeOptions, RuntimeScheduler
    from oak.runtime.store import RunStore

    text = (
        "defaults: {model: resnet18, batch_size: 64, ckpt_every: 10}\n"
        "jobs:\n  - {name: a, target_steps: 100000, min_gpus: 1, max_gpus: 1}\n"
        "  - {name: b, target_steps: 100000, min_gpus: 1, max_gpus: 1}\n"
    )
    ex = ScriptedExecutor([Fate(end="running", reach=10)])
    opts = RuntimeOptions(devices=1, round_s=60.0, tick_s=30.0)
    run_dir = tmp_path / "run"
    sched = RuntimeScheduler(parse_jobs(text, "two.yaml"), make_policy("oak"), run_dir, opts, ex, clock=ex.clock)
    start = sched.begin()
    last = 0.0
    while (now := ex.clock.time() - start) < 300.0:
        sched.sync(now, now - last)
        sched.step_next(now)
        last = now
        ex.clock.sleep(opts.tick_s)
    running = [r for r in sched.records if r.devices]
    waiting = [r for r in sched.records if not r.devices]
    assert len(running) == 1 and len(waiting) == 1
    assert running[0].why == "" and running[0].why_code == "max"
    w = waiting[0]
    assert w.why_code == "outbid" and w.why.startswith("waiting: every option it fits is worth no more"), w.why
    assert running[0].name in w.why
    sched.store.close()
    store = RunStore(run_dir / "state.sqlite")
    try:
        rounds = store.explain(w.name, 3)
    finally:
        store.close()
    assert 1 <= len(rounds) <= 3 and [r["k"] for r in rounds] == sorted(r["k"] for r in rounds)
    last_round = rounds[-1]
    assert last_round["code"] == "outbid" and last_round["options"] and last_round["rivals"][0][0] == running[0].name
    out = oak("explain", w.name, "--run-dir", str(run_dir), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["job"] == w.name and doc["rounds"][-1]["text"] == w.why
    status = json.loads(oak("status", "--run-dir", str(run_dir), "--json").stdout)
    assert {r["name"]: r["why"] for r in status["jobs"]}[w.name] == w.why
    bad = oak("explain", "nope", "--run-dir", str(run_dir))
    assert bad.returncode == 2 and "no job 'nope'" in bad.stderr
    # the text view: each round's heading whole on its own line (as a table title it wrapped to the table's
    # width), and every column named
    text = oak("explain", w.name, "--run-dir", str(run_dir))
    assert text.returncode == 0, text.stderr
    heading = f"round {last_round['k']} at t = {last_round['time_s']:,.0f} s · outbid: {w.why}"
    assert heading in text.stdout.splitlines(), text.stdout
    header = next(line for line in text.stdout.splitlines() if line.startswith("┃"))
    assert [c.strip() for c in header.strip("┃").split("┃")] == ["option", "devices", "value", "note"], header
