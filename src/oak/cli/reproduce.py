"""``oak reproduce``: the paper's evaluation in one command."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from oak.cli.main import _fail, app, console, progress_bar


@app.command()
def reproduce(
    experiment: Annotated[str, typer.Argument(help="An experiment name (see --list) or 'all'.")] = "all",
    out: Annotated[Path, typer.Option(help="Output folder: results store, report.md, report.html, figures.")] = Path(
        "results/oak"
    ),
    seeds: Annotated[int | None, typer.Option(help="Seeds per cell (default 3; 1 with --quick).")] = None,
    paper_seeds: Annotated[bool, typer.Option("--paper-seeds", help="The paper's seed count per experiment.")] = False,
    quick: Annotated[bool, typer.Option("--quick", help="Small faithful version (what CI runs).")] = False,
    backend: Annotated[str, typer.Option(help="local (process pool) or ray.")] = "local",
    address: Annotated[str | None, typer.Option(help="Ray cluster address (default: start a local Ray).")] = None,
    workers: Annotated[int | None, typer.Option(help="Parallel simulations (default: CPU count).")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the experiments and exit.")] = False,
) -> None:
    """Run the paper's experiments (resuming what is stored in OUT) and write the paper-vs-ours report."""
    from oak.reproduce.experiments import EXPERIMENTS, SeedPlan
    from oak.reproduce.report import write_report
    from oak.reproduce.runner import execute
    from oak.reproduce.store import ResultsStore

    if list_:
        for e in EXPERIMENTS.values():
            console.print(f"{e.name:18} {e.paper_ref:16} {e.title}")
        return
    if seeds is not None and paper_seeds:
        _fail("--seeds and --paper-seeds: give one or the other")
    if seeds is not None and seeds < 1:
        _fail(f"--seeds {seeds}: expected a positive integer")
    if workers is not None and workers < 1:
        _fail(f"--workers {workers}: expected a positive integer")
    names = list(EXPERIMENTS) if experiment == "all" else [experiment]
    for n in names:
        if n not in EXPERIMENTS:
            _fail(f"experiment {n!r} is unknown; expected 'all' or one of {', '.join(EXPERIMENTS)}")
    plan = SeedPlan(seeds=seeds, paper=paper_seeds, quick=quick)
    specs = [s for n in names for cell in EXPERIMENTS[n].cells(plan) for s in cell.specs]
    store = ResultsStore(out)
    todo = store.missing(specs)
    console.print(
        f"{len(set(specs))} runs in {len(names)} experiment(s); {len(set(specs)) - len(todo)} already stored in {out}; "
        f"running {len(todo)} on the {backend} backend"
    )
    start = time.perf_counter()
    with progress_bar() as bar:
        task = bar.add_task("simulating", total=len(todo))
        execute(specs, store, backend, workers, address, progress=lambda _s, _r: bar.advance(task))
    wall = time.perf_counter() - start
    report = write_report(out, names, plan, store, wall_s=wall)
    console.print(f"simulated {len(todo)} runs in {wall:,.0f} s; report: {report} and {report.with_suffix('.html')}")
