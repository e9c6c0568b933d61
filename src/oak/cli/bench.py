"""``oak bench``: decision time and simulator speed, each reported beside a reference measured in the same run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from oak.cli.main import JsonOpt, _fail, bench_app, console


def _collect_snapshots(workload: str, failure_rate: float, seed: int, limit: int) -> list[Any]:
    """Real round snapshots at the paper's scale, recorded from one OAK simulation."""
    from oak.policies import make_policy
    from oak.sim.simulator import Simulator
    from oak.workloads import load_workload

    snaps: list[Any] = []

    def keep(snap: Any, _alloc: Any, _placed: Any) -> None:
        if len(snaps) < limit:
            snaps.append(snap)

    Simulator(load_workload(workload)).run(make_policy("oak"), failure_rate, seed, on_round=keep)
    return snaps


def _time_policy(policy: Any, snaps: list[Any], repeat: int) -> np.ndarray:
    out = []
    for snap in snaps:
        best = np.inf
        for _ in range(repeat):
            t0 = time.perf_counter()
            policy.decide(snap)
            best = min(best, time.perf_counter() - t0)
        out.append(best * 1e3)
    return np.array(out)


@bench_app.command("decision")
def bench_decision(
    policies: Annotated[str, typer.Option(help="Comma-separated policies to time.")] = "oak,sia",
    workload: Annotated[str, typer.Option(help="Workload whose recorded rounds are replayed.")] = "medium",
    rounds: Annotated[int, typer.Option(help="Rounds replayed per policy.")] = 300,
    repeat: Annotated[int, typer.Option(help="Timings per round (the best is kept).")] = 3,
    json_path: JsonOpt = None,
) -> None:
    """Median/p95 decision time per policy and solver at the paper's scale (12 GPUs), as ratios to HiGHS."""
    from oak.io_util import write_json
    from oak.policies import make_policy

    if rounds < 1 or repeat < 1:
        _fail("--rounds and --repeat: expected positive integers")
    snaps = _collect_snapshots(workload, 0.1, 0, rounds)
    results = []
    for name in [x.strip() for x in policies.split(",") if x.strip()]:
        ref = _time_policy(make_policy(name, solver="highs"), snaps, repeat)
        for solver in ("auto", "highs"):
            t = ref if solver == "highs" else _time_policy(make_policy(name, solver=solver), snaps, repeat)
            results.append(
                {
                    "policy": name,
                    "method": solver,
                    "median_ms": float(np.median(t)),
                    "p95_ms": float(np.percentile(t, 95)),
                    "reference_median_ms": float(np.median(ref)),
                    "ratio_to_highs": float(np.median(t) / np.median(ref)),
                    "rounds": len(snaps),
                    "jobs_max": max(s.num_jobs for s in snaps),
                    "gpus": int(snaps[0].capacity.sum()),
                }
            )
    table = Table(title=f"decision time, {len(snaps)} recorded rounds of {workload} (12 GPUs), best of {repeat}")
    for col in ("policy", "solver", "median (ms)", "p95 (ms)", "HiGHS median (ms)", "ratio to HiGHS"):
        table.add_column(col, justify="left" if col in ("policy", "solver") else "right")
    for r in results:
        table.add_row(
            r["policy"],
            r["method"],
            f"{r['median_ms']:.3f}",
            f"{r['p95_ms']:.3f}",
            f"{r['reference_median_ms']:.3f}",
            f"{r['ratio_to_highs']:.3f}",
        )
    console.print(table)
    if json_path is not None:
        write_json(json_path, {"decision": results})


@bench_app.command("sim")
def bench_sim(
    workload: Annotated[str, typer.Option(help="Workload to simulate.")] = "medium",
    policy: Annotated[str, typer.Option(help="Policy.")] = "oak",
    failure_rate: Annotated[float, typer.Option(help="λ.")] = 0.1,
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
    json_path: JsonOpt = None,
) -> None:
    """Simulated rounds per second with the default (auto) solver and with HiGHS forced, in the same run."""
    from oak.io_util import write_json
    from oak.policies import make_policy
    from oak.sim.simulator import Simulator
    from oak.workloads import load_workload

    sim = Simulator(load_workload(workload))
    out = []
    for solver in ("auto", "highs"):
        res = sim.run(make_policy(policy, solver=solver), failure_rate, seed)
        out.append(
            {
                "solver": solver,
                "rounds": len(res.decision_ms),
                "wall_s": res.wall_s,
                "rounds_per_s": len(res.decision_ms) / res.wall_s,
                "decision_ms_median": float(np.median(res.decision_ms)),
                "mean_jct_s": res.summary()["mean_jct_s"],
            }
        )
    table = Table(title=f"simulator speed: {policy} on {workload}, λ = {failure_rate:g}, seed {seed}")
    for col in ("solver", "rounds", "wall (s)", "rounds/s", "median decision (ms)", "mean JCT (s)"):
        table.add_column(col, justify="right")
    for r in out:
        table.add_row(
            r["solver"],
            str(r["rounds"]),
            f"{r['wall_s']:.2f}",
            f"{r['rounds_per_s']:,.0f}",
            f"{r['decision_ms_median']:.3f}",
            f"{r['mean_jct_s']:,.0f}",
        )
    console.print(table)
    console.print(
        f"speed ratio auto/HiGHS: {out[0]['rounds_per_s'] / out[1]['rounds_per_s']:.1f}x "
        f"(identical JCT: {out[0]['mean_jct_s'] == out[1]['mean_jct_s']})"
    )
    if json_path is not None:
        write_json(Path(json_path), {"sim": out})
