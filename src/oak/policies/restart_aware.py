"""The product's OAK: restart-aware for real (``oak``); the paper read literally is ``oak-paper`` (docs/model.md).

Each round it solves one exact program over (job, configuration) pairs, as the paper's OAK does:

    max Σ_ij x_ij · (U_ij − θ_i),   U_ij = (G_ij · m_ij)^p · K_i,   Σ_j x_ij ≤ 1,   GPUs per type ≤ capacity

with these departures from the literal reading, each measured (docs/model.md, "The product's OAK"):

* **Staying is free, moving pays.** m_ij = 1 for the configuration a job holds now, and for every configuration of
  a job that holds none (its restart is unavoidable); for a running job's other configurations
  m_ij = r_i · s_ij: r_i = τ_i/(τ_i + D_i), the paper's decomposed factor measured over the job's current stint
  (``stint_factor``: τ_i its productive time since its last move, from *measured* counters), and s_ij = max(1 −
  D_i/H_ij, 0) the share of the remaining run H_ij = remaining work / rate in j that is left after paying the
  job's measured restore time D_i = T_ckpt / starts (P_restart before the first measurement). r holds a job that
  has just moved until its progress has paid for that restore; failures strike whatever size a job runs at, so
  their restarts do not end a stint (with them in r, a job whose failures halved r never doubled again under a
  growth cap), and a lifetime count of moves locked a young job that had explored growth small
  (docs/model.md, "Growth under an exploration cap"). The paper's r multiplies every configuration of a job
  alike, so it lowers priority but never makes staying cheaper than moving.
* **Idling is never rewarded.** An allocation is worth U − θ with 0 ≤ θ < 1, and leaving a job out is worth 0:
  every valid configuration (U ≥ 1 at r = K = 1) beats idling, and a move, whose U falls towards 0 when a restore
  would outlast the job's remaining run, is floored at MIN_MOVE_VALUE > 0; θ > 0 lets the solver prefer one job
  on more GPUs to several on the minimum. The paper's μ_na = 1.1 > 1 *earns* 1.1 for leaving a job out, so a job
  whose U drops below 1.1 is preempted until its age key lifts it back: a thrash loop.
* **Admission costs more the longer a job has left.** θ_i = min(θ·(R_i/R̄)^q, 0.95) (``admission_costs``): R_i the
  job's remaining time at its best rate, R̄ the round's geometric mean, q = ``remaining_exponent`` (0.5). A job
  near its end is admitted cheaply, since its GPUs come back soon; a long one pays more and is admitted where it
  runs efficiently; a job that holds GPUs pays at most θ, so it is not displaced for being long. The values of a
  job's configurations keep their differences, so how many GPUs it gets, once admitted, still follows its
  goodput. A job whose length or speed is a placeholder (``RoundSnapshot.work_known``) pays θ.
* **A restore is priced, not protected**: a job inside its restore delay is valued as any job that holds GPUs
  (staying free, a move at r·s, r = 0 until its current stint has made progress), so it keeps its configuration
  unless what takes its GPUs is worth more than it (or the waiting guard admits a starving job there).
  ``keep_restoring=True`` keeps every restoring job in place, as Sia does (the rule before; docs/explore-study.md,
  "Restores priced, not protected"). Where the world cannot interrupt a restore (``--rules sia-artifact``) the
  snapshot keeps them either way (``RoundSnapshot.kept``).
* **Waiting is bounded** (the waiting guard): a job that has waited ``max_wait_s`` at a stretch (since it arrived
  or last held GPUs) is *starving*. Starving jobs are admitted first, longest wait first, each on its smallest
  valid configuration, while the GPUs not held by kept or protected jobs fit it (the first that does not fit
  blocks younger ones), and a job so admitted keeps its configuration for ``guard_run_s``. The oldest starving
  job whose minimum configuration fits the cluster therefore waits at most guard_run_s + one restore + one round
  more. The guard reads the clock and passes when each job last held GPUs as ``Allocation.state``.

The age key K is off by default (``age_key=False``): every variant measured — the paper's K on all jobs, K on
waiting jobs only, K from the current waiting streak — either raised mean JCT or made jobs preempt each other
round after round (docs/model.md); the waiting guard bounds waiting instead, touching only jobs that have waited
a day by default. No I/O; a pure function of the snapshot (and the previous round's state).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from oak.errors import OakInputError
from oak.model.snapshot import (
    Allocation,
    BoolArray,
    FloatArray,
    IntArray,
    RoundSnapshot,
    forced_configs,
    kept_current,
    kept_while_restoring,
    preferred_configs,
)
from oak.policies.base import PolicyBase
from oak.scoring.utility import age_key, restart_factor_decomposed
from oak.solve import AssignmentProblem, solve_assignment
from oak.solve.assignment import AssignmentResult, snap_values

#: The least value of any valid allocation: above idling (0), below every allocation that is not a move (U − θ
#: ≥ 1 − θ). Only moves with (G·r·s)^p < θ + MIN_MOVE_VALUE are raised to it.
MIN_MOVE_VALUE = 1e-3


def starts_and_moves(snap: RoundSnapshot) -> tuple[FloatArray, FloatArray]:
    """(J,) each job's starts so far (its first start, one restore per failure, one per move) and its moves (the
    restarts its failures did not add: ``restarts − failure_restarts × failures``). With a failure adding one
    restart (the default, every runtime) starts = 1 + restarts."""
    moves = np.maximum(snap.restarts - snap.failure_restarts * snap.failures, 0).astype(np.float64)
    starts = 1.0 + moves + snap.failures.astype(np.float64)
    return starts, moves


def restore_per_start(snap: RoundSnapshot) -> FloatArray:
    """(J,) D_i: each job's measured mean restore time per start (T_ckpt / starts), P_restart before any."""
    starts, _ = starts_and_moves(snap)
    return np.asarray(np.where(snap.t_ckpt_s > 0, snap.t_ckpt_s / starts, snap.restart_penalty_s), dtype=np.float64)


