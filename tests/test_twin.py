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
from oak.model.snapshot import Allocation, RoundSnapshot
from oak.policies import make_policy
from oak.policies.base import PolicyBase
from oak.runtime.export import arrived, export_trace, failure_events, incarnations, load_trace
from oak.runtime.jobs_file import parse_jobs
from oak.runtime.scheduler import RuntimeOptions, RuntimeScheduler
from oak.runtime.store import JobRecord
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
    # where the run's failures of the job lost work (2.5 s of steps), the replay's lose as much
    twin = build_twin(crashed, Path(tempfile.mkdtemp()) / "f.csv")
    sim = Simulator(
        twin.workload, twin.cluster, twin.catalog, twin.physics, restore_s=twin.restore_s, lost_s={"a": 2.5}
    )
    lossy = sim.run(make_policy("oak"), twin.failure_rate, twin.seed).jobs[0]
    assert lossy.jct_s == pytest.approx(60.5, rel=1e-3)
    assert lossy.gpu_s_lost == pytest.approx(4.0 + 4.0 + 2.5, rel=1e-3)  # two starts and the lost steps


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


def test_a_job_without_a_measured_step_time_is_left_out_of_the_replay() -> None:
    """A job that never ran a timed step (a command that never reports, one that never started) has no model
    of its goodput: the replay simulates the others — the same as a run without it — and says which it left
    out, with the failures logged for it; a run with no timed job at all cannot be replayed."""
    silent = _job("s", 100, {1: 0.25}, 4.0)
    silent["steplog"] = {}
    with pytest.raises(OakInputError, match="no job of the run ran a timed step"):
        replay(_trace([silent], []), ["oak"])
    a = _job("a", 200, {1: 0.25}, 4.0)
    crash = [{"time_s": 20.0, "kind": "crash", "job": "s"}]
    twin, (r,) = replay(_trace([a, silent], crash), ["oak"])
    assert twin.left_out == ("s",)
    assert [j.name for j in twin.workload.jobs] == ["a"] and [j.name for j in twin.measured.jobs] == ["a"]
    _, (alone,) = replay(_trace([_job("a", 200, {1: 0.25}, 4.0)], []), ["oak"])
    assert r.jobs == alone.jobs


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
    first, second = job["incarnations"]  # read from the scheduler's own phase notes
    assert (first["devices"], first["from_step"], first["end"], first["to_step"]) == (1, 0, "failed", None)
    assert first["running_s"] is not None and first["launch_s"] <= first["running_s"] <= first["end_s"]
    assert (second["end"], second["to_step"]) == ("done", 100) and second["from_step"] <= 40
    assert second["launch_s"] >= first["end_s"]
    # each start's restore as the scheduler counted it: the job's T_ckpt (no stop here) is their sum, and each
    # is less than the delay it saw by the tick that saw the job past its resume step
    assert first["restore_s"] + second["restore_s"] == pytest.approx(m["t_ckpt_s"], abs=1e-3)
    for inc in (first, second):
        assert inc["running_s"] - inc["launch_s"] - inc["restore_s"] == pytest.approx(opts.tick_s, abs=1e-3)
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


# ------------------------------------------------------------------------------------------ the run's latencies
HISTORY = [
    [0.0, "queued", "arrived"],
    [0.0, "restoring", "launched on device(s) [0, 1] from step 0"],
    [2.0, "running", "past its resume step (0)"],
    [10.0, "stopping", "asked to checkpoint and exit"],
    [11.5, "queued", "stopped"],
    [20.0, "restoring", "launched on device(s) [1] from step 80"],
    [24.0, "running", "past its resume step (80)"],
    [30.0, "queued", "rank exit statuses [1] (first failure: 1)"],
    [31.0, "restoring", "launched on device(s) [0] from step 140"],
    [36.0, "running", "past its resume step (130)"],
    [70.0, "done", "finished at step 400"],
]


