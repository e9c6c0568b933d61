"""One incarnation layer over a narrow backend: what every executor does the same way, written once.

A :class:`Backend` knows three things: how to ``launch`` an incarnation of a job (its ranks, one per device),
how to ``kill`` it with a signal (SIGTERM: checkpoint and exit; SIGKILL: now, and reap it), and how to
``list`` what it runs — each job's latest incarnation, its rank pids and exit statuses. :class:`Incarnations`
builds the scheduler's whole :class:`~oak.runtime.executor.Executor` on those three: the outcome of an
incarnation (the one rule, :func:`~oak.runtime.executor.classify`), its status file, asking for a stop without
waiting, a bounded stop at shutdown, reaping the peers of a failed rank, ranks a SIGKILL did not end, and the
reconciliation of the intended allocation with what runs. A backend declares more as a capability: one with
``adopt`` (:class:`Adopting`) follows an incarnation a previous scheduler of the run launched.

:class:`~oak.runtime.executor.LocalExecutor` is this layer over local processes; a fourth backend is a
``Backend`` (``tests/test_incarnations.py`` runs the scheduler on one written in a few lines).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from oak.runtime.jobs_file import RuntimeJob
from oak.runtime.launch import DONE_FILE, read_status
from oak.runtime.nodes import RuntimeNode

JobState = Literal["running", "done", "stopped", "failed"]


def classify(codes: Sequence[int | None], *, command: bool, stop_requested: bool, done_marker: bool) -> JobState:
    """How an incarnation stands, from its ranks' exit statuses (None: still running; negative: ended by that
    signal) — the one rule every backend applies. A rank that failed makes it ``failed`` at once (its peers are
    the backend's to reap); all ranks exited 0: ``done`` if it reached its target — the packaged worker's
    ``done_marker``; a command that exited 0 unasked — else ``stopped``. A command ended by the SIGTERM it was
    asked to stop with exited as asked: 0."""
    if command and stop_requested:
        codes = [0 if c == -signal.SIGTERM else c for c in codes]
    if any(c is not None and c != 0 for c in codes):
        return "failed"
    if any(c is None for c in codes):
        return "running"
    finished = not stop_requested if command else done_marker
    return "done" if finished else "stopped"


@dataclass(frozen=True)
class Launch:
    """One incarnation to start: the job, its directory, the device ids it gets and the worker seed; on a
    run over a cluster's nodes (``--cluster-from``), ``hosts``: the node of each rank, rank 0 first (empty: the
    backend's one node, or wherever it places the ranks)."""

    job: RuntimeJob
    job_dir: Path
    devices: tuple[int, ...]
    seed: int
    hosts: tuple[RuntimeNode, ...] = ()


@dataclass(frozen=True)
class Ranks:
    """What a backend runs of one incarnation: its rank pids and exit statuses, rank 0 first (None: still
    running; negative: ended by that signal)."""

    pids: tuple[int, ...]
    codes: tuple[int | None, ...]
    lost: str = ""
    """Why the backend ended the incarnation apart from its ranks (a node failure, a cluster's cancel): it
    failed, whatever its ranks' statuses."""


class Backend(Protocol):
    """The narrow contract of a backend: launch, kill and list."""

    device_kind: str

    def launch(self, item: Launch) -> None:
        """Start one rank per device of ``item`` (``oak.runtime.launch.rank_commands`` builds each rank's argv
        and environment under the job contract); it replaces the job's previous incarnation in ``list``."""
        ...

    def kill(self, name: str, sig: int) -> None:
        """Send ``sig`` to every live rank of the job's incarnation (a command rank: its process group).
        SIGKILL also reaps them, waiting a bounded time. Nothing to do for a job it does not run."""
        ...

    def list(self) -> dict[str, Ranks]:
        """Every job's latest incarnation, running or ended (until the job is launched again)."""
        ...


@runtime_checkable
class Reaping(Protocol):
    """A backend that knows which ranks a SIGKILL did not end (else: the ranks ``list`` shows running after
    it)."""

    def unreaped(self, name: str) -> list[int]: ...


@runtime_checkable
class Adopting(Protocol):
    """A backend that can follow what a previous scheduler of the run launched (a capability: a backend
    without it has every job of a restarted scheduler stopped and started again)."""

    def adopt(self, item: Launch, pids: list[int]) -> bool:
        """Take over the incarnation of ``item`` if it still runs whole under ``pids`` (rank order); it is
        then in ``list``. False if it cannot."""
        ...


@dataclass
class _Incarnation:
    job_dir: Path
    command: bool
    stop_requested: bool = False


class Incarnations:
    """The scheduler's :class:`~oak.runtime.executor.Executor` over a :class:`Backend` (see the module doc).
    ``poll_s``: how often a blocking ``stop`` looks at the backend's list; ``list_ttl_s``: how long one listing
    answers the questions about every job (a scheduler's tick asks several per job: one listing serves them
    all; 0 lists anew each time). Anything this layer does to a job lists anew."""

    def __init__(self, backend: Backend, *, poll_s: float = 0.02, list_ttl_s: float = 0.0) -> None:
        self.backend = backend
        self.device_kind: str = backend.device_kind
        self.poll_s = poll_s
        self.list_ttl_s = list_ttl_s
        self._live: dict[str, _Incarnation] = {}
        self._stuck: dict[str, list[int]] = {}
        self._gone: set[str] = set()
        """Jobs this layer killed and has not launched again: what is left of them is ``unreaped``, not a
        stray for ``reconcile``."""
        self._listing: tuple[float, dict[str, Ranks]] | None = None

    def _list(self) -> dict[str, Ranks]:
        now = time.monotonic()
        if self._listing is None or now - self._listing[0] > self.list_ttl_s:
            self._listing = (now, self.backend.list())
        return self._listing[1]

    def _changed(self) -> None:
        self._listing = None

    # ------------------------------------------------------------------ start
    def launch(self, item: Launch) -> None:
        name = item.job.name
        if name in self._live:
            raise RuntimeError(f"job {name!r} is already running")
        self._stuck.pop(name, None)
        self._changed()
        self.backend.launch(item)
        self._gone.discard(name)
        self._live[name] = _Incarnation(Path(item.job_dir), item.job.is_command)

    def adopt(self, item: Launch, pids: list[int]) -> bool:
        name = item.job.name
        if name in self._live or not isinstance(self.backend, Adopting) or not self.backend.adopt(item, pids):
            return False
        self._changed()
        self._gone.discard(name)
        self._live[name] = _Incarnation(Path(item.job_dir), item.job.is_command)
        return True

    # ------------------------------------------------------------------ observe
    def _ranks(self, name: str) -> Ranks | None:
        return self._list().get(name) if name in self._live else None

    def _judge(self, inc: _Incarnation, ranks: Ranks) -> JobState:
        """The incarnation's outcome: failed if the backend lost it, else by the one rule."""
        if ranks.lost:
            return "failed"
        return classify(
            ranks.codes,
            command=inc.command,
            stop_requested=inc.stop_requested,
            done_marker=(inc.job_dir / DONE_FILE).is_file(),
        )

    def state(self, name: str) -> JobState | None:
        inc = self._live.get(name)
        if inc is None:
            return None
        ranks = self._ranks(name)
        if ranks is None:
            return "failed"  # the backend lost it
        outcome = self._judge(inc, ranks)
        if outcome == "failed" and None in ranks.codes:
            self._changed()
            self.backend.kill(name, signal.SIGKILL)  # reap the surviving peers of a dead rank
        return outcome

    def status(self, name: str) -> dict[str, Any] | None:
        inc = self._live.get(name)
        return None if inc is None else read_status(inc.job_dir)

    def pids(self, name: str) -> list[int]:
        ranks = self._ranks(name)
        return [] if ranks is None else list(ranks.pids)

    def exit_codes(self, name: str) -> list[int | None]:
        ranks = self._ranks(name)
        return [] if ranks is None else list(ranks.codes)

    def unreaped(self, name: str) -> list[int]:
        return list(self._stuck.get(name, []))

    # ------------------------------------------------------------------ stop and kill
    def request_stop(self, names: list[str]) -> None:
        for name in names:
            inc = self._live.get(name)
            if inc is not None and not inc.stop_requested:
                inc.stop_requested = True
                self._changed()
                self.backend.kill(name, signal.SIGTERM)

    def stop(self, names: list[str], timeout_s: float) -> dict[str, JobState]:
        """SIGTERM every named job at once, wait up to ``timeout_s`` s for their checkpoints, SIGKILL the rest."""
        names = [n for n in names if n in self._live]
        self.request_stop(names)
        deadline = time.monotonic() + timeout_s
        out: dict[str, JobState] = {}
        waiting = list(names)
        while waiting:
            listed = self.backend.list()
            for name in list(waiting):
                ranks = listed.get(name)
                if ranks is None or self._judge(self._live[name], ranks) != "running":
                    waiting.remove(name)
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(self.poll_s)
        listed = self.backend.list()
        for name in names:
            ranks = listed.get(name)
            outcome = "failed" if ranks is None else self._judge(self._live[name], ranks)
            out[name] = "failed" if outcome == "running" else outcome  # not out in time: SIGKILLed
            self.kill(name)
        return out

    def kill(self, name: str) -> None:
        if self._live.pop(name, None) is None:
            return
        self._changed()
        self.backend.kill(name, signal.SIGKILL)
        self._gone.add(name)
        if isinstance(self.backend, Reaping):
            stuck = self.backend.unreaped(name)
        else:
            ranks = self.backend.list().get(name)
            stuck = [] if ranks is None else [p for p, c in zip(ranks.pids, ranks.codes, strict=True) if c is None]
        if stuck:
            self._stuck[name] = stuck

    # ------------------------------------------------------------------ reconcile
    def reconcile(self, intended: dict[str, tuple[int, ...]]) -> list[str]:
        """What runs against what is intended: a job whose ranks run but is not intended is killed (also one
        this layer did not launch); an intended job that nothing runs, or on another number of ranks, is
        reported."""
        issues: list[str] = []
        self._changed()
        listed = self._list()
        running = {n for n, r in listed.items() if None in r.codes} - self._gone
        for name in sorted((running | set(self._live)) - set(intended)):
            ranks = listed.get(name)
            if ranks is None or None not in ranks.codes:
                continue
            issues.append(f"{name}: runs on {len(ranks.pids)} rank(s) but is not intended; killed")
            if name in self._live:
                self.kill(name)
            else:
                self._changed()
                self.backend.kill(name, signal.SIGKILL)
        for name, devices in sorted(intended.items()):
            ranks = listed.get(name) if name not in self._gone else None
            if ranks is None:
                issues.append(f"{name}: intended on {len(devices)} device(s), no process runs it")
            elif len(ranks.pids) != len(devices):
                issues.append(f"{name}: intended on {len(devices)} device(s), runs {len(ranks.pids)} rank(s)")
        return issues

    def shutdown(self) -> None:
        for name in list(self._live):
            self.kill(name)
