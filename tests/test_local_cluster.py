"""``scripts/local-cluster``: a multi-node SLURM and Ray cluster on one machine, each node its own network namespace.

Skipped as a whole, with the reason, when the cluster does not run (it needs root; ``.ci/run`` starts it with
``scripts/local-cluster start --nodes 3``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.clusters import not_running

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "local-cluster"
CLUSTER_DIR = Path(os.environ.get("OAK_CLUSTER_DIR", "/tmp/oak-local-cluster"))


_REASON = not_running(SCRIPT, "the local multi-node cluster")
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)

pytestmark = [pytest.mark.xdist_group("cluster-nodes")]
ENV = {**os.environ, "SLURM_CONF": str(CLUSTER_DIR / "slurm.conf")}


def _sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True, env=ENV).stdout


def test_a_job_spans_two_nodes_each_with_its_own_address(tmp_path: Path) -> None:
    """A batch job of two tasks on two nodes: each task runs on its own node — its own hostname and its own
    address on the cluster's bridge (its network namespace) — and both see the shared filesystem."""
    nodes = _sh("sinfo", "-h", "-N", "-o", "%N %T").split("\n")
    assert len([n for n in nodes if n.strip()]) >= 2, nodes
    script = tmp_path / "two.sh"
    script.write_text(
        "#!/bin/sh\nsrun sh -c 'echo \"$(hostname) $SLURM_PROCID $(ip -4 -o addr show eth0 | "
        f'awk "{{print \\$4}}") " > {tmp_path}/rank$SLURM_PROCID\'\n'
    )
    script.chmod(0o755)
    job = _sh("sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1", f"--output={tmp_path}/out", str(script))
    job = job.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while _sh("squeue", "-h", "-j", job).strip():
        assert time.monotonic() < deadline, _sh("squeue", "-j", job)
        time.sleep(0.3)
    ranks = [(tmp_path / f"rank{r}").read_text().split() for r in range(2)]
    hosts, procs, addrs = zip(*ranks, strict=True)
    assert procs == ("0", "1") and len(set(hosts)) == 2 and all(h.startswith("node") for h in hosts), ranks
    assert len(set(addrs)) == 2 and all(a.startswith("10.77.0.") for a in addrs), ranks


RAY_CHECK = """
import json, socket, sys
import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init(log_to_driver=False)  # RAY_ADDRESS and the token from ray.env
pg = placement_group([{"oak_slot": 1}, {"oak_slot": 1}], strategy="STRICT_SPREAD")
assert pg.wait(60)

@ray.remote(num_cpus=0, resources={"oak_slot": 1})
def where():
    return socket.gethostname(), ray.util.get_node_ip_address()

refs = [where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)).remote() for i in range(2)]
print(json.dumps(ray.get(refs, timeout=60)))
"""


def test_ray_runs_a_placement_group_across_two_nodes(tmp_path: Path) -> None:
    """The cluster's Ray: a driver on this machine (the head's node) places a STRICT_SPREAD group of two
    ``oak_slot`` bundles; its tasks run on two nodes, each with its own hostname and address."""
    pytest.importorskip("ray")
    env_file = CLUSTER_DIR / "ray.env"
    if not env_file.is_file():
        pytest.skip("the local cluster runs without Ray (no ray command when it started)")
    env = dict(ENV)
    env.update(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    res = subprocess.run(
        [sys.executable, "-c", RAY_CHECK], capture_output=True, text=True, timeout=180, env=env, check=False
    )
    assert res.returncode == 0, res.stderr[-3000:]
    placed = json.loads(res.stdout.strip().splitlines()[-1])
    hosts, addrs = zip(*placed, strict=True)
    assert len(set(hosts)) == 2 and all(h.startswith("node") for h in hosts), placed
    assert len(set(addrs)) == 2 and all(a.startswith("10.77.0.") for a in addrs), placed


def test_oak_run_without_the_clusters_token_says_what_is_missing(tmp_path: Path) -> None:
    """``oak run --backend ray --address`` of the cluster (token authentication on) from an environment without
    its token: exit 2 within Ray's connection timeout, naming the variables to set, no traceback."""
    pytest.importorskip("ray")
    env_file = CLUSTER_DIR / "ray.env"
    if not env_file.is_file():
        pytest.skip("the local cluster runs without Ray (no ray command when it started)")
    address = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)["RAY_ADDRESS"]
    env = {k: v for k, v in ENV.items() if not k.startswith("RAY_")}
    jobs = tmp_path / "one.yaml"
    jobs.write_text(f"jobs:\n  - {{name: a, command: [{sys.executable}, -c, 'print(1)']}}\n")
    argv = [sys.executable, "-c", "from oak.cli.main import main; main()", "run", str(jobs), "--backend", "ray"]
    argv += ["--address", address, "--cpu-slots", "1", "--run-dir", str(tmp_path / "run")]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env, check=False)
    assert res.returncode == 2, res.stderr[-2000:]
    assert f"cannot connect to Ray at {address}" in res.stderr and "RAY_AUTH_TOKEN_PATH" in res.stderr
    assert "Traceback" not in res.stderr
