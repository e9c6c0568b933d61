"""Per-job and per-run metrics, and their JSON form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

CONFIDENCE = 0.95
"""The confidence of every interval OAK reports (``oak compare``'s ±, ``oak reproduce``'s report)."""


def ci_half_width(sd: Any, n: Any) -> Any:
    """Half-width of the 95 % Student-t interval of a mean from its sample σ (ddof = 1) and n; NaN for n < 2.
    Element-wise on arrays (a float for scalars)."""
    from scipy import stats

    n_arr = np.asarray(n, dtype=float)
    sd_arr = np.asarray(sd, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        dof = np.where(n_arr >= 2, n_arr - 1, 1.0)
        half = stats.t.ppf(0.5 + CONFIDENCE / 2, dof) * sd_arr / np.sqrt(np.where(n_arr >= 1, n_arr, 1.0))
    out = np.where(n_arr >= 2, half, np.nan)
    return out if out.ndim else float(out)


@dataclass(frozen=True)
class JobResult:
    """One job's outcome; times in seconds. jct_s is None for a job unfinished at the horizon."""

    name: str
    application: str
    submit_s: float
    jct_s: float | None
    restarts: int
    failures: int
    t_progress_s: float
    t_ckpt_s: float
    t_queue_s: float
    gpu_s_used: float
    gpu_s_lost: float
    gpu_s_ckpt: float = 0.0
    """GPU-seconds spent writing periodic checkpoints (``checkpoint_policy`` other than "implicit")."""
    gpu_s_lost_work: float = 0.0
    """The part of ``gpu_s_lost`` that is work lost to failures (the rest: restores)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "application": self.application,
            "jct_s": self.jct_s,
            "restarts": self.restarts,
            "failures": self.failures,
            "t_progress_s": self.t_progress_s,
            "t_ckpt_s": self.t_ckpt_s,
            "t_queue_s": self.t_queue_s,
            "gpu_s_used": self.gpu_s_used,
            "gpu_s_lost": self.gpu_s_lost,
            "gpu_s_ckpt": self.gpu_s_ckpt,
            "gpu_s_lost_work": self.gpu_s_lost_work,
        }


@dataclass(frozen=True)
class RunResult:
    """One simulated run: its key (policy, workload, failure rate, seed), jobs and decision times (ms).

    ``decision_ms`` holds one entry per decision taken. Rounds not decided because provably unchanged are not
    timed: the simulator skips the grid rounds of an idle stretch (no job holds GPUs, no arrival) for a policy
    that does not read the clock (``reads_clock`` False, e.g. oak-no-age, goodput), so for such a policy
    ``len(decision_ms)`` (``summary()["rounds"]``) counts decided rounds, not elapsed ones.
    """

    policy: str
    workload: str
    failure_rate: float
    seed: int
    jobs: tuple[JobResult, ...]
    decision_ms: tuple[float, ...]
    makespan_s: float
    end_time_s: float
    wall_s: float
    #: the hardware failure model of the run (``HardwareModel.describe``), "" for the paper's per-job coin only
    failure_model: str = ""
    #: times (s) of the run's hardware events (node and domain failures): the same for every policy up to any
    #: time both runs reach, for a seed
    hardware_events: tuple[float, ...] = ()

    @property
    def finished(self) -> bool:
        return all(j.jct_s is not None for j in self.jobs)

    def jcts(self) -> np.ndarray:
        """JCTs (s); unfinished jobs count with their censored time: the time they spent in the run by its end,
        ``max(end − submission, 0)`` (horizon − submission where the run stopped at its horizon), a lower bound of
        their JCT, so that the statistics of a run with unfinished jobs are lower bounds too. Never negative: a
        job submitted after the run ended (``oak run --time-limit`` before a job's ``submit_s``) counts 0, not
        end − submission < 0. The simulator refuses up front a workload whose job could arrive at or after its
        horizon (a submission there, or ``--arrival-jitter`` that can delay one there), so that in a simulated
        run every job arrived before the end and none can lower the mean that way."""
        return np.array(
            [j.jct_s if j.jct_s is not None else max(self.end_time_s - j.submit_s, 0.0) for j in self.jobs],
            dtype=float,
        )

    def summary(self) -> dict[str, Any]:
        jct = self.jcts()
        dms = np.array(self.decision_ms) if self.decision_ms else np.zeros(1)
        return {
            "policy": self.policy,
            "workload": self.workload,
            "failure_rate": self.failure_rate,
            "seed": self.seed,
            "mean_jct_s": float(jct.mean()),
            "median_jct_s": float(np.median(jct)),
            "p90_jct_s": float(np.percentile(jct, 90)),
            "p95_jct_s": float(np.percentile(jct, 95)),
            "p99_jct_s": float(np.percentile(jct, 99)),
            "max_jct_s": float(jct.max()),
            "makespan_s": self.makespan_s,
            "restarts_per_job": float(np.mean([j.restarts for j in self.jobs])),
            "failures_per_job": float(np.mean([j.failures for j in self.jobs])),
            "decision_ms_mean": float(dms.mean()),
            "decision_ms_p95": float(np.percentile(dms, 95)),
            "decision_ms_max": float(dms.max()),
            "rounds": len(self.decision_ms),
            "unfinished_jobs": sum(j.jct_s is None for j in self.jobs),
            "wall_s": self.wall_s,
            **self.failure_summary(),
        }

    def failure_summary(self) -> dict[str, Any]:
        """Hardware events and their cost: node failures in the run, GPU-hours lost (restores and lost work),
        effective training time (productive share of the allocated GPU-time, what operators report)."""
        used = sum(j.gpu_s_used for j in self.jobs)
        lost = sum(j.gpu_s_lost for j in self.jobs)
        ckpt = sum(j.gpu_s_ckpt for j in self.jobs)
        out: dict[str, Any] = {
            "lost_gpu_hours": lost / 3600.0,
            "lost_work_gpu_hours": sum(j.gpu_s_lost_work for j in self.jobs) / 3600.0,
            "checkpoint_gpu_hours": ckpt / 3600.0,
            # productive share of the allocated GPU-time: neither lost nor spent writing checkpoints
            "effective_training": (used - lost - ckpt) / used if used > 0 else 1.0,  # no GPU time: nothing lost
        }
        if self.failure_model:
            out["failure_model"] = self.failure_model
            out["node_failures"] = len(self.hardware_events)
        return out

    def to_json(self) -> dict[str, Any]:
        out = self.summary()
        out["jobs"] = [j.to_json() for j in self.jobs]
        return out
