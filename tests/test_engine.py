"""The round engine both worlds drive: phases, intents, failure models, and the import boundary."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from oak.engine import ClusterModel, Intent, JobsState, Phase, step
from oak.failures import FailureStream, PerGpuBernoulli, PerJobBernoulli, failure_model, rng
from oak.model.snapshot import Allocation, RoundSnapshot
from oak.policies import REGISTRY, PolicyBase, make_policy
from oak.runtime.executor import Executor, LocalExecutor
from oak.workloads import load_workload

SRC = Path(__file__).resolve().parents[1] / "src" / "oak"


def test_runtime_does_not_import_the_simulator() -> None:
    """Statically (no ``oak.sim`` import in any runtime module) and at run time (importing every runtime
    module, the Ray executor included, loads no ``oak.sim`` module)."""
    for path in sorted((SRC / "runtime").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            assert not any(n == "oak.sim" or n.startswith("oak.sim.") for n in names), (path.name, names)
    code = (
        "import sys, oak.runtime.scheduler, oak.runtime.executor, oak.runtime.launch, oak.runtime.store, "
        "oak.runtime.jobs_file, oak.runtime.ray_executor; "
        "print(sorted(m for m in sys.modules if m == 'oak.sim' or m.startswith('oak.sim.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout


def test_phases_follow_the_ledger() -> None:
    st = JobsState.initial(np.array([0.0, 0.0, 0.0, 0.0, 0.0, 50.0]))
    st.arrived[:5] = True
    st.shape[1:4] = 0
    st.restore_left[1] = 5.0
    st.ghost[3] = True
    st.done[4] = True
    assert st.phases().tolist() == [
        Phase.WAITING,
        Phase.RESTORING,
        Phase.RUNNING,
        Phase.STALLED,
        Phase.DONE,
        Phase.PENDING,
    ]


class _Nothing(PolicyBase):
    """Allocates nothing: every job that holds GPUs must be stopped."""

    name = "nothing"

    def decide(self, snap: RoundSnapshot) -> Allocation:
        return Allocation(config=np.full(len(snap.job_names), -1, dtype=np.int64))


def test_step_returns_intents_that_match_the_allocation() -> None:
    """First round: every placed job STARTs; stepping again from the enacted ledger KEEPs them; a job whose
    GPUs differ from the plan's RESTARTs; a policy that allocates nothing STOPs every placed job."""
    model = ClusterModel(load_workload("small"))
    st = JobsState.initial(np.array([j.submit_time_s for j in model.workload.jobs]))
    st.arrived[:] = True
    active = np.arange(model.n)
    policy = make_policy("goodput")
    plan = step(model, st, 0.0, active, policy)
    started = [it for it in plan.intents if it.intent is Intent.START]
    assert started and all(it.intent in (Intent.START, Intent.KEEP) for it in plan.intents)
    assert {it.job for it in started} == {int(i) for i in np.flatnonzero(np.asarray(plan.allocation.config) >= 0)}
    for it in started:  # enact
        st.shape[it.job], st.config[it.job], st.gpus[it.job] = it.shape, it.config, it.gpus
    again = step(model, st, 60.0, active, policy)
    assert all(it.intent is Intent.KEEP for it in again.intents)
    moved = started[0].job
    planned_shape, planned_config = st.shape[moved], st.config[moved]
    other = next(c for c in range(len(model.configs)) if c != planned_config)  # pretend it runs on another one
    st.shape[moved], st.config[moved] = model.config_shape[other], other
    kinds = {it.job: it.intent for it in step(model, st, 120.0, active, policy).intents}  # goodput ignores current
    assert kinds[moved] is Intent.RESTART
    st.shape[moved], st.config[moved] = planned_shape, planned_config
    stop = step(model, st, 180.0, active, _Nothing())
    assert {it.job for it in stop.intents if it.intent is Intent.STOP} == {it.job for it in started}
    assert all(it.intent is Intent.KEEP for it in stop.intents if it.job not in {s.job for s in started})


