"""The paper's §V claims checked against our measurements: what we measured for each, by an explicit rule.

Every claim (``paper.CLAIMS``) has a rule below. A claim is split into parts (one per workload, failure rate
or quantity it names); each part is checked on our data or, when that data is not in this run (a workload
``--quick`` skips, a σ with one seed), left out. Verdict: "holds" if every part checked holds, "does not hold"
if any fails, "n/a" if no part could be checked. The "measured" column lists every part, and the parts not in
this run. Absolute JCTs are never compared (our workloads are our own composition): only relative
differences, ratios and spreads, with tolerances stated in each rule. Verdicts use the point estimates; the
report's tables give their confidence intervals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from oak.reproduce import paper
from oak.reproduce.experiments import ABLATION_CELL_A_SIA_PAPER, ABLATION_CELL_B_SIA_PAPER, EXPERIMENTS, SeedPlan
from oak.reproduce.fmt import DASH, fmt_lam, fmt_ms, fmt_pct, fmt_ratio, md_table
from oak.reproduce.paper import PAPER_TEXT_FIG4_DELTA, PAPER_TEXT_RESTART_GAP
from oak.reproduce.query import Results, lookup, ordered, pick
from oak.reproduce.stats import paired_table, sensitivity_spread
from oak.reproduce.store import ResultsStore

HOLDS, FAILS, NA = "holds", "does not hold", "n/a"

#: Tolerance for a claimed single relative difference (Δ, gap, cut): ± this many percentage points.
POINT_TOL = 0.15
#: Tolerance for a claimed range over workloads: the range widened by this many points on each side.
RANGE_TOL = 0.10
#: Tolerance for a claimed "within x %": x plus this many points.
WITHIN_TOL = 0.02
#: Tolerance for a claimed ratio range [lo, hi]: [max(1, lo·(1 − t)), hi·(1 + t)].
RATIO_TOL = 0.2

WORKLOADS4 = ("small", "medium", "congestion", "stress")
WORKLOADS2 = ("medium", "congestion")


@dataclass(frozen=True)
class Claim:
    """One claim of the paper: its id and experiment, the paper's text, what we measured, the verdict
    ("holds", "does not hold" or "n/a") and the rule that gave it."""

    id: str
    experiment: str
    text: str
    measured: str
    verdict: str
    rule: str


@dataclass(frozen=True)
class Part:
    """One checked part of a claim: a label, our value as text ("" if not in this run), and the check."""

    label: str
    text: str
    ok: bool | None


def _part(label: str, value: float, fmt: Callable[[float], str], check: Callable[[float], bool]) -> Part:
    if value is None or math.isnan(value):
        return Part(label, "", None)
    return Part(label, fmt(value), bool(check(value)))


def verdict(parts: Sequence[Part]) -> str:
    known = [p.ok for p in parts if p.ok is not None]
    if not known:
        return NA
    return HOLDS if all(known) else FAILS


def measured_text(parts: Sequence[Part], prefix: str = "") -> str:
    have = [f"{p.label}: {p.text}" for p in parts if p.ok is not None]
    missing = [p.label for p in parts if p.ok is None]
    out = "; ".join(have)
    if missing:
        out += ("; " if out else "") + f"not in this run: {', '.join(missing)}"
    return prefix + out


def _range(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    vals = [v for v in values if not math.isnan(v)]
    if len(vals) < 2:
        return ""
    return f"range {fmt(min(vals))} to {fmt(max(vals))} — "


def _stored(res: Results, name: str) -> bool:
    return bool(res.runs(name)["stored"].any())


def _mean(res: Results, name: str, metric: str = "mean_jct_s", **labels: object) -> float:
    row = pick(res.cells(name, metric), **labels)
    return math.nan if row is None else float(row["mean"])


def _delta(table: pd.DataFrame, key: object) -> float:
    row = lookup(table, key)
    return math.nan if row is None else float(row["delta"])


def _pct(x: float) -> str:
    return fmt_pct(x)


def _near(ref: float, tol: float = POINT_TOL) -> Callable[[float], bool]:
    """Check: within ± tol of ref."""
    return lambda x: abs(x - ref) <= tol


def _between(lo: float, hi: float) -> Callable[[float], bool]:
    return lambda x: lo <= x <= hi


def _ratio_check(lo: float, hi: float) -> tuple[float, float]:
    return max(1.0, lo * (1 - RATIO_TOL)), hi * (1 + RATIO_TOL)


# ----------------------------------------------------------------------------------------------------------
# Rules, by claim id: (rule text, evaluator → (measured, parts))

Evaluator = Callable[[Results], tuple[str, list[Part]]]


def _vb1(res: Results) -> tuple[str, list[Part]]:
    parts = []
    for wl in WORKLOADS4:
        vals = [_mean(res, "fig3-baselines", policy=p, workload=wl) for p in ("oak-paper", res.paper_sia, "pollux")]
        spread = (max(vals) - min(vals)) / min(vals) if not any(math.isnan(v) for v in vals) else math.nan
        parts.append(_part(wl, spread, lambda v: fmt_pct(v, signed=False), lambda v: v <= 0.04 + WITHIN_TOL))
    return f"spread (max − min)/min of oak, {res.paper_sia}, pollux mean JCT at λ = 0 — " + measured_text(parts), parts


def _ratio_rule(policy: str, lo: float, hi: float) -> Evaluator:
    a, b = _ratio_check(lo, hi)

    def run(res: Results) -> tuple[str, list[Part]]:
        values = [
            _mean(res, "fig3-baselines", policy=policy, workload=wl)
            / _mean(res, "fig3-baselines", policy="oak-paper", workload=wl)
            for wl in WORKLOADS4
        ]
        parts = [_part(wl, v, fmt_ratio, _between(a, b)) for wl, v in zip(WORKLOADS4, values, strict=True)]
        return f"{policy}/oak mean JCT at λ = 0, {_range(values, fmt_ratio)}" + measured_text(parts), parts

    return run


def _table2_rule(metric: str, lo: float, hi: float) -> Evaluator:
    def run(res: Results) -> tuple[str, list[Part]]:
        table = paired_table(
            res.runs("table2"), metric, ["workload", "failure_rate"], "policy", res.paper_sia, "oak-paper"
        )
        values = [_delta(table, (wl, 0.1)) for wl in WORKLOADS4]
        parts = [
            _part(wl, v, _pct, _between(lo - RANGE_TOL, hi + RANGE_TOL))
            for wl, v in zip(WORKLOADS4, values, strict=True)
        ]
        what = "Δmean" if metric == "mean_jct_s" else "Δmax"
        return f"{what} ({res.paper_sia} → oak) at λ = 0.1, {_range(values, _pct)}" + measured_text(parts), parts

    return run


def _fig4_delta(res: Results) -> pd.DataFrame:
    return paired_table(
        res.runs("fig4-sweep"), "mean_jct_s", ["workload", "failure_rate"], "policy", res.paper_sia, "oak-paper"
    )


def _vc3(res: Results) -> tuple[str, list[Part]]:
    table = _fig4_delta(res)
    parts = [
        _part(f"{wl} λ = {fmt_lam(lam)}", _delta(table, (wl, lam)), _pct, lambda x: abs(x) <= 0.03 + WITHIN_TOL)
        for wl in WORKLOADS2
        for lam in (0.0, 0.02, 0.05)
    ]
    return f"Δmean ({res.paper_sia} → oak) — " + measured_text(parts), parts


def _fig4_point(lam: float) -> Evaluator:
    def run(res: Results) -> tuple[str, list[Part]]:
        table = _fig4_delta(res)
        parts = []
        for wl in WORKLOADS2:
            ref = PAPER_TEXT_FIG4_DELTA[(wl, lam)]
            parts.append(_part(wl, _delta(table, (wl, lam)), _pct, _near(ref)))
        return f"Δmean ({res.paper_sia} → oak) at λ = {fmt_lam(lam)} — " + measured_text(parts), parts

    return run


def _vc6(res: Results) -> tuple[str, list[Part]]:
    claimed = {("pollux", "medium"): 0.16, ("pollux", "congestion"): 0.15, ("sia", "medium"): 4.8}
    claimed[("sia", "congestion")] = 3.0
    parts = []
    for pol in ("pollux", res.paper_sia):
        for wl in WORKLOADS2:
            v0 = _mean(res, "fig4-sweep", policy=pol, workload=wl, failure_rate=0.0)
            v1 = _mean(res, "fig4-sweep", policy=pol, workload=wl, failure_rate=0.15)
            ref = claimed[("pollux" if pol == "pollux" else "sia", wl)]
            check = _between(-math.inf, ref + POINT_TOL) if pol == "pollux" else _between(ref / 2, math.inf)
            parts.append(_part(f"{pol} {wl}", v1 / v0 - 1, _pct, check))
    return "growth of mean JCT from λ = 0 to 0.15 — " + measured_text(parts), parts


def _restart_physics(res: Results) -> str | None:
    """The label of the restart-ab physics that is the paper's (§V-D: a fixed 60 s per restore)."""
    labels = [str(p) for p in ordered(res.cells("restart-ab")["physics"])]
    return next((p for p in labels if "§V-D" in p), None)


