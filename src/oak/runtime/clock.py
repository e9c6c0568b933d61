"""The clock the runtime scheduler reads (injected: ``RuntimeScheduler(..., clock=...)``).

The scheduler's own time — the run clock, back-offs, stall detection, its tick — comes from a :class:`Clock`;
:class:`SystemClock` is the machine's, :class:`FakeClock` one that tests move by hand: its ``sleep`` advances it
at once, so a scripted run of hundreds of rounds (back-off, retry limit, stall) takes milliseconds. Waits on real
processes (an orphan's exit, a SIGKILL's reaping) stay on the machine's clock: they wait for the kernel.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Seconds since the epoch (``time``) and a way to let them pass (``sleep``)."""

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The machine's clock."""

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class FakeClock:
    """A clock that moves only when told: ``sleep`` and ``advance`` add to it at once (for tests)."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = float(start)

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, float(seconds))

    def advance(self, seconds: float) -> None:
        self.sleep(seconds)
