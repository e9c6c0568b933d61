"""Goodput learned as jobs run (``--goodput learned``): what the scheduler believes of each job's throughput.

Under ``goodput = "known"`` every policy sees every job's true goodput at every size from the start. Real
schedulers do not: ``oak serve`` fits each job's throughput model online from the step times it reports
(:mod:`oak.goodput.online`), starting from a prior, and offers a job at most twice the most GPUs it has been
measured on. :class:`Beliefs` holds that knowledge for every job of a run, per GPU type with a fitted model:

* **Bootstrap.** On arrival a job's step time at its smallest feasible size of each GPU type is measured (Sia's
  bootstrap profiling on each type). The prior on a type is, as in ``oak serve`` for a job without a catalog
  model, :func:`~oak.goodput.online.linear_scaling_prior` of the type's samples (near-linear scaling).
* **Observation.** Each (type, nodes, replicas) a job has run on adds one :class:`~oak.goodput.online.StepSample`
  (its synchronising-step time at the local batch it ran, with measurement noise drawn by the world) and the
  belief on that type is refitted with :func:`~oak.goodput.online.fit_online` over all of that type's samples.
  A size measured again adds nothing: the noise of a mean step time is correlated within an allocation
  (placement, stragglers), so more steps there would not make it more right.
* **Believed goodput.** The job's application profile with the believed models in place of the true ones goes
  through the same best-batch search as the truth (:meth:`oak.goodput.table.GoodputTable.choices_of`); types
  without a fitted model are projected from the believed model of the source type. Statistical efficiency
  (the gradient noise scale) is taken as known: Pollux and Sia measure it online, cheaply and accurately.
* **Machine independence.** Fitted parameters are rounded to :data:`PARAM_DIGITS` significant digits, so the
  last-bit differences of an optimiser run on another CPU's kernels do not move a belief (the fit's own error
  at 2 % noise is far larger).

The exploration cap that goes with learning (a job is offered only its smallest sizes before it has run, at
most twice the most GPUs it has run on after) is applied by :class:`oak.engine.model.ClusterModel`.
Pure state and arithmetic: the world (the simulator) produces the samples.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

import numpy as np

from oak.catalog.schema import AppProfile, GpuProfile
from oak.goodput.batch import BatchGrid
from oak.goodput.online import StepSample, fit_online, linear_scaling_prior
from oak.goodput.table import GoodputTable
from oak.goodput.throughput import ThroughputParams
from oak.model.snapshot import BoolArray, FloatArray, IntArray

#: Significant digits kept of each fitted parameter (see the module docstring).
PARAM_DIGITS = 7


def rounded(params: ThroughputParams) -> ThroughputParams:
    """``params`` with every value rounded to :data:`PARAM_DIGITS` significant digits."""
    return ThroughputParams(**{k: float(f"{v:.{PARAM_DIGITS}g}") for k, v in dataclasses.asdict(params).items()})


@functools.lru_cache(maxsize=1 << 16)
def learned_params(samples: tuple[StepSample, ...]) -> ThroughputParams:
    """The belief from ``samples`` (sorted): the linear-scaling prior refitted to them, rounded. Cached: the same
    measurements recur across the policies of a paired comparison (the noise is a function of the job and size)."""
    prior = linear_scaling_prior(samples)  # as oak serve: anchored on the fastest sample per local batch
    return rounded(fit_online(samples, prior).params)


@dataclasses.dataclass
class JobBelief:
    """One job's knowledge: its samples and believed model per GPU type, and its believed rows per epoch."""

    truth: AppProfile
    samples: dict[str, list[StepSample]] = dataclasses.field(default_factory=dict)
    params: dict[str, ThroughputParams] = dataclasses.field(default_factory=dict)
    seen: set[tuple[str, int, int]] = dataclasses.field(default_factory=set)
    profile: AppProfile | None = None
    grids: dict[str, BatchGrid] = dataclasses.field(default_factory=dict)
    rows: dict[int, tuple[FloatArray, FloatArray]] = dataclasses.field(default_factory=dict)
    fits: int = 0
    #: bootstrapped (even where no GPU type gave a sample: the job is not measured again each round)
    booted: bool = False
    #: has measured a step time while it ran (``Beliefs.observe``; a bootstrap's profiling sample is not one)
    measured: bool = False

    def believed_profile(self) -> AppProfile:
        if self.profile is None:
            gpus: dict[str, GpuProfile] = {
                t: dataclasses.replace(g, params=self.params[t]) if t in self.params else g
                for t, g in self.truth.gpus.items()
            }
            self.profile = dataclasses.replace(self.truth, gpus=gpus)
        return self.profile


