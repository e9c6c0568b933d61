"""A runtime job's lifecycle (``oak.runtime.lifecycle``): its phases, the table of valid transitions, the history.

Every runtime scheduler of the suite runs with ``OAK_LIFECYCLE_STRICT=1`` (tests/conftest.py), so each test that
drives one — scripted on a fake clock or with real processes — also checks that every change of phase it makes
is one the table allows."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from oak.engine.ledger import Phase
from oak.runtime.lifecycle import (
    ENGINE_PHASE,
    HISTORY_KEPT,
    TRANSITIONS,
    InvalidTransition,
    JobPhase,
    enter,
    phase_of,
)
from oak.runtime.store import JobRecord


def test_the_table_covers_every_phase_and_done_is_final() -> None:
    assert set(TRANSITIONS) == set(JobPhase) == set(ENGINE_PHASE)
    assert TRANSITIONS[JobPhase.DONE] == frozenset()
    assert all(p not in TRANSITIONS[p] for p in JobPhase)  # staying is no transition
    # every phase can be reached from another, and every one but done can be left
    assert {q for targets in TRANSITIONS.values() for q in targets} == set(JobPhase)
    assert all(TRANSITIONS[p] for p in JobPhase if p is not JobPhase.DONE)
    assert ENGINE_PHASE[JobPhase.RUNNING] is Phase.RUNNING and ENGINE_PHASE[JobPhase.QUEUED] is Phase.WAITING


@pytest.mark.parametrize(
    ("fields", "stopping", "expected"),
    [
        ({}, False, "pending"),  # left only by the arrival event
        ({"phase": "queued"}, False, "queued"),
        ({"phase": "queued", "retry_at_s": 40.0}, False, "backoff"),
        ({"phase": "backoff"}, False, "queued"),  # its back-off ended
        ({"phase": "queued", "launched_at_s": 3.0}, False, "restoring"),
        ({"phase": "restoring", "launched_at_s": 3.0, "ready": True}, False, "running"),
        ({"phase": "running", "launched_at_s": 3.0, "ready": True, "ending": "cancelled"}, True, "stopping"),
        ({"phase": "stopping", "ending": "cancelled"}, False, "cancelled"),  # a cancel's stop ended
        ({"phase": "stopping"}, False, "queued"),  # a move's stop ended
        ({"phase": "failed", "gave_up": "bad input"}, False, "failed"),  # terminal: left only by a retry
        ({"phase": "done", "launched_at_s": 3.0}, False, "done"),
        ({"phase": "cancelled"}, False, "cancelled"),
    ],
)
def test_the_phase_follows_the_current_incarnation(fields: dict[str, object], stopping: bool, expected: str) -> None:
    assert phase_of(JobRecord("j", **fields), stopping=stopping).value == expected  # type: ignore[arg-type]


def test_arrived_done_cancelled_and_over_are_read_from_the_phase() -> None:
    r = JobRecord("j")
    assert not r.arrived and not r.over and r.state == "queued"
    r.phase, r.ending = "stopping", "cancelled"
    assert r.arrived and r.cancelled and r.over and r.state == "cancelled"
    for phase, over in (("queued", False), ("running", False), ("done", True), ("failed", True)):
        r = JobRecord("j", phase=phase)
        assert r.over == over and r.done == (phase == "done") and r.failed == (phase == "failed")


def test_enter_records_valid_transitions_and_refuses_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    r = JobRecord("j")
    enter(r, JobPhase.QUEUED, 1.0, "arrived")
    enter(r, JobPhase.QUEUED, 1.5, "arrived again")  # no change, no entry
    enter(r, JobPhase.RESTORING, 2.0, "launched")
    assert r.phase == "restoring" and r.history == [[1.0, "queued", "arrived"], [2.0, "restoring", "launched"]]
    monkeypatch.setenv("OAK_LIFECYCLE_STRICT", "1")
    with pytest.raises(InvalidTransition, match="'j': restoring -> pending is not a valid transition"):
        enter(r, JobPhase.PENDING, 3.0, "a defect")
    assert r.phase == "restoring" and len(r.history) == 2
    monkeypatch.delenv("OAK_LIFECYCLE_STRICT")  # a running service records it, marked, and goes on
    enter(r, JobPhase.PENDING, 3.0, "a defect")
    assert r.phase == "pending" and r.history[-1] == [3.0, "pending", "unexpected: a defect"]


def test_the_history_keeps_its_newest_entries() -> None:
    r = JobRecord("j", phase="queued")
    for k in range(HISTORY_KEPT + 30):
        enter(r, JobPhase.RESTORING, 2.0 * k, f"launch {k}")
        enter(r, JobPhase.QUEUED, 2.0 * k + 1, f"failure {k}")
    assert len(r.history) == HISTORY_KEPT and r.history[-1] == [
        2.0 * (HISTORY_KEPT + 29) + 1,
        "queued",
        f"failure {HISTORY_KEPT + 29}",
    ]


def test_a_record_committed_before_the_lifecycle_gets_the_phase_its_fields_describe() -> None:
    old = asdict(JobRecord("j", launched_at_s=4.0, ready=True))
    del old["phase"], old["history"], old["ending"]
    r = JobRecord.from_json(json.dumps({**old, "arrived": True, "done": False, "cancelled": False}))
    assert r.phase == "running" and r.history == [] and r.arrived and not r.over
    r = JobRecord.from_json(json.dumps({**old, "arrived": True, "done": True, "cancelled": False}))
    assert r.phase == "done"
    # committed while the flags held the state beside a phase: a cancel's stop in flight stays one
    flagged = asdict(JobRecord("j", launched_at_s=4.0, ready=True, phase="stopping"))
    del flagged["ending"]
    r = JobRecord.from_json(json.dumps({**flagged, "arrived": True, "done": False, "cancelled": True}))
    assert r.phase == "stopping" and r.ending == "cancelled" and r.cancelled
    # a finish committed as a flag beside a stop in flight (at a shutdown): done, never run again
    r = JobRecord.from_json(json.dumps({**flagged, "arrived": True, "done": True, "cancelled": False}))
    assert r.phase == "done" and r.done and r.over


def test_a_record_with_a_field_of_a_newer_oak_reads_with_that_field_dropped() -> None:
    """Each field a later oak adds has a default, so an older one reads a newer run (``oak status``,
    ``oak export-trace``) instead of failing on the field it does not know."""
    newer = {**asdict(JobRecord("j", launched_at_s=4.0, ready=True, phase="running")), "a_later_field": 1.5}
    r = JobRecord.from_json(json.dumps(newer))
    assert r == JobRecord("j", launched_at_s=4.0, ready=True, phase="running")