def _restart_gap(res: Results) -> pd.DataFrame:
    return paired_table(
        res.runs("restart-ab"),
        "mean_jct_s",
        ["physics", "workload", "failure_rate"],
        "factor",
        "aggregate",
        "decomposed",
    )


def _other_physics(res: Results, lam: float, table: pd.DataFrame) -> str:
    ours = _restart_physics(res)
    others = [str(p) for p in ordered(res.cells("restart-ab")["physics"]) if str(p) != ours]
    bits = [
        f"{wl} {fmt_pct(_delta(table, (p, wl, lam)))}"
        for p in others
        for wl in ("ckpt-variance", "medium")
        if not math.isnan(_delta(table, (p, wl, lam)))
    ]
    return f" (with {others[0]}: {', '.join(bits)})" if others and bits else ""


def _vd_gap(lam: float) -> Evaluator:
    def run(res: Results) -> tuple[str, list[Part]]:
        ph = _restart_physics(res)
        table = _restart_gap(res)
        parts = []
        for wl in ("ckpt-variance", "medium"):
            value = _delta(table, (ph, wl, lam)) if ph else math.nan
            if lam == 0.05:
                parts.append(_part(wl, value, _pct, lambda x: abs(x) <= 0.03 + WITHIN_TOL))
            else:
                ref = PAPER_TEXT_RESTART_GAP[(wl, lam)]
                parts.append(_part(wl, value, _pct, _near(ref)))
        head = f"gap (aggregate − decomposed)/aggregate at λ = {fmt_lam(lam)}, {ph or 'the §V-D physics'} — "
        return head + measured_text(parts) + _other_physics(res, lam, table), parts

    return run


