"""``oak bench``: decision time and simulator speed, each reported beside a reference measured in the same run."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from oak.cli.common import (
    ClusterOpt,
    JsonOpt,
    bench_app,
    check_sweep_size,
    console,
    err_console,
    fail,
    name_list,
    typed_options,
)
from oak.policies.base import PolicyBase


@dataclasses.dataclass(frozen=True)
class Goal:
    """One goal of issue [fast-at-scale] that a benchmark's configuration measures: the goal as the issue states
    it, what this run measured, and the verdict (``None``: one run cannot decide it, e.g. a ratio against an
    older commit)."""

    goal: str
    measured: str
    met: bool | None

    def line(self) -> str:
        verdict = "not decided by one run" if self.met is None else ("met" if self.met else "missed")
        return f"goal (issue \\[fast-at-scale]): {self.goal}: {self.measured} — {verdict}"


def _short(value: float, target: float, more_is_better: bool) -> str:
    """How far a value is from its target, as a factor (empty when the target is reached)."""
    if more_is_better:
        return "" if value >= target else f", {target / value:.2f}x short"
    return "" if value <= target else f", {value / target:.2f}x over"


def sim_goals(
    policy: str,
    workload: str,
    jobs: int,
    cluster: str,
    failure_rate: float,
    auto: dict[str, Any],
    ratio: float | None,
) -> list[Goal]:
    """The [fast-at-scale] goals that ``oak bench sim``'s configuration measures (none for other configurations;
    the goals are the product's, so only for ``policy`` "oak"). ``auto``: the default solver's row
    (``rounds_per_s``, ``decision_ms_median``, ``wall_s``); ``ratio``: its speed-up in wall time over the cold
    reference of the same run, if one ran."""
    goals: list[Goal] = []
    if policy != "oak":
        return goals
    wall = float(auto["wall_s"])
    if cluster == "paper-12" and workload == "medium":
        rps, med = float(auto["rounds_per_s"]), float(auto["decision_ms_median"])
        rounds = f"{rps:,.0f} rounds/s{_short(rps, 5000.0, True)}"
        goals.append(Goal("paper scale ≥ 5,000 simulated rounds/s", rounds, rps >= 5000.0))
        goals.append(
            Goal("paper scale median decision ≤ 0.05 ms", f"{med:.3f} ms{_short(med, 0.05, False)}", med <= 0.05)
        )
    if cluster == "sia-64x32" and jobs == 1000 and failure_rate == 0.05:
        seen = f"{wall:.1f} s{_short(wall, 10.0, False)}"
        goals.append(Goal("1,000 jobs on sia-64x32 at λ = 0.05 in ≤ 10 s on 2 cores", seen, wall <= 10.0))
    if cluster == "sia-64x8" and jobs == 1280 and failure_rate == 0.1:
        seen = f"{wall:.1f} s" + ("" if ratio is None else f", {ratio:.2f}x faster than the cold reference")
        goal = "1,280 jobs on sia-64x8 at λ = 0.1 ≥ 5x faster than the code before warm starts (docs/performance.md)"
        goals.append(Goal(goal, seen, None))
    return goals


def sweep_goal(workers: int, speedup: float) -> Goal | None:
    """[fast-at-scale]'s pool goal: 2 workers ≥ 1.8x one process (``None`` for other worker counts)."""
    if workers != 2:
        return None
    return Goal("2 workers ≥ 1.8x one process", f"{speedup:.2f}x{_short(speedup, 1.8, True)}", speedup >= 1.8)


def reproduce_goal(wall_s: float, cpus: int, workers: int) -> Goal:
    """[fast-at-scale]'s goal for ``oak reproduce all --paper-seeds`` run from an empty store: ≤ 5 minutes."""
    seen = f"{wall_s / 60:.1f} min on {cpus} core(s), {workers} worker(s){_short(wall_s, 300.0, False)}"
    return Goal("oak reproduce all --paper-seeds in ≤ 5 min on 2 cores", seen, wall_s <= 300.0)


class _Recorder(PolicyBase):
    """OAK's decisions, with every snapshot recorded (including the per-shape goodput Pollux needs)."""

    name = "oak"

    @property
    def needs_node_goodput(self) -> bool:
        return True

    def __init__(self, limit: int) -> None:
        from oak.policies import make_policy

        self.inner = make_policy("oak")
        self.limit = limit
        self.snaps: list[Any] = []

    def decide(self, snap: Any) -> Any:
        if len(self.snaps) < self.limit:
            self.snaps.append(snap)
        return self.inner.decide(snap)


def _collect_snapshots(workload: str, failure_rate: float, seed: int, limit: int) -> list[Any]:
    """Real round snapshots at the paper's scale, recorded from one OAK simulation."""
    from oak.sim.simulator import Simulator
    from oak.workloads import load_workload

    recorder = _Recorder(limit)
    Simulator(load_workload(workload)).run(recorder, failure_rate, seed)
    return recorder.snaps


def _time_policy(policy: Any, snaps: list[Any], repeat: int) -> np.ndarray:
    """Best-of-``repeat`` wall time (ms) of each decision; a policy's state is chained from round to round."""
    out = []
    state = None
    for snap in snaps:
        snap = dataclasses.replace(snap, policy_state=state)
        best = np.inf
        for _ in range(repeat):
            t0 = time.perf_counter()
            alloc = policy.decide(snap)
            best = min(best, time.perf_counter() - t0)
        state = alloc.state
        out.append(best * 1e3)
    return np.array(out)


