"""Workload files: OAK's CSV (``name,submit_time_s,application,min_gpus,max_gpus[,gpus,restart_penalty_s,batch_size]``)
and Sia's CSV (``name,time,application,num_replicas,batch_size``). Lines starting with ``#`` are comments."""

from __future__ import annotations

import csv
import difflib
import io
import math
from collections.abc import Collection
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from oak.errors import OakInputError
from oak.io_util import plain_float, plain_int, text_lines
from oak.model.job import JobSpec

OAK_REQUIRED = ("name", "submit_time_s", "application", "min_gpus", "max_gpus")
OAK_OPTIONAL = ("gpus", "restart_penalty_s", "batch_size")
SIA_REQUIRED = ("name", "time", "application", "num_replicas", "batch_size")


@dataclass(frozen=True)
class Workload:
    """A named list of jobs, sorted by submission time."""

    name: str
    jobs: tuple[JobSpec, ...]
    description: str = ""
    source: str = ""


def builtin_workloads() -> tuple[str, ...]:
    files = resources.files("oak.workloads").joinpath("data")
    return tuple(sorted(p.name[:-4] for p in files.iterdir() if p.name.endswith(".csv")))


def load_workload(name_or_path: str, known_apps: Collection[str] | None = None) -> Workload:
    """An embedded workload by name (``medium``) or a CSV file by path."""
    if name_or_path in builtin_workloads():
        if Path(name_or_path).is_file():  # which one was meant cannot be told: neither is chosen silently
            raise OakInputError(
                f"workload {name_or_path!r}: both an embedded workload and a file here ({Path.cwd() / name_or_path});"
                f" give ./{name_or_path} for the file, or move the file away to use the embedded workload"
            )
        res = resources.files("oak.workloads").joinpath("data", f"{name_or_path}.csv")
        return read_workload_csv(res.read_text(encoding="utf-8"), f"<builtin {name_or_path}>", name_or_path, known_apps)
    path = Path(name_or_path)
    if not name_or_path.strip():
        raise OakInputError(f"workload {name_or_path!r}: empty; expected an embedded workload's name or a CSV path")
    if path.is_dir():
        raise OakInputError(f"workload {name_or_path!r}: a folder; expected a CSV file or an embedded workload")
    if not path.exists():
        raise OakInputError(
            f"workload {name_or_path!r}: no such file and not an embedded workload "
            f"(embedded: {', '.join(builtin_workloads())})"
        )
    try:
        text = path.read_text(encoding="utf-8-sig")  # a leading BOM (a spreadsheet's "CSV UTF-8") is no header
    except (OSError, UnicodeDecodeError) as exc:
        raise OakInputError(f"{path}: cannot read workload file: {exc}") from exc
    return read_workload_csv(text, str(path), path.stem, known_apps)


def _near_miss(name: str, candidates: Collection[str]) -> str | None:
    """The candidate column ``name`` is most likely a misspelling of (case aside; difflib ratio >= 0.8), or None."""
    by_lower = {c.lower(): c for c in candidates}
    near = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.8)
    return by_lower[near[0]] if near else None


def read_workload_csv(text: str, source: str, name: str, known_apps: Collection[str] | None = None) -> Workload:
    """Parse either CSV format (chosen by the header); errors name ``source``, the line and the field."""
    lines = text_lines(text)
    description = ""
    numbered = []
    for lineno, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if not description:
                description = stripped.lstrip("# ").split(":", 1)[-1].strip()
            continue
        numbered.append((lineno, line))
    if not numbered:
        raise OakInputError(f"{source}: empty workload; expected a CSV header and at least one job")
    header_line, header = numbered[0]
    fields = [f.strip() for f in next(csv.reader(io.StringIO(header)))]
    if all(f in fields for f in OAK_REQUIRED):
        fmt = "oak"
    elif all(f in fields for f in SIA_REQUIRED):
        fmt = "sia"
    else:
        closest = min((OAK_REQUIRED, SIA_REQUIRED), key=lambda req: sum(r not in fields for r in req))
        missing = [r for r in closest if r not in fields]
        others = [f for f in fields if f not in closest]
        hints = [f"{near!r} for {m!r}" for m in missing if (near := _near_miss(m, others)) is not None]
        raise OakInputError(
            f"{source}:{header_line}: header {fields} matches no workload format; expected "
            f"{','.join(OAK_REQUIRED)}[,{','.join(OAK_OPTIONAL)}] or {','.join(SIA_REQUIRED)} (missing "
            f"{', '.join(missing)}{'; misspelt? ' + ', '.join(hints) if hints else ''})"
        )
    if len(set(fields)) != len(fields):
        raise OakInputError(f"{source}:{header_line}: duplicate column in header {fields}")
    read = OAK_REQUIRED + OAK_OPTIONAL if fmt == "oak" else SIA_REQUIRED
    unread = [r for r in read if r not in fields]
    if fmt == "oak" and "num_replicas" in fields:  # Sia's demand column, which this format spells gpus
        raise OakInputError(
            f"{source}:{header_line}: column 'num_replicas' is the demand of Sia's format; in this format (with "
            f"min_gpus, max_gpus) the demand is the column 'gpus'"
        )
    for f in fields:  # other columns are ignored (notes, a trace's own fields), a misspelt one is not
        if f not in read and (near := _near_miss(f, unread)) is not None:
            raise OakInputError(
                f"{source}:{header_line}: column {f!r} is not one OAK reads; did you mean {near!r}? (other "
                f"columns are ignored; this format reads {','.join(read)})"
            )
    if len(numbered) == 1:
        raise OakInputError(f"{source}: no jobs after the header; expected at least one job")
    jobs: list[JobSpec] = []
    seen: dict[str, int] = {}
    for lineno, line in numbered[1:]:
        values = [v.strip() for v in next(csv.reader(io.StringIO(line)))]
        if len(values) != len(fields):
            raise OakInputError(f"{source}:{lineno}: {len(values)} fields; expected {len(fields)} ({','.join(fields)})")
        row = dict(zip(fields, values, strict=True))
        where = f"{source}:{lineno}"
        job = _oak_row(row, where) if fmt == "oak" else _sia_row(row, where)
        if known_apps is not None and job.application not in known_apps:
            raise OakInputError(
                f"{where}: field 'application' = {job.application!r} is unknown; "
                f"expected one of {', '.join(sorted(known_apps))}"
            )
        if job.name in seen:
            raise OakInputError(f"{where}: duplicate job name {job.name!r} (first on line {seen[job.name]})")
        seen[job.name] = lineno
        jobs.append(job)
    jobs.sort(key=lambda j: (j.submit_time_s, j.name))
    return Workload(name=name, jobs=tuple(jobs), description=description, source=source)


