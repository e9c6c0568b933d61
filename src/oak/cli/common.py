"""What every ``oak`` subcommand shares: the Typer apps, consoles, progress bar, the exit-2 error, option
types and the per-job table. Subcommand modules import this, never ``oak.cli.main`` (no import cycle)."""

from __future__ import annotations

import math
import stat
import sys
from collections.abc import Callable, Iterable
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

from oak.errors import OakInputError
from oak.model.cluster import cluster_preset_help

# help is plain text that wraps (click's formatter, rich_markup_mode=None): Rich's option tables cut long option
# names short on an 80-column terminal ("--restores-preempti…")
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="OAK: restart- and age-aware GPU cluster scheduling.",
    rich_markup_mode=None,
)
workloads_app = typer.Typer(
    no_args_is_help=True,
    help="List and show the embedded workloads; synthesise trace-derived ones.",
    rich_markup_mode=None,
)
catalog_app = typer.Typer(
    no_args_is_help=True, help="Build the application catalog from measured profiles.", rich_markup_mode=None
)
bench_app = typer.Typer(
    no_args_is_help=True, help="Benchmarks (speed reported as ratios within one run).", rich_markup_mode=None
)
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


def check_outputs(
    outputs: dict[str, Path | None], inputs: dict[str, str | Path | None], runs: dict[str, Path] | None = None
) -> None:
    """Exit 2 before any work where an output option names the file of an input (it would be overwritten with no
    word: ``--workload w.csv --json w.csv``), a file a run directory of ``runs`` keeps (its ``state.sqlite``, a
    job's folder), or the file of another output (one would replace the other). Keys are the options' names; an
    input that is not a file (an embedded workload's name) is skipped; an output that is not a regular file
    (``/dev/null``, a pipe, ``/dev/stdout`` on a terminal) is never overwritten, so never refused."""
    given = [(opt, Path(path)) for opt, path in outputs.items() if path is not None and _regular(Path(path))]
    for i, (opt, path) in enumerate(given):
        for other, other_path in given[:i]:
            if _same_file(path, other_path):
                fail(f"{other} and {opt} name the same file {path}: each output needs a file of its own")
        for source, text in inputs.items():
            if text is not None and Path(text).is_file() and _same_file(path, Path(text)):
                fail(f"{opt} {path}: that is the {source} input, which it would overwrite")
        for source, run_dir in (runs or {}).items():
            if _kept_by_run(path, run_dir):  # also a directory the command is about to create
                fail(
                    f"{opt} {path}: inside what the run directory {run_dir} ({source}) keeps (its state, settings "
                    "and job folders); write it beside them"
                )


def _regular(path: Path) -> bool:
    """Whether writing ``path`` would replace a regular file's contents (or create one)."""
    try:
        return not path.exists() or stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return True


def _kept_by_run(path: Path, run_dir: Path) -> bool:
    """Whether ``path`` is one of the files a run directory keeps: its state (``state.sqlite`` and the files beside
    it), its settings, a hidden file (a lock), or anything in a job's folder. A file written there before by
    ``export-trace`` or ``replay`` may be written again."""
    real, root = path.resolve(), run_dir.resolve()
    if not real.is_relative_to(root) or real == root:
        return False
    rel = real.relative_to(root)
    return len(rel.parts) > 1 or rel.name.startswith(("state.", ".")) or rel.name in RUN_FILES


