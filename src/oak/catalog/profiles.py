"""Readers for the raw step-time and validation profiles (Pollux/Sia artifact layout).

Layout of one application folder (every CSV is read by its header; column order varies between files):

* ``placements[-<gpu>].csv``: placement, local_bsz, step_time, sync_time. ``placement`` is a digit string, one digit
  per node holding replicas: N = number of digits, R = digit sum.
* ``scalability[-<gpu>].csv``: num_nodes, num_replicas, local_bsz, step_time, sync_time.
* ``validation-<batch>.csv``: progress, iteration, metric, grad_sqr, grad_var; one row per epoch.

A file without a GPU suffix is the original Pollux cluster, called GPU type ``"pollux"`` here.
Errors raise :class:`oak.errors.OakInputError` naming the file, line and field.
"""

from __future__ import annotations

import csv
import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from oak.errors import OakInputError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: GPU type name of the profile files without a suffix (the original Pollux cluster).
POLLUX_GPU_TYPE = "pollux"

_PLACEMENT_RE = re.compile(r"^placements(?:-(?P<gpu>[A-Za-z0-9_.-]+))?\.csv$")
_VALIDATION_RE = re.compile(r"^validation-(?P<batch>[0-9]+)\.csv$")


@dataclass(frozen=True, eq=False)
class Observations:
    """Deduplicated step-time observations of one application on one GPU type, keyed by (N, R, b).

    Attributes:
        nodes, replicas, local_bsz: the key of each observation.
        acc_time: time of an accumulation (non-synchronising) micro-step = step_time − sync_time (seconds).
        step_time: time of a synchronising step (seconds).
    """

    nodes: IntArray
    replicas: IntArray
    local_bsz: IntArray
    acc_time: FloatArray
    step_time: FloatArray

    def __len__(self) -> int:
        return int(self.nodes.shape[0])


@dataclass(frozen=True)
class ValidationRun:
    """One ``validation-<batch>.csv`` file: per-epoch rows of a training run at global batch ``batch``.

    Attributes:
        batch: global batch size of the run (samples).
        progress: cumulative progress at the end of each epoch (base-batch iterations).
        grad_sqr, grad_var: gradient statistics per epoch.
    """

    batch: int
    progress: tuple[float, ...]
    grad_sqr: tuple[float, ...]
    grad_var: tuple[float, ...]


def profile_gpu_types(app_dir: Path) -> list[str]:
    """GPU types that have a placements file in ``app_dir``, sorted by name."""
    types = []
    for path in app_dir.iterdir():
        m = _PLACEMENT_RE.match(path.name)
        if m and path.is_file():
            types.append(m.group("gpu") or POLLUX_GPU_TYPE)
    return sorted(types)


def profile_files(app_dir: Path, gpu_type: str) -> tuple[Path, Path | None]:
    """(placements file, scalability file or None) of ``gpu_type`` in ``app_dir``."""
    suffix = "" if gpu_type == POLLUX_GPU_TYPE else f"-{gpu_type}"
    placements = app_dir / f"placements{suffix}.csv"
    scalability = app_dir / f"scalability{suffix}.csv"
    if not placements.is_file():
        raise OakInputError(f"{placements}: placements file of GPU type {gpu_type!r} not found")
    return placements, (scalability if scalability.is_file() else None)


def validation_files(app_dir: Path) -> list[tuple[int, Path]]:
    """(global batch, path) of every ``validation-<batch>.csv`` in ``app_dir``, ascending batch."""
    out = []
    for path in app_dir.iterdir():
        m = _VALIDATION_RE.match(path.name)
        if m and path.is_file():
            out.append((int(m.group("batch")), path))
    return sorted(out)


def _rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:  # a leading BOM is no header
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise OakInputError(f"{path}: line 1: missing column(s) {missing}; header is {list(header)}")
            rows = [(reader.line_num, dict(row)) for row in reader]
    except OSError as exc:
        raise OakInputError(f"{path}: cannot read: {exc}") from exc
    except (csv.Error, UnicodeDecodeError) as exc:
        raise OakInputError(f"{path}: malformed CSV: {exc}") from exc
    if not rows:
        raise OakInputError(f"{path}: no data rows")
    return rows


def _float(path: Path, line: int, row: dict[str, str], name: str, positive: bool = False) -> float:
    raw = row.get(name)
    try:
        value = float(raw) if raw is not None else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0.0 or (positive and value <= 0.0):
        need = "a positive number" if positive else "a non-negative number"
        raise OakInputError(f"{path}: line {line}: field {name}: expected {need}, got {raw!r}")
    return value


