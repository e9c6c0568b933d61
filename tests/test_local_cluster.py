"""``scripts/local-cluster``: a multi-node SLURM cluster on one machine, each node its own network namespace.

Skipped as a whole, with the reason, when the cluster does not run (it needs root; ``.ci/run`` starts it with
``scripts/local-cluster start --nodes 3``).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "local-cluster"
CLUSTER_DIR = Path(os.environ.get("OAK_CLUSTER_DIR", "/tmp/oak-local-cluster"))


def _why_not() -> str | None:
    try:
        res = subprocess.run([str(SCRIPT), "status"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"scripts/local-cluster status did not answer: {exc}"
    if res.returncode != 0:
        return f"the local multi-node cluster does not run ({(res.stdout + res.stderr).strip()})"
    return None


_REASON = _why_not()
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
