"""How `oak run` ends jobs that cannot run: usage errors, crash loops, stalled collectives, GPU counts, ports.

Most tests drive the real scheduler with a scripted executor (no processes) on a fake clock
(``oak.runtime.clock.FakeClock``): each launch's fate is decided by the script, and the scheduler's tick moves the
clock instead of waiting, so the retry limit, the back-off and the stall detector are checked at their real
settings (30 s back-offs, a 180 s stall) in milliseconds, to the tick, without timing races on a busy CPU. The rest run real workers: a job whose data vanished after the jobs file was loaded (the worker
exits 2), a rank frozen with SIGSTOP (its status stops updating, as in a hung NCCL collective), and a
two-rank job whose launcher's would-be port is taken by another process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from typer.testing import CliRunner

from oak.errors import OakInputError
from oak.policies import make_policy
from oak.runtime import launch
from oak.runtime.jobs_file import parse_jobs
from oak.runtime.scheduler import RuntimeOptions, RuntimeScheduler
from support.scripted import Fate, ScriptedExecutor

ONE_JOB = "jobs:\n  - {name: j, model: tiny, target_steps: 100, max_gpus: 1, batch_size: 8, ckpt_every: 10}\n"


def _scripted(
    tmp_path: Path, fates: list[Fate], text: str = ONE_JOB, **opts: Any
) -> tuple[RuntimeScheduler, ScriptedExecutor]:
    """A scheduler of ``text``'s jobs on a scripted executor, both on one fake clock (1 s ticks, 60 s rounds)."""
    ex = ScriptedExecutor(fates)
    options = RuntimeOptions(**{"devices": 1, "round_s": 60.0, "tick_s": 1.0, **opts})
    sched = RuntimeScheduler(
        parse_jobs(text, "one.yaml"), make_policy("oak"), tmp_path / "run", options, ex, clock=ex.clock
    )
    return sched, ex


def _gaps(ex: ScriptedExecutor) -> list[float]:
    return [b[0] - a[0] for a, b in zip(ex.launches, ex.launches[1:], strict=False)]


def test_failures_without_progress_stop_after_the_retry_limit_with_back_off(tmp_path: Path) -> None:
    sched, ex = _scripted(tmp_path, [Fate()], max_retries=3, retry_backoff_s=30.0, time_limit_s=3600.0)
    result = sched.run()
    r = sched.records[0]
    assert len(ex.launches) == 3, ex.launches
    gaps = _gaps(ex)  # 30 s, then 60 s of back-off, each seen at the next tick after the failure (1 s)
    assert 30.0 <= gaps[0] <= 32.0 and 60.0 <= gaps[1] <= 62.0, gaps
    assert r.gave_up is not None and "3 failures in a row without progress" in r.gave_up
    assert r.failures == 3 and not r.done and result.jobs[0].jct_s is None
    assert result.end_time_s < 200.0  # the run ended when the job was given up, not at the time limit


def test_progress_resets_the_retry_count(tmp_path: Path) -> None:
    """Failures after steps were made are the cluster's, not the job's: a job that fails five times but
    advances each time is retried every time (without back-off) and finishes."""
    fates = [Fate(reach=10 * (k + 1), after_s=5.0) for k in range(5)] + [Fate(end="done", reach=100, after_s=5.0)]
    sched, ex = _scripted(tmp_path, fates, max_retries=2, retry_backoff_s=30.0, time_limit_s=3600.0)
    sched.run()
    r = sched.records[0]
    assert r.done and r.gave_up is None and r.failures == 5 and len(ex.launches) == 6
    assert all(g <= 7.0 for g in _gaps(ex)), _gaps(ex)  # never backed off: 5 s runs, relaunched at the next tick


