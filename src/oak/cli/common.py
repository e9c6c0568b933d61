"""What every ``oak`` subcommand shares: the Typer apps, consoles, progress bar, the exit-2 error, option
types and the per-job table. Subcommand modules import this, never ``oak.cli.main`` (no import cycle)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from oak.model.cluster import cluster_preset_help

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="OAK: restart- and age-aware GPU cluster scheduling."
)
workloads_app = typer.Typer(
    no_args_is_help=True, help="List and show the embedded workloads; synthesise trace-derived ones."
)
catalog_app = typer.Typer(no_args_is_help=True, help="Build the application catalog from measured profiles.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (speed reported as ratios within one run).")
app.add_typer(workloads_app, name="workloads")
app.add_typer(catalog_app, name="catalog")
app.add_typer(bench_app, name="bench")

console = Console() if sys.stdout.isatty() else Console(width=160)
err_console = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=160)


def progress_bar() -> Progress:
    """A progress bar on stderr: description, bar, done/total, elapsed time and ETA."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    return Progress(*columns, console=err_console)


def fail(message: str) -> None:
    """Print ``message`` as an error on stderr and exit with status 2 (bad input)."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(code=2)


RestoreOpt = Annotated[
    str,
    typer.Option(help="Restore delay per (re)start or failure: 'per-app' (P_restart) or seconds, e.g. 60."),
]
ScopeOpt = Annotated[str, typer.Option(help="Failure rate applies per 'job' or per 'gpu'.")]
LostOpt = Annotated[
    str,
    typer.Option(
        help="'none', 'since-checkpoint' (progress since the last checkpoint is lost) or 'since-restart' (since "
        "the job's last (re)start)."
    ),
]
RulesOpt = Annotated[
    str,
    typer.Option(
        help="Simulator rules: 'default' or 'sia-artifact' (the Sia artifact's: 1-GPU bootstrap, 2x exploration "
        "cap, restarts only on a change of per-node shape, fixed 60 s steps, restores not preemptible)."
    ),
]
FailureRestartsOpt = Annotated[int, typer.Option(help="Restarts a failure adds to a job's count n: 0, 1 or 2.")]
FailureModelOpt = Annotated[
    str,
    typer.Option(
        help="Hardware failure model NAME[:key=value,...] ('oak failures list'): paper (λ only), llama3, rsc1, "
        "lemon, domain; e.g. llama3:scale=300. Its events add to --failure-rate's."
    ),
]
FailureModeOpt = Annotated[
    str,
    typer.Option(
        help="'restore' (a failed job restores in place) or 'ghost' (it keeps its GPUs without progress until "
        "its allocation changes)."
    ),
]
CkptOpt = Annotated[
    float, typer.Option(help="Checkpoint interval (s of productive time) for --lost-work since-checkpoint.")
]
QueueOpt = Annotated[str, typer.Option(help="T_queue: 'accumulated' or 'since-last-run'.")]
JitterOpt = Annotated[float, typer.Option(help="Seeded submission jitter, uniform in [0, J) seconds.")]
HorizonOpt = Annotated[
    float, typer.Option(help="Stop simulating after this many seconds (unfinished jobs are reported).")
]
SolverOpt = Annotated[
    str,
    typer.Option(
        help="Round solver: auto (by size: exact DP, Lagrangian + core DP, or Lagrangian with a certified gap), dp, lagrangian, highs, cvxpy."
    ),
]
#: The presets of ``oak.model.cluster.CLUSTER_PRESETS`` (spelled out so that ``oak --help`` does not import numpy;
#: a test checks that every preset is named).
CLUSTER_HELP = "Cluster preset: " + cluster_preset_help()  # generated from the presets, not restated
ClusterOpt = Annotated[str, typer.Option(help=CLUSTER_HELP)]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the runs as JSON to this path.")]
PopulationOpt = Annotated[
    int | None, typer.Option(help="NSGA-II population of pollux (default 100) and hybrid-oak (default 20).")
]
GenerationsOpt = Annotated[
    int | None, typer.Option(help="NSGA-II generations of pollux (default 100) and hybrid-oak (default 20).")
]


def jobs_table(result: Any, title: str, digits: int = 0) -> Table:
    """Per-job metrics of a RunResult (JCT, restarts, failures, T_progress, T_ckpt, T_queue; seconds)."""
    table = Table(title=title)
    for col in ("job", "app", "JCT (s)", "restarts", "failures", "T_progress (s)", "T_ckpt (s)", "T_queue (s)"):
        table.add_column(col, justify="right" if col not in ("job", "app") else "left")
    for j in result.jobs:
        table.add_row(
            j.name,
            j.application,
            "unfinished" if j.jct_s is None else f"{j.jct_s:,.{digits}f}",
            str(j.restarts),
            str(j.failures),
            f"{j.t_progress_s:,.{digits}f}",
            f"{j.t_ckpt_s:,.{digits}f}",
            f"{j.t_queue_s:,.{digits}f}",
        )
    return table