def test_a_jobs_incarnations_are_read_from_its_phase_history() -> None:
    first, second, third = incarnations(HISTORY)
    assert first == {
        "launch_s": 0.0, "devices": 2, "from_step": 0, "running_s": 2.0, "end": "stop", "end_s": 10.0,
        "to_step": 80, "stop_s": 1.5, "last_step_s": None,
    }  # fmt: skip
    assert (second["devices"], second["from_step"], second["end"], second["end_s"]) == (1, 80, "failed", 30.0)
    assert second["to_step"] is None and second["stop_s"] is None  # the steps since its checkpoint were lost
    assert (second["reached_step"], second["lost_steps"]) == (140, 10)  # reported 140, resumed from 130
    # resumed from its checkpoint (130), not from the last step it reported (140)
    assert (third["from_step"], third["end"], third["end_s"], third["to_step"]) == (130, "done", 70.0, 400)
    assert incarnations(HISTORY, last_step_s=69.0)[-1]["last_step_s"] == 69.0  # then its exit took 1 s
    assert incarnations(HISTORY, last_step_s=5.0)[-1]["last_step_s"] is None  # not this incarnation's


def test_a_start_costs_its_wall_time_beyond_its_steps_and_a_stop_its_measured_latency() -> None:
    """First launch: 10 s for 80 steps at 0.1 s on 2 devices → 2 s of start-up, seen running at 2 s; the third:
    39 s for 270 steps at 0.12 s on 1 → 6.6 s, seen running 5 s after its launch (its steps took 1.6 s longer
    than their step time: its delay is its cost, no credit); the second failed: launch to first step, 4 s (no
    credit). A restart's delay is their mean, 5.3 s."""
    job = _job("a", 400, {1: 0.12, 2: 0.1}, 9.0, incarnations=incarnations(HISTORY))
    twin = build_twin(_trace([job], []), Path(tempfile.mkdtemp()) / "f.csv")
    assert twin.first_start_s["a"] == pytest.approx(2.0)
    assert twin.restore_s["a"] == pytest.approx((4.0 + 6.6) / 2)
    assert "a" not in twin.credit_s
    assert twin.stop_s["a"] == pytest.approx(1.5)
    assert twin.lost_s["a"] == pytest.approx(10 * 0.12)  # its failure lost 10 steps on 1 device
    assert not twin.exit_s  # no last step recorded
    job = _job("a", 400, {1: 0.12, 2: 0.1}, 9.0, incarnations=incarnations(HISTORY, last_step_s=68.0))
    twin = build_twin(_trace([job], []), Path(tempfile.mkdtemp()) / "f.csv")
    assert twin.exit_s["a"] == pytest.approx(2.0)  # 68 → 70 s
    assert twin.restore_s["a"] == pytest.approx((4.0 + 5.0) / 2)  # as seen; the third: 37 s to its last step:
    assert twin.credit_s["a"][1] == pytest.approx((0.0 + 0.4) / 2)  # 4.6 s of cost, seen after 5
    old = build_twin(_trace([_job("a", 400, {1: 0.12, 2: 0.1}, 9.0)], []), Path(tempfile.mkdtemp()) / "f.csv")
    assert old.restore_s == {"a": 9.0} and not (old.first_start_s or old.stop_s or old.exit_s)  # a trace without


class _Newest(PolicyBase):
    """The job that arrived last takes every device; the others wait."""

    name = "newest"

    def decide(self, snap: RoundSnapshot) -> Allocation:
        out = np.full(snap.num_jobs, -1, dtype=np.int64)
        ok = snap.valid[-1] & (np.asarray(snap.config_gpus) <= int(np.asarray(snap.capacity).sum()))
        out[-1] = int(np.flatnonzero(ok)[np.argmax(np.asarray(snap.config_gpus)[ok])])
        return Allocation(config=out)


