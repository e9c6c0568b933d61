"""Hostile input to the jobs-file parser that `oak run` and `oak serve` share (issue [hardening]): each probe
ends in a clear error, quickly, instead of freezing or exhausting the scheduler."""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path

import pytest

from oak.errors import OakInputError
from oak.runtime.jobs_file import MAX_ALIAS_NODES, parse_jobs
from support.service import in_process_service as _service

#: a command job that reports its one step and ends
ONE_STEP = '[{py}, -c, "import oak.job; oak.job.report(1, total_steps=1)"]'


def _alias_bomb(levels: int, fan: int = 10) -> str:
    """A jobs file whose `command` list is an alias bomb: each level an anchored list of ``fan`` aliases of the
    level below, fan^levels strings in all (under 500 bytes at 6 levels)."""
    lines = ['a0: &a0 ["x"]']
    for k in range(1, levels + 1):
        lines.append(f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * fan)}]")
    return "\n".join(lines) + f"\njobs:\n  - {{name: j, command: *a{levels}}}\n"


def test_an_alias_bomb_is_refused_before_it_expands() -> None:
    """6 levels of 10 aliases: 10^6 strings if expanded (7 levels took ~100 s and 520 MB before the limit)."""
    text = _alias_bomb(6)
    assert len(text) < 500
    with pytest.raises(OakInputError, match=r"bomb.yaml:\d+: not valid YAML \(its aliases expand to more than"):
        parse_jobs(text, "bomb.yaml")


def test_aliases_within_the_limit_still_work() -> None:
    """A defaults block merged into many jobs (the usual use of anchors) is far below the limit."""
    jobs = "\n".join(f"  - {{<<: *base, name: j{i}}}" for i in range(200))
    text = f"defaults: &base {{model: tiny, target_steps: 10, batch_size: 8}}\njobs:\n{jobs}\n"
    assert MAX_ALIAS_NODES > 200 * 7
    parsed = parse_jobs(text, "ok.yaml")
    assert len(parsed.jobs) == 200 and all(j.target_steps == 10 for j in parsed.jobs)


@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_a_request_nested_100000_deep_gets_an_error_reply(opener: str) -> None:
    """The socket's and HTTP's request handler (``protocol._handle``): JSON nested 100,000 deep raised
    RecursionError in the server's thread and the client got no reply; now it is refused with a reply. Brackets
    inside strings do not count."""
    from oak.service.protocol import MAX_REQUEST_DEPTH, _handle

    closer = "]" if opener == "[" else "}"
    deep = opener * 100_000 + "1" + closer * 100_000
    reply = _handle(lambda op, req: {"ok": True}, deep)
    assert reply == {"ok": False, "error": f"request nested deeper than {MAX_REQUEST_DEPTH} levels"}
    text = '{"op": "status", "note": "' + "[{" * 1000 + '"}'
    assert _handle(lambda op, req: {"ok": True, "op": op, **req}, text) == {
        "ok": True,
        "op": "status",
        "note": "[{" * 1000,
    }


def test_a_request_over_the_size_limit_is_refused_before_it_is_sent(tmp_path: Path) -> None:
    """A 10 MB jobs file: the client said "lost the connection … (Broken pipe)" when the service stopped reading
    at 4 MiB; now it names the limit, before connecting (no service needed)."""
    from oak.service.protocol import call

    with pytest.raises(OakInputError, match=r"the submit request is 10\.0 MiB; oak serve accepts requests up to 4 MiB"):
        call(tmp_path, "submit", text="x" * (10 * 2**20))


class _Flaky:
    """A user's policy that raises while ``broken`` is set, and is ``oak`` otherwise."""

    name = "flaky"
    reads_clock = True
    needs_node_goodput = False
    avoids_failing_nodes = False

    def __init__(self) -> None:
        from oak.policies import make_policy

        self.broken = True
        self.inner = make_policy("oak")

    def decide(self, snap):  # type: ignore[no-untyped-def]
        if self.broken:
            raise ZeroDivisionError("a bug in the user's policy")
        return self.inner.decide(snap)


