"""Durable scheduler state of ``oak run``: one SQLite database (WAL mode) in the run directory.

Each scheduler tick that changes anything writes, in one transaction, every job's record (state, measured
counters, devices, worker process ids) and each round's allocation. A scheduler killed at any instant leaves
the last committed tick; ``oak run`` with the same run directory reads it back, adopts the jobs whose
workers still run (not restarted) and resumes every other job from its newest valid checkpoint.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import sqlite3
import urllib.parse
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from oak.errors import OakInputError

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (name TEXT PRIMARY KEY, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS submissions (
    seq INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, job TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rounds (
    k INTEGER PRIMARY KEY, time_s REAL NOT NULL, decision_ms REAL NOT NULL, allocation TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS explain (
    k INTEGER NOT NULL, job TEXT NOT NULL, time_s REAL NOT NULL, code TEXT NOT NULL, detail TEXT NOT NULL,
    PRIMARY KEY (job, k)
);
CREATE TABLE IF NOT EXISTS failures (
    seq INTEGER PRIMARY KEY, time_s REAL NOT NULL, job TEXT NOT NULL, node TEXT NOT NULL, kind TEXT NOT NULL,
    detail TEXT NOT NULL
);
"""
EXPLAIN_ROUNDS_KEPT = 500
"""Rounds of reasons ``state.sqlite`` keeps (``oak explain``): the newest ones, for every job."""
FAILURE_KINDS = ("injected", "crash", "stall", "node-loss", "node-back")
"""What the ``failures`` table logs: a job's injected kill, its error exit (or refused launch), its stall; a node
going down (its jobs fail with it) and coming back."""


@dataclass
class JobRecord:
    """What the scheduler knows of one job (seconds of the run clock; devices are global ids).

    ``corrupt_skipped`` / ``lost_steps``: checkpoints the job's workers found corrupt and skipped on resume, and
    the steps lost with them (the worker's cumulative ledger, copied from its status). ``gave_up``: why the
    job failed for good (its workers' usage error, or failures that repeat without progress); ``fail_streak``:
    its failures in a row without a step beyond the one it resumed from; ``retry_at_s``: not placed before
    this run-clock time (the back-off after such a failure)."""

    name: str
    finish_s: float | None = None
    step: int = 0
    t_progress_s: float = 0.0
    t_ckpt_s: float = 0.0
    t_queue_s: float = 0.0
    restarts: int = 0
    failures: int = 0
    started: bool = False
    gpu_s: float = 0.0
    gpu_s_lost: float = 0.0
    config: int = -1
    shape: int = -1
    devices: list[int] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    launched_at_s: float | None = None
    launch_step: int = 0
    ready: bool = False
    incarnations: int = 0
    corrupt_skipped: int = 0
    lost_steps: int = 0
    gave_up: str | None = None
    fail_streak: int = 0
    retry_at_s: float = 0.0
    total_steps: int = 0
    batch_size: int = 0
    steplog: dict[str, Any] = field(default_factory=dict)
    reported: bool = False
    silent: bool = False
    resume_step: int = 0
    adopted: int = 0
    """Times a restarted scheduler adopted the job's running incarnation instead of restarting it."""
    stop_asked_s: float | None = None
    """When a stop (SIGTERM: checkpoint and exit) was asked of the current incarnation; committed before the
    signal is sent, so that a restarted scheduler knows the incarnation was ending on request."""
    phase: str = "pending"
    """Its :class:`~oak.runtime.lifecycle.JobPhase`: where the job stands, the one record of it (arrived,
    finished, failed for good, cancelled are read from it); ``history``: each change of phase as [run-clock
    time, phase, reason], the newest ``lifecycle.HISTORY_KEPT``."""
    history: list[list[Any]] = field(default_factory=list)
    why: str = ""
    """Why it holds what it holds after the last round (``oak.engine.reasons``; empty at its maximum or when
    over): ``oak status`` shows it."""
    why_code: str = ""
    ckpt_write_s: float = 0.0
    """Its measured checkpoint write time (s; 0: not measured yet): the packaged worker's mean save, a command
    job's last ``oak.job.report(checkpoint_s=...)``."""
    injected: int = 0
    """Failures the run injected into it (of ``failures``)."""
    advice_s: float = 0.0
    """The checkpoint interval (s) last advised to it (``oak.job.ADVICE_FILE``)."""
    ending: str = ""
    """The phase a stop in flight ends in once the job has exited: ``cancelled`` for a cancel, else empty (the
    job is queued again, or done or failed as its exit says)."""
    last_step_s: float | None = None
    """When the current incarnation was first seen at its last step (run clock; None: not yet): from then until
    it is done it writes its last checkpoint and exits (``oak replay`` models that exit)."""
    launch_ckpt_s: float = 0.0
    """Its ``t_ckpt_s`` when the current incarnation was launched: the restore time this incarnation has
    counted is the difference (noted when it gets past its resume step; ``oak replay`` counts the same)."""

    @property
    def arrived(self) -> bool:
        """Its submit time has come (it left ``pending``)."""
        return self.phase != "pending"

    @property
    def done(self) -> bool:
        return self.phase == "done"

    @property
    def cancelled(self) -> bool:
        """Cancelled, or being stopped for a cancel."""
        return self.phase == "cancelled" or self.ending == "cancelled"

    @property
    def failed(self) -> bool:
        """Failed for good (``gave_up`` says why)."""
        return self.phase == "failed"

    @property
    def over(self) -> bool:
        """Finished, failed for good or cancelled: the scheduler places it no more."""
        return self.done or self.failed or self.cancelled

    @property
    def state(self) -> str:
        """queued / restoring / running / done / failed / cancelled (``oak status``)."""
        if self.done:
            return "done"
        if self.cancelled:
            return "cancelled"
        if self.failed:
            return "failed"
        if self.launched_at_s is not None:
            return "running" if self.ready else "restoring"
        return "queued"

    def unplace(self) -> None:
        """The job holds no devices and runs no workers (stopped, failed, finished or orphan reaped)."""
        self.devices, self.pids, self.config, self.shape, self.ready, self.launched_at_s = [], [], -1, -1, False, None
        self.stop_asked_s = None

    @classmethod
    def from_json(cls, text: str) -> JobRecord:
        fields = json.loads(text)
        # a field a newer oak added (each has a default here): dropped, so an older oak reads a newer run
        known = {f.name for f in dataclasses.fields(cls)} | {"arrived", "done", "cancelled"}
        fields = {k: v for k, v in fields.items() if k in known}
        # committed when the record's flags held its state: its phase is what they describe
        flags = {k: bool(fields.pop(k)) for k in ("arrived", "done", "cancelled") if k in fields}
        r = cls(**fields)
        if "phase" not in fields:
            from oak.runtime.lifecycle import legacy_phase

            r.phase = legacy_phase(r, **flags).value
        elif flags.get("done"):  # the flags won over the phase then (a finish during a shutdown's stop)
            r.phase, r.ending = "done", ""
        elif flags.get("cancelled") and r.phase == "stopping":
            r.ending = "cancelled"
        elif flags.get("cancelled"):
            r.phase = "cancelled"
        return r