def test_a_job_started_on_a_stopping_jobs_devices_waits_for_its_stop_and_queues_meanwhile() -> None:
    """a (400 steps at 0.1 s on 2 devices, 2 s to start, 4 s to restart) runs from 0; b (100 steps, 3 s to
    start) arrives at 10 and takes both devices: a stops in 1.5 s, so b restores from 11.5 to 14.5 and ends at
    24.5; a restarts then and ends at 24.5 + 4 + 32 = 60.5. b's wait is queueing, not restore; a's stop is
    restore time (T_ckpt), as the runtime counts it."""
    a = _job("a", 400, {1: 0.2, 2: 0.1}, 4.0)
    b = {**_job("b", 100, {1: 0.2, 2: 0.1}, 3.0), "submit_s": 10.0}
    twin = build_twin(_trace([a, b], [], devices=2), Path(tempfile.mkdtemp()) / "f.csv")
    runs = {}
    for stop in (0.0, 1.5):
        sim = Simulator(
            twin.workload, twin.cluster, twin.catalog, twin.physics,
            restore_s={"a": 4.0, "b": 3.0}, first_start_s={"a": 2.0}, stop_s={"a": stop, "b": 0.5},
        )  # fmt: skip
        runs[stop] = {j.name: j for j in sim.run(_Newest(), 0.0, 0).jobs}
    ra, rb = runs[1.5]["a"], runs[1.5]["b"]
    assert ra.jct_s is not None and rb.jct_s is not None
    jct0 = {n: r.jct_s for n, r in runs[0.0].items()}
    assert jct0["a"] is not None and jct0["b"] is not None
    # (the fitted step time is the measured one within 1 %: the steps' share of a JCT is approximate)
    assert rb.jct_s == pytest.approx(14.5, rel=0.01) and ra.jct_s == pytest.approx(60.5, rel=0.01)
    assert rb.jct_s - jct0["b"] == pytest.approx(1.5)  # the devices came 1.5 s later
    assert ra.jct_s - jct0["a"] == pytest.approx(1.5)
    assert rb.t_ckpt_s == pytest.approx(3.0) and rb.t_queue_s - runs[0.0]["b"].t_queue_s == pytest.approx(1.5)
    # its first start, its stop (checkpoint and exit: the runtime counts it as T_ckpt) and its restart
    assert ra.restarts == 1 and ra.t_ckpt_s == pytest.approx(2.0 + 1.5 + 4.0)
    assert runs[0.0]["a"].t_ckpt_s == pytest.approx(2.0 + 4.0)


def test_a_failed_job_gives_its_devices_up_and_its_relaunch_is_its_restart() -> None:
    """Under failure_mode "requeue" (a replay's) a crash takes the job off its devices for the round it
    triggers; the relaunch counts the restart, as the runtime counts it. Under "restore" it keeps them."""
    trace = _trace([_job("a", 200, {1: 0.25}, 4.0)], [{"time_s": 20.0, "kind": "crash", "job": "a"}])
    twin = build_twin(trace, Path(tempfile.mkdtemp()) / "f.csv")
    assert twin.physics.failure_mode == "requeue"
    for mode in ("requeue", "restore"):
        seen: list[tuple[float, int, int, int]] = []

        def observe(
            s: RoundSnapshot, _a: Allocation, _p: object, seen: list[tuple[float, int, int, int]] = seen
        ) -> None:
            seen.append((s.time_s, int(s.current[0]), int(s.restarts[0]), int(s.failures[0])))

        physics = dataclasses.replace(twin.physics, failure_mode=mode)
        sim = Simulator(twin.workload, twin.cluster, twin.catalog, physics, restore_s=twin.restore_s)
        r = sim.run(make_policy("oak"), 0.0, 0, on_round=observe)
        at_crash = [x for x in seen if x[0] == pytest.approx(20.0)]
        if mode == "requeue":
            assert at_crash and at_crash[0][1:] == (-1, 0, 1)
        else:
            assert not at_crash or at_crash[0][1] >= 0
        assert r.jobs[0].restarts == 1 and r.jobs[0].failures == 1
        assert r.jobs[0].jct_s == pytest.approx(58.0, rel=1e-3)


