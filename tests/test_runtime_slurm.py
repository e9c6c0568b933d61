"""The SLURM executor against a real slurmctld + slurmd on this machine (``scripts/local-slurm start``).

Skipped as a whole, with the reason, when SLURM's commands are missing or the local cluster does not run. The
downed-node test sets the cluster's only node DOWN for a few seconds: other jobs on that cluster fail with it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "local-slurm"
SLURM_DIR = Path(os.environ.get("OAK_SLURM_DIR", "/tmp/oak-local-slurm"))


def _why_not() -> str | None:
    import shutil

    from support.clusters import not_running

    if shutil.which("sinfo") is None:
        return "SLURM's sinfo is not on PATH (apt-get install slurm-wlm munge, then scripts/local-slurm start)"
    return not_running(SCRIPT, "the local SLURM cluster")


_REASON = _why_not()
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)

from oak.errors import OakInputError  # noqa: E402
from oak.runtime.executor import Launch  # noqa: E402
from oak.runtime.jobs_file import RuntimeJob, parse_jobs  # noqa: E402
from oak.runtime.scheduler import newest_checkpoint_step  # noqa: E402
from oak.runtime.slurm_executor import SlurmExecutor, run_tag, slurm_command  # noqa: E402
from support.cli import oak  # noqa: E402
from support.runtime import check_done  # noqa: E402
from support.service import start_server  # noqa: E402

pytestmark = [pytest.mark.xdist_group("slurm")]

LONG = """
jobs:
  - {name: x, model: tiny, target_steps: 100000, max_gpus: 4, batch_size: 32, ckpt_every: 1000}
  - {name: y, model: tiny, target_steps: 100000, max_gpus: 4, batch_size: 32, ckpt_every: 1000}
  - {name: w, model: tiny, target_steps: 100000, max_gpus: 4, batch_size: 32, ckpt_every: 1000}
"""


@pytest.fixture(scope="module", autouse=True)
def slurm_env() -> Iterator[None]:
    """Point SLURM's clients (ours and the ``oak run`` subprocesses) at the local cluster; its node up."""
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(SLURM_DIR / "slurm.conf")
    _resume(_node())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before


def _sh(*args: str) -> str:
    return slurm_command(list(args), 30.0).stdout


def _node() -> str:
    return _sh("sinfo", "-h", "-N", "-o", "%N").split()[0]


def _resume(node: str) -> None:
    if _sh("sinfo", "-h", "-n", node, "-o", "%T").strip().lower().startswith(("down", "drain", "fail")):
        slurm_command(["scontrol", "update", f"nodename={node}", "state=resume"], 30.0, check=False)


def _jobs_of(run_dir: Path) -> dict[str, str]:
    """This run's SLURM jobs that slurmctld still lists: job id → state."""
    prefix = f"oak:{run_tag(run_dir)}:"
    out: dict[str, str] = {}
    for row in _sh("squeue", "-h", "-t", "all", "-o", "%i|%T|%k").splitlines():
        job_id, state, comment = row.split("|", 2)
        if comment.startswith(prefix):
            out[job_id] = state
    return out


ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"}


def _active_of(run_dir: Path) -> dict[str, str]:
    return {i: s for i, s in _jobs_of(run_dir).items() if s in ACTIVE}