def _vd3(res: Results) -> tuple[str, list[Part]]:
    ph = _restart_physics(res)
    cells = res.cells("restart-ab")
    parts = []
    for wl in ("ckpt-variance", "medium"):
        for lam in (0.05, 0.1):
            sds = []
            for factor in ("aggregate", "decomposed"):
                row = pick(cells, physics=ph, workload=wl, failure_rate=lam, factor=factor) if ph else None
                sds.append(float(row["sd"]) if row is not None and int(row["n"]) >= 2 else math.nan)
            ratio = sds[0] / sds[1] if sds[1] else (math.inf if sds[0] > 0 else math.nan)
            parts.append(_part(f"{wl} λ = {fmt_lam(lam)}", ratio, fmt_ratio, lambda x: x >= 4.5))
    return "σ of the per-seed mean JCT, aggregate/decomposed — " + measured_text(parts), parts


def _ablation(res: Results, metric: str = "mean_jct_s") -> dict[str, float]:
    cells = res.cells("table3-ablation", metric)
    out = {}
    sia_reading = res.paper_sia == ABLATION_CELL_A_SIA_PAPER[1]
    cell = {"(a) Sia": ABLATION_CELL_A_SIA_PAPER[0], "(b) +Age": ABLATION_CELL_B_SIA_PAPER[0]} if sia_reading else {}
    for label in ("(a) Sia", "(b) +Age", "(c) +Restart", "(d) Full OAK"):
        row = pick(cells, workload="medium", failure_rate=0.1, cell=cell.get(label, label))
        out[label] = math.nan if row is None else float(row["mean"])
        out[label + " σ"] = math.nan if row is None or int(row["n"]) < 2 else float(row["sd"])
    return out


def _vd4(res: Results) -> tuple[str, list[Part]]:
    m = _ablation(res)
    a = m["(a) Sia"]
    parts = [
        _part("(a) → (c)", (a - m["(c) +Restart"]) / a, _pct, _near(0.584)),
        _part("(a) → (b)", (a - m["(b) +Age"]) / a, _pct, _near(0.034)),
    ]
    return "cut in mean JCT, medium λ = 0.1 — " + measured_text(parts), parts


