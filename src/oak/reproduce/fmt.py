"""How the report writes numbers and tables (Markdown)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

DASH = "—"


def _nan(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt_s(x: Any, censored: bool = False) -> str:
    """Seconds with thousands separators; "—" if missing; "≥" prefix for a censored value."""
    if _nan(x):
        return DASH
    return f"{'≥ ' if censored else ''}{float(x):,.0f}"


def fmt_ci(mean: Any, half: Any, censored: bool = False) -> str:
    """ "mean ± half" in seconds; the half-width is "—" with one seed."""
    if _nan(mean):
        return DASH
    return f"{fmt_s(mean, censored)} ± {DASH if _nan(half) else f'{float(half):,.0f}'}"


def fmt_pct(x: Any, signed: bool = True) -> str:
    if _nan(x):
        return DASH
    return f"{100 * float(x):+.1f} %" if signed else f"{100 * float(x):.1f} %"


def fmt_pct_ci(x: Any, half: Any) -> str:
    if _nan(x):
        return DASH
    return f"{100 * float(x):+.1f} ± {DASH if _nan(half) else f'{100 * float(half):.1f}'} %"


def fmt_pt(x: Any) -> str:
    """A difference of two percentages, in percentage points."""
    return DASH if _nan(x) else f"{100 * float(x):+.1f} pt"


def fmt_ms(x: Any) -> str:
    if _nan(x):
        return DASH
    x = float(x)
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def fmt_ratio(x: Any) -> str:
    if _nan(x):
        return DASH
    x = float(x)
    return f"{x:.2f}×" if abs(x) >= 0.1 or x == 0 else f"{x:.2g}×"


def fmt_lam(x: Any) -> str:
    return f"{float(x):g}"


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown pipe table (pipes inside cells are escaped, as GitHub Markdown does: "\\|")."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return [line(header), "| " + " | ".join("---" for _ in header) + " |", *(line(r) for r in rows), ""]