def test_a_command_job_that_was_advancing_is_placed_again_without_back_off(tmp_path: Path) -> None:
    """[hardening] row 11: a command job whose rank was SIGKILLed after it had made progress waited out the
    30 s back-off with its devices idle (its checkpoints are its own: the scheduler learns where it resumes only
    from its next report). Now a job that reported steps beyond where it resumed is placed again at once; one
    that fails before reporting any still backs off."""
    command = "jobs:\n  - {name: j, command: [train], max_gpus: 1, target_steps: 100}\n"
    fates = [Fate(reach=5, after_s=20.0, exit_codes=(-9,)), Fate(end="done", reach=100, after_s=5.0)]
    sched, ex = _scripted(tmp_path, fates, command, retry_backoff_s=30.0, time_limit_s=3600.0)
    sched.run()
    r = sched.records[0]
    assert r.done and r.failures == 1 and len(ex.launches) == 2
    assert 20.0 <= _gaps(ex)[0] <= 22.0  # its 20 s run, then at once: not 30 s of back-off
    silent = [Fate(reach=0, after_s=20.0, exit_codes=(-9,)), Fate(end="done", reach=100, after_s=5.0)]
    sched, ex = _scripted(tmp_path / "2", silent, command, retry_backoff_s=30.0, time_limit_s=3600.0)
    sched.run()
    assert 50.0 <= _gaps(ex)[0] <= 52.0  # reported nothing: its 20 s run, then 30 s of back-off


def test_steps_lost_with_the_failure_are_not_progress(tmp_path: Path) -> None:
    """A job that crashes every time before its next checkpoint makes no durable progress: it backs off and is
    given up, however many steps each incarnation reported before dying."""
    sched, ex = _scripted(
        tmp_path, [Fate(reach=5, durable=False, after_s=3.0)], max_retries=3, retry_backoff_s=30.0, time_limit_s=3600.0
    )
    sched.run()
    r = sched.records[0]
    assert len(ex.launches) == 3 and r.gave_up is not None and "without progress" in r.gave_up


def test_a_usage_error_fails_the_job_at_once(tmp_path: Path) -> None:
    sched, ex = _scripted(tmp_path, [Fate(exit_codes=(2, -9))], max_retries=5, time_limit_s=3600.0)
    sched.run()
    r = sched.records[0]
    assert len(ex.launches) == 1 and r.failures == 1
    assert (
        r.gave_up is not None
        and "input error" in r.gave_up
        and "[2, -9]" in r.gave_up
        and "first failure: 2" in r.gave_up
    )


def test_a_stalled_job_is_killed_as_failed_and_relaunched(tmp_path: Path) -> None:
    """A job whose status stops updating while its ranks still run (a hung collective) is killed after
    ``stall_s``; the next incarnation runs normally and finishes."""
    fates = [Fate(end="running", reach=5, freeze=True), Fate(end="done", reach=100, after_s=5.0)]
    sched, ex = _scripted(tmp_path, fates, stall_s=180.0, retry_backoff_s=30.0, time_limit_s=3600.0)
    sched.run()
    r = sched.records[0]
    assert r.done and r.failures == 1 and ex.kills >= 1 and len(ex.launches) == 2
    assert "stalled" in sched.failure_notes["j"]
    stalled_for = _gaps(ex)[0]  # the stall limit, to the tick; its checkpoint at step 5 was progress: no back-off
    assert 180.0 <= stalled_for <= 182.0, stalled_for


def test_a_job_that_never_reports_is_a_stall_too(tmp_path: Path) -> None:
    class Silent(ScriptedExecutor):
        def status(self, name: str) -> dict[str, Any] | None:
            return None

    ex = Silent([Fate(end="running")])
    opts = RuntimeOptions(devices=1, round_s=60.0, tick_s=1.0, stall_s=180.0, max_retries=2, time_limit_s=3600.0)
    sched = RuntimeScheduler(
        parse_jobs(ONE_JOB, "one.yaml"), make_policy("oak"), tmp_path / "run", opts, ex, clock=ex.clock
    )
    sched.run()
    r = sched.records[0]
    assert r.gave_up is not None and "no status since its launch" in r.gave_up and len(ex.launches) == 2


