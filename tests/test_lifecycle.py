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
        ({}, False, "pending"),
        ({"arrived": True}, False, "queued"),
        ({"arrived": True, "retry_at_s": 40.0}, False, "backoff"),
        ({"arrived": True, "launched_at_s": 3.0}, False, "restoring"),
        ({"arrived": True, "launched_at_s": 3.0, "ready": True}, False, "running"),
        ({"arrived": True, "launched_at_s": 3.0, "ready": True, "cancelled": True}, True, "stopping"),
        ({"arrived": True, "cancelled": True}, False, "cancelled"),
        ({"arrived": True, "gave_up": "bad input"}, False, "failed"),
        ({"arrived": True, "done": True, "cancelled": True}, False, "done"),
    ],
)
def test_the_phase_is_what_the_records_fields_describe(
    fields: dict[str, object], stopping: bool, expected: str
) -> None:
    assert phase_of(JobRecord("j", **fields), stopping=stopping).value == expected  # type: ignore[arg-type]


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
    r = JobRecord("j", arrived=True, phase="queued")
    for k in range(HISTORY_KEPT + 30):
        enter(r, JobPhase.RESTORING, 2.0 * k, f"launch {k}")
        enter(r, JobPhase.QUEUED, 2.0 * k + 1, f"failure {k}")
    assert len(r.history) == HISTORY_KEPT and r.history[-1] == [
        2.0 * (HISTORY_KEPT + 29) + 1,
        "queued",
        f"failure {HISTORY_KEPT + 29}",
    ]


def test_a_record_committed_before_the_lifecycle_gets_the_phase_its_fields_describe() -> None:
    old = asdict(JobRecord("j", arrived=True, launched_at_s=4.0, ready=True))
    del old["phase"], old["history"]
    r = JobRecord.from_json(json.dumps(old))
    assert r.phase == "running" and r.history == []