class Beliefs:
    """The believed throughput models of every job of a run (``apps``: each job's true profile, in order)."""

    def __init__(self, table: GoodputTable, apps: list[AppProfile]) -> None:
        self.table = table
        self.jobs = [JobBelief(truth=a) for a in apps]

    def known(self, i: int) -> bool:
        """Whether job ``i`` has been bootstrapped."""
        return self.jobs[i].booted

    def bootstrap(self, i: int, samples: Mapping[str, StepSample]) -> None:
        """Job ``i``'s first measurement on each GPU type it has a model for (its smallest size there)."""
        b = self.jobs[i]
        b.booted = True
        for t, s in samples.items():
            b.samples[t] = [s]
            b.seen.add((t, s.nodes, s.replicas))
            self._fit(b, t)
        self._invalidate(b)

    def seen(self, i: int, gpu_type: str, nodes: int, replicas: int) -> bool:
        return (gpu_type, nodes, replicas) in self.jobs[i].seen

    def ran(self, i: int) -> None:
        """Job ``i`` ran at a size it had measured: it has measured step times (its work is known to a run's
        scheduler, :meth:`RunBeliefs.work_known`), and a size measured again refits nothing."""
        self.jobs[i].measured = True

    def observe(self, i: int, gpu_type: str, sample: StepSample) -> None:
        """Add a measurement of job ``i`` on ``gpu_type`` and refit its belief there."""
        b = self.jobs[i]
        b.measured = True
        b.samples.setdefault(gpu_type, []).append(sample)
        b.seen.add((gpu_type, sample.nodes, sample.replicas))
        self._fit(b, gpu_type)
        self._invalidate(b)

    def work_known(self, idx: IntArray) -> BoolArray | None:
        """(len(idx),) whether each job's length and speed rest on data (``RoundSnapshot.work_known``); None: all
        do (under ``--goodput learned`` a job starts from its application's catalog model and its known length)."""
        return None

    def rows(
        self, idx: IntArray, epochs: IntArray, fraction: FloatArray | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """Believed goodput and progress rate (uncalibrated) of jobs ``idx`` at ``epochs`` on every shape
        (``fraction``: their progress in [0, 1], for beliefs whose epochs are not the truth's)."""
        good = np.zeros((len(idx), self.table.size))
        rate = np.zeros((len(idx), self.table.size))
        for pos, (i, e) in enumerate(zip(idx.tolist(), epochs.tolist(), strict=True)):
            b = self.jobs[i]
            hit = b.rows.get(e)
            if hit is None:
                ch = self.table.choices_of(b.believed_profile(), e, b.grids)
                hit = (ch.goodput, ch.progress_rate)
                b.rows[e] = hit
            good[pos], rate[pos] = hit
        return good, rate

    @staticmethod
    def _fit(b: JobBelief, gpu_type: str) -> None:
        samples = tuple(sorted(b.samples[gpu_type], key=lambda s: (s.key, s.step_time_s, s.steps)))
        b.params[gpu_type] = learned_params(samples)
        b.fits += 1

    @staticmethod
    def _invalidate(b: JobBelief) -> None:
        b.profile = None
        b.grids = {}
        b.rows = {}


class RunBeliefs(Beliefs):
    """What a real run's scheduler knew of each job, job by job (``oak replay``): ``believed[i]`` given and never
    refitted (a packaged worker scored with its catalog application while it ran at its own, measured speed),
    or learned online where ``learn[i]`` (a command job's model fitted to the step times it has measured so
    far, as :class:`Beliefs` does for every job under ``--goodput learned``; the model applies the exploration
    cap to these jobs), or, neither, its truth.

    A believed application's progress is in its own units: the scheduler of the run placed the job at
    progress fraction f of the believed total, so its rows are taken at the believed application's epoch of f,
    and its progress rate is converted to the truth's units (× truth total / believed total), so that the
    remaining time a policy estimates is the one the run's scheduler estimated (its calibration too)."""

    def __init__(
        self,
        table: GoodputTable,
        apps: list[AppProfile],
        believed: list[AppProfile | None],
        learn: list[bool],
        totals: FloatArray,
    ) -> None:
        super().__init__(table, apps)
        self.believed = believed
        self.learn = learn
        # progress in the truth's units, and the truth's calibration undone (the snapshot divides by it)
        self.scale = [
            1.0 if b is None else float(totals[i]) / b.total_progress * apps[i].calibration / b.calibration
            for i, b in enumerate(believed)
        ]
        for b, given, learned in zip(self.jobs, believed, learn, strict=True):
            if not learned:
                b.booted = True
                b.profile = given if given is not None else b.truth

    def seen(self, i: int, gpu_type: str, nodes: int, replicas: int) -> bool:
        return not self.learn[i] or super().seen(i, gpu_type, nodes, replicas)  # only learned jobs measure

    def work_known(self, idx: IntArray) -> BoolArray | None:
        """A learned (command) job's length and speed are placeholders to the run's scheduler until it has
        reported step times from a run, as ``oak.runtime.learned.LearnedGoodput.length_known`` says of the runtime."""
        return np.array([not self.learn[i] or self.jobs[i].measured for i in idx.tolist()], dtype=bool)

    def rows(
        self, idx: IntArray, epochs: IntArray, fraction: FloatArray | None = None
    ) -> tuple[FloatArray, FloatArray]:
        good = np.zeros((len(idx), self.table.size))
        rate = np.zeros((len(idx), self.table.size))
        for pos, (i, e) in enumerate(zip(idx.tolist(), epochs.tolist(), strict=True)):
            b, given = self.jobs[i], self.believed[i]
            if given is not None:
                f = 0.0 if fraction is None else min(max(float(fraction[pos]), 0.0), 1.0)
                e = given.epoch_of(f * given.total_progress)
            hit = b.rows.get(e)
            if hit is None:
                ch = self.table.choices_of(b.believed_profile(), e, b.grids)
                hit = (ch.goodput, ch.progress_rate * self.scale[i])
                b.rows[e] = hit
            good[pos], rate[pos] = hit
        return good, rate