def _int(path: Path, line: int, row: dict[str, str], name: str) -> int:
    raw = row.get(name)
    try:
        value = float(raw) if raw is not None else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 1.0 or value != math.floor(value):
        raise OakInputError(f"{path}: line {line}: field {name}: expected a positive integer, got {raw!r}")
    return int(value)


def _times(path: Path, line: int, row: dict[str, str]) -> tuple[float, float]:
    step = _float(path, line, row, "step_time", positive=True)
    sync = _float(path, line, row, "sync_time")
    if step - sync <= 0.0:
        raise OakInputError(
            f"{path}: line {line}: field sync_time: expected less than step_time={step!r} "
            f"(accumulation step time = step_time - sync_time must be positive), got {row.get('sync_time')!r}"
        )
    return step - sync, step


def read_observations(placements: Path, scalability: Path | None = None) -> Observations:
    """Observations keyed by (N, R, b) from a placements file and optional scalability file.

    Rows are taken in file order, placements first; for a key seen more than once the first row wins
    (placements with the same N and R, e.g. "13" and "22", are the same key).
    """
    seen: set[tuple[int, int, int]] = set()
    nodes: list[int] = []
    replicas: list[int] = []
    bsz: list[int] = []
    acc: list[float] = []
    step: list[float] = []

    def add(key: tuple[int, int, int], times: tuple[float, float]) -> None:
        if key in seen:
            return
        seen.add(key)
        nodes.append(key[0])
        replicas.append(key[1])
        bsz.append(key[2])
        acc.append(times[0])
        step.append(times[1])

    for line, row in _rows(placements, ("placement", "local_bsz", "step_time", "sync_time")):
        placement = (row.get("placement") or "").strip()
        if not placement.isdigit() or sum(int(c) for c in placement) < 1:
            raise OakInputError(
                f"{placements}: line {line}: field placement: expected a digit string (replicas per node), "
                f"got {row.get('placement')!r}"
            )
        key = (len(placement), sum(int(c) for c in placement), _int(placements, line, row, "local_bsz"))
        add(key, _times(placements, line, row))
    if scalability is not None:
        cols = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
        for line, row in _rows(scalability, cols):
            n = _int(scalability, line, row, "num_nodes")
            r = _int(scalability, line, row, "num_replicas")
            if r < n:
                raise OakInputError(
                    f"{scalability}: line {line}: field num_replicas: expected >= num_nodes={n}, got {r}"
                )
            add((n, r, _int(scalability, line, row, "local_bsz")), _times(scalability, line, row))
    return Observations(
        nodes=np.asarray(nodes, dtype=np.int64),
        replicas=np.asarray(replicas, dtype=np.int64),
        local_bsz=np.asarray(bsz, dtype=np.int64),
        acc_time=np.asarray(acc, dtype=np.float64),
        step_time=np.asarray(step, dtype=np.float64),
    )


def read_app_observations(app_dir: Path) -> dict[str, Observations]:
    """Observations of every GPU type with a placements file in ``app_dir``, keyed by GPU type."""
    return {t: read_observations(*profile_files(app_dir, t)) for t in profile_gpu_types(app_dir)}


def placement_bsz_range(placements: Path) -> tuple[int, int]:
    """(smallest, largest) local batch profiled in a placements file (samples)."""
    values = [_int(placements, line, row, "local_bsz") for line, row in _rows(placements, ("local_bsz",))]
    return min(values), max(values)


def read_validation(path: Path, batch: int) -> ValidationRun:
    """One validation file (rows in file order = epochs)."""
    progress: list[float] = []
    sqr: list[float] = []
    var: list[float] = []
    for line, row in _rows(path, ("progress", "grad_sqr", "grad_var")):
        progress.append(_float(path, line, row, "progress"))
        for name, out in (("grad_sqr", sqr), ("grad_var", var)):
            raw = row.get(name)
            try:
                value = float(raw) if raw is not None else math.nan
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                raise OakInputError(f"{path}: line {line}: field {name}: expected a finite number, got {raw!r}")
            out.append(value)
    if any(b < a for a, b in itertools.pairwise(progress)):
        raise OakInputError(f"{path}: field progress: expected non-decreasing values down the file")
    return ValidationRun(batch=batch, progress=tuple(progress), grad_sqr=tuple(sqr), grad_var=tuple(var))
