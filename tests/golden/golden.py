"""Golden results: what the simulator computes today, for the runs a redesign must not move.

``env $(scripts/simd-off) python tests/golden/golden.py --write`` recomputes every case with the current code and
rewrites ``tests/golden/*.json``, with the machine's widest SIMD kernels switched off, so that a machine with
AVX-512 and one without agree with the files (CI checks both ways: the suite runs with every kernel, then the
golden and determinism tests again under ``scripts/simd-off``); ``tests/test_golden.py`` recomputes them and compares. Rewrite them only when a result
is meant to move, and say why in the commit. Each file holds, per run, the run's key, its decided rounds and
makespan, and every job's JCT, restarts, failures, time split and GPU-seconds (no wall-clock times).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

DETERMINISTIC = (
    "oak",
    "oak-paper",
    "goodput",
    "oak-no-age",
    "oak-no-restart",
    "oak-sia-factor",
    "oak-aggregate",
    "sia",
    "sia-paper",
    "gavel",
    "drf",
)
STOCHASTIC = ("pollux", "hybrid-oak")  # one seed each: their NSGA-II draws come from the run's seed
GA_QUICK: tuple[tuple[str, Any], ...] = (("generations", 5), ("population", 10))


@dataclass(frozen=True)
class Case:
    name: str
    workload: str  # an embedded workload, or "philly-160" (synthesised from the packaged Philly summary)
    cluster: str
    policies: tuple[str, ...]
    rates: tuple[float, ...]
    seed: int = 0
    #: simulated seconds after which a run stops (None: the default 3e6 s). On `small` one run (oak-aggregate at
    #: λ = 0.1) never finishes one job and would step 52,600 rounds to 3e6 s; 6e5 s keeps every job that finishes
    #: (the last at 306,578 s) at a fifth of the cost.
    horizon_s: float | None = None
    #: policy parameters per policy (``RunSpec.policy_params``), e.g. a smaller NSGA-II budget
    params: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    #: what policies know of goodput (``PhysicsOptions.goodput``): "learned" adds online fits to every run
    goodput: str = "known"


CASES = (
    Case("small", "small", "paper-12", DETERMINISTIC + STOCHASTIC, (0.0, 0.1), horizon_s=6e5),
    Case("medium", "medium", "paper-12", DETERMINISTIC, (0.0, 0.1)),
    # Pollux's NSGA-II at its full budget runs in `small`; on `medium` a budget of 5 generations of 10 (as
    # `oak reproduce --quick` runs it) goes through the same code at a sixth of the cost
    Case("medium-ga", "medium", "paper-12", STOCHASTIC, (0.0, 0.1), params=(("pollux", GA_QUICK),)),
    Case("philly-160-sia-64", "philly-160", "sia-64", ("oak-paper", "oak", "sia"), (0.0,)),
    # goodput learned online: least-squares fits and noisy samples must not make results depend on the CPU
    Case("medium-learned", "medium", "paper-12", ("oak-paper", "oak", "sia"), (0.1,), seed=1, goodput="learned"),
)


def _workload(name: str, tmp: Path) -> str:
    if name != "philly-160":
        return name
    from oak.workloads.philly import synth_workload_text

    text, _ = synth_workload_text(160, "sia-64", 1.0, 0)
    path = tmp / "philly-160.csv"
    path.write_text(text, encoding="utf-8")
    return str(path)


def compute(case: Case, workers: int = 1) -> dict[str, Any]:
    """The case's runs with the current code, as stored in its golden file."""
    from oak.engine.rules import PhysicsOptions
    from oak.sim.compare import RunSpec, run_many

    physics = PhysicsOptions(goodput=case.goodput)
    if case.horizon_s is not None:
        physics = dataclasses.replace(physics, horizon_s=case.horizon_s)
    with tempfile.TemporaryDirectory() as tmp:
        wl = _workload(case.workload, Path(tmp))
        specs = [
            RunSpec(
                policy=p,
                workload=wl,
                failure_rate=r,
                seed=case.seed,
                cluster=case.cluster,
                physics=physics,
                policy_params=dict(case.params).get(p, ()),
            )
            for p in case.policies
            for r in case.rates
        ]
        results = run_many(specs, workers=workers)
    runs = []
    for res in results:
        runs.append(
            {
                "policy": res.policy,
                "failure_rate": res.failure_rate,
                "seed": res.seed,
                "rounds": len(res.decision_ms),
                "makespan_s": res.makespan_s,
                "jobs": [j.to_json() for j in res.jobs],
            }
        )
    params = {p: dict(v) for p, v in case.params}
    out = {"case": case.name, "workload": case.workload, "cluster": case.cluster, "params": params, "runs": runs}
    return out if case.goodput == "known" else {**out, "goodput": case.goodput}


def path_of(case: Case) -> Path:
    return HERE / f"{case.name}.json"


def differences(want: Any, got: Any, where: str = "", rel: float = 1e-9, abs_: float = 1e-6) -> list[str]:
    """Where ``got`` differs from ``want``: integers, strings and None exactly, floats within ``rel``/``abs_``."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}: keys {sorted(set(want) ^ set(got))}"] if set(want) != set(got) else []
        for k in want:
            if k in got:
                out += differences(want[k], got[k], f"{where}.{k}", rel, abs_)
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{where}: {len(want)} items, got {len(got)}"]
        return [
            d
            for i, (a, b) in enumerate(zip(want, got, strict=True))
            for d in differences(a, b, f"{where}[{i}]", rel, abs_)
        ]
    if isinstance(want, float) and isinstance(got, float | int) and not isinstance(got, bool):
        return [] if math.isclose(want, float(got), rel_tol=rel, abs_tol=abs_) else [f"{where}: {want!r} -> {got!r}"]
    return [] if want == got and type(want) is type(got) else [f"{where}: {want!r} -> {got!r}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the golden files from the current code")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    bad = 0
    for case in CASES:
        got = compute(case, a.workers)
        if a.write:
            path_of(case).write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            print(f"wrote {path_of(case)} ({len(got['runs'])} runs)")
            continue
        diffs = differences(json.loads(path_of(case).read_text(encoding="utf-8")), got)
        bad += bool(diffs)
        print(f"{case.name}: {'same' if not diffs else f'{len(diffs)} differences, first: {diffs[:3]}'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