def test_a_job_exiting_after_its_last_step_holds_its_devices_with_no_work_left() -> None:
    """a (200 steps at 0.1 s on 2 devices, 2 s to start) takes its last step at ~22 s and exits for 1.5 s: done
    at ~23.5 s, and b, which arrives at 22.8 s and is given every device, gets them only then. The round at b's
    arrival sees a with no work left and keeps it where it is (the runtime's snapshot of a job exiting)."""
    a = _job("a", 200, {1: 0.2, 2: 0.1}, 2.0)
    b = {**_job("b", 100, {1: 0.2, 2: 0.1}, 3.0), "submit_s": 22.8}
    twin = build_twin(_trace([a, b], [], devices=2), Path(tempfile.mkdtemp()) / "f.csv")
    seen: list[RoundSnapshot] = []

    def observe(s: RoundSnapshot, _a: Allocation, _p: object) -> None:
        seen.append(s)

    runs = {}
    for exit_s in (0.0, 1.5):
        sim = Simulator(
            twin.workload, twin.cluster, twin.catalog, twin.physics,
            restore_s={"a": 2.0, "b": 3.0}, exit_s={"a": exit_s},
        )  # fmt: skip
        runs[exit_s] = {j.name: j for j in sim.run(_Newest(), 0.0, 0, on_round=observe).jobs}
    ra, rb, a0, b0 = runs[1.5]["a"], runs[1.5]["b"], runs[0.0]["a"], runs[0.0]["b"]
    assert ra.jct_s is not None and rb.jct_s is not None and a0.jct_s is not None and b0.jct_s is not None
    assert ra.jct_s - a0.jct_s == pytest.approx(1.5) and ra.restarts == 0
    assert 22.8 < ra.jct_s < 24.0  # b arrived while a exited
    assert rb.jct_s - b0.jct_s == pytest.approx(ra.jct_s - 22.8)  # b started on a's devices once a was done
    exiting = [s for s in seen if "a" in s.job_names and s.remaining_work[0] == 0.0]
    assert exiting and all(int(s.current[0]) >= 0 for s in exiting)


def test_a_learned_command_job_is_known_once_it_has_run_even_at_its_first_size() -> None:
    """The run's scheduler takes a command job's length and speed as placeholders until it has reported step
    times; so does the replay, and a job that ran only at its smallest size (the bootstrap's) has reported
    them too: it pays the admission cost by its remaining time from then on, not the placeholder's."""
    job = {**_job("c", 400, {1: 0.25}, 1.0), "command": True, "application": ""}
    twin = build_twin(_trace([job], []), Path(tempfile.mkdtemp()) / "f.csv")
    assert twin.learn == {"c"}
    known: list[tuple[float, bool]] = []

    def observe(s: RoundSnapshot, _a: Allocation, _p: object) -> None:
        assert s.work_known is not None
        known.append((s.time_s, bool(s.work_known[0])))

    twin.simulator().run(make_policy("oak"), 0.0, 0, on_round=observe)
    assert known[0] == (0.0, False) and known[-1][1]  # unknown at its arrival, known after a round of running


def test_a_start_is_seen_restoring_as_long_as_the_run_saw_it_and_credited_the_steps_taken_meanwhile() -> None:
    """a (200 steps at 0.1 s on 2 devices) costs 2 s to start. Seen by the scheduler 5 s after its launch, with
    the 3 s of running it did meanwhile credited, the round at b's arrival (4 s) finds it restoring, as the run's
    did, and it ends when a 2-s start without credit ends it (22 s); with 1 s credited it ends 2 s later."""
    a = _job("a", 200, {1: 0.2, 2: 0.1}, 2.0)
    b = {**_job("b", 100, {1: 0.2, 2: 0.1}, 3.0), "submit_s": 4.0}
    twin = build_twin(_trace([a, b], [], devices=4), Path(tempfile.mkdtemp()) / "f.csv")
    jct: dict[tuple[float, float], float | None] = {}
    for start, credit in ((2.0, 0.0), (5.0, 3.0), (5.0, 1.0)):
        seen: list[RoundSnapshot] = []

        def observe(s: RoundSnapshot, _a: Allocation, _p: object, seen: list[RoundSnapshot] = seen) -> None:
            seen.append(s)

        sim = Simulator(
            twin.workload, twin.cluster, twin.catalog, twin.physics,
            restore_s={"a": 2.0, "b": 3.0}, first_start_s={"a": start}, credit_s={"a": (credit, 0.0)},
        )  # fmt: skip
        r = sim.run(make_policy("oak"), 0.0, 0, on_round=observe)
        at_b = [s for s in seen if s.time_s == pytest.approx(4.0)]
        assert at_b and bool(at_b[0].restoring[0]) == (start > 4.0)
        assert r.jobs[0].t_ckpt_s == pytest.approx(start) and r.jobs[0].restarts == 0
        jct[(start, credit)] = r.jobs[0].jct_s
    assert jct[(2.0, 0.0)] == pytest.approx(22.0, rel=0.01)
    assert jct[(5.0, 3.0)] == pytest.approx(jct[(2.0, 0.0)])
    assert jct[(5.0, 1.0)] == pytest.approx(jct[(2.0, 0.0)] + 2.0)
    for bad in ({"c": (1.0, 1.0)}, {"a": (-1.0, 0.0)}):
        with pytest.raises(OakInputError, match="start credit of job"):
            Simulator(twin.workload, twin.cluster, twin.catalog, twin.physics, credit_s=bad)