def _vd5(res: Results) -> tuple[str, list[Part]]:
    jobs = res.jobs("table3-ablation")
    pooled = {}
    for label in ("(c) +Restart", "(d) Full OAK"):
        sub = jobs[(jobs["workload"] == "medium") & (jobs["failure_rate"] == 0.1) & (jobs["cell"] == label)]
        pooled[label] = float(np.max(sub["jct"])) if len(sub) else math.nan
    m = _ablation(res)
    c_sd, d_sd = m["(c) +Restart σ"], m["(d) Full OAK σ"]
    parts = [
        _part(
            "max (c) → (d)",
            (pooled["(c) +Restart"] - pooled["(d) Full OAK"]) / pooled["(c) +Restart"],
            _pct,
            _near(0.213),
        ),
        _part("σ (c) → (d)", (c_sd - d_sd) / c_sd if c_sd else math.nan, _pct, _near(0.70)),
    ]
    return "cut by the age key, medium λ = 0.1 (pooled max; σ of seed means) — " + measured_text(parts), parts


def _va1(res: Results) -> tuple[str, list[Part]]:
    spread = sensitivity_spread(res.cells("fig2-sensitivity"))
    parts = []
    for par in ("p", "alpha", "k_max"):
        row = lookup(spread, par)
        value = math.nan if row is None or int(row["n"]) < 2 else float(row["spread"])
        parts.append(_part(par, value, lambda v: fmt_pct(v, signed=False), lambda x: x <= 0.015 + 0.015))
    return "spread (max − min)/min of mean JCT — " + measured_text(parts), parts


def _va2(res: Results) -> tuple[str, list[Part]]:
    cells = res.cells("fig2-sensitivity")
    lo = _mean(res, "fig2-sensitivity", parameter="restart_penalty_s", value=10.0)
    hi = _mean(res, "fig2-sensitivity", parameter="restart_penalty_s", value=120.0)
    spread = lookup(sensitivity_spread(cells), "restart_penalty_s")
    parts = [_part("10 s → 120 s", hi / lo - 1, _pct, _between(0.06, 0.24))]
    extra = f"; spread over all values {fmt_pct(float(spread['spread']), signed=False)}" if spread is not None else ""
    return "change in mean JCT — " + measured_text(parts) + extra, parts


def _ve1(res: Results) -> tuple[str, list[Part]]:
    runs = res.runs("fig6-hybrid")
    per = runs.groupby("policy")["decision_ms_mean"].mean()
    ms = {p: float(per.get(p, math.nan)) for p in ("oak-paper", "hybrid-oak", "pollux", "sia")}
    text = ", ".join(f"{p} {fmt_ms(v)} ms" for p, v in ms.items() if not math.isnan(v))
    o, h, p = ms["oak-paper"], ms["hybrid-oak"], ms["pollux"]
    parts = [
        Part("oak < 100 ms", "", None if math.isnan(o) else o < 100),
        Part("oak < hybrid-oak", "", None if math.isnan(o) or math.isnan(h) else o < h),
    ]
    if not res.plan.quick:  # with --quick, Pollux's budget is below Hybrid OAK's: the order says nothing
        parts.append(Part("hybrid-oak < pollux", "", None if math.isnan(h) or math.isnan(p) else h < p))
    checks = "; ".join(f"{q.label}: {'yes' if q.ok else 'no'}" for q in parts if q.ok is not None)
    missing = [q.label for q in parts if q.ok is None]
    quick = " (Pollux at the --quick budget, so hybrid-oak < pollux is not checked)" if res.plan.quick else ""
    measured = f"mean decision time per round over all runs: {text or DASH}{quick}; {checks}"
    if missing:
        measured += f"; not in this run: {', '.join(missing)}"
    return measured, parts


def _ve2(res: Results) -> tuple[str, list[Part]]:
    oak = _mean(res, "fig6-hybrid", policy="oak-paper", workload="medium", failure_rate=0.15)
    hyb = _mean(res, "fig6-hybrid", policy="hybrid-oak", workload="medium", failure_rate=0.15)
    parts = [_part("medium λ = 0.15", (oak - hyb) / oak, _pct, _near(0.75))]
    return "(oak − hybrid-oak)/oak of mean JCT — " + measured_text(parts), parts


def _pt(x: float) -> str:
    return f"{100 * x:g} pt"