def _wait_for(cond: Callable[[], object], timeout_s: float, every: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(every)
    return False


def _jobs(text: str) -> dict[str, RuntimeJob]:
    return {j.name: j for j in parse_jobs(text, "jobs.yaml").jobs}


def _steps(run_dir: Path) -> list[int]:
    """Each job's committed step (state.sqlite), [] before the scheduler wrote it."""
    db = run_dir / "state.sqlite"
    if not db.exists():
        return []
    try:
        with sqlite3.connect(db) as con:
            return [int(json.loads(r)["step"]) for (r,) in con.execute("SELECT record FROM jobs")]
    except sqlite3.Error:
        return []


def _oak_run(*args: str) -> list[str]:
    return [sys.executable, "-c", "from oak.cli.main import main; main()", "run", *args]


def _gone(pid: int) -> bool:
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


# ---------------------------------------------------------------------------------------------- end to end
@pytest.mark.long
def test_four_job_example_completes_under_injected_failures(tmp_path: Path) -> None:
    """examples/four-cifar.yaml (tiny model, steps padded to 20 ms) under --backend slurm, λ = 0.1, seed 1."""
    spec = yaml.safe_load((ROOT / "examples" / "four-cifar.yaml").read_text())
    spec["defaults"].update({"model": "tiny", "batch_size": 32, "min_step_s": 0.02})
    spec["defaults"].pop("width_mult", None)
    jobs_file = tmp_path / "four.yaml"
    jobs_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    run_dir, out = tmp_path / "run", tmp_path / "run.json"
    argv = ["--backend", "slurm", "--cpu-slots", "4", "--failure-rate", "0.1", "--seed", "72"]
    res = oak("run", str(jobs_file), *argv, "--round-seconds", "2", "--run-dir", str(run_dir), "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    check_done(run_dir, {j["name"]: j["target_steps"] for j in spec["jobs"]})
    jobs = json.loads(out.read_text())["runs"][0]["jobs"]
    # the seed's stream fails cifar-1 in rounds 2 and 3 (4-8 s) and cifar-2 in rounds 3 and 5 (6-12 s), while they
    # train (150 padded steps: >= 3 s after a start that takes seconds): four chances where seed 1 gave one
    assert sum(j["failures"] for j in jobs) >= 1, jobs
    assert all(j["jct_s"] is not None for j in jobs)
    assert _active_of(run_dir) == {}, "a SLURM job of the run outlived it"
    with sqlite3.connect(run_dir / "state.sqlite") as con:
        issues = [
            i for (a,) in con.execute("SELECT allocation FROM rounds") for i in json.loads(a).get("_reconcile", [])
        ]
    assert not [i for i in issues if "not this scheduler's" in i or "not intended" in i], issues


@pytest.mark.long
def test_a_downed_node_fails_the_job_which_is_relaunched_and_completes(tmp_path: Path) -> None:
    jobs_file = tmp_path / "one.yaml"
    jobs_file.write_text(
        "jobs:\n  - {name: n, model: tiny, target_steps: 400, min_gpus: 1, max_gpus: 2, batch_size: 32, "
        "ckpt_every: 10, restart_penalty_s: 10, min_step_s: 0.02}\n"
    )
    run_dir, out = tmp_path / "run", tmp_path / "run.json"
    node = _node()
    argv = ["--backend", "slurm", "--cpu-slots", "2", "--round-seconds", "3", "--run-dir", str(run_dir)]
    proc = subprocess.Popen(
        _oak_run(str(jobs_file), *argv, "--json", str(out)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert _wait_for(lambda: any(s >= 40 for s in _steps(run_dir)), 90), "n never trained"
        (first,) = _active_of(run_dir)
        slurm_command(["scontrol", "update", f"nodename={node}", "state=down", "reason=oak-test"], 30.0)
        try:
            assert _wait_for(lambda: _jobs_of(run_dir).get(first) == "NODE_FAIL", 20), _jobs_of(run_dir)
            # the scheduler sees the failure and submits the job again: it waits for the node
            assert _wait_for(lambda: any(i != first for i in _active_of(run_dir)), 30), _jobs_of(run_dir)
        finally:
            slurm_command(["scontrol", "update", f"nodename={node}", "state=resume"], 30.0, check=False)
        output, _ = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        _resume(node)
    assert proc.returncode == 0, output
    check_done(run_dir, {"n": 400})
    (job,) = json.loads(out.read_text())["runs"][0]["jobs"]
    assert job["failures"] >= 1 and job["restarts"] >= 1, job
    assert "NODE_FAIL" in (run_dir / "jobs" / "n" / "rank0.log").read_text()
    assert _active_of(run_dir) == {}


@pytest.mark.long
def test_a_killed_scheduler_restarted_on_its_run_directory_adopts_its_slurm_jobs(tmp_path: Path) -> None:
    """SIGKILL ``oak run --backend slurm`` while both jobs run; the same command again adopts their SLURM jobs
    (found by the run tag in their comments and the rank pids their supervisors recorded): no job is submitted
    again, none restarted, both finish in the SLURM jobs of the first scheduler, and nothing of the run is left."""
    jobs_file = tmp_path / "two.yaml"
    jobs_file.write_text(
        "jobs:\n"
        "  - {name: a, model: tiny, target_steps: 300, min_gpus: 1, max_gpus: 1, batch_size: 32, ckpt_every: 20,"
        " restart_penalty_s: 10, min_step_s: 0.02}\n"
        "  - {name: b, model: tiny, target_steps: 260, min_gpus: 1, max_gpus: 1, batch_size: 32, ckpt_every: 20,"
        " restart_penalty_s: 10, min_step_s: 0.02}\n"
    )
    run_dir = tmp_path / "run"
    argv = _oak_run(
        str(jobs_file), "--backend", "slurm", "--cpu-slots", "4", "--round-seconds", "3", "--run-dir", str(run_dir)
    )
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert _wait_for(lambda: len(s := _steps(run_dir)) == 2 and min(s) > 0, 90), _steps(run_dir)
        assert first.poll() is None, "the scheduler ended before it could be killed"
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    orphans = _active_of(run_dir)
    assert len(orphans) == 2, _jobs_of(run_dir)  # its SLURM jobs outlive the scheduler
    second = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
    assert second.returncode == 0, second.stdout + second.stderr
    check_done(run_dir, {"a": 300, "b": 260})
    with sqlite3.connect(run_dir / "state.sqlite") as con:
        recs = {n: json.loads(r) for n, r in con.execute("SELECT name, record FROM jobs")}
    assert all(r["adopted"] == 1 and r["restarts"] == 0 and r["incarnations"] == 1 for r in recs.values()), recs
    assert _active_of(run_dir) == {}, _jobs_of(run_dir)
    ended = _jobs_of(run_dir)
    assert set(ended) == set(orphans) and all(ended[i] == "COMPLETED" for i in orphans), ended


def test_a_request_larger_than_the_partition_fails_fast(tmp_path: Path) -> None:
    cpus = max(int(c) for c in _sh("sinfo", "-h", "-N", "-o", "%c").split())
    jobs_file = tmp_path / "one.yaml"
    jobs_file.write_text("jobs:\n  - {name: a, model: tiny, target_steps: 10}\n")
    t0 = time.monotonic()
    res = oak(
        "run", str(jobs_file), "--backend", "slurm", "--cpu-slots", str(cpus + 1), "--run-dir", str(tmp_path / "r")
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"--cpu-slots {cpus + 1}: SLURM partition" in res.stderr and f"at most {cpus} CPU(s)" in res.stderr
    assert time.monotonic() - t0 < 20
    assert not (tmp_path / "r").exists()
    with pytest.raises(OakInputError, match=r"no partition 'nope'"):
        SlurmExecutor("cpu", 1, partition="nope")
    # a launch of more ranks than a node holds is refused before anything is submitted
    ex = SlurmExecutor("cpu", cpus, run_dir=tmp_path / "r2")
    job = _jobs(LONG)["x"]
    with pytest.raises(OakInputError, match=rf"cannot run {cpus + 1} rank\(s\) on one node"):
        ex.launch(Launch(job, tmp_path / "r2" / "jobs" / "x", tuple(range(cpus + 1)), 0))
    assert _jobs_of(tmp_path / "r2") == {}


def test_a_hung_slurm_command_is_bounded_by_its_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ex = SlurmExecutor("cpu", 1, run_dir=tmp_path / "run", command_timeout_s=1.0)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "squeue").write_text(f"#!/bin/sh\necho $$ > {tmp_path}/pid\nsleep 120\n")
    (fake / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"`squeue --me -h -t all .*` did not answer within 1 s"):
        ex.reconcile({})
    assert time.monotonic() - t0 < 4.0
    pid = int((tmp_path / "pid").read_text())
    assert _wait_for(lambda: _gone(pid), 5.0), "the hung command was not killed"
    with pytest.raises(OakInputError, match="not found on PATH"):
        slurm_command(["no-such-slurm-command"], 1.0)


# ---------------------------------------------------------------------------------------------- the executor
def test_stop_checkpoints_a_dead_rank_fails_the_job_and_kill_is_a_sigkill(tmp_path: Path) -> None:
    job = _jobs(LONG)["x"]
    run_dir = tmp_path / "run"
    job_dir = run_dir / "jobs" / "x"
    ex = SlurmExecutor("cpu", 2, run_dir=run_dir, poll_s=0.5)
    try:
        # stop: SIGTERM → every rank checkpoints and exits 0 → "stopped"; nothing of it is left in SLURM
        ex.launch(Launch(job, job_dir, (0, 1), 0))
        pids = ex.pids("x")
        assert len(pids) == 2 and ex.state("x") == "running"
        assert _wait_for(lambda: (ex.status("x") or {}).get("step", 0) >= 5, 60), "x never trained"
        assert (ex.status("x") or {})["pid"] == pids[0]
        assert ex.stop(["x"], 30.0) == {"x": "stopped"}
        first = newest_checkpoint_step(job_dir)
        assert first >= 5 and ex.state("x") is None and _active_of(run_dir) == {}
        # a lost rank: the supervisor SIGKILLs its peer, the job is failed with the ranks' statuses
        ex.launch(Launch(job, job_dir, (0, 1), 0))
        pids = ex.pids("x")
        assert _wait_for(lambda: (ex.status("x") or {}).get("step", 0) > first, 60), "x never resumed"
        os.kill(pids[1], signal.SIGKILL)
        assert _wait_for(lambda: ex.state("x") == "failed", 20)
        assert ex.exit_codes("x") == [-signal.SIGKILL, -signal.SIGKILL]
        ex.kill("x")
        assert all(_gone(p) for p in pids) and _active_of(run_dir) == {}
        # kill (an injected failure): SIGKILL, no checkpoint (SLURM's own KILL of a job would SIGTERM first)
        ex.launch(Launch(job, job_dir, (0,), 0))
        (pid,) = ex.pids("x")
        assert _wait_for(lambda: (ex.status("x") or {}).get("pid") == pid, 60), "x never reported"
        before = newest_checkpoint_step(job_dir)
        ex.kill("x")
        assert _gone(pid) and ex.state("x") is None and ex.unreaped("x") == []
        assert newest_checkpoint_step(job_dir) == before
        log = (job_dir / "rank0.log").read_text()
        assert "stopped by signal" not in log[log.rindex("=== ") :]
        assert _active_of(run_dir) == {}
    finally:
        ex.shutdown()


def test_orphans_and_strays_of_this_run_are_cancelled_and_nothing_else(tmp_path: Path) -> None:
    jobs = _jobs(LONG)
    run_dir, other_dir = tmp_path / "run", tmp_path / "other"
    crashed = SlurmExecutor("cpu", 1, run_dir=run_dir)  # a scheduler that dies without cleaning up
    other = SlurmExecutor("cpu", 1, run_dir=other_dir)  # another run on the same cluster
    foreign = _sh("sbatch", "--parsable", "--job-name=not-oak", "--output=/dev/null", "--wrap=sleep 120").strip()
    try:
        crashed.launch(Launch(jobs["x"], run_dir / "jobs" / "x", (0,), 0))
        other.launch(Launch(jobs["y"], other_dir / "jobs" / "y", (0,), 0))
        orphan = crashed.job_id("x")
        new = SlurmExecutor("cpu", 1, run_dir=run_dir)
        lines = new.adopt_or_cancel_orphans(run_dir, grace_s=10.0)
        assert lines == [f"x: SLURM job {orphan} (RUNNING) of an earlier scheduler of this run: cancelled"]
        assert _active_of(run_dir) == {}
        assert _active_of(other_dir) == {other.job_id("y"): "RUNNING"}
        assert "RUNNING" in _sh("squeue", "-h", "-j", foreign, "-o", "%T")
        # a stray of this run (not this executor's) is cancelled by reconcile; the intended job is kept
        new.launch(Launch(jobs["y"], run_dir / "jobs" / "y", (0,), 0))
        crashed.launch(Launch(jobs["w"], run_dir / "jobs" / "w", (0,), 0))
        stray = crashed.job_id("w")
        issues = new.reconcile({"y": (0,)})
        assert issues == [f"w: SLURM job {stray} (RUNNING) is not this scheduler's: cancelled"], issues
        assert _active_of(run_dir) == {new.job_id("y"): "RUNNING"}
        assert new.stop(["y"], 30.0) == {"y": "stopped"}
    finally:
        for ex in (other, crashed):
            ex.shutdown()
        slurm_command(["scancel", foreign], 30.0, check=False)
    assert _active_of(run_dir) == {} and _active_of(other_dir) == {}


def test_a_job_slurm_cannot_start_fails_its_launch_with_its_output(tmp_path: Path) -> None:
    ex = SlurmExecutor("cpu", 1, run_dir=tmp_path / "run", python="/nonexistent/python")
    with pytest.raises(
        RuntimeError, match=r"(?s)job 'x': SLURM job \d+ ended \(FAILED\) before its ranks started.*nonexistent"
    ):
        ex.launch(Launch(_jobs(LONG)["x"], tmp_path / "run" / "jobs" / "x", (0,), 0))
    assert ex.state("x") is None and _active_of(tmp_path / "run") == {}


def test_a_command_job_gets_the_contract_and_its_own_port(tmp_path: Path) -> None:
    """The executor runs a job's own command (the job contract) on its ranks, with one port picked on the node."""
    import dataclasses

    code = (
        "import os; print('contract', os.environ['OAK_RANK'], os.environ['OAK_WORLD_SIZE'], os.environ['MASTER_PORT'])"
    )
    job = dataclasses.replace(_jobs(LONG)["x"], model="", command=(sys.executable, "-c", code))
    ex = SlurmExecutor("cpu", 2, run_dir=tmp_path / "run")
    job_dir = tmp_path / "run" / "jobs" / "x"
    try:
        ex.launch(Launch(job, job_dir, (0, 1), 0))
        assert _wait_for(lambda: ex.state("x") == "done", 30)  # exited 0 unasked: a command's end
        assert ex.exit_codes("x") == [0, 0]
        ex.kill("x")
        lines = [(job_dir / f"rank{r}.log").read_text().splitlines()[-1].split() for r in range(2)]
        assert [line[:3] for line in lines] == [["contract", "0", "2"], ["contract", "1", "2"]]
        assert lines[0][3] == lines[1][3] != "0"  # one port, picked on the node
        bad = dataclasses.replace(job, command=("/no/such/command",))
        with pytest.raises(OakInputError, match=r"job 'x': cannot start its ranks in SLURM job \d+: .*no/such/command"):
            ex.launch(Launch(bad, job_dir, (0,), 0))
        assert _active_of(tmp_path / "run") == {}
    finally:
        ex.shutdown()


def test_oak_serve_runs_submitted_command_jobs_on_slurm(tmp_path: Path) -> None:
    """``oak serve --backend slurm``: a submitted user script (the job contract) runs as SLURM jobs and
    finishes, every step once; cancelling a second one ends its SLURM job."""
    count = str(ROOT / "examples" / "jobs" / "count.py")
    run_dir = tmp_path / "run"
    argv = [
        sys.executable,
        "-c",
        "from oak.cli.main import main; main()",
        "serve",
        "--run-dir",
        str(run_dir),
        "--backend",
        "slurm",
        "--cpu-slots",
        "2",
        "--round-seconds",
        "3",
    ]
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 (closed below)
    server = start_server(argv, run_dir, log)
    try:
        jobs = tmp_path / "jobs.yaml"
        jobs.write_text(
            "jobs:\n"
            f'  - {{name: s, command: [{sys.executable}, {count}, --steps, "30", --step-s, "0.05"], max_gpus: 2}}\n'
            f'  - {{name: forever, command: [{sys.executable}, {count}, --steps, "100000", --step-s, "0.05"]}}\n'
        )
        out = oak("submit", "--run-dir", str(run_dir), str(jobs))
        assert out.returncode == 0, out.stderr
        deadline = time.monotonic() + 120
        while True:
            state = {
                r["name"]: r for r in json.loads(oak("status", "--run-dir", str(run_dir), "--json").stdout)["jobs"]
            }
            if state["s"]["state"] == "done" and state["forever"]["state"] == "running":
                break
            assert time.monotonic() < deadline, state
            time.sleep(1.0)
        assert oak("cancel", "--run-dir", str(run_dir), "forever").returncode == 0
        steps = [int(x) for x in (run_dir / "jobs" / "s" / "checkpoints" / "steps.log").read_text().split()]
        assert steps == list(range(1, 31))
        tag = run_tag(run_dir)
        deadline = time.monotonic() + 60  # oak cancel returns at once; the job checkpoints and leaves SLURM
        while f"oak:{tag}:" in _sh("squeue", "-h", "-o", "%k"):
            assert time.monotonic() < deadline, "the cancelled job's SLURM job is gone within --stop-seconds"
            time.sleep(0.5)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(120)
        log.close()
