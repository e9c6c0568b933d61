"""The run's twin: a run's trace exported (oak export-trace), and the run replayed (oak replay, RunBeliefs)."""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from oak.errors import OakInputError
from oak.goodput.online import StepTimeLog
from oak.policies import make_policy
from oak.runtime.export import export_trace, failure_events, load_trace
from oak.runtime.jobs_file import parse_jobs
from oak.runtime.scheduler import RuntimeOptions, RuntimeScheduler
from oak.sim.simulator import Simulator
from oak.twin import build_twin, gap, replay
from oak.workloads import load_workload
from support.cli import oak
from support.scripted import Fate, ScriptedExecutor


# ---------------------------------------------------------------------------------------------- a run's trace
def _trace(jobs: list[dict[str, Any]], failures: list[dict[str, Any]], **run: Any) -> dict[str, Any]:
    return {
        "format": "oak-run-trace",
        "version": 1,
        "run": {
            "policy": "oak",
            "seed": 0,
            "round_s": 30.0,
            "failure_rate": 0.0,
            "devices": 4,
            "device_kind": "cpu",
            "profile_type": "aws",
            "nodes": [],
            "end_s": 0.0,
            "run_dir": "/runs/r",
            **run,
        },
        "jobs": jobs,
        "failures": failures,
    }


def _job(name: str, steps: int, step_s: dict[int, float], restore_s: float, **kw: Any) -> dict[str, Any]:
    log = StepTimeLog()
    for g, s in step_s.items():
        log.add(1, g, 64.0 / g, s * 20, 20)
    return {
        "name": name,
        "submit_s": 0.0,
        "min_gpus": min(step_s),
        "max_gpus": max(step_s),
        "batch_size": 64,
        "restart_penalty_s": 10.0,
        "total_steps": steps,
        "steplog": log.to_dict(),
        "restore_s": restore_s,
        "measured": {
            "jct_s": 100.0,
            "restarts": 0,
            "failures": 0,
            "t_progress_s": 90.0,
            "t_ckpt_s": restore_s,
            "t_queue_s": restore_s,
            "gpu_s_used": 100.0,
            "gpu_s_lost": 0.0,
        },
        **kw,
    }


def test_a_replayed_job_takes_its_measured_restore_plus_its_steps_at_its_measured_step_time() -> None:
    """One job alone, 1 device, 0.25 s per step, 200 steps, 4 s to (re)start: 54 s in the twin; a logged crash
    at 20 s while it runs adds one restore (and, at no lost work, nothing else)."""
    trace = _trace([_job("a", 200, {1: 0.25}, 4.0)], [])
    _, (r,) = replay(trace, ["oak"])
    assert r.jobs[0].jct_s == pytest.approx(54.0, rel=1e-3)
    crashed = _trace([_job("a", 200, {1: 0.25}, 4.0)], [{"time_s": 20.0, "kind": "crash", "job": "a"}])
    _, (c,) = replay(crashed, ["oak"])
    assert c.jobs[0].failures == 1 and c.jobs[0].jct_s == pytest.approx(58.0, rel=1e-3)
    assert "trace(" in c.failure_model


def test_replay_draws_injected_failures_again_from_the_runs_seed_and_keeps_the_rest() -> None:
    trace = _trace(
        [_job("a", 4000, {1: 0.25, 2: 0.15}, 4.0), _job("b", 3000, {1: 0.25, 2: 0.15}, 4.0)],
        [{"time_s": 50.0, "kind": "injected", "job": "a"}, {"time_s": 60.0, "kind": "crash", "job": "b"}],
        failure_rate=0.2,
        seed=3,
    )
    assert [e.kind for e in failure_events(trace, injected=False)] == ["crash"]
    twin, runs = replay(trace, ["oak", "sia"], seeds=2)
    assert [(r.policy, r.seed, r.failure_rate) for r in runs] == [
        ("oak", 3, 0.2),
        ("oak", 4, 0.2),
        ("sia", 3, 0.2),
        ("sia", 4, 0.2),
    ]
    assert twin.measured.policy == "measured (oak)"
    _, again = replay(trace, ["oak", "sia"], seeds=2)
    assert [r.jobs for r in again] == [r.jobs for r in runs]  # deterministic
    g = gap(twin.measured, runs[0])
    assert g["jobs_compared"] == 2 and math.isfinite(g["mean_jct_ratio"])


def test_a_job_without_a_measured_step_time_cannot_be_replayed() -> None:
    job = _job("a", 100, {1: 0.25}, 4.0)
    job["steplog"] = {}
    with pytest.raises(OakInputError, match="job 'a': no measured step time"):
        replay(_trace([job], []), ["oak"])


