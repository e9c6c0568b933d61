"""A runtime job's lifecycle: its phases, the transitions between them that are valid, and its history.

A job's phase is the one record of where it stands (``JobRecord.phase``; its ``arrived``, ``done``,
``failed``, ``cancelled`` and ``over`` are read from it). The scheduler enters a phase at the event that
causes it (:func:`enter`, with its run-clock time and reason): arrival, finishing, giving up, a cancel, a
retry. What follows from the job's current incarnation — launched (restoring), past the step it resumed from
(running), asked to stop (stopping), ended (queued, or backing off) — is read from that incarnation's facts by
:func:`phase_of`. Every change is in the job's history (``JobRecord.history``, the newest ``HISTORY_KEPT``
entries), which ``oak status --json`` shows. A change that the table :data:`TRANSITIONS` does not allow is a defect of the
scheduler: with ``OAK_LIFECYCLE_STRICT=1`` in the environment (the test suite sets it) it raises
:class:`InvalidTransition`; otherwise it is recorded with the reason marked ``unexpected``, never fatal to a
running service.

The engine's :class:`~oak.engine.ledger.Phase` is the simulated job's; :data:`ENGINE_PHASE` maps each runtime
phase onto it (the runtime has what a real process adds: backing off, stopping, failed for good, cancelled).
"""

from __future__ import annotations

import os
from enum import StrEnum
from typing import TYPE_CHECKING

from oak.engine.ledger import Phase

if TYPE_CHECKING:
    from oak.runtime.store import JobRecord


class JobPhase(StrEnum):
    """Where a runtime job stands."""

    PENDING = "pending"
    """Submitted; its submit time has not come."""
    QUEUED = "queued"
    """Arrived; holds no devices."""
    BACKOFF = "backoff"
    """Failed without progress; not placed again before its back-off ends."""
    RESTORING = "restoring"
    """Launched; not yet past the step it resumed from."""
    RUNNING = "running"
    """Making progress."""
    STOPPING = "stopping"
    """Asked to checkpoint and exit (moved, cancelled, shut down); holds its devices until it has."""
    DONE = "done"
    FAILED = "failed"
    """Failed for good (its input is bad, or it failed too often in a row without progress)."""
    CANCELLED = "cancelled"


P = JobPhase
TRANSITIONS: dict[JobPhase, frozenset[JobPhase]] = {
    P.PENDING: frozenset({P.QUEUED, P.CANCELLED}),
    P.QUEUED: frozenset({P.RESTORING, P.BACKOFF, P.FAILED, P.CANCELLED, P.DONE}),
    P.BACKOFF: frozenset({P.QUEUED, P.CANCELLED}),
    P.RESTORING: frozenset({P.RUNNING, P.STOPPING, P.QUEUED, P.BACKOFF, P.FAILED, P.DONE}),
    P.RUNNING: frozenset({P.STOPPING, P.QUEUED, P.BACKOFF, P.FAILED, P.DONE}),
    P.STOPPING: frozenset({P.QUEUED, P.DONE, P.CANCELLED, P.FAILED, P.BACKOFF}),
    P.DONE: frozenset(),
    P.FAILED: frozenset({P.QUEUED}),
    P.CANCELLED: frozenset({P.QUEUED, P.PENDING}),
}
"""Phase → the phases a job may go to next. QUEUED → DONE: a job found finished while no scheduler ran (its
record last committed before its launch); FAILED / CANCELLED → QUEUED (or PENDING, cancelled before it arrived): ``oak retry``, ``--retry-failed``."""

ENGINE_PHASE: dict[JobPhase, Phase] = {
    P.PENDING: Phase.PENDING,
    P.QUEUED: Phase.WAITING,
    P.BACKOFF: Phase.WAITING,
    P.RESTORING: Phase.RESTORING,
    P.RUNNING: Phase.RUNNING,
    P.STOPPING: Phase.RESTORING,  # checkpointing to stop counts as restore time, as in the simulator
    P.DONE: Phase.DONE,
    P.FAILED: Phase.DONE,
    P.CANCELLED: Phase.DONE,
}

HISTORY_KEPT = 100
"""Entries of a job's history kept in its record (the oldest are dropped)."""


class InvalidTransition(RuntimeError):
    """A change of phase that :data:`TRANSITIONS` does not allow (raised under ``OAK_LIFECYCLE_STRICT=1``)."""


TERMINAL = frozenset({P.DONE, P.FAILED, P.CANCELLED})


def phase_of(r: JobRecord, *, stopping: bool = False) -> JobPhase:
    """The phase the job's current incarnation puts it in (``stopping``: a stop of it is in flight). Pending
    and the phases a job ends in are left only by an event that enters another (arrival, ``oak retry``); a
    stop for a cancel ends in cancelled."""
    current = P(r.phase)
    if stopping:
        return P.STOPPING
    if current is P.PENDING or current in TERMINAL:
        return current
    if r.ending == P.CANCELLED:
        return P.CANCELLED
    if r.launched_at_s is not None:
        return P.RUNNING if r.ready else P.RESTORING
    if r.retry_at_s > 0:
        return P.BACKOFF
    return P.QUEUED


def legacy_phase(r: JobRecord, *, arrived: bool = False, done: bool = False, cancelled: bool = False) -> JobPhase:
    """The phase of a record committed when flags held the job's state (``arrived``, ``done``,
    ``cancelled``) and it had none."""
    if done:
        return P.DONE
    if cancelled:
        return P.CANCELLED
    if r.gave_up is not None:
        return P.FAILED
    if r.launched_at_s is not None:
        return P.RUNNING if r.ready else P.RESTORING
    if not arrived:
        return P.PENDING
    if r.retry_at_s > 0:
        return P.BACKOFF
    return P.QUEUED


def enter(r: JobRecord, phase: JobPhase, t: float, why: str) -> None:
    """Record that the job went to ``phase`` at run-clock ``t`` because of ``why`` (nothing if it is there)."""
    current = JobPhase(r.phase)
    if phase is current:
        return
    if phase not in TRANSITIONS[current]:
        msg = f"job {r.name!r}: {current.value} -> {phase.value} is not a valid transition ({why})"
        if os.environ.get("OAK_LIFECYCLE_STRICT") == "1":
            raise InvalidTransition(msg)
        why = f"unexpected: {why}"
    r.phase = phase.value
    r.history.append([round(t, 3), phase.value, why])
    del r.history[:-HISTORY_KEPT]