RULES: dict[str, tuple[str, Evaluator]] = {
    "V-B.1": (
        f"holds if on every workload the spread of the three mean JCTs is ≤ 4 % + {_pt(WITHIN_TOL)}",
        _vb1,
    ),
    "V-B.2": (
        "holds if every workload's gavel/oak ratio is in [{:.2f}, {:.2f}] (the paper's 1.7–6.7×, ±{:g} %, "
        "and > 1)".format(*_ratio_check(1.7, 6.7), 100 * RATIO_TOL),
        _ratio_rule("gavel", 1.7, 6.7),
    ),
    "V-B.3": (
        "holds if every workload's drf/oak ratio is in [{:.2f}, {:.2f}] (the paper's 1.2–6.8×, ±{:g} %, "
        "and > 1)".format(*_ratio_check(1.2, 6.8), 100 * RATIO_TOL),
        _ratio_rule("drf", 1.2, 6.8),
    ),
    "V-C.1": (
        f"holds if every workload's Δmean at λ = 0.1 is in the paper's 15.2–70.9 % ± {_pt(RANGE_TOL)}",
        _table2_rule("mean_jct_s", 0.152, 0.709),
    ),
    "V-C.2": (
        f"holds if every workload's Δmax at λ = 0.1 is in the paper's 33.5–75.8 % ± {_pt(RANGE_TOL)}",
        _table2_rule("max_jct_s", 0.335, 0.758),
    ),
    "V-C.3": (
        f"holds if every |Δmean| at λ ∈ {{0, 0.02, 0.05}} is ≤ 3 % + {_pt(WITHIN_TOL)}",
        _vc3,
    ),
    "V-C.4": (f"holds if each workload's Δmean is within ± {_pt(POINT_TOL)} of the paper's", _fig4_point(0.1)),
    "V-C.5": (f"holds if each workload's Δmean is within ± {_pt(POINT_TOL)} of the paper's", _fig4_point(0.15)),
    "V-C.6": (
        f"holds if pollux's growth is ≤ the paper's + {_pt(POINT_TOL)} and goodput's ≥ half the paper's "
        "(240 % medium, 150 % congestion)",
        _vc6,
    ),
    "V-D.1": (
        f"holds if |gap| ≤ 3 % + {_pt(WITHIN_TOL)} on both workloads (the paper's physics: fixed 60 s restore)",
        _vd_gap(0.05),
    ),
    "V-D.2": (
        f"holds if each workload's gap is within ± {_pt(POINT_TOL)} of the paper's (fixed 60 s restore)",
        _vd_gap(0.1),
    ),
    "V-D.3": (
        "holds if σ_aggregate/σ_decomposed ≥ 4.5 (half the paper's 9×) for every workload and λ (fixed 60 s "
        "restore; needs ≥ 2 seeds)",
        _vd3,
    ),
    "V-D.4": (f"holds if both cuts are within ± {_pt(POINT_TOL)} of the paper's (58.4 %, 3.4 %)", _vd4),
    "V-D.5": (
        f"holds if both cuts are within ± {_pt(POINT_TOL)} of the paper's (21.3 %, 70 %); σ needs ≥ 2 seeds",
        _vd5,
    ),
    "V-A.1": ("holds if each spread is ≤ 1.5 % + 1.5 pt", _va1),
    "V-A.2": ("holds if the change is in [6 %, 24 %] (half to twice the paper's 12 %)", _va2),
    "V-E.1": (
        "holds if oak's mean is < 100 ms and oak < hybrid-oak < pollux (absolute times depend on the machine)",
        _ve1,
    ),
    "V-E.2": (f"holds if the reduction is within ± {_pt(POINT_TOL)} of the paper's 75 %", _ve2),
}


def evaluate_claims(
    names: Sequence[str], plan: SeedPlan, store: ResultsStore, results: Results | None = None
) -> list[Claim]:
    """The paper's claims (``paper.CLAIMS``) of the experiments ``names``, in the order of ``EXPERIMENTS``,
    each with what we measured for it, its rule and verdict."""
    res = results if results is not None else Results(plan, store)
    selected = set(names)
    out = []
    for name in EXPERIMENTS:
        if name not in selected:
            continue
        for cid, text in paper.CLAIMS.get(name, ()):
            entry = RULES.get(cid)
            if entry is None:
                out.append(Claim(cid, name, text, DASH, NA, "no rule implemented"))
                continue
            rule, evaluate = entry
            if not _stored(res, name):
                out.append(Claim(cid, name, text, "no run of this experiment in the store", NA, rule))
                continue
            measured, parts = evaluate(res)
            if bool((res.runs(name)["unfinished_jobs"].fillna(0) > 0).any()):
                measured += " [some runs of this experiment have unfinished jobs: their JCTs are lower bounds]"
            out.append(Claim(cid, name, text, measured, verdict(parts), rule))
    return out


def claims_table(claims: Sequence[Claim]) -> list[str]:
    """The claims as a Markdown table (the paper's claim text is its reference column)."""
    rows = [[c.id, c.text, c.measured, c.rule, f"**{c.verdict}**"] for c in claims]
    return md_table(["id", "paper's claim", "measured (ours)", "rule", "verdict"], rows)