#: Documented ranges of the numeric workload fields (docs/cli.md, "Input formats"). Times beyond
#: MAX_TIME_S (~31.7 years) are no schedule (the simulator's horizon is 3e6 s) and, near the float range, overflow
#: the event arithmetic; GPU counts and batch sizes are bounded so that their products stay exact in int64.
MAX_TIME_S = 1e9
MAX_PENALTY_S = 1e6
MAX_GPUS = 1_048_576
MAX_BATCH = 16_777_216


def _float(row: dict[str, str], key: str, where: str, minimum: float = 0.0, maximum: float = MAX_TIME_S) -> float:
    raw = row[key]
    try:
        v = plain_float(raw)
    except ValueError:
        raise OakInputError(f"{where}: field {key!r} = {raw!r}; expected a number") from None
    if not math.isfinite(v) or not minimum <= v <= maximum:
        raise OakInputError(
            f"{where}: field {key!r} = {raw!r}; expected a finite number >= {minimum:g} and <= {maximum:g}"
        )
    return v


def _int(row: dict[str, str], key: str, where: str, minimum: int = 1, maximum: int = MAX_GPUS) -> int:
    raw = row[key]
    try:
        v = plain_int(raw)
    except ValueError:
        raise OakInputError(f"{where}: field {key!r} = {raw!r}; expected an integer") from None
    if not minimum <= v <= maximum:
        raise OakInputError(f"{where}: field {key!r} = {raw!r}; expected an integer >= {minimum} and <= {maximum:,}")
    return v


def _name(row: dict[str, str], where: str) -> str:
    if not row["name"]:
        raise OakInputError(f"{where}: field 'name' is empty; expected a job name")
    if not row["application"]:
        raise OakInputError(f"{where}: field 'application' is empty; expected an application name")
    return row["name"]


def _oak_row(row: dict[str, str], where: str) -> JobSpec:
    name = _name(row, where)
    lo = _int(row, "min_gpus", where)
    hi = _int(row, "max_gpus", where)
    if hi < lo:
        raise OakInputError(f"{where}: field 'max_gpus' = {hi} is below min_gpus = {lo}")
    penalty = _float(row, "restart_penalty_s", where, maximum=MAX_PENALTY_S) if row.get("restart_penalty_s") else None
    batch = _int(row, "batch_size", where, maximum=MAX_BATCH) if row.get("batch_size") else None
    gpus = _int(row, "gpus", where) if row.get("gpus") else None
    if gpus is not None and not lo <= gpus <= hi:
        raise OakInputError(f"{where}: field 'gpus' = {gpus} is outside [min_gpus, max_gpus] = [{lo}, {hi}]")
    return JobSpec(name, row["application"], _float(row, "submit_time_s", where), lo, hi, penalty, batch, gpus)


def _sia_row(row: dict[str, str], where: str) -> JobSpec:
    name = _name(row, where)
    replicas = _int(row, "num_replicas", where)
    batch = _int(row, "batch_size", where, maximum=MAX_BATCH)
    return JobSpec(
        name,
        row["application"],
        _float(row, "time", where),
        1,
        replicas,
        None,
        batch,
        replicas,
        replicas_from_trace=True,
    )