def switching_factor(snap: RoundSnapshot) -> FloatArray:
    """(J, C) s_ij = max(1 − D_i / H_ij, 0): the part of job i's remaining run in configuration j left after a
    restore of D_i seconds (its measured mean restore per start, P_restart before any is measured)."""
    restore = restore_per_start(snap)
    with np.errstate(divide="ignore", invalid="ignore"):
        remaining = np.where(snap.progress_rate > 0, snap.remaining_work[:, None] / snap.progress_rate, np.inf)
        s = 1.0 - restore[:, None] / remaining
    return np.clip(np.where(np.isfinite(s), s, 0.0), 0.0, 1.0)


#: What the restart factor on a move is measured from (``RestartAwareOakPolicy.move_restart_factor``): the restore
#: time of the job's own moves, all its restore time (failures' too), no restart factor (s alone), the job's
#: progress since its last move against one restore (``stint_factor``), or that only once the job has moved
#: (``move_stint_factor``; docs/explore-study.md, "The first stint free").
MOVE_RESTART_FACTORS = ("moves", "all", "none", "stint", "stint-moved")
#: the rules that measure r over the job's current stint (``stint_factor``)
STINT_FACTORS = ("stint", "stint-moved")


#: how a job's wait is credited in its admission cost (``admission_costs``): "none", "soft" (R_i² / (R_i + Q_i) in
#: place of R_i) or "full" (the cost divided by the response ratio (R_i + Q_i) / R_i); docs/explore-study.md,
#: "Admission by slowdown"
CREDIT_WAIT = ("none", "soft", "full")


#: the highest admission cost a job can be given (θ_i < 1 keeps every valid configuration above idling)
THETA_MAX = 0.95


def remaining_times(snap: RoundSnapshot) -> FloatArray:
    """(J,) R_i = remaining work / the job's best rate over its valid configurations (s): how long the job has
    left at its fastest; NaN where it has no valid configuration or no work left, or where the snapshot says its
    work or speed are placeholders (``RoundSnapshot.work_known``)."""
    rate = snap.progress_rate.max(axis=1, initial=0.0)  # 0 where invalid (RoundSnapshot)
    known = (rate > 0) & (snap.remaining_work > 0)
    if snap.work_known is not None:
        known &= snap.work_known
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(known, snap.remaining_work / rate, np.nan)
    return np.asarray(r, dtype=np.float64)


def admission_costs(snap: RoundSnapshot, theta: float, exponent: float, credit_wait: str = "none") -> FloatArray:
    """(J,) θ_i = min(θ·(R_i / R̄)^q, THETA_MAX), q = ``exponent``: a job's admission cost grows with its remaining
    time R_i (``remaining_times``) relative to R̄, the geometric mean of R over the round's jobs. A job about to
    finish is admitted cheaply (its GPUs come back soon); a long one pays more, so it is admitted where it runs
    efficiently. A job that holds GPUs pays at most θ: once admitted it is not displaced for being long, so a
    shorter job preempts it only when it is shorter than the round's typical job, not whenever two remaining
    times differ. Scale-free (seconds cancel); q = 0 gives θ for every job.

    ``credit_wait`` (``CREDIT_WAIT``) credits a job's measured waiting time Q_i (T_queue) through its response
    ratio ρ_i = (R_i + Q_i) / R_i: "soft" takes R_i / ρ_i in place of R_i, "full" divides the cost by ρ_i. A job
    that has waited long against its own remaining run is admitted as if it were that much shorter, so ordering by
    remaining time does not keep a job out until its wait is many times its run. Measured, not the default
    (docs/explore-study.md, "Admission by slowdown")."""
    out = np.full(snap.num_jobs, float(theta))
    if exponent == 0 or snap.num_jobs == 0:
        return out
    r = remaining_times(snap)
    if credit_wait == "soft":
        r = r * r / (r + np.maximum(snap.t_queue_s, 0.0))
    ok = np.isfinite(r)
    if not ok.any():
        return out
    ref = float(np.exp(np.mean(np.log(r[ok]))))
    rel = (r[ok] / ref) ** exponent
    if credit_wait == "full":
        rel = rel * r[ok] / (r[ok] + np.maximum(snap.t_queue_s[ok], 0.0))
    out[ok] = np.minimum(theta * rel, max(THETA_MAX, theta))
    return np.where(snap.current >= 0, np.minimum(out, theta), out)


