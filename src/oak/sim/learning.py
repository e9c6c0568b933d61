"""The simulated world's side of learned goodput (``--goodput learned``): the step times a job measures.

A job running on a shape measures its synchronising-step time there — the true model's T_iter(N, R, b, s = 0)
at the local batch b it runs (the true best batch of its epoch) — times log-normal noise of
:data:`NOISE_SIGMA` (the noise of a mean step time, as ``tests/test_online_fit.py`` uses). The noise is a
pure function of (seed, job, GPU type, nodes, replicas): the same measurement for every policy (paired), drawn
once per size (it is correlated within an allocation). The normal deviate is an Irwin–Hall sum of twelve
counter-based uniforms minus six — plain additions, the same on every CPU — and the factor exp(σ·z) is rounded
to :data:`FACTOR_DIGITS` significant digits, so another CPU's last-bit ``exp`` does not move it.
"""

from __future__ import annotations

import math

import numpy as np

from oak.engine.beliefs import Beliefs
from oak.engine.ledger import JobsState
from oak.engine.model import ClusterModel
from oak.failures import rng
from oak.goodput.online import StepSample
from oak.goodput.throughput import iteration_time

#: Log-normal σ of a measured mean step time.
NOISE_SIGMA = 0.02
#: Significant digits of the noise factor.
FACTOR_DIGITS = 9


def noise_factor(seed: int, key: int, counter: int) -> float:
    """exp(σ·z), z ≈ N(0, 1) (Irwin–Hall of 12), a pure function of (seed, job key, counter)."""
    u = rng.uniforms_block(seed, rng.STREAM_STEP_NOISE, [key], 12 * counter, 12)[:, 0]
    z = 0.0
    for v in u.tolist():  # a fixed order of plain additions
        z += v
    return float(f"{math.exp(NOISE_SIGMA * (z - 6.0)):.{FACTOR_DIGITS}g}")


def measured(model: ClusterModel, i: int, shape: int, epoch: int, seed: int) -> StepSample | None:
    """What job ``i`` measures running on ``shape`` at ``epoch`` (None: no fitted model of its type, or the shape
    cannot run it)."""
    app = model.apps[i]
    ti = int(model.shape_type[shape])
    gpu = app.gpus.get(model.cluster.gpu_types[ti])
    choice = model.table.choices(app.name, epoch)
    if gpu is None or choice.goodput[shape] <= 0:
        return None
    n, r, b = int(model.shape_nodes[shape]), int(model.shape_replicas[shape]), int(choice.local_bsz[shape])
    true_s = float(iteration_time(gpu.params, n, r, float(b), 0))
    factor = noise_factor(seed, int(model.keys[i]), (ti * 256 + n) * 256 + r)
    return StepSample(nodes=n, replicas=r, local_bsz=float(b), step_time_s=true_s * factor)


def bootstrap(model: ClusterModel, beliefs: Beliefs, i: int, seed: int) -> None:
    """Job ``i``'s first measurement on every GPU type of the cluster it has a model for: its smallest size there
    within its bounds (fewest GPUs, then fewest nodes)."""
    app = model.apps[i]
    choice = model.table.choices(app.name, 0)
    samples: dict[str, StepSample] = {}
    for ti, t in enumerate(model.cluster.gpu_types):
        if t not in app.gpus:
            continue
        ok = (
            (model.shape_type == ti)
            & (choice.goodput > 0)
            & (model.shape_replicas >= model.min_gpus[i])
            & (model.shape_replicas <= model.max_gpus[i])
        )
        if not ok.any():
            continue
        cand = np.flatnonzero(ok)
        s = int(cand[np.lexsort((model.shape_nodes[cand], model.shape_replicas[cand]))[0]])
        sample = measured(model, i, s, 0, seed)
        if sample is not None:
            samples[t] = sample
    beliefs.bootstrap(i, samples)


def observe(model: ClusterModel, st: JobsState, active: np.ndarray, seed: int) -> None:
    """Before a round: bootstrap newly arrived jobs, and add a sample for each job that has made progress on a
    size it had not measured."""
    beliefs = st.beliefs
    assert beliefs is not None
    for i in active.tolist():
        if not beliefs.known(i):
            bootstrap(model, beliefs, i, seed)
    # jobs that made progress on their shape since they were (re)started: one vectorised filter per round
    ran = active[(st.shape[active] >= 0) & ~st.ghost[active] & (st.restore_left[active] <= 0)]
    ran = ran[st.t_progress[ran] > st.ckpt_tprog[ran]]
    for i in ran.tolist():
        s = int(st.shape[i])
        t = model.cluster.gpu_types[int(model.shape_type[s])]
        if beliefs.seen(i, t, int(model.shape_nodes[s]), int(model.shape_replicas[s])):
            beliefs.ran(i)
            continue
        sample = measured(model, i, s, int(st.epoch[i]), seed)
        if sample is not None:
            beliefs.observe(i, t, sample)
