"""``oak run``: schedule real PyTorch training jobs from a jobs file (the runtime backend)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.markup import escape

from oak.cli.common import (
    app,
    check_outputs,
    console,
    err_console,
    fail,
    jobs_table,
    output_dir,
    output_file,
    policy_file,
)

if TYPE_CHECKING:
    from oak.runtime.executor import Executor
    from oak.runtime.nodes import RuntimeNode


def print_run_table(result: Any, title: str, ended: dict[str, str] | None = None) -> None:
    """Per-job and per-run metrics of a RunResult (the same columns as ``oak simulate``); ``ended``: how the
    unfinished jobs that are over ended (``failed``, ``cancelled``)."""
    table = jobs_table(result, title, digits=1, ended=ended)
    console.print(table)
    s = result.summary()
    left, n = s["unfinished_jobs"], len(result.jobs)
    if left == n:  # nothing finished: a JCT would be the time so far, not a result
        over = [v for k, v in (ended or {}).items() if any(j.name == k and j.jct_s is None for j in result.jobs)]
        how = "".join(f", {over.count(v)} {v}" for v in sorted(set(over)))
        head = f"no job finished ({n} of {n} unfinished{how}) · {s['makespan_s']:,.1f} s run"
    else:  # unfinished jobs count with their time so far: the true means are larger
        at_least = "≥ " if left else ""
        head = (
            f"mean JCT {at_least}{s['mean_jct_s']:,.1f} s · max {at_least}{s['max_jct_s']:,.1f} s · "
            f"makespan {s['makespan_s']:,.1f} s"
        )
    console.print(
        f"{head} · restarts/job {s['restarts_per_job']:.2f} · decision {s['decision_ms_mean']:.3f} ms mean · "
        f"{s['rounds']} rounds · {left} unfinished" + (" (counted with their time so far)" if 0 < left < n else "")
    )


@app.command("run")
def run_jobs(
    ctx: typer.Context,
    jobs_file: Annotated[Path, typer.Argument(help="Jobs file (YAML); see docs/runtime.md.")],
    policy: Annotated[
        str,
        typer.Option(
            help="Policy: oak, goodput, sia, pollux, hybrid-oak, gavel, drf, ..., or your own FILE.py:NAME (docs/policies.md)."
        ),
    ] = "oak",
    gpus: Annotated[str | None, typer.Option(help="'auto' (every visible CUDA GPU) or a count.")] = None,
    cpu_slots: Annotated[int | None, typer.Option(help="Treat N CPU worker processes as the devices.")] = None,
    failure_rate: Annotated[float, typer.Option(help="λ: SIGKILL probability per round per running job.")] = 0.0,
    round_seconds: Annotated[float, typer.Option(help="Seconds per scheduling round.")] = 60.0,
    seed: Annotated[int, typer.Option(help="Seed of the failure stream and the workers.")] = 0,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            help="Run directory (state.sqlite, job folders); the same one resumes a run.", callback=output_dir
        ),
    ] = None,
    profile_type: Annotated[
        str | None, typer.Option(help="Catalog GPU type whose goodput model scores allocations (cpu: aws).")
    ] = None,
    time_limit: Annotated[
        float | None, typer.Option(help="Stop after this many seconds (unfinished reported).")
    ] = None,
    backend: Annotated[
        str, typer.Option(help="local (processes), ray, or slurm (one SLURM batch job per incarnation).")
    ] = "local",
    address: Annotated[str | None, typer.Option(help="Ray address (default: start a local Ray).")] = None,
    cluster_from: Annotated[
        str | None,
        typer.Option(help="slurm|ray: plan over the running cluster's nodes (jobs may span nodes); as --backend."),
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the run as JSON to this path.", callback=output_file)
    ] = None,
    max_retries: Annotated[
        int, typer.Option(help="A job failing this many times in a row without progress fails for good.")
    ] = 3,
    stop_seconds: Annotated[float, typer.Option(help="Grace period of a stop (SIGTERM) before SIGKILL.")] = 60.0,
    stall_seconds: Annotated[
        float, typer.Option(help="Kill as failed a job whose status is older than this (a hung collective).")
    ] = 180.0,
    retry_failed: Annotated[
        bool, typer.Option(help="Resuming a run directory: place again the jobs it had given up on.")
    ] = False,
) -> None:
    """Run the jobs of JOBS_FILE under a policy on local devices (or a Ray or SLURM cluster), with injected failures."""
    from oak.catalog import Catalog
    from oak.io_util import write_json
    from oak.policies import make_policy
    from oak.runtime.jobs_file import load_jobs_file
    from oak.runtime.scheduler import RuntimeOptions, RuntimeScheduler
    from oak.service.protocol import lock_run_dir

    # every plain parameter is checked before anything is loaded or built, with the option's name
    check_runtime_options(
        backend,
        gpus,
        cpu_slots,
        failure_rate,
        seed,
        max_retries,
        round_seconds=round_seconds,
        stop_seconds=stop_seconds,
        stall_seconds=stall_seconds,
    )
    directory = (
        run_dir if run_dir is not None else Path("runs") / f"{jobs_file.stem}-{policy}-l{failure_rate:g}-s{seed}"
    )
    check_outputs(
        {"--json": json_path},
        {"JOBS_FILE": jobs_file, "--policy": policy_file(policy)},
        {"--run-dir" if run_dir is not None else "the default --run-dir": directory},
    )
    if time_limit is not None and not time_limit > 0:
        fail(f"--time-limit {time_limit!r}: expected a positive number of seconds")
    pol = make_policy(policy, seed=seed)  # an unknown policy fails here (OakInputError: exit 2)
    catalog = Catalog.load()
    jobs = load_jobs_file(jobs_file, tuple(catalog.apps))
    if cpu_slots is not None:
        err_console.print(f"no GPUs used: {cpu_slots} CPU worker slots stand in for devices (--cpu-slots)")
    executor, devices, kind, nodes = make_executor(backend, gpus, cpu_slots, address, directory, cluster_from)
    ptype = profile_type_of(profile_type, kind, catalog)
    try:  # held while the command runs: a second scheduler on the directory would run every job again
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = lock_run_dir(directory)
    except OSError as exc:
        fail(f"--run-dir {directory}: cannot be written ({exc.strerror or exc})")
    if lock is not None:
        ctx.call_on_close(lambda: os.close(lock))
    opts = RuntimeOptions(
        nodes=nodes,
        devices=devices,
        device_kind=kind,
        profile_type=ptype,
        failure_rate=failure_rate,
        round_s=round_seconds,
        seed=seed,
        time_limit_s=time_limit,
        stop_timeout_s=stop_seconds,
        stall_s=stall_seconds,
        max_retries=max_retries,
        retry_failed=retry_failed,
    )
    sched = RuntimeScheduler(jobs, pol, directory, opts, executor=executor, catalog=catalog)
    err_console.print(f"run directory: {directory}")
    from oak.cli.common import progress_bar

    with progress_bar() as bar:
        task = bar.add_task(f"{policy} · λ={failure_rate:g}", total=len(jobs.jobs))

        def tick(now: float, done: int, total: int) -> None:
            bar.update(task, completed=done, description=f"{policy} · λ={failure_rate:g} · t={now:,.0f} s")

        result = sched.run(progress=tick)
    ended = {r.name: r.state for r in sched.records if r.state in ("failed", "cancelled")}
    print_run_table(
        result, f"{policy} on {jobs_file.name} ({devices} {kind} devices), λ = {failure_rate:g}, seed {seed}", ended
    )
    corrupt = {r.name: (r.corrupt_skipped, r.lost_steps) for r in sched.records if r.corrupt_skipped}
    for name, (n, lost) in corrupt.items():
        err_console.print(f"{name}: {n} corrupt checkpoint(s) skipped on resume, {lost} step(s) recomputed")
    if json_path is not None:
        write_json(json_path, {"runs": [result.to_json()]})  # the shape of `oak simulate --json`
        console.print(f"wrote {json_path}")
    if sched.interrupted:
        err_console.print(f"interrupted: jobs stopped after a checkpoint; resume with --run-dir {directory}")
        raise typer.Exit(code=130)
    gave_up = [r for r in sched.records if r.gave_up is not None]
    for r in gave_up:
        note = sched.failure_notes.get(r.name, r.gave_up or "")
        err_console.print(f"[bold red]{escape(r.name)} failed[/]: {escape(note)}", highlight=False)
    if gave_up:
        err_console.print(f"{len(gave_up)} job(s) failed for good; their logs: {directory / 'jobs'}/NAME/rank*.log")
        raise typer.Exit(code=1)


MAX_CPU_SLOTS = 4096
"""Most ``--cpu-slots``: the largest cluster the simulator's presets model (4,096 GPUs); a slot is a worker
process, and a count far beyond any machine's only costs the scheduler memory and time before refusing every job."""


