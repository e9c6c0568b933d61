"""What a user of SLURM or Kueue expects of `oak serve` (issue [hardening], the friction list): commands run where
they were submitted, numbers read as YAML 1.2 does, failed jobs can be retried, `oak status NAME`, `oak logs`
that knows the run's jobs, `OAK_RUN_DIR`, and honest summaries of interrupted runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oak.engine.metrics import JobResult, RunResult
from oak.errors import OakInputError
from oak.policies import make_policy
from oak.runtime.jobs_file import parse_jobs
from oak.runtime.scheduler import RuntimeOptions, RuntimeScheduler
from oak.service.protocol import call
from support.cli import oak
from support.service import in_process_service


def _job(text: str) -> str:
    return f"jobs:\n  - {text}\n"


def test_numbers_read_as_yaml_1_2_and_arguments_keep_their_text() -> None:
    """`restart_penalty_s: 1e2` was refused (PyYAML reads YAML 1.1, where `1e2` is a string)."""
    for text, want in (("1e2", 100.0), ("1.5e1", 15.0), (".5e1", 5.0), ("1e+2", 100.0), ("100", 100.0)):
        job = parse_jobs(_job(f"{{name: a, model: tiny, target_steps: 5, restart_penalty_s: {text}}}"), "j.yaml")
        assert job.jobs[0].restart_penalty_s == want, text
    with pytest.raises(OakInputError, match="restart_penalty_s='1e2x'"):
        parse_jobs(_job("{name: a, model: tiny, target_steps: 5, restart_penalty_s: 1e2x}"), "j.yaml")
    job = parse_jobs(_job("{name: a, command: [train, --lr, 1e-3, 0.10, 7, 1_000], env: {LR: 1e-3}}"), "j.yaml")
    assert job.jobs[0].command == ("train", "--lr", "1e-3", "0.10", "7", "1_000")  # as typed, not 0.001
    assert job.jobs[0].env == (("LR", "1e-3"),)
    # YAML 1.1 readings PyYAML made silently: 010 as 8 (octal), 12:30 as 750 (base 60), 1_000 as 1000, on/yes as
    # true (a job named True); YAML 1.2 reads 10 and strings
    assert parse_jobs(_job("{name: a, model: tiny, target_steps: 010}"), "j.yaml").jobs[0].target_steps == 10
    for text in ("12:30", "1_000"):
        with pytest.raises(OakInputError, match=f"target_steps='{text}': expected an integer"):
            parse_jobs(_job(f"{{name: a, model: tiny, target_steps: {text}}}"), "j.yaml")
    job = parse_jobs(_job("{name: on, command: [x, yes, 2020-01-01, 0x1f, =]}"), "j.yaml")
    assert job.jobs[0].name == "on" and job.jobs[0].command == ("x", "yes", "2020-01-01", "0x1f", "=")


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ("jobs:\n  - {name: a, name: b, command: [x]}\n", 2, "name"),
        ("jobs:\n  - {name: a, command: [x]}\njobs:\n  - {name: b, command: [x]}\n", 3, "jobs"),
        ("jobs:\n  - name: a\n    min_gpus: 1\n    command: [x]\n    min_gpus: 2\n", 5, "min_gpus"),
        ("jobs:\n  - {name: a, command: [x], env: {A: '1', A: '2'}}\n", 2, "A"),
    ],
)
def test_a_key_given_twice_is_refused_with_its_line(text: str, line: int, key: str) -> None:
    """PyYAML keeps the last of two equal keys without a word: a job named b, the first jobs list dropped."""
    with pytest.raises(OakInputError, match=f"j.yaml:{line}: not valid YAML \\(key '{key}' given twice"):
        parse_jobs(text, "j.yaml")


def test_a_key_a_mapping_gives_beside_a_merged_one_is_not_given_twice() -> None:
    """`<<` merges are flattened in place, so a merged mapping used again through an alias held the merged key
    and its own: that was refused as a key given twice."""
    text = "jobs:\n  - {<<: &d {<<: {max_gpus: 1}, max_gpus: 2}, name: a, command: [x]}\ndefaults: *d\n"
    assert parse_jobs(text, "j.yaml").jobs[0].max_gpus == 2


def test_a_workdir_must_be_an_existing_absolute_directory(tmp_path: Path) -> None:
    ok = parse_jobs(_job(f"{{name: a, command: [x], workdir: {tmp_path}}}"), "j.yaml")
    assert ok.jobs[0].workdir == str(tmp_path)
    for bad, why in (("rel/dir", "expected an absolute directory path"), (f"{tmp_path}/nope", "no such directory")):
        with pytest.raises(OakInputError, match=f"j.yaml:2: jobs\\[0\\].workdir=.*{why}"):
            parse_jobs(_job(f"{{name: a, command: [x], workdir: {bad}}}"), "j.yaml")
    with pytest.raises(OakInputError, match="workdir: only for a 'command' job"):
        parse_jobs(_job(f"{{name: a, model: tiny, target_steps: 5, workdir: {tmp_path}}}"), "j.yaml")
    with pytest.raises(OakInputError, match="OAK_WORKDIR"):
        parse_jobs(_job("{name: a, command: [x], env: {OAK_WORKDIR: /tmp}}"), "j.yaml")


HERE = "import os, oak.job; open('where.txt', 'w').write(os.getcwd()); oak.job.report(1, total_steps=1)"
FAIL_ONCE = (
    "import os, sys, oak.job\n"
    "if not os.path.exists('tried'):\n"
    "    open('tried', 'w').close(); sys.exit(2)\n"
    "oak.job.report(1, total_steps=1)\n"
)


def _wait(run_dir: Path, name: str, state: str, timeout_s: float = 60.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while True:
        rows = {r["name"]: r for r in call(run_dir, "status")["jobs"]}
        if rows.get(name, {}).get("state") == state:
            return rows[name]
        assert time.monotonic() < deadline, rows
        time.sleep(0.1)


def test_a_command_runs_where_it_was_submitted_and_a_failed_job_can_be_retried(tmp_path: Path) -> None:
    """A relative command ran in the server's working directory, silently; a failed job's name was taken
    forever. Now `oak submit` records the submitter's directory (as sbatch does) and `oak retry` queues a
    failed job again."""
    run_dir, home = tmp_path / "run", tmp_path / "home"
    home.mkdir()
    (home / "once.py").write_text(FAIL_ONCE)
    with in_process_service(run_dir, make_policy("oak"), 1):
        text = _job(f"{{name: here, command: [{sys.executable}, -c, {json.dumps(HERE)}]}}")
        assert call(run_dir, "submit", text=text, source="h.yaml", cwd=str(home))["ok"]
        _wait(run_dir, "here", "done")
        assert (home / "where.txt").read_text() == str(home)
        text = _job(f"{{name: once, command: [{sys.executable}, once.py]}}")  # relative to the submitter
        assert call(run_dir, "submit", text=text, source="o.yaml", cwd=str(home))["ok"]
        row = _wait(run_dir, "once", "failed")
        assert "input error" in str(row["reason"])
        assert call(run_dir, "retry", name="here")["error"] == (
            "job 'here' is done; only a failed or cancelled job can be retried"
        )
        assert "no job 'nope'" in call(run_dir, "retry", name="nope")["error"]
        assert call(run_dir, "retry", name="once") == {"ok": True, "retried": "once"}
        row = _wait(run_dir, "once", "done")
        assert row["failures"] == 1


def _finished_run(tmp_path: Path) -> Path:
    """A run directory of `oak run` with one finished command job."""
    run_dir = tmp_path / "run"
    jobs = tmp_path / "jobs.yaml"
    report = "import oak.job; oak.job.report(1, total_steps=1)"
    jobs.write_text(_job(f"{{name: a, command: [{sys.executable}, -c, {json.dumps(report)}]}}"))
    res = oak("run", str(jobs), "--cpu-slots", "1", "--round-seconds", "1", "--run-dir", str(run_dir))
    assert res.returncode == 0, res.stderr
    return run_dir


def test_status_of_one_job_logs_that_know_the_jobs_and_oak_run_dir(tmp_path: Path) -> None:
    run_dir = _finished_run(tmp_path)
    one = oak("status", "--run-dir", str(run_dir), "a", "--json")
    assert one.returncode == 0, one.stderr
    assert [r["name"] for r in json.loads(one.stdout)["jobs"]] == ["a"]
    nope = oak("status", "--run-dir", str(run_dir), "nope")
    assert nope.returncode == 2 and "no job 'nope' in this run (jobs: a)" in nope.stderr
    logs = oak("logs", "--run-dir", str(run_dir), "nope")
    assert logs.returncode == 2 and "no job 'nope' in this run" in logs.stderr  # not "has not started"
    neg = oak("logs", "--run-dir", str(run_dir), "a", "--lines", "-5")
    assert neg.returncode == 2 and "--lines -5: expected a number of lines >= 0" in neg.stderr
    t0 = time.monotonic()
    follow = oak("logs", "--run-dir", str(run_dir), "a", "-f")  # the job is over: -f ends
    assert follow.returncode == 0 and "start" in follow.stdout and time.monotonic() - t0 < 60
    env = {**os.environ, "OAK_RUN_DIR": str(run_dir)}
    by_env = subprocess.run(
        [sys.executable, "-c", "from oak.cli.main import main; main()", "status", "--json"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert by_env.returncode == 0 and json.loads(by_env.stdout)["jobs"][0]["state"] == "done"


def test_an_interrupted_run_does_not_report_a_mean_jct(capsys: pytest.CaptureFixture[str]) -> None:
    """An interrupted `oak run` printed "mean JCT 4.9 s" with 0 of 3 jobs finished."""
    from oak.cli.run import print_run_table

    def result(finished: int) -> RunResult:
        jobs = tuple(
            JobResult(f"j{i}", "x", 0.0, 10.0 if i < finished else None, 0, 0, 1.0, 0.0, 0.0, 1.0, 0.0)
            for i in range(3)
        )
        return RunResult("oak", "w", 0.0, 0, jobs, (1.0,), 20.0, 20.0, 1.0)

    print_run_table(result(0), "none")
    out = capsys.readouterr().out
    assert "no job finished (3 of 3 unfinished)" in out and "mean JCT" not in out
    print_run_table(result(2), "some")
    out = capsys.readouterr().out
    assert "mean JCT ≥ " in out and "1 unfinished (counted with their time so far)" in out


def test_a_real_run_has_no_horizon(tmp_path: Path) -> None:
    """Errors of `oak serve` / `oak run` mentioned the simulator's --horizon, which they do not have: a job
    submitted 58 days ahead was refused."""
    jobs = parse_jobs(_job("{name: later, command: [x], submit_s: 5e6}"), "j.yaml")
    sched = RuntimeScheduler(jobs, make_policy("oak"), tmp_path / "run", RuntimeOptions(devices=1))
    assert sched.model.n == 1


def test_errors_of_a_name_job_speak_of_its_options(tmp_path: Path) -> None:
    """Errors for `oak submit --name` jobs cited line numbers of the YAML generated from the options."""
    run_dir = tmp_path / "run"
    with in_process_service(run_dir, make_policy("oak"), 1):
        out = oak("submit", "--run-dir", str(run_dir), "--name", "big", "--batch-size", "0", "--", "train")
    assert out.returncode == 2
    text = " ".join(out.stderr.split())
    assert "--name big: --batch-size=0: expected" in text and "jobs[0]" not in text, out.stderr


def test_a_failed_start_leaves_no_run_behind(tmp_path: Path) -> None:
    import socket

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    run_dir = tmp_path / "run"
    try:
        out = oak("serve", "--run-dir", str(run_dir), "--cpu-slots", "1", "--listen", f"127.0.0.1:{port}")
    finally:
        busy.close()
    assert out.returncode == 2 and "cannot listen there" in out.stderr
    assert not (run_dir / "state.sqlite").exists()


def test_a_job_that_finished_while_no_scheduler_ran_shows_its_last_step(tmp_path: Path) -> None:
    from oak.runtime.store import JobRecord

    run_dir = tmp_path / "run"
    job_dir = run_dir / "jobs" / "a"
    job_dir.mkdir(parents=True)
    (job_dir / "done").write_text("")
    (job_dir / "status.json").write_text(json.dumps({"step": 10, "done": True}))
    jobs = parse_jobs(_job("{name: a, model: tiny, target_steps: 10}"), "j.yaml")
    sched = RuntimeScheduler(jobs, make_policy("oak"), run_dir, RuntimeOptions(devices=1, stop_timeout_s=1.0))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    r = JobRecord("a", step=0, pids=[gone.pid], launched_at_s=5.0, devices=[0], phase="running")
    sched._reap_orphans([r])
    assert r.done and r.step == 10 and r.state == "done" and r.devices == []
    assert r.phase == "done" and r.history[-1][1:] == ["done", "finished while no scheduler ran"]


@pytest.mark.parametrize("kind", ["model", "command"])
def test_a_job_that_finished_while_no_scheduler_ran_ends_when_its_incarnation_ended(tmp_path: Path, kind: str) -> None:
    """Its finish time was its launch time (JCT 0 in the trace) and the time it ran after the last committed
    tick was lost; now it ends when its marker (``done`` / the ranks' exit files) was written, within
    [launch, now], and that time counts as progress."""
    from oak.runtime.clock import FakeClock
    from oak.runtime.procs import exit_file
    from oak.runtime.store import JobRecord

    start_wall = 1_000_000.0
    run_dir = tmp_path / "run"
    job_dir = run_dir / "jobs" / "a"
    job_dir.mkdir(parents=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    spec = "{name: a, model: tiny, target_steps: 10}" if kind == "model" else "{name: a, command: [x]}"
    marker = job_dir / "done" if kind == "model" else exit_file(job_dir, 0)
    marker.write_text(json.dumps({"pid": gone.pid, "code": 0}))
    os.utime(marker, (start_wall + 30.0, start_wall + 30.0))
    (job_dir / "status.json").write_text(json.dumps({"step": 10, "done": True}))
    jobs = parse_jobs(_job(spec), "j.yaml")
    opts = RuntimeOptions(devices=2, stop_timeout_s=1.0)
    sched = RuntimeScheduler(jobs, make_policy("oak"), run_dir, opts, clock=FakeClock(start_wall + 100.0))
    sched._start_wall, sched._last_tick_s = start_wall, 20.0
    r = JobRecord("a", pids=[gone.pid], launched_at_s=5.0, devices=[0, 1], phase="running", ready=True)
    r.t_progress_s, r.gpu_s = 15.0, 30.0
    sched._reap_orphans([r])
    assert r.phase == "done" and r.finish_s == pytest.approx(30.0)
    assert r.t_progress_s == pytest.approx(25.0) and r.gpu_s == pytest.approx(50.0)


def test_oak_runs_table_says_failed_not_unfinished(capsys: pytest.CaptureFixture[str]) -> None:
    """A job that failed for good showed 'unfinished' as its JCT, as if the run had been cut short."""
    from oak.cli.run import print_run_table

    def job(name: str, jct: float | None) -> JobResult:
        return JobResult(name, "app", 0.0, jct, 1, 1, 1.0, 0.0, 0.0, 1.0, 0.0)

    result = RunResult("oak", "w", 0.0, 0, (job("ok", 5.0), job("bad", None), job("cut", None)), (0.1,), 5.0, 5.0, 1.0)
    print_run_table(result, "t", {"bad": "failed"})
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line.split("│")[3].strip() for line in out.splitlines() if line.count("│") > 3}
    assert rows["ok"] == "5.0" and rows["bad"] == "failed" and rows["cut"] == "unfinished", out
    nothing = RunResult("oak", "w", 0.0, 0, (job("bad", None), job("b2", None)), (0.1,), 5.0, 5.0, 1.0)
    print_run_table(nothing, "t", {"bad": "failed", "b2": "failed"})
    assert "no job finished (2 of 2 unfinished, 2 failed)" in " ".join(capsys.readouterr().out.split())


def test_a_relative_run_dir_gives_a_job_in_another_workdir_the_right_contract_paths(tmp_path: Path) -> None:
    """With `--run-dir rd` (relative) a job whose `workdir` is elsewhere was told OAK_STATUS_FILE=rd/jobs/…,
    relative to its own directory: its status and checkpoints landed under workdir/rd, and the scheduler saw it
    done at step 0. Contract paths are absolute now."""
    (tmp_path / "sub").mkdir()
    report = "import oak.job; oak.job.report(1, total_steps=1); oak.job.report(2, total_steps=2)"
    (tmp_path / "jobs.yaml").write_text(
        _job(f"{{name: a, command: [{sys.executable}, -c, {json.dumps(report)}], workdir: {tmp_path / 'sub'}}}")
    )
    res = subprocess.run(
        [sys.executable, "-m", "oak", "run", "jobs.yaml", "--cpu-slots", "1", "--round-seconds", "1", "--run-dir", "rd"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "sub" / "rd").exists(), "the job wrote its contract files under its own workdir"
    status = oak("status", "--run-dir", str(tmp_path / "rd"), "--json")
    (job,) = json.loads(status.stdout)["jobs"]
    assert job["state"] == "done" and job["step"] == 2, job


def test_status_of_an_emptied_state_is_an_error_and_leaves_it_alone(tmp_path: Path) -> None:
    """An emptied state.sqlite was shown as a run with no jobs (exit 0), and reading it laid a new run's tables
    in the damaged file; `oak run` on the same directory already said that the run left no state."""
    run_dir = _finished_run(tmp_path)
    db = run_dir / "state.sqlite"
    for extra in ("-wal", "-shm"):
        db.with_name(db.name + extra).unlink(missing_ok=True)
    db.write_bytes(b"")
    for argv in (("status",), ("explain", "a"), ("logs", "a")):
        res = oak(argv[0], "--run-dir", str(run_dir), *argv[1:])
        assert res.returncode == 2, (argv, res.stdout, res.stderr)
        assert "holds no run" in " ".join(res.stderr.split()) and "Traceback" not in res.stderr, res.stderr
    assert db.stat().st_size == 0, "a command that reads wrote into the run's state"
    import sqlite3

    with sqlite3.connect(db) as other:  # replaced by another database: refused, and that database left as it was
        other.execute("CREATE TABLE notes (text)")
    other.close()
    res = oak("status", "--run-dir", str(run_dir))
    assert res.returncode == 2 and "holds no run" in " ".join(res.stderr.split()), res.stderr
    with sqlite3.connect(db) as other:
        assert [t for (t,) in other.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["notes"]
    other.close()


def test_options_a_command_would_ignore_are_refused(tmp_path: Path) -> None:
    """`oak submit JOBS.yaml --target-steps 5` printed "submitted" and dropped the option (it is for --name);
    `oak status --json --watch` printed once and ended."""
    (tmp_path / "jobs.yaml").write_text(_job("{name: a, command: [x]}"))
    for opts in (("--target-steps", "5"), ("--max-gpus", "2", "--batch-size", "7"), ("--min-gpus", "2")):
        res = oak("submit", "--run-dir", str(tmp_path / "svc"), *opts, str(tmp_path / "jobs.yaml"))
        assert res.returncode == 2, res.stderr
        assert f"{opts[0]}" in res.stderr and "for one job given with --name NAME -- CMD" in " ".join(
            res.stderr.split()
        )
    res = oak("status", "--run-dir", str(tmp_path / "svc"), "--json", "--watch")
    assert res.returncode == 2 and "give one of them" in res.stderr, res.stderr
    res = oak("status", "--run-dir", str(tmp_path / "svc"), "--interval", "0.5")
    assert res.returncode == 2 and "--interval 0.5: the time between --watch's redraws; add --watch" in " ".join(
        res.stderr.split()
    ), res.stderr


def test_resuming_with_other_settings_says_which(tmp_path: Path) -> None:
    """A finished λ = 0 run resumed with --failure-rate 0.5 was reported and written as a λ = 0.5 run; another
    seed was refused as "other jobs, policy, seed or devices" without saying which."""
    run_dir = _finished_run(tmp_path)
    jobs = tmp_path / "jobs.yaml"
    base = ("run", str(jobs), "--cpu-slots", "1", "--round-seconds", "1", "--run-dir", str(run_dir))
    res = oak(*base, "--failure-rate", "0.5")
    assert res.returncode == 2 and "its run was begun at --failure-rate 0, not 0.5" in " ".join(res.stderr.split())
    res = oak(*base, "--seed", "3")
    assert res.returncode == 2 and "holds a run of --seed 0 (now 3); use a new --run-dir" in " ".join(
        res.stderr.split()
    ), res.stderr
    assert oak(*base).returncode == 0  # the same settings resume it (nothing left to run)


def test_a_runs_job_folders_and_status_files_are_private(tmp_path: Path) -> None:
    """docs/runtime.md: the scheduler-worker channel is files of mode 0600 in directories of mode 0700; the
    jobs folders were 0755 (made by the checkpoint advice's write, with the umask) and status.json 0644."""
    old = os.umask(0o022)
    (tmp_path / "run" / "jobs" / "a").mkdir(parents=True, mode=0o755)  # as an older oak left them: made private
    try:
        run_dir = _finished_run(tmp_path)
    finally:
        os.umask(old)
    for folder in (run_dir / "jobs", run_dir / "jobs" / "a"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    assert (run_dir / "jobs" / "a" / "status.json").stat().st_mode & 0o777 == 0o600


def test_status_of_an_oak_run_shows_each_jobs_total(tmp_path: Path) -> None:
    """A packaged job of an `oak run` showed its step as `8`, not `8/8` (oak serve's showed the total)."""
    jobs = tmp_path / "t.yaml"
    jobs.write_text(_job("{name: t, model: tiny, target_steps: 8}"))
    run_dir = tmp_path / "run"
    res = oak("run", str(jobs), "--cpu-slots", "1", "--round-seconds", "1", "--run-dir", str(run_dir))
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(oak("status", "--run-dir", str(run_dir), "--json").stdout)["jobs"]
    assert (row["step"], row["total_steps"]) == (8, 8), row
