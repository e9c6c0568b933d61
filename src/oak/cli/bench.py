"""``oak bench``: decision time and simulator speed, each reported beside a reference measured in the same run."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from oak.cli.main import JsonOpt, _fail, bench_app, console


class _Recorder:
    """OAK's decisions, with every snapshot recorded (including the per-shape goodput Pollux needs)."""

    needs_node_goodput = True
    name = "oak"

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


@bench_app.command("decision")
def bench_decision(
    policies: Annotated[str, typer.Option(help="Comma-separated policies to time.")] = "oak,sia",
    workload: Annotated[str, typer.Option(help="Workload whose recorded rounds are replayed.")] = "medium",
    rounds: Annotated[int, typer.Option(help="Rounds replayed per policy.")] = 200,
    repeat: Annotated[int, typer.Option(help="Timings per round (the best is kept).")] = 1,
    json_path: JsonOpt = None,
) -> None:
    """Median/p95 decision time per policy at the paper's scale (12 GPUs), as ratios to oak's in the same run;
    oak and sia are also timed with HiGHS forced."""
    from oak.io_util import write_json
    from oak.policies import make_policy, policy_names

    if rounds < 1 or repeat < 1:
        _fail("--rounds and --repeat: expected positive integers")
    names = [x.strip() for x in policies.split(",") if x.strip()]
    for n in names:
        if n not in policy_names():
            _fail(f"--policies: {n!r} is unknown; expected some of {', '.join(policy_names())}")
    snaps = _collect_snapshots(workload, 0.1, 0, rounds)
    variants: list[tuple[str, str, Any]] = [("oak", "auto", make_policy("oak"))]
    for n in names:
        if n != "oak":
            variants.append((n, "default", make_policy(n)))
    for n in ("oak", "sia"):
        if n in names:
            variants.append((n, "highs", make_policy(n, solver="highs")))
    results = []
    ref: np.ndarray | None = None
    for name, solver, policy in variants:
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
