"""A scripted executor on a fake clock: incarnations whose fates a test decides, no processes, no waiting."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oak.runtime.clock import FakeClock
from oak.runtime.executor import JobState, Launch


@dataclass
class Fate:
    """What one incarnation does: report steps up to ``reach`` (from the step it resumed at), then end as
    ``end`` after ``after_s`` seconds ("running" forever; ``exit_codes`` for a failure); ``freeze``: its
    status stops updating (``updated_at`` fixed at launch); ``durable``: it checkpointed at ``reach`` (else the
    steps are lost with the failure)."""

    end: JobState = "failed"
    after_s: float = 0.0
    exit_codes: tuple[int, ...] = (1,)
    reach: int = 0
    freeze: bool = False
    durable: bool = True
    step_s: float = 0.0
    """Its measured step time, reported with its steps (the worker's ``steps_timed`` / ``step_time_s``)."""
    freeze_after_s: float = float("inf")
    """Its status stops updating this long after its launch (a rank lost: the others block in a collective)."""


@dataclass
class ScriptedExecutor:
    """An executor whose incarnations follow ``fates`` in order (the last one repeats)."""

    fates: list[Fate]
    device_kind: str = "cpu"
    clock: FakeClock = field(default_factory=FakeClock)
    launches: list[tuple[float, tuple[int, ...]]] = field(default_factory=list)
    kills: int = 0
    adopts: bool = False
    """Whether a restarted scheduler on this executor adopts the incarnations it still runs (else none)."""
    _live: dict[str, tuple[Fate, float, int]] = field(default_factory=dict)

    def adopt(self, item: Launch, pids: list[int]) -> bool:
        return self.adopts and item.job.name in self._live

    def launch(self, item: Launch) -> None:
        fate = self.fates[min(len(self.launches), len(self.fates) - 1)]
        self.launches.append((self.clock.time(), item.devices))
        if fate.reach and fate.durable:  # what the scheduler reads back as the newest checkpoint
            item.job_dir.mkdir(parents=True, exist_ok=True)
            for suffix in ("pt", "sha256"):
                (item.job_dir / f"ckpt-{fate.reach}.{suffix}").write_bytes(b"")
        self._live[item.job.name] = (fate, self.clock.time(), 1000 + len(self.launches))

    def state(self, name: str) -> JobState | None:
        if name not in self._live:
            return None
        fate, t0, _ = self._live[name]
        return fate.end if self.clock.time() - t0 >= fate.after_s else "running"

    def status(self, name: str) -> dict[str, Any] | None:
        if name not in self._live:
            return None
        fate, t0, pid = self._live[name]
        status: dict[str, Any] = {
            "pid": pid,
            "step": fate.reach,
            "updated_at": t0 if fate.freeze else min(self.clock.time(), t0 + fate.freeze_after_s),
        }
        if fate.step_s > 0 and fate.reach:
            status.update(steps_timed=fate.reach, step_time_s=fate.step_s)
        return status

    def pids(self, name: str) -> list[int]:
        return [self._live[name][2]] if name in self._live else []

    def exit_codes(self, name: str) -> list[int | None]:
        if name not in self._live:
            return []
        fate = self._live[name][0]
        return list(fate.exit_codes) if self.state(name) == "failed" else [None]

    def unreaped(self, name: str) -> list[int]:
        return []

    def reconcile(self, intended: dict[str, tuple[int, ...]]) -> list[str]:
        return []

    def request_stop(self, names: list[str]) -> None:
        for n in names:  # a scripted job stops at once
            if n in self._live:
                fate, t0, pid = self._live[n]
                self._live[n] = (Fate(end="stopped", reach=fate.reach, after_s=0.0), t0, pid)

    def stop(self, names: list[str], timeout_s: float) -> dict[str, JobState]:
        out: dict[str, JobState] = {}
        for n in names:
            if n in self._live:
                out[n] = "stopped"
                del self._live[n]
        return out

    def kill(self, name: str) -> None:
        if self._live.pop(name, None) is not None:
            self.kills += 1

    def shutdown(self) -> None:
        self._live.clear()
