"""``oak export-trace`` and ``oak replay``: a real run as the simulator's input, and its replay (docs/twin.md)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from oak.cli.common import (
    JsonOpt,
    app,
    check_outputs,
    console,
    err_console,
    fail,
    name_list,
    output_file,
    progress_bar,
)


def _trace_of(source: Path) -> dict[str, Any]:
    """A run directory's trace (exported now), or a trace file's."""
    from oak.runtime.export import export_trace, load_trace

    if source.is_dir():
        return export_trace(source)
    if source.is_file():
        return load_trace(source)
    fail(f"{source}: no such run directory or trace file")
    raise AssertionError  # fail() exits


@app.command("export-trace")
def export_trace_cmd(
    run_dir: Annotated[Path, typer.Argument(help="An oak run / oak serve run directory.")],
    out: Annotated[Path, typer.Option(help="Write the trace (JSON) here.", callback=output_file)],
    failures: Annotated[
        Path | None,
        typer.Option(
            help="Also write the run's failures as a failure log CSV (--failure-model trace:FILE).",
            callback=output_file,
        ),
    ] = None,
) -> None:
    """Write what a run recorded as the simulator's input: jobs as submitted, measured step times and restore
    times, results and the failure log."""
    from oak.failures.trace import failure_log_csv
    from oak.io_util import write_atomic, write_json
    from oak.runtime.export import export_trace, failure_events

    if run_dir.is_file():
        fail(f"{run_dir}: a file; expected a run directory (oak replay reads a trace file)")
    if not run_dir.is_dir():
        fail(f"{run_dir}: no such run directory")
    check_outputs({"--out": out, "--failures": failures}, {}, {"RUN_DIR": run_dir})
    trace = export_trace(run_dir)
    write_json(out, trace)
    console.print(f"wrote {out}: {len(trace['jobs'])} job(s), {len(trace['failures'])} failure(s) logged")
    if failures is not None:
        write_atomic(failures, failure_log_csv(failure_events(trace)))
        console.print(f"wrote {failures}")


def _f(x: float | None, digits: int = 0) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{digits}f}"


def _jct(x: float | None) -> str:
    """A JCT in whole seconds, in tenths below 100 s (a short run's 5.9 and 5.5 s both read 6 otherwise)."""
    return _f(x, 1 if x is not None and x < 100 else 0)


@app.command()
def replay(
    source: Annotated[Path, typer.Argument(help="A run directory, or a trace written by oak export-trace.")],
    policies: Annotated[
        str, typer.Option(help="Comma-separated policies to simulate the run under (its own: --policies own).")
    ] = "own,oak,oak-paper,sia",
    seeds: Annotated[int, typer.Option(help="Seeds per policy: the run's seed, then the next ones.")] = 1,
    knowledge: Annotated[
        str,
        typer.Option(
            help="What the policies know of each job's goodput: 'run' (what the run's scheduler knew: catalog "
            "models, online learning) or 'hindsight' (every job's fitted model from the start)."
        ),
    ] = "run",
    json_path: JsonOpt = None,
) -> None:
    """Simulate a real run under its own policy and others, beside its measured result: the sim-to-real gap."""
    from oak.io_util import write_json
    from oak.sim.compare import summarise
    from oak.twin import gap, replay

    check_outputs({"--json": json_path}, {"SOURCE": source}, {"SOURCE": source})
    trace = _trace_of(source)
    own = str(trace["run"]["policy"])
    names = []
    for x in name_list(policies, "--policies", "own,sia"):
        name = own if x == "own" else x
        if name not in names:  # "own" may name a policy given too
            names.append(name)
    if seeds < 1:
        fail(f"--seeds {seeds}: expected a positive integer")
    from oak.policies import make_policy

    for name in names:
        make_policy(name)  # an unknown policy is an input error before anything runs
    from oak.twin import KNOWLEDGE

    if knowledge not in KNOWLEDGE:
        fail(f"--knowledge {knowledge}: expected one of {', '.join(KNOWLEDGE)}")
    with progress_bar() as bar:
        task = bar.add_task(f"simulating {len(names) * seeds} runs", total=len(names) * seeds)
        twin, results = replay(trace, names, seeds, progress=lambda _r: bar.advance(task), knowledge=knowledge)
    if twin.left_out:
        err_console.print(
            f"left out of the replay (measured and simulated): {', '.join(map(repr, twin.left_out))} — never ran a "
            "timed step (no oak.job.report, never started, or still queued), so nothing models their goodput"
        )
    rows = summarise([twin.measured, *results])
    table = Table(title=f"{twin.workload.name}: measured, and simulated over {seeds} seed(s) from seed {twin.seed}")
    for col in ("policy", "λ", "mean JCT (s)", "max JCT (s)", "restarts/job", "unfinished"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for r in rows:
        table.add_row(
            r["policy"],
            f"{r['failure_rate']:g}",
            _jct(r["mean_jct_s"]),
            _jct(r["max_jct_s"]),
            f"{r['restarts_per_job']:.2f}",
            str(r["unfinished_jobs"]),
        )
    console.print(table)
    own_run = next((r for r in results if r.policy == own and r.seed == twin.seed), None)
    g = None
    if own_run is None:
        console.print(
            f"the run's own policy ({own}) was not simulated: add own to --policies for its job-by-job gap to the "
            "measured run"
        )
    else:
        g = gap(twin.measured, own_run)
        _print_gap(own, own_run, twin, g)
    if json_path is not None:
        write_json(
            json_path,
            {
                "knowledge": knowledge,
                "left_out": list(twin.left_out),
                "measured": twin.measured.to_json(),
                "runs": [r.to_json() for r in results],
                "summary": rows,
                "gap": g,
            },
        )
        console.print(f"wrote {json_path}")


def _print_gap(own: str, own_run: Any, twin: Any, g: dict[str, Any]) -> None:
    """The run's own policy, simulated, against the measured run: job by job, then in one line."""
    per_job = Table(title=f"{own} (the run's policy), seed {twin.seed}: simulated against measured")
    for col in (
        "job",
        "JCT measured",
        "JCT simulated",
        "sim / real",
        "restarts m · s",
        "failures m · s",
        "T_ckpt m · s",
    ):
        per_job.add_column(col, justify="left" if col == "job" else "right")
    for r in g["jobs"]:
        per_job.add_row(
            r["job"],
            _f(r["measured_jct_s"], 1),
            _f(r["simulated_jct_s"], 1),
            _f(r["jct_ratio"], 3),
            f"{r['measured_restarts']} · {r['simulated_restarts']}",
            f"{r['measured_failures']} · {r['simulated_failures']}",
            f"{_f(r['measured_t_ckpt_s'], 1)} · {_f(r['simulated_t_ckpt_s'], 1)}",
        )
    console.print(per_job)
    console.print(
        f"mean JCT simulated / measured {_f(g['mean_jct_ratio'], 3)} · worst job |sim/real − 1| "
        f"{_f(g['worst_job_jct_error'], 3)} · restarts equal on {g['restarts_equal']} of {len(g['jobs'])} job(s) · "
        f"failure model: {own_run.failure_model or f'λ = {twin.failure_rate:g} (the run seed drawn again)'}"
    )