def test_the_restore_a_replay_counts_is_the_one_the_runs_scheduler_counted() -> None:
    """The run's scheduler counted a start's time as restore (T_ckpt) up to the tick before the one that saw the
    job past its resume step, and that tick's as running: the note says how much. The replay keeps the delay
    as seen (so its rounds and the JCT are as before) and counts the same split: a's first start, 5 s seen (4 s
    of start-up, 1 s of steps credited) of which 4.2 s counted, has T_ckpt 4.2 s and 0.8 s more running."""
    (inc,) = incarnations(
        [[0.0, "restoring", "launched on device(s) [0, 1] from step 0"],
         [5.0, "running", "past its resume step (0) after 4.200 s restoring"], [24.0, "done", "finished at step 200"]]
    )  # fmt: skip
    assert inc["restore_s"] == 4.2
    a = _job("a", 200, {1: 0.2, 2: 0.1}, 2.0, incarnations=[inc])
    twin = build_twin(_trace([a], [], devices=2), Path(tempfile.mkdtemp()) / "f.csv")
    assert twin.first_start_s["a"] == pytest.approx(5.0) and twin.counted_s["a"][0] == pytest.approx(4.2)
    plain = dataclasses.replace(twin, counted_s={}).simulator().run(make_policy("oak"), 0.0, 0).jobs[0]
    counted = twin.simulator().run(make_policy("oak"), 0.0, 0).jobs[0]
    assert plain.t_ckpt_s == pytest.approx(5.0) and counted.t_ckpt_s == pytest.approx(4.2)
    assert counted.t_progress_s == pytest.approx(plain.t_progress_s + 0.8)
    assert counted.t_queue_s == pytest.approx(plain.t_queue_s - 0.8)
    assert counted.jct_s == pytest.approx(plain.jct_s) and counted.restarts == plain.restarts
    with pytest.raises(OakInputError, match="counted restore of job"):
        Simulator(twin.workload, twin.cluster, twin.catalog, twin.physics, counted_s={"a": (-1.0, 0.0)})


