"""The report of ``oak reproduce``: files, the paper's reference columns, embedded figures, statistics, claims
and determinism, on a tiny store of real quick runs (the small workload, two seeds)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from oak.reproduce import experiments, paper
from oak.reproduce.claims import NA, evaluate_claims
from oak.reproduce.experiments import ABLATION_CELLS, Cell, Experiment, SeedPlan
from oak.reproduce.html import markdown_to_html
from oak.reproduce.report import write_report
from oak.reproduce.runner import execute
from oak.reproduce.stats import mean_ci, paired_delta, paired_table
from oak.reproduce.store import ResultsStore
from oak.sim.compare import RunSpec

#: its module-scoped fixtures are built once, on one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("test_report")

PLAN = SeedPlan(seeds=2, quick=True)
NAMES = ["table2", "table3-ablation", "fig7-cdf"]
T_975_DF2 = 4.302652729911275  # Student's t, 97.5 % quantile, 2 degrees of freedom
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _small_table2(plan: SeedPlan) -> list[Cell]:
    return [c for c in experiments.table2(plan) if c.label("workload") == "small"]


def _small_ablation(plan: SeedPlan) -> list[Cell]:
    return [
        Cell(
            (("policy", pol), ("workload", "small"), ("failure_rate", lam), ("cell", label)),
            tuple(RunSpec(pol, "small", lam, seed) for seed in range(plan.count(10))),
        )
        for lam in (0.05, 0.1)
        for label, pol in ABLATION_CELLS
    ]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ResultsStore]:
    """A store with table2 and the ablation on the small workload, 2 seeds; the ablation's cell (c) is left
    out (not run), so the report has a missing cell."""
    root = tmp_path_factory.mktemp("store")
    with pytest.MonkeyPatch.context() as mp:
        table2 = experiments.EXPERIMENTS["table2"]
        mp.setitem(
            experiments.EXPERIMENTS, "table2", Experiment("table2", table2.title, table2.paper_ref, _small_table2)
        )
        for name in ("table3-ablation", "fig7-cdf"):
            e = experiments.EXPERIMENTS[name]
            mp.setitem(experiments.EXPERIMENTS, name, Experiment(name, e.title, e.paper_ref, _small_ablation))
        specs = [
            s
            for n in NAMES
            for c in experiments.EXPERIMENTS[n].cells(PLAN)
            for s in c.specs
            if s.policy != "oak-no-age"
        ]
        store = ResultsStore(root)
        execute(specs, store, workers=2)
        yield store


@pytest.fixture(scope="module")
def report(tiny: ResultsStore, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_report(tmp_path_factory.mktemp("out"), NAMES, PLAN, tiny, wall_s=1.0)


def _tables(md: str) -> list[list[str]]:
    """Each Markdown table of ``md`` as its list of lines."""
    tables, current = [], []
    for line in md.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def _header(table: list[str]) -> list[str]:
    return [c.strip() for c in table[0].strip().strip("|").split("|")]


def test_report_files_exist(report: Path) -> None:
    assert report.name == "report.md" and report.is_file()
    assert (report.parent / "report.html").is_file()
    md = report.read_text()
    assert md.startswith("# ")
    for name in NAMES:
        assert f"Experiment `{name}`" in md
    assert "fig4-sweep" not in md  # only the experiments asked for


def test_every_table_has_a_paper_reference_column(report: Path) -> None:
    tables = _tables(report.read_text())
    assert len(tables) >= 3  # claims, table2, table3
    for table in tables:
        assert re.fullmatch(r"\|( --- \|)+", table[1]), table[1]
        assert any(h.lower().startswith("paper") for h in _header(table)), _header(table)
    assert "never our data" in report.read_text()


def test_every_image_exists_and_is_a_png(report: Path) -> None:
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report.read_text())
    assert {Path(i).name for i in images} == {"table2.png", "fig7-cdf.png"}
    for src in images:
        data = (report.parent / src).read_bytes()
        assert data.startswith(PNG_MAGIC), src
        assert len(data) > 5000


def test_html_embeds_the_images_and_links_nothing(report: Path) -> None:
    html = (report.parent / "report.html").read_text()
    n_images = len(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report.read_text()))
    srcs = re.findall(r'<img [^>]*src="([^"]*)"', html)
    assert len(srcs) == n_images
    assert all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "http://" not in html and "https://" not in html
    assert not re.search(r"<(link|script)\b|\bhref=|@import|url\(", html)
    assert html.count("<table>") == len(_tables(report.read_text()))


def test_paired_difference_ci_matches_a_hand_computation() -> None:
    rows = [
        ("w", 0.1, "goodput", 0, 100.0),
        ("w", 0.1, "goodput", 1, 110.0),
        ("w", 0.1, "goodput", 2, 120.0),
        ("w", 0.1, "goodput", 3, 130.0),  # no OAK run for seed 3: in the mean, not in the pairs
        ("w", 0.1, "oak", 0, 80.0),
        ("w", 0.1, "oak", 1, 100.0),
        ("w", 0.1, "oak", 2, 90.0),
        ("v", 0.0, "goodput", 0, 50.0),
        ("v", 0.0, "oak", 0, 40.0),
    ]
    runs = pd.DataFrame(rows, columns=["workload", "failure_rate", "policy", "seed", "mean_jct_s"])
    table = paired_table(runs, "mean_jct_s", ["workload", "failure_rate"], "policy", "goodput", "oak")
    # pairs (seeds 0-2): differences 20, 10, 30 → mean 20, sd 10, n 3; baseline mean over its 4 seeds: 115
    w = table.loc[("w", 0.1)]
    assert w["delta"] == pytest.approx((115 - 90) / 115)
    assert w["half"] == pytest.approx(T_975_DF2 * 10 / math.sqrt(3) / 115)
    assert int(w["n"]) == 3
    v = table.loc[("v", 0.0)]
    assert v["delta"] == pytest.approx(0.2)
    assert int(v["n"]) == 1 and math.isnan(v["half"])  # one pair: no interval
    base = runs[runs["workload"] == "w"].query("policy == 'goodput'").set_index("seed")["mean_jct_s"]
    ours = runs[runs["workload"] == "w"].query("policy == 'oak'").set_index("seed")["mean_jct_s"]
    assert paired_delta(base, ours) == pytest.approx((25 / 115, T_975_DF2 * 10 / math.sqrt(3) / 115, 3))


def test_mean_ci_is_students_t() -> None:
    mean, half, n = mean_ci([1.0, 2.0, 6.0])
    assert (mean, n) == (3.0, 3)
    assert half == pytest.approx(T_975_DF2 * math.sqrt(7.0) / math.sqrt(3))
    mean, half, n = mean_ci([5.0, math.nan])
    assert (mean, n) == (5.0, 1) and math.isnan(half)


def test_claims_without_their_data_are_na(tiny: ResultsStore, report: Path) -> None:
    claims = {c.id: c for c in evaluate_claims(NAMES, PLAN, tiny)}
    assert set(claims) == {"V-C.1", "V-C.2", "V-D.4", "V-D.5"}  # only the experiments asked for
    # V-D.4 and V-D.5 are about medium at λ = 0.1, which this store does not have
    assert claims["V-D.4"].verdict == NA and claims["V-D.5"].verdict == NA
    assert "not in this run" in claims["V-D.4"].measured
    # V-C.1 has the small workload: a real verdict, and the workloads not run are named
    assert claims["V-C.1"].verdict in ("holds", "does not hold")
    assert "small: " in claims["V-C.1"].measured and "not in this run: medium" in claims["V-C.1"].measured
    assert all(c.rule and c.text for c in claims.values())
    # with an empty store every claim of every experiment is n/a, and the report still renders
    empty = ResultsStore(report.parent / "empty-store")
    all_claims = evaluate_claims(list(experiments.EXPERIMENTS), PLAN, empty)
    assert len(all_claims) == sum(len(v) for v in paper.CLAIMS.values())
    assert {c.verdict for c in all_claims} == {NA}
    md = write_report(report.parent / "empty", list(experiments.EXPERIMENTS), PLAN, empty, wall_s=0.0).read_text()
    assert "No run of this experiment is in the store" in md


def test_missing_cell_is_a_dash_and_noted(report: Path) -> None:
    md = report.read_text()
    assert "**Missing runs**" in md and "(c) +Restart" in md
    rows = [line for line in md.splitlines() if line.startswith("| 0.1 | small | (c) +Restart |")]
    assert len(rows) == 1
    assert rows[0].split("|")[4].strip() == "—"  # our mean
    assert rows[0].split("|")[10].strip() == "—"  # the paper has no small row either
    full = [line for line in md.splitlines() if line.startswith("| 0.1 | small | (d) Full OAK |")]
    assert full and re.search(r"\| [\d,]+ \|", full[0])


def test_report_is_deterministic(tiny: ResultsStore, report: Path, tmp_path: Path) -> None:
    first = report.read_bytes()
    again = write_report(report.parent, NAMES, PLAN, tiny, wall_s=1.0)
    assert again.read_bytes() == first
    other = write_report(tmp_path, NAMES, PLAN, tiny, wall_s=1.0)
    assert other.read_bytes() == first
    assert not list(report.parent.glob(".*.tmp"))  # atomic writes leave no temporary file


def test_markdown_to_html_subset() -> None:
    md = "# Title\n\nSome *it* and **bold** `x<y`.\n\n- one\n- two\n\n| a | paper b |\n| --- | --- |\n| 1 \\| 2 | 3 |\n"
    out = markdown_to_html(md, {})
    assert "<h1>Title</h1>" in out and "<title>Title</title>" in out
    assert "<em>it</em>" in out and "<strong>bold</strong>" in out and "<code>x&lt;y</code>" in out
    assert "<ul>\n<li>one</li>\n<li>two</li>\n</ul>" in out
    assert '<th class="paper">paper b</th>' in out and "<td>1 | 2</td>" in out
    png = markdown_to_html("![alt](figures/x.png)\n", {"figures/x.png": PNG_MAGIC})
    assert 'src="data:image/png;base64,iVBORw0KGgo="' in png


def test_the_product_study_shows_every_rule_set_and_knowledge_side_by_side(tmp_path: Path) -> None:
    """`restart-aware` run under the default rules and the Sia artifact's into one store: a column per rule set,
    and one with goodput learned, each cell's ratios computed from its own runs (small, λ = 0.1, one seed; Pollux left
    out)."""
    from oak.engine.rules import PhysicsOptions, with_rules

    def small_only(plan: SeedPlan) -> list[Cell]:
        physics = with_rules(PhysicsOptions(failure_restarts=plan.failure_restarts, goodput=plan.goodput), plan.rules)
        return [
            Cell(
                (("policy", pol), ("workload", "small"), ("failure_rate", 0.1)),
                (RunSpec(pol, "small", 0.1, 0, physics=physics),),
            )
            for pol in ("oak", "sia", "oak-paper")
        ]

    store = ResultsStore(tmp_path / "store")
    plans = [SeedPlan(seeds=1, rules=rules) for rules in ("default", "sia-artifact")]
    plans.append(SeedPlan(seeds=1, goodput="learned"))
    with pytest.MonkeyPatch.context() as mp:
        e = experiments.EXPERIMENTS["restart-aware"]
        mp.setitem(experiments.EXPERIMENTS, "restart-aware", Experiment(e.name, e.title, e.paper_ref, small_only))
        for plan in plans:
            execute([s for c in small_only(plan) for s in c.specs], store, workers=1)
        md = (write_report(tmp_path / "out", ["restart-aware"], plans[1], store, wall_s=1.0)).read_text()
        table = next(t for t in _tables(md) if "sia-artifact, a failure adds 1" in t[0])
        assert _header(table)[2:] == [
            "default, a failure adds 1",
            "sia-artifact, a failure adds 1",
            "default, a failure adds 1, goodput learned",
        ]
        row = next(line for line in table if line.startswith("| small | 0.1 |"))
        cells = [c.strip() for c in row.strip().strip("|").split("|")][2:]
        for plan, cell in zip(plans, cells, strict=True):
            runs = store.runs([s for c in small_only(plan) for s in c.specs]).set_index("policy")
            ratio = runs.loc["oak", "mean_jct_s"] / runs.loc["sia", "mean_jct_s"]
            assert cell.startswith(f"{ratio:.2f}×"), (cell, ratio)
            assert re.search(r"· [0-4]/4$", cell), cell


def test_the_claims_show_every_rule_set_stored_with_the_same_failure_restarts(tmp_path: Path) -> None:
    """table2 (small, one seed) stored under the default rules and the Sia artifact's with a failure adding 1, and
    under the artifact's with a failure adding 2: the report of the artifact's runs with 1 puts the claims of both
    rule sets, each under both readings of the paper's "Sia", side by side; with 2 (not comparable with the default
    runs, which add 1) only its own."""
    store = ResultsStore(tmp_path / "store")
    plans = [
        SeedPlan(seeds=1, quick=True),
        SeedPlan(seeds=1, quick=True, rules="sia-artifact"),
        SeedPlan(seeds=1, quick=True, rules="sia-artifact", failure_restarts=2),
    ]
    with pytest.MonkeyPatch.context() as mp:
        e = experiments.EXPERIMENTS["table2"]
        mp.setitem(experiments.EXPERIMENTS, "table2", Experiment(e.name, e.title, e.paper_ref, _small_table2))
        for plan in plans:
            execute([s for c in _small_table2(plan) for s in c.specs], store, workers=1)
        readings = ("goodput", "sia-paper")
        for plan, rule_sets, heading in (
            (plans[1], ("default", "sia-artifact"), "both simulator rules"),
            (plans[2], ("sia-artifact",), "the sia-artifact rules"),
        ):
            md = write_report(tmp_path / f"out-{plan.failure_restarts}", ["table2"], plan, store, wall_s=1.0)
            text = md.read_text(encoding="utf-8")
            table = next(t for t in _tables(text) if t[0].startswith("| id | paper's claim | ") and "rules" in t[0])
            assert _header(table)[2:] == [f"{r} rules, “Sia” = {v}" for r in rule_sets for v in readings]
            assert f"## Claims under {heading} and both readings of the paper's “Sia”" in text
            assert ("a failure adds 2 to a job's restart count" in text) == (plan.failure_restarts == 2)