def move_restore_time(snap: RoundSnapshot) -> FloatArray:
    """(J,) the part of each job's measured restore time T_ckpt that its moves caused: T_ckpt × (1 + moves) /
    starts, its starts other than failures' (the first start included) over all its starts
    (``starts_and_moves``: a world where a failure adds two restarts, ``--failure-restarts 2``, counts each
    failure once as a start, not as a move)."""
    starts, moves = starts_and_moves(snap)
    return np.asarray(snap.t_ckpt_s * (1.0 + moves) / starts, dtype=np.float64)  # 1 + moves ≤ starts


def stint_factor(snap: RoundSnapshot, since_move_s: FloatArray) -> FloatArray:
    """(J,) r_i = τ_i / (τ_i + D_i): τ_i the job's productive time since its last move (since its first start if
    it has not moved; failures' restarts do not reset it), D_i its restore per start (``restore_per_start``). The
    paper's r measured over the job's current stint instead of its life: a job that has just moved is held until
    it has run long enough to pay for that restore (a doubling worth 1.9× waits ~1.1 restores of progress, a 10 %
    gain ~10), and the restores that bought what a job knows are forgotten once it has run on — no grace that
    lets a young job move every round, and no lifetime count that locks it small after. docs/explore-study.md,
    "Pricing each move as it happens"."""
    tau = np.maximum(since_move_s, 0.0)
    d = restore_per_start(snap)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(tau + d > 0, tau / (tau + d), 1.0)
    return np.asarray(r, dtype=np.float64)


def move_stint_factor(snap: RoundSnapshot, since_move_s: FloatArray, rule: str) -> FloatArray:
    """(J,) r on a move under a stint rule (``STINT_FACTORS``): ``stint_factor``; under "stint-moved" 1 for a job
    that has not moved since its first start (that start was no move: nothing is held to pay for it)."""
    r = stint_factor(snap, since_move_s)
    if rule == "stint-moved":
        r = np.where(starts_and_moves(snap)[1] > 0, r, 1.0)
    return r


def move_factor(
    snap: RoundSnapshot,
    switching: bool = True,
    restart_factor: str = "moves",
    since_move_s: FloatArray | None = None,
) -> FloatArray:
    """(J, C) m_ij: 1 on a job's current configuration and for jobs without GPUs; r_i·s_ij elsewhere, r_i from
    ``restart_factor`` (MOVE_RESTART_FACTORS; "none": s_ij alone; "stint": ``stint_factor`` of ``since_move_s``,
    the job's progress since its last move, T_progress where not given), s_ij = 1 without ``switching``."""
    j, c = snap.goodput.shape
    held = np.flatnonzero(snap.current >= 0)
    m = np.ones((j, c))
    if restart_factor in STINT_FACTORS:
        tau = snap.t_progress_s if since_move_s is None else since_move_s
        m[held] = move_stint_factor(snap, tau, restart_factor)[held, None]
    elif restart_factor != "none":
        ckpt = move_restore_time(snap) if restart_factor == "moves" else snap.t_ckpt_s
        r = restart_factor_decomposed(snap.t_progress_s, ckpt, snap.restart_penalty_s)
        m[held] = r[held, None]
    if switching:
        m[held] *= switching_factor(snap)[held]
    m[held, snap.current[held]] = 1.0
    return m


#: from this many jobs a round's ledger is kept as arrays (``_Column``); below it as dictionaries, which cost less at
#: the paper's dozen jobs (the same values either way: tests/test_restart_aware.py runs both)
ARRAY_LEDGER_MIN_JOBS = 64


class _Names:
    """The job names a ledger was written for, shared by its columns: where the next round's jobs differ (one
    arrived, one finished), each of them is looked up once for all columns."""

    __slots__ = ("_last", "_pos", "names")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self._pos: dict[str, int] | None = None
        self._last: tuple[tuple[str, ...], IntArray] | None = None

    def index_of(self, names: tuple[str, ...]) -> IntArray | None:
        """(J,) the position of each of ``names`` here (−1: none); None where they are these names."""
        if names == self.names:
            return None
        if self._last is not None and self._last[0] == names:
            return self._last[1]
        if self._pos is None:
            self._pos = {n: i for i, n in enumerate(self.names)}
        pos = self._pos
        idx = np.array([pos.get(n, -1) for n in names], dtype=np.int64)
        self._last = (names, idx)
        return idx