def test_a_job_arrives_when_the_runs_scheduler_took_it_in_and_its_jct_counts_from_its_submission() -> None:
    """b, submitted at 10 s, was taken in by the run's scheduler at its tick 0.4 s later: the replay's round on
    its arrival runs then, and its JCT still counts from 10 s (0.4 s longer than with no lag)."""
    assert arrived([[10.4, "queued", "arrived"], [10.4, "restoring", "launched on device(s) [0]"]]) == 10.4
    assert arrived([]) is None
    a = _job("a", 400, {1: 0.2, 2: 0.1}, 2.0)
    b = {**_job("b", 100, {1: 0.2, 2: 0.1}, 3.0), "submit_s": 10.0}
    results = {}
    for seen in (None, 10.4):
        twin = build_twin(_trace([a, {**b, "arrived_s": seen}], [], devices=2), Path(tempfile.mkdtemp()) / "f.csv")
        assert twin.arrival_lag_s == ({} if seen is None else {"b": pytest.approx(0.4)})
        times: list[float] = []

        def observe(s: RoundSnapshot, _a: Allocation, _p: object, times: list[float] = times) -> None:
            times.append(s.time_s)

        r = {j.name: j for j in twin.simulator().run(_Newest(), 0.0, 0, on_round=observe).jobs}
        assert r["b"].submit_s == 10.0 and (seen or 10.0) in times and (seen is None or 10.0 not in times)
        results[seen] = r
    jb0, jb = results[None]["b"].jct_s, results[10.4]["b"].jct_s
    assert jb0 is not None and jb is not None and jb - jb0 == pytest.approx(0.4)
    assert results[10.4]["b"].t_queue_s == pytest.approx(results[None]["b"].t_queue_s)  # queued from its arrival


def test_step_times_span_the_reports_the_scheduler_missed(tmp_path: Path) -> None:
    """A job reports steps 0–10 at 0.1 s, 10–20 at 1 s (a stall) and 20–30 at 0.1 s, each report timing the
    steps since the one before. A scheduler that read the first and the last only (it stalled too) records the
    last as 20 steps over the 11 s since the first, not 10 steps at 0.1 s: its log holds all 30 steps in 12 s.
    A report read again adds nothing; one whose own step time is absurd is not used."""
    text = "jobs:\n  - {name: j, model: tiny, target_steps: 100, max_gpus: 1, batch_size: 8}\n"
    ex = ScriptedExecutor([Fate()])
    opts = RuntimeOptions(devices=1, round_s=60.0, tick_s=1.0, time_limit_s=3600.0)
    sched = RuntimeScheduler(
        parse_jobs(text, "one.yaml"), make_policy("oak"), tmp_path / "run", opts, ex, clock=ex.clock
    )
    job, r = sched.jobs[0], JobRecord("j")
    r.devices = [0]
    for steps_timed, step_time, updated, step in [(10, 0.1, 101.0, 10), (10, 0.1, 101.0, 10), (10, 0.1, 112.0, 30)]:
        sched._record_step_time(job, r, steps_timed, step_time, updated, step)
    samples = StepTimeLog.from_dict(r.steplog).samples()
    assert sum(s.steps for s in samples) == 30
    assert sum(s.steps * s.step_time_s for s in samples) == pytest.approx(12.0)
    sched._record_step_time(job, r, 10, math.inf, 125.0, 50)  # absurd: not used, whatever it missed
    assert sum(s.steps for s in StepTimeLog.from_dict(r.steplog).samples()) == 30


