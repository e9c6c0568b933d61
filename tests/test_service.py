"""``oak serve`` and its clients: the job contract, the live queue, crash safety, status, metrics, transport."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oak.errors import OakInputError
from oak.policies import make_policy
from oak.runtime.jobs_file import parse_jobs
from oak.runtime.scheduler import RuntimeOptions
from oak.service.protocol import Listeners, call
from oak.service.scheduler import Service
from support.cli import oak
from support.runtime import processes_of
from support.service import start_server

ROOT = Path(__file__).resolve().parent.parent
COUNT = str(ROOT / "examples" / "jobs" / "count.py")
MAIN = [sys.executable, "-c", "from oak.cli.main import main; main()"]


def count_job(name: str, steps: int, *, step_s: float = 0.05, ckpt: int = 5, extra: str = "", **fields: Any) -> str:
    more = "".join(f", {k}: {v}" for k, v in fields.items())
    args = f'[{sys.executable}, {COUNT}, --steps, "{steps}", --step-s, "{step_s}", --ckpt-every, "{ckpt}"{extra}]'
    return f"  - {{name: {name}, command: {args}{more}}}\n"


def steps_log(run_dir: Path, name: str) -> list[int]:
    path = run_dir / "jobs" / name / "checkpoints" / "steps.log"
    return [int(x) for x in path.read_text().split()]


# ---------------------------------------------------------------------------------------------- jobs file
def test_command_jobs_parse_with_the_contract_fields() -> None:
    jf = parse_jobs(
        "jobs:\n  - {name: a, command: [python, t.py, --lr, 0.1], env: {SEED: 3}, max_gpus: 2}\n",
        "j.yaml",
        ("cifar10",),
    )
    (job,) = jf.jobs
    assert job.is_command and job.command == ("python", "t.py", "--lr", "0.1") and job.env == (("SEED", "3"),)
    assert job.model == "" and job.target_steps == 0 and job.application == ""


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("{name: a, command: python t.py}", "expected a list of arguments (no shell), e.g. ['python', 't.py']"),
        ("{name: a, command: []}", "expected a non-empty list"),
        ("{name: a, command: [python], model: tiny}", "either 'model' or 'command'"),
        ("{name: a, command: [python], env: {MASTER_PORT: 1}}", "set by the job contract"),
        # were silently replaced (threads) or silently replaced the scheduler's advice (the interval)
        ("{name: a, command: [python], env: {OMP_NUM_THREADS: '7'}}", "env.OMP_NUM_THREADS: set by the job contract"),
        (
            "{name: a, command: [python], env: {OAK_CHECKPOINT_INTERVAL_S: '9'}}",
            "env.OAK_CHECKPOINT_INTERVAL_S: set by",
        ),
        ("{name: a, command: [python], width_mult: 0.5}", "only for the packaged worker"),
        ("{name: a, model: tiny, target_steps: 3, env: {A: 1}}", "only for a 'command' job"),
        ("{name: a, command: [python], application: nope}", "jobs[0].application='nope'"),
        ("{name: a, target_steps: 3}", "a job needs 'model'"),
    ],
)
def test_bad_command_jobs_are_refused_with_the_field(entry: str, expected: str) -> None:
    with pytest.raises(OakInputError) as exc:
        parse_jobs(f"jobs:\n  - {entry}\n", "j.yaml", ("cifar10",))
    assert expected in str(exc.value) and "j.yaml:2" in str(exc.value)


# ---------------------------------------------------------------------------------------------- oak.job
def test_job_helper_reports_atomically_and_stops_on_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text(
        "import time, oak.job\n"
        "for step in range(1, 1000):\n"
        "    time.sleep(0.01)\n"
        "    oak.job.report(step, total_steps=999, batch_size=32)\n"
        "    if oak.job.should_stop():\n"
        "        print('stopping at', step, flush=True)\n"
        "        raise SystemExit(0)\n"
    )
    status = tmp_path / "status.json"
    env = dict(os.environ, OAK_JOB="x", OAK_RANK="0", OAK_WORLD_SIZE="1", OAK_STATUS_FILE=str(status))
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not status.exists():
        time.sleep(0.05)
    time.sleep(1.2)  # past MIN_REPORT_INTERVAL_S: a second report with a step time
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopping at" in out
    got = json.loads(status.read_text())
    assert got["total_steps"] == 999 and got["batch_size"] == 32 and got["step"] >= 2
    assert 0.005 < got["step_time_s"] < 0.5  # ~0.01 s of sleep per step plus interpreter overhead
    assert not list(tmp_path.glob("*.tmp")), "the status file is written through a temporary file"


def test_job_helper_is_a_no_op_outside_oak(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OAK_")}
    code = "import oak.job; oak.job.report(3); print(oak.job.rank(), oak.job.world_size(), oak.job.should_stop())"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split() == ["0", "1", "False"]
    with pytest.raises(ValueError, match="step must be an integer >= 0"):
        import oak.job

        oak.job.report(-1)


# ---------------------------------------------------------------------------------------------- in-process service
@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[Service, Listeners, Path]]:
    run_dir = tmp_path / "run"
    opts = RuntimeOptions(devices=2, round_s=2.0, tick_s=0.05, stop_timeout_s=20.0)
    sched = Service(make_policy("oak"), run_dir, opts)
    listeners = Listeners(run_dir, sched.request, ("127.0.0.1", 0))
    thread = threading.Thread(target=sched.run, daemon=True)
    thread.start()
    yield sched, listeners, run_dir
    sched.stop()
    thread.join(60)
    listeners.close()


def _wait(run_dir: Path, pred: Any, timeout_s: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        reply = call(run_dir, "status")
        jobs = {r["name"]: r for r in reply["jobs"]}
        if pred(jobs):
            return jobs
        assert time.monotonic() < deadline, f"timed out; jobs: {json.dumps(jobs)[:2000]}"
        time.sleep(0.2)


def test_the_service_composes_an_inbox_and_a_publisher_driven_on_data(tmp_path: Path) -> None:
    """``Service`` adds no round of its own: its inbox and publisher, given to a ``RuntimeScheduler`` with a live
    job set, are driven here tick by tick on a fake clock with a scripted executor (no thread, socket or
    process). A submission is applied at the next tick, committed and published; a duplicate name is refused
    with nothing changed; a cancel stops the running job; a retry queues it again and it finishes; each
    request and round is a line of rounds.jsonl."""
    from oak.runtime.scheduler import RuntimeScheduler
    from oak.service.scheduler import _Request
    from support.scripted import Fate, ScriptedExecutor

    assert not issubclass(Service, RuntimeScheduler)
    ex = ScriptedExecutor([Fate(end="running", reach=5), Fate(end="done", reach=100, after_s=30.0)])
    opts = RuntimeOptions(devices=2, round_s=60.0, tick_s=1.0)
    svc = Service(make_policy("oak"), tmp_path / "run", opts, ex, clock=ex.clock)
    sched = svc.scheduler
    start = sched.begin()
    last = 0.0

    def tick(op: str | None = None, **args: Any) -> dict[str, Any]:
        nonlocal last
        req = _Request(op, args) if op is not None else None
        if req is not None:
            svc.inbox.put(req)
        now = ex.clock.time() - start
        sched.sync(now, now - last)
        sched.step_next(now)
        last = now
        ex.clock.sleep(opts.tick_s)
        return req.reply if req is not None else {}

    def rows() -> dict[str, dict[str, Any]]:
        return {r["name"]: r for r in svc.request("status", {})["jobs"]}

    text = "jobs:\n  - {name: a, model: tiny, target_steps: 100, max_gpus: 1, batch_size: 8, ckpt_every: 10}\n"
    assert tick("submit", text=text, source="a.yaml") == {"ok": True, "submitted": ["a"]}
    assert rows()["a"]["state"] == "restoring" and len(ex.launches) == 1  # placed in the same tick
    tick()
    assert rows()["a"]["state"] == "running"
    refused = tick("submit", text=text.replace("tiny", "resnet18"), source="again.yaml")
    assert refused["ok"] is False and "job 'a' is already in this run" in refused["error"]
    assert [d["name"] for d in sched.store.submissions()] == ["a"] and list(rows()) == ["a"]
    assert tick("cancel", name="a") == {"ok": True, "cancelled": "a"}
    tick()
    assert rows()["a"]["state"] == "cancelled" and rows()["a"]["devices"] == []
    assert tick("cancel", name="nope")["error"] == "no job 'nope' in this run (jobs: a)"
    assert tick("retry", name="a") == {"ok": True, "retried": "a"}
    for _ in range(40):
        tick()
    a = rows()["a"]
    assert a["state"] == "done" and a["step"] == 100 and a["incarnations"] == 2 and len(ex.launches) == 2
    phases = [p for _, p, _ in a["history"]]
    assert phases[-6:] == ["stopping", "cancelled", "queued", "restoring", "running", "done"], a["history"]
    events = [json.loads(line)["event"] for line in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()]
    assert events[0] == "submit" and events.count("cancel") == 1 and events.count("retry") == 1
    assert events.count("round") >= 2  # the submission placed, the retry placed
    assert 'oak_jobs{state="done"} 1' in svc.request("metrics", {})["text"]


def test_a_round_the_backend_fails_costs_the_service_that_round_only(tmp_path: Path) -> None:
    """A backend that raises while a round is enacted (a SLURM command, a Ray call failing) does not end
    ``oak serve``: the error is published as the round's (``policy_error`` in the status, an event in
    rounds.jsonl), what was done is committed, and the service goes on."""
    from support.scripted import Fate, ScriptedExecutor

    class Flaky(ScriptedExecutor):
        fail = True

        def reconcile(self, intended: dict[str, tuple[int, ...]]) -> list[str]:
            if self.fail:
                raise RuntimeError("squeue timed out")
            return []

    ex = Flaky([Fate(end="done", reach=100, after_s=120.0)])
    svc = Service(make_policy("oak"), tmp_path / "run", RuntimeOptions(devices=1, tick_s=1.0), ex, clock=ex.clock)
    sched = svc.scheduler
    start = sched.begin()
    text = "jobs:\n  - {name: a, model: tiny, target_steps: 100, max_gpus: 1, batch_size: 8, ckpt_every: 10}\n"
    sched.submit(list(parse_jobs(text, "a.yaml").jobs), 0.0, "a.yaml")
    last = 0.0
    for _ in range(200):
        now = ex.clock.time() - start
        sched.sync(now, now - last)
        sched.step_next(now)
        last = now
        ex.clock.sleep(1.0)
        if now > 90.0:
            ex.fail = False
    state = svc.request("status", {})
    assert state["jobs"][0]["state"] == "done"  # launched by the round whose reconciliation failed, and finished
    events = [json.loads(x) for x in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()]
    errors = [e for e in events if e["event"] == "round-error"]
    assert errors and "the round was not enacted: RuntimeError: squeue timed out" in errors[0]["error"]
    assert state["policy_error"] is not None and "squeue timed out" in state["policy_error"]


def test_bad_submissions_are_refused_and_change_nothing(service: tuple[Service, Listeners, Path]) -> None:
    sched, _, run_dir = service
    ok = call(run_dir, "submit", text="jobs:\n" + count_job("a", 5), source="a.yaml")
    assert ok == {"ok": True, "submitted": ["a"]}
    cases = [
        ("jobs:\n" + count_job("b", 5) + "  - {name: c, command: [x], colour: red}\n", "unknown field"),
        ("jobs:\n" + count_job("b", 5) + count_job("a", 5), "job 'a' is already in this run"),
        ("jobs:\n" + count_job("b", 5, min_gpus=3, max_gpus=3), "min_gpus=3 exceeds the 2 CPU slot(s)"),
        ("jobs:\n" + count_job("b", 5, max_gpus=4), "max_gpus=4 exceeds the 2 CPU slot(s)"),
    ]
    for text, expected in cases:
        reply = call(run_dir, "submit", text=text, source="bad.yaml")
        assert reply["ok"] is False and expected in reply["error"] and "bad.yaml" in reply["error"], reply
    assert [d["name"] for d in sched.scheduler.store.submissions()] == ["a"]
    assert [r["name"] for r in call(run_dir, "status")["jobs"]] == ["a"]
    assert call(run_dir, "bogus")["ok"] is False


def test_cancel_stops_a_running_job_and_status_metrics_report_it(
    service: tuple[Service, Listeners, Path],
) -> None:
    _, listeners, run_dir = service
    text = "jobs:\n" + count_job("long", 2000, step_s=0.05) + count_job("short", 10)
    assert call(run_dir, "submit", text=text, source="j.yaml")["ok"]
    jobs = _wait(run_dir, lambda j: j["long"]["state"] == "running" and j["long"]["step"] > 2)
    assert jobs["long"]["devices"] and jobs["long"]["t_progress_s"] > 0
    reply = call(run_dir, "cancel", name="long")
    assert reply == {"ok": True, "cancelled": "long"}
    assert call(run_dir, "status")["jobs"][0]["state"] == "cancelled"  # at once; its devices once it has exited
    jobs = _wait(run_dir, lambda j: j["short"]["state"] == "done" and not j["long"]["devices"])
    assert jobs["long"]["state"] == "cancelled" and jobs["long"]["devices"] == []
    assert call(run_dir, "cancel", name="long")["error"] == "job 'long' is already cancelled"
    assert "no job 'nope'" in call(run_dir, "cancel", name="nope")["error"]
    log = (run_dir / "jobs" / "long" / "rank0.log").read_text()
    assert "stopped at step" in log  # SIGTERM: the job checkpointed and exited 0
    for key in ("name", "state", "devices", "restarts", "t_progress_s", "t_ckpt_s", "t_queue_s"):
        assert key in jobs["short"]
    # metrics: the file and the authenticated HTTP endpoint
    time.sleep(1.2)
    text_file = (run_dir / "metrics.prom").read_text()
    assert 'oak_jobs{state="cancelled"} 1' in text_file and 'oak_jobs{state="done"} 1' in text_file
    assert "oak_decision_seconds" in text_file and 'oak_job_restarts_total{job="short"}' in text_file
    host, port = listeners.address or ("", 0)
    url = f"http://{host}:{port}/metrics"
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(url, timeout=10)
    assert exc.value.code == 401
    token = (run_dir / "token").read_text().strip()
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert 'oak_jobs{state="done"} 1' in resp.read().decode()
    # transport files are private to the owner
    assert stat.S_IMODE((run_dir / "oak.sock").stat().st_mode) == 0o600
    assert stat.S_IMODE((run_dir / "token").stat().st_mode) == 0o600
    rounds = [json.loads(x) for x in (run_dir / "rounds.jsonl").read_text().splitlines()]
    assert any(r["event"] == "round" and "decision_ms" in r for r in rounds)
    assert any(r["event"] == "cancel" and r["job"] == "long" for r in rounds)


def test_a_second_server_on_the_same_run_directory_is_refused(
    service: tuple[Service, Listeners, Path],
) -> None:
    _, _, run_dir = service
    with pytest.raises(OakInputError, match="another oak run or oak serve is running"):
        Listeners(run_dir, lambda op, args: {"ok": True})


def test_learned_goodput_fits_the_jobs_own_step_times(service: tuple[Service, Listeners, Path]) -> None:
    """count.py's step takes step_s·(0.2 + 0.8/W): after running on 1 and 2 slots, the learned model's step
    time at both sizes is within 25 % of the truth (sleep and interpreter overheads are a few ms per step)."""
    sched, _, run_dir = service
    text = "jobs:\n" + count_job("solo", 2000, step_s=0.1, max_gpus=2, batch_size=64)
    assert call(run_dir, "submit", text=text, source="j.yaml")["ok"]
    # alone on 2 slots; the exploration cap first offers it at most 2x what it has run
    jobs = _wait(run_dir, lambda j: j["solo"]["learned"]["samples"] >= 1, timeout_s=60)
    assert jobs["solo"]["learned"]["prior"] == "linear-scaling"
    sched_jobs = _wait(run_dir, lambda j: j["solo"]["step"] > 30 and len(j["solo"]["devices"]) == 2, timeout_s=90)
    assert sched_jobs["solo"]["learned"]["max_devices_offered"] == 2
    idx = sched.scheduler.names.index("solo")
    from oak.goodput.online import predicted_step_time
    from oak.goodput.throughput import ThroughputParams

    params = ThroughputParams(**sched_jobs["solo"]["learned"]["params"])
    run_sizes = {s.replicas for s in sched.scheduler.learned.samples(sched.scheduler.records[idx])}
    assert run_sizes == {1, 2} or run_sizes == {2}, run_sizes
    for w in run_sizes:
        truth = 0.1 * (0.2 + 0.8 / w)
        assert predicted_step_time(params, 1, w, 64 / w) == pytest.approx(truth, rel=0.25)


# ---------------------------------------------------------------------------------------------- the acceptance run
@pytest.mark.long
@pytest.mark.parametrize("backend", ["local", pytest.param("ray", marks=pytest.mark.xdist_group("ray"))])
def test_a_sigkilled_server_restarted_adopts_its_running_jobs(tmp_path: Path, backend: str) -> None:
    """oak serve (3 CPU slots, oak, 5 s rounds), oak submit of three plain-Python scripts, SIGKILL of the server
    while they run, the same command again once one of them has finished meanwhile: the running jobs are adopted,
    not restarted (restarts and incarnations unchanged, no new start in their logs, no step computed twice), and
    the one that finished while no server ran is recorded as done. Local processes, and rank actors on a Ray
    cluster started with ``ray start --head`` (SLURM: tests/test_runtime_slurm.py)."""
    with contextlib.ExitStack() as stack:
        extra: list[str] = []
        env = None
        if backend == "ray":
            pytest.importorskip("ray")
            from support.service import ray_head

            address, env = stack.enter_context(ray_head(3))
            extra = ["--backend", "ray", "--address", address]
        _sigkill_and_restart(tmp_path, extra, env)


def _sigkill_and_restart(tmp_path: Path, extra: list[str], env: dict[str, str] | None) -> None:
    run_dir = tmp_path / "run"
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "defaults: {min_gpus: 1, max_gpus: 1, batch_size: 64}\njobs:\n"
        + count_job("a", 250, step_s=0.1)
        + count_job("b", 210, step_s=0.1)
        + count_job("c", 40, step_s=0.1, submit_s=2)
    )
    argv = [*MAIN, "serve", "--run-dir", str(run_dir), "--cpu-slots", "3", "--policy", "oak", "--round-seconds", "5"]
    argv += extra
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 (closed below)
    server = start_server(argv, run_dir, log, env=env)
    try:
        sub = oak("submit", "--run-dir", str(run_dir), str(jobs))
        assert sub.returncode == 0 and "submitted a, b, c" in sub.stdout, sub.stderr
        before = _wait(
            run_dir, lambda j: len(j) == 3 and all(r["state"] == "running" and r["step"] > 6 for r in j.values())
        )
        time.sleep(0.5)  # the tick that saw them is committed
        os.kill(server.pid, signal.SIGKILL)
        server.wait(30)
        deadline = time.monotonic() + 60
        # c finishes while no server runs: its exit status is written and its rank process is gone (the status
        # lands a moment before the process ends: a server started in between would adopt it)
        while not (run_dir / "jobs" / "c" / "rank0.exit").exists() or processes_of(run_dir / "jobs" / "c"):
            assert time.monotonic() < deadline, "job c did not finish"
            time.sleep(0.2)
        for name in ("a", "b"):  # a busy machine's slow Ray start-up must not let them finish unadopted
            assert not (run_dir / "jobs" / name / "rank0.exit").exists(), f"{name} ended before the server came back"
        server = start_server(argv, run_dir, log, env=env)
        deadline = time.monotonic() + 240
        while True:
            out = oak("status", "--run-dir", str(run_dir), "--json")
            assert out.returncode == 0, out.stderr
            state = json.loads(out.stdout)
            # the restarted server lists no job until it has loaded them: all() of nothing is not "all done"
            if state["live"] and len(state["jobs"]) == 3 and all(r["state"] == "done" for r in state["jobs"]):
                break
            assert time.monotonic() < deadline and server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(1.0)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(120)
        log.close()
    rows = {r["name"]: r for r in state["jobs"]}
    for name, total in (("a", 250), ("b", 210), ("c", 40)):
        steps = steps_log(run_dir, name)
        assert sorted(set(steps)) == list(range(1, total + 1)), name
        assert len(steps) == total, f"{name}: {len(steps) - total} step(s) recomputed"
        assert rows[name]["restarts"] == before[name]["restarts"] == 0, name
        assert rows[name]["incarnations"] == before[name]["incarnations"] == 1, name
        starts = (run_dir / "jobs" / name / "rank0.log").read_text().count("=== ")
        assert starts == 1, f"{name}: {starts} incarnations started"
    assert rows["a"]["adopted"] == rows["b"]["adopted"] == 1 and rows["c"]["adopted"] == 0
    assert all(r["lost_steps"] == 0 for r in rows.values())


def test_clients_without_a_server_say_so(tmp_path: Path) -> None:
    out = oak("submit", "--run-dir", str(tmp_path), str(tmp_path / "x.yaml"))
    assert out.returncode == 2 and "cannot read the jobs file" in out.stderr
    (tmp_path / "x.yaml").write_text("jobs:\n" + count_job("a", 3))
    out = oak("submit", "--run-dir", str(tmp_path), str(tmp_path / "x.yaml"))
    assert out.returncode == 2 and "no oak serve is running" in out.stderr
    out = oak("status", "--run-dir", str(tmp_path))
    assert out.returncode == 2 and "not a run directory of oak serve or oak run" in out.stderr
    out = oak("logs", "--run-dir", str(tmp_path), "a")
    assert out.returncode == 2 and "not a run directory of oak serve or oak run" in out.stderr


# ---------------------------------------------------------------------------------------------- oak run, commands
@pytest.mark.long
def test_oak_run_runs_a_torchrun_style_ddp_script_and_recovers_a_crashing_one(tmp_path: Path) -> None:
    """A command job on 2 ranks rendezvouses through MASTER_ADDR/MASTER_PORT (torch.distributed env://) and
    finishes; a script that crashes once (exit 1) is a failure, restarted from its own checkpoint."""
    pytest.importorskip("torch")
    ddp = str(ROOT / "examples" / "jobs" / "ddp_mlp.py")
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "jobs:\n"
        f'  - {{name: ddp, command: [{sys.executable}, {ddp}, --steps, "60", --ckpt-every, "10"], min_gpus: 2, '
        "max_gpus: 2}\n" + count_job("crash", 30, extra=', --fail-at, "17"', submit_s=1)
    )
    run_dir = tmp_path / "run"
    out = oak(
        "run",
        str(jobs),
        "--cpu-slots",
        "2",
        "--round-seconds",
        "3",
        "--run-dir",
        str(run_dir),
        "--json",
        str(tmp_path / "r.json"),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    result = {j["name"]: j for j in json.loads((tmp_path / "r.json").read_text())["runs"][0]["jobs"]}
    assert result["ddp"]["jct_s"] is not None and result["crash"]["jct_s"] is not None
    assert result["crash"]["failures"] == 1 and result["crash"]["restarts"] >= 1
    ranks = [(run_dir / "jobs" / "ddp" / f"rank{r}.log").read_text() for r in (0, 1)]
    assert all("rank" in t and "/2: resuming at step" in t and "done at step 60" in t for t in ranks)
    steps = steps_log(run_dir, "crash")
    assert sorted(set(steps)) == list(range(1, 31))
    status = oak("status", "--run-dir", str(run_dir), "--json")  # an oak run's directory, no service
    assert status.returncode == 0, status.stderr
    got = {r["name"]: r for r in json.loads(status.stdout)["jobs"]}
    assert got["ddp"]["state"] == got["crash"]["state"] == "done" and got["crash"]["failures"] == 1
    assert len(steps) - 30 <= 2, "only the steps after the last checkpoint (15) before the crash (17) are redone"


def test_the_packaged_worker_runs_as_a_command_job_under_the_contract(tmp_path: Path) -> None:
    """``python -m oak.runtime.worker`` takes its rank, world size, rendezvous and job directory from the
    contract's environment, and reports step times, so its goodput is learned like any user script's."""
    pytest.importorskip("torch")
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "jobs:\n"
        f"  - {{name: w, command: [{sys.executable}, -m, oak.runtime.worker, --model, tiny, --target-steps, '80',"
        " --batch-size, '32', --ckpt-every, '10', --status-interval, '0.1'], min_gpus: 2, max_gpus: 2}\n"
    )
    out = oak("run", str(jobs), "--cpu-slots", "2", "--round-seconds", "3", "--run-dir", str(tmp_path / "run"))
    assert out.returncode == 0, out.stdout + out.stderr
    status = json.loads((tmp_path / "run" / "jobs" / "w" / "status.json").read_text())
    assert status["step"] == 80 and status["world_size"] == 2 and status["done"]
    from oak.runtime.store import RunStore

    rec = RunStore(tmp_path / "run" / "state.sqlite").jobs()["w"]
    assert rec.done and rec.steplog, "the worker's reported step times reached the learned model"


# ---------------------------------------------------------------------------------------------- contract edge cases
def _run(tmp_path: Path, text: str, **opts: Any) -> tuple[Any, Any]:
    from oak.runtime.scheduler import RuntimeScheduler

    options = {"devices": 2, "round_s": 2.0, "tick_s": 0.05, "time_limit_s": 120.0, **opts}
    sched = RuntimeScheduler(
        parse_jobs(text, "j.yaml"), make_policy("oak"), tmp_path / "run", RuntimeOptions(**options)
    )
    return sched, sched.run()


def test_a_command_that_cannot_start_fails_alone_and_the_run_goes_on(tmp_path: Path) -> None:
    sched, result = _run(tmp_path, "jobs:\n  - {name: bad, command: [/no/such/program]}\n" + count_job("ok", 10))
    jobs = {j.name: j for j in result.jobs}
    assert jobs["ok"].jct_s is not None and jobs["bad"].jct_s is None
    bad = sched.records[sched.names.index("bad")]
    assert bad.gave_up is not None and "cannot start its command" in bad.gave_up and "/no/such/program" in bad.gave_up


def test_a_command_crashing_before_its_next_checkpoint_stops_after_the_retry_limit(tmp_path: Path) -> None:
    """Checkpoints every 5 steps, crashes at step 8 every time: the first restart resumes at 5 (durable
    progress), the later ones at 5 again (none), so the job fails for good after max_retries in a row."""
    script = tmp_path / "crash.py"
    script.write_text(
        "import json, os, sys, oak.job\n"
        "d = oak.job.checkpoint_dir(); c = d / 'c.json'\n"
        "step = json.loads(c.read_text())['s'] if c.exists() else 0\n"
        "while True:\n"
        "    step += 1\n"
        "    oak.job.report(step, total_steps=100)\n"
        "    if step % 5 == 0:\n"
        "        c.write_text(json.dumps({'s': step}))\n"
        "    if step == 8:\n"
        "        sys.exit(1)\n"
    )
    text = f"jobs:\n  - {{name: c, command: [{sys.executable}, {script}]}}\n"
    sched, _ = _run(tmp_path, text, max_retries=2, retry_backoff_s=0.2)
    r = sched.records[0]
    assert r.gave_up is not None and "2 failures in a row without progress" in r.gave_up
    assert r.failures == 3, r  # 0→8 (durable 5), 5→8, 5→8: the streak starts after the first


def test_a_command_that_never_reports_runs_to_its_end_and_is_no_stall(tmp_path: Path) -> None:
    text = "jobs:\n  - {name: quiet, command: [sleep, '4']}\n"
    sched, result = _run(tmp_path, text, stall_s=1.0)
    assert result.jobs[0].jct_s is not None and result.jobs[0].failures == 0
    assert sched.records[0].silent or sched.records[0].t_ckpt_s > 3.0  # restoring until SILENT_AFTER_S


def test_absurd_step_times_in_a_report_are_ignored(tmp_path: Path) -> None:
    script = tmp_path / "liar.py"
    script.write_text(
        "import json, os, time\n"
        "p = os.environ['OAK_STATUS_FILE']\n"
        "for i, t in enumerate(['Infinity', 'NaN', '-1', '1e308']):\n"
        '    open(p, \'w\').write(\'{"step": %d, "steps_timed": 1, "step_time_s": %s, "updated_at": %d}\' % (i + 1, t, i))\n'
        "    time.sleep(0.3)\n"
    )
    sched, result = _run(tmp_path, f"jobs:\n  - {{name: liar, command: [{sys.executable}, {script}]}}\n")
    assert result.jobs[0].jct_s is not None
    assert not sched.records[0].steplog  # none of them reached the fitter


def test_serve_on_a_busy_port_exits_2_at_once(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        out = subprocess.run(
            [*MAIN, "serve", "--run-dir", str(tmp_path / "run"), "--cpu-slots", "1", "--listen", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 2 and "cannot listen there" in out.stderr, out.stderr
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "run" / "oak.sock").exists()


def _submit_offline(args: list[str]) -> tuple[Any, dict[str, Any]]:
    """``oak submit ARGS`` in process with the service call faked: (the CLI's result, what it would send)."""
    from typer.testing import CliRunner

    from oak.cli.main import app

    seen: dict[str, Any] = {}

    def fake_call(run_dir: Path, op: str, **args: Any) -> dict[str, Any]:
        seen.update(args)
        return {"ok": True, "submitted": ["n"]}

    import oak.service.protocol as protocol

    orig = protocol.call
    protocol.call = fake_call  # type: ignore[assignment]
    try:
        res = CliRunner().invoke(app, ["submit", *args])
    finally:
        protocol.call = orig  # type: ignore[assignment]
    return res, seen


def test_submit_name_keeps_the_command_as_typed(tmp_path: Path) -> None:
    res, seen = _submit_offline(["--run-dir", str(tmp_path), "--name", "n", "--", "./train.sh", "a//b"])
    assert res.exit_code == 0, res.output
    assert "./train.sh" in seen["text"] and "a//b" in seen["text"]


@pytest.mark.parametrize("name", ["0o7", "1e5", "0x1f", "010"])
def test_submit_name_that_looks_like_a_number_stays_a_name(tmp_path: Path, name: str) -> None:
    """The job was written as YAML with PyYAML's YAML 1.1 quoting and read back by the YAML 1.2 reader: `0o7`
    and `1e5`, left plain, came back as numbers, and the name was refused."""
    res, seen = _submit_offline(["--run-dir", str(tmp_path), "--name", name, "--", "train", name])
    assert res.exit_code == 0, res.output
    (job,) = parse_jobs(seen["text"], "--name").jobs
    assert job.name == name and job.command == ("train", name)


def test_status_watch_in_a_pipe_prints_a_table_per_interval(service: tuple[Service, Listeners, Path]) -> None:
    _, _, run_dir = service
    assert call(run_dir, "submit", text="jobs:\n" + count_job("w", 3), source="w.yaml")["ok"]
    proc = subprocess.Popen(
        [*MAIN, "status", "--run-dir", str(run_dir), "--watch", "--interval", "0.3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(8.0)  # start-up (imports) and a few 0.3 s intervals, on a loaded 2-core machine too
    proc.send_signal(signal.SIGTERM)  # not SIGINT: a test run from a background shell inherits SIGINT ignored
    out, err = proc.communicate(timeout=30)
    assert out.count("┃ job") >= 2, out + err


def test_learned_goodput_priors_and_exploration() -> None:
    """A command job naming a catalog application starts from that application's model and is offered its
    full range; one without starts from a linear-scaling prior and is offered twice what it has run."""
    from oak.catalog import Catalog
    from oak.runtime.learned import LearnedGoodput
    from oak.runtime.store import JobRecord

    catalog = Catalog.load()
    learned = LearnedGoodput(catalog, "aws")
    named, plain = parse_jobs(
        "jobs:\n  - {name: n, command: [x], application: cifar10, max_gpus: 8, batch_size: 128}\n"
        "  - {name: p, command: [x], max_gpus: 8, batch_size: 128}\n",
        "j.yaml",
        tuple(catalog.apps),
    ).jobs
    rn, rp = JobRecord("n"), JobRecord("p")
    assert learned.params(named, rn) == catalog.app("cifar10").gpus["aws"].params
    assert learned.max_gpus(named, rn) == 8 and learned.max_gpus(plain, rp) == 1
    learned.record(rp, nodes=1, replicas=2, local_bsz=64.0, elapsed_s=1.0, steps=10)
    assert learned.max_gpus(plain, rp) == 4
    apps = learned.catalog([named, plain], [rn, rp]).apps
    assert apps["job:p"].m0 == apps["job:p"].m_max == 128 and "job:n" in apps
    assert learned.total(plain, rp) == 2 and learned.fraction(plain, rp) == 0.0  # unknown total: ~half done


def test_sigterm_of_a_service_with_no_jobs_exits_0(tmp_path: Path) -> None:
    """A server that never got a job stops cleanly on SIGTERM (it used to end in ``max() arg is an empty
    sequence``, exit 1, while summing up a run with no jobs)."""
    run_dir = tmp_path / "run"
    with open(tmp_path / "serve.log", "w+") as log:
        server = start_server([*MAIN, "serve", "--run-dir", str(run_dir), "--cpu-slots", "1"], run_dir, log)
        # its socket answers before the scheduler's loop has installed the SIGTERM handler; metrics.prom is
        # written from inside the loop
        deadline = time.monotonic() + 60
        while not (run_dir / "metrics.prom").exists():
            assert time.monotonic() < deadline and server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(0.1)
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0, (tmp_path / "serve.log").read_text()[-3000:]
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


@pytest.mark.long
def test_a_job_cancelled_just_before_the_server_died_is_not_taken_for_finished(tmp_path: Path) -> None:
    """oak cancel sends the job SIGTERM (it checkpoints and exits 0, as a stopped command does); the server is
    SIGKILLed before it sees the exit. The restarted server must not take that exit 0 for a finish: the stop was
    committed before the signal was sent, so the job is cancelled, not done."""
    run_dir = tmp_path / "run"
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n" + count_job("a", 400, step_s=0.1))
    argv = [*MAIN, "serve", "--run-dir", str(run_dir), "--cpu-slots", "1", "--round-seconds", "5"]
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 (closed below)
    server = start_server(argv, run_dir, log)
    try:
        assert oak("submit", "--run-dir", str(run_dir), str(jobs)).returncode == 0
        _wait(run_dir, lambda j: j.get("a", {}).get("state") == "running" and j["a"]["step"] > 3)
        assert call(run_dir, "cancel", name="a") == {"ok": True, "cancelled": "a"}
        os.kill(server.pid, signal.SIGKILL)
        server.wait(30)
        deadline = time.monotonic() + 30
        while not (run_dir / "jobs" / "a" / "rank0.exit").exists():  # its stop ends while no server runs
            assert time.monotonic() < deadline, "job a did not stop"
            time.sleep(0.1)
        server = start_server(argv, run_dir, log)
        deadline = time.monotonic() + 60
        while True:  # the old socket file is there until the new server listens on it
            out = oak("status", "--run-dir", str(run_dir), "--json")
            state = json.loads(out.stdout) if out.returncode == 0 else {}
            if state.get("live") and state["jobs"]:
                break
            assert time.monotonic() < deadline and server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(0.3)
        (row,) = state["jobs"]
        assert row["state"] == "cancelled" and row["step"] < 400, row
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(120)
        log.close()


@pytest.mark.parametrize(("given", "sent"), [([], 1), (["--max-gpus", "3"], 3), (["--max-gpus", "0"], 0)])
def test_submit_name_sends_the_max_gpus_given_even_zero(tmp_path: Path, given: list[str], sent: int) -> None:
    """``--max-gpus 0`` reaches the jobs-file check (refused there as any max_gpus: 0), not replaced by min."""
    from oak.runtime.jobs_file import parse_jobs

    res, seen = _submit_offline(["--run-dir", str(tmp_path), "--name", "n", *given, "--", "true"])
    assert res.exit_code == 0, res.output
    if sent >= 1:
        assert parse_jobs(seen["text"], "--name n").jobs[0].max_gpus == sent
    else:
        with pytest.raises(OakInputError, match=r"max_gpus.*0"):
            parse_jobs(seen["text"], "--name n")


def test_logs_follow_of_a_queued_job_waits_for_it_to_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``oak submit … && oak logs -f NAME`` failed ("no such log … it has not started") whenever the job was
    still queued; -f now waits for its first incarnation, prints its log and ends when the job is over. On data:
    a service that reports the job queued until its log appears (at the first wait) and done after, on a clock
    that moves only when the command sleeps."""
    import types

    from typer.testing import CliRunner

    import oak.cli.serve as serve_cli
    from oak.cli.main import app

    run_dir = tmp_path / "run"
    log = run_dir / "jobs" / "b" / "rank0.log"
    clock = {"now": 0.0, "sleeps": 0}

    def sleep(seconds: float) -> None:
        clock["now"] += seconds
        clock["sleeps"] += 1
        if not log.exists():  # the service starts the job while -f waits
            log.parent.mkdir(parents=True)
            log.write_text("=== start incarnation x rank 0/1\nstep 1\n")

    def status(_run_dir: Path) -> tuple[dict[str, Any], bool]:
        return {"jobs": [{"name": "b", "state": "done" if log.exists() else "queued"}]}, True

    fake_time = types.SimpleNamespace(sleep=sleep, monotonic=lambda: clock["now"])
    monkeypatch.setattr(serve_cli, "time", fake_time)
    monkeypatch.setattr(serve_cli, "_status", status)
    res = CliRunner().invoke(app, ["logs", "--run-dir", str(run_dir), "b", "-f"])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "job 'b' is queued: waiting for it to start" in said and "step 1" in said, said
    assert clock["sleeps"] < 20, clock  # it ended once the job was over


def test_logs_follow_ends_when_no_service_runs_and_the_jobs_ranks_are_gone(tmp_path: Path) -> None:
    """With no service in the run directory (it was killed), the committed state can say "running" forever:
    -f ends once none of the ranks it names is alive, and keeps following while one is."""
    from oak.cli.serve import _log_over
    from oak.runtime.store import JobRecord, RunStore

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for pids, over in (([dead.pid], True), ([os.getpid()], False)):
        run_dir = tmp_path / f"run-{over}"
        store = RunStore(run_dir / "state.sqlite")
        rec = JobRecord("a", phase="running", launched_at_s=1.0, ready=True, pids=pids, devices=[0])
        store.save([rec], {"run": {}})
        store.close()
        assert _log_over(run_dir, "a")() is over


def test_submit_name_with_a_jobs_file_for_a_command_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``oak submit --name zz tiny.yaml`` (a jobs file where the command goes) submitted tiny.yaml as the
    program to run; it is now refused, pointing at ``oak submit tiny.yaml``."""
    from typer.testing import CliRunner

    from oak.cli.main import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text("jobs:\n" + count_job("a", 3))
    res = CliRunner().invoke(app, ["submit", "--run-dir", str(tmp_path / "run"), "--name", "zz", "tiny.yaml"])
    assert res.exit_code == 2, res.output
    assert "the command 'tiny.yaml' is a jobs file" in " ".join(res.output.split()), res.output


def test_the_page_reads_the_history_of_a_run_directory_with_a_hash_in_its_path(tmp_path: Path) -> None:
    """`file:{db}?mode=ro` took the part after a `#` for a fragment: the charts of such a run were empty."""
    from oak.runtime.store import RunStore
    from oak.service.page import read_history

    db = tmp_path / "r#1?x" / "state.sqlite"
    store = RunStore(db)
    store.save([], rnd=(0, 5.0, 0.1, json.dumps({"a": [0, 1]})))
    store.close()
    assert read_history(db).rounds == ((5.0, {"a": [0, 1]}),)


def test_queue_age_counts_only_jobs_that_have_arrived(service: tuple[Service, Listeners, Path]) -> None:
    """A job submitted with a later submit_s is queued but not yet waiting: its age made the metric negative."""
    _, _, run_dir = service
    assert call(run_dir, "submit", text="jobs:\n" + count_job("later", 3, submit_s=600), source="l.yaml")["ok"]
    _wait(run_dir, lambda jobs: jobs.get("later", {}).get("state") == "queued")  # published
    text = call(run_dir, "metrics")["text"]
    (line,) = [x for x in text.splitlines() if x.startswith("oak_queue_age_seconds ")]
    assert float(line.split()[1]) >= 0.0, text