@pytest.mark.parametrize(
    ("field_", "value"), [("max_retries", 0), ("retry_backoff_s", -1.0), ("stall_s", 0.0), ("stall_s", float("nan"))]
)
def test_retry_options_are_checked(field_: str, value: float) -> None:
    with pytest.raises(OakInputError, match=field_):
        RuntimeOptions(devices=1, **{field_: value})


# ----------------------------------------------------------------------------------------- real workers
torch_missing = pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None, reason="needs torch (the runtime extra)"
)


def _cifar_folder(path: Path) -> Path:
    import pickle

    import numpy as np

    path.mkdir(parents=True)
    batch = {b"data": np.zeros((16, 3072), dtype=np.uint8), b"labels": [0] * 16}
    (path / "data_batch_1").write_bytes(pickle.dumps(batch))
    return path


@torch_missing
def test_worker_usage_error_ends_the_job_with_its_log(tmp_path: Path) -> None:
    """The data folder passes the load-time check, then vanishes (an unmounted share): the worker exits 2,
    and the job fails for good at once with the end of its rank log, instead of being relaunched forever."""
    data = _cifar_folder(tmp_path / "cifar")
    text = (
        "jobs:\n  - {name: v, model: tiny, target_steps: 50, max_gpus: 1, batch_size: 8, ckpt_every: 10,"
        f" data: {data}}}\n"
    )
    jobs = parse_jobs(text, "v.yaml")
    for f in data.iterdir():
        f.unlink()
    opts = RuntimeOptions(devices=1, round_s=30.0, tick_s=0.05, time_limit_s=120.0)
    sched = RuntimeScheduler(jobs, make_policy("oak"), tmp_path / "run", opts)
    result = sched.run()
    r = sched.records[0]
    assert r.gave_up is not None and "input error" in r.gave_up, sched.failure_notes
    assert r.incarnations == 1 and result.end_time_s < 100.0
    note = sched.failure_notes["v"]
    assert "rank0.log" in note and "no data_batch_* files" in note


@pytest.mark.long
@torch_missing
def test_frozen_rank_is_detected_as_a_stall(tmp_path: Path) -> None:
    """SIGSTOP freezes the job's rank mid-run (as a hung collective does): its status.json stops updating,
    the scheduler kills it after stall_s and relaunches it from its checkpoint; the job finishes."""
    text = (
        "jobs:\n  - {name: s, model: tiny, target_steps: 400, max_gpus: 1, batch_size: 8, ckpt_every: 20,"
        " min_step_s: 0.02}\n"
    )
    # stall_s must exceed a worker's start-up (a cold torch import on a slow machine): 15 s
    opts = RuntimeOptions(devices=1, round_s=60.0, tick_s=0.05, stall_s=15.0, retry_backoff_s=0.0, time_limit_s=300.0)
    sched = RuntimeScheduler(parse_jobs(text, "s.yaml"), make_policy("oak"), tmp_path / "run", opts)
    frozen: list[int] = []

    def freeze_once(now: float, done: int, total: int) -> None:
        r = sched.records[0]
        if not frozen and r.ready and r.step >= 60 and r.pids:
            os.kill(r.pids[0], signal.SIGSTOP)
            frozen.append(r.pids[0])

    result = sched.run(progress=freeze_once)
    r = sched.records[0]
    assert frozen, "the job never reached step 60"
    assert r.done and r.failures == 1 and r.incarnations == 2, (r, sched.failure_notes)
    assert "stalled" in sched.failure_notes["s"]
    assert result.jobs[0].jct_s is not None


