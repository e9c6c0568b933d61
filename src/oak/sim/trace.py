"""Per-round job traces: what every active job held and how its restart factors stood in each round of a run
(``oak simulate --trace-jobs FILE``). Used to see whether a job is locked small (docs/fidelity.md)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
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

#: The columns of a job trace, in order (one row per active job per decided round), with their Parquet types.
TRACE_SCHEMA: tuple[tuple[str, str], ...] = (
    ("time_s", "float64"),
    ("job", "string"),
    ("application", "string"),
    ("gpus_before", "int64"),
    ("gpus", "int64"),
    ("restarts", "int64"),
    ("failures", "int64"),
    ("restoring", "bool"),
    ("t_progress_s", "float64"),
    ("t_ckpt_s", "float64"),
    ("remaining_fraction", "float64"),
    ("r_sia", "float64"),
    ("r_oak", "float64"),
    ("why_code", "string"),
    ("why", "string"),
)
TRACE_COLUMNS = tuple(name for name, _ in TRACE_SCHEMA)


def trace_columns(
    snap: RoundSnapshot, alloc: Allocation, placed: list[GpuSet], reasons: RoundReasons | None = None
) -> dict[str, Any]:
    """One round's rows, column by column (``TRACE_COLUMNS``), one per active job: GPUs before and after the
    decision, counters, both factors, and why it holds what it holds (``oak.engine.reasons``; empty for a job
    at its maximum)."""
    n = snap.num_jobs
    codes = reasons.codes() if reasons is not None else ("",) * n
    cost = np.array([SIA_RESTART_COST_S.get(a, SIA_DEFAULT_RESTART_COST_S) for a in snap.applications])
    remaining = np.divide(snap.remaining_work, snap.total_work, out=np.zeros(n), where=np.asarray(snap.total_work) > 0)
    return {
        "time_s": np.full(n, float(snap.time_s)),
        "job": snap.job_names,
        "application": snap.applications,
        "gpus_before": snap.current_replicas.sum(axis=1).astype(np.int64),  # GPUs held before the decision
        "gpus": np.array([len(p) for p in placed], dtype=np.int64),
        "restarts": np.asarray(snap.restarts, dtype=np.int64),
        "failures": np.asarray(snap.failures, dtype=np.int64),
        "restoring": np.asarray(snap.restoring, dtype=bool),
        "t_progress_s": np.asarray(snap.t_progress_s, dtype=np.float64),
        "t_ckpt_s": np.asarray(snap.t_ckpt_s, dtype=np.float64),
        "remaining_fraction": remaining,
        "r_sia": sia_restart_factor(snap.age_s, snap.restarts.astype(np.float64), cost),
        "r_oak": restart_factor_decomposed(snap.t_progress_s, snap.t_ckpt_s, snap.restart_penalty_s),
        "why_code": codes,
        "why": [
            reasons.reason(i).text if reasons is not None and codes[i] not in ("", "max") else "" for i in range(n)
        ],
    }


def run_traced(
    spec: RunSpec, path: str | Path, on_progress: ProgressObserver | None = None
) -> tuple[RunResult, dict[str, int]]:
    """Run ``spec`` (every round decided, none fast-forwarded), streaming its job trace to the Parquet file
    ``path`` (atomically: a run that fails leaves none); return the result and the job-rounds per reason code
    (``max``: at its maximum), most frequent first. Memory holds one batch of rows, however long the run;
    ``on_progress`` as :meth:`Simulator.run`'s."""
    import pyarrow as pa

    from oak.io_util import AtomicParquetWriter

    sim = Simulator(load_workload(spec.workload), cluster_preset(spec.cluster), physics=spec.physics)
    policy = make_policy(spec.policy, **{"seed": spec.seed, **dict(spec.policy_params)})
    counts: Counter[str] = Counter()
    schema = tuple((name, pa.type_for_alias(kind)) for name, kind in TRACE_SCHEMA)
    with AtomicParquetWriter(path, schema) as out:

        def observe(reasons: RoundReasons) -> None:
            cols = trace_columns(reasons.snap, reasons.alloc, reasons.placed, reasons)
            counts.update(cols["why_code"])
            out.append(cols)

        result = sim.run(policy, spec.failure_rate, spec.seed, on_reasons=observe, on_progress=on_progress)
    return result, {str(code): k for code, k in counts.most_common()}


def longest_running(times: Any, jobs: int) -> list[str]:
    """The ``jobs`` jobs of a trace frame (columns job, time_s, gpus) that ran longest: the span of the rounds in
    which each held GPUs, ties by name (by their span in the trace where no job ever held GPUs). A job that
    waited long and ran briefly is not among them."""
    ran = times[times["gpus"] > 0]
    spans = (ran if not ran.empty else times).groupby("job", sort=True)["time_s"].agg(["min", "max"])
    spans["span"] = spans["max"] - spans["min"]
    return [str(j) for j in spans.sort_values("span", ascending=False, kind="stable").index[:jobs]]


def plot_trace(path: str | Path, title: str, jobs: int = 3) -> bytes:
    """A PNG of the ``jobs`` longest-running jobs of a job trace (a Parquet file of ``run_traced``): GPUs held
    (steps) and Sia's and OAK's restart factors (lines) against time, one panel per job. Reads the whole trace's
    job and time columns, then only the chosen jobs' rows."""
    import io

    import pyarrow.parquet as pq
    from matplotlib.figure import Figure

    times = pq.read_table(path, columns=["job", "time_s", "gpus"]).to_pandas()
    if times.empty:
        raise ValueError("empty job trace")
    chosen = longest_running(times, jobs)
    frame = pq.read_table(path, filters=[("job", "in", chosen)]).to_pandas()
    fig = Figure(figsize=(10.0, 2.4 * len(chosen)), layout="constrained")
    axes = fig.subplots(len(chosen), 1, squeeze=False)[:, 0]
    for ax, name in zip(axes, chosen, strict=True):
        job = frame[frame["job"] == name].sort_values("time_s", kind="stable")
        hours = job["time_s"].to_numpy() / 3600.0
        ax.step(hours, job["gpus"], where="post", color="#1f77b4", lw=1.2, label="GPUs held")
        ax.set_ylabel("GPUs")
        ax.set_ylim(0, max(1.0, float(job["gpus"].max())) * 1.05)  # a job that never ran: 0 on a 0–1 axis
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