def test_a_run_records_its_failures_and_step_times_and_exports_them(tmp_path: Path) -> None:
    """A scripted run on a fake clock: the job crashes once after 40 steps, then runs to its end. The trace has
    the run's settings, the job's measured step time and restore, its result and the crash; the replay
    reproduces the crash."""
    text = "jobs:\n  - {name: j, model: tiny, target_steps: 100, max_gpus: 1, batch_size: 8, ckpt_every: 10}\n"
    ex = ScriptedExecutor(
        [Fate(end="failed", after_s=30.0, reach=40, step_s=0.5), Fate(end="done", after_s=40.0, reach=100, step_s=0.5)]
    )
    opts = RuntimeOptions(devices=1, round_s=60.0, tick_s=1.0, time_limit_s=3600.0, seed=5)
    sched = RuntimeScheduler(
        parse_jobs(text, "one.yaml"), make_policy("oak"), tmp_path / "run", opts, ex, clock=ex.clock
    )
    sched.run()
    sched.store.close()
    trace = export_trace(tmp_path / "run")
    assert trace["run"]["seed"] == 5 and trace["run"]["policy"] == "oak" and trace["run"]["round_s"] == 60.0
    (job,) = trace["jobs"]
    assert job["measured"]["state"] == "done" and job["measured"]["failures"] == 1
    samples = StepTimeLog.from_dict(job["steplog"]).samples()
    assert samples and all(s.step_time_s == pytest.approx(0.5) for s in samples)
    m = job["measured"]
    assert m["incarnations"] == 2 and job["restore_s"] == pytest.approx(m["t_ckpt_s"] / 2)
    (crash,) = trace["failures"]
    assert crash["kind"] == "crash" and crash["job"] == "j" and 30.0 <= crash["time_s"] <= 33.0
    out = tmp_path / "t.json"
    out.write_text(json.dumps(trace))
    assert load_trace(out) == trace
    _, (r,) = replay(trace, ["oak"])
    assert r.jobs[0].failures == 1


