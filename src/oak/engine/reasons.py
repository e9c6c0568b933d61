"""Why a job waits, or runs below its maximum: a reason per job derived from the round's own decision.

Computed from what the round decided — the snapshot, the allocation and, where the policy exposes them
(``Allocation.values``), the values it maximised — never guessed from outside. One code per job (``CODES``),
its text rendered only when asked (``RoundReasons.reason``), so the per-round cost is a handful of array
operations (``oak bench reasons`` measures it against the decision).

| code | the job | from |
|---|---|---|
| ``max`` | holds its maximum (no reason needed) | GPUs placed vs. its bound |
| ``rigid`` | runs at its demand, and the policy offers it no other size (Gavel) | values |
| ``no-fit`` | no configuration fits its bounds on this cluster (the GPUs up now) | ``valid`` |
| ``restoring`` | restoring, kept on its configuration this round | ``restoring`` |
| ``bootstrap`` | not run yet: offered only its smallest configurations (the exploration rule) | ``max_gpus`` vs. its bound |
| ``cap`` | held by the exploration cap (2× the most GPUs it has run on) | ``max_gpus`` vs. its bound |
| ``policy`` | the policy's own note (the waiting guard's protection, a move not paid for yet, a fairness order) | ``Policy.notes`` |
| ``unplaced`` | given a configuration no placement on the free GPUs fits | allocation vs. placement |
| ``outbid`` | its best option (beyond what it got) is worth less than what holds those GPUs | values, allocation |
| ``not-worth`` | every option beyond what it got is worth no more than what it got (or than idling) | values |
| ``no-larger`` | runs below its maximum, but no larger configuration is valid for it | ``valid`` |
| ``left-out`` | an option fits the free GPUs and is worth more, yet the solver left it out (within its gap) | values |
| ``not-chosen`` | the policy exposes no values: what the GPUs of its types look like | allocation |

Values are in the policy's objective's units (``Allocation.value_label`` names them: "value", "priority").
No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from oak.engine.ledger import JobsState
from oak.engine.model import ClusterModel
from oak.model.snapshot import Allocation, BoolArray, FloatArray, IntArray, RoundSnapshot
from oak.placement.placer import GpuSet

CODES = (
    "max",
    "rigid",
    "no-fit",
    "restoring",
    "bootstrap",
    "cap",
    "policy",
    "unplaced",
    "outbid",
    "not-worth",
    "no-larger",
    "left-out",
    "not-chosen",
)
#: codes as small integers (``RoundReasons.code``)
CODE_INDEX = {c: k for k, c in enumerate(CODES)}
#: how many of a job's options ``JobReason.options`` lists (best first)
TOP_OPTIONS = 3
#: how many of the jobs holding the GPUs an option needs a reason names
NAMED_RIVALS = 2


@dataclass(frozen=True)
class Option:
    """One configuration a job was offered this round: its label (e.g. ``4×a100``), GPUs and value."""

    config: str
    gpus: int
    value: float


@dataclass(frozen=True)
class JobReason:
    """Why one job holds what it holds after a round. ``rivals``: the jobs holding the GPUs its best option
    needs, lowest value first, with their values; ``options``: its best valid options, with values."""

    job: str
    code: str
    text: str
    gpus: int
    value: float | None
    best: Option | None
    rivals: tuple[tuple[str, float], ...]
    options: tuple[Option, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "job": self.job,
            "code": self.code,
            "text": self.text,
            "gpus": self.gpus,
            "value": self.value,
            "best": None if self.best is None else vars(self.best),
            "rivals": [list(r) for r in self.rivals],
            "options": [vars(o) for o in self.options],
        }


def config_label(snap: RoundSnapshot, c: int, type_names: Mapping[str, str] | None = None) -> str:
    """``4×a100``, or ``16×a100 on 2 nodes`` for a configuration spanning nodes (types renamed by
    ``type_names``)."""
    cfg = snap.configs[c]
    kind = type_names.get(cfg.gpu_type, cfg.gpu_type) if type_names else cfg.gpu_type
    return f"{cfg.gpus}×{kind}" + (f" on {cfg.nodes} nodes" if cfg.nodes > 1 else "")


def _fmt(v: float) -> str:
    return f"{v:.3g}" if math.isfinite(v) else str(v)


def _duration(s: float) -> str:
    return f"{s:,.0f} s" if s < 3600 else f"{s / 3600:.1f} h"


@dataclass(frozen=True, eq=False)
class RoundReasons:
    """The reasons of one round, one per active job (the snapshot's order): codes as arrays, texts on demand."""

    snap: RoundSnapshot
    alloc: Allocation
    placed: list[GpuSet]
    code: IntArray
    gpus: IntArray
    best: IntArray
    free: IntArray
    notes: Mapping[int, str]
    declared_max: IntArray
    restore_left_s: FloatArray | None
    policy: str
    #: what the texts call a device ("GPU"; the runtime on CPU slots: "device") and each type's name in labels
    unit: str = "GPU"
    type_names: Mapping[str, str] | None = None

    def codes(self) -> tuple[str, ...]:
        return tuple(CODES[k] for k in self.code.tolist())

    def counts(self) -> dict[str, int]:
        """Jobs per reason code (``max`` included)."""
        n = np.bincount(self.code, minlength=len(CODES))
        return {c: int(n[k]) for k, c in enumerate(CODES) if n[k]}

    def texts(self) -> tuple[str, ...]:
        return tuple(self.reason(i).text for i in range(self.snap.num_jobs))

    # ------------------------------------------------------------------ one job, rendered
    def _type(self, t: int) -> str:
        name = self.snap.gpu_types[t]
        return self.type_names.get(name, name) if self.type_names else name

    def _value(self, i: int, c: int) -> float | None:
        v = self.alloc.values
        return None if v is None or c < 0 else float(v[i, c])

    def options(self, i: int) -> tuple[Option, ...]:
        """Job i's best valid options (by value where the policy exposes values, else by GPUs, most first)."""
        snap, v = self.snap, self.alloc.values
        cand = np.flatnonzero(snap.valid[i] & (np.isfinite(v[i]) if v is not None else True))
        if len(cand) == 0:
            return ()
        key = -v[i, cand] if v is not None else -snap.config_gpus[cand].astype(np.float64)
        top = cand[np.lexsort((cand, key))][:TOP_OPTIONS]
        return tuple(
            Option(
                config_label(snap, int(c), self.type_names),
                int(snap.config_gpus[c]),
                float(v[i, c]) if v is not None else math.nan,
            )
            for c in top.tolist()
        )

    def rivals(self, i: int, c: int, need: int) -> tuple[tuple[str, float], ...]:
        """The jobs holding GPUs of configuration c's type that would have to make room for ``need`` more GPUs
        of it, lowest value first (jobs that may be kept where they are — restoring, pinned — last)."""
        snap, alloc = self.snap, self.alloc
        t = int(snap.config_type[c])
        got = alloc.config
        holders = np.flatnonzero((got >= 0) & (snap.config_type[np.maximum(got, 0)] == t))
        holders = holders[holders != i]
        if len(holders) == 0 or need <= 0:
            return ()
        v = alloc.values
        val = v[holders, got[holders]] if v is not None else np.zeros(len(holders))
        fixed = snap.restoring[holders] | (snap.kept[holders] >= 0 if snap.kept is not None else False)
        order = np.lexsort((holders, val, fixed))
        out: list[tuple[str, float]] = []
        freed = 0
        for k in order.tolist():
            h = int(holders[k])
            out.append((snap.job_names[h], float(val[k])))
            freed += int(snap.config_gpus[got[h]])
            if freed >= need:
                break
        return tuple(out)

    def reason(self, i: int) -> JobReason:
        """Job i's reason, rendered."""
        snap, alloc = self.snap, self.alloc
        code = CODES[int(self.code[i])]
        name, n = snap.job_names[i], int(self.gpus[i])
        got = int(alloc.config[i]) if n > 0 else -1
        b = int(self.best[i])
        bv = self._value(i, b)
        best = (
            None
            if b < 0
            else Option(
                config_label(snap, b, self.type_names), int(snap.config_gpus[b]), math.nan if bv is None else bv
            )
        )
        label = alloc.value_label
        unit = self.unit
        held = f"held at {n} {unit}{'s' if n != 1 else ''}" if n > 0 else "waiting"
        now = f"{config_label(snap, got, self.type_names)}" if got >= 0 else "none"
        rivals: tuple[tuple[str, float], ...] = ()
        if code == "max":
            text = f"running at its maximum ({now})"
        elif code == "rigid":
            text = f"running at its demand ({now}); {self.policy} offers it no other size"
        elif code == "no-fit":
            text = (
                f"{held}: no configuration fits its bounds [{int(snap.min_gpus[i])}, {int(self.declared_max[i])}] "
                f"{unit}s on this cluster's {unit}s up now"
            )
        elif code == "restoring":
            left = self.restore_left_s[i] if self.restore_left_s is not None else math.nan
            more = f": {_duration(float(left))} left" if math.isfinite(left) and left > 0 else ""
            kept = f"kept its configuration {now}" if got >= 0 else f"kept its {n} {unit}s"
            text = f"restoring ({kept}{more})"
        elif code == "bootstrap":
            text = f"{held}: not run yet, so offered only its smallest configurations (the exploration rule)"
        elif code == "cap":
            text = (
                f"{held}: the exploration cap ({int(snap.max_gpus[i])} {unit}s, 2× the most it has run on; "
                f"its bound is {int(self.declared_max[i])})"
            )
        elif code == "policy":
            text = f"{held}: {self.notes.get(i, '')}"
        elif code == "unplaced":
            text = f"waiting: given {now}, but no placement of it fits the free {unit}s (fragmented nodes)"
        elif code == "not-chosen":
            t = int(snap.config_type[b]) if b >= 0 else 0
            cap = int(snap.capacity[t])
            what = "not chosen by" if n == 0 else "given no more by"
            text = (
                f"{held}: {what} {self.policy}; {self._type(t)}: {cap - int(self.free[t])} of {cap} {unit}s held "
                f"({self.policy} exposes no {label}s to compare)"
            )
        elif code == "no-larger":
            text = (
                f"{held}: no larger configuration is offered to it (its goodput model, batch or {unit} limits, or "
                f"{self.policy} runs it rigid at its demand)"
            )
        elif code == "not-worth":
            assert best is not None
            mine = self._value(i, got) if got >= 0 else 0.0
            than = f"{_fmt(mine or 0.0)} for {now}" if got >= 0 else "leaving it out (0)"
            text = (
                f"{held}: every option beyond it is worth no more than {than} "
                f"(best: {best.config}, {label} {_fmt(best.value)})"
            )
        else:  # outbid, left-out
            assert best is not None
            t = int(snap.config_type[b])
            own = n if got >= 0 and int(snap.config_type[got]) == t else 0
            need = best.gpus - own - int(self.free[t])
            if code == "left-out":
                text = (
                    f"{held}: {best.config} ({label} {_fmt(best.value)}) fits the free {unit}s, but {self.policy} "
                    "left it out (its solver's gap, or its own rule)"
                )
            else:
                rivals = self.rivals(i, b, need)
                names = ", ".join(f"{r} at {_fmt(v)}" for r, v in rivals[:NAMED_RIVALS])
                more = f" and {len(rivals) - NAMED_RIVALS} more" if len(rivals) > NAMED_RIVALS else ""
                total = sum(v for _, v in rivals)
                if label != "value":  # an order, not a sum: the GPUs went to jobs ranked above it
                    text = (
                        f"{held}: ranked below the jobs given those {unit}s (best: {best.config}, {label} "
                        f"{_fmt(best.value)}; the {unit}s go to {names}{more})"
                    )
                elif n == 0:
                    text = (
                        f"waiting: every option it fits is worth no more than what holds those {unit}s (best: "
                        f"{best.config}, {label} {_fmt(best.value)}; the {unit}s go to {names}{more}"
                        + (f": {_fmt(total)} in all)" if len(rivals) > 1 else ")")
                    )
                else:
                    mine = self._value(i, got) or 0.0
                    text = (
                        f"{held}: growing to {best.config} would gain {_fmt(best.value - mine)} ({label} "
                        f"{_fmt(best.value)} vs {_fmt(mine)} now), no more than what holds those {unit}s: {names}{more}"
                        + (f" ({_fmt(total)} in all)" if len(rivals) > 1 else "")
                    )
        return JobReason(name, code, text, n, self._value(i, got), best, rivals, self.options(i))


def _placed_gpus(placed: list[GpuSet]) -> IntArray:
    return np.fromiter((len(p) for p in placed), dtype=np.int64, count=len(placed))


def explain_round(
    snap: RoundSnapshot,
    alloc: Allocation,
    placed: list[GpuSet],
    *,
    declared_max: IntArray | None = None,
    notes: Mapping[int, str] | None = None,
    restore_left_s: FloatArray | None = None,
    policy: str = "the policy",
    unit: str = "GPU",
    type_names: Mapping[str, str] | None = None,
) -> RoundReasons:
    """The reason of every active job of the round that decided ``alloc`` on ``snap`` and placed ``placed``.

    ``declared_max``: (J,) each job's own GPU bound (``snap.max_gpus`` is it after the exploration rules; None:
    the same). ``notes``: the policy's own word on some jobs (``Policy.notes``), by position. ``restore_left_s``:
    (J,) seconds of restore left, where the world knows them."""
    j = snap.num_jobs
    gpus = _placed_gpus(placed)
    bound = snap.max_gpus if declared_max is None else np.asarray(declared_max, dtype=np.int64)
    notes = notes or {}
    code = np.zeros(j, dtype=np.int64)  # CODE_INDEX["max"]
    best = np.full(j, -1, dtype=np.int64)
    got = np.where(gpus > 0, alloc.config, -1)
    cfg_gpus, cfg_type = snap.config_gpus, snap.config_type
    if alloc.replicas is not None:  # a policy that places jobs itself (Pollux): GPUs per node are the decision
        per_node = np.asarray(alloc.replicas).sum(axis=0)
        used = np.bincount(snap.node_type, weights=per_node, minlength=len(snap.capacity))
    else:
        held = got[got >= 0]
        used = np.bincount(cfg_type[held], weights=cfg_gpus[held], minlength=len(snap.capacity))
    free = np.maximum(snap.capacity - used.astype(np.int64), 0)
    idx = np.flatnonzero(gpus < bound)  # only the jobs below their bound need a reason
    if len(idx) == 0:
        return RoundReasons(
            snap, alloc, placed, code, gpus, best, free, notes, bound, restore_left_s, policy, unit, type_names
        )
    n, g, c = gpus[idx], got[idx], alloc.config[idx]
    valid: BoolArray = snap.valid[idx]
    # options beyond what each job got: more GPUs than it holds now
    beyond = valid & (cfg_gpus[None, :] > n[:, None])
    values = alloc.values[idx] if alloc.values is not None else None
    if values is not None:
        beyond &= np.isfinite(values)
        b = np.argmax(np.where(beyond, values, -np.inf), axis=1)
    else:
        b = np.argmax(np.where(beyond, cfg_gpus[None, :], -1), axis=1)
    has = beyond.any(axis=1)
    b = np.where(has, b, -1)
    bsafe = np.maximum(b, 0)
    btype = cfg_type[bsafe]
    own = np.where((g >= 0) & (cfg_type[np.maximum(g, 0)] == btype), n, 0)
    fits_free = cfg_gpus[bsafe] - own <= free[btype]
    if values is not None:
        rows = np.arange(len(idx))
        bval = values[rows, bsafe]
        mine = np.where(g >= 0, values[rows, np.maximum(g, 0)], 0.0)
        worth = bval > mine + 1e-9 * np.maximum(np.abs(mine), 1.0)
        sub = np.where(fits_free, CODE_INDEX["left-out"], CODE_INDEX["outbid"])
        sub[~worth] = CODE_INDEX["not-worth"]
    else:
        sub = np.full(len(idx), CODE_INDEX["not-chosen"])
    # the rules in rising precedence: each later one overrides the earlier
    sub[~has] = CODE_INDEX["no-larger"]
    if values is not None:
        sub[~has & (n == snap.requested_gpus[idx])] = CODE_INDEX["rigid"]
    sub[(c >= 0) & (n == 0)] = CODE_INDEX["unplaced"]
    if notes:
        sub[np.isin(idx, list(notes))] = CODE_INDEX["policy"]
    cap = snap.max_gpus[idx]
    capped = (cap < bound[idx]) & (n >= cap)
    sub[capped] = CODE_INDEX["cap"]
    sub[capped & (snap.attained_gpu_s[idx] <= 0) & (snap.current[idx] < 0)] = CODE_INDEX["bootstrap"]
    # restoring where it was: a job the decision moved mid-restore (``oak`` prices restores) gets the reason of its
    # new place; a policy that places replicas itself (Pollux) keeps the plain rule
    stayed = (c == snap.current[idx]) if alloc.replicas is None else True
    sub[snap.restoring[idx] & (n > 0) & stayed] = CODE_INDEX["restoring"]
    sub[~valid.any(axis=1)] = CODE_INDEX["no-fit"]
    code[idx] = sub
    best[idx] = b
    return RoundReasons(
        snap, alloc, placed, code, gpus, best, free, notes, bound, restore_left_s, policy, unit, type_names
    )


def round_reasons(
    model: ClusterModel,
    st: JobsState,
    active: IntArray,
    policy: object,
    snap: RoundSnapshot,
    alloc: Allocation,
    placed: list[GpuSet],
    *,
    restore_left_s: FloatArray | None = None,
    declared_max: IntArray | None = None,
    unit: str = "GPU",
    type_names: Mapping[str, str] | None = None,
) -> RoundReasons:
    """:func:`explain_round` for a round of the engine: the jobs' own bounds (the cluster model's, unless
    ``declared_max`` gives them), the policy's notes (``Policy.notes``; a plug-in without the hook has none)."""
    notes_of = getattr(policy, "notes", None)
    notes = notes_of(snap, alloc) if callable(notes_of) else {}
    return explain_round(
        snap,
        alloc,
        placed,
        declared_max=model.max_gpus[active] if declared_max is None else declared_max,
        notes=notes,
        restore_left_s=restore_left_s,
        policy=str(getattr(policy, "name", "the policy")),
        unit=unit,
        type_names=type_names,
    )
