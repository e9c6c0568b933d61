"""A run over a cluster's nodes (``--cluster-from``): the node list, per-node launches, nodes that go down.

The scheduler is driven on a fake clock with a scripted executor that lists nodes (``NodeListing``), so a node
that goes down, one a launch finds unreachable, and one that comes back are checked in milliseconds; the same
rules on a real SLURM and Ray cluster are in ``tests/test_multi_node.py``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

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


@dataclass
class StoryExecutor(ScriptedExecutor):
    """tests/test_multi_node.py's story on a fake clock, with its timings chosen by the test. ``lost_at`` s after
    the first launch its last rank's node is lost: its ranks are seen failing ``crash1`` s later (None: never; the
    others block in a collective, so rank 0's status stops updating), the cluster lists it down ``lag1`` s later
    (never if it is back, at ``revive``, by then: the stale status decides). At ``cut_at`` the
    second launch's rank 0's node is cut off (``crash2``, ``lag2`` likewise) until ``heal``. A launch onto a node
    inside an outage finds it unreachable (``NodeLost``), as the backends' probe does, whatever the listing says.
    Times are seconds after the first launch."""

    lost_at: float = 20.0
    lag1: float = 0.0
    crash1: float | None = 0.0
    revive: float = 80.0
    cut_at: float = 120.0
    lag2: float = 0.0
    crash2: float | None = 0.0
    heal: float = 400.0
    hosts: list[tuple[str, ...]] = field(default_factory=list)
    outages: list[tuple[str, float, float, float]] = field(default_factory=list)
    t0: float | None = None

    def _t(self) -> float:
        return self.clock.time() - (self.clock.time() if self.t0 is None else self.t0)

    def nodes(self, *, fresh: bool = False) -> list[RuntimeNode]:
        t = self._t()
        down = {name for name, _, end, listed in self.outages if listed <= t < end}
        return [RuntimeNode(n.name, n.addr, n.slots, n.name not in down) for n in NODES]

    def launch(self, item: Launch) -> None:
        names = tuple(h.name for h in item.hosts)
        t = self._t()
        for name, start, end, _ in self.outages:
            if name in names and start <= t < end:
                raise NodeLost(name, "its daemon does not answer (probe)")
        k = len(self.hosts)
        self.hosts.append(names)
        never = 10_000.0
        if k == 0:
            self.t0 = self.clock.time()
            self.outages.append((names[-1], self.lost_at, self.revive, self.lost_at + self.lag1))
            crash = self.lost_at + (never if self.crash1 is None else self.crash1)
            # ranks never seen failing: the surviving ones block in a collective, so rank 0's status goes stale
            self.fates = [Fate(end="failed", after_s=crash, exit_codes=(-9, 1), reach=10, freeze_after_s=self.lost_at)]
        elif k == 1:
            self.outages.append((names[0], self.cut_at, self.heal, self.cut_at + self.lag2))
            crash = self.cut_at + (never if self.crash2 is None else self.crash2) - t
            cut = max(self.cut_at - t, 0.0)
            self.fates = [
                Fate(end="failed", after_s=max(crash, 0.0), exit_codes=(1, 1, 1, 1), reach=20, freeze_after_s=cut)
            ]
        else:
            self.fates = [Fate(end="done", after_s=60.0, reach=100)]
        super().launch(item)


CRASH = st.sampled_from([None, 0.0, 0.2, 1.0, 3.0, 10.0])
LAG = st.sampled_from([0.0, 0.2, 1.0, 3.0, 10.0, 30.0])


@pytest.mark.parametrize("text", [WIDE, "jobs:\n  - {name: w, command: [python3, x.py], min_gpus: 4, max_gpus: 4}\n"])
@given(crash1=CRASH, lag1=LAG, crash2=CRASH, lag2=LAG, back=st.sampled_from([30.0, 60.0, 90.0]))
@example(crash1=None, lag1=30.0, crash2=None, lag2=0.0, back=30.0)  # back before listed down: its status goes stale
@settings(max_examples=10, deadline=None)
def test_a_lost_node_and_a_partition_cost_one_failure_and_one_restart_each_in_any_order(
    text: str, crash1: float | None, lag1: float, crash2: float | None, lag2: float, back: float
) -> None:
    """Whatever order the job's ranks failing, the cluster's listing and a launch's probe see a lost node and a
    partition in, each costs the job one failure and one restart — no move of the scheduler's own, no failure
    uncounted — and it completes on the nodes left (a packaged worker and a command job alike)."""
    ex = StoryExecutor([Fate()], crash1=crash1, lag1=lag1, crash2=crash2, lag2=lag2, revive=20.0 + back)
    ex.cut_at = ex.revive + 40.0
    opts = RuntimeOptions(devices=6, nodes=NODES, round_s=5.0, tick_s=0.2, time_limit_s=2000.0)
    with tempfile.TemporaryDirectory() as tmp:
        sched = RuntimeScheduler(
            parse_jobs(text, "w.yaml"), make_policy("oak"), Path(tmp) / "run", opts, ex, clock=ex.clock
        )
        sched.run()
    r = sched.records[0]
    assert r.done and r.failures == 2 and r.restarts == 2, (r.failures, r.restarts, ex.hosts, r.history)
    (lost, _, back_at, _), (cut, _, heal_at, _) = ex.outages
    assert ex.t0 is not None
    relaunch, third = (when - ex.t0 for when, _ in ex.launches[1:3])
    # on the nodes left (a node back by then, as a stall that outlasted its outage finds it, may be taken again)
    assert (lost not in ex.hosts[1] or relaunch >= back_at) and (cut not in ex.hosts[2] or third >= heal_at), ex.hosts


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