class _Column(Mapping[str, Any]):
    """A ledger mapping (job name → value) kept as the round's arrays: the names of the snapshot that wrote it,
    each job's value and whether it has one. The next round reads it as an array (``_column``); a lookup by name
    builds the dictionary once."""

    __slots__ = ("_data", "_map", "_names", "_present")

    def __init__(self, names: _Names, data: np.ndarray, present: np.ndarray | None = None) -> None:
        self._names, self._data = names, data
        self._present = np.ones(len(names.names), dtype=bool) if present is None else present
        self._map: dict[str, Any] | None = None

    def _dict(self) -> dict[str, Any]:
        if self._map is None:
            vals, names = self._data.tolist(), self._names.names
            self._map = {names[i]: vals[i] for i in np.flatnonzero(self._present).tolist()}
        return self._map

    def __getitem__(self, name: str) -> Any:
        return self._dict()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return int(np.count_nonzero(self._present))

    def read(self, names: tuple[str, ...], default: float) -> tuple[FloatArray, BoolArray]:
        """(J,) the values for the jobs ``names`` (``default`` where none) and where one is kept."""
        idx = self._names.index_of(names)
        if idx is None:
            present = self._present
            data = self._data
        else:
            ok = idx >= 0
            at = np.where(ok, idx, 0)
            present = ok & self._present[at] if len(self._present) else np.zeros(len(names), dtype=bool)
            data = self._data[at] if len(self._data) else np.zeros(len(names))
        return np.where(present, data, default).astype(np.float64), present


def _column(values: Mapping[str, Any], names: tuple[str, ...], default: float) -> tuple[FloatArray, BoolArray]:
    """(J,) each job's value in a ledger mapping, ``default`` where it has none, and whether it has one."""
    if isinstance(values, _Column):
        return values.read(names, default)
    found = [values.get(n) for n in names]
    present = np.array([v is not None for v in found], dtype=bool)
    return np.array([default if v is None else v for v in found], dtype=np.float64), present


def _values(values: Mapping[str, Any], names: tuple[str, ...], default: float) -> FloatArray:
    """(J,) each job's value in a ledger mapping, ``default`` where it has none (``_column`` without where)."""
    if isinstance(values, _Column):
        return values.read(names, default)[0]
    return np.array([values.get(n, default) for n in names], dtype=np.float64)


@dataclass(frozen=True)
class WaitLedger:
    """The policy's state between rounds, per job name: when the job last held GPUs (s), and until when an
    admission by the waiting guard protects its configuration (s); for ``move_restart_factor="stint"`` also its
    move count and T_progress (s) when the round was decided, and its T_progress when its current stint began
    (the round before its last move was seen). Read-only mappings; a job missing from them has no record (its
    stint is then counted from its first start)."""

    last_held_s: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    protected_until_s: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    moves: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    progress_s: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    stint_from_s: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))


def stint_starts(snap: RoundSnapshot, ledger: WaitLedger | None) -> FloatArray:
    """(J,) each job's T_progress when its current stint began: where its move count (``starts_and_moves``) differs
    from the previous round's, the T_progress the previous round saw (the move came after it); else the ledger's
    record; 0 (its first start) for a job the ledger does not know. Read from measured counters, so a move a
    world did not make is not counted, and a failure's restart never starts a stint."""
    _, moves = starts_and_moves(snap)
    if ledger is None or not ledger.moves:
        return np.zeros(snap.num_jobs)
    names = snap.job_names
    if not isinstance(ledger.moves, _Column):  # dictionaries: one lookup per job
        out = np.zeros(snap.num_jobs)
        for i, name in enumerate(names):
            was = ledger.moves.get(name)
            if was is None:
                continue
            if int(moves[i]) != was:
                out[i] = ledger.progress_s.get(name, 0.0)
            else:
                out[i] = ledger.stint_from_s.get(name, 0.0)
        return out
    before, known = _column(ledger.moves, names, 0.0)
    progress = _values(ledger.progress_s, names, 0.0)
    stint_from = _values(ledger.stint_from_s, names, 0.0)
    changed = moves.astype(np.int64) != before.astype(np.int64)
    return np.asarray(np.where(known, np.where(changed, progress, stint_from), 0.0), dtype=np.float64)


