"""What a front end plugs into a run: an inbox of requests and a publisher of state.

:class:`~oak.runtime.scheduler.RuntimeScheduler` is the whole scheduler of ``oak run`` and of ``oak serve``.
A front end adds nothing to its rounds; it *composes* with it through two collaborators given to its
constructor (``oak serve``'s are :mod:`oak.service.scheduler`'s ``RequestInbox`` and ``StatePublisher``):

* an :class:`Inbox`, taken on the scheduler's own thread at the start of every tick (the reconciler's sync):
  it applies what arrived since the last tick through the scheduler's public operations (``submit``,
  ``cancel``, ``retry``), each committed before it returns;
* a :class:`Publisher`, given the tick's state after the tick's commit, and each structured event of the run
  (a round decided, a policy error).

Both are optional: ``oak run`` has neither, a test may give either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from oak.runtime.scheduler import RuntimeScheduler


class Inbox(Protocol):
    """Requests that change a run while it runs (``oak submit``, ``oak cancel``, ``oak retry``)."""

    def take(self, sched: RuntimeScheduler, now: float) -> bool:
        """Apply the requests that arrived since the last tick, on the scheduler's thread, at run-clock time
        ``now``; True if a job or the job set changed (a round is due)."""
        ...


class Publisher(Protocol):
    """Where a run's state goes for others to read (``oak status``, metrics, a log)."""

    def publish(self, sched: RuntimeScheduler, now: float) -> None:
        """The tick's state, after its commit (called once per tick, on the scheduler's thread)."""
        ...

    def note(self, event: dict[str, Any]) -> None:
        """One structured event of the run: ``{"event": "round", ...}``, ``{"event": "policy-error", ...}``."""
        ...