def _highs_server(tasks: Any, results: Any) -> None:
    """Reference worker (a spawned process): solve each (problem, limit) from ``tasks`` with HiGHS, announcing the
    start, then reporting (status, ms, choice) with status "optimal" or "limit"; None ends it."""
    from oak.solve.highs import HighsTimeLimit, solve_highs

    while (task := tasks.get()) is not None:
        problem, limit_s = task
        results.put(("start", 0.0, None))
        t0 = time.perf_counter()
        try:
            choice = solve_highs(problem, time_limit_s=limit_s)
            results.put(("optimal", (time.perf_counter() - t0) * 1e3, choice))
        except HighsTimeLimit as stop:
            results.put(("limit", (time.perf_counter() - t0) * 1e3, stop.choice))


class _Referee:
    """Runs the HiGHS reference in a separate process that it starts (once, and again after a kill): HiGHS checks
    its time limit only in some phases (its MIP set-up can run for minutes on thousands of jobs), so a round that
    overruns the limit by more than a grace period is cut short by terminating that process. HiGHS there is a
    fresh instance with its default settings, untouched by this process's solvers."""

    def __init__(self) -> None:
        self.proc: Any = None
        self.tasks: Any = None
        self.results: Any = None

    def _start(self) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.tasks, self.results = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=_highs_server, args=(self.tasks, self.results), daemon=True)
        self.proc.start()

    def solve(self, problem: Any, limit_s: float) -> tuple[float, bool, Any]:
        """(wall ms, timed out, choice or None) for one round; the clock starts when the worker starts solving."""
        import queue

        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.tasks.put((problem, limit_s))
        self.results.get(timeout=600.0)  # "start": the worker has imported everything and received the round
        t0 = time.perf_counter()
        try:
            status, ms, choice = self.results.get(timeout=limit_s + max(2.0, 0.5 * limit_s))
        except queue.Empty:
            self.close(kill=True)
            return (time.perf_counter() - t0) * 1e3, True, None
        return float(ms), status != "optimal", choice

    def close(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.terminate()
        else:
            self.tasks.put(None)
        self.proc.join(timeout=10.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.proc = None


def _bench_round(
    seed: int, problem: Any, repeat: int, referee: _Referee | None, reference_timeout_s: float
) -> dict[str, Any]:
    """One round: ``auto`` timed best of ``repeat`` (ms), its certified gap, and the HiGHS reference if asked."""
    from oak.solve import solve_assignment
    from oak.solve.assignment import check_feasible

    ms = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = solve_assignment(problem)
        ms = min(ms, (time.perf_counter() - t0) * 1e3)
    check_feasible(problem, res.choice)
    run: dict[str, Any] = {
        "seed": seed, "method": res.method, "ms": ms, "objective": res.objective, "bound": res.bound,
        "gap": res.gap,
    }  # fmt: skip
    if referee is not None:
        ref_ms, timed_out, choice = referee.solve(problem, reference_timeout_s)
        ref_obj: float | None = None
        if choice is not None:
            value = float(problem.value[np.flatnonzero(choice >= 0), choice[choice >= 0]].sum())
            if timed_out:
                run["reference_incumbent"] = value
            else:
                ref_obj = value
        run["reference_ms"] = ref_ms
        run["reference_timed_out"] = timed_out
        run["reference_objective"] = ref_obj
        if ref_obj is not None:
            run["gap_to_reference"] = (ref_obj - res.objective) / max(abs(ref_obj), 1e-12)
    return run


def _bench_scale(
    gpus: int,
    types: int,
    jobs: int,
    seeds: int,
    per_node: int | None,
    reference: bool,
    reference_timeout_s: float,
    repeat: int = 1,
) -> dict[str, Any]:
    """Time ``auto`` (best of ``repeat`` per round) and the HiGHS reference (once) on ``seeds`` random rounds of one
    size (oak.solve.instances); times in ms, gaps relative. The first round is solved once untimed (imports)."""
    from oak.solve import solve_assignment
    from oak.solve.instances import random_instance

    problems = [random_instance(np.random.default_rng(s), gpus, types, jobs, per_node) for s in range(seeds)]
    solve_assignment(problems[0])
    runs = []
    referee = _Referee()
    try:
        for seed, problem in enumerate(problems):
            runs.append(_bench_round(seed, problem, repeat, referee if reference else None, reference_timeout_s))
    finally:
        referee.close()
    ms_all = np.array([r["ms"] for r in runs])
    methods = sorted({r["method"] for r in runs})
    out: dict[str, Any] = {
        "method": "auto",
        "auto_methods": {m: sum(r["method"] == m for r in runs) for m in methods},
        "gpus": gpus, "types": types, "jobs": jobs, "seeds": seeds, "repeat": repeat,
        "median_ms": float(np.median(ms_all)), "p95_ms": float(np.percentile(ms_all, 95)),
        "max_gap": float(max(r["gap"] for r in runs)),
        "reference_median_ms": None, "reference_p95_ms": None, "ratio_to_reference": None,
        "reference_timeouts": None, "reference_timeout_s": reference_timeout_s if reference else None,
        "max_gap_to_reference": None,
        "runs": runs,
    }  # fmt: skip
    if reference:
        ref_ms = np.array([r["reference_ms"] for r in runs])
        out["reference_median_ms"] = float(np.median(ref_ms))
        out["reference_p95_ms"] = float(np.percentile(ref_ms, 95))
        out["ratio_to_reference"] = float(np.median(ref_ms) / max(np.median(ms_all), 1e-9))
        out["reference_timeouts"] = int(sum(r["reference_timed_out"] for r in runs))
        solved = [r["gap_to_reference"] for r in runs if "gap_to_reference" in r]
        out["max_gap_to_reference"] = float(max(solved)) if solved else None
    return out


def _print_scale(out: dict[str, Any]) -> None:
    title = (
        f"decision time: {out['gpus']:,} GPUs × {out['types']} types × {out['jobs']:,} jobs, "
        f"{out['seeds']} random rounds (oak.solve.instances), auto best of {out['repeat']}"
    )
    table = Table(title=title)
    for col in ("solver", "median (ms)", "p95 (ms)", "max certified gap", "timeouts"):
        table.add_column(col, justify="left" if col == "solver" else "right")
    methods = ", ".join(f"{m} ×{n}" for m, n in out["auto_methods"].items())
    table.add_row(f"auto ({methods})", f"{out['median_ms']:.3f}", f"{out['p95_ms']:.3f}", f"{out['max_gap']:.2e}", "")
    if out["reference_median_ms"] is not None:
        table.add_row(
            f"highs (limit {out['reference_timeout_s']:g} s)",
            f"{out['reference_median_ms']:.3f}",
            f"{out['reference_p95_ms']:.3f}",
            "0 (exact)" if not out["reference_timeouts"] else "-",
            str(out["reference_timeouts"]),
        )
    console.print(table)
    if out["ratio_to_reference"] is not None:
        gap = out["max_gap_to_reference"]
        console.print(
            f"HiGHS / auto median time: {out['ratio_to_reference']:.1f}x; "
            + (f"largest gap to HiGHS's optimum: {gap:.2e}" if gap is not None else "HiGHS solved no round in time")
        )


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    """A right-aligned table of pre-formatted cells."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*row)
    return table


@bench_app.command("decision")
def bench_decision(
    ctx: typer.Context,
    policies: Annotated[str, typer.Option(help="Comma-separated policies to time.")] = "oak,sia",
    workload: Annotated[str, typer.Option(help="Workload whose recorded rounds are replayed.")] = "medium",
    rounds: Annotated[int, typer.Option(help="Rounds replayed per policy.")] = 200,
    repeat: Annotated[int, typer.Option(help="Timings per round (the best is kept).")] = 1,
    json_path: JsonOpt = None,
    gpus: Annotated[
        int | None,
        typer.Option(help="Random rounds instead: cluster GPUs, split over --types as evenly as they divide."),
    ] = None,
    types: Annotated[int | None, typer.Option(help="Random rounds: GPU types.")] = None,
    jobs: Annotated[int | None, typer.Option(help="Random rounds: jobs per round.")] = None,
    seeds: Annotated[int, typer.Option(help="Random rounds: how many (seeds 0..N-1).")] = 5,
    gpus_per_node: Annotated[
        int | None, typer.Option(help="Random rounds: GPUs per node (default 4 up to 16 GPUs per type, else 8).")
    ] = None,
    reference_timeout: Annotated[
        float, typer.Option(help="Random rounds: HiGHS reference time limit per round (s).")
    ] = 10.0,
    reference: Annotated[
        bool, typer.Option("--reference/--no-reference", help="Random rounds: also time the HiGHS reference.")
    ] = True,
    round_kernels: Annotated[
        bool,
        typer.Option(
            "--round-kernels",
            help="Also time each policy again with the compiled round kernels loaded, as a sweep's workers run "
            "(oak compare/reproduce, 8 runs or more); the same decisions.",
        ),
    ] = False,
) -> None:
    """Median/p95 decision time per policy at the paper's scale (12 GPUs), as ratios to oak's in the same run;
    oak and sia are also timed with HiGHS forced. A short command runs a paper-scale round's DP in NumPy; with
    --round-kernels the policies are timed again after loading the compiled kernels a long sweep uses.

    With --gpus, --types and --jobs: the solver alone (``auto``, best of --repeat per round) on seeded random rounds
    of that size, beside the HiGHS reference (exact, with a time limit, timed once) on the same rounds, with the
    certified optimality gap."""
    from oak.io_util import write_json
    from oak.policies import make_policy, policy_names
    from oak.solve.assignment import load_kernels

    scale = (gpus, types, jobs)
    random_only = ("seeds", "gpus_per_node", "reference_timeout", "reference")
    recorded_only = ("policies", "workload", "rounds", "round_kernels")
    mode_random = any(x is not None for x in scale)
    for name in sorted(typed_options(ctx, recorded_only if mode_random else random_only)):
        flag = "--no-reference" if name == "reference" and not reference else "--" + name.replace("_", "-")
        where = (
            "recorded rounds (without --gpus/--types/--jobs)"
            if mode_random
            else "random rounds (--gpus, --types, --jobs)"
        )
        fail(f"{flag}: applies to {where} only; it would be ignored here")
    if mode_random:
        if gpus is None or types is None or jobs is None:
            fail("--gpus, --types and --jobs go together")
        if round_kernels:
            fail("--round-kernels: times the policies on recorded rounds; not with --gpus/--types/--jobs")
        assert gpus is not None and types is not None and jobs is not None
        if types < 1 or jobs < 1 or gpus < types:
            fail("--gpus/--types/--jobs: expected positive integers with at least one GPU per type")
        if seeds < 1 or (gpus_per_node is not None and gpus_per_node < 1):
            fail("--seeds and --gpus-per-node: expected positive integers")
        if not (math.isfinite(reference_timeout) and 0 < reference_timeout <= 86_400):
            fail(f"--reference-timeout {reference_timeout!r}: expected seconds in (0, 86400]")
        out = _bench_scale(gpus, types, jobs, seeds, gpus_per_node, reference, reference_timeout, repeat)
        _print_scale(out)
        if json_path is not None:
            write_json(json_path, out)
        return
    if rounds < 1 or repeat < 1:
        fail("--rounds and --repeat: expected positive integers")
    names = name_list(policies, "--policies")
    for n in names:
        if n not in policy_names():
            fail(f"--policies: {n!r} is unknown; expected some of {', '.join(policy_names())}")
    snaps = _collect_snapshots(workload, 0.1, 0, rounds)
    variants: list[tuple[str, str, Any]] = [("oak", "auto", make_policy("oak"))]
    for n in names:
        if n != "oak":
            variants.append((n, "default", make_policy(n)))
    for n in ("oak", "oak-paper", "sia"):
        if n in names:
            variants.append((n, "highs", make_policy(n, solver="highs")))
    if round_kernels:  # timed after every NumPy row: loading the kernels switches this process to them
        variants += [(name, f"{solver}, kernels", policy) for name, solver, policy in variants if solver != "highs"]
    results = []
    ref: np.ndarray | None = None
    for name, solver, policy in variants:
        if solver.endswith(", kernels"):
            load_kernels()  # once: cached
        t = _time_policy(policy, snaps, repeat)
        if ref is None:
            ref = t
        results.append({
            "policy": name, "method": solver, "median_ms": float(np.median(t)), "p95_ms": float(np.percentile(t, 95)),
            "reference_median_ms": float(np.median(ref)), "ratio_median_to_oak": float(np.median(t) / np.median(ref)),
            "ratio_p95_to_oak": float(np.percentile(t, 95) / np.percentile(ref, 95)),
            "rounds": len(snaps), "jobs_max": max(s.num_jobs for s in snaps), "gpus": int(snaps[0].capacity.sum()),
        })  # fmt: skip
    table = Table(title=f"decision time, {len(snaps)} recorded rounds of {workload} (12 GPUs), best of {repeat}")
    for col in ("policy", "solver", "median (ms)", "p95 (ms)", "median / oak", "p95 / oak"):
        table.add_column(col, justify="left" if col in ("policy", "solver") else "right")
    for r in results:
        table.add_row(r["policy"], r["method"], f"{r['median_ms']:.3f}", f"{r['p95_ms']:.3f}",
                      f"{r['ratio_median_to_oak']:.2f}", f"{r['ratio_p95_to_oak']:.2f}")  # fmt: skip
    console.print(table)
    if json_path is not None:
        write_json(json_path, {"decision": results})


@bench_app.command("sim")
def bench_sim(
    workload: Annotated[str, typer.Option(help="Workload to simulate (embedded name or CSV path).")] = "medium",
    cluster: Annotated[str, typer.Option(help="Cluster preset (e.g. paper-12, sia-64, sia-64x32).")] = "paper-12",
    policy: Annotated[str, typer.Option(help="Policy.")] = "oak",
    failure_rate: Annotated[float, typer.Option(help="λ.")] = 0.1,
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
    reference: Annotated[
        str | None,
        typer.Option(
            help="Reference run: highs (HiGHS forced), cold (auto, every round solved without the previous "
            "round's prices) or none (default: highs up to 64 GPUs, cold above)."
        ),
    ] = None,
    paired: Annotated[
        bool,
        typer.Option(
            "--paired/--no-paired",
            help="Also re-solve every round of the run cold, on the same snapshot, and count where the warm and "
            "cold answers differ (and by how much objective).",
        ),
    ] = False,
    round_kernels: Annotated[
        bool,
        typer.Option(
            "--round-kernels",
            help="Load the compiled round kernels first, as a sweep's workers do (oak compare/reproduce, 8 runs or "
            "more), instead of running small rounds' DP in NumPy as a short command does; the same results.",
        ),
    ] = False,
    json_path: JsonOpt = None,
) -> None:
    """Simulated rounds per second and wall time with the default (auto) solver and, as the reference in the
    same run, with HiGHS forced or with every round solved cold (no warm start from the previous round's prices);
    set-up time and the process's peak memory. With --round-kernels every run takes the compiled kernels a long
    sweep loads (their load not timed)."""
    import resource

    from oak.io_util import write_json
    from oak.model.cluster import cluster_preset
    from oak.policies import make_policy
    from oak.sim.simulator import Simulator
    from oak.solve.assignment import load_kernels
    from oak.workloads import load_workload

    if failure_rate < 0 or failure_rate > 1:
        fail(f"--failure-rate {failure_rate}: expected a probability in [0, 1]")
    preset = cluster_preset(cluster)
    ref = reference if reference is not None else ("highs" if preset.total_gpus <= 64 else "cold")
    if ref not in ("highs", "cold", "none"):
        fail(f"--reference {ref!r}: expected highs, cold or none")
    wl = load_workload(workload)
    if round_kernels:
        load_kernels()
    t0 = time.perf_counter()
    sim = Simulator(wl, preset)
    setup_s = time.perf_counter() - t0
    cold_sim = Simulator(wl, preset, warm_start=False) if ref == "cold" else None
    runs: list[tuple[str, Any]] = [("auto", sim)]
    if ref != "none":
        runs.append(("highs", sim) if ref == "highs" else ("auto, cold", cold_sim))
    out = []
    results = []
    for label, runner in runs:
        solver = "highs" if label == "highs" else "auto"
        res = runner.run(make_policy(policy, solver=solver), failure_rate, seed)
        results.append(res)
        decided = float(np.sum(res.decision_ms)) / 1e3
        out.append(
            {
                "solver": label,
                "rounds": len(res.decision_ms),
                "wall_s": res.wall_s,
                "rounds_per_s": len(res.decision_ms) / res.wall_s,
                "decision_s": decided,
                "simulator_s": res.wall_s - decided,
                "decision_ms_median": float(np.median(res.decision_ms)),
                "mean_jct_s": res.summary()["mean_jct_s"],
                "unfinished_jobs": res.summary()["unfinished_jobs"],
            }
        )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    title = (
        f"simulator speed: {policy} on {wl.name} ({len(wl.jobs)} jobs), {cluster} ({preset.total_gpus} GPUs), "
        f"λ = {failure_rate:g}, seed {seed}" + (", round kernels loaded (as in a sweep)" if round_kernels else "")
    )
    cols = ("solver", "rounds", "wall (s)", "rounds/s", "decisions (s)", "simulator (s)", "median decision (ms)")
    console.print(
        _table(
            title,
            (*cols, "mean JCT (s)"),
            [
                (
                    r["solver"],
                    str(r["rounds"]),
                    f"{r['wall_s']:.2f}",
                    f"{r['rounds_per_s']:,.0f}",
                    f"{r['decision_s']:.2f}",
                    f"{r['simulator_s']:.2f}",
                    f"{r['decision_ms_median']:.3f}",
                    f"{r['mean_jct_s']:,.0f}",
                )
                for r in out
            ],
        )
    )
    console.print(f"set-up {setup_s:.2f} s · peak memory {peak_mb:,.0f} MB (whole process)")
    extra: dict[str, Any] = {}
    if len(out) == 2:
        other = "HiGHS" if ref == "highs" else "cold"
        same = [a.jct_s == b.jct_s for a, b in zip(results[0].jobs, results[1].jobs, strict=True)]
        extra["identical_jobs"] = int(sum(same))
        console.print(
            f"speed ratio auto/{other}: {out[1]['wall_s'] / out[0]['wall_s']:.2f}x in wall time, "
            f"{out[0]['rounds_per_s'] / out[1]['rounds_per_s']:.2f}x in rounds/s; "
            f"identical JCT: {sum(same)} of {len(same)} jobs "
            f"(mean {out[0]['mean_jct_s']:,.1f} s vs {out[1]['mean_jct_s']:,.1f} s)"
        )
    ratio = out[1]["wall_s"] / out[0]["wall_s"] if len(out) == 2 and ref == "cold" else None
    goals = sim_goals(policy, wl.name, len(wl.jobs), cluster, failure_rate, out[0], ratio)
    for g in goals:
        console.print(g.line())
    extra["goals"] = [dataclasses.asdict(g) for g in goals]
    if paired:
        extra["paired"] = _paired_rounds(sim, make_policy(policy), failure_rate, seed)
        p = extra["paired"]
        console.print(
            f"paired rounds (each round of the warm run re-solved cold on its snapshot): {p['rounds']} rounds, "
            f"{p['warm_settled']} settled by the warm start alone; allocations differ in {p['differ']} "
            f"({p['differ_both_exact']} where both answers are proved optimal: ties of equal value), "
            f"objective warm − cold: min {p['objective_diff_min']:.4g}, max {p['objective_diff_max']:.4g}, "
            f"largest relative shortfall {p['relative_shortfall_max']:.2e}; proved optimal: warm {p['warm_exact']}, "
            f"cold {p['cold_exact']}"
        )
    if json_path is not None:
        write_json(
            Path(json_path),
            {
                "workload": wl.name,
                "jobs": len(wl.jobs),
                "cluster": cluster,
                "gpus": preset.total_gpus,
                "policy": policy,
                "round_kernels": round_kernels,
                "setup_s": setup_s,
                "peak_rss_mb": peak_mb,
                "sim": out,
                **extra,
            },
        )


@bench_app.command("sweep")
def bench_sweep(
    policies: Annotated[str, typer.Option(help="Comma-separated policies.")] = "oak,oak-paper,sia,gavel",
    failure_rates: Annotated[str, typer.Option(help="Comma-separated λ values.")] = "0.05,0.1",
    seeds: Annotated[int, typer.Option(help="Seeds per cell.")] = 3,
    workload: Annotated[str, typer.Option(help="Workload (embedded name or CSV path).")] = "medium",
    cluster: ClusterOpt = "paper-12",
    workers: Annotated[int, typer.Option(help="Pool workers (the reference is one process).")] = 2,
    repeat: Annotated[int, typer.Option(help="Times to run each of the three, alternating; medians shown.")] = 1,
    json_path: JsonOpt = None,
) -> None:
    """A sweep of ``oak compare`` (policies × λ × seeds) run three ways in this process, alternating: one process
    (the reference), a pool of ``--workers`` taking the runs in the sweep's order, and the pool taking them
    longest first (what ``oak compare`` and ``oak reproduce`` do). Reports each one's wall time, the speed-up
    over one process, and the pool's overhead: wall time beyond the best a pool could do with the runs' own
    times (the larger of their sum over the workers and the longest run) — start-up, result transfer and idle
    workers at the end."""
    import statistics

    from oak.cli.main import _check_spec, _floats, _policy_params
    from oak.io_util import write_json
    from oak.sim.compare import RunSpec, run_one, run_pool, sweep_kernels
    from oak.sim.pool import WorkerDied

    names = name_list(policies, "--policies")
    lams = _floats(failure_rates, "--failure-rates")
    for opt, v in (("--seeds", seeds), ("--workers", workers), ("--repeat", repeat)):
        if v < 1:
            fail(f"{opt} {v}: expected a positive integer")
    check_sweep_size(len(names) * len(lams) * seeds, f"--seeds {seeds}")
    params = _policy_params(names, "auto")
    specs = [
        RunSpec(pol, workload, lam, seed, cluster, policy_params=params[pol])
        for lam in lams
        for pol in names
        for seed in range(seeds)
    ]
    for spec in {(x.policy, x.failure_rate): x for x in specs}.values():
        _check_spec(spec)
    sweep_kernels(specs)  # before any timing: the pool would load them, so the one process runs them too

    def serial() -> list[Any]:
        return [run_one(x) for x in specs]

    def pooled(order: str) -> list[Any]:
        got: list[Any] = [None] * len(specs)

        def done(i: int, res: Any) -> None:
            got[i] = res

        run_pool(specs, workers, done, order)
        return got

    ways: list[tuple[str, Any]] = [
        ("1 process", serial),
        (f"{workers} workers, in order", lambda: pooled("in-order")),
        (f"{workers} workers, longest first", lambda: pooled("longest-first")),
    ]
    walls: dict[str, list[float]] = {name: [] for name, _ in ways}
    busy: dict[str, list[float]] = {name: [] for name, _ in ways}
    longest: dict[str, list[float]] = {name: [] for name, _ in ways}
    jcts: dict[str, list[Any]] = {}
    try:
        for _ in range(repeat):
            for name, fn in ways:
                t0 = time.perf_counter()
                res = fn()
                walls[name].append(time.perf_counter() - t0)
                busy[name].append(float(sum(r.wall_s for r in res)))
                longest[name].append(float(max(r.wall_s for r in res)))
                jcts.setdefault(name, [[j.jct_s for j in r.jobs] for r in res])
    except WorkerDied as exc:  # as oak compare: not the input's fault, exit 1 in one line
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}; nothing was written", highlight=False)
        raise typer.Exit(code=1) from None
    ref = statistics.median(walls[ways[0][0]])
    rows: list[dict[str, Any]] = []
    for name, _ in ways:
        n = 1 if name == ways[0][0] else workers
        wall = statistics.median(walls[name])
        floor = statistics.median(max(b / n, m) for b, m in zip(busy[name], longest[name], strict=True))
        rows.append(
            {
                "way": name,
                "workers": n,
                "wall_s": wall,
                "speedup": ref / wall,
                "runs_s": statistics.median(busy[name]),
                "floor_s": floor,
                "overhead_s": wall - floor,
                "same_results": jcts[name] == jcts[ways[0][0]],
            }
        )
    title = f"sweep: {len(specs)} runs ({', '.join(names)} × λ {failure_rates} × {seeds} seeds on {workload})"
    head = ("way", "wall (s)", "speed-up", "runs' own time (s)", "best possible (s)", "overhead (s)", "same results")
    body = [
        (
            str(r["way"]),
            f"{r['wall_s']:.1f}",
            f"{r['speedup']:.2f}x",
            f"{r['runs_s']:.1f}",
            f"{r['floor_s']:.1f}",
            f"{r['overhead_s']:.1f}",
            "yes" if r["same_results"] else "NO",
        )
        for r in rows
    ]
    console.print(_table(title, head, body))
    console.print(f"medians of {repeat} alternating repeat(s); the runs' own time is the sum of their wall times")
    goal = sweep_goal(workers, rows[-1]["speedup"])  # longest first: the pool oak compare and reproduce use
    if goal is not None:
        console.print(goal.line())
    if json_path is not None:
        write_json(
            Path(json_path),
            {
                "runs": len(specs),
                "repeat": repeat,
                "ways": rows,
                "walls": walls,
                "goals": [] if goal is None else [dataclasses.asdict(goal)],
            },
        )


class _PairedPolicy:
    """A policy that decides each round as ``inner`` does (warm-started from the snapshot's prices) and also
    solves the same snapshot cold (``solver_prices=None``), recording how the two answers compare."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.rows: list[tuple[bool, float, float, bool, bool, bool]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def decide(self, snap: Any) -> Any:
        warm = self.inner.decide(snap)
        cold = self.inner.decide(dataclasses.replace(snap, solver_prices=None))
        differ = not np.array_equal(warm.config, cold.config)
        self.rows.append((
            differ, float(warm.objective - cold.objective), float(abs(cold.objective)),
            warm.method != "lagrangian", cold.method != "lagrangian", bool(warm.info.get("warm", 0.0)),
        ))  # fmt: skip
        return warm


def _paired_rounds(sim: Any, policy: Any, failure_rate: float, seed: int) -> dict[str, Any]:
    """Run once more, re-solving every round cold beside the warm answer (``_PairedPolicy``): counts of rounds
    where the allocations differ, the objective differences, and how often each answer is proved optimal."""
    paired = _PairedPolicy(policy)
    sim.run(paired, failure_rate, seed)
    rows = paired.rows
    diffs = np.array([r[1] for r in rows]) if rows else np.zeros(1)
    scale = np.array([max(r[2], 1e-12) for r in rows]) if rows else np.ones(1)
    return {
        "rounds": len(rows),
        "differ": sum(r[0] for r in rows),
        "differ_both_exact": sum(r[0] and r[3] and r[4] for r in rows),
        "objective_diff_min": float(diffs.min()),
        "objective_diff_max": float(diffs.max()),
        "relative_shortfall_max": float(np.max(np.maximum(-diffs, 0.0) / scale)),
        "warm_exact": sum(r[3] for r in rows),
        "cold_exact": sum(r[4] for r in rows),
        "warm_settled": sum(r[5] for r in rows),
    }


def _record_rounds(policy: Any, workload: str, cluster: str, rounds: int) -> list[tuple[Any, Any, Any, Any]]:
    """(snapshot, allocation, placement, declared max GPUs) of the first ``rounds`` rounds of a simulation."""
    from oak.model.cluster import cluster_preset
    from oak.sim.simulator import Simulator
    from oak.workloads import load_workload

    out: list[tuple[Any, Any, Any, Any]] = []

    class _Enough(Exception):
        pass

    def observe(r: Any) -> None:
        out.append((r.snap, r.alloc, r.placed, r.declared_max))
        if len(out) >= rounds:
            raise _Enough

    with contextlib.suppress(_Enough):
        Simulator(load_workload(workload), cluster_preset(cluster)).run(policy, 0.05, 0, on_reasons=observe)
    return out


@bench_app.command("reasons")
def bench_reasons(
    policies: Annotated[str, typer.Option(help="Comma-separated policies.")] = "oak,sia,gavel",
    workload: Annotated[str, typer.Option(help="Workload (a congested one shows many waiting jobs).")] = "congestion",
    cluster: Annotated[str, typer.Option(help="Cluster preset.")] = "paper-12",
    rounds: Annotated[int, typer.Option(help="Rounds recorded per policy.")] = 300,
    repeat: Annotated[int, typer.Option(help="Timings per round (the best is kept).")] = 3,
    json_path: JsonOpt = None,
) -> None:
    """The cost of a round's reasons (``oak.engine.reasons``: why each job waits) beside the decision they
    explain, on the same recorded rounds: the policy's ``decide``, the reasons' codes (``explain_round``, with
    the policy's notes) and the texts of every job below its maximum (what the runtime renders each round)."""
    from oak.engine.reasons import explain_round
    from oak.io_util import write_json
    from oak.policies import make_policy, policy_names

    if rounds < 1 or repeat < 1:
        fail("--rounds and --repeat: expected positive integers")
    names = name_list(policies, "--policies")
    for n in names:
        if n not in policy_names():
            fail(f"--policies: {n!r} is unknown; expected some of {', '.join(policy_names())}")
    results = []
    for name in names:
        policy = make_policy(name, seed=0)
        recorded = _record_rounds(policy, workload, cluster, rounds)
        if not recorded:
            fail(f"{workload} on {cluster}: no round was decided")
        decide_ms, codes_ms, texts_ms = [], [], []
        state = None
        for snap, alloc, placed, bound in recorded:
            snap = dataclasses.replace(snap, policy_state=state)
            best = [np.inf, np.inf, np.inf]
            for _ in range(repeat):
                t0 = time.perf_counter()
                mine = policy.decide(snap)
                t1 = time.perf_counter()
                notes = policy.notes(snap, alloc) if isinstance(policy, PolicyBase) else {}
                reasons = explain_round(snap, alloc, placed, declared_max=bound, notes=notes, policy=name)
                t2 = time.perf_counter()
                for i in np.flatnonzero(reasons.gpus < bound).tolist():
                    reasons.reason(i)
                t3 = time.perf_counter()
                best = [min(best[0], t1 - t0), min(best[1], t2 - t1), min(best[2], t3 - t2)]
            state = mine.state
            decide_ms.append(best[0] * 1e3)
            codes_ms.append(best[1] * 1e3)
            texts_ms.append(best[2] * 1e3)
        d, c, x = np.array(decide_ms), np.array(codes_ms), np.array(texts_ms)
        results.append({
            "policy": name, "rounds": len(recorded), "jobs_max": max(r[0].num_jobs for r in recorded),
            "decision_median_ms": float(np.median(d)), "reasons_median_ms": float(np.median(c)),
            "texts_median_ms": float(np.median(x)),
            "reasons_over_decision_total": float(c.sum() / d.sum()),
            "reasons_and_texts_over_decision_total": float((c + x).sum() / d.sum()),
        })  # fmt: skip
    table = Table(
        title=f"reasons vs decision, {workload} on {cluster}, first {rounds} rounds each, best of {repeat}",
        title_justify="left",
    )
    for col in ("policy", "jobs (max)", "decide median ms", "reasons median ms", "texts median ms",
                "reasons / decide", "reasons+texts / decide"):  # fmt: skip
        table.add_column(col, justify="left" if col == "policy" else "right")
    for r in results:
        table.add_row(
            r["policy"], str(r["jobs_max"]), f"{r['decision_median_ms']:.3f}", f"{r['reasons_median_ms']:.3f}",
            f"{r['texts_median_ms']:.3f}", f"{r['reasons_over_decision_total']:.1%}",
            f"{r['reasons_and_texts_over_decision_total']:.1%}",
        )  # fmt: skip
    console.print(table)
    console.print("goal (issue \\[why-waiting]): reasons ≤ 10 % of the decision time")
    if json_path is not None:
        write_json(json_path, {"reasons": results})


@bench_app.command("gavel")
def bench_gavel(
    workload: Annotated[
        str | None,
        typer.Option(help="Workload (name or CSV); default: 160 Philly-derived jobs synthesised for the cluster."),
    ] = None,
    cluster: Annotated[str, typer.Option(help="Cluster preset with several GPU types.")] = "sia-64",
    rounds: Annotated[int, typer.Option(help="Rounds recorded from a gavel run (λ = 0.05, seed 0).")] = 200,
    repeat: Annotated[int, typer.Option(help="Timings per round (the best is kept).")] = 1,
    json_path: JsonOpt = None,
) -> None:
    """Gavel's finish-time-fairness solve on a cluster of several GPU types: the cutting planes the policy
    uses (``auto``) against the bisection (a HiGHS LP per step, the reference) on the same recorded rounds;
    median and p95 ms per round, the speed ratio, how far the two optima differ and how often the cutting
    planes gave up (the policy bisects then)."""
    import tempfile

    from oak.io_util import write_json
    from oak.model.cluster import cluster_preset, preset_scale
    from oak.policies import gavel, make_policy
    from oak.workloads.philly import synth_workload_text

    if rounds < 1 or repeat < 1:
        fail("--rounds and --repeat: expected positive integers")
    if len(cluster_preset(cluster).gpu_types) < 2:
        fail(f"--cluster {cluster}: has one GPU type, where Gavel's solve is a closed-form bisection; expected "
             "a cluster of several (e.g. sia-64)")  # fmt: skip
    policy = make_policy("gavel", seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        name = workload
        if name is None:
            text, _ = synth_workload_text(160, cluster, float(preset_scale(cluster)), 0)
            name = str(Path(tmp) / f"philly-160-{cluster}.csv")
            Path(name).write_text(text, encoding="utf-8")
        recorded = _record_rounds(policy, name, cluster, rounds)
    problems = [policy.problem(snap)[0] for snap, *_ in recorded]  # type: ignore[attr-defined]
    problems = [p for p in problems if len(p.age_s) > 0]
    if not problems:
        fail(f"{workload or 'the synthesised workload'} on {cluster}: no round with a job was decided")
    times: dict[str, list[float]] = {"auto": [], "bisection": []}
    optima: dict[str, list[float]] = {"auto": [], "bisection": []}
    gave_up = 0  # rounds where the cutting planes gave up and the policy's solve bisected
    for p in problems:
        for method in ("auto", "bisection"):
            best = np.inf
            for _ in range(repeat):
                t0 = time.perf_counter()
                _, z, path = gavel.ftf_solve(p, method=method)
                best = min(best, time.perf_counter() - t0)
            times[method].append(best * 1e3)
            optima[method].append(z)
            gave_up += method == "auto" and path == "bisection"
    za, zb = np.array(optima["auto"]), np.array(optima["bisection"])
    rel = np.abs(za - zb) / np.maximum(np.abs(zb), 1e-9)  # an optimum of 0 (nothing left) compares absolutely
    rows: list[dict[str, Any]] = [
        {"method": m, "rounds": len(problems), "jobs_max": max(len(p.age_s) for p in problems),
         "median_ms": float(np.median(times[m])), "p95_ms": float(np.percentile(times[m], 95)),
         "total_s": float(np.sum(times[m]) / 1e3)}
        for m in ("auto", "bisection")
    ]  # fmt: skip
    table = Table(
        title=f"Gavel's finish-time fairness on {cluster}, {len(problems)} recorded rounds, best of {repeat}",
        title_justify="left",
    )
    for col in ("method", "rounds", "jobs (max)", "median ms", "p95 ms", "total s"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for r in rows:
        table.add_row(
            "cutting planes (auto)" if r["method"] == "auto" else "bisection (reference)", str(r["rounds"]),
            str(r["jobs_max"]), f"{r['median_ms']:.3f}", f"{r['p95_ms']:.3f}", f"{r['total_s']:.2f}",
        )  # fmt: skip
    console.print(table)
    speed = rows[1]["total_s"] / max(rows[0]["total_s"], 1e-12)
    console.print(
        f"speed ratio bisection/auto: {speed:.1f}x in total time; optimum ratio differs by at most "
        f"{float(rel.max()):.1e} (relative; each method stops about 1e-7 from the optimum); cutting planes gave up "
        f"(the policy bisects then) in {gave_up} of {len(problems)} rounds"
    )
    if json_path is not None:
        write_json(json_path, {"gavel": rows, "speed_ratio": speed, "max_rel_diff": float(rel.max()),
                               "gave_up": gave_up})  # fmt: skip