def waiting_streak(snap: RoundSnapshot, ledger: WaitLedger | None) -> FloatArray:
    """(J,) seconds each job has waited at a stretch: since it arrived or last held GPUs; 0 while it holds GPUs."""
    if ledger is None:
        held_before = np.full(snap.num_jobs, -math.inf)
    else:
        held_before = _values(ledger.last_held_s, snap.job_names, -math.inf)
    since = np.maximum(held_before, snap.time_s - snap.age_s)
    return np.where(snap.current >= 0, 0.0, np.maximum(snap.time_s - since, 0.0))


def admit_starving(
    snap: RoundSnapshot, value: FloatArray, forced: IntArray, streak: FloatArray, starving: BoolArray
) -> IntArray:
    """``forced`` with starving jobs added, longest wait first, each on its smallest valid configuration (the most
    valuable of those) that fits the GPUs not already forced; stops at the first that does not fit, so a younger
    job never passes an older one that is waiting for GPUs to free up."""
    out = forced.copy()
    free = snap.capacity.astype(np.int64).copy()
    held = np.flatnonzero(out >= 0)
    np.subtract.at(free, snap.config_type[out[held]], snap.config_gpus[out[held]])
    for i in sorted(np.flatnonzero(starving & (out < 0)).tolist(), key=lambda i: (-streak[i], i)):
        fits = snap.valid[i] & (snap.config_gpus <= free[snap.config_type])
        if not fits.any():
            break
        cand = np.flatnonzero(fits)
        fewest = cand[snap.config_gpus[cand] == snap.config_gpus[cand].min()]
        j = int(fewest[np.argmax(value[i, fewest])])
        out[i] = j
        free[snap.config_type[j]] -= snap.config_gpus[j]
    return out


