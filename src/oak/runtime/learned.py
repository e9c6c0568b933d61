"""Goodput learned online for command jobs (the job contract's users' own scripts; docs/jobs.md).

A command job's batch is its own (the scheduler cannot change it), so its goodput on an allocation is its
throughput at that global batch M: the Pollux/Sia throughput model (:mod:`oak.goodput.throughput`) fitted to
the step times the job reports (``oak.job.report``) at the allocations it has run
(:func:`oak.goodput.online.fit_online`), refitted as reports arrive. The prior is the catalog's model of the
job's ``application`` on the run's profile type when the jobs file names one; otherwise a linear-scaling prior
(:func:`oak.goodput.online.linear_scaling_prior`) and exploration of the next size up: the job is offered at
most twice the most devices it has been measured on (:func:`oak.goodput.online.exploration_limit`, AdaptDL's
2× cap), so that it is measured before it is trusted at sizes far from its data.

The fitted model enters the round's snapshot as a per-job catalog application ``job:NAME`` with a single batch
(M0 = M_max = M; statistical efficiency 1) and one epoch of ``total`` steps (the jobs file's target, the total
the job reported, or, when neither is known, twice the steps done so far rounded up to a power of two: a job
of unknown length is assumed to be about half done — it is scored by its elapsed time only).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from oak.catalog import Catalog
from oak.catalog.schema import AppProfile, GpuProfile, ValidationCurves
from oak.goodput.online import StepSample, StepTimeLog, exploration_limit, fit_online, linear_scaling_prior
from oak.goodput.throughput import ThroughputParams, throughput
from oak.runtime.jobs_file import RuntimeJob
from oak.runtime.store import JobRecord

#: A refit that moves the predicted throughput at some allocation by more than this (relative) rebuilds the
#: round's model; smaller moves are noise the next refit may undo.
REFIT_TOLERANCE = 0.05
#: Nominal prior before a job has reported any step time: 1 s per step at one device (the scale only affects
#: the remaining-time estimate; a job's goodput is compared across its own allocations).
NOMINAL_STEP_S = 1.0


def _unknown_total(step: int) -> int:
    return int(2 ** math.ceil(math.log2(max(2 * step, 2))))


class LearnedGoodput:
    """The learned models of a run's command jobs, their catalog entries and exploration limits."""

    def __init__(self, catalog: Catalog, profile_type: str) -> None:
        self.base = catalog
        self.profile_type = profile_type
        self._built: dict[str, tuple[np.ndarray, int, int]] = {}
        self._fits: dict[str, tuple[str, ThroughputParams]] = {}

    @staticmethod
    def app_name(job: RuntimeJob) -> str:
        return f"job:{job.name}" if job.is_command else job.application

    # ------------------------------------------------------------------ measurements
    @staticmethod
    def record(r: JobRecord, *, nodes: int, replicas: int, local_bsz: float, elapsed_s: float, steps: int) -> None:
        """Add a measured interval of ``steps`` steps taking ``elapsed_s`` at (nodes, replicas, local_bsz)."""
        log = StepTimeLog.from_dict(r.steplog) if r.steplog else StepTimeLog()
        log.add(nodes, replicas, local_bsz, elapsed_s, steps)
        r.steplog = log.to_dict()

    def prior(self, job: RuntimeJob, r: JobRecord | None) -> ThroughputParams:
        """The catalog's model of the named application, else the linear-scaling prior."""
        if job.application:
            app = self.base.app(job.application)
            gpu = app.gpus.get(self.profile_type) or next(iter(app.gpus.values()))
            return gpu.params
        samples = StepTimeLog.from_dict(r.steplog).samples() if r is not None and r.steplog else ()
        if samples:
            return linear_scaling_prior(samples)
        b = float(max(job.batch_size, 1))
        return ThroughputParams(
            alpha_c=0.1 * NOMINAL_STEP_S,
            beta_c=0.9 * NOMINAL_STEP_S / b,
            alpha_n=1e-3 * NOMINAL_STEP_S,
            beta_n=1e-4 * NOMINAL_STEP_S,
            alpha_r=1e-3 * NOMINAL_STEP_S,
            beta_r=1e-4 * NOMINAL_STEP_S,
            gamma=1.0,
        )

    def params(self, job: RuntimeJob, r: JobRecord | None) -> ThroughputParams:
        """The job's current model: the prior refitted to its measured step times (cached per log state: the
        service asks every tick, the log changes once per report)."""
        if r is None or not r.steplog:
            return self.prior(job, r)
        key = repr(sorted(r.steplog.items()))
        hit = self._fits.get(job.name)
        if hit is not None and hit[0] == key:
            return hit[1]
        prior = self.prior(job, r)
        samples = self.samples(r)
        params = fit_online(samples, prior).params if samples else prior
        self._fits[job.name] = (key, params)
        return params

    # ------------------------------------------------------------------ the model's inputs
    def max_gpus(self, job: RuntimeJob, r: JobRecord | None) -> int:
        """The job's upper bound this round: its own, capped at twice its most measured devices when it has
        no catalog prior (exploration of the next size up)."""
        if not job.is_command or job.application:
            return job.max_gpus
        measured = max((s.replicas for s in self.samples(r)), default=0)
        return max(job.min_gpus, exploration_limit(measured, job.max_gpus))

    def fraction(self, job: RuntimeJob, r: JobRecord) -> float:
        """Progress in [0, 1]."""
        return min(r.step / self.total(job, r), 1.0)

    @staticmethod
    def length_known(job: RuntimeJob, r: JobRecord | None) -> bool:
        """Whether the job's remaining time rests on data: a packaged worker's (target steps, catalog speed), or a
        command job's once its total steps are known and it has reported step times (before that its total and
        speed are placeholders: ``_unknown_total``, ``NOMINAL_STEP_S``)."""
        if not job.is_command:
            return True
        known = job.target_steps or (r.total_steps if r is not None else 0)
        return known > 0 and bool(LearnedGoodput.samples(r))

    @staticmethod
    def total(job: RuntimeJob, r: JobRecord | None) -> int:
        """Steps to completion as the model uses it (see the module)."""
        step = r.step if r is not None else 0
        known = job.target_steps or (r.total_steps if r is not None else 0)
        return known if known > 0 else _unknown_total(step)

    def catalog(self, jobs: Sequence[RuntimeJob], records: Sequence[JobRecord | None]) -> Catalog:
        """The base catalog plus one application per command job."""
        learned = {self.app_name(j): self._app(j, r) for j, r in zip(jobs, records, strict=True) if j.is_command}
        if not learned:
            return self.base
        return dataclasses.replace(self.base, apps={**self.base.apps, **learned})

    def _app(self, job: RuntimeJob, r: JobRecord | None) -> AppProfile:
        m = int(r.batch_size if r is not None and r.batch_size else job.batch_size)
        return learned_app(
            self.app_name(job),
            m,
            self.params(job, r),
            self.samples(r),
            float(self.total(job, r)),
            job.restart_penalty_s,
            self.profile_type,
        )

    @staticmethod
    def samples(r: JobRecord | None) -> tuple[StepSample, ...]:
        if r is None or not r.steplog:
            return ()
        return tuple(StepTimeLog.from_dict(r.steplog).samples())

    # ------------------------------------------------------------------ when to rebuild
    def _signature(self, job: RuntimeJob, r: JobRecord | None) -> tuple[np.ndarray, int, int]:
        m = float(r.batch_size if r is not None and r.batch_size else job.batch_size)
        reps = np.arange(1, job.max_gpus + 1, dtype=np.float64)
        x = throughput(self.params(job, r), np.ones_like(reps), reps, m / reps, np.zeros_like(reps))
        return x, self.total(job, r), self.max_gpus(job, r)

    def built(self, jobs: Sequence[RuntimeJob], records: Sequence[JobRecord | None]) -> None:
        """Remember what the model was built with."""
        self._built = {j.name: self._signature(j, r) for j, r in zip(jobs, records, strict=True) if j.is_command}

    def changed(self, jobs: Sequence[RuntimeJob], records: Sequence[JobRecord]) -> bool:
        """Whether a command job's model moved beyond ``REFIT_TOLERANCE``, or its total or bound changed."""
        for j, r in zip(jobs, records, strict=True):
            if not j.is_command or r.over or not r.arrived:  # a job not yet arrived has not measured anything
                continue
            old = self._built.get(j.name)
            x, total, cap = self._signature(j, r)
            if old is None or total != old[1] or cap != old[2]:
                return True
            if np.any(np.abs(x / old[0] - 1.0) > REFIT_TOLERANCE):
                return True
        return False


def learned_app(
    name: str,
    batch: int,
    params: ThroughputParams,
    samples: Sequence[StepSample],
    total: float,
    restart_penalty_s: float,
    profile_type: str,
) -> AppProfile:
    """A catalog application of one job's learned model: its fixed global batch ``batch`` (statistical
    efficiency 1), throughput ``params`` on ``profile_type``, and one epoch of ``total`` progress."""
    gpu = GpuProfile(
        gpu_type=profile_type,
        params=params,
        b_min=1,
        b_max=batch,
        fit_rmsle_step=0.0,
        fit_rmsle_acc=0.0,
        n_observations=len(samples),
        max_nodes_profiled=max((s.nodes for s in samples), default=0),
        max_replicas_profiled=max((s.replicas for s in samples), default=0),
    )
    return AppProfile(
        name=name,
        m0=batch,
        m_max=batch,
        max_epochs=1,
        calibration=1.0,
        restart_penalty_s=restart_penalty_s,
        sia_restart_cost_s=restart_penalty_s,
        gpus={profile_type: gpu},
        validation=ValidationCurves(batches=(batch,), epoch_progress=(total,), grad_sqr=((1.0,),), grad_var=((1.0,),)),
    )
