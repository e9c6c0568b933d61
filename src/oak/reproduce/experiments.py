"""The paper's experiments as lists of cells; each cell is one bar, point or table row, run over seeds.

Seeds: ``--paper-seeds`` uses the paper's N for each experiment (§IV-F), ``--seeds N`` a fixed N, and the
default 3. ``--quick`` (what CI runs) keeps every experiment's structure but uses 1 seed, the smaller
workloads, Pollux at population 10 × 5 generations and Hybrid OAK at 10 × 10, and a 1e6 s horizon. Runs that cannot differ between seeds (a
deterministic policy at λ = 0 with no arrival jitter) are run once, whatever the seed count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oak.engine.rules import PhysicsOptions, with_rules
from oak.policies import policy_spec
from oak.sim.compare import RunSpec

ALL_POLICIES = ("oak-paper", "goodput", "sia-paper", "sia", "pollux", "hybrid-oak", "gavel", "drf")
#: fig3-baselines also runs the Sia artifact's "Gavel" (maximum summed throughput, rigid, 360 s rounds) beside
#: finish-time-fairness Gavel: the paper's Gavel may be either (docs/fidelity.md)
FIG3_EXTRA = ("gavel-throughput",)
#: The two readings of the paper's "Sia" baseline: OAK's program with r = K = 1 and μ_na a reward (``goodput``),
#: or Sia's own policy at p = +0.5 with an unallocated penalty, as the Sia artifact runs it (``sia-paper``).
PAPER_SIA_READINGS = ("goodput", "sia-paper")
#: Table III's cells (a) and (b) under the ``sia-paper`` reading: Sia's policy, and OAK's program with the age key
#: and Sia's reallocation factor in place of OAK's (the paper's "restart factor off" read as "Sia's factor kept").
ABLATION_CELL_A_SIA_PAPER = ("(a) Sia [sia-paper]", "sia-paper")
ABLATION_CELL_B_SIA_PAPER = ("(b) +Age [Sia's factor]", "oak-sia-factor")
ABLATION_CELLS = (
    ("(a) Sia", "goodput"),
    ("(b) +Age", "oak-no-restart"),
    ("(c) +Restart", "oak-no-age"),
    ("(d) Full OAK", "oak-paper"),
)
QUICK_BUDGET = {
    "pollux": (("generations", 5), ("population", 10)),
    "hybrid-oak": (("generations", 10), ("population", 10)),
}
#: --quick stops runs at 1e6 s of simulated time (jobs a policy starves are reported unfinished sooner).
QUICK_HORIZON_S = 1.0e6


@dataclass(frozen=True)
class SeedPlan:
    """How many seeds an experiment runs: ``paper`` → the paper's N, else ``seeds`` (default 3)."""

    seeds: int | None = None
    paper: bool = False
    quick: bool = False
    #: Sia-format traces (paths) that ``restart-aware`` also runs, on Sia's 64-GPU cluster (``--traces DIR``).
    traces: tuple[str, ...] = ()
    #: the simulator rules every run follows (``--rules``: ``oak.engine.rules.RULES``)
    rules: str = "default"
    #: restarts a failure adds to a job's count (``--failure-restarts``; ``PhysicsOptions.failure_restarts``)
    failure_restarts: int = 1
    #: policies run beside every baseline in fig3-baselines (``--add-policies``),
    #: e.g. a user's ``FILE.py:NAME`` (docs/policies.md)
    extra_policies: tuple[str, ...] = ()
    #: hardware failure model of every run (``--failure-model``; ``PhysicsOptions.failure_model``)
    failure_model: str = "paper"
    #: what every policy knows of goodput (``--goodput``: "known" or "learned"; ``PhysicsOptions.goodput``)
    goodput: str = "known"

    def count(self, paper_n: int) -> int:
        if self.seeds is not None:
            return self.seeds
        if self.paper:
            return paper_n
        return 1 if self.quick else min(3, paper_n)


@dataclass(frozen=True)
class Cell:
    """One cell of an experiment: labels (for tables and plots) and its runs, one per seed."""

    labels: tuple[tuple[str, Any], ...]
    specs: tuple[RunSpec, ...]

    def label(self, key: str) -> Any:
        return dict(self.labels)[key]


@dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    paper_ref: str
    build: Callable[[SeedPlan], list[Cell]] = field(repr=False)
    #: part of ``oak reproduce all`` (the paper's experiments)
    in_all: bool = True

    def cells(self, plan: SeedPlan) -> list[Cell]:
        return self.build(plan)


def _params(policy: str, quick: bool, extra: tuple[tuple[str, Any], ...] = ()) -> tuple[tuple[str, Any], ...]:
    base: tuple[tuple[str, Any], ...] = QUICK_BUDGET.get(policy, ()) if quick else ()
    return tuple(sorted(base + extra))


def _cell(
    plan: SeedPlan,
    paper_n: int,
    policy: str,
    workload: str,
    lam: float,
    labels: dict[str, Any],
    physics: PhysicsOptions | None = None,
    extra: tuple[tuple[str, Any], ...] = (),
    cluster: str = "paper-12",
) -> Cell:
    physics = with_rules(physics or PhysicsOptions(), plan.rules)
    if plan.failure_restarts != physics.failure_restarts:
        physics = dataclasses.replace(physics, failure_restarts=plan.failure_restarts)
    if plan.failure_model != physics.failure_model:
        physics = dataclasses.replace(physics, failure_model=plan.failure_model)
    if plan.goodput != physics.goodput:
        physics = dataclasses.replace(physics, goodput=plan.goodput)
    if plan.quick:
        physics = dataclasses.replace(physics, horizon_s=QUICK_HORIZON_S)
    n = plan.count(paper_n)
    if lam == 0 and physics.arrival_jitter_s == 0 and not policy_spec(policy).stochastic:
        n = 1  # nothing random is left: every seed gives the same run
    specs = tuple(
        RunSpec(policy, workload, lam, seed, cluster, physics, _params(policy, plan.quick, extra)) for seed in range(n)
    )
    full = {"policy": policy, "workload": workload, "failure_rate": lam, **labels}
    return Cell(tuple(full.items()), specs)


def _workloads(plan: SeedPlan, full: tuple[str, ...], quick: tuple[str, ...]) -> tuple[str, ...]:
    return quick if plan.quick else full


def table2(plan: SeedPlan) -> list[Cell]:
    wls = _workloads(plan, ("small", "medium", "congestion", "stress"), ("small", "medium"))
    return [
        _cell(plan, 10, pol, wl, lam, {})
        for wl in wls
        for lam in (0.0, 0.05, 0.1)
        for pol in ("oak-paper", "goodput", "sia-paper", "sia")
    ]


def fig4_sweep(plan: SeedPlan) -> list[Cell]:
    wls = _workloads(plan, ("medium", "congestion"), ("medium",))
    cells = [
        _cell(plan, 30, pol, wl, lam, {})
        for wl in wls
        for lam in (0.0, 0.02, 0.05, 0.1, 0.15)
        for pol in ("oak-paper", *PAPER_SIA_READINGS)
    ]
    cells += [_cell(plan, 10, "pollux", wl, lam, {}) for wl in wls for lam in (0.0, 0.05, 0.1, 0.15)]
    return cells


def table3_ablation(plan: SeedPlan) -> list[Cell]:
    wls = _workloads(plan, ("medium", "congestion"), ("medium",))
    return [
        _cell(plan, 10, pol, wl, lam, {"cell": label})
        for lam in (0.05, 0.1)
        for wl in wls
        for label, pol in (*ABLATION_CELLS, ABLATION_CELL_A_SIA_PAPER, ABLATION_CELL_B_SIA_PAPER)
    ]


def restart_ab(plan: SeedPlan) -> list[Cell]:
    cells = []
    for physics_name, physics in (
        ("per-app restore", PhysicsOptions()),
        ("fixed 60 s restore (§V-D)", PhysicsOptions(restore_cost="60")),
    ):
        for wl in ("ckpt-variance", "medium"):
            for lam in (0.05, 0.1):
                for label, pol in (("decomposed", "oak-paper"), ("aggregate", "oak-aggregate")):
                    cells.append(_cell(plan, 10, pol, wl, lam, {"factor": label, "physics": physics_name}, physics))
    return cells


