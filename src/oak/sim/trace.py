"""Per-round job traces: what every active job held and how its restart factors stood in each round of a run
(``oak simulate --trace-jobs FILE``). Used to see whether a job is locked small (docs/fidelity.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from oak.engine.metrics import RunResult
from oak.engine.reasons import RoundReasons
from oak.model.cluster import cluster_preset
from oak.model.snapshot import Allocation, RoundSnapshot
from oak.placement.placer import GpuSet
from oak.policies import make_policy
from oak.scoring.sia import SIA_DEFAULT_RESTART_COST_S, SIA_RESTART_COST_S, sia_restart_factor
from oak.scoring.utility import restart_factor_decomposed
from oak.sim.compare import RunSpec
from oak.sim.simulator import ProgressObserver, Simulator
from oak.workloads import load_workload

#: The columns of a job trace, in order (one row per active job per decided round).
TRACE_COLUMNS = (
    "time_s",
    "job",
    "application",
    "gpus_before",
    "gpus",
    "restarts",
    "failures",
    "restoring",
    "t_progress_s",
    "t_ckpt_s",
    "remaining_fraction",
    "r_sia",
    "r_oak",
    "why_code",
    "why",
)


def trace_rows(
    snap: RoundSnapshot, alloc: Allocation, placed: list[GpuSet], reasons: RoundReasons | None = None
) -> list[dict[str, Any]]:
    """One row per active job of this round: GPUs before and after the decision, counters, both factors, and why
    it holds what it holds (``oak.engine.reasons``; empty for a job at its maximum)."""
    codes = reasons.codes() if reasons is not None else ("",) * snap.num_jobs
    cost = np.array([SIA_RESTART_COST_S.get(a, SIA_DEFAULT_RESTART_COST_S) for a in snap.applications])
    r_sia = sia_restart_factor(snap.age_s, snap.restarts.astype(np.float64), cost)
    r_oak = restart_factor_decomposed(snap.t_progress_s, snap.t_ckpt_s, snap.restart_penalty_s)
    before = snap.current_replicas.sum(axis=1)  # GPUs held per job before this round's decision
    remaining = np.where(snap.total_work > 0, snap.remaining_work / snap.total_work, 0.0)
    return [
        {
            "time_s": float(snap.time_s),
            "job": snap.job_names[i],
            "application": snap.applications[i],
            "gpus_before": int(before[i]),
            "gpus": len(placed[i]),
            "restarts": int(snap.restarts[i]),
            "failures": int(snap.failures[i]),
            "restoring": bool(snap.restoring[i]),
            "t_progress_s": float(snap.t_progress_s[i]),
            "t_ckpt_s": float(snap.t_ckpt_s[i]),
            "remaining_fraction": float(remaining[i]),
            "r_sia": float(r_sia[i]),
            "r_oak": float(r_oak[i]),
            "why_code": codes[i],
            "why": reasons.reason(i).text if reasons is not None and codes[i] not in ("", "max") else "",
        }
        for i in range(snap.num_jobs)
    ]


def run_traced(spec: RunSpec, on_progress: ProgressObserver | None = None) -> tuple[RunResult, list[dict[str, Any]]]:
    """Run ``spec`` (every round decided, none fast-forwarded) and return its result and job trace;
    ``on_progress`` as :meth:`Simulator.run`'s."""
    sim = Simulator(load_workload(spec.workload), cluster_preset(spec.cluster), physics=spec.physics)
    policy = make_policy(spec.policy, **{"seed": spec.seed, **dict(spec.policy_params)})
    rows: list[dict[str, Any]] = []

    def observe(reasons: RoundReasons) -> None:
        rows.extend(trace_rows(reasons.snap, reasons.alloc, reasons.placed, reasons))

    result = sim.run(policy, spec.failure_rate, spec.seed, on_reasons=observe, on_progress=on_progress)
    return result, rows


def reason_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Job-rounds per reason code of a job trace (``max``: at its maximum), most frequent first."""
    from collections import Counter

    return dict(Counter(str(r["why_code"]) for r in rows).most_common())


def plot_trace(rows: list[dict[str, Any]], title: str, jobs: int = 3) -> bytes:
    """A PNG of the ``jobs`` longest-running jobs of a trace: GPUs held (steps) and Sia's and OAK's restart
    factors (lines) against time, one panel per job."""
    import io

    import pandas as pd
    from matplotlib.figure import Figure

    frame = pd.DataFrame(rows, columns=list(TRACE_COLUMNS))
    if frame.empty:
        raise ValueError("empty job trace")
    span = frame.groupby("job")["time_s"].agg(lambda t: float(t.max() - t.min()))
    chosen = list(span.sort_values(ascending=False, kind="stable").index[:jobs])
    fig = Figure(figsize=(10.0, 2.4 * len(chosen)), layout="constrained")
    axes = fig.subplots(len(chosen), 1, squeeze=False)[:, 0]
    for ax, name in zip(axes, chosen, strict=True):
        job = frame[frame["job"] == name]
        hours = job["time_s"].to_numpy() / 3600.0
        ax.step(hours, job["gpus"], where="post", color="#1f77b4", lw=1.2, label="GPUs held")
        ax.set_ylabel("GPUs")
        ax.set_ylim(bottom=0)
        twin = ax.twinx()
        twin.plot(hours, job["r_sia"], color="#ff7f0e", lw=0.8, label="Sia's r")
        twin.plot(hours, job["r_oak"], color="#2ca02c", lw=0.8, ls="--", label="OAK's r (decomposed)")
        twin.set_ylim(0, 1.05)
        twin.set_ylabel("restart factor")
        last = job.iloc[-1]
        ax.set_title(
            f"{name} ({last['application']}): {int(last['restarts'])} restarts, {int(last['failures'])} failures",
            fontsize=9,
        )
        handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
        ax.legend(handles, [str(h.get_label()) for h in handles], fontsize=7, loc="upper right")
    axes[-1].set_xlabel("time (h)")
    fig.suptitle(title, fontsize=10)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()