def test_replay_without_its_own_policy_prints_the_table_and_no_gap(tmp_path: Path) -> None:
    """--policies without own (the help says own is optional) ended in StopIteration after the table."""
    from typer.testing import CliRunner

    from oak.cli.main import app

    t = tmp_path / "t.json"
    t.write_text(json.dumps(_trace([_job("a", 200, {1: 0.5, 2: 0.3}, 5.0)], [])))
    res = CliRunner().invoke(app, ["replay", str(t), "--policies", "sia", "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert "the run's own policy (oak) was not simulated" in " ".join(res.output.split())
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["gap"] is None and [r["policy"] for r in doc["runs"]] == ["sia"]


def test_an_output_naming_a_file_of_the_run_directory_is_refused(tmp_path: Path) -> None:
    """export-trace --out RUN/state.sqlite and replay RUN --json RUN/state.sqlite replaced the run's database."""
    from typer.testing import CliRunner

    from oak.cli.main import app

    run = tmp_path / "run"
    run.mkdir()
    db = run / "state.sqlite"
    db.write_bytes(b"SQLite format 3\x00")
    for args in (["export-trace", str(run), "--out", str(db)], ["replay", str(run), "--json", str(db)]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, res.output
        assert "inside what the run directory" in " ".join(res.output.split()), res.output
    assert db.read_bytes() == b"SQLite format 3\x00"
    # a trace exported beside the state may be exported again
    (run / "trace.json").write_text("{}")
    res = CliRunner().invoke(app, ["export-trace", str(run), "--out", str(run / "trace.json")])
    assert "inside what the run directory" not in " ".join(res.output.split()), res.output


def _edited(**change: Any) -> dict[str, Any]:
    trace = _trace([_job("a", 200, {1: 0.5, 2: 0.3}, 5.0), _job("b", 100, {1: 0.4}, 3.0)], [])
    for path, value in change.items():
        *keys, last = path.split("__")
        node: Any = trace
        for k in keys:
            node = node[int(k)] if k.isdigit() else node[k]
        node[int(last) if last.isdigit() else last] = value
    return trace


def _fails(**target: Any) -> dict[str, Any]:
    return {"failures": [{"time_s": 3.0, "kind": "node-loss", **target}]}


@pytest.mark.parametrize(
    ("change", "message"),
    [  # each was replayed as something else (seed 1, a job done at once, 3 jobs of 2 names) or a traceback
        ({"run__seed": 1.5}, "run.seed 1.5: expected an integer from 0 to 2^64 - 1"),
        ({"jobs__1__name": "a"}, "jobs[1]: job name 'a' given twice"),
        ({"jobs__0__total_steps": -5}, "jobs[0].total_steps -5: expected an integer >= 1"),
        ({"jobs__0__restore_s": float("nan")}, "jobs[0].restore_s nan: expected a number of seconds >= 0"),
        ({"failures": [{"time_s": 3.0, "kind": "meteor", "job": "a"}]}, "failures[0].kind 'meteor': expected one"),
        ({"jobs__0__measured": None}, "jobs[0].measured: expected a JSON object"),
        ({"run__failure_rate": 2}, "run.failure_rate 2: expected a probability in [0, 1]"),
        ({"jobs__0__steplog": {"entries": "x"}}, "the trace cannot be read ("),
        # a failure line's target: a traceback, an error naming a temporary file, or (neither) dropped unsaid
        (_fails(node="x", down_s=10), "failures[0].node 'x': expected a node index from 0 to 0 (the run has 1"),
        (_fails(node=3, down_s=10), "failures[0].node 3: expected a node index from 0 to 0"),
        (_fails(node=True, down_s=10), "failures[0].node True: expected a node index"),
        (_fails(node=0, down_s=-1), "failures[0].down_s -1: expected a number of seconds > 0"),
        (_fails(node=0), "failures[0]: missing field 'down_s'"),
        (_fails(job="zz"), "failures[0].job 'zz': expected the name of one of the trace's jobs"),
        (_fails(), "failures[0]: expected exactly one of job (a job's failure) and node (a node's)"),
        (_fails(job="a", node=0, down_s=10), "failures[0]: expected exactly one of job"),
    ],
)
def test_a_hand_edited_trace_is_an_input_error(
    tmp_path: Path,
    change: dict[str, Any],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    from oak.cli.main import main

    t = tmp_path / "t.json"
    t.write_text(json.dumps(_edited(**change)))
    monkeypatch.setattr(sys, "argv", ["oak", "replay", str(t), "--policies", "own"])
    with pytest.raises(SystemExit) as exit_:  # through the entry point, which turns input errors into exit 2
        main()
    out = capsys.readouterr()
    text = " ".join((out.out + out.err).split())
    assert exit_.value.code == 2, text
    assert message in text and "Traceback" not in text, text


def test_replay_seeds_that_would_pass_64_bits_are_refused() -> None:
    """A run at seed 2^64 - 1 replayed with 2 seeds asked the simulator for seed 2^64 (which it refuses)."""
    from oak.errors import OakInputError

    trace = _edited(run__seed=(1 << 64) - 1)
    with pytest.raises(OakInputError, match=r"--seeds 2: from the run's seed 18446744073709551615"):
        replay(trace, ["oak"], seeds=2)
    twin, results = replay(trace, ["oak"], seeds=1)
    assert twin.seed == (1 << 64) - 1 and len(results) == 1
