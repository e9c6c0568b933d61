"""A run over a cluster's nodes (``--cluster-from``): the node list, per-node launches, nodes that go down.

The scheduler is driven on a fake clock with a scripted executor that lists nodes (``NodeListing``), so a node
that goes down, one a launch finds unreachable, and one that comes back are checked in milliseconds; the same
rules on a real SLURM and Ray cluster are in ``tests/test_multi_node.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from oak.errors import OakInputError
from oak.policies import make_policy
from oak.runtime.executor import Launch
from oak.runtime.jobs_file import parse_jobs
from oak.runtime.nodes import (
    NodeListing,
    NodeLost,
    RuntimeNode,
    check_nodes,
    hosts_of,
    node_index,
    nodes_cluster,
    take_devices,
)
from oak.runtime.scheduler import NODE_HOLD_S, RuntimeOptions, RuntimeScheduler, runtime_cluster
from support.scripted import Fate, ScriptedExecutor

NODES = (RuntimeNode("n1", "10.0.0.1", 2), RuntimeNode("n2", "10.0.0.2", 2), RuntimeNode("n3", "10.0.0.3", 2))
WIDE = "jobs:\n  - {name: w, model: tiny, target_steps: 100, min_gpus: 4, max_gpus: 4, batch_size: 8, ckpt_every: 10}\n"


def test_a_run_owns_whole_nodes_in_order_the_last_one_cut() -> None:
    assert take_devices(NODES, None) == NODES
    assert take_devices(NODES, 5) == (*NODES[:2], RuntimeNode("n3", "10.0.0.3", 1))
    assert take_devices(NODES, 2) == NODES[:1]
    with pytest.raises(OakInputError, match="7 devices asked for, but the cluster's nodes hold 6"):
        take_devices(NODES, 7)
    with pytest.raises(OakInputError, match="listed twice"):
        check_nodes([NODES[0], NODES[0]])
    with pytest.raises(OakInputError, match="no node"):
        check_nodes([])
    with pytest.raises(OakInputError, match="slots"):
        RuntimeNode("n", "a", 0)
    with pytest.raises(OakInputError, match="commas"):
        RuntimeNode("a,b", "a", 1)


def test_device_ids_are_node_major_as_the_engine_places_them() -> None:
    cluster = nodes_cluster(NODES, "aws", "c")
    assert [n.gpus for n in cluster.nodes] == [2, 2, 2] and cluster.first_gpu == (0, 2, 4)
    assert [node_index(NODES, d) for d in range(6)] == [0, 0, 1, 1, 2, 2]
    assert [h.name for h in hosts_of(NODES, (3, 4, 5, 2))] == ["n2", "n3", "n3", "n2"]
    with pytest.raises(OakInputError, match="beyond"):
        node_index(NODES, 6)
    opts = RuntimeOptions(devices=6, nodes=NODES)
    assert runtime_cluster(opts).nodes == cluster.nodes
    with pytest.raises(OakInputError, match="6 slots"):
        RuntimeOptions(devices=4, nodes=NODES)


@dataclass
class NodesExecutor(ScriptedExecutor):
    """A scripted executor on a cluster of ``NODES``: ``outage`` (seconds after the first launch) takes the
    node of the first launch's last rank down; ``refuse``: a launch on one of these nodes raises NodeLost
    (once per node), as a probe of a node the cluster still lists up."""

    outage: tuple[float, float] | None = None
    refuse: set[str] = field(default_factory=set)
    hosts: list[tuple[str, ...]] = field(default_factory=list)
    victim: str = ""
    first_at: float = 0.0

    def nodes(self, *, fresh: bool = False) -> list[RuntimeNode]:
        t = self.clock.time() - self.first_at
        out = self.outage is not None and self.hosts and self.outage[0] <= t < self.outage[1]
        return [RuntimeNode(n.name, n.addr, n.slots, not (out and n.name == self.victim)) for n in NODES]

    def launch(self, item: Launch) -> None:
        names = tuple(h.name for h in item.hosts)
        self.hosts.append(names)
        if len(self.hosts) == 1:
            self.victim, self.first_at = names[-1], self.clock.time()
        for name in dict.fromkeys(names):
            if name in self.refuse:
                self.refuse.discard(name)
                raise NodeLost(name, "its daemon does not answer (probe)")
        super().launch(item)


def _run(tmp_path: Path, ex: NodesExecutor, limit_s: float) -> RuntimeScheduler:
    assert isinstance(ex, NodeListing)
    opts = RuntimeOptions(devices=6, nodes=NODES, round_s=60.0, tick_s=1.0, time_limit_s=limit_s)
    sched = RuntimeScheduler(
        parse_jobs(WIDE, "wide.yaml"), make_policy("oak"), tmp_path / "run", opts, ex, clock=ex.clock
    )
    sched.run()
    return sched


def test_a_node_that_goes_down_fails_its_jobs_holds_no_devices_and_comes_back(tmp_path: Path) -> None:
    """The job spans two nodes (4 ranks, 2 slots each); 50 s in, its last rank's node goes down for 300 s: the
    job is killed and failed at the next look (at most ``NODE_POLL_S`` later), placed again at once on the two
    other nodes, the node's failure is counted, and once it is listed up again it holds devices again."""
    ex = NodesExecutor([Fate(end="running", reach=10)], outage=(50.0, 350.0))
    sched = _run(tmp_path, ex, 600.0)
    r = sched.records[0]
    assert len(set(ex.hosts[0])) == 2, ex.hosts
    assert len(ex.hosts) == 2 and ex.victim not in ex.hosts[1], (ex.victim, ex.hosts)
    relaunch = ex.launches[1][0] - ex.first_at
    assert 50.0 <= relaunch <= 50.0 + 2.0 + 1.0 + 1.0, relaunch  # the look every 2 s, then the next tick
    assert r.failures == 1 and r.restarts == 1
    k = [n.name for n in NODES].index(ex.victim)
    assert sched.node_failures.tolist() == [1 if i == k else 0 for i in range(3)]
    assert not sched.node_down.any(), "listed up again: it holds devices again"
    assert any(f"node {ex.victim} went down" in h[2] for h in r.history), r.history
    assert ex.kills >= 1


