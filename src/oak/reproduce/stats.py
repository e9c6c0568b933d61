"""Statistics of the report: t-intervals of means and of paired differences, relative differences."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from oak.engine.metrics import ci_half_width


def ci_half(sd: Any, n: Any) -> Any:
    """:func:`oak.engine.metrics.ci_half_width`, also element-wise on Series (a Series with ``sd``'s index)."""
    out = ci_half_width(sd, n)
    if isinstance(sd, pd.Series):
        return pd.Series(out, index=sd.index)
    return out


def mean_ci(values: Iterable[float]) -> tuple[float, float, int]:
    """(mean, 95 % half-width, n) of the non-NaN values; (nan, nan, 0) if none, half = nan if one."""
    arr = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if arr.size == 0:
        return math.nan, math.nan, 0
    sd = float(arr.std(ddof=1)) if arr.size > 1 else math.nan
    return float(arr.mean()), float(ci_half(sd, arr.size)), int(arr.size)


def paired_delta(base: pd.Series, ours: pd.Series) -> tuple[float, float, int]:
    """Δ = (mean(base) − mean(ours)) / mean(base) and its paired 95 % half-width, from two Series indexed by
    seed. The interval is the t-interval of base_s − ours_s over the shared seeds, divided by mean(base);
    n is the number of shared seeds (half-width NaN if n < 2)."""
    b, o = base.dropna(), ours.dropna()
    if b.empty or o.empty:
        return math.nan, math.nan, 0
    bm = float(b.mean())
    delta = (bm - float(o.mean())) / bm if bm else math.nan
    shared = b.index.intersection(o.index)
    d = (b[shared] - o[shared]).to_numpy(dtype=float)
    half = float(ci_half(d.std(ddof=1), d.size)) / abs(bm) if d.size >= 2 and bm else math.nan
    return delta, half, int(d.size)


def paired_table(runs: pd.DataFrame, metric: str, match: Sequence[str], by: str, base: Any, ours: Any) -> pd.DataFrame:
    """Paired relative difference for every group of ``match`` columns: Δ = (base − ours)/base of the seed
    means of ``metric`` between the row with ``by == base`` and the row with ``by == ours``, with the paired
    95 % half-width (see ``paired_delta``). ``runs`` has one row per (cell, seed) and a ``seed`` column.
    Returns a frame indexed by ``match`` with columns delta, half, n (shared seeds), base_mean, ours_mean."""
    columns = ["delta", "half", "n", "base_mean", "ours_mean"]
    sub = runs[runs[by].isin([base, ours])].dropna(subset=[metric])
    if sub.empty:
        return pd.DataFrame(columns=columns)
    wide = sub.pivot_table(index=[*match, "seed"], columns=by, values=metric, aggfunc="mean")
    for c in (base, ours):
        if c not in wide.columns:
            wide[c] = np.nan
    levels = list(match)
    b, o = wide[base], wide[ours]
    bm = b.groupby(level=levels).mean()
    om = o.groupby(level=levels).mean()
    diff = (b - o).groupby(level=levels).agg(["std", "count"])
    out = pd.DataFrame(index=bm.index)
    out["base_mean"] = bm
    out["ours_mean"] = om
    out["delta"] = (bm - om) / bm
    out["n"] = diff["count"].astype(int)
    out["half"] = ci_half(diff["std"], diff["count"]) / bm.abs()
    return out[columns]


def rel(ours: float, ref: float) -> float:
    """(ours − ref)/ref: our value relative to the paper's."""
    if ref is None or math.isnan(ours) or not ref:
        return math.nan
    return (ours - ref) / ref


def sensitivity_spread(means: pd.DataFrame) -> pd.DataFrame:
    """Per parameter: the smallest and largest cell mean and their spread (max − min)/min."""
    sub = means.dropna(subset=["mean"])
    g = sub.groupby("parameter", sort=False)["mean"]
    out = pd.DataFrame({"min": g.min(), "max": g.max(), "n": g.count()})
    out["spread"] = (out["max"] - out["min"]) / out["min"]
    return out