def check_runtime_options(
    backend: str,
    gpus: str | None,
    cpu_slots: int | None,
    failure_rate: float,
    seed: int,
    max_retries: int,
    **seconds: float,
) -> None:
    """The checks of the options ``oak run`` and ``oak serve`` share, each failing with its flag (exit 2);
    ``seconds``: positive durations by option name (``round_seconds`` → ``--round-seconds``)."""
    if (gpus is None) == (cpu_slots is None):
        fail("give exactly one of --gpus auto|N and --cpu-slots N")
    if backend not in ("local", "ray", "slurm"):
        fail(f"--backend {backend!r}: expected local, ray or slurm")
    if cpu_slots is not None and not 1 <= cpu_slots <= MAX_CPU_SLOTS:
        fail(f"--cpu-slots {cpu_slots}: expected an integer from 1 to {MAX_CPU_SLOTS:,} (one worker process per slot)")
    if not (math.isfinite(failure_rate) and 0.0 <= failure_rate <= 1.0):
        fail(f"--failure-rate {failure_rate!r}: expected a probability in [0, 1]")
    for name, v in seconds.items():
        if not (math.isfinite(v) and v > 0):
            fail(f"--{name.replace('_', '-')} {v!r}: expected a positive number of seconds")
    from oak.failures.rng import seed_problem

    if (problem := seed_problem(seed)) is not None:
        fail(f"--seed {problem}")
    if max_retries < 1:
        fail(f"--max-retries {max_retries}: expected a positive integer")


