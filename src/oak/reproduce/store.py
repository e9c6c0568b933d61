"""Results store: one Parquet table of runs and one of jobs, each row keyed by a hash of the run's full
configuration (policy and its parameters, workload, cluster, physics, failure rate, seed, code version).

Re-running skips stored keys, so an interrupted sweep resumes where it stopped. Both tables are rewritten
atomically (temporary file, fsync, rename) at every flush: a crash loses at most the runs since the last one.
A table that cannot be read, or that is not one of these tables (columns missing), is an input error naming the
file: it is never replaced nor merged with the store's own rows.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import io
import json
import os
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd
from pyarrow import ArrowException

from oak.engine.metrics import RunResult
from oak.errors import OakInputError
from oak.io_util import write_bytes_atomic
from oak.policies import policy_spec
from oak.sim.compare import RunSpec

RUN_FILE = "runs.parquet"
JOB_FILE = "jobs.parquet"
LOCK_FILE = ".oak-reproduce.lock"
#: The columns every row of each table has had since the store's first version (``ResultsStore.add``); a
#: Parquet file without them is some other table.
REQUIRED_COLUMNS = {
    RUN_FILE: ("key", "code_version", "policy", "workload", "failure_rate", "seed", "mean_jct_s"),
    JOB_FILE: ("key", "name", "jct_s", "submit_s"),
}


@lru_cache(maxsize=1)
def code_version() -> str:
    """A digest of everything a simulated result depends on: the package's Python sources, the catalog and
    the embedded workloads. Any change to them gives new keys (old results are kept, not reused)."""
    h = hashlib.sha256()
    root = resources.files("oak")
    paths = []

    def walk(node: Any, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            name = f"{prefix}/{child.name}"
            if child.is_dir():
                if child.name not in ("__pycache__", "cli", "reproduce"):
                    walk(child, name)
            elif child.name.endswith((".py", ".json", ".csv")):
                paths.append((name, child))

    walk(root, "oak")
    for name, child in paths:
        h.update(name.encode())
        h.update(child.read_bytes())
    return h.hexdigest()[:16]


def spec_dict(spec: RunSpec) -> dict[str, Any]:
    """The run's configuration as plain JSON-able data."""
    return {
        "policy": spec.policy,
        "workload": spec.workload,
        "failure_rate": spec.failure_rate,
        "seed": spec.seed,
        "cluster": spec.cluster,
        "physics": dataclasses.asdict(spec.physics),
        "policy_params": {k: v for k, v in spec.policy_params},
    }


def spec_key(spec: RunSpec) -> str:
    """SHA-256 (first 24 hex digits) of the canonical JSON of the spec and the code version."""
    doc: dict[str, Any] = {"spec": spec_dict(spec), "code": code_version()}
    plugin = policy_spec(spec.policy).source_digest  # a user's policy: its own source counts too
    if plugin is not None:
        doc["policy_source"] = plugin
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:24]


