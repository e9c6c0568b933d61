"""``oak reproduce``: the paper's evaluation in one command."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Annotated

import typer

from oak.cli.common import app, check_sweep_size, console, err_console, fail, name_list, output_dir, progress_bar


@app.command()
def reproduce(
    experiment: Annotated[
        str, typer.Argument(help="An experiment name (see --list), several joined by commas, or 'all'.")
    ] = "all",
    out: Annotated[
        Path,
        typer.Option(help="Output folder: results store, report.md, report.html, figures.", callback=output_dir),
    ] = Path("results/oak"),
    seeds: Annotated[int | None, typer.Option(help="Seeds per cell (default 3; 1 with --quick).")] = None,
    paper_seeds: Annotated[bool, typer.Option("--paper-seeds", help="The paper's seed count per experiment.")] = False,
    quick: Annotated[bool, typer.Option("--quick", help="Small faithful version (what CI runs).")] = False,
    backend: Annotated[str, typer.Option(help="local (process pool) or ray.")] = "local",
    address: Annotated[str | None, typer.Option(help="Ray cluster address (default: start a local Ray).")] = None,
    workers: Annotated[int | None, typer.Option(help="Parallel simulations (default: CPU count).")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the experiments and exit.")] = False,
    scale: Annotated[
        str, typer.Option(help="table4 only: small (CPU, minutes) or full (the paper's sizes).")
    ] = "small",
    cpu_slots: Annotated[int | None, typer.Option(help="table4 only: CPU worker slots as devices (default 4).")] = None,
    gpus: Annotated[
        str | None,
        typer.Option(
            help="table4 only: a GPU count, or auto (the visible GPUs, at most the paper's 4) instead of CPU slots."
        ),
    ] = None,
    rules: Annotated[
        str,
        typer.Option(
            help="Simulator rules of every run: 'default' or 'sia-artifact' (the Sia artifact's rules; the report "
            "then also compares the claims with the other rule set's runs stored in OUT)."
        ),
    ] = "default",
    failure_restarts: Annotated[
        int, typer.Option(help="Restarts a failure adds to a job's count n in every run: 0, 1 or 2.")
    ] = 1,
    goodput: Annotated[
        str,
        typer.Option(
            help="What every policy knows of goodput: 'known' (the truth) or 'learned' (fitted online from noisy "
            "step times, 1-GPU start, 2x exploration cap; docs/model.md)."
        ),
    ] = "known",
    traces: Annotated[
        Path | None,
        typer.Option(help="restart-aware only: a folder of Sia-format traces (*.csv) to run on sia-64 as well."),
    ] = None,
    failure_model: Annotated[
        str,
        typer.Option(help="Hardware failure model of every run, NAME[:key=value,...] ('oak failures list')."),
    ] = "paper",
    add_policies: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated policies to run beside every baseline in fig3-baselines, e.g. your own "
            "FILE.py:NAME (docs/policies.md)."
        ),
    ] = None,
) -> None:
    """Run the paper's experiments (resuming what is stored in OUT) and write the paper-vs-ours report."""
    from oak.reproduce.experiments import EXPERIMENTS, PAPER_EXPERIMENTS, SeedPlan
    from oak.reproduce.report import write_report
    from oak.reproduce.runner import Terminated, execute
    from oak.reproduce.store import ResultsStore
    from oak.sim.pool import WorkerDied

    if list_:
        for e in EXPERIMENTS.values():
            console.print(f"{e.name:18} {e.paper_ref:16} {e.title}", markup=False, highlight=False)
        console.print(f"{'table4':18} {'§V-F Table IV':16} real training processes (oak run), not part of 'all'")
        return
    if experiment == "table4":
        _table4(out, scale, cpu_slots, gpus, seeds)
        return
    # options of table4 alone: given to a simulated experiment they would be ignored without a word
    for flag, value, default in (("--scale", scale, "small"), ("--cpu-slots", cpu_slots, None), ("--gpus", gpus, None)):
        if value != default:
            fail(f"{flag} applies only to the experiment table4 (real training processes); got {experiment!r}")
    if quick and paper_seeds:
        fail("--quick and --paper-seeds: give one or the other (--quick runs 1 seed, --paper-seeds the paper's)")
    from oak.reproduce.runner import BACKENDS

    if backend not in BACKENDS:
        fail(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if address is not None and backend != "ray":
        fail(f"--address {address}: applies to --backend ray (the {backend} backend would ignore it)")
    if seeds is not None and paper_seeds:
        fail("--seeds and --paper-seeds: give one or the other")
    if seeds is not None and seeds < 1:
        fail(f"--seeds {seeds}: expected a positive integer")
    if seeds is not None:
        check_sweep_size(seeds, f"--seeds {seeds}")  # a cell's runs, before every cell's are listed
    if workers is not None and workers < 1:
        fail(f"--workers {workers}: expected a positive integer")
    names = list(PAPER_EXPERIMENTS) if experiment == "all" else name_list(experiment, "experiment", "fig3-baselines")
    for n in names:
        if n not in EXPERIMENTS:
            fail(f"experiment {n!r} is unknown; expected 'all' or one of {', '.join(EXPERIMENTS)}")
    trace_files: tuple[str, ...] = ()
    if traces is not None:
        if "restart-aware" not in names:
            fail("--traces applies only to the experiment restart-aware")
        if not traces.is_dir():
            fail(f"--traces {traces}: not a folder")
        trace_files = tuple(str(p) for p in sorted(traces.glob("*.csv")))
        if not trace_files:
            fail(f"--traces {traces}: no *.csv trace in the folder")
        from oak.workloads import load_workload

        for t in trace_files:
            load_workload(t)  # a malformed trace is an input error (file, line, field) before anything runs
    from oak.engine.rules import RULES

    if rules not in RULES:
        fail(f"--rules {rules!r}: expected one of {', '.join(RULES)}")
    if failure_restarts not in (0, 1, 2):
        fail(f"--failure-restarts {failure_restarts}: expected 0, 1 or 2")
    from oak.engine.rules import GOODPUT_KNOWLEDGE

    if goodput not in GOODPUT_KNOWLEDGE:
        fail(f"--goodput {goodput!r}: expected one of {', '.join(GOODPUT_KNOWLEDGE)}")
    extra = tuple(name_list(add_policies, "--add-policies", "gavel,drf")) if add_policies is not None else ()
    if extra and "fig3-baselines" not in names:
        fail("--add-policies applies to the experiment fig3-baselines (every baseline, λ = 0, paired runs)")
    from oak.failures.hardware import parse_failure_model
    from oak.policies import policy_spec

    parse_failure_model(failure_model)  # a bad model is an input error before anything runs

    for pol in extra:
        policy_spec(pol)  # an unknown name or a broken plug-in is an input error before anything runs
    plan = SeedPlan(
        seeds=seeds,
        paper=paper_seeds,
        quick=quick,
        traces=trace_files,
        rules=rules,
        failure_restarts=failure_restarts,
        extra_policies=extra,
        failure_model=failure_model,
        goodput=goodput,
    )
    specs = [s for n in names for cell in EXPERIMENTS[n].cells(plan) for s in cell.specs]
    check_sweep_size(len(specs), f"--seeds {seeds}" if seeds is not None else experiment)
    try:
        store = ResultsStore(out, exclusive=True)  # one writer per --out: a second would drop the first one's runs
    except OSError as exc:  # a folder the checks before could not foresee (/proc: writable to root, yet no mkdir)
        fail(f"--out {out}: cannot create the results store there ({exc.strerror or exc})")
    todo = store.missing(specs)
    total = len(set(specs))
    console.print(
        f"{total} runs in {len(names)} experiment(s); {total - len(todo)} already stored in {out}; "
        f"running {len(todo)} on the {backend} backend"
    )
    start = time.perf_counter()
    done = 0

    def advance(_s: object, _r: object) -> None:
        nonlocal done
        done += 1
        bar.advance(task)

    try:
        with progress_bar() as bar:
            task = bar.add_task("simulating", total=len(todo))
            execute(specs, store, backend, workers, address, progress=advance)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the complete runs are stored (execute flushed them)
        err_console.print(
            f"interrupted: {done} of {len(todo)} runs done, stored in {out}; run the same command again to resume",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(code=128 + int(exc.signum if isinstance(exc, Terminated) else signal.SIGINT)) from None
    except WorkerDied as exc:  # the complete runs are stored (execute flushed them); not the input's fault: exit 1
        err_console.print(
            f"error: {exc}; {done} of {len(todo)} runs done, stored in {out}; run the same command again to resume",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(code=1) from None
    wall = time.perf_counter() - start
    report = write_report(out, names, plan, store, wall_s=wall)
    console.print(f"simulated {len(todo)} runs in {wall:,.0f} s; report: {report} and {report.with_suffix('.html')}")
    fresh = bool(todo) and len(todo) == total  # nothing stored before: the whole evaluation's time
    if experiment == "all" and paper_seeds and not quick and fresh and backend == "local":
        from oak.cli.bench import reproduce_goal

        cpus = os.cpu_count() or 1
        whole = time.perf_counter() - start  # the report included
        console.print(reproduce_goal(whole, cpus, workers or cpus).line())


def _table4(out: Path, scale: str, cpu_slots: int | None, gpus: str | None, seeds: int | None) -> None:
    """``oak reproduce table4``: the four-job experiment on real workers (see oak.reproduce.table4)."""
    from oak.cli.run import MAX_CPU_SLOTS, _gpu_count
    from oak.reproduce.table4 import POLICIES, RATES, SCALES, run_table4, write_table4_report

    if scale not in SCALES:
        fail(f"--scale {scale!r}: expected one of {', '.join(SCALES)}")
    if cpu_slots is not None and gpus is not None:
        fail("give at most one of --cpu-slots and --gpus")
    if seeds is not None and seeds < 1:
        fail(f"--seeds {seeds}: expected a positive integer")
    if seeds is not None:
        check_sweep_size(seeds, f"--seeds {seeds}")  # a cell's runs, before every cell's are listed
    if gpus is not None:
        devices, kind = _gpu_count(gpus, auto_max=4), "gpu"  # auto: the paper's 4 GPUs, not all of an 8-GPU box
    else:
        devices, kind = (cpu_slots if cpu_slots is not None else 4), "cpu"
        if not 1 <= devices <= MAX_CPU_SLOTS:
            fail(
                f"--cpu-slots {devices}: expected an integer from 1 to {MAX_CPU_SLOTS:,} (one worker process per slot)"
            )
    n_seeds = seeds if seeds is not None else 1
    total = len(POLICIES) * len(RATES) * n_seeds
    console.print(
        f"table4 at scale {scale}: {total} runs ({len(POLICIES)} policies × λ {', '.join(f'{r:g}' for r in RATES)} × "
        f"{n_seeds} seed(s)) on {devices} {kind} devices"
        + (" — CPU processes stand in for GPUs" if kind == "cpu" else "")
    )
    start = time.perf_counter()
    with progress_bar() as bar:
        task = bar.add_task("table4", total=total)
        results = run_table4(
            out, scale, devices, kind, seeds=n_seeds, progress=lambda key: bar.update(task, advance=1, description=key)
        )
    wall = time.perf_counter() - start
    path = write_table4_report(out, results, scale, f"{devices} {kind}", wall)
    console.print(path.read_text(encoding="utf-8"))
    console.print(f"report: {path}")