def test_a_pinned_job_keeps_its_devices_whatever_the_policy() -> None:
    """A job the world pins (a runtime job asked to stop that has not exited) KEEPs its configuration and GPUs
    even under a policy that allocates nothing, and no other job is placed on its GPUs."""
    model = ClusterModel(load_workload("small"))
    st = JobsState.initial(np.array([j.submit_time_s for j in model.workload.jobs]))
    st.arrived[:] = True
    active = np.arange(model.n)
    first = step(model, st, 0.0, active, make_policy("goodput"))
    started = [it for it in first.intents if it.intent is Intent.START]
    for it in started:
        st.shape[it.job], st.config[it.job], st.gpus[it.job] = it.shape, it.config, it.gpus
    pinned = started[0]
    st.pinned[pinned.job] = True
    plan = step(model, st, 60.0, active, _Nothing())
    kinds = {it.job: it.intent for it in plan.intents}
    assert kinds[pinned.job] is Intent.KEEP
    assert all(kinds[it.job] is Intent.STOP for it in started[1:])
    again = step(model, st, 120.0, active, make_policy("goodput"))
    others = {g for it in again.intents if it.job != pinned.job for g in it.gpus}
    assert not others & set(pinned.gpus)
    assert {it.job: it.intent for it in again.intents}[pinned.job] is Intent.KEEP


def test_failure_models_and_stream() -> None:
    keys = np.array([rng.job_key(n) for n in ("a", "b", "c")], dtype=np.uint64)
    stream = FailureStream(7, keys, 60.0)
    for k in (0, 5, 63, 64, 200):
        u, at = stream.interval(k)
        assert np.array_equal(u, rng.uniforms(7, rng.STREAM_FAILURE, keys, k))  # block rows = single draws
        v = rng.uniforms(7, rng.STREAM_FAILURE_OFFSET, keys, k)
        assert np.array_equal(at, (k + v) * 60.0)
    gpus = np.array([0, 1, 4], dtype=np.int64)
    assert PerJobBernoulli(0.1).probability(gpus) == 0.1
    assert np.allclose(PerGpuBernoulli(0.1).probability(gpus), [0.0, 0.1, 1 - 0.9**4], rtol=0, atol=1e-15)
    assert isinstance(failure_model("gpu", 0.2), PerGpuBernoulli)
    with pytest.raises(Exception, match="failure scope 'rack'"):
        failure_model("rack", 0.1)


def _protocol_members(proto: type) -> set[str]:
    return {n for n, v in vars(proto).items() if not n.startswith("_") and (callable(v) or isinstance(v, property))}


@pytest.mark.parametrize("impl", ["local", "ray"])
def test_every_executor_implements_every_declared_method(impl: str) -> None:
    """Optuna-style: one test over every implementation; the protocol declares every method the scheduler calls."""
    if impl == "ray":
        pytest.importorskip("ray")
        from oak.runtime.ray_executor import RayExecutor

        cls: type = RayExecutor
    else:
        cls = LocalExecutor
    members = _protocol_members(Executor)
    assert {
        "launch",
        "state",
        "status",
        "pids",
        "exit_codes",
        "unreaped",
        "request_stop",
        "stop",
        "kill",
        "reconcile",
        "shutdown",
    } <= members
    for name in members:
        assert callable(getattr(cls, name, None)), f"{cls.__name__} lacks {name}"
        want = list(inspect.signature(getattr(Executor, name)).parameters)
        got = list(inspect.signature(getattr(cls, name)).parameters)
        assert got[: len(want)] == want, (cls.__name__, name, got, want)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_registered_policy_declares_its_capabilities(name: str) -> None:
    """One registry: each entry builds a policy of its own name that declares both capabilities as booleans,
    has a label and a relative cost, and is stochastic exactly when it takes a seed."""
    spec = REGISTRY[name]
    policy = spec.make(seed=0, solver="auto")
    assert policy.name == name
    assert isinstance(policy.reads_clock, bool) and isinstance(policy.needs_node_goodput, bool)
    assert spec.label and spec.description and spec.cost > 0
    assert spec.stochastic == (name in ("pollux", "hybrid-oak"))
    assert policy.needs_node_goodput == (name == "pollux")
