"""Failure models: which failure events happen, independent of the policy, so comparisons stay paired.

A failure model answers, for a seed, the jobs' identities and grid interval k, whether and when each job
that holds GPUs fails in that interval. Every model here draws from one counter-based stream
(:mod:`oak.failures.rng`): for job j in interval k, a uniform u(seed, j, k) decides *whether* (u < the
model's probability for what the job holds) and v(seed, j, k) *when* (at (k + v)·round_s). The draws never
depend on what the policy did, so every policy meets the same failures where it holds the same GPUs. The
simulator and the real runtime's injector (``oak run --failure-rate``) ask the same model.

* :class:`PerJobBernoulli` (``failure_scope="job"``): a job holding GPUs fails with probability λ per round.
* :class:`PerGpuBernoulli` (``failure_scope="gpu"``): each of its G GPUs does, so 1 − (1 − λ)^G.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from oak.errors import OakInputError
from oak.failures import rng

FloatArray = npt.NDArray[np.float64]

#: Grid intervals whose uniforms are drawn in one vectorised block.
RNG_BLOCK = 64


class FailureModel(Protocol):
    """Which jobs fail in a grid interval: ``probability(gpus)`` for jobs holding ``gpus`` GPUs (0 for none)
    at rate ``rate``; the draws come from a :class:`FailureStream`."""

    @property
    def name(self) -> str: ...

    @property
    def rate(self) -> float: ...

    def probability(self, gpus: npt.NDArray[np.int64]) -> FloatArray | float: ...


@dataclass(frozen=True)
class PerJobBernoulli:
    """A job that holds GPUs fails with probability ``rate`` in each grid interval."""

    rate: float
    name: ClassVar[str] = "job"

    def probability(self, gpus: npt.NDArray[np.int64]) -> FloatArray | float:
        return self.rate


@dataclass(frozen=True)
class PerGpuBernoulli:
    """Each GPU a job holds fails with probability ``rate`` per interval: the job fails with 1 − (1 − rate)^G."""

    rate: float
    name: ClassVar[str] = "gpu"

    def probability(self, gpus: npt.NDArray[np.int64]) -> FloatArray | float:
        return np.asarray(1.0 - (1.0 - self.rate) ** gpus, dtype=np.float64)


MODELS: dict[str, type[PerJobBernoulli] | type[PerGpuBernoulli]] = {
    PerJobBernoulli.name: PerJobBernoulli,
    PerGpuBernoulli.name: PerGpuBernoulli,
}


def failure_model(scope: str, rate: float) -> FailureModel:
    """The registered model for ``scope`` ("job" or "gpu") at ``rate``."""
    cls = MODELS.get(scope)
    if cls is None:
        raise OakInputError(f"failure scope {scope!r}: expected one of {', '.join(MODELS)}")
    return cls(rate)


@dataclass
class FailureStream:
    """The policy-independent draws of one run: per grid interval k, ``u`` (whether) and the failure times
    ``(k + v)·round_s`` of every job (keys from :func:`oak.failures.rng.job_key`), drawn ``RNG_BLOCK``
    intervals at a time (row k of a block equals the single-interval draw bit for bit)."""

    seed: int
    keys: npt.NDArray[np.uint64]
    round_s: float
    _first: int = field(default=-(2**62), init=False)
    _u: FloatArray = field(default_factory=lambda: np.ones((0, 0)), init=False)
    _v: FloatArray = field(default_factory=lambda: np.ones((0, 0)), init=False)

    def interval(self, k: int) -> tuple[FloatArray, FloatArray]:
        """(u, failure times) of every job in grid interval ``k``."""
        if not self._first <= k < self._first + RNG_BLOCK:
            self._first = k
            self._u = rng.uniforms_block(self.seed, rng.STREAM_FAILURE, self.keys, k, RNG_BLOCK)
            self._v = rng.uniforms_block(self.seed, rng.STREAM_FAILURE_OFFSET, self.keys, k, RNG_BLOCK)
        return self._u[k - self._first], (k + self._v[k - self._first]) * self.round_s


__all__ = [
    "MODELS",
    "FailureModel",
    "FailureStream",
    "PerGpuBernoulli",
    "PerJobBernoulli",
    "failure_model",
    "rng",
]
