"""Fencing: a rank of an incarnation that a newer launch replaced never writes the job's checkpoint.

A node cut off by a network partition keeps running its ranks; when it comes back, they wake up in a world
where the scheduler has launched the job again elsewhere. ``oak.job.commit`` (a user's script) and
``oak.runtime.checkpoint.save`` (the packaged worker) write only while their incarnation is the job's current
one, which every launch sets before its ranks start (``rank_commands``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import oak.job
from oak.runtime.launch import CommandSpec, prepare_job_dir, rank_commands

ROOT = Path(__file__).resolve().parents[1]


def _contract(monkeypatch: pytest.MonkeyPatch, job_dir: Path, incarnation: str) -> None:
    monkeypatch.setenv("OAK_JOB_DIR", str(job_dir))
    monkeypatch.setenv("OAK_INCARNATION", incarnation)


def test_commit_lands_only_for_the_current_incarnation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = tmp_path / "job"
    job.mkdir()
    final = job / "ckpt"
    oak.job.set_fence(job, "a")
    _contract(monkeypatch, job, "a")
    (job / "t1").write_text("from a")
    assert not oak.job.fenced() and oak.job.commit(job / "t1", final)
    assert final.read_text() == "from a"
    oak.job.set_fence(job, "b")  # a newer launch
    (job / "t2").write_text("stale")
    assert oak.job.fenced()
    assert not oak.job.commit(job / "t2", final)
    assert final.read_text() == "from a" and not (job / "t2").exists(), "a fenced commit leaves nothing behind"
    _contract(monkeypatch, job, "b")
    (job / "t3").write_text("from b")
    assert oak.job.commit(job / "t3", final) and final.read_text() == "from b"


def test_outside_oak_or_without_a_fence_commit_is_a_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OAK_JOB_DIR", raising=False)
    monkeypatch.delenv("OAK_INCARNATION", raising=False)
    (tmp_path / "t").write_text("x")
    assert not oak.job.fenced() and oak.job.commit(tmp_path / "t", tmp_path / "f")
    _contract(monkeypatch, tmp_path, "a")  # a job directory no launcher fenced (an older OAK): no fence to obey
    (tmp_path / "t").write_text("y")
    assert oak.job.commit(tmp_path / "t", tmp_path / "f") and (tmp_path / "f").read_text() == "y"


def test_the_packaged_checkpoint_is_not_written_by_a_fenced_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    import torch

    from oak.runtime import checkpoint

    job = tmp_path / "job"
    job.mkdir()
    oak.job.set_fence(job, "new")
    _contract(monkeypatch, job, "new")
    checkpoint.save(job, {"w": torch.ones(2)}, 10)
    checkpoint.save(job, {"w": torch.ones(2) * 2}, 20)
    _contract(monkeypatch, job, "old")  # a rank of the replaced incarnation, an older step in hand
    with pytest.raises(oak.job.Fenced):
        checkpoint.save(job, {"w": torch.zeros(2)}, 15)
    # nothing written, and nothing pruned: step 15 would have deleted the newer incarnation's step 20
    assert checkpoint.list_checkpoints(job) == [10, 20]
    loaded = checkpoint.load_latest(job)
    assert loaded is not None and torch.equal(loaded.state["w"], torch.ones(2) * 2)


STALE = """
import os, sys, time
from pathlib import Path
import oak.job
ckpt = oak.job.checkpoint_dir() / "ckpt"
step = 0
while True:
    step += 1
    tmp = ckpt.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(f"{os.environ['OAK_INCARNATION']} {step}")
    if not oak.job.commit(tmp, ckpt):
        print(f"fenced at step {step}", flush=True)
        sys.exit(3)
    if step == 3:
        Path(sys.argv[1]).touch()  # the test freezes it here (a partition), then launches the job again
    time.sleep(0.02)
"""


def test_a_rank_that_wakes_up_after_a_new_launch_cannot_write(tmp_path: Path) -> None:
    """A real rank process of incarnation A, frozen (SIGSTOP: as a node cut off the network), the job launched
    again (incarnation B, which checkpoints), then A woken up (SIGCONT: the partition heals): A's next
    checkpoint is refused and it exits 3; the checkpoint stays B's."""
    script = tmp_path / "stale.py"
    script.write_text(STALE)
    job = tmp_path / "job"
    prepare_job_dir(job, command=True)
    spec = CommandSpec((sys.executable, str(script), str(tmp_path / "ready")))
    env_src = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def start(rank_env: dict[str, str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*spec.command], env={**env_src, **rank_env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    (a_rank,), _, inc_a = rank_commands(job, spec, 1, [0], job_name="j", master_port=1)
    a = start(a_rank.env)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists():
            assert a.poll() is None and time.monotonic() < deadline, a.stdout.read() if a.stdout else ""
            time.sleep(0.01)
        a.send_signal(signal.SIGSTOP)  # cut off, mid-run
        ckpt = job / "checkpoints" / "ckpt"
        frozen = ckpt.read_text()
        assert frozen.startswith(inc_a)
        (b_rank,), _, inc_b = rank_commands(job, spec, 1, [0], job_name="j", master_port=1)
        assert (job / oak.job.FENCE_FILE).read_text().strip() == inc_b
        (tmp_path / "ready").unlink()
        b = start(b_rank.env)
        while not (tmp_path / "ready").exists():
            assert b.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        b.kill()
        b.wait(30)
        written_by_b = ckpt.read_text()
        assert written_by_b.startswith(inc_b)
        a.send_signal(signal.SIGCONT)  # the partition heals: A goes on where it was
        out, _ = a.communicate(timeout=30)
        assert a.returncode == 3 and "fenced at step" in out, out
        assert ckpt.read_text() == written_by_b, "the stale rank's checkpoint never landed"
        assert not list(ckpt.parent.glob("*.tmp")), "nor did its temporary file stay"
        assert frozen != written_by_b
    finally:
        if a.poll() is None:
            a.kill()
            a.wait(30)