@dataclass(frozen=True)
class RestartAwareOakPolicy(PolicyBase):
    """OAK as shipped (module docstring): p ≥ 0, admission cost θ ∈ [0, 1), optional age key (α, K_max), waiting
    guard after ``max_wait_s`` of waiting (``math.inf``: off) protecting an admitted job for ``guard_run_s``."""

    p: float = 0.5
    theta: float = 0.5
    age_key: bool = False
    alpha: float = 0.01
    k_max: float = 100.0
    switching: bool = True
    #: keep every job inside its restore delay on its configuration (a constraint, as Sia does); off: a restoring
    #: job is valued as any job that holds GPUs, so it yields them only to what is worth more than it — keeping it
    #: was a second charge for a restart the move factor already prices (docs/explore-study.md, "Restores priced,
    #: not protected")
    keep_restoring: bool = False
    max_wait_s: float = 86_400.0
    guard_run_s: float = 3_600.0
    solver: str = "auto"
    name: str = "oak"
    #: place on the nodes with the fewest observed failures first (``Policy.avoids_failing_nodes``)
    failure_aware: bool = True
    #: what the restart factor r on a move is measured from: "stint" (the job's progress since its last move
    #: against one restore, ``stint_factor``), "moves" (the restore time of the job's own moves over its life: the
    #: rule before), "all" (all its restore time, failures' included), "none" (a move valued by s alone),
    #: "stint-moved" (the stint's r once the job has moved, 1 before: measured, not the default).
    #: docs/model.md, "Growth under an exploration cap", and docs/explore-study.md compare them.
    move_restart_factor: str = "stint"
    #: value each configuration net of what failures and checkpoints cost there (``snap.failure_overhead``); off:
    #: measured no better (docs/checkpoint-study.md), kept as the ablation
    failure_overhead: bool = False
    #: q: each job's admission cost is θ·(R_i/R̄)^q (``admission_costs``: R its remaining time at its best rate, R̄
    #: the round's geometric mean), at most THETA_MAX; 0: θ for every job (the rule before). docs/model.md,
    #: "Admission cost by remaining time"
    remaining_exponent: float = 0.5
    #: admission by slowdown: the admission cost credited with the job's wait (``CREDIT_WAIT``, ``admission_costs``);
    #: "none": measured and not kept (docs/explore-study.md, "Admission by slowdown")
    credit_wait: str = "none"
    #: equal jobs (the same values in every configuration) are served first come, first served in every round
    #: (``_solve``): which of two equal jobs waits does not change the objective (nor, for jobs alike in every
    #: respect, the mean JCT), and the one that came first waiting less lowers the max; off: the exact DP's own
    #: tie rule on rounds it solves (the rule before). docs/explore-study.md, "First come among equals"
    first_come: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.p) and self.p >= 0):
            raise OakInputError(f"oak: p={self.p!r}; expected a finite number >= 0")
        if not (math.isfinite(self.theta) and 0 <= self.theta < 1):
            raise OakInputError(
                f"oak: theta={self.theta!r}; expected a number in [0, 1) (at >= 1 the minimum configuration is "
                "worth less than idling)"
            )
        if not (math.isfinite(self.alpha) and self.alpha >= 0):
            raise OakInputError(f"oak: alpha={self.alpha!r}; expected a finite number >= 0 (1/s)")
        if not (math.isfinite(self.k_max) and self.k_max >= 1):
            raise OakInputError(f"oak: k_max={self.k_max!r}; expected a finite number >= 1")
        if not (self.max_wait_s > 0):  # inf allowed: the guard off
            raise OakInputError(f"oak: max_wait_s={self.max_wait_s!r}; expected a number of seconds > 0 (inf: off)")
        if self.move_restart_factor not in MOVE_RESTART_FACTORS:
            raise OakInputError(
                f"oak: move_restart_factor={self.move_restart_factor!r}; expected one of {', '.join(MOVE_RESTART_FACTORS)}"
            )
        if not (math.isfinite(self.remaining_exponent) and self.remaining_exponent >= 0):
            raise OakInputError(
                f"oak: remaining_exponent={self.remaining_exponent!r}; expected a finite number >= 0 (0: one θ for all)"
            )
        if self.credit_wait not in CREDIT_WAIT:
            raise OakInputError(
                f"oak: credit_wait={self.credit_wait!r}; expected one of {', '.join(map(repr, CREDIT_WAIT))}"
            )
        for flag in ("age_key", "switching", "keep_restoring", "failure_aware", "failure_overhead", "first_come"):
            value = getattr(self, flag)
            if not isinstance(value, bool | np.bool_):  # "no" or 0 would read as a truth value, not as meant
                raise OakInputError(f"oak: {flag}={value!r}; expected True or False")
        if not (math.isfinite(self.guard_run_s) and self.guard_run_s >= 0):
            raise OakInputError(f"oak: guard_run_s={self.guard_run_s!r}; expected a finite number of seconds >= 0")

    @property
    def guards_waiting(self) -> bool:
        return math.isfinite(self.max_wait_s)

    @property
    def avoids_failing_nodes(self) -> bool:
        return self.failure_aware

    @property
    def reads_clock(self) -> bool:
        """The age key (``t_queue_s``) and the waiting guard (``time_s``, ``age_s``) read the clock; the rest reads
        measured times, rates and work."""
        return self.age_key or self.guards_waiting

    @property
    def _keeps_ledger(self) -> bool:
        return self.guards_waiting or self.move_restart_factor in STINT_FACTORS

    def _stint_from(self, snap: RoundSnapshot) -> FloatArray | None:
        """(J,) T_progress at each job's current stint's start (``stint_starts``), or None unless r is the stint's."""
        if self.move_restart_factor not in STINT_FACTORS:
            return None
        return stint_starts(snap, snap.policy_state if isinstance(snap.policy_state, WaitLedger) else None)

    def utility(self, snap: RoundSnapshot, stint_from: FloatArray | None = None) -> FloatArray:
        """(J, C) U_ij = (G_ij·m_ij)^p·K_i; 0 where invalid. ``stint_from``: ``_stint_from(snap)``, if computed."""
        if stint_from is None:
            stint_from = self._stint_from(snap)
        since = None if stint_from is None else snap.t_progress_s - stint_from
        g = snap.goodput * move_factor(snap, self.switching, self.move_restart_factor, since)
        if self.failure_overhead and snap.failure_overhead is not None:  # what failures and checkpoints cost there
            g = g * (1.0 - snap.failure_overhead)
        u = np.power(g, self.p)
        if self.age_key:
            u = u * age_key(snap.t_queue_s, self.alpha, self.k_max)[:, None]
        return np.where(snap.valid, u, 0.0)

    def decide(self, snap: RoundSnapshot) -> Allocation:
        # a move is never worth less than idling (MIN_MOVE_VALUE): a job displaced from its configuration takes
        # GPUs it fits rather than wait beside them, however little of its run a restore leaves (s → 0)
        cost = admission_costs(snap, self.theta, self.remaining_exponent, self.credit_wait)
        stint_from = self._stint_from(snap)  # once a round: the utility and the next ledger read it
        value = np.where(snap.valid, np.maximum(self.utility(snap, stint_from) - cost[:, None], MIN_MOVE_VALUE), 0.0)
        kept = forced_configs(snap, kept_while_restoring(snap) if self.keep_restoring else None)
        forced = kept if kept is not None else np.full(snap.num_jobs, -1, dtype=np.int64)
        ledger = snap.policy_state if isinstance(snap.policy_state, WaitLedger) else None
        starving = np.zeros(snap.num_jobs, dtype=bool)
        if self.guards_waiting:
            if ledger is not None:  # jobs the guard admitted keep their configuration while protected
                until = _values(ledger.protected_until_s, snap.job_names, -math.inf)
                forced = np.where(forced >= 0, forced, kept_current(snap, until > snap.time_s))
            streak = waiting_streak(snap, ledger)
            starving = (streak >= self.max_wait_s) & snap.valid.any(axis=1)
            if starving.any():
                # on the solver's grid, as solve_assignment compares: a tie between configurations is a tie
                forced = admit_starving(snap, snap_values(value, snap.valid), forced, streak, starving)
        problem = AssignmentProblem(
            value=value,
            valid=snap.valid,
            gpus=snap.config_gpus,
            gpu_type=snap.config_type,
            capacity=snap.capacity,
            forced=forced if np.any(forced >= 0) else None,
            prefer=preferred_configs(snap),
            warm_prices=snap.solver_prices,
        )
        res = self._solve(problem, snap.age_s)
        info = {
            "solve_ms": res.wall_ms,
            "bound": res.bound,
            "gap": res.gap,
            "starving": float(starving.sum()),
            "warm": float(res.warm),
        }
        state = self._next_ledger(snap, ledger, res.choice, starving, stint_from) if self._keeps_ledger else None
        return Allocation(
            config=res.choice,
            objective=res.objective,
            method=res.method,
            info=info,
            state=state,
            values=value,
            prices=res.prices,
        )

    def _solve(self, problem: AssignmentProblem, age_s: FloatArray) -> AssignmentResult:
        """The round's programme solved; with ``first_come`` equal jobs are served in the order they came
        (``solve_assignment(first_come=True)`` serves the lowest row first): where the snapshot does not list the
        jobs oldest first — an arrival delayed by ``--arrival-jitter``, a job sent to ``oak serve`` to start later
        than one sent after it — the rows go to the solver in order of age (``age_s``, ties in the snapshot's
        order) and the choice comes back in the snapshot's."""
        if not self.first_come or problem.num_jobs < 2 or bool((np.diff(age_s) <= 0).all()):
            return solve_assignment(problem, self.solver, first_come=self.first_come)
        order = np.argsort(-np.asarray(age_s, dtype=np.float64), kind="stable")
        permuted = dataclasses.replace(
            problem,
            value=problem.value[order],
            valid=problem.valid[order],
            forced=None if problem.forced is None else problem.forced[order],
            prefer=None if problem.prefer is None else problem.prefer[order],
        )
        res = solve_assignment(permuted, self.solver, first_come=True)
        choice = np.empty_like(res.choice)
        choice[order] = res.choice
        return dataclasses.replace(res, choice=choice)

    def state_to_json(self, state: object) -> object | None:
        """The ledger (``WaitLedger``) as a JSON object of its mappings (``PolicyBase.state_to_json``)."""
        if not isinstance(state, WaitLedger):
            return None
        return {f.name: dict(getattr(state, f.name)) for f in dataclasses.fields(WaitLedger)}

    def state_from_json(self, data: object) -> object | None:
        """The ledger back from ``state_to_json``'s object; None for anything else (a run without state)."""
        if not isinstance(data, dict):
            return None
        out: dict[str, Mapping[str, float]] = {}
        for f in dataclasses.fields(WaitLedger):
            part = data.get(f.name, {})
            if not isinstance(part, dict) or not all(
                isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool) for k, v in part.items()
            ):
                return None
            cast = int if f.name == "moves" else float
            out[f.name] = MappingProxyType({k: cast(v) for k, v in part.items()})
        return WaitLedger(**out)  # type: ignore[arg-type]

    def notes(self, snap: RoundSnapshot, alloc: Allocation) -> Mapping[int, str]:
        """The policy's word (``Policy.notes``): a job the waiting guard admitted this round or protects, and a job
        its stint holds (``stint_notes``)."""
        out = self.stint_notes(snap, alloc)
        ledger = alloc.state if isinstance(alloc.state, WaitLedger) else None
        if ledger is None:
            return out
        before = snap.policy_state if isinstance(snap.policy_state, WaitLedger) else None
        protected = {n: u for n, u in ledger.protected_until_s.items() if u > snap.time_s}
        if not protected:
            return out
        for i, name in enumerate(snap.job_names):
            until = protected.get(name, -math.inf)
            if until <= snap.time_s or alloc.config[i] < 0:
                continue
            left = until - snap.time_s
            was = before.protected_until_s.get(name, -math.inf) if before is not None else -math.inf
            how = "admitted by" if was <= snap.time_s else "protected by"
            out[i] = (
                f"{how} the waiting guard (it waited over {self.max_wait_s / 3600:g} h); keeps this configuration "
                f"for {left / 60:,.0f} min more (until t = {until:,.0f} s)"
            )
        return out

    def stint_notes(self, snap: RoundSnapshot, alloc: Allocation) -> dict[int, str]:
        """Jobs that keep their configuration because their last move is not paid for yet (``move_restart_factor``
        "stint" or "stint-moved"): a configuration worth more than staying by its goodput and s alone (G_ij·s_ij >
        G_i,now) but not once r is counted (G_ij·r_i·s_ij ≤ G_i,now). Says how much progress the job has made since
        its last move (or its start), its restore, r, and the r the best such move needs."""
        if self.move_restart_factor not in STINT_FACTORS or snap.num_jobs == 0:
            return {}
        cur = snap.current
        held = np.flatnonzero((cur >= 0) & (alloc.config == cur) & ~snap.restoring)
        if held.size == 0:
            return {}
        stint_from = self._stint_from(snap)
        assert stint_from is not None
        tau = snap.t_progress_s - stint_from
        r = move_stint_factor(snap, tau, self.move_restart_factor)
        restore = restore_per_start(snap)
        _, moves = starts_and_moves(snap)
        gs = snap.goodput * (switching_factor(snap) if self.switching else 1.0)
        gs = np.where(snap.valid, gs, 0.0)
        out: dict[int, str] = {}
        for i in held.tolist():
            now = float(snap.goodput[i, cur[i]])
            row = gs[i].copy()
            row[cur[i]] = 0.0
            j = int(np.argmax(row))
            if not (row[j] > now > 0 and row[j] * r[i] <= now):
                continue
            since = "its last move was" if moves[i] > 0 else "it started"
            out[i] = (
                f"{since} {max(float(tau[i]), 0.0):,.0f} s of progress ago, against a "
                f"{float(restore[i]):,.0f}-s restore: a move is valued at r = {float(r[i]):.2f} of its goodput until "
                f"its progress pays for that restore; {int(snap.config_gpus[j])} GPUs (×{row[j] / now:.2f} its "
                f"goodput now, net of a restore) needs r > {now / row[j]:.2f}"
            )
        return out

    def _next_ledger(
        self,
        snap: RoundSnapshot,
        ledger: WaitLedger | None,
        choice: IntArray,
        starving: BoolArray,
        stint_from: FloatArray | None = None,
    ) -> WaitLedger:
        """Who holds GPUs after this round (now), and the protection of jobs the guard admitted (active jobs only)."""
        t = snap.time_s
        if snap.num_jobs < ARRAY_LEDGER_MIN_JOBS:
            return self._next_ledger_dicts(snap, ledger, choice, starving, stint_from)
        names = _Names(snap.job_names)
        given = choice >= 0
        holds = given | (snap.current >= 0)
        if ledger is not None:
            held_before, had = _column(ledger.last_held_s, snap.job_names, 0.0)
            until_before = _values(ledger.protected_until_s, snap.job_names, -math.inf)
        else:
            held_before, had = np.zeros(snap.num_jobs), np.zeros(snap.num_jobs, dtype=bool)
            until_before = np.full(snap.num_jobs, -math.inf)
        admitted = given & starving & (snap.current < 0)
        protected = admitted | (given & (until_before > t))
        last = _Column(names, np.where(holds, t, held_before), holds | had)
        until = _Column(names, np.where(admitted, t + self.guard_run_s, until_before), protected)
        if stint_from is None:
            return WaitLedger(last, until)
        _, moves = starts_and_moves(snap)
        return WaitLedger(
            last,
            until,
            moves=_Column(names, moves.astype(np.int64)),
            progress_s=_Column(names, np.asarray(snap.t_progress_s, dtype=np.float64).copy()),
            stint_from_s=_Column(names, np.asarray(stint_from, dtype=np.float64).copy()),
        )

    def _next_ledger_dicts(
        self,
        snap: RoundSnapshot,
        ledger: WaitLedger | None,
        choice: IntArray,
        starving: BoolArray,
        stint_from: FloatArray | None = None,
    ) -> WaitLedger:
        """``_next_ledger`` as dictionaries, one job at a time (small rounds)."""
        t = snap.time_s
        last: dict[str, float] = {}
        until: dict[str, float] = {}
        for i, name in enumerate(snap.job_names):
            if choice[i] >= 0 or snap.current[i] >= 0:
                last[name] = t
            elif ledger is not None and name in ledger.last_held_s:
                last[name] = ledger.last_held_s[name]
            if choice[i] >= 0 and starving[i] and snap.current[i] < 0:
                until[name] = t + self.guard_run_s
            elif choice[i] >= 0 and ledger is not None and ledger.protected_until_s.get(name, -math.inf) > t:
                until[name] = ledger.protected_until_s[name]
        if stint_from is None:
            return WaitLedger(MappingProxyType(last), MappingProxyType(until))
        names = snap.job_names
        _, moves = starts_and_moves(snap)
        return WaitLedger(
            MappingProxyType(last),
            MappingProxyType(until),
            moves=MappingProxyType(dict(zip(names, moves.astype(np.int64).tolist(), strict=True))),
            progress_s=MappingProxyType(dict(zip(names, snap.t_progress_s.tolist(), strict=True))),
            stint_from_s=MappingProxyType(dict(zip(names, stint_from.tolist(), strict=True))),
        )
