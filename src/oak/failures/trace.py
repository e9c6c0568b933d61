"""A failure log replayed: ``--failure-model trace:FILE`` (a real cluster's failures, or a run's, ``oak export-trace``).

The file is CSV with a header; one failure per line::

    time_s,job,node,kind,down_s
    120.5,bert-3,,crash,
    900,,2,node-loss,1800

* ``time_s``: when (seconds of the simulated clock, the workload's submit times' clock), a number >= 0;
* ``job`` *or* ``node`` (exactly one): a job's name (it fails if it holds GPUs at that time; otherwise the line
  has no effect: the job's own hardware or code failed while it ran), or a node's index in the cluster's order
  (0-based: the node goes down, every job with a GPU on it fails, and no job is placed on it for ``down_s``);
* ``kind``: what failed, one of :data:`KINDS` (``injected``: the runtime's own fault injection; ``crash``: a
  rank exited with an error; ``stall``: a job stopped reporting; ``node-loss``: a node went down or was cut off);
* ``down_s``: how long a node stays down (node lines; empty: the model's ``repair_s``, 3,600 s by default).

A job line of kind ``node-loss`` is a job failed by its node (the node's own line, if any, takes its devices).
The events are a pure function of the file: every policy and seed meets the same ones (paired), and a job's line
fires only while that job holds GPUs. Errors name the file, line and field.
"""

from __future__ import annotations

import bisect
import csv
import functools
import io
import math
from dataclasses import dataclass
from pathlib import Path

from oak.errors import OakInputError
from oak.io_util import plain_float, text_lines

KINDS = ("injected", "crash", "stall", "node-loss")
"""What can fail: the runtime's injected kill, a rank's error exit, a stall, a node lost or cut off."""
COLUMNS = ("time_s", "job", "node", "kind", "down_s")
REQUIRED = ("time_s", "job", "node", "kind")


@dataclass(frozen=True)
class FailureEvent:
    """One line of a failure log: a job's failure (``job``) or a node's (``node``), at ``time_s``."""

    time_s: float
    kind: str
    job: str = ""
    node: int = -1
    down_s: float | None = None

    def row(self) -> dict[str, str]:
        return {
            "time_s": f"{self.time_s:.3f}",
            "job": self.job,
            "node": str(self.node) if self.node >= 0 else "",
            "kind": self.kind,
            "down_s": "" if self.down_s is None else f"{self.down_s:.3f}",
        }


@dataclass(frozen=True)
class FailureTrace:
    """A failure log, its events sorted by time (stable: lines at the same time keep the file's order)."""

    path: str
    events: tuple[FailureEvent, ...]

    @functools.cached_property
    def job_events(self) -> tuple[FailureEvent, ...]:
        return tuple(e for e in self.events if e.job)

    @functools.cached_property
    def node_events(self) -> tuple[FailureEvent, ...]:
        return tuple(e for e in self.events if not e.job)

    @functools.cached_property
    def _times(self) -> tuple[list[float], list[float]]:
        return [e.time_s for e in self.job_events], [e.time_s for e in self.node_events]

    def jobs_between(self, lo: float, hi: float) -> tuple[FailureEvent, ...]:
        """The job lines with lo <= time < hi (a grid interval's: looked up, not scanned)."""
        times = self._times[0]
        return self.job_events[bisect.bisect_left(times, lo) : bisect.bisect_left(times, hi)]

    def nodes_between(self, lo: float, hi: float) -> tuple[FailureEvent, ...]:
        """The node lines with lo <= time < hi."""
        times = self._times[1]
        return self.node_events[bisect.bisect_left(times, lo) : bisect.bisect_left(times, hi)]

    def check_nodes(self, n_nodes: int, where: str) -> None:
        """Fail if a node line names a node the cluster does not have."""
        for e in self.node_events:
            if e.node >= n_nodes:
                raise OakInputError(
                    f"{self.path}: node {e.node} (at {e.time_s:g} s): {where} has {n_nodes} node(s), indices 0.."
                    f"{n_nodes - 1}"
                )

    def check_jobs(self, names: set[str], where: str) -> None:
        """Fail if a job line names no job of the workload."""
        unknown = sorted({e.job for e in self.job_events} - names)
        if unknown:
            raise OakInputError(
                f"{self.path}: job(s) {', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''} not in {where}"
            )


def load_failure_trace(path: str | Path) -> FailureTrace:
    """Read and validate a failure log (module docstring); OakInputError names the file, line and field."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")  # a leading BOM is no header
    except (OSError, UnicodeDecodeError) as exc:
        raise OakInputError(f"--failure-model trace:{path}: cannot read the failure log ({exc})") from None
    rows = csv.reader(text_lines(text))
    header = next(rows, None)
    if header is None:
        raise OakInputError(f"{p}:1: empty failure log; expected the header {','.join(COLUMNS)}")
    names = [h.strip() for h in header]
    missing = [c for c in REQUIRED if c not in names]
    unknown = [c for c in names if c not in COLUMNS]
    if missing or unknown:
        raise OakInputError(
            f"{p}:1: header {','.join(names)}: "
            + (f"missing column(s) {', '.join(missing)}" if missing else f"unknown column(s) {', '.join(unknown)}")
            + f"; expected {','.join(COLUMNS)} (down_s optional)"
        )
    col = {c: names.index(c) for c in names}
    events: list[FailureEvent] = []
    for line, row in enumerate(rows, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(names):
            raise OakInputError(f"{p}:{line}: {len(row)} field(s); expected {len(names)} ({','.join(names)})")
        get = {c: row[i].strip() for c, i in col.items()}
        time_s = _number(p, line, "time_s", get["time_s"])
        kind = get["kind"]
        if kind not in KINDS:
            raise OakInputError(f"{p}:{line}: kind {kind!r}: expected one of {', '.join(KINDS)}")
        job, node_text = get["job"], get["node"]
        if bool(job) == bool(node_text):
            raise OakInputError(f"{p}:{line}: expected exactly one of job and node (a job's failure or a node's)")
        node = -1
        if node_text:
            if not (node_text.isascii() and node_text.isdigit()):
                raise OakInputError(f"{p}:{line}: node {node_text!r}: expected a node index (an integer >= 0)")
            node = int(node_text)
        down_text = get.get("down_s", "")
        down: float | None = None
        if down_text:
            if job:
                raise OakInputError(f"{p}:{line}: down_s is a node's repair time; a job's line leaves it empty")
            down = _number(p, line, "down_s", down_text, positive=True)
        events.append(FailureEvent(time_s, kind, job, node, down))
    events.sort(key=lambda e: e.time_s)
    return FailureTrace(str(p), tuple(events))


def failure_log_csv(events: list[FailureEvent]) -> str:
    """The failure log of ``events`` as CSV text, in the format :func:`load_failure_trace` reads."""
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for e in sorted(events, key=lambda e: e.time_s):
        w.writerow(e.row())
    return out.getvalue()


def _number(p: Path, line: int, field: str, text: str, positive: bool = False) -> float:
    """A finite number of seconds >= 0 (> 0 with ``positive``)."""
    try:
        value = plain_float(text)
    except ValueError:
        raise OakInputError(f"{p}:{line}: {field} {text!r}: expected a number of seconds") from None
    if not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
        bound = "> 0" if positive else ">= 0"
        raise OakInputError(f"{p}:{line}: {field} {text!r}: expected a finite number of seconds {bound}")
    return value