@torch_missing
def test_rank0_binds_the_rendezvous_port_itself(tmp_path: Path) -> None:
    """The launcher picks no port (one it picked could be taken before rank 0 bound it): every rank gets
    ``--master-port 0`` and this incarnation's token, rank 0 binds a port the OS chooses and publishes it, and
    the two-rank job runs on it."""
    spec = launch.WorkerSpec(model="tiny", target_steps=6, batch_size=8, ckpt_every=3)
    with launch.start_worker(tmp_path / "job", spec, world_size=2, devices=[0, 1]) as h:
        assert h.wait(180) == 0, launch.log_tail(h.job_dir, 2)
        port, token = h.master_port, h.rendezvous
    published = json.loads((tmp_path / "job" / "rendezvous.json").read_text())
    assert port is not None and published == {"token": token, "port": port}
    for rank in (0, 1):
        start = (tmp_path / "job" / f"rank{rank}.log").read_text().splitlines()[0]
        assert "'--master-port', '0'" in start and f"'--rendezvous', '{token}'" in start
    assert (tmp_path / "job" / "done").is_file()


def test_kill_waits_a_bounded_time_for_an_unreapable_rank(tmp_path: Path) -> None:
    """A rank stuck in the driver is not reaped after SIGKILL: ``kill`` returns within its bound and names it."""

    class Stuck(subprocess.Popen[bytes]):
        def __init__(self) -> None:  # no process: poll/wait behave as for one in uninterruptible sleep
            self.pid = 424242
            self.returncode = None

        def poll(self) -> int | None:
            return None

        def wait(self, timeout: float | None = None) -> int:
            time.sleep(min(timeout or 0.0, 5.0))
            raise subprocess.TimeoutExpired("rank", timeout or 0.0)

        def send_signal(self, sig: int) -> None:
            pass

        def __del__(self) -> None:
            pass

    h = launch.WorkerHandle(tmp_path, [Stuck()], None)
    t0 = time.monotonic()
    assert h.kill(reap_s=0.3) == [None]
    assert time.monotonic() - t0 < 2.0 and h.unreaped() == [424242]


