"""Jobs across the nodes of a real cluster (``scripts/local-cluster``): placement per node, a lost node, a
network partition, a node that comes back — on SLURM and on Ray, through ``oak run --cluster-from``.

Skipped as a whole, with the reason, when the cluster does not run (it needs root; ``.ci/run`` starts it with
``scripts/local-cluster start --nodes 3``). The tests that break nodes leave every node up again. They take
minutes of mostly waiting (jobs restarted three times, nodes declared dead), so they are marked ``multinode``
and left out of the default run, which stays fast enough to run before every commit: ``.ci/run`` runs them as
its own step, ``python3 -m pytest -m multinode``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support.clusters import not_running
from support.runtime import processes_of

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "local-cluster"
#: how long ``_all_up`` waits for a node before reviving it again
REVIVE_AFTER_S = 30.0
CLUSTER_DIR = Path(os.environ.get("OAK_CLUSTER_DIR", "/tmp/oak-local-cluster"))
DDP = ROOT / "examples" / "jobs" / "ddp_mlp.py"

_REASON = not_running(SCRIPT, "the local multi-node cluster")
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)

# one worker: these tests break the cluster's nodes
pytestmark = [pytest.mark.xdist_group("cluster-nodes"), pytest.mark.long, pytest.mark.multinode]
ENV = {**os.environ, "SLURM_CONF": str(CLUSTER_DIR / "slurm.conf")}
STEPS, CKPT, RANKS = 500, 10, 4
"""The DDP job: 4 ranks on nodes of 2 slots, so that every incarnation spans 2 of the 3 nodes."""


def _env(backend: str) -> dict[str, str]:
    env = dict(ENV)
    if backend == "ray":
        pytest.importorskip("ray")
        env_file = CLUSTER_DIR / "ray.env"
        if not env_file.is_file():
            pytest.skip("the local cluster runs without Ray (no ray command when it started)")
        env.update(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    return env


def _fault(what: str, node: str) -> None:
    res = subprocess.run(
        [str(SCRIPT), "fault", what, "--node", node.removeprefix("node")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def _jobs(tmp_path: Path, step_sleep: float) -> Path:
    jobs = tmp_path / "ddp.yaml"
    argv = [sys.executable, str(DDP), "--steps", str(STEPS), "--ckpt-every", str(CKPT), "--step-sleep", str(step_sleep)]
    jobs.write_text(
        "jobs:\n"
        f"  - {{name: ddp, command: [{', '.join(json.dumps(a) for a in argv)}], min_gpus: {RANKS}, max_gpus: {RANKS}}}\n"
    )
    return jobs


def _oak(*args: str) -> list[str]:
    return [sys.executable, "-c", "from oak.cli.main import main; main()", *args]


def _model(job_dir: Path) -> dict[str, Any]:
    import torch

    state = torch.load(job_dir / "checkpoints" / "model.pt")
    return {"step": state["step"], "model": state["model"]}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same job run start to end on this machine's processes, never stopped (the reference)."""
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("reference")
    run = tmp / "run"
    res = subprocess.run(
        _oak("run", str(_jobs(tmp, 0.0)), "--cpu-slots", str(RANKS), "--round-seconds", "5", "--run-dir", str(run)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return _model(run / "jobs" / "ddp")


def _story(run_dir: Path) -> str:
    """What the run's store says happened (each job's phase history, node losses and failures, the rounds'
    allocations): the message of an assertion about the run, so that a failure on CI tells why."""
    from oak.runtime.store import RunStore

    path = run_dir / "state.sqlite"
    if not path.is_file():
        return f"(no {path})"
    store = RunStore(path)
    try:
        lines = [f"{n}: {h}" for n, r in store.jobs().items() for h in r.history]
        lines += [f"failure: {f}" for f in store.failures()]
    finally:
        store.close()
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rounds = db.execute("SELECT k, time_s, allocation FROM rounds ORDER BY k").fetchall()
    lines += [f"round {k} t={t:.1f}: {a}" for k, t, a in rounds]
    return "\n".join(lines)


RESUMING = re.compile(r"rank (\d+)/\d+: resuming at step (\d+) \(on (\S+)\)")


def incarnations(job_dir: Path) -> list[tuple[int, tuple[str, ...]]]:
    """Each incarnation the job's ranks started: (the step it resumed from, its ranks' nodes in rank order);
    one that not every rank reached is left out (still starting)."""
    per_rank: dict[int, list[tuple[int, str]]] = {}
    for log in job_dir.glob("rank*.log"):
        for m in RESUMING.finditer(log.read_text(errors="replace")):
            per_rank.setdefault(int(m.group(1)), []).append((int(m.group(2)), m.group(3)))
    if len(per_rank) < RANKS:
        return []
    n = min(len(v) for v in per_rank.values())
    return [(per_rank[0][k][0], tuple(per_rank[r][k][1] for r in range(RANKS))) for k in range(n)]


def _step(job_dir: Path) -> int:
    try:
        return int(json.loads((job_dir / "status.json").read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _until(pred: Callable[[], bool], timeout_s: float, what: str, proc: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:g} s (oak run exit {proc.poll()}):\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def _up_nodes(backend: str, env: dict[str, str]) -> set[str]:
    """The names (``nodeK``) of the nodes the cluster lists up."""
    if backend == "slurm":
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=30, env=env, check=False
        )
        rows = [line.split() for line in out.stdout.splitlines()]
        return {r[0] for r in rows if len(r) == 2 and r[1] in ("idle", "mixed", "allocated")}
    probe = (
        "import ray; ray.init(log_to_driver=False); print([n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']])"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    return {f"node{k}" for k in (1, 2, 3) if f"'10.77.0.{10 + k}'" in out.stdout}


def _node_up(backend: str, node: str, env: dict[str, str]) -> bool:
    return node in _up_nodes(backend, env)


def _all_up(backend: str, env: dict[str, str], timeout_s: float = 300.0) -> None:
    """Wait until the cluster lists every node up again (SLURM returns a node it had marked not responding at
    its next ping). A node still down after REVIVE_AFTER_S is revived again: on a loaded 2-core machine Ray's GCS
    has declared a healthy, just revived raylet dead (missed health checks) and that raylet exits for good, and
    SLURM has set a node it had just returned down again and pinged it back minutes later (revive resumes it)."""
    deadline = time.monotonic() + timeout_s
    revive_at = time.monotonic() + REVIVE_AFTER_S
    while (up := _up_nodes(backend, env)) != {"node1", "node2", "node3"}:
        if time.monotonic() >= deadline:
            said = ""
            if backend == "slurm":  # each node's state and the reason SLURM gives for it
                try:
                    said = subprocess.run(
                        ["sinfo", "-N", "-o", "%N %T %E"], capture_output=True, text=True, timeout=30, env=env
                    ).stdout
                except subprocess.TimeoutExpired:
                    said = "(sinfo did not answer within 30 s)"
            pytest.fail(f"{backend}: only {sorted(up)} up again within {timeout_s:g} s\n{said}")
        if time.monotonic() >= revive_at:
            for node in sorted({"node1", "node2", "node3"} - up):
                _fault("revive", node)
            revive_at = time.monotonic() + REVIVE_AFTER_S
        time.sleep(1.0)


@pytest.mark.parametrize("backend", ["slurm", "ray"])
def test_a_job_across_nodes_survives_a_lost_node_and_a_partition(
    backend: str, uninterrupted: dict[str, Any], tmp_path: Path
) -> None:
    """A 4-rank DDP job on 2-slot nodes spans 2 of the 3 nodes (the engine's per-node plan is the backend's
    placement; MASTER_ADDR is rank 0's node). Its node is killed mid-run (every process on it): the job fails,
    resumes from its last checkpoint on the other two nodes; the node comes back; then one of the job's nodes is
    cut off the network: the node is seen down, the job resumes on the remaining node and the one that came
    back. The run completes with the final parameters bit-identical to an uninterrupted run's, nothing
    recomputed beyond the last checkpoint, and no rank of an old incarnation left once the partition heals."""
    env = _env(backend)
    run_dir = tmp_path / "run"
    job_dir = run_dir / "jobs" / "ddp"
    # 0.2 s of sleep per step (100 s in all): the job must still be running when its node is cut off, after the
    # node loss, the resume and the lost node's return (up to 120 s on SLURM). At 0.05 s a fast, idle machine
    # finished its 500 steps while the node came back, before the partition. Sleep does not change the parameters.
    argv = ["run", str(_jobs(tmp_path, 0.2)), "--cpu-slots", "6", "--backend", backend, "--cluster-from", backend]
    argv += [
        "--round-seconds",
        "5",
        "--stall-seconds",
        "90",
        "--run-dir",
        str(run_dir),
        "--json",
        str(tmp_path / "r.json"),
    ]
    if backend == "ray":
        argv += ["--address", env["RAY_ADDRESS"]]
    log = tmp_path / "oak.log"
    broken: list[tuple[str, str]] = []
    with open(log, "w") as out:
        proc = subprocess.Popen(_oak(*argv), stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        _until(lambda: len(incarnations(job_dir)) == 1 and _step(job_dir) >= 30, 180, "first incarnation", proc, log)
        (_, first) = incarnations(job_dir)[0]
        assert len(set(first)) == 2, first
        lost = first[-1]
        at_loss = _step(job_dir)
        _fault("kill", lost)
        broken.append(("revive", lost))
        _until(lambda: len(incarnations(job_dir)) == 2, 240, "resume after the node loss", proc, log)
        resumed_1, second = incarnations(job_dir)[1]
        assert lost not in second and len(set(second)) == 2, (lost, second)
        _fault("revive", lost)
        broken.pop()
        _until(lambda: _node_up(backend, lost, env), 120, f"{lost} back", proc, log)
        _until(lambda: _step(job_dir) >= resumed_1 + 30, 180, "second incarnation progresses", proc, log)
        cut = second[0]
        at_cut = _step(job_dir)
        _fault("partition", cut)
        broken.append(("heal", cut))
        _until(lambda: len(incarnations(job_dir)) == 3, 300, "resume after the partition", proc, log)
        resumed_2, third = incarnations(job_dir)[2]
        assert cut not in third and lost in third, (cut, lost, third)  # the node that came back is used again
        _fault("heal", cut)
        broken.pop()
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for what, node in broken:
            _fault(what, node)
        for k in (1, 2, 3):  # every node up again for the tests after this one (Ray's cut-off raylet has left)
            _fault("heal", f"node{k}")
            _fault("revive", f"node{k}")
        _all_up(backend, env)
    assert proc.returncode == 0, log.read_text()[-3000:]
    result = json.loads((tmp_path / "r.json").read_text())["runs"][0]["jobs"][0]
    assert result["failures"] == 2 and result["restarts"] == 2, f"{result}\n{_story(run_dir)}"
    # nothing lost beyond the last checkpoint: each incarnation resumed from the checkpoint of the step it had
    # reached (at least the step it had reported before the fault, rounded down to a checkpoint)
    for resumed, reached in ((resumed_1, at_loss), (resumed_2, at_cut)):
        assert resumed % CKPT == 0 and resumed >= reached - reached % CKPT, (resumed, reached)
    got = _model(job_dir)
    import torch

    assert got["step"] == uninterrupted["step"] == STEPS
    assert all(torch.equal(got["model"][k], uninterrupted["model"][k]) for k in got["model"]), "bit-identical"
    deadline = time.monotonic() + 60  # the cut-off node's ranks of the second incarnation: killed once it is back
    while processes_of(job_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not processes_of(job_dir)


PACKAGED = (
    "jobs:\n  - {name: w, model: tiny, target_steps: 120, min_gpus: 4, max_gpus: 4, batch_size: 32, ckpt_every: 10,"
    " min_step_s: 0.05}\n"
)


TWO_PAIRS = """
import json, os, sys, time
from pathlib import Path
from oak.runtime.executor import Launch
from oak.runtime.jobs_file import parse_jobs

backend, run_dir, text = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
job = parse_jobs(text, "w.yaml").jobs[0]
if backend == "slurm":
    from oak.runtime.slurm_executor import SlurmExecutor
    ex = SlurmExecutor(device_kind="cpu", devices=6, run_dir=run_dir, span_nodes=True)
else:
    from oak.runtime.ray_executor import RayExecutor
    ex = RayExecutor(address=os.environ["RAY_ADDRESS"], device_kind="cpu", devices=6)
job_dir = run_dir / "jobs" / "w"

def step():
    try:
        return json.loads((job_dir / "status.json").read_text())["step"]
    except (OSError, ValueError, KeyError):
        return 0

def until(want, timeout_s):
    deadline = time.monotonic() + timeout_s
    while (state := ex.state("w")) != want:
        assert state == "running" and time.monotonic() < deadline, (state, want)
        time.sleep(0.2)

try:
    n1, n2, n3 = ex.nodes(fresh=True)[:3]
    ex.launch(Launch(job, job_dir, (0, 1, 2, 3), 0, (n1, n1, n2, n2)))
    deadline = time.monotonic() + 180
    while step() < 30:
        assert ex.state("w") == "running" and time.monotonic() < deadline
        time.sleep(0.2)
    stopped = ex.stop(["w"], 120)
    ex.kill("w")
    stopped_at = step()
    ex.launch(Launch(job, job_dir, (2, 3, 4, 5), 0, (n2, n2, n3, n3)))
    until("done", 240)
    ex.kill("w")
finally:
    ex.shutdown()
print(json.dumps({"stopped": stopped, "stopped_at": stopped_at, "pairs": [[n1.name, n2.name], [n2.name, n3.name]]}))
"""


def _final_params(job_dir: Path) -> dict[str, Any]:
    from oak.runtime import checkpoint

    loaded = checkpoint.load_latest(job_dir)
    assert loaded is not None
    return dict(loaded.state["model"])


@pytest.mark.parametrize("backend", ["slurm", "ray"])
def test_the_packaged_worker_stops_on_two_nodes_and_resumes_on_another_pair(backend: str, tmp_path: Path) -> None:
    """The packaged worker (4 ranks, gloo) launched on two nodes, stopped (it checkpoints), launched again on
    another pair of nodes from that checkpoint: its final parameters are bit-identical to an uninterrupted
    run's on this machine's processes (the executors directly, the nodes as ``--cluster-from`` lists them)."""
    torch = pytest.importorskip("torch")
    from oak.runtime.executor import Launch, LocalExecutor
    from oak.runtime.jobs_file import parse_jobs

    env = _env(backend)
    _all_up(backend, env)  # a test before this one broke nodes
    job = parse_jobs(PACKAGED, "w.yaml").jobs[0]
    ref_dir = tmp_path / "ref" / "jobs" / "w"
    local = LocalExecutor("cpu")
    try:
        local.launch(Launch(job, ref_dir, (0, 1, 2, 3), 0))
        deadline = time.monotonic() + 180
        while (state := local.state("w")) != "done":
            assert state == "running" and time.monotonic() < deadline, state
            time.sleep(0.2)
    finally:
        local.shutdown()
    run_dir = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-c", TWO_PAIRS, backend, str(run_dir), PACKAGED],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["stopped"] == {"w": "stopped"} and 30 <= out["stopped_at"] < 120, out
    job_dir = run_dir / "jobs" / "w"
    if backend == "slurm":  # each rank's start line names its SLURM node: two incarnations, two pairs of nodes
        hosts = [re.findall(r"on (node\d)\)", (job_dir / f"rank{r}.log").read_text()) for r in range(4)]
        (a, b), (c, d) = out["pairs"]
        assert [h[:2] for h in hosts] == [[a, c], [a, c], [b, d], [b, d]], hosts
    got, want = _final_params(job_dir), _final_params(ref_dir)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want), "bit-identical"