RUN_FILES = frozenset({"run.json", "serve.lock", "oak.sock", "token", "rounds.jsonl", "metrics.prom"})
"""The files of a run directory beside its state (``state.*``) and job folders: settings, the service's lock,
socket, token, rounds log and metrics."""


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return a.samefile(b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def failure_log_file(physics: Any) -> str | None:
    """The failure log a ``--failure-model trace:FILE`` replays (None for another model)."""
    model = str(getattr(physics, "failure_model", "") or "")
    return model.partition(":")[2].strip() or None if model.strip().startswith("trace:") else None


def policy_file(policy: str) -> str | None:
    """The file of a policy given as ``FILE.py:NAME`` (None for a built-in name or ``MODULE:NAME``)."""
    head = policy.rpartition(":")[0]
    return head if head.endswith(".py") else None


def name_list(text: str, what: str, example: str = "oak,sia") -> list[str]:
    """The names of a comma-separated option (``what``: the option), stripped; exit 2 on an empty list, an empty
    name (``oak,``: a name left out) or a name given twice."""
    names = [x.strip() for x in text.split(",")]
    if not any(names):
        fail(f"{what}: expected at least one name (a comma-separated list such as {example})")
    if not all(names):
        fail(f"{what} {text!r}: an empty name (expected a comma-separated list such as {example})")
    if len(set(names)) != len(names):
        fail(f"{what} {text!r}: a name given twice")
    return names


#: the most runs one sweep takes (``oak compare``, ``oak reproduce``, ``oak bench sweep``): a mistyped --seeds
#: would otherwise fill memory with run specs before the first run starts (100,000 runs of the 4-job workload
#: take ~3 h on 2 cores)
MAX_SWEEP_RUNS = 100_000


def check_sweep_size(runs: int, option: str) -> None:
    """Exit 2 where a sweep would take more than :data:`MAX_SWEEP_RUNS` runs (``option``: what set its size)."""
    if runs > MAX_SWEEP_RUNS:
        fail(f"{option}: {runs:,} runs; at most {MAX_SWEEP_RUNS:,} in one sweep")


RulesOpt = Annotated[
    str,
    typer.Option(
        help="Simulator rules: 'default' or 'sia-artifact' (the Sia artifact's: 1-GPU bootstrap, 2x exploration "
        "cap, restarts only on a change of per-node shape, decisions only on the --round grid (60 s by default), "
        "restores not preemptible, "
        "num_replicas a demand of rigid jobs only, a never-run job's first GPU type a tie)."
    ),
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


def _path_check(problem_of: str) -> Callable[[typer.Context, typer.CallbackParam, Path | None], Path | None]:
    """An option callback that exits 2 before any work where ``oak.io_util.<problem_of>`` names a problem with
    the path (a directory given for a file, a file in the way of a parent folder, no permission), instead of a
    traceback after the work."""

    def check(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> Path | None:
        from oak import io_util

        if value is not None and not ctx.resilient_parsing:
            problem = getattr(io_util, problem_of)(value)
            if problem is not None:
                fail(f"{param.opts[0]} {value}: {problem}")
        return value

    return check


#: callback of an option naming a file the command writes (``io_util.output_file_problem``)
output_file = _path_check("output_file_problem")
#: callback of an option naming a folder the command writes into, created if missing (``output_dir_problem``)
output_dir = _path_check("output_dir_problem")


JsonOpt = Annotated[
    Path | None, typer.Option("--json", help="Write the runs as JSON to this path.", callback=output_file)
]
PopulationOpt = Annotated[
    int | None, typer.Option(help="NSGA-II population of pollux (default 100) and hybrid-oak (default 20).")
]
GenerationsOpt = Annotated[
    int | None, typer.Option(help="NSGA-II generations of pollux (default 100) and hybrid-oak (default 20).")
]


def jobs_table(result: Any, title: str, digits: int = 0, ended: dict[str, str] | None = None) -> Table:
    """Per-job metrics of a RunResult (JCT, restarts, failures, T_progress, T_ckpt, T_queue; seconds); an
    unfinished job's JCT cell says how it ended where ``ended`` names it (a real run's ``failed``)."""
    table = Table(title=title)
    for col in ("job", "app", "JCT (s)", "restarts", "failures", "T_progress (s)", "T_ckpt (s)", "T_queue (s)"):
        table.add_column(col, justify="right" if col not in ("job", "app") else "left")
    for j in result.jobs:
        table.add_row(
            j.name,
            j.application,
            (ended or {}).get(j.name, "unfinished") if j.jct_s is None else f"{j.jct_s:,.{digits}f}",
            str(j.restarts),
            str(j.failures),
            f"{j.t_progress_s:,.{digits}f}",
            f"{j.t_ckpt_s:,.{digits}f}",
            f"{j.t_queue_s:,.{digits}f}",
        )
    return table


def physics_flag(field: str) -> str:
    """The command-line name of a PhysicsOptions field: dashes, without a seconds suffix (``horizon_s`` →
    ``horizon``)."""
    return field[:-2] if field.endswith("_s") else field


#: the shortest simulated scheduling round (``--round``, s) the commands take. The simulator decides at every
#: round while jobs run (and steps every round of an idle stretch for a policy that reads the clock), so a run
#: takes up to horizon / round decisions: at 1 s and the default horizon (3e6 s) 3 million, already minutes to
#: hours; --round 1e-9 meant 3e15 (a run that never ends). Its times also compare with a relative tolerance of
#: 1e-9 of the clock (``oak.sim.simulator._EPS``), up to 1 s at the longest horizon (1e9 s): a shorter round is
#: not resolved there. Real schedulers' rounds are tens of seconds (Sia, Gavel: 60 s).
MIN_ROUND_S = 1.0


def check_round(round_s: float, horizon_s: float) -> None:
    """Exit 2 where ``--round`` is below :data:`MIN_ROUND_S` (a NaN or infinite value is left to
    ``PhysicsOptions``' own message)."""
    if isinstance(round_s, int | float) and math.isfinite(round_s) and round_s < MIN_ROUND_S:
        count = ""
        if round_s > 0 and math.isfinite(horizon_s) and horizon_s > 0:
            count = f", up to horizon / round = {horizon_s / round_s:.3g} rounds here (--horizon {horizon_s:g})"
        fail(
            f"--round {round_s:g}: expected at least {MIN_ROUND_S:g} s (a run decides every round{count}; rounds "
            "under a second are also below the simulator's time resolution at long horizons)"
        )


_CTX = "oak_physics_ctx"
"""The click context :func:`with_physics_options` asks typer for (a parameter annotated ``typer.Context``)."""


def _check_rules_given(rules: Any, given: dict[str, Any]) -> None:
    """Exit 2 where an option given on the command line contradicts the ``--rules`` set, which would replace it
    silently (``--rules sia-artifact --no-bootstrap``); an option the set does not name, or one given as the set
    has it, is fine."""
    from oak.engine.rules import SIA_ARTIFACT_RULES

    if rules != "sia-artifact":
        return

    def show(flag: str, v: Any) -> str:
        name = flag.replace("_", "-")
        if isinstance(v, bool):
            return f"--{name}" if v else f"--no-{name}"
        return f"--{name} {v}"

    for flag, value in given.items():
        if flag in SIA_ARTIFACT_RULES and SIA_ARTIFACT_RULES[flag] != value:
            fail(
                f"{show(flag, value)} contradicts --rules sia-artifact, which sets "
                f"{show(flag, SIA_ARTIFACT_RULES[flag])}; give the rules you want one by one instead of --rules "
                "to combine them"
            )


def typed_options(ctx: Any, names: Iterable[str]) -> set[str]:
    """The parameters of ``names`` given on the command line (not left at their defaults) in click context
    ``ctx`` (None: none known). Typer vendors its own click, so the source is compared by name."""
    source = getattr(ctx, "get_parameter_source", None)
    return {k for k in names if source is not None and getattr(source(k), "name", "") == "COMMANDLINE"}


def _physics_message(message: str) -> str:
    """``PhysicsOptions``' message with the option's name for its field: ``physics horizon_s=-5.0: ...`` →
    ``--horizon -5.0: ...``."""
    import re

    m = re.match(r"physics (\w+)=", message)
    if m is None:
        return message
    return f"--{physics_flag(m.group(1)).replace('_', '-')} " + message[m.end() :]


def with_physics_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command one option per field of ``PhysicsOptions`` — type, default and help generated from the
    dataclass and ``oak.engine.rules.FIELD_HELP`` — and call it with ``physics=PhysicsOptions(...)`` built from
    them (a bad value is the dataclass's input error). The command declares a keyword parameter ``physics``."""
    import dataclasses
    import functools
    import inspect

    from oak.engine.rules import FIELD_HELP, PhysicsOptions

    fields = dataclasses.fields(PhysicsOptions)
    base = inspect.signature(fn, eval_str=True)
    kept = [p for p in base.parameters.values() if p.name != "physics"]
    kinds = {bool: bool, int: int, float: float, str: str}
    generated = []
    for f in fields:
        kind = kinds[type(f.default)]
        help_text = FIELD_HELP[f.name]
        generated.append(
            inspect.Parameter(
                physics_flag(f.name),
                inspect.Parameter.KEYWORD_ONLY,
                default=f.default,
                annotation=Annotated[kind, typer.Option(help=help_text)],  # type: ignore[valid-type]
            )
        )
    names = {physics_flag(f.name): f.name for f in fields}

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        ctx = kwargs.pop(_CTX, None)  # which options were typed (not defaults): a --rules set must not override them
        given = typed_options(ctx, names)
        _check_rules_given(kwargs.get("rules"), {k: kwargs[k] for k in given if k in kwargs})
        values = {names[k]: kwargs.pop(k) for k in list(kwargs) if k in names}
        check_round(values.get("round_s", PhysicsOptions.round_s), values.get("horizon_s", PhysicsOptions.horizon_s))
        try:
            physics = PhysicsOptions(**values)
        except OakInputError as exc:  # the dataclass names its field; the user typed the option
            fail(_physics_message(str(exc)))
        return fn(**kwargs, physics=physics)

    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in kept] + generated
    params.append(inspect.Parameter(_CTX, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context))
    wrapper.__signature__ = base.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params} | {"return": base.return_annotation}
    del wrapper.__wrapped__  # type: ignore[attr-defined]  # typer must read the signature above, not fn's
    return wrapper