def test_load_trace_names_what_is_wrong(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text("{}")
    with pytest.raises(OakInputError, match="not a run trace"):
        load_trace(f)
    f.write_text(json.dumps({**_trace([], []), "version": 9}))
    with pytest.raises(OakInputError, match="trace version 9"):
        load_trace(f)
    f.write_text(json.dumps(_trace([{"name": "a"}], [])))
    with pytest.raises(OakInputError, match=r"jobs\[0\]: missing field 'submit_s'"):
        load_trace(f)


def test_export_of_a_directory_without_a_run_is_an_input_error(tmp_path: Path) -> None:
    out = oak("export-trace", str(tmp_path), "--out", str(tmp_path / "t.json"))
    assert out.returncode == 2 and "no run here" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("policy", ["oak", "sia"])
def test_believing_each_jobs_own_application_changes_nothing(policy: str) -> None:
    """RunBeliefs with every job's true application is the plain run: the same rows, epochs and rates."""
    from oak.catalog import Catalog

    wl = load_workload("small")
    catalog = Catalog.load()
    plain = Simulator(wl).run(make_policy(policy), 0.1, 1)
    believed = Simulator(wl, believed={j.name: catalog.app(j.application) for j in wl.jobs}).run(
        make_policy(policy), 0.1, 1
    )
    assert list(believed.jobs) == list(plain.jobs)


def test_a_believed_application_is_what_the_policy_sees_not_what_the_job_does() -> None:
    """A job measured flat (0.25 s per step at 1, 2 and 4 devices) but believed to be cifar10: the policy's
    first round sees cifar10's goodput across sizes (as a run whose truth is cifar10 does: goodput is relative
    to the job's smallest configuration), and its remaining time in cifar10's terms; the job still runs at its
    measured step time, so on its fixed size its JCT is the measured one."""
    from oak.catalog import Catalog

    catalog = Catalog.load()
    trace = _trace([_job("a", 400, {1: 0.25, 2: 0.25, 4: 0.25}, 4.0)], [])
    seen: dict[str, Any] = {}

    def first(key: str) -> Any:
        return lambda snap, alloc, placed: seen.setdefault(key, snap)

    with tempfile.TemporaryDirectory() as tmp:
        twin = build_twin(trace, Path(tmp) / "f.csv")
        twin.simulator().run(make_policy("oak"), 0.0, 0, on_round=first("flat"))
        believing = Simulator(
            twin.workload, twin.cluster, twin.catalog, twin.physics, believed={"a": catalog.app("cifar10")}
        )
        believing.run(make_policy("oak"), 0.0, 0, on_round=first("believed"))
    spec = dataclasses.replace(twin.workload.jobs[0], application="cifar10")
    truth = Simulator(dataclasses.replace(twin.workload, jobs=(spec,)), twin.cluster, catalog, twin.physics)
    truth.run(make_policy("oak"), 0.0, 0, on_round=first("cifar10"))
    flat, believed, cifar = seen["flat"], seen["believed"], seen["cifar10"]
    assert np.array_equal(believed.goodput, cifar.goodput) and not np.array_equal(believed.goodput, flat.goodput)
    # remaining time as the run's scheduler estimated it: the same in cifar10's units and in the job's steps
    np.testing.assert_allclose(
        believed.remaining_work / believed.progress_rate[:, 0], cifar.remaining_work / cifar.progress_rate[:, 0]
    )
    one = _trace([_job("a", 400, {1: 0.25}, 4.0)], [])
    with tempfile.TemporaryDirectory() as tmp:
        twin1 = build_twin(one, Path(tmp) / "f.csv")
        sim = Simulator(
            twin1.workload,
            twin1.cluster,
            twin1.catalog,
            twin1.physics,
            believed={"a": catalog.app("cifar10")},
            restore_s=twin1.restore_s,
        )
        assert sim.run(make_policy("oak"), 0.0, 0).jobs[0].jct_s == pytest.approx(104.0, rel=1e-3)


def test_a_measured_restore_is_the_restore_the_policy_still_sees_its_penalty() -> None:
    trace = _trace([_job("a", 200, {1: 0.25}, 7.0)], [])
    twin, (r,) = replay(trace, ["oak"])
    assert r.jobs[0].jct_s == pytest.approx(57.0, rel=1e-3)  # 7 s restore + 200 × 0.25 s
    assert twin.workload.jobs[0].restart_penalty_s == 10.0  # the jobs file's, as the run's policy saw it
    with pytest.raises(OakInputError, match="restore delay of job 'zz'"):
        Simulator(twin.workload, twin.cluster, twin.catalog, twin.physics, restore_s={"zz": 1.0})


@pytest.mark.long
def test_oak_replay_of_a_real_run_prints_measured_and_simulated_rows(tmp_path: Path) -> None:
    """A real run of three command jobs (count.py: sleeps, so their step times hardly depend on the machine),
    one of which crashes once, then oak replay on its run directory: the measured row, a simulated row per
    policy, and the run's own policy within a loose band of what was measured (start-up and the runtime's
    latencies vary with the machine's load; docs/twin.md measures the gap properly)."""
    import sys

    count = str(Path(__file__).resolve().parent.parent / "examples" / "jobs" / "count.py")

    def job(name: str, steps: int, extra: str = "") -> str:
        args = f'[{sys.executable}, {count}, --steps, "{steps}", --step-s, "0.1", --ckpt-every, "5"{extra}]'
        return f"  - {{name: {name}, command: {args}, min_gpus: 1, max_gpus: 2}}\n"

    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "defaults: {batch_size: 64, restart_penalty_s: 2}\njobs:\n"
        + job("a", 60)
        + job("b", 40, ', --fail-at, "20"')
        + job("c", 50)
    )
    run = tmp_path / "run"
    out = oak("run", str(jobs), "--cpu-slots", "3", "--policy", "oak", "--round-seconds", "5", "--run-dir", str(run))
    assert out.returncode == 0, out.stderr
    rep = oak("replay", str(run), "--policies", "own,oak-paper,sia", "--json", str(tmp_path / "r.json"))
    assert rep.returncode == 0, rep.stderr
    for row in ("measured (oak)", "oak-paper", "sia", "simulated against measured"):
        assert row in rep.stdout, rep.stdout
    doc = json.loads((tmp_path / "r.json").read_text())
    g = doc["gap"]
    assert g["jobs_compared"] == 3 and 0.7 < g["mean_jct_ratio"] < 1.3, g
    b = next(r for r in g["jobs"] if r["job"] == "b")
    assert b["measured_failures"] == b["simulated_failures"] == 1  # the crash, logged and replayed at its time
    trace = oak("export-trace", str(run), "--out", str(tmp_path / "t.json"), "--failures", str(tmp_path / "f.csv"))
    assert trace.returncode == 0, trace.stderr
    assert ",b,,crash," in (tmp_path / "f.csv").read_text()


def test_hindsight_replay_gives_every_policy_the_fitted_models() -> None:
    """--knowledge hindsight: no job is believed or learned; an unknown setting is an input error."""
    trace = _trace([_job("a", 400, {1: 0.25, 2: 0.15}, 4.0, command=True, application="")], [])
    twin, _ = replay(trace, ["oak"])
    assert twin.learn == frozenset({"a"})
    hind, _ = replay(trace, ["oak"], knowledge="hindsight")
    assert hind.learn == frozenset() and hind.believed == {}
    with pytest.raises(OakInputError, match="--knowledge 'psychic'"):
        replay(trace, ["oak"], knowledge="psychic")