def profile_type_of(profile_type: str | None, kind: str, catalog: Any) -> str:
    """``--profile-type``, or the default of the device kind (cpu: aws, gpu: dgx-ext); one the catalog has."""
    ptype = profile_type or ("aws" if kind == "cpu" else "dgx-ext")
    if not any(ptype in a.gpus for a in catalog.apps.values()):
        fail(f"--profile-type {ptype!r}: no application has a profile for it")
    return ptype


def make_executor(
    backend: str,
    gpus: str | None,
    cpu_slots: int | None,
    address: str | None,
    run_dir: Path,
    cluster_from: str | None = None,
) -> tuple[Executor, int, str, tuple[RuntimeNode, ...]]:
    """The executor of ``--backend`` (``oak.runtime.backends``) and the devices it owns, (executor, devices,
    kind, nodes): ``--cpu-slots N``, or ``--gpus auto|N`` — counted locally, or checked against the Ray cluster's
    GPUs / the SLURM partition's largest node at once (a request beyond them exits 2). ``--cluster-from
    slurm|ray`` (the same as ``--backend``): the run owns the cluster's nodes (``nodes``), its devices may be
    all of theirs, and a job may span several."""
    from oak.runtime.backends import BackendRequest, cluster_nodes
    from oak.runtime.backends import make_executor as backend_executor

    if address is not None and backend != "ray":
        fail(f"--address {address}: the address of a Ray cluster; it applies to --backend ray only")
    if cluster_from is not None and cluster_from not in ("slurm", "ray"):
        fail(f"--cluster-from {cluster_from!r}: expected slurm or ray")
    if cluster_from is not None and cluster_from != backend:
        fail(
            f"--cluster-from {cluster_from} reads the nodes of the cluster it runs on: use it with --backend {cluster_from}"
        )

    kind: Literal["cpu", "gpu"]
    devices: int | None
    if cpu_slots is not None:
        devices, kind = cpu_slots, "cpu"
    elif backend in ("ray", "slurm"):
        devices, kind = (None if gpus == "auto" else _gpu_spec(gpus or "auto")), "gpu"
    else:
        devices, kind = _gpu_count(gpus or "auto"), "gpu"
    executor, owned = backend_executor(
        backend, BackendRequest(kind, devices, address, run_dir, cluster_from is not None)
    )
    nodes = cluster_nodes(executor, owned) if cluster_from is not None else ()
    return executor, owned, kind, nodes


def _gpu_spec(spec: str) -> int:
    """A ``--gpus`` count (not ``auto``)."""
    try:
        n = int(spec)
    except ValueError:
        fail(f"--gpus {spec!r}: expected 'auto' or a positive integer")
    if n < 1:
        fail(f"--gpus {spec}: expected a positive integer")
    return n


def visible_gpus() -> int:
    """CUDA GPUs this process sees (under its CUDA_VISIBLE_DEVICES)."""
    try:
        import torch
    except ImportError:
        fail("--gpus needs PyTorch (pip install -e '.[runtime]')")
    return int(torch.cuda.device_count())


def _gpu_count(spec: str, *, auto_max: int | None = None) -> int:
    """``--gpus auto|N`` for local workers: ``auto`` = every visible GPU (at most ``auto_max``), N checked
    against what is visible, so that a job is never launched on a GPU index that does not exist."""
    n = None if spec == "auto" else _gpu_spec(spec)
    have = visible_gpus()
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" under CUDA_VISIBLE_DEVICES={mask!r}" if mask is not None else ""
    if have == 0:
        fail(f"--gpus {spec}: no CUDA GPU is visible{where}; use --cpu-slots N on a machine without GPUs")
    if n is None:
        return have if auto_max is None else min(have, auto_max)
    if n > have:
        fail(f"--gpus {n}: only {have} CUDA GPU(s) visible{where}")
    return n