def test_a_node_a_launch_finds_unreachable_is_held_down_without_failing_the_job(tmp_path: Path) -> None:
    """The first launch's probe finds a planned node unreachable though the cluster lists it up: no failure
    of the job's, the node is held down, the next round places the job on the other nodes; after
    ``NODE_HOLD_S`` the listing (up) decides again."""
    first: list[str] = []  # the first launch's nodes are known once it is planned: its rank 0's node is refused

    class Probe(NodesExecutor):
        def launch(self, item: Launch) -> None:
            if not first:
                first.append(item.hosts[0].name)
                self.refuse.add(item.hosts[0].name)
            super().launch(item)

    ex = Probe([Fate(end="running", reach=10)])
    sched = _run(tmp_path, ex, 300.0)
    r = sched.records[0]
    assert len(ex.hosts) == 2 and first[0] not in ex.hosts[1], ex.hosts
    assert r.failures == 0 and r.restarts == 0 and r.fail_streak == 0, "a lost node is not the job's failure"
    assert ex.launches[0][0] - ex.first_at <= 2.0  # the next tick's round, which the deferral asked for
    k = [n.name for n in NODES].index(first[0])
    assert sched.node_failures[k] == 1
    assert NODE_HOLD_S < 300.0 and not sched.node_down.any(), "held only until the listing decides again"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--cluster-from", "k8s"], "--cluster-from 'k8s': expected slurm or ray"),
        (["--cluster-from", "slurm"], "use it with --backend slurm"),
        (["--backend", "ray", "--cluster-from", "slurm"], "use it with --backend slurm"),
    ],
)
def test_cluster_from_is_checked_before_anything_starts(tmp_path: Path, extra: list[str], message: str) -> None:
    from support.cli import oak

    jobs = tmp_path / "j.yaml"
    jobs.write_text("jobs:\n  - {name: a, command: [python, -c, 'pass']}\n")
    out = oak("run", str(jobs), "--cpu-slots", "2", "--run-dir", str(tmp_path / "run"), *extra)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