class ResultsStore:
    """Runs and jobs tables under ``root``; ``add`` buffers, ``flush`` writes atomically (each table, and the pair:
    the runs table last). A run is stored when both tables hold it: on reading, job rows of runs the runs table
    lacks are dropped (a flush cut short after the jobs, before the runs), and so are runs without job rows (a
    jobs table lost or moved away; every run has jobs), so those runs are done again.

    Raises OakInputError if a table is unreadable or is not a results table."""

    def __init__(self, root: str | Path, *, exclusive: bool = False) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd: int | None = self._lock() if exclusive else None
        runs = self._read(RUN_FILE)
        jobs = self._read(JOB_FILE)
        run_keys = set(runs["key"]) if "key" in runs else set()
        job_keys = set(jobs["key"]) if "key" in jobs else set()
        if not jobs.empty:
            jobs = jobs[jobs["key"].isin(run_keys)].reset_index(drop=True)
        if not runs.empty:
            runs = runs[runs["key"].isin(job_keys)].reset_index(drop=True)
        self._runs, self._jobs = runs, jobs
        self._pending_runs: list[dict[str, Any]] = []
        self._pending_jobs: list[dict[str, Any]] = []
        self._unwritten = False  # the tables in memory hold rows the files lack (a flush cut short)
        self._keys = set(self._runs["key"]) if "key" in self._runs else set()

    def _lock(self) -> int:
        """Hold ``LOCK_FILE`` in the store's folder for this store's life (``exclusive``): each writer rewrites
        whole tables from what it read, so a second one at the same time would drop the first one's runs. An
        input error naming the holder's pid if another process holds it."""
        path = self.root / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise OakInputError(
                f"{self.root}: another oak reproduce (pid {holder}) is writing its results there; wait for it to end "
                "(then run the same command again: what it stored is kept) or give another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def close(self) -> None:
        """Release the store's lock (``exclusive``); the lock also ends with the process."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _read(self, name: str) -> pd.DataFrame:
        path = self.root / name
        if not path.exists() and not path.is_symlink():
            return pd.DataFrame()
        advice = "move it away to start the store again (every stored run is then done again)"
        if not path.is_file():
            raise OakInputError(f"results store {path}: not a file; {advice}")
        try:
            table = pd.read_parquet(path)
        except (OSError, ValueError, ArrowException) as exc:
            raise OakInputError(f"results store {path}: unreadable ({_reason(exc, path)}); {advice}") from exc
        missing = [c for c in REQUIRED_COLUMNS[name] if c not in table.columns]
        if missing:
            raise OakInputError(
                f"results store {path}: not an OAK results table (columns missing: {', '.join(missing)}); {advice}"
            )
        return table

    def has(self, key: str) -> bool:
        return key in self._keys

    def missing(self, specs: Iterable[RunSpec]) -> list[RunSpec]:
        """Specs whose results are not stored yet (each once, in order)."""
        out, seen = [], set()
        for s in specs:
            k = spec_key(s)
            if k not in self._keys and k not in seen:
                seen.add(k)
                out.append(s)
        return out

    def add(self, spec: RunSpec, result: RunResult) -> None:
        key = spec_key(spec)
        if key in self._keys:
            return
        self._keys.add(key)
        row = {"key": key, "code_version": code_version(), "cluster": spec.cluster}
        row.update(result.summary())
        row["physics"] = json.dumps(dataclasses.asdict(spec.physics), sort_keys=True)
        row["policy_params"] = json.dumps({k: v for k, v in spec.policy_params}, sort_keys=True, default=str)
        row["decision_ms"] = json.dumps(list(result.decision_ms)) if len(result.decision_ms) <= 20000 else "[]"
        self._pending_runs.append(row)
        for j in result.jobs:
            job = {"key": key, **j.to_json(), "submit_s": j.submit_s}
            self._pending_jobs.append(job)

    def flush(self) -> None:
        """Write the runs added since the last flush, and redo a write cut short (an error, or Ctrl-C or SIGTERM
        during a flush, which the sweep's final flush follows)."""
        if self._pending_runs:
            runs = pd.concat([self._runs, pd.DataFrame(self._pending_runs)], ignore_index=True)
            jobs = pd.concat([self._jobs, pd.DataFrame(self._pending_jobs)], ignore_index=True)
            # assigned together, no call in between: an interrupt leaves the rows pending or in the tables, not both
            self._runs, self._jobs, self._pending_runs, self._pending_jobs, self._unwritten = runs, jobs, [], [], True
        if not self._unwritten:
            return
        # jobs first: a run counts as stored once it is in the runs table, so a crash between the two writes
        # leaves job rows of runs not stored (dropped on reading, the runs done again), never a stored run
        # without its jobs
        _write_parquet(self._jobs, self.root / JOB_FILE)
        _write_parquet(self._runs, self.root / RUN_FILE)
        self._unwritten = False

    def runs(self, specs: Iterable[RunSpec] | None = None) -> pd.DataFrame:
        """Stored runs (those of ``specs`` if given), with the spec's key."""
        self.flush()
        if specs is None or self._runs.empty:
            return self._runs.copy()
        keys = [spec_key(s) for s in specs]
        return self._runs[self._runs["key"].isin(keys)].copy()

    def jobs(self, keys: Iterable[str]) -> pd.DataFrame:
        self.flush()
        if self._jobs.empty:
            return self._jobs.copy()
        return self._jobs[self._jobs["key"].isin(list(keys))].copy()


def _reason(exc: BaseException, path: Path) -> str:
    """The first sentence of a reader's error, without the path it repeats."""
    text = " ".join(str(exc).split())
    for prefix in (f"Could not open Parquet input source '{path}': ", f"Could not open Parquet input source '{path}':"):
        text = text.replace(prefix, "")
    text = text.replace(str(path), "the file").split(". ")[0].rstrip(".")
    return text or type(exc).__name__


def _write_parquet(df: pd.DataFrame, path: Path) -> None:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    write_bytes_atomic(path, buf.getvalue())
