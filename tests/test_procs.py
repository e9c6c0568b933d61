"""Rank processes followed from outside (``oak.runtime.procs``) and the exit-status wrapper of command ranks
(``oak.runtime.rank_exit``): what a restarted scheduler relies on to adopt running jobs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oak.errors import OakInputError
from oak.runtime.executor import classify
from oak.runtime.launch import CommandSpec, adopt_worker, rank_commands, start_worker
from oak.runtime.procs import (
    AdoptedProc,
    adoptable,
    exit_file,
    gone,
    is_rank_of,
    ranks_under,
    read_exit_status,
    wait_gone,
)


def _wrapped(job_dir: Path, *command: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "oak.runtime.rank_exit", str(job_dir), "0", "--", *command]
    return subprocess.Popen(argv, start_new_session=True, env={**os.environ, "OAK_JOB_DIR": str(job_dir)})


@pytest.mark.parametrize(("code", "expected"), [("0", 0), ("3", 3), ("-15", -signal.SIGTERM)])
def test_the_wrapper_leaves_the_commands_exit_status_and_ends_the_same_way(
    tmp_path: Path, code: str, expected: int
) -> None:
    script = "import os, signal, sys; c = int(sys.argv[1]); os.kill(os.getpid(), -c) if c < 0 else sys.exit(c)"
    proc = _wrapped(tmp_path, sys.executable, "-c", script, code)
    assert proc.wait(30) == expected
    assert read_exit_status(tmp_path, 0, proc.pid) == expected
    assert read_exit_status(tmp_path, 0, proc.pid + 1) is None  # another process's status is not this one's


def test_an_adopted_rank_is_followed_by_pid_and_ends_as_its_exit_file_says(tmp_path: Path) -> None:
    """A rank started elsewhere (here: by this test, as an earlier scheduler would): alive → running; a SIGTERM
    through the adopted handle ends the command, whose status the wrapper leaves; a rank gone without one was
    SIGKILLed."""
    job = tmp_path / "jobs" / "j"
    job.mkdir(parents=True)
    proc = _wrapped(job, sys.executable, "-c", "import time; time.sleep(60)")
    deadline = time.monotonic() + 10
    while len(ranks_under(tmp_path / "jobs")) < 2:  # the wrapper and the command it started
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert is_rank_of(proc.pid, job)  # its environment names the job's directory
    assert adoptable([proc.pid], job) and not adoptable([proc.pid], tmp_path / "jobs" / "other")
    handle = adopt_worker(job, [proc.pid], command=True)
    assert handle.poll() is None and handle.pids == [proc.pid]
    handle.request_stop()  # the rank's process group: the command gets SIGTERM, the wrapper records it
    assert proc.wait(10) == -signal.SIGTERM
    assert handle.wait(10) == 0  # a command ended by the SIGTERM it was asked to stop with: a stop
    assert handle.returncodes() == [-signal.SIGTERM] and not handle.is_done()

    lost = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    follow = AdoptedProc(lost.pid, job, 1)
    assert follow.poll() is None
    lost.kill()
    lost.wait()
    assert wait_gone(lost.pid, 5) and gone(lost.pid)
    assert not exit_file(job, 1).exists() and follow.poll() == -signal.SIGKILL


def test_a_command_that_cannot_start_is_refused_at_launch(tmp_path: Path) -> None:
    """Behind the wrapper a missing program would only be a failed rank: the launch still refuses it, as the
    job's own input error."""
    with pytest.raises(OakInputError, match=r"cannot start its command .*no/such/program"):
        start_worker(tmp_path / "j", CommandSpec(command=("/no/such/program",)), 1, [0])
    with pytest.raises(OakInputError, match="cannot start its command"):
        start_worker(tmp_path / "j", CommandSpec(command=("no-such-program-oak",)), 1, [0])


@pytest.mark.parametrize(
    ("codes", "command", "stop", "marker", "expected"),
    [
        ([None, 0], False, False, False, "running"),
        ([0, 0], False, False, True, "done"),
        ([0, 0], False, True, False, "stopped"),
        ([0, -signal.SIGKILL], False, False, True, "failed"),  # a dead rank fails it, whatever else is there
        ([None, 1], False, False, False, "failed"),  # ... at once, before its peers are reaped
        ([-signal.SIGTERM, 0], True, True, False, "stopped"),  # a command ended by the SIGTERM it was asked to stop
        ([-signal.SIGTERM], True, False, False, "failed"),  # ... but not asked: someone else's signal
        ([0], True, False, False, "done"),  # a command that exits 0 unasked has finished
        ([0], True, True, True, "stopped"),  # ... asked to stop, it has stopped (a marker is the worker's, not its)
        ([-signal.SIGTERM], False, True, False, "failed"),  # the packaged worker exits 0 on SIGTERM: -15 is a crash
    ],
)
def test_one_rule_classifies_every_backends_incarnations(
    codes: list[int | None], command: bool, stop: bool, marker: bool, expected: str
) -> None:
    assert classify(codes, command=command, stop_requested=stop, done_marker=marker) == expected