SENSITIVITY: dict[str, tuple[float, ...]] = {
    "p": (0.25, 0.5, 0.75, 1.0),
    "alpha": (0.001, 0.005, 0.01, 0.05, 0.1),
    "k_max": (10.0, 50.0, 100.0, 500.0, 1000.0),
    "restart_penalty_s": (10.0, 30.0, 60.0, 120.0),
}


def fig2_sensitivity(plan: SeedPlan) -> list[Cell]:
    return [
        _cell(plan, 5, "oak-paper", "medium", 0.05, {"parameter": name, "value": v}, extra=((name, v),))
        for name, values in SENSITIVITY.items()
        for v in values
    ]


def fig3_baselines(plan: SeedPlan) -> list[Cell]:
    wls = _workloads(plan, ("small", "medium", "congestion", "stress"), ("small", "medium"))
    pols = (*ALL_POLICIES, *FIG3_EXTRA, *plan.extra_policies)
    return [_cell(plan, 5, pol, wl, 0.0, {}) for wl in wls for pol in pols]


def fig6_hybrid(plan: SeedPlan) -> list[Cell]:
    wls = _workloads(plan, ("medium", "congestion"), ("medium",))
    return [
        _cell(plan, 5, pol, wl, lam, {})
        for wl in wls
        for lam in (0.0, 0.05, 0.1, 0.15)
        for pol in ("oak-paper", "hybrid-oak", "pollux", "sia")
    ]


#: The product's study (issue [restart-aware]): the product ``oak`` against faithful Sia, the paper's reading,
#: the paper's "Sia" and Pollux. Not part of ``all``, which reproduces the paper.
RESTART_AWARE_POLICIES = ("oak", "sia", "oak-paper", "goodput", "pollux")
RESTART_AWARE_RATES = (0.0, 0.05, 0.1, 0.15)


def restart_aware(plan: SeedPlan) -> list[Cell]:
    wls = _workloads(plan, ("small", "medium", "congestion", "stress"), ("small", "medium"))
    rates = (0.0, 0.1) if plan.quick else RESTART_AWARE_RATES
    cells = [_cell(plan, 5, pol, wl, lam, {}) for wl in wls for lam in rates for pol in RESTART_AWARE_POLICIES]
    # Pollux's 10,000 evaluations per round are minutes per run at 160 jobs on 64 GPUs: the traces run the rest
    trace_policies = tuple(p for p in RESTART_AWARE_POLICIES if p != "pollux")
    cells += [
        _cell(plan, 5, pol, trace, lam, {}, cluster="sia-64")
        for trace in plan.traces
        for lam in rates
        for pol in trace_policies
    ]
    return cells


EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            "table2", "OAK vs Sia: mean and max JCT across workloads and failure rates", "Table II, §V-C", table2
        ),
        Experiment("fig4-sweep", "Failure-rate sweep (OAK, Sia, Pollux)", "Fig. 4, §V-C", fig4_sweep),
        Experiment("table3-ablation", "Component ablation (a)–(d)", "Table III, §V-D", table3_ablation),
        Experiment("restart-ab", "Decomposed vs aggregate restart factor", "Fig. 5, §V-D", restart_ab),
        Experiment("fig2-sensitivity", "Parameter sensitivity on medium at λ = 0.05", "Fig. 2, §V-A", fig2_sensitivity),
        Experiment("fig3-baselines", "All schedulers without failures", "Fig. 3, §V-B", fig3_baselines),
        Experiment("fig6-hybrid", "Decision time vs JCT: OAK, Hybrid OAK, Pollux, Sia", "Fig. 6, §V-E", fig6_hybrid),
        Experiment("fig7-cdf", "Pooled per-job JCT CDF of the ablation cells", "Fig. 7, §V-D", table3_ablation),
        Experiment(
            "restart-aware",
            "The product's OAK against Sia: restarts, mean and max JCT",
            "none (the product's own goals, issue [restart-aware])",
            restart_aware,
            in_all=False,
        ),
    )
}
#: What ``oak reproduce all`` runs: the paper's experiments.
PAPER_EXPERIMENTS = tuple(n for n, e in EXPERIMENTS.items() if e.in_all)