# ----------------------------------------------------------------------------------------- GPU counts
def test_gpus_n_is_checked_against_the_visible_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from oak.cli import run as run_cli
    from oak.cli.main import app

    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(ONE_JOB)
    monkeypatch.setattr(run_cli, "visible_gpus", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    res = CliRunner().invoke(app, ["run", str(jobs), "--gpus", "3", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2, res.output
    assert "--gpus 3: only 2 CUDA GPU(s) visible under CUDA_VISIBLE_DEVICES='4,5'" in res.output
    assert not (tmp_path / "r").exists()
    monkeypatch.setattr(run_cli, "visible_gpus", lambda: 0)
    res = CliRunner().invoke(app, ["run", str(jobs), "--gpus", "auto", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "no CUDA GPU is visible" in res.output


def test_gpu_count_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    from oak.cli import run as run_cli

    monkeypatch.setattr(run_cli, "visible_gpus", lambda: 8)
    assert run_cli._gpu_count("auto") == 8
    assert run_cli._gpu_count("auto", auto_max=4) == 4  # table4: the paper's 4 GPUs
    assert run_cli._gpu_count("6") == 6


def test_table4_runs_are_keyed_by_scale_and_devices() -> None:
    from oak.reproduce.table4 import run_key

    keys = {
        run_key("small", 4, "cpu", "oak", 0.1, 0),
        run_key("full", 4, "cpu", "oak", 0.1, 0),
        run_key("full", 4, "gpu", "oak", 0.1, 0),
        run_key("full", 8, "gpu", "oak", 0.1, 0),
    }
    assert len(keys) == 4


@torch_missing
def test_cuda_determinism_settings() -> None:
    """The flags a CUDA rank sets before its first kernel (restored afterwards: they are process-global)."""
    import torch

    from oak.runtime import worker

    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.matmul.allow_tf32,
        os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    )
    try:
        worker.make_cuda_deterministic()
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] in (":4096:8", ":16:8")
        # every op of the shipped models has a deterministic implementation (use_deterministic_algorithms
        # raises on one that does not, e.g. adaptive_avg_pool2d's CUDA backward, on CPU only where it applies)
        from oak.runtime.models import build_model

        model = build_model("resnet18", width_mult=0.125)
        model(torch.zeros(2, 3, 32, 32)).sum().backward()
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[1], before[2]
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before[3], before[4]
        if before[5] is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = before[5]


def test_resnet_backward_has_no_adaptive_pooling() -> None:
    """AdaptiveAvgPool2DBackward uses atomics on CUDA (use_deterministic_algorithms raises there, on CUDA only):
    the model's autograd graph holds no such node, which CPU can check. (adaptive_avg_pool2d to 1×1, which the
    model used, already dispatches to a mean on every device; the model now says mean outright.)"""
    torch = pytest.importorskip("torch")
    from oak.runtime.models import build_model

    out = build_model("resnet18", width_mult=0.125)(torch.zeros(2, 3, 32, 32)).sum()
    seen, todo = set(), [out.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        todo.extend(f for f, _ in fn.next_functions)
    names = {type(fn).__name__ for fn in seen}
    assert any("Conv" in n for n in names) and not any("AdaptiveAvgPool" in n for n in names), names


@torch_missing
def test_oak_run_reports_a_job_given_up_and_exits_1(tmp_path: Path) -> None:
    """A job whose folder holds another model's checkpoint (its worker refuses it: exit 2) is reported as
    failed with its rank log, and ``oak run`` exits 1; the other job finishes."""
    import shutil

    from oak.cli.main import app

    tiny = "{name: x, model: tiny, target_steps: 4, max_gpus: 1, batch_size: 8, ckpt_every: 2}"
    first = tmp_path / "first.yaml"
    first.write_text(f"jobs:\n  - {tiny}\n")
    base = ["--cpu-slots", "2", "--round-seconds", "5"]
    res = CliRunner().invoke(app, ["run", str(first), *base, "--run-dir", str(tmp_path / "r1")])
    assert res.exit_code == 0, res.output
    (tmp_path / "r2" / "jobs").mkdir(parents=True)
    shutil.copytree(tmp_path / "r1" / "jobs" / "x", tmp_path / "r2" / "jobs" / "x")
    second = tmp_path / "second.yaml"
    second.write_text(
        "jobs:\n  - {name: x, model: resnet18, width_mult: 0.125, target_steps: 4, max_gpus: 1, batch_size: 8,"
        " ckpt_every: 2}\n  - {name: y, model: tiny, target_steps: 4, max_gpus: 1, batch_size: 8, ckpt_every: 2}\n"
    )
    res = CliRunner().invoke(app, ["run", str(second), *base, "--run-dir", str(tmp_path / "r2")])
    assert res.exit_code == 1, res.output
    assert "x failed" in res.output and "input error" in res.output and "rank0.log" in res.output
    assert "checkpoint of" in res.output  # the worker's own message, from the end of its log
    assert (tmp_path / "r2" / "jobs" / "y" / "done").is_file()


def test_local_reconcile_kills_what_is_not_intended(tmp_path: Path) -> None:
    from oak.runtime.executor import LocalExecutor

    ex = LocalExecutor("cpu")
    proc = subprocess.Popen(["sleep", "60"])
    ex.backend._handles["stray"] = launch.WorkerHandle(tmp_path, [proc], None)  # not launched by the scheduler
    ex.backend._handles["ok"] = launch.WorkerHandle(tmp_path, [subprocess.Popen(["sleep", "60"])], None)
    issues = ex.reconcile({"ok": (0,), "missing": (1, 2)})
    assert issues == [
        "stray: runs on 1 rank(s) but is not intended; killed",
        "missing: intended on 2 device(s), no process runs it",
    ]
    assert proc.poll() is not None and "stray" not in {n for n, r in ex.backend.list().items() if None in r.codes}
    assert ex.reconcile({"ok": (0, 1)}) == ["ok: intended on 2 device(s), runs 1 rank(s)"]
    ex.shutdown()


def test_the_tick_is_sync_then_step_next_driven_on_data(tmp_path: Path) -> None:
    """The reconciler's two halves driven by hand over hundreds of rounds of a fake clock: ``sync`` takes in
    what the executor did (two failures without progress, then a long run that finishes), ``step_next`` decides,
    launches and commits; each change of phase is in the job's history with its time and reason."""
    fates = [Fate(after_s=5.0), Fate(after_s=5.0), Fate(end="done", reach=100, after_s=20_000.0)]
    sched, ex = _scripted(tmp_path, fates, max_retries=5, retry_backoff_s=30.0, tick_s=20.0)
    start = sched.begin()
    rounds_before = sched.store.rounds()
    last = 0.0
    while not sched.records[0].done:
        now = ex.clock.time() - start
        sched.sync(now, now - last)
        sched.step_next(now)
        last = now
        ex.clock.sleep(sched.opts.tick_s)
        assert now < 30_000.0, sched.records[0]
    r = sched.records[0]
    assert len(ex.launches) == 3 and r.failures == 2 and r.restarts == 2 and 20_000.0 <= r.finish_s < 20_200.0
    assert sched.store.rounds() - rounds_before > 300  # a round a minute, each decided and committed
    phases = [p for _, p, _ in r.history]
    assert phases == [  # the failing incarnations never got past the step they resumed from: restoring, not running
        "queued",
        "restoring",
        "backoff",
        "queued",
        "restoring",
        "backoff",
        "queued",
        "restoring",
        "running",
        "done",
    ], r.history
    why = {p: w for _, p, w in r.history}
    assert why["backoff"].startswith("rank exit statuses [1]") and why["done"] == "finished at step 100"
    times = [t for t, _, _ in r.history]
    assert times == sorted(times) and times[3] - times[2] >= 30.0  # the first back-off: 30 s, to the tick


def test_the_waiting_guard_admits_a_starving_job_after_a_day_of_fake_clock(tmp_path: Path) -> None:
    """oak's waiting guard at its real settings (a job that has waited ``max_wait_s`` = 1 day is admitted and
    protected for ``guard_run_s`` = 1 h), through the runtime: 1,500 rounds of a fake clock. Job ``a`` holds the
    only device; ``b`` arrives at 60 s and waits, never worth a restart of ``a`` — until the guard admits it: ``a``
    is stopped with a checkpoint, ``b`` launched and kept for the hour. The guard's state lives in the policy's
    state between rounds, which the runtime carries over (``JobsState.policy_state``)."""
    from oak.policies.restart_aware import RestartAwareOakPolicy

    two = ONE_JOB.replace("name: j", "name: a") + ONE_JOB.split("\n", 1)[1].replace("name: j", "name: b").replace(
        "ckpt_every: 10}", "ckpt_every: 10, submit_s: 60}"
    )
    policy = RestartAwareOakPolicy()
    assert policy.max_wait_s == 86_400.0 and policy.guard_run_s == 3_600.0  # the shipped settings
    ex = ScriptedExecutor([Fate(end="running", reach=10)])
    opts = RuntimeOptions(devices=1, round_s=60.0, tick_s=60.0)
    sched = RuntimeScheduler(parse_jobs(two, "two.yaml"), policy, tmp_path / "run", opts, ex, clock=ex.clock)
    start = sched.begin()
    last = 0.0
    while (now := ex.clock.time() - start) < 60.0 + 86_400.0 + 3_600.0 + 600.0:
        sched.sync(now, now - last)
        sched.step_next(now)
        last = now
        ex.clock.sleep(opts.tick_s)
    a, b = sched.records
    launched = [t for t, p, _ in b.history if p == "restoring"]
    assert launched and 60.0 + 86_400.0 <= launched[0] <= 60.0 + 86_400.0 + 180.0, b.history
    assert [p for _, p, _ in a.history][:4] == ["queued", "restoring", "running", "stopping"], a.history
    stopped = next(t for t, p, _ in a.history if p == "stopping")
    assert stopped <= launched[0]  # its device was freed for b
    protected = [t for t, p, _ in b.history if p == "stopping" and t < launched[0] + 3_600.0]
    assert protected == [], b.history  # kept for the guard's hour
    assert len(ex.launches) >= 2 and sched.store.rounds() >= 1_400


def test_a_restarted_scheduler_keeps_the_waiting_guards_ledger(tmp_path: Path) -> None:
    """The guard's state survives a scheduler restart: the run above, with the scheduler replaced mid-way through
    ``b``'s protected hour by a new one on the same run directory (the executor still runs ``b``, which is
    adopted). The new scheduler reads the ledger the last committed round left (``PolicyBase.state_to_json``):
    ``a`` waited since it was stopped, not since it arrived a day ago, so it is not starving, and ``b`` keeps its
    hour. Without the ledger the restart would count ``a``'s wait from its arrival and the guard would stop ``b``
    for it at once."""
    from oak.policies.restart_aware import RestartAwareOakPolicy, WaitLedger

    two = ONE_JOB.replace("name: j", "name: a") + ONE_JOB.split("\n", 1)[1].replace("name: j", "name: b").replace(
        "ckpt_every: 10}", "ckpt_every: 10, submit_s: 60}"
    )
    jobs = parse_jobs(two, "two.yaml")
    ex = ScriptedExecutor([Fate(end="running", reach=10)], adopts=True)
    opts = RuntimeOptions(devices=1, round_s=60.0, tick_s=60.0)
    first = RuntimeScheduler(jobs, RestartAwareOakPolicy(), tmp_path / "run", opts, ex, clock=ex.clock)
    start = first.begin()
    last = 0.0
    while (now := ex.clock.time() - start) < 60.0 + 86_400.0 + 900.0:
        first.sync(now, now - last)
        first.step_next(now)
        last = now
        ex.clock.sleep(opts.tick_s)
    launched = [t for t, p, _ in first.records[1].history if p == "restoring"]
    assert launched and launched[0] >= 86_460.0, first.records[1].history  # admitted by the guard, protected
    until = first.store.meta()["policy_state"]["protected_until_s"]["b"]  # an hour from the round that admitted it
    assert launched[0] + 3_600.0 - 120.0 <= until <= launched[0] + 3_600.0

    seen: list[object] = []

    class Watching(RestartAwareOakPolicy):
        def decide(self, snap: Any) -> Any:
            seen.append(snap.policy_state)
            return super().decide(snap)

    second = RuntimeScheduler(jobs, Watching(), tmp_path / "run", opts, ex, clock=ex.clock)
    start = second.begin()
    assert second.records[1].adopted == 1
    while (now := ex.clock.time() - start) < until - 60.0:
        second.sync(now, now - last)
        second.step_next(now)
        last = now
        ex.clock.sleep(opts.tick_s)
    assert isinstance(seen[0], WaitLedger) and seen[0].protected_until_s["b"] == until
    assert seen[0].last_held_s["a"] < launched[0]  # a waits since it was stopped
    stops = [t for t, p, _ in second.records[1].history if p == "stopping"]
    assert stops == [], second.records[1].history  # b kept its hour across the restart
    assert len(ex.launches) == 2  # a, then b: nothing launched again


def test_the_ledger_round_trips_through_json_and_junk_is_no_state() -> None:
    import json

    from oak.policies.restart_aware import RestartAwareOakPolicy, WaitLedger

    policy = RestartAwareOakPolicy()
    ledger = WaitLedger(
        last_held_s=MappingProxyType({"a": 10.5}),
        protected_until_s=MappingProxyType({"b": 3_700.0}),
        moves=MappingProxyType({"a": 3}),
        progress_s=MappingProxyType({"a": 120.0}),
        stint_from_s=MappingProxyType({"a": 60.0}),
    )
    back = policy.state_from_json(json.loads(json.dumps(policy.state_to_json(ledger))))
    assert back == ledger and isinstance(back, WaitLedger) and type(back.moves["a"]) is int
    for junk in (None, [], "x", {"moves": {"a": "3"}}, {"last_held_s": [1.0]}, {"moves": {"a": True}}):
        assert policy.state_from_json(junk) is None
    assert policy.state_to_json(None) is None and make_policy("sia").state_to_json(object()) is None  # type: ignore[attr-defined]
