"""The report's query layer over stored results: runs and cells as DataFrames, lookups by label."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from oak.reproduce.experiments import EXPERIMENTS, SeedPlan
from oak.reproduce.stats import ci_half
from oak.reproduce.store import ResultsStore, spec_key

#: Per-run columns of the store that the report reads.
RUN_COLUMNS = (
    "mean_jct_s",
    "median_jct_s",
    "p90_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "max_jct_s",
    "makespan_s",
    "restarts_per_job",
    "failures_per_job",
    "decision_ms_mean",
    "decision_ms_p95",
    "decision_ms_max",
    "rounds",
    "unfinished_jobs",
    "wall_s",
    "physics",
)
#: Label columns a cell may carry (see ``experiments.py``), in display order.
LABELS = ("physics", "parameter", "value", "workload", "failure_rate", "cell", "factor", "policy")


class Results:
    """The stored runs of the experiments of one seed plan, one row per (cell, seed); missing runs keep their
    labels with NaN metrics (``stored`` False)."""

    def __init__(self, plan: SeedPlan, store: ResultsStore, paper_sia: str = "goodput") -> None:
        self.plan = plan
        self.store = store
        #: the policy that stands for the paper's "Sia" in the claims (``experiments.PAPER_SIA_READINGS``)
        self.paper_sia = paper_sia
        runs = store.runs()
        if runs.empty or "key" not in runs.columns:
            runs = pd.DataFrame(columns=["key", *RUN_COLUMNS])
        for c in RUN_COLUMNS:
            if c not in runs.columns:
                runs[c] = np.nan
        # "physics" is also a cell label (restart-ab): the run's physics JSON becomes "physics_json"
        self._stored = runs[["key", *RUN_COLUMNS]].drop_duplicates("key").rename(columns={"physics": "physics_json"})
        self._runs: dict[str, pd.DataFrame] = {}
        self._cells: dict[tuple[str, str], pd.DataFrame] = {}
        self._jobs: dict[str, pd.DataFrame] = {}

    def runs(self, name: str) -> pd.DataFrame:
        """One row per (cell, seed) of experiment ``name``: cell_id, the cell's labels, seed, key, the run's
        metrics (NaN if not stored) and ``stored``."""
        if name not in self._runs:
            rows = [
                {"cell_id": i, **dict(cell.labels), "seed": spec.seed, "key": spec_key(spec)}
                for i, cell in enumerate(EXPERIMENTS[name].cells(self.plan))
                for spec in cell.specs
            ]
            frame = pd.DataFrame(rows)
            frame = frame.merge(self._stored, on="key", how="left")
            frame["stored"] = frame["key"].isin(self._stored["key"])
            self._runs[name] = frame
        return self._runs[name]

    def keys(self, names: Iterable[str]) -> list[str]:
        """The distinct run keys of the experiments ``names``, in order."""
        seen: dict[str, None] = {}
        for n in names:
            for k in self.runs(n)["key"]:
                seen.setdefault(str(k), None)
        return list(seen)

    def cells(self, name: str, metric: str = "mean_jct_s") -> pd.DataFrame:
        """One row per cell (indexed by cell_id): its labels, and over its seeds the mean, σ (ddof = 1), n,
        95 % half-width of ``metric``, the number of specs, of missing runs, and whether any job of its runs
        was unfinished (``censored``)."""
        if (name, metric) not in self._cells:
            self._cells[(name, metric)] = cell_stats(self.runs(name), metric)
        return self._cells[(name, metric)]

    def jobs(self, name: str) -> pd.DataFrame:
        """Per-job JCTs of the stored runs of ``name``: cell_id, labels, seed, key, the job's name, jct (censored at the
        horizon for unfinished jobs) and ``censored``."""
        if name not in self._jobs:
            runs = self.runs(name)
            runs = runs[runs["stored"]]
            jobs = self.store.jobs(runs["key"].unique().tolist())
            if jobs.empty:
                frame = pd.DataFrame(columns=[*runs.columns, "jct", "censored"])
            else:
                labels = [c for c in ("cell_id", *LABELS, "seed", "physics_json") if c in runs.columns]
                frame = jobs[["key", "name", "jct_s", "submit_s"]].merge(runs[["key", *labels]], on="key")
                horizon = frame["physics_json"].map(_horizon)
                frame["censored"] = frame["jct_s"].isna()
                frame["jct"] = frame["jct_s"].fillna(horizon - frame["submit_s"])
            self._jobs[name] = frame
        return self._jobs[name]


def _horizon(physics: Any) -> float:
    try:
        return float(json.loads(physics)["horizon_s"])
    except (TypeError, ValueError, KeyError):
        return math.nan


def cell_stats(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per-cell statistics of ``metric`` over the seeds of ``runs`` (see ``Results.cells``)."""
    labels = [c for c in LABELS if c in runs.columns]
    g = runs.groupby("cell_id", sort=True)
    out = g[labels].first()
    agg = g[metric].agg(["mean", "std", "count"])
    out["mean"] = agg["mean"]
    out["sd"] = agg["std"]
    out["n"] = agg["count"].astype(int)
    out["half"] = ci_half(out["sd"], out["n"])
    out["specs"] = g.size()
    out["missing"] = out["specs"] - g["stored"].sum().astype(int)
    out["censored"] = g["unfinished_jobs"].sum() > 0
    return out


def pick(table: pd.DataFrame, **labels: Any) -> pd.Series | None:
    """The first row of ``table`` whose label columns equal ``labels``, or None."""
    mask = pd.Series(True, index=table.index)
    for k, v in labels.items():
        if k not in table.columns:
            return None
        mask &= table[k] == v
    hits = table[mask]
    return None if hits.empty else hits.iloc[0]


def lookup(table: pd.DataFrame, key: Any) -> pd.Series | None:
    """``table.loc[key]`` or None."""
    try:
        row = table.loc[key]
    except (KeyError, TypeError):
        return None
    return row.iloc[0] if isinstance(row, pd.DataFrame) else row


def ordered(values: Iterable[Any]) -> list[Any]:
    """Distinct values in first-appearance order."""
    return list(dict.fromkeys(values))
