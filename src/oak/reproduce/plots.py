"""Figure helpers of the report (matplotlib, PNG bytes) and the policies' colours."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from oak.policies import REGISTRY

DPI = 120
POLICY_COLORS = {name: spec.color for name, spec in REGISTRY.items() if spec.color is not None}
ABLATION_COLORS = ("#d62728", "#ff7f0e", "#2ca02c", "#1f77b4")
LAMBDA_MARKERS = {0.0: "o", 0.02: "v", 0.05: "s", 0.1: "^", 0.15: "D"}


def _figure(nrows: int, ncols: int, width: float, height: float) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _plain_log_ticks(ax: Any) -> None:
    """Log x axis with plain numbers (0.5, 1, 10, …) rather than powers of ten; minor ticks labelled only at
    2 and 5 × 10^k (matplotlib's default labels every minor tick of a short axis, and they overlap)."""
    from matplotlib.ticker import FuncFormatter

    def minor(v: float, _pos: int) -> str:
        lead = v / 10.0 ** np.floor(np.log10(v)) if v > 0 else 0.0
        return f"{v:g}" if round(lead) in (2, 5) and abs(lead - round(lead)) < 1e-6 else ""

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(minor))


def _no_data(ax: Any) -> None:
    ax.text(0.5, 0.5, "no data in this run", ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _hours(x: Any) -> Any:
    return np.asarray(x, dtype=float) / 3600.0


def _err(half: Any) -> Any:
    """Error-bar half-widths in hours, or None where no value has an interval (one seed)."""
    err = _hours(half)
    return None if np.isnan(err).all() else np.nan_to_num(err, nan=0.0)


def _grouped_bars(
    ax: Any, groups: Sequence[str], series: Sequence[tuple[str, str, Sequence[float], Sequence[float]]]
) -> None:
    """Grouped bars: ``series`` is (label, colour, means in s, half-widths in s), one value per group."""
    k = max(len(series), 1)
    width = 0.8 / k
    x = np.arange(len(groups))
    ax.set_axisbelow(True)
    for i, (label, color, means, halves) in enumerate(series):
        pos = x - 0.4 + width * (i + 0.5)
        h, err = _hours(means), _hours(halves)
        ok = ~np.isnan(h)
        ax.bar(pos[ok], h[ok], width, label=label, color=color)
        has_ci = ok & ~np.isnan(err)
        if has_ci.any():
            ax.errorbar(pos[has_ci], h[has_ci], yerr=err[has_ci], fmt="none", ecolor="0.15", capsize=2, lw=1)
        for p in pos[~ok]:
            ax.text(p, 0, " no data", rotation=90, ha="center", va="bottom", fontsize=7, color="0.45")
    ax.set_xticks(x, groups)
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