def test_a_stop_sent_as_the_command_starts_is_not_lost(tmp_path: Path) -> None:
    """SIGTERM to the rank's group at once, before the wrapper has forked or the command has run: the signal is
    held until the command runs, then ends it (the wrapper itself never takes it)."""
    for _ in range(5):
        proc = _wrapped(tmp_path, sys.executable, "-c", "import time; time.sleep(60)")
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == -signal.SIGTERM
        code = read_exit_status(tmp_path, 0, proc.pid)
        assert code in (-signal.SIGTERM, None)  # None: the signal came before the wrapper blocked it


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_rank_commands_for_ranks_that_see_only_their_own_device(tmp_path: Path, kind: str) -> None:
    """Ray's rank actors each see one device: local rank 0 and no CUDA mask of ours on GPUs (the backend sets
    it), one thread on CPU; the same contract environment and worker options as a local launch otherwise."""
    from oak.runtime.launch import WorkerSpec, rank_commands

    spec = WorkerSpec(model="tiny", target_steps=10, batch_size=8, ckpt_every=5)
    ranks, token, _ = rank_commands(
        tmp_path, spec, 2, [4, 7], job_name="j", device_kind=kind, master_addr="10.0.0.1", own_device=True
    )
    assert token is not None  # two ranks, no port given: rank 0 picks it and publishes it under the token
    for rank, rc in enumerate(ranks):
        argv, env = rc.argv, rc.env
        assert argv[1:3] == ["-m", "oak.runtime.worker"] and argv[argv.index("--rank") + 1] == str(rank)
        assert argv[argv.index("--threads") + 1] == "1" and env["OMP_NUM_THREADS"] == "1"
        assert env["OAK_RANK"] == str(rank) and env["MASTER_ADDR"] == "10.0.0.1"
        if kind == "gpu":
            assert argv[argv.index("--local-rank") + 1] == "0" and env["OAK_LOCAL_RANK"] == "0"
            assert "CUDA_VISIBLE_DEVICES" not in env
        else:
            assert env["CUDA_VISIBLE_DEVICES"] == "" and "--cpus" not in argv
    command, _, _ = rank_commands(
        tmp_path,
        CommandSpec(("train.py",), extra_env=(("A", "1"),)),
        2,
        [0, 1],
        job_name="j",
        device_kind=kind,
        master_port=29500,
        own_device=True,
    )
    assert [rc.argv for rc in command] == [["train.py"], ["train.py"]]
    assert all(rc.env["MASTER_PORT"] == "29500" and rc.env["A"] == "1" for rc in command)


def test_every_backend_in_the_registry_makes_an_executor_of_the_whole_protocol(tmp_path: Path) -> None:
    """One registry of backends; each one's executor class has every member of the ``Executor`` protocol
    (``adopt`` included: a backend that cannot adopt says so by returning False)."""
    from oak.runtime.backends import BACKENDS, BackendRequest, make_executor
    from oak.runtime.executor import Executor, LocalExecutor
    from oak.runtime.incarnations import Incarnations
    from oak.runtime.ray_executor import RayExecutor
    from oak.runtime.slurm_executor import SlurmExecutor

    assert set(BACKENDS) == {"local", "ray", "slurm"}
    members = {n for n in Executor.__dict__ if not n.startswith("_")} | set(Executor.__annotations__)
    assert {"launch", "adopt", "state", "request_stop", "kill", "reconcile"} <= members
    for cls in (Incarnations, LocalExecutor, RayExecutor, SlurmExecutor):
        missing = [m for m in members if not hasattr(cls, m) and m not in ("device_kind",)]
        assert not missing, (cls.__name__, missing)
    ex, devices = make_executor("local", BackendRequest("cpu", 3, None, tmp_path))
    assert isinstance(ex, LocalExecutor) and devices == 3 and ex.device_kind == "cpu"
    with pytest.raises(OakInputError, match="--backend 'k8s': expected one of local, ray, slurm"):
        make_executor("k8s", BackendRequest("cpu", 1, None, tmp_path))


def test_a_rank_given_a_relative_run_directory_is_still_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An older scheduler gave ranks the --run-dir as typed (`rd/jobs/a`); one that holds its run directory as an
    absolute path must still adopt or stop them after an upgrade, not start a second copy beside them."""
    (tmp_path / "elsewhere").mkdir()
    procs = []
    for cwd in (tmp_path, tmp_path / "elsewhere"):  # the rank in the scheduler's directory, or in its workdir
        env = {**os.environ, "OAK_JOB_DIR": "rd/jobs/a"}
        code = "import time; print('up', flush=True); time.sleep(60)"
        procs.append(subprocess.Popen([sys.executable, "-c", code], cwd=cwd, env=env, stdout=subprocess.PIPE))
    try:
        for proc in procs:  # exec'd: /proc shows its own environment, not the forked test's
            assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        monkeypatch.chdir(tmp_path)  # where the scheduler runs, as the first one did
        for proc in procs:
            assert is_rank_of(proc.pid, tmp_path / "rd" / "jobs" / "a")
            assert not is_rank_of(proc.pid, tmp_path / "rd" / "jobs" / "b")
        assert {p.pid for p in procs} <= set(ranks_under(tmp_path / "rd" / "jobs"))
        assert not {p.pid for p in procs} & set(ranks_under(tmp_path / "other" / "jobs"))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_every_rank_gets_both_thread_counts(tmp_path: Path, kind: str) -> None:
    """The jobs file refuses OMP_NUM_THREADS and MKL_NUM_THREADS in env as the contract's: every path sets both
    (local GPUs set only OMP_NUM_THREADS, so a user's MKL_NUM_THREADS was honoured there)."""
    spec = CommandSpec(("train.py",))
    ranks, _, _ = rank_commands(
        tmp_path, spec, 2, [0, 1], job_name="j", device_kind=kind, master_port=29500, environ={}
    )
    for rc in ranks:
        assert rc.env["OMP_NUM_THREADS"] == rc.env["MKL_NUM_THREADS"] == "1", rc.env