def test_a_raising_policy_leaves_oak_serve_serving(tmp_path: Path) -> None:
    """A policy that raises under ``oak serve`` stopped the service (exit 1). Now the round is skipped (every job
    keeps its devices), ``oak status`` shows the error and answers, and once the policy decides again the job
    runs to its end."""
    from oak.service.protocol import call

    run_dir = tmp_path / "run"
    policy = _Flaky()
    with _service(run_dir, policy, 1) as thread:
        job = f"jobs:\n  - {{name: a, command: {ONE_STEP.format(py=sys.executable)}}}\n"
        assert call(run_dir, "submit", text=job, source="a.yaml")["ok"]
        deadline = time.monotonic() + 30
        while not (state := call(run_dir, "status")).get("policy_error"):
            assert time.monotonic() < deadline and thread.is_alive(), state
            time.sleep(0.1)
        assert "policy 'flaky' raised ZeroDivisionError: a bug in the user's policy" in state["policy_error"]
        assert thread.is_alive() and {r["name"]: r["state"] for r in state["jobs"]} == {"a": "queued"}
        policy.broken = False
        deadline = time.monotonic() + 60
        while (state := call(run_dir, "status"))["jobs"][0]["state"] != "done":
            assert time.monotonic() < deadline, state
            time.sleep(0.2)
        assert state["policy_error"] is None


def test_an_unwritable_job_folder_fails_that_job_not_the_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row 1: a job folder made unwritable while the job runs (``chattr +i`` as root) made the scheduler's unlink
    of its status.json raise PermissionError: the whole service exited, and again on every restart. Now that
    job's launch fails (counted, backed off, retried), and the other job runs to its end."""
    from oak.policies import make_policy
    from oak.service.protocol import call

    real_unlink = Path.unlink

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if self.parent.name == "ro" and self.name == "status.json":
            raise PermissionError(13, "Operation not permitted", str(self))
        real_unlink(self, missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    run_dir = tmp_path / "run"
    with _service(run_dir, make_policy("oak"), 2) as thread:
        cmd = ONE_STEP.format(py=sys.executable)
        jobs = "".join(f"  - {{name: {n}, command: {cmd}, max_gpus: 1}}\n" for n in ("ro", "ok"))
        assert call(run_dir, "submit", text="jobs:\n" + jobs, source="two.yaml")["ok"]
        deadline = time.monotonic() + 60
        while True:
            rows = {r["name"]: r for r in call(run_dir, "status")["jobs"]}
            if rows["ok"]["state"] == "done" and rows["ro"]["failures"] >= 1:
                break
            assert time.monotonic() < deadline and thread.is_alive(), rows
            time.sleep(0.2)
        assert thread.is_alive() and rows["ro"]["state"] != "done"


def test_the_run_directory_is_private_whatever_its_mode_and_the_umask(tmp_path: Path) -> None:
    """Row 3: a run dir that existed with mode 0755, a 022 umask, a job submitted with a secret in its
    environment: state.sqlite-wal and -shm were 0644, and another uid read the secret from the WAL. Now the run
    dir is 0700 and the database, its WAL and SHM, metrics.prom and rounds.jsonl are 0600."""
    import os
    import stat

    from oak.policies import make_policy
    from oak.service.protocol import call

    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o755)
    run_dir.chmod(0o755)
    files = ["state.sqlite", "state.sqlite-wal", "state.sqlite-shm", "metrics.prom", "rounds.jsonl"]
    old = os.umask(0o022)
    try:
        with _service(run_dir, make_policy("oak"), 1):
            cmd = ONE_STEP.format(py=sys.executable)
            job = f"jobs:\n  - {{name: a, command: {cmd}, env: {{WANDB_API_KEY: s3cret}}}}\n"
            assert call(run_dir, "submit", text=job, source="a.yaml")["ok"]
            deadline = time.monotonic() + 60
            while call(run_dir, "status")["jobs"][0]["state"] != "done":
                assert time.monotonic() < deadline
                time.sleep(0.2)
            time.sleep(1.2)  # metrics.prom is rewritten every second
            modes = {f: stat.S_IMODE((run_dir / f).stat().st_mode) for f in files}
    finally:
        os.umask(old)
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert modes == dict.fromkeys(files, 0o600), {f: oct(m) for f, m in modes.items()}


def test_idle_connections_are_closed_and_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row 8: 300 idle connections to the Unix socket held 305 threads, never closed. Now at most
    MAX_CONNECTIONS are served at once (one more is told the service is busy), one idle for SOCKET_IDLE_S is
    closed, and the service answers once they are gone (the idle limit shortened to 2 s here)."""
    import socket

    from oak.service import protocol
    from oak.service.protocol import Listeners, call, socket_path

    monkeypatch.setattr(protocol._UnixHandler, "timeout", 2.0)
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    listeners = Listeners(run_dir, lambda op, req: {"ok": True, "op": op}, None)
    idle: list[socket.socket] = []
    try:
        for _ in range(protocol.MAX_CONNECTIONS + 10):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(socket_path(run_dir)))  # blocking: waits while the listen backlog is full
            s.settimeout(5.0)
            idle.append(s)
        busy = [s.recv(4096) for s in idle[protocol.MAX_CONNECTIONS :]]
        assert all(b"oak serve is busy" in b for b in busy), busy[:2]
        assert threading.active_count() <= protocol.MAX_CONNECTIONS + 10
        closed = [s.recv(4096) for s in idle[: protocol.MAX_CONNECTIONS]]  # b"": the service closed it
        assert closed == [b""] * protocol.MAX_CONNECTIONS
        assert call(run_dir, "status") == {"ok": True, "op": "status"}
    finally:
        for s in idle:
            s.close()
        listeners.close()


BAD_POLICY = """
import numpy as np
from oak.model.snapshot import Allocation