class UnreadableRunState(OakInputError):
    """A run directory's state.sqlite that SQLite cannot read as a database (overwritten, truncated, corrupt):
    every command that opens it exits 2 with this message instead of a traceback."""


class RunStore:
    """The run directory's ``state.sqlite``."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        #: opened for reading only (:meth:`for_reading` on a read-only run directory): every write raises
        self.read_only = read_only
        if not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        #: times the write-ahead log was found deleted under a running scheduler and its content saved
        self.wal_recovered = 0
        if read_only:
            self._connect_read_only()
        else:
            self._connect()

    @classmethod
    def for_reading(cls, path: Path) -> RunStore:
        """The store of a command that only reads (``oak status``, ``explain``, ``logs``, ``export-trace``,
        ``replay``): opened as a scheduler opens it where it can, and read-only where the run directory cannot
        be written (an archived run on read-only media, another user's run): such a command must not need to
        write in order to read."""
        try:
            return cls(path)
        except PermissionError:
            pass
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
        except sqlite3.OperationalError as exc:
            if not any(w in str(exc).lower() for w in ("readonly", "read-only", "unable to open")):
                raise
        return cls(path, read_only=True)

    def _connect_read_only(self) -> None:
        """Open the database without writing anything: SQLite's read-only mode, and where even that needs a
        file it cannot create (the write-ahead log's index in a read-only folder), as an immutable file —
        nothing can change it there."""
        uri = "file:" + urllib.parse.quote(str(self.path.absolute()))
        for flags in ("?mode=ro", "?mode=ro&immutable=1"):
            db = sqlite3.connect(uri + flags, uri=True, timeout=30.0, check_same_thread=False)
            try:
                db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.OperationalError:
                db.close()
                if "immutable" in flags:
                    raise
                continue
            except sqlite3.DatabaseError as exc:
                db.close()
                raise UnreadableRunState(
                    f"{self.path}: unreadable ({type(exc).__name__}: {exc}); not the state of an oak run or oak serve"
                ) from exc
            self._db = db
            return

    def _connect(self) -> None:
        # The database, its WAL and its shared-memory file hold every job's command and environment (secrets
        # included): created 0600 whatever the umask (SQLite creates the WAL and SHM with the database's mode
        # bits filtered by the umask, so both are set before it creates any), and tightened if they existed.
        path = self.path
        old = os.umask(0o077)
        try:
            for f in (path, *self.sidecars()):
                if f.exists():
                    f.chmod(0o600)
            self._db = sqlite3.connect(str(path), isolation_level=None, timeout=30.0, check_same_thread=False)
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                self._db.executescript(_SCHEMA)
            except sqlite3.DatabaseError as exc:
                self._db.close()
                if isinstance(exc, sqlite3.OperationalError):  # locked, busy, out of disk: not the file's fault
                    raise
                raise UnreadableRunState(
                    f"{path}: unreadable ({type(exc).__name__}: {exc}); not the state of an oak run or oak serve "
                    "(move it away to start a new run there)"
                ) from exc
        finally:
            os.umask(old)
        for f in (path, *self.sidecars()):
            if f.exists():
                f.chmod(0o600)

    def _keep_wal(self) -> None:
        """Committed transactions live in the write-ahead log until SQLite checkpoints them into the database:
        a WAL deleted under the running scheduler would take them all with it at the next crash (every job
        acknowledged since the last checkpoint, the run's identity with them). SQLite still holds the deleted
        file open, so its content is checkpointed into the database and the connection reopened with a new WAL."""
        if self.sidecars()[0].exists():
            return
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._db.close()
        self._connect()
        self.wal_recovered += 1

    def sidecars(self) -> tuple[Path, Path]:
        """SQLite's write-ahead log and shared-memory index of the database."""
        return self.path.with_name(self.path.name + "-wal"), self.path.with_name(self.path.name + "-shm")

    def close(self) -> None:
        self._db.close()

    def meta(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self._db.execute("SELECT key, value FROM meta")}

    def jobs(self) -> dict[str, JobRecord]:
        return {n: JobRecord.from_json(r) for n, r in self._db.execute("SELECT name, record FROM jobs")}

    def save(
        self,
        records: list[JobRecord],
        meta: dict[str, Any] | None = None,
        rnd: tuple[Any, ...] | None = None,
        explain: list[tuple[str, str, dict[str, Any]]] | None = None,
    ) -> None:
        """Commit the job records (and optionally meta values, one round and its reasons: (job, code, detail)
        per job) atomically; a round's reasons older than ``EXPLAIN_ROUNDS_KEPT`` rounds are dropped."""
        self._keep_wal()
        with self._tx():
            for r in records:
                self._db.execute(
                    "INSERT OR REPLACE INTO jobs VALUES (?, ?)", (r.name, json.dumps(asdict(r), sort_keys=True))
                )
            for k, v in (meta or {}).items():
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (k, json.dumps(v)))
            if rnd is not None:
                self._db.execute("INSERT OR REPLACE INTO rounds VALUES (?, ?, ?, ?)", rnd)
            if rnd is not None and explain:
                rk, t = int(rnd[0]), float(rnd[1])
                self._db.executemany(
                    "INSERT OR REPLACE INTO explain VALUES (?, ?, ?, ?, ?)",
                    [(rk, job, t, code, json.dumps(detail, sort_keys=True)) for job, code, detail in explain],
                )
                if rk % 50 == 0:
                    self._db.execute("DELETE FROM explain WHERE k <= ?", (rk - EXPLAIN_ROUNDS_KEPT,))

    def explain(self, job: str, last: int = 10) -> list[dict[str, Any]]:
        """Job ``job``'s reasons in its last ``last`` recorded rounds, oldest first: k, time_s, code and the
        detail (text, gpus, value, best option, rivals, options)."""
        rows = self._db.execute(
            "SELECT k, time_s, code, detail FROM explain WHERE job = ? ORDER BY k DESC LIMIT ?", (job, int(last))
        ).fetchall()
        return [{"k": k, "time_s": t, "code": c, **json.loads(d)} for k, t, c, d in reversed(rows)]

    def submissions(self) -> list[dict[str, Any]]:
        """The jobs submitted to ``oak serve``, in submission order (JSON objects of RuntimeJob fields)."""
        return [json.loads(t) for (t,) in self._db.execute("SELECT job FROM submissions ORDER BY seq")]

    def submit(self, jobs: list[dict[str, Any]], records: list[JobRecord]) -> None:
        """Commit new submissions with their fresh records in one transaction (all or nothing)."""
        self._keep_wal()
        with self._tx():
            for job in jobs:
                self._db.execute("INSERT INTO submissions (name, job) VALUES (?, ?)", (job["name"], json.dumps(job)))
            for r in records:
                self._db.execute(
                    "INSERT OR REPLACE INTO jobs VALUES (?, ?)", (r.name, json.dumps(asdict(r), sort_keys=True))
                )

    def log_failure(self, time_s: float, kind: str, *, job: str = "", node: str = "", detail: str = "") -> None:
        """Append one failure (``FAILURE_KINDS``) to the run's failure log at once: what happened in the world
        stays logged whatever the scheduler does next (``oak export-trace`` replays it)."""
        if kind not in FAILURE_KINDS:
            raise ValueError(f"failure kind {kind!r}: expected one of {FAILURE_KINDS}")
        self._keep_wal()
        with self._tx():
            self._db.execute(
                "INSERT INTO failures (time_s, job, node, kind, detail) VALUES (?, ?, ?, ?, ?)",
                (float(time_s), job, node, kind, detail[:500]),
            )

    def failures(self) -> list[dict[str, Any]]:
        """The run's failure log, in the order logged: time_s, job, node, kind, detail."""
        rows = self._db.execute("SELECT time_s, job, node, kind, detail FROM failures ORDER BY seq")
        return [dict(zip(("time_s", "job", "node", "kind", "detail"), row, strict=True)) for row in rows]

    def rounds(self) -> int:
        row = self._db.execute("SELECT COUNT(*) FROM rounds").fetchone()
        return int(row[0])

    def _tx(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")
