"""Simulator physics options. Every assumption where the paper is silent or inconsistent is an explicit
option here, documented in docs/model.md with its default."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from oak.errors import OakInputError
from oak.workloads.loader import MAX_PENALTY_S, MAX_TIME_S

RESTORE_COSTS = ("per-app",)
FAILURE_SCOPES = ("job", "gpu")
QUEUE_CLOCKS = ("accumulated", "since-last-run")
LOST_WORK = ("none", "since-checkpoint", "since-restart")
RESTART_ON = ("move", "shape")
FAILURE_MODES = ("restore", "ghost", "requeue")
FAILURE_RESTARTS = (0, 1, 2)
#: ``--goodput``: "known" (every policy sees every job's true goodput at every size from the start) or "learned"
#: (a job's throughput model is learned from noisy step times as it runs: oak.engine.beliefs).
GOODPUT_KNOWLEDGE = ("known", "learned")
#: ``--rules``: named sets of options. ``sia-artifact`` switches on the rules of the Sia artifact's simulator
#: (docs/model.md, "Simulator rules"); options the rule set does not name keep their values.
RULES = ("default", "sia-artifact")
SIA_ARTIFACT_RULES: dict[str, object] = {
    "bootstrap": True,
    "exploration_cap": True,
    "restart_on": "shape",
    "fixed_steps": True,
    "restores_preemptible": False,
    "replicas_cap": False,
    "first_type_tie": True,
}


@dataclass(frozen=True)
class PhysicsOptions:
    """How the simulated cluster behaves.

    round_s: scheduling period (s); rounds fall on a fixed grid k·round_s, plus immediate re-decisions.
    restore_cost: "per-app" (each (re)start or failure costs the job's P_restart, paper §IV-D) or a number
    of seconds as a string, e.g. "60" (paper §V-D). failure_scope: "job" (each allocated job fails in a round
    with probability λ) or "gpu" (each of its GPUs does: 1 − (1 − λ)^gpus). lost_work: "none" (a failure
    costs only the restore) or "since-checkpoint" (progress since the last periodic checkpoint, every
    checkpoint_interval_s of productive time, is lost too). queue_clock: "accumulated" (T_queue never resets)
    or "since-last-run" (T_queue resets when the job is allocated). arrival_jitter_s: each job's submission is
    delayed by a seeded uniform in [0, jitter). horizon_s: simulated time after which a run stops and the
    unfinished jobs are reported as such.

    The rules of the Sia artifact's simulator, each on its own (``--rules sia-artifact`` sets all seven):
    bootstrap: a job that has never run is offered only its smallest configurations (1 GPU). exploration_cap: a
    job that has run is offered at most 2× the most GPUs it has run on. restart_on: "move" (any change of GPUs
    is a restart and pays a restore) or "shape" (only a change of the job's GPU type or GPUs per node is; moving
    to other nodes in the same shape is free). fixed_steps: decisions only on the round grid, none on arrival,
    completion or failure. restores_preemptible: False keeps every job inside a restore on its configuration,
    whatever the policy. failure_restarts: how many restarts a failure adds to the job's count n (0, 1, 2).
    failure_mode: "restore" (a failed job restores in place), "ghost" (it keeps its GPUs without progress
    until the policy changes its allocation) or "requeue" (it gives its GPUs up and waits for the decision its
    failure triggers, as the runtime does; that relaunch is its restart). lost_work "since-restart": a failure
    loses the progress since the job's last (re)start (the artifact checkpoints only when a job is
    reallocated). replicas_cap: False reads a Sia trace's ``num_replicas`` as the demand of rigid policies only, as the artifact does: an adaptive job is
    bounded by 64 GPUs and its application's largest batch over its smallest per-GPU batch (and by the
    exploration cap where that is on). first_type_tie: a job that has never run is offered each GPU type's
    smallest configuration at the same goodput (1), as the artifact's policy, which knows nothing of it yet,
    values it; the tie goes to the type with the most GPUs not held at the round's start (the cluster's type
    order among equals) through the snapshot's ``tie_config``.

    failure_model: ``NAME[:key=value,...]`` (``oak.failures.hardware``): "paper" (only the per-job coin λ), or a
    hardware model — node failures with repair times, failure domains, lemon nodes, software failures — whose
    events are added to λ's; a node failure also loses the work since the job's last checkpoint, taken every
    Young/Daly interval √(2·P_restart·MTBF) of productive time unless ``lost_work`` says otherwise.

    goodput: "known" (policies see true goodput) or "learned" (each job's throughput model is fitted online from
    noisy step-time samples at the sizes it has run, as ``oak serve`` does, :mod:`oak.engine.beliefs`; the job is
    offered its smallest configurations before it has run and at most 2× the most GPUs it has run on after). The
    world's physics always follows the true model.

    checkpoint_policy: "implicit" (checkpoints are free and taken as ``lost_work`` says), "lossless" (below), or
    each job writes periodic checkpoints that cost it its application's checkpoint write time C
    (``oak.catalog.checkpoint``: no progress meanwhile, checkpoint GPU-time) and every failure loses the progress
    since its last one:
    "none" (no periodic checkpoint: since its last (re)start), "fixed:S" (every S s of running), "young-daly"
    (every √(2·C·MTBF) s, MTBF from the failure rate of what the job holds: λ's coin, the software rate, and
    each of its nodes' rate as observed so far — the model's mean rate as a prior worth one failure — plus
    its racks'; recomputed at every decision), "advised" (``advised_checkpoint_interval``: Young/Daly with the end
    of the job's run in view, from its remaining work at its current rate — what the scheduler advises).
    "lossless": no checkpoint costs anything and a failure loses no work (it still costs its restore, and what
    ``failure_mode`` adds): the limit intervals approach, an indication — not a strict bound, since decisions
    follow the lost work — of what any interval could save.
    """

    round_s: float = 60.0
    restore_cost: str = "per-app"
    failure_scope: str = "job"
    lost_work: str = "none"
    checkpoint_interval_s: float = 600.0
    queue_clock: str = "accumulated"
    arrival_jitter_s: float = 0.0
    horizon_s: float = 3.0e6
    bootstrap: bool = False
    exploration_cap: bool = False
    restart_on: str = "move"
    fixed_steps: bool = False
    restores_preemptible: bool = True
    failure_restarts: int = 1
    failure_mode: str = "restore"
    failure_model: str = "paper"
    goodput: str = "known"
    checkpoint_policy: str = "implicit"
    replicas_cap: bool = True
    first_type_tie: bool = False

    def __post_init__(self) -> None:
        from oak.failures.hardware import parse_failure_model

        parse_failure_model(self.failure_model)  # a bad name or value is an input error here
        if not (math.isfinite(self.round_s) and 0 < self.round_s <= MAX_TIME_S):
            raise OakInputError(
                f"physics round_s={self.round_s!r}: expected a positive number of seconds <= {MAX_TIME_S:g}"
            )
        if self.restore_cost not in RESTORE_COSTS:
            try:
                value = float(self.restore_cost)
            except ValueError:
                value = -1.0
            if not (math.isfinite(value) and 0 <= value <= MAX_PENALTY_S):
                raise OakInputError(
                    f"physics restore_cost={self.restore_cost!r}: expected 'per-app' or a number of seconds in "
                    f"[0, {MAX_PENALTY_S:g}]"
                )
        for name, allowed in (
            ("failure_scope", FAILURE_SCOPES),
            ("lost_work", LOST_WORK),
            ("queue_clock", QUEUE_CLOCKS),
            ("restart_on", RESTART_ON),
            ("failure_mode", FAILURE_MODES),
            ("failure_restarts", FAILURE_RESTARTS),
            ("goodput", GOODPUT_KNOWLEDGE),
        ):
            if getattr(self, name) not in allowed:
                raise OakInputError(f"physics {name}={getattr(self, name)!r}: expected one of {allowed}")
        for name in (
            "bootstrap",
            "exploration_cap",
            "fixed_steps",
            "restores_preemptible",
            "replicas_cap",
            "first_type_tie",
        ):
            if not isinstance(getattr(self, name), bool):
                raise OakInputError(f"physics {name}={getattr(self, name)!r}: expected true or false")
        for name in ("checkpoint_interval_s", "horizon_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0 < v <= MAX_TIME_S):
                raise OakInputError(f"physics {name}={v!r}: expected a positive number of seconds <= {MAX_TIME_S:g}")
        checkpoint_interval(self.checkpoint_policy)  # a bad policy is an input error here
        if not (math.isfinite(self.arrival_jitter_s) and 0 <= self.arrival_jitter_s <= MAX_TIME_S):
            raise OakInputError(
                f"physics arrival_jitter_s={self.arrival_jitter_s!r}: expected a number of seconds in [0, {MAX_TIME_S:g}]"
            )

    def non_default(self) -> dict[str, object]:
        """The options that differ from their defaults (what a run's label and key need to name)."""
        base = PhysicsOptions()
        return {k: v for k, v in dataclasses.asdict(self).items() if getattr(base, k) != v}

    def restore_delay_s(self, restart_penalty_s: float) -> float:
        """Seconds a (re)start or failure costs a job whose P_restart is ``restart_penalty_s``."""
        if self.restore_cost == "per-app":
            return restart_penalty_s
        return float(self.restore_cost)


#: One line of command-line help per option (``oak simulate`` / ``oak compare`` generate a flag per field of
#: ``PhysicsOptions`` from this table and the field's type and default; choices come from the tuples above).
FIELD_HELP: dict[str, str] = {
    "round_s": "Scheduling period (s): rounds fall on a fixed grid, plus immediate re-decisions.",
    "restore_cost": "Restore delay per (re)start or failure: 'per-app' (P_restart) or seconds, e.g. 60.",
    "failure_scope": "Failure rate applies per 'job' or per 'gpu'.",
    "lost_work": "'none', 'since-checkpoint' (progress since the last checkpoint is lost) or 'since-restart' (since "
    "the job's last (re)start).",
    "checkpoint_interval_s": "Checkpoint interval (s of productive time) for --lost-work since-checkpoint.",
    "queue_clock": "T_queue: 'accumulated' or 'since-last-run'.",
    "arrival_jitter_s": "Seeded submission jitter, uniform in [0, J) seconds.",
    "horizon_s": "Stop simulating after this many seconds (unfinished jobs are reported).",
    "bootstrap": "Sia artifact rule: a job that has never run is offered only its smallest configurations.",
    "exploration_cap": "Sia artifact rule: a job is offered at most 2x the most GPUs it has run on.",
    "restart_on": "'move' (any change of GPUs is a restart) or 'shape' (only a change of GPU type or GPUs per node).",
    "fixed_steps": "Sia artifact rule: decide only on the round grid, not on arrival, completion or failure.",
    "restores_preemptible": "Whether the policy may take a restoring job's GPUs (--no-restores-preemptible: kept).",
    "replicas_cap": "Whether a Sia trace's num_replicas caps adaptive jobs (--no-replicas-cap: only rigid "
    "policies' demand, as the Sia artifact reads it).",
    "first_type_tie": "Offer a job that has never run each GPU type's smallest configuration at equal goodput (the "
    "Sia artifact's tie; the type with the most free GPUs takes it).",
    "failure_restarts": "Restarts a failure adds to a job's count n: 0, 1 or 2.",
    "failure_mode": "'restore' (a failed job restores in place), 'ghost' (it keeps its GPUs without progress until "
    "its allocation changes) or 'requeue' (it gives its GPUs up and is placed again by the decision its failure "
    "triggers, as the runtime does).",
    "failure_model": "Hardware failure model NAME[:key=value,...] ('oak failures list'): paper (λ only), llama3, rsc1, "
    "lemon, domain; e.g. llama3:scale=300. Its events add to --failure-rate's.",
    "checkpoint_policy": "'implicit' (free checkpoints, as --lost-work says), 'none', 'fixed:S' (every S s), "
    "'young-daly' (each job's interval from its checkpoint cost and failure rate), 'advised' (Young/Daly with the "
    "end of the job's run in view: what oak advises): these checkpoints cost time; or 'lossless' (checkpoints that "
    "cost nothing and lose nothing: the limit of every interval).",
    "goodput": "'known' (policies see every job's true goodput) or 'learned' (fitted online from noisy step times "
    "at the sizes a job has run, with a 1-GPU start and a 2x exploration cap, as oak serve does).",
}


def with_rules(physics: PhysicsOptions, rules: str) -> PhysicsOptions:
    """``physics`` under the named rule set (``RULES``): ``default`` leaves it as it is."""
    if rules not in RULES:
        raise OakInputError(f"--rules {rules!r}: expected one of {', '.join(RULES)}")
    if rules == "default":
        return physics
    return dataclasses.replace(physics, **SIA_ARTIFACT_RULES)  # type: ignore[arg-type]


def rules_of(physics: PhysicsOptions) -> str:
    """The rule set ``physics`` follows: ``sia-artifact`` when all its rules are on, else ``default``."""
    return "sia-artifact" if all(getattr(physics, k) == v for k, v in SIA_ARTIFACT_RULES.items()) else "default"


CHECKPOINT_POLICIES = ("implicit", "none", "young-daly", "advised", "lossless", "fixed:S")


def advised_checkpoint_interval(write_s: float, rate_per_s: float, remaining_s: float = math.inf) -> float:
    """The checkpoint interval (s of running) a scheduler advises a job with checkpoint write time C = ``write_s``,
    failure rate ρ = ``rate_per_s`` where it runs and ``remaining_s`` of running left (inf: unknown): Young/Daly
    with the end of the run in view. n checkpoints spread evenly over the R s left cost n·C in writes and, a
    failure losing half a segment on average, ρ·R·R/(2(n + 1)) in lost work; the least total is at n + 1 ≈ R/τ,
    τ = √(2C/ρ) Young/Daly's interval, so n is the better of the two integers beside R/τ − 1 (fewer on a tie) and
    the advice is R/(n + 1): τ stretched or shrunk so that the last segment is not a stub. n = 0 — no checkpoint
    pays before the end, once R ≤ 2√(C/ρ) = √2·τ — gives inf. Without a rate: inf; without R: τ."""
    if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
        return math.inf
    tau = math.sqrt(2.0 * max(write_s, 0.0) / rate_per_s)
    if not math.isfinite(remaining_s):
        return tau
    if remaining_s <= 0 or tau <= 0:
        return tau if tau > 0 else math.inf

    def cost(n: int) -> float:
        return n * write_s + rate_per_s * remaining_s * remaining_s / (2.0 * (n + 1))

    low = max(math.floor(remaining_s / tau) - 1, 0)
    n = low if cost(low) <= cost(low + 1) else low + 1
    return remaining_s / (n + 1) if n >= 1 else math.inf


def checkpoint_interval(policy: str) -> float | None:
    """The fixed interval (s) of ``policy`` ("fixed:S"); None for the other policies (``CHECKPOINT_POLICIES``);
    OakInputError for anything else."""
    if policy in ("implicit", "none", "young-daly", "advised", "lossless"):
        return None
    kind, _, value = policy.partition(":")
    if kind == "fixed":
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if math.isfinite(seconds) and 0 < seconds <= MAX_TIME_S:
            return seconds
    raise OakInputError(
        f"physics checkpoint_policy={policy!r}: expected implicit, none, young-daly, advised, lossless or fixed:S with S a "
        "number of "
        f"seconds in (0, {MAX_TIME_S:g}]"
    )