class Greedy:
    name = "greedy"
    reads_clock = False
    needs_node_goodput = False
    avoids_failing_nodes = False

    def decide(self, snap):
        return Allocation(config=np.full(snap.num_jobs, len(snap.configs) - 1))  # the largest, for every job
"""


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_an_invalid_allocation_of_a_user_policy_is_one_clear_line(tmp_path: Path, command: str) -> None:
    """Row 6, second half: a user's policy whose allocation cannot run gave a 111-line traceback naming neither
    job nor configuration. Now: exit 2, one line naming the policy, the time, the job and the configuration (or
    the GPU type over capacity)."""
    import subprocess

    (tmp_path / "greedy.py").write_text(BAD_POLICY, encoding="utf-8")
    args = ["--workload", "small", "--failure-rates" if command == "compare" else "--failure-rate", "0"]
    policy = ["--policies" if command == "compare" else "--policy", f"{tmp_path / 'greedy.py'}:Greedy"]
    res = subprocess.run(
        [sys.executable, "-m", "oak", command, *args, *policy],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 2, res.stdout[-1000:] + res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert "policy 'greedy' at t=" in res.stderr
    assert re.search(r"job '[^']+' was given configuration \d+ \(.+\), which is not valid|GPUs of type", res.stderr)


STUBBORN = """
import signal, time
import oak.job
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ignores the scheduler's request to checkpoint and exit
for step in range(1, 10**6):
    oak.job.report(step, total_steps=10**6)
    time.sleep(0.1)
"""


def test_cancelling_a_job_that_ignores_sigterm_does_not_freeze_the_scheduler(tmp_path: Path) -> None:
    """Row 4: ``oak cancel`` of a job that ignores SIGTERM froze the scheduler thread for the whole stop timeout
    (published time unchanged, no other job served). Now the cancel returns at once, the scheduler keeps
    ticking — publishing, taking a submission and running it to its end — and SIGKILLs the job at its deadline."""
    import json
    import sqlite3

    from oak.policies import make_policy
    from oak.service.protocol import call

    run_dir = tmp_path / "run"
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN, encoding="utf-8")
    with _service(run_dir, make_policy("oak"), 2, stop_timeout_s=8.0):
        job = f"jobs:\n  - {{name: s, command: [{sys.executable}, {script}], max_gpus: 1}}\n"
        assert call(run_dir, "submit", text=job, source="s.yaml")["ok"]
        deadline = time.monotonic() + 60
        while (row := call(run_dir, "status")["jobs"][0])["state"] != "running" or not row.get("step"):
            assert time.monotonic() < deadline, row
            time.sleep(0.1)
        t0 = time.monotonic()
        assert call(run_dir, "cancel", name="s")["ok"]
        assert time.monotonic() - t0 < 2.0  # answered without waiting for the job
        clock = call(run_dir, "status")["time_s"]
        other = f"jobs:\n  - {{name: b, command: {ONE_STEP.format(py=sys.executable)}, max_gpus: 1}}\n"
        assert call(run_dir, "submit", text=other, source="b.yaml")["ok"]
        while (state := call(run_dir, "status"))["jobs"][1]["state"] != "done":
            assert time.monotonic() - t0 < 7.0, state  # served while the stubborn job still runs
            time.sleep(0.1)
        assert state["time_s"] > clock
        rows = {r["name"]: r for r in state["jobs"]}
        assert rows["s"]["state"] == "cancelled"
        with sqlite3.connect(run_dir / "state.sqlite") as con:
            rec = dict(con.execute("SELECT name, record FROM jobs"))
        alive = [p for p in json.loads(rec["s"])["pids"] if _running(p)]
        assert alive, "the stubborn job still runs before its deadline"
        while any(_running(p) for p in alive):
            assert time.monotonic() - t0 < 30.0  # SIGKILLed 8 s after the cancel
            time.sleep(0.2)
        assert time.monotonic() - t0 >= 7.5


def _running(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
