"""``oak``: simulate, compare, inspect workloads, build the catalog, benchmark."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from oak.cli.common import (
    CLUSTER_HELP,
    ClusterOpt,
    GenerationsOpt,
    JsonOpt,
    PopulationOpt,
    RulesOpt,
    SolverOpt,
    app,
    catalog_app,
    check_outputs,
    check_sweep_size,
    console,
    err_console,
    fail,
    failure_log_file,
    jobs_table,
    name_list,
    output_file,
    policy_file,
    progress_bar,
    with_physics_options,
    workloads_app,
)
from oak.errors import OakInputError


def _floats(text: str, what: str) -> list[float]:
    out = []
    for part in text.split(","):
        try:
            out.append(float(part))
        except ValueError:
            fail(f"{what}: {part!r} is not a number (expected a comma-separated list such as 0,0.1)")
    if len(set(out)) != len(out):  # each would be run twice, with the same seeds: the same runs
        fail(f"{what}: duplicate value in {text!r}")
    return out


def _policy_params(policies: list[str], solver: str, **given: Any) -> dict[str, tuple[tuple[str, Any], ...]]:
    """Per policy, the parameters the command line sets for it. p applies to the OAK family, alpha, k_max and
    mu_na to the paper's reading and its ablations, population/generations to the NSGA-II policies; a parameter that applies
    to none of the chosen policies is an error rather than silently ignored."""
    from oak.policies import REGISTRY

    scope = {
        key: tuple(n for n, spec in REGISTRY.items() if key in spec.params)
        for key in ("p", "alpha", "k_max", "mu_na", "population", "generations")
    }
    out: dict[str, tuple[tuple[str, Any], ...]] = {}
    for key, val in given.items():
        if val is not None and not any(pol in scope[key] for pol in policies):
            raise OakInputError(
                f"--{key.replace('_', '-')} applies only to the policies {', '.join(scope[key])}; got {', '.join(policies)}"
            )
    for pol in policies:
        params: dict[str, Any] = {"solver": solver}
        params.update({k: v for k, v in given.items() if v is not None and pol in scope[k]})
        out[pol] = tuple(sorted(params.items()))
    return out


@app.command()
@with_physics_options
def simulate(
    workload: Annotated[str, typer.Option(help="Embedded workload name or CSV path.")] = "medium",
    policy: Annotated[
        str, typer.Option(help="A built-in policy, or your own as FILE.py:NAME or MODULE:NAME (docs/policies.md).")
    ] = "oak",
    failure_rate: Annotated[float, typer.Option(help="λ: failure probability per round per running job.")] = 0.0,
    seed: Annotated[int, typer.Option(help="Seed of the failure stream.")] = 0,
    cluster: ClusterOpt = "paper-12",
    p: Annotated[float | None, typer.Option(help="OAK fairness exponent p (>= 0).")] = None,
    alpha: Annotated[float | None, typer.Option(help="OAK age-key sensitivity α (1/s).")] = None,
    k_max: Annotated[float | None, typer.Option(help="OAK age-key cap K_max (>= 1).")] = None,
    mu_na: Annotated[float | None, typer.Option(help="Objective value of an unallocated job μ_na.")] = None,
    population: PopulationOpt = None,
    generations: GenerationsOpt = None,
    solver: SolverOpt = "auto",
    rules: RulesOpt = "default",
    json_path: JsonOpt = None,
    trace_jobs: Annotated[
        Path | None,
        typer.Option(
            help="Write each job's state in every round (GPUs, restarts, failures, restart factors) to this "
            "Parquet file.",
            callback=output_file,
        ),
    ] = None,
    trace_plot: Annotated[
        Path | None,
        typer.Option(
            help="Plot the three longest-running jobs' GPUs and restart factors over time to this PNG.",
            callback=output_file,
        ),
    ] = None,
    physics: Any = None,
) -> None:
    """Simulate one run and print per-job and per-run metrics."""
    from oak.engine.rules import with_rules
    from oak.io_util import write_json
    from oak.sim.compare import RunSpec, run_one

    check_outputs(
        {"--json": json_path, "--trace-jobs": trace_jobs, "--trace-plot": trace_plot},
        {"--workload": workload, "--policy": policy_file(policy), "--failure-model": failure_log_file(physics)},
    )
    physics = with_rules(physics, rules)
    params = _policy_params(
        [policy], solver, p=p, alpha=alpha, k_max=k_max, mu_na=mu_na, population=population, generations=generations
    )
    spec = RunSpec(policy, workload, failure_rate, seed, cluster, physics, params[policy])
    _check_spec(spec)
    bar = progress_bar()
    task = bar.add_task(f"simulating {policy}", total=None)

    def progress(t: float, finished: int, jobs: int) -> None:
        if not bar.live.is_started:  # drawn from the run's first call: an input error before it shows no bar
            bar.start()
        bar.update(task, completed=finished, total=jobs, description=f"simulating {policy}: {t / 3600:,.1f} h, jobs")

    if trace_jobs is not None or trace_plot is not None:
        import contextlib
        import tempfile

        from oak.io_util import write_bytes_atomic
        from oak.sim.trace import plot_trace, run_traced

        with contextlib.ExitStack() as scratch:
            # without --trace-jobs, the plot reads the trace from a file that goes away with it
            path = trace_jobs
            if path is None:
                path = Path(scratch.enter_context(tempfile.TemporaryDirectory(prefix="oak-trace-"))) / "trace.parquet"
            try:
                result, counts = run_traced(spec, path, on_progress=progress)
            finally:
                bar.stop()
            if trace_jobs is not None:
                console.print(f"wrote {sum(counts.values()):,} job-rounds to {trace_jobs}")
                console.print(
                    'why jobs held what they held (job-rounds per reason; docs/jobs.md, "Why a job waits"): '
                    + ", ".join(f"{c} {n:,}" for c, n in counts.items())
                )
            if trace_plot is not None:
                from oak.engine.rules import rules_of

                title = f"{policy} on {result.workload}, λ = {failure_rate:g}, seed {seed}, {rules_of(physics)} rules"
                write_bytes_atomic(trace_plot, plot_trace(path, title))
                console.print(f"wrote {trace_plot}")
    else:
        try:
            result = run_one(spec, on_progress=progress)
        finally:
            bar.stop()
    table = jobs_table(result, f"{policy} on {result.workload}, λ = {failure_rate:g}, seed {seed}")
    console.print(table)
    s = result.summary()
    ge = "≥ " if s["unfinished_jobs"] else ""  # unfinished jobs count at the horizon: the statistics are lower bounds
    console.print(
        f"mean JCT {ge}{s['mean_jct_s']:,.0f} s · median {ge}{s['median_jct_s']:,.0f} s · "
        f"p99 {ge}{s['p99_jct_s']:,.0f} s · max {ge}{s['max_jct_s']:,.0f} s · makespan {s['makespan_s']:,.0f} s · restarts/job {s['restarts_per_job']:.2f} · "
        f"decision {s['decision_ms_mean']:.3f} ms mean, {s['decision_ms_p95']:.3f} ms p95 · {s['rounds']} rounds"
        + (f" · [bold red]{s['unfinished_jobs']} unfinished at the horizon[/]" if s["unfinished_jobs"] else "")
    )
    if json_path is not None:
        write_json(json_path, {"runs": [result.to_json()]})
        console.print(f"wrote {json_path}")


def _distinct_labels(specs: list[Any], results: list[Any]) -> list[Any]:
    """The results with each policy labelled so that no two policies given share a row: a policy whose own
    name is another's (a plugin named ``oak`` beside ``oak``) is labelled ``NAME (AS GIVEN)``, as
    ``oak reproduce --add-policies`` does; the others keep their own names."""
    import dataclasses

    given: dict[str, set[str]] = {}
    for spec, res in zip(specs, results, strict=True):
        given.setdefault(res.policy, set()).add(spec.policy)
    return [
        dataclasses.replace(res, policy=f"{res.policy} ({spec.policy})")
        if len(given[res.policy]) > 1 and spec.policy != res.policy
        else res
        for spec, res in zip(specs, results, strict=True)
    ]


def _check_spec(spec: Any) -> None:
    """Fail early, with a clear message, on a bad policy, workload or parameter."""
    from oak.model.cluster import cluster_preset
    from oak.policies import make_policy
    from oak.solve import SOLVER_METHODS
    from oak.workloads import load_workload

    params = dict(spec.policy_params)
    if params.get("solver") not in SOLVER_METHODS:
        raise OakInputError(f"--solver {params.get('solver')!r}: expected one of {', '.join(SOLVER_METHODS)}")
    make_policy(spec.policy, **params)
    cluster_preset(spec.cluster)
    from oak.catalog import Catalog

    load_workload(spec.workload, known_apps=Catalog.load().apps.keys())
    if not 0.0 <= spec.failure_rate <= 1.0:
        raise OakInputError(f"--failure-rate {spec.failure_rate!r}: expected a probability in [0, 1]")
    from oak.failures.rng import seed_problem

    if (problem := seed_problem(spec.seed)) is not None:
        raise OakInputError(f"--seed {problem}")


@app.command()
@with_physics_options
def compare(
    workload: Annotated[str, typer.Option(help="Embedded workload name or CSV path.")] = "medium",
    policies: Annotated[
        str,
        typer.Option(
            help="Comma-separated policies: built-in names (oak, oak-paper, goodput, sia, sia-paper, pollux, hybrid-oak, gavel, drf, ablations) or your own FILE.py:NAME / MODULE:NAME (docs/policies.md)."
        ),
    ] = "oak,sia,goodput",
    failure_rates: Annotated[str, typer.Option(help="Comma-separated λ values.")] = "0,0.1",
    seeds: Annotated[int, typer.Option(help="Seeds per cell (0..N-1), paired across policies.")] = 5,
    workers: Annotated[int | None, typer.Option(help="Worker processes (default: CPU count).")] = None,
    cluster: ClusterOpt = "paper-12",
    p: Annotated[float | None, typer.Option(help="OAK-family fairness exponent p (>= 0).")] = None,
    alpha: Annotated[float | None, typer.Option(help="OAK-family age-key sensitivity α (1/s).")] = None,
    k_max: Annotated[float | None, typer.Option(help="OAK-family age-key cap K_max (>= 1).")] = None,
    mu_na: Annotated[float | None, typer.Option(help="OAK-family objective value of an unallocated job.")] = None,
    population: PopulationOpt = None,
    generations: GenerationsOpt = None,
    solver: SolverOpt = "auto",
    rules: RulesOpt = "default",
    json_path: JsonOpt = None,
    physics: Any = None,
) -> None:
    """Paired comparison of policies × failure rates × seeds; prints a table of means over seeds."""
    from oak.engine.rules import with_rules
    from oak.io_util import write_json
    from oak.sim.compare import RunSpec, common_node_failures, run_many, summarise
    from oak.sim.pool import WorkerDied

    physics = with_rules(physics, rules)
    names = name_list(policies, "--policies")
    check_outputs(
        {"--json": json_path},
        {"--workload": workload, "--failure-model": failure_log_file(physics), **{n: policy_file(n) for n in names}},
    )
    lams = _floats(failure_rates, "--failure-rates")
    for lam in lams:
        if not 0.0 <= lam <= 1.0:  # also NaN
            fail(f"--failure-rates {failure_rates!r}: {lam!r} is not a probability in [0, 1]")
    if seeds < 1:
        fail(f"--seeds {seeds}: expected a positive integer")
    check_sweep_size(len(names) * len(lams) * seeds, f"--seeds {seeds}")
    if workers is not None and workers < 1:
        fail(f"--workers {workers}: expected a positive integer")
    params = _policy_params(
        names, solver, p=p, alpha=alpha, k_max=k_max, mu_na=mu_na, population=population, generations=generations
    )
    specs = [
        RunSpec(pol, workload, lam, seed, cluster, physics, params[pol])
        for lam in lams
        for pol in names
        for seed in range(seeds)
    ]
    for s in {(s.policy, s.failure_rate): s for s in specs}.values():
        _check_spec(s)
    try:
        with progress_bar() as bar:
            task = bar.add_task(f"simulating {len(specs)} runs", total=len(specs))
            results = run_many(specs, workers=workers, progress=lambda _r: bar.advance(task))
    except WorkerDied as exc:  # not the input's fault: exit 1, in one line
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}; nothing was written", highlight=False)
        raise typer.Exit(code=1) from None
    results = _distinct_labels(specs, results)
    rows = summarise(results)
    hardware = any(r.failure_model for r in results)
    table = Table(title=f"{results[0].workload}: mean over {seeds} paired seeds")
    for col in (
        "policy",
        "λ",
        "mean JCT (s)",
        "±95% CI",
        "max JCT (s)",
        "p99 JCT (s)",
        "restarts/job",
        "decision (ms)",
        "unfinished (all seeds)",  # a count over the seeds' runs, not a mean like the columns before it
        *(("node failures", "lost GPU-h", "effective") if hardware else ()),
    ):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for r in rows:
        extra = (
            (f"{r['node_failures']:.1f}", f"{r['lost_gpu_hours']:,.1f}", f"{100 * r['effective_training']:.1f} %")
            if hardware
            else ()
        )
        ge = "≥ " if r["unfinished_jobs"] else ""  # unfinished jobs count at the horizon: lower bounds
        table.add_row(
            r["policy"],
            f"{r['failure_rate']:g}",
            f"{ge}{r['mean_jct_s']:,.0f}",
            "—" if r["mean_jct_ci95_s"] is None else f"{r['mean_jct_ci95_s']:,.0f}",
            f"{ge}{r['max_jct_s']:,.0f}",
            f"{ge}{r['p99_jct_s']:,.0f}",
            f"{r['restarts_per_job']:.2f}",
            f"{r['decision_ms_mean']:.3f}",
            str(r["unfinished_jobs"]),
            *extra,
        )
    console.print(table)
    if hardware:
        console.print(
            f"failure model {results[0].failure_model}; node failures: hardware events up to the earliest end among "
            "the paired runs of each seed (the same for every policy; --json also gives node_failures_in_run)"
        )
    if json_path is not None:
        docs = []
        for run in results:
            d = run.to_json()
            if hardware:  # the paired count: the same for every policy of a seed; the run's own beside it
                d["node_failures_in_run"] = d["node_failures"]
                d["node_failures"] = common_node_failures(run, results)
            docs.append(d)
        write_json(json_path, {"runs": docs, "summary": rows})
        console.print(f"wrote {json_path}")


@workloads_app.command("list")
def workloads_list() -> None:
    """The embedded workloads."""
    from oak.workloads import builtin_workloads, load_workload

    table = Table(title="embedded workloads")
    for col in ("name", "jobs", "description"):
        table.add_column(col)
    for name in builtin_workloads():
        w = load_workload(name)
        table.add_row(name, str(len(w.jobs)), w.description)
    console.print(table)


@workloads_app.command("show")
def workloads_show(name: Annotated[str, typer.Argument(help="Embedded workload name or CSV path.")]) -> None:
    """The jobs of one workload."""
    from oak.catalog import Catalog
    from oak.workloads import load_workload

    w = load_workload(name, known_apps=Catalog.load().apps.keys())
    table = Table(title=f"{w.name}: {w.description}")
    for col in ("job", "application", "submit (s)", "min GPUs", "max GPUs"):
        table.add_column(col)
    for j in w.jobs:
        table.add_row(j.name, j.application, f"{j.submit_time_s:,.0f}", str(j.min_gpus), str(j.max_gpus))
    console.print(table)


@workloads_app.command("synth")
def workloads_synth(
    out: Annotated[
        Path, typer.Option(help="Output workload CSV (OAK format; written atomically).", callback=output_file)
    ],
    source: Annotated[str, typer.Option("--from", help="Trace family to derive from: philly.")] = "philly",
    jobs: Annotated[int, typer.Option(help="Number of jobs (> 0).")] = 160,
    cluster: Annotated[str, typer.Option(help=f"Cluster the GPU bounds are clipped to. {CLUSTER_HELP}")] = "sia-64",
    scale: Annotated[
        float | None,
        typer.Option(
            help="Arrival-rate multiplier K (> 0): mean gap 180 s / K, Sia's 64-GPU rate times K. "
            "Default: the cluster preset's xK multiplier (1 without one)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed (>= 0) of the only random generator used.")] = 0,
    trace: Annotated[
        Path | None,
        typer.Option(help="Sample this raw Philly-format trace CSV instead of the packaged summary."),
    ] = None,
) -> None:
    """Synthesise a trace-derived workload (see docs/workloads.md) and write it as an OAK-format CSV."""
    from collections import Counter

    from oak.io_util import write_atomic
    from oak.model.cluster import preset_scale
    from oak.workloads.philly import synth_workload_text

    if source != "philly":
        raise OakInputError(f"--from {source!r}: expected philly (the only trace family so far)")
    check_outputs({"--out": out}, {"--trace": trace})
    k = float(preset_scale(cluster)) if scale is None else scale
    text, made = synth_workload_text(jobs, cluster, k, seed, trace)
    try:
        write_atomic(out, text)
    except OSError as exc:
        raise OakInputError(f"--out {out}: cannot write the workload: {exc}") from exc
    apps = ", ".join(f"{a} {n}" for a, n in sorted(Counter(j.application for j in made).items()))
    span_h = made[-1].submit_time_s / 3600.0
    console.print(f"wrote {out}: {len(made)} jobs over {span_h:,.2f} h (arrivals x{k:g}); {apps}")


@catalog_app.command("build")
def catalog_build(
    profiles: Annotated[
        Path, typer.Argument(help="Folder of per-application profiles, e.g. ../shared/data/sia/profiles")
    ],
    out: Annotated[
        Path | None, typer.Option(help="Output path (default: the packaged catalog).", callback=output_file)
    ] = None,
) -> None:
    """Fit the throughput model per application and GPU type and write the catalog."""
    from oak.catalog.build import build_catalog, gpu_type_gaps, write_catalog

    if not profiles.is_dir():
        fail(f"{profiles}: not a folder of profiles (expected e.g. ../shared/data/sia/profiles)")
    target = out if out is not None else Path(__file__).resolve().parents[1] / "catalog" / "data" / "catalog.json"
    with console.status("fitting throughput models"):
        catalog = build_catalog(profiles)
    write_catalog(catalog, target)
    types = sorted({t for a in catalog.apps.values() for t in a.gpus})
    console.print(f"wrote {target}: {len(catalog.apps)} applications; GPU types {', '.join(types)}")
    for name, missing in gpu_type_gaps(catalog).items():
        err_console.print(
            f"[yellow]warning:[/] {name} has no profile of {', '.join(missing)} (no placements-<gpu>.csv in "
            f"{profiles / name}): its jobs cannot run on those GPU types",
            highlight=False,
        )


failures_app = typer.Typer(
    no_args_is_help=True, help="Hardware failure models and their published sources.", rich_markup_mode=None
)
app.add_typer(failures_app, name="failures")


@failures_app.command("list")
def failures_list() -> None:
    """List the failure-model presets (--failure-model NAME[:key=value,...]) with their parameters and sources."""
    from oak.failures.hardware import PRESETS

    table = Table(title="failure models (rates per 1,000 node-days / domain-days / job-hours; scale=K multiplies them)")
    for col in ("name", "parameters", "source"):
        table.add_column(col, overflow="fold")
    for name, m in PRESETS.items():
        table.add_row(name, m.describe().partition("(")[2].rstrip(")") or "—", m.source)
    console.print(table)


def _print_version(value: bool) -> None:
    if value:
        from oak.version import __version__

        print(f"oak {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print OAK's version and exit."),
    ] = False,
) -> None:
    """OAK: restart- and age-aware scheduling of deep-learning jobs on shared, failure-prone GPU clusters."""


def main() -> None:
    """Entry point: user errors exit with status 2 and a one-line message, never a traceback."""
    try:
        app(standalone_mode=True)
    except OakInputError as exc:  # pragma: no cover - exercised through the CLI tests
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        sys.exit(2)


from oak.cli import bench as _bench  # noqa: E402,F401  (registers the bench commands)
from oak.cli import reproduce as _reproduce  # noqa: E402,F401  (registers the reproduce command)
from oak.cli import run as _run  # noqa: E402,F401  (registers the run command)
from oak.cli import serve as _serve  # noqa: E402,F401  (registers serve, submit, status, cancel, logs)
from oak.cli import twin as _twin  # noqa: E402,F401  (registers export-trace and replay)
