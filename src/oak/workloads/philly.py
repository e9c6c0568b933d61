"""Workloads derived from the Microsoft Philly trace, mapped to applications the way Sia's generator does.

The product never reads the raw trace at run time: ``python -m oak.workloads.philly derive PATH`` summarises it
into ``data/philly-derived.json`` (provenance: file name, sha256, rows, date, command) and :func:`synthesize`
samples from that summary. ``--trace PATH`` (:meth:`TraceModel.from_trace`) samples a raw trace file instead.

Mapping (documented in docs/workloads.md):

* Trace filter (Sia/Pollux generator): keep jobs with duration >= 60 s and GPU-time < 1,000 GPU-hours.
* Each job draws one (requested GPU count, GPU-time band) cell from the trace's joint frequencies, so the GPU
  count and the job's size keep their correlation.
* Application by GPU-time band (Sia's generator): < 1 GPU-h cifar10; 1-10 GPU-h deepspeech2 or bert (a fair
  coin: Sia turns half of its deepspeech2 jobs into bert); 10-100 GPU-h yolov3; 100-1,000 GPU-h imagenet.
* GPUs: ``gpus`` (the demand rigid policies run at) = the requested count clipped to the application's cap on
  the cluster; ``min_gpus`` = 1 and ``max_gpus`` = that cap (elastic policies may scale like Sia's adaptive jobs).
  The cap is the largest Sia configuration of the cluster with at most 64 GPUs (reference §3.5) on which the
  application has positive goodput (batch limits, fitted or projected model).
* Arrivals: i.i.d. gaps from the trace's inter-arrival distribution (submissions in the busy period between the
  2.5th and 97.5th percentile of submission times; the sparse edges hold multi-day collection holes), rescaled
  to a mean of 180 s / K. 180 s is the rate of Sia's Philly workloads for its 64-GPU cluster (160 jobs sampled
  from an 8-hour window); K is the scale factor (Sia scales cluster and arrival rate together: sia-64xK, K x the
  rate). The first job arrives at t = 0.
* Randomness: one ``numpy.random.Generator(PCG64(seed))``, drawn in a fixed order (gaps, cells, coins), so a
  seed gives the same bytes whatever K is, and K only divides the submission times.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from oak.errors import OakInputError
from oak.io_util import plain_float, plain_int
from oak.model.cluster import Cluster
from oak.workloads.loader import MAX_TIME_S

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Version of the derived-summary JSON layout.
DERIVED_FORMAT_VERSION = 1
#: Sia/Pollux generator filters: shortest kept job (s) and largest kept GPU-time (GPU-seconds, exclusive).
MIN_DURATION_S = 60.0
MAX_GPU_TIME_S = 1000.0 * 3600.0
#: GPU-time band edges (GPU-hours): band i is [edge_i, edge_{i+1}).
BAND_EDGES_GPU_H = (0.0, 1.0, 10.0, 100.0, 1000.0)
#: Applications per band; a band with two applications picks one with a fair coin (Sia: half of deepspeech2 → bert).
BAND_APPS: tuple[tuple[str, ...], ...] = (("cifar10",), ("deepspeech2", "bert"), ("yolov3",), ("imagenet",))
#: Mean inter-arrival time at K = 1 (s): Sia's Philly workloads, 160 jobs in 8 h on its 64-GPU cluster.
BASE_INTERARRIVAL_S = 8 * 3600.0 / 160
#: Busy period of the trace used for the inter-arrival distribution: these percentiles of submission times.
BUSY_PERCENTILES = (2.5, 97.5)
#: Largest GPU count of a job (reference §3.5: Pollux and Sia cap jobs at 64 replicas).
MAX_GPUS_PER_JOB = 64
#: Probabilities at which the inter-arrival quantiles are stored (dense in the tail, which carries the mean).
GAP_PROBABILITIES: tuple[float, ...] = tuple(
    [round(i / 100, 4) for i in range(100)] + [round(0.99 + i / 1000, 4) for i in range(1, 10)] + [0.9999, 1.0]
)
#: Probabilities of the (descriptive) duration quantiles.
DURATION_PROBABILITIES: tuple[float, ...] = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)

_DERIVED_RESOURCE = "philly-derived.json"


@dataclass(frozen=True)
class RawTrace:
    """The kept rows of a Philly-format trace: submission time (s since the epoch), duration (s), GPUs."""

    source: str
    sha256: str
    rows: int
    submit_s: FloatArray
    duration_s: FloatArray
    num_gpus: IntArray

    @property
    def gpu_time_s(self) -> FloatArray:
        """GPU-seconds of each kept job (duration × GPUs)."""
        return np.asarray(self.duration_s * self.num_gpus, dtype=np.float64)


def _band_of(gpu_time_s: FloatArray) -> IntArray:
    """GPU-time band index of each job (0 ... len(BAND_APPS) − 1)."""
    edges = np.asarray(BAND_EDGES_GPU_H[1:-1], dtype=np.float64) * 3600.0
    return np.asarray(np.searchsorted(edges, gpu_time_s, side="right"), dtype=np.int64)


def _parse_time(raw: str) -> float:
    """Seconds since the epoch of an ISO timestamp (naive = UTC) or a plain number of seconds."""
    try:
        t = plain_float(raw)
    except ValueError:
        dt = datetime.fromisoformat(raw)
        t = (dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)).timestamp()
    if not math.isfinite(t):
        raise ValueError(f"non-finite time {raw!r}")
    return t


def read_trace(path: str | Path) -> RawTrace:
    """Read a Philly-format CSV (``timestamp,duration,num_gpus[,gpu_time,cluster]``; timestamp ISO or seconds)
    and keep the jobs the generator uses (duration >= 60 s, GPU-time < 1,000 GPU-h). Errors name file and line."""
    p = Path(path)
    try:
        data = p.read_bytes()
        text = data.decode("utf-8-sig")  # a leading BOM is no header
    except (OSError, UnicodeDecodeError) as exc:
        raise OakInputError(f"{p}: cannot read trace file: {exc}") from exc
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    submit: list[float] = []
    duration: list[float] = []
    gpus: list[int] = []
    rows = 0
    for row in reader:
        line = reader.line_num
        if not row or all(not f.strip() for f in row):
            continue
        if header is None:
            header = [f.strip() for f in row]
            missing = [c for c in ("timestamp", "duration", "num_gpus") if c not in header]
            if missing:
                raise OakInputError(
                    f"{p}:{line}: header {header} lacks {missing}; expected timestamp,duration,num_gpus[,gpu_time,cluster]"
                )
            cols = {c: header.index(c) for c in ("timestamp", "duration", "num_gpus")}
            continue
        if len(row) != len(header):
            raise OakInputError(f"{p}:{line}: {len(row)} fields; expected {len(header)} ({','.join(header)})")
        rows += 1
        raw_t, raw_d, raw_g = (row[cols[c]].strip() for c in ("timestamp", "duration", "num_gpus"))
        try:
            t = _parse_time(raw_t)
        except ValueError:
            raise OakInputError(
                f"{p}:{line}: field 'timestamp' = {raw_t!r}; expected 'YYYY-MM-DD HH:MM:SS' or seconds"
            ) from None
        try:
            d = plain_float(raw_d)
        except ValueError:
            d = math.nan
        if not (math.isfinite(d) and d >= 0.0):
            raise OakInputError(f"{p}:{line}: field 'duration' = {raw_d!r}; expected a finite number >= 0 (s)")
        try:
            g = plain_int(raw_g)
        except ValueError:
            g = 0
        if g < 1:
            raise OakInputError(f"{p}:{line}: field 'num_gpus' = {raw_g!r}; expected an integer >= 1")
        if d >= MIN_DURATION_S and d * g < MAX_GPU_TIME_S:
            submit.append(t)
            duration.append(d)
            gpus.append(g)
    if header is None or rows == 0:
        raise OakInputError(f"{p}: no jobs; expected a header timestamp,duration,num_gpus,... and job rows")
    if len(submit) < 2:
        raise OakInputError(
            f"{p}: {len(submit)} of {rows} jobs pass the filter (duration >= {MIN_DURATION_S:g} s, "
            f"GPU-time < {MAX_GPU_TIME_S / 3600:g} GPU-h); expected at least 2"
        )
    return RawTrace(
        source=str(p),
        sha256=hashlib.sha256(data).hexdigest(),
        rows=rows,
        submit_s=np.asarray(submit, dtype=np.float64),
        duration_s=np.asarray(duration, dtype=np.float64),
        num_gpus=np.asarray(gpus, dtype=np.int64),
    )


def busy_gaps(submit_s: FloatArray) -> FloatArray:
    """Inter-arrival gaps (s) between consecutive submissions inside the busy period (BUSY_PERCENTILES)."""
    t = np.sort(np.asarray(submit_s, dtype=np.float64))
    lo, hi = np.percentile(t, BUSY_PERCENTILES)
    busy = t[(t >= lo) & (t <= hi)]
    return np.diff(busy if len(busy) >= 2 else t)


def joint_counts(trace: RawTrace) -> tuple[IntArray, IntArray]:
    """(GPU counts present, ascending; jobs per (GPU count, GPU-time band), shape (values, bands))."""
    values, inverse = np.unique(trace.num_gpus, return_inverse=True)
    counts = np.zeros((len(values), len(BAND_APPS)), dtype=np.int64)
    np.add.at(counts, (inverse.reshape(-1), _band_of(trace.gpu_time_s)), 1)
    return values.astype(np.int64), counts


def derive(trace: RawTrace, command: str, date: str | None = None) -> dict[str, Any]:
    """The summary the generator needs, as a JSON-able dict (see the module doc for each part)."""
    values, counts = joint_counts(trace)
    gaps = busy_gaps(trace.submit_s)
    lo, hi = np.percentile(np.sort(trace.submit_s), BUSY_PERCENTILES)
    return {
        "format_version": DERIVED_FORMAT_VERSION,
        "provenance": {
            "source": Path(trace.source).name,
            "sha256": trace.sha256,
            "rows": trace.rows,
            "rows_kept": len(trace.num_gpus),
            "filter": f"duration >= {MIN_DURATION_S:g} s and GPU-time < {MAX_GPU_TIME_S / 3600:g} GPU-hours",
            "date": date if date is not None else datetime.now(UTC).date().isoformat(),
            "command": command,
        },
        "gpu_time_band_edges_gpu_h": list(BAND_EDGES_GPU_H),
        "band_applications": [list(a) for a in BAND_APPS],
        "gpu_counts": [int(v) for v in values],
        "joint_counts": [[int(c) for c in row] for row in counts],
        "interarrival": {
            "busy_period_utc": [_iso(lo), _iso(hi)],
            "gaps": len(gaps),
            "mean_s": round(float(gaps.mean()), 6),
            "zero_fraction": round(float((gaps == 0).mean()), 6),
            "probabilities": list(GAP_PROBABILITIES),
            "quantiles_s": [round(float(q), 6) for q in np.quantile(gaps, GAP_PROBABILITIES)],
        },
        "duration_quantiles_s": {
            "note": "descriptive only: a generated job's length is its application's training to completion",
            "probabilities": list(DURATION_PROBABILITIES),
            "values": [round(float(q), 6) for q in np.quantile(trace.duration_s, DURATION_PROBABILITIES)],
        },
    }


def dump_derived(doc: dict[str, Any]) -> str:
    """JSON text of a summary: indented objects, each flat list of numbers or strings on one line."""
    text = json.dumps(doc, indent=1, allow_nan=False)
    flat = re.compile(r"\[\s*([^\[\]{}]*?)\s*\]")
    return flat.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text) + "\n"


def _iso(t: float) -> str:
    return datetime.fromtimestamp(float(t), tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class TraceModel:
    """What :func:`synthesize` samples: joint (GPU count, band) frequencies and an inter-arrival distribution.

    ``gap_probabilities``/``gap_quantiles_s`` (inverse CDF, linearly interpolated) or, for a raw trace,
    ``gap_samples_s`` (the empirical gaps, drawn uniformly). ``label`` names the source in the CSV header.
    """

    gpu_counts: IntArray
    joint: IntArray
    label: str
    gap_probabilities: FloatArray | None = None
    gap_quantiles_s: FloatArray | None = None
    gap_samples_s: FloatArray | None = None

    @classmethod
    def packaged(cls) -> TraceModel:
        """The model of the shipped ``data/philly-derived.json``."""
        res = resources.files("oak.workloads").joinpath("data", _DERIVED_RESOURCE)
        try:
            text = res.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise OakInputError(f"{res}: cannot read the packaged Philly summary: {exc}") from exc
        return cls.from_derived(json.loads(text), str(res))

    @classmethod
    def from_derived(cls, doc: dict[str, Any], source: str = "<derived>") -> TraceModel:
        """Validate and load a summary made by :func:`derive`."""
        try:
            if doc["format_version"] != DERIVED_FORMAT_VERSION:
                raise ValueError(f"format_version {doc['format_version']!r}, expected {DERIVED_FORMAT_VERSION}")
            values = np.asarray(doc["gpu_counts"], dtype=np.int64)
            joint = np.asarray(doc["joint_counts"], dtype=np.int64)
            probs = np.asarray(doc["interarrival"]["probabilities"], dtype=np.float64)
            quant = np.asarray(doc["interarrival"]["quantiles_s"], dtype=np.float64)
            prov = doc["provenance"]
            label = f"{prov['source']} (sha256 {str(prov['sha256'])[:12]}..., via {Path(source).name})"
        except (KeyError, TypeError, ValueError) as exc:
            raise OakInputError(f"{source}: malformed Philly summary: {exc}") from exc
        if joint.shape != (len(values), len(BAND_APPS)) or (joint < 0).any() or joint.sum() == 0:
            raise OakInputError(f"{source}: joint_counts must be {len(values)}x{len(BAND_APPS)} non-negative counts")
        if (values < 1).any() or probs.shape != quant.shape or probs[0] != 0.0 or probs[-1] != 1.0:
            raise OakInputError(f"{source}: malformed gpu_counts or inter-arrival quantiles")
        if (np.diff(probs) <= 0).any() or (np.diff(quant) < 0).any() or quant[0] < 0 or _interp_mean(probs, quant) <= 0:
            raise OakInputError(f"{source}: inter-arrival quantiles must be non-decreasing, >= 0, with a positive mean")
        return cls(values, joint, label, gap_probabilities=probs, gap_quantiles_s=quant)

    @classmethod
    def from_trace(cls, path: str | Path) -> TraceModel:
        """Sample a raw trace directly: the kept rows' joint frequencies and their empirical busy-period gaps."""
        trace = read_trace(path)
        values, joint = joint_counts(trace)
        gaps = busy_gaps(trace.submit_s)
        if not gaps.size or gaps.mean() <= 0:
            raise OakInputError(f"{path}: all kept jobs are submitted at the same time; expected distinct arrivals")
        label = f"{Path(trace.source).name} (sha256 {trace.sha256[:12]}..., raw trace)"
        return cls(values, joint, label, gap_samples_s=gaps)

    def sample_gaps(self, rng: np.random.Generator, n: int) -> FloatArray:
        """``n`` i.i.d. inter-arrival gaps with mean 1 (dimensionless; multiply by the mean gap in seconds)."""
        if self.gap_samples_s is not None:
            g = self.gap_samples_s
            return np.asarray(g[rng.integers(0, len(g), size=n)] / g.mean(), dtype=np.float64)
        assert self.gap_probabilities is not None and self.gap_quantiles_s is not None
        u = rng.random(n)
        q = np.interp(u, self.gap_probabilities, self.gap_quantiles_s)
        return np.asarray(q / _interp_mean(self.gap_probabilities, self.gap_quantiles_s), dtype=np.float64)

    @property
    def gpu_frequencies(self) -> dict[int, float]:
        """Fraction of kept trace jobs per requested GPU count."""
        per = self.joint.sum(axis=1) / self.joint.sum()
        return {int(v): float(f) for v, f in zip(self.gpu_counts, per, strict=True)}


def _interp_mean(p: FloatArray, q: FloatArray) -> float:
    """Mean of the distribution whose inverse CDF is the linear interpolation of (p, q)."""
    return float(np.sum(np.diff(p) * (q[1:] + q[:-1]) / 2.0))


def application_caps(cluster: Cluster, apps: Sequence[str]) -> dict[str, int]:
    """Largest GPU count (<= MAX_GPUS_PER_JOB) of a Sia configuration of ``cluster`` on which each application
    has positive goodput at epoch 0 (fitted or projected model, batch limits); 0 if none."""
    from oak.catalog import Catalog
    from oak.goodput.table import GoodputTable
    from oak.model.config import sia_configurations

    catalog = Catalog.load()
    configs = [c for c in sia_configurations(cluster) if c.gpus <= MAX_GPUS_PER_JOB]
    table = GoodputTable(catalog, [c.nodes for c in configs], [c.gpus for c in configs], [c.gpu_type for c in configs])
    sizes = np.array([c.gpus for c in configs], dtype=np.int64)
    out = {}
    for app in apps:
        ok = table.choices(app, 0).goodput > 0
        out[app] = int(sizes[ok].max()) if ok.any() else 0
    return out


@dataclass(frozen=True)
class SynthJob:
    """One generated job (times in seconds)."""

    name: str
    submit_time_s: float
    application: str
    min_gpus: int
    max_gpus: int
    gpus: int
    requested_gpus: int


#: the most jobs one synthesised workload holds: 200× the Sia artifact's largest trace (5,120 jobs); a mistyped
#: count beyond it would fill memory before writing anything
MAX_SYNTH_JOBS = 1_000_000


def synthesize(model: TraceModel, jobs: int, cluster: Cluster, scale: float = 1.0, seed: int = 0) -> list[SynthJob]:
    """``jobs`` Philly-derived jobs for ``cluster`` with arrivals ``scale`` times as dense as Sia's 64-GPU rate."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MAX_SYNTH_JOBS:
        raise OakInputError(f"--jobs {jobs!r}: expected an integer from 1 to {MAX_SYNTH_JOBS:,}")
    if isinstance(scale, bool) or not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
        raise OakInputError(f"--scale {scale!r}: expected a positive number (arrival-rate multiplier K)")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise OakInputError(f"--seed {seed!r}: expected an integer >= 0")
    rng = np.random.default_rng(seed)
    with np.errstate(all="ignore"):  # a tiny --scale overflows: refused below
        gaps = model.sample_gaps(rng, jobs - 1) * (BASE_INTERARRIVAL_S / scale)
        times = np.concatenate([[0.0], np.cumsum(gaps)])
    # the loaders refuse a submit_time_s beyond MAX_TIME_S: refuse to write a workload they would not read (the
    # last time as render_csv writes it, to the ms)
    last = float(times[-1])
    if not (math.isfinite(last) and round(last, 3) <= MAX_TIME_S):
        when = f"at {last:.4g} s" if math.isfinite(last) else "beyond the float range"
        raise OakInputError(
            f"--scale {scale:g} with --jobs {jobs}: the last job would be submitted {when}, past the "
            f"{MAX_TIME_S:g} s a workload's submit_time_s may reach (mean gap {BASE_INTERARRIVAL_S:g} s / K = "
            f"{BASE_INTERARRIVAL_S / scale:.4g} s); expected a larger --scale or fewer --jobs"
        )
    flat = model.joint.reshape(-1).astype(np.float64)
    cells = rng.choice(flat.size, size=jobs, p=flat / flat.sum())
    coins = rng.random(jobs)
    rows, bands = np.divmod(cells, len(BAND_APPS))
    apps = [
        BAND_APPS[b][min(int(c * len(BAND_APPS[b])), len(BAND_APPS[b]) - 1)] for b, c in zip(bands, coins, strict=True)
    ]
    caps = application_caps(cluster, sorted(set(apps)))
    for app, cap in caps.items():
        if cap < 1:
            raise OakInputError(f"cluster {cluster.name!r}: application {app!r} has no feasible configuration")
    out = []
    for i in range(jobs):
        app = apps[i]
        req = int(model.gpu_counts[rows[i]])
        cap = caps[app]
        out.append(SynthJob(f"{app}-{i}", float(times[i]), app, 1, cap, min(req, cap), req))
    return out


def render_csv(jobs: Sequence[SynthJob], description: str) -> str:
    """OAK-format CSV text (``name,submit_time_s,application,min_gpus,max_gpus,gpus``), times to the ms."""
    lines = [f"# philly: {description}", "name,submit_time_s,application,min_gpus,max_gpus,gpus"]
    lines.extend(f"{j.name},{j.submit_time_s:.3f},{j.application},{j.min_gpus},{j.max_gpus},{j.gpus}" for j in jobs)
    return "\n".join(lines) + "\n"


def synth_workload_text(
    jobs: int, cluster_name: str, scale: float, seed: int, trace: str | Path | None = None
) -> tuple[str, list[SynthJob]]:
    """The CSV text of a Philly-derived workload and its jobs (what ``oak workloads synth --from philly`` writes)."""
    from oak.model.cluster import cluster_preset

    cluster = cluster_preset(cluster_name)
    model = TraceModel.from_trace(trace) if trace is not None else TraceModel.packaged()
    out = synthesize(model, jobs, cluster, scale, seed)
    desc = (
        f"{jobs} jobs from {model.label}, seed {seed}, arrivals x{scale:g} (mean gap "
        f"{BASE_INTERARRIVAL_S / scale:.4g} s), cluster {cluster.name}"
    )
    return render_csv(out, desc), out


def default_output() -> Path:
    """Where ``derive`` writes by default: the packaged summary."""
    return Path(__file__).resolve().parent / "data" / _DERIVED_RESOURCE


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m oak.workloads.philly derive PATH [--out FILE]``: (re)make the packaged summary."""
    from oak.io_util import write_atomic

    parser = argparse.ArgumentParser(prog="python -m oak.workloads.philly", description=main.__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("derive", help="summarise a Philly-format trace into the JSON the generator samples")
    d.add_argument("path", help="trace CSV, e.g. ../shared/data/sia/philly-jobs.csv")
    d.add_argument("--out", default=None, help="output JSON (default: the packaged data/philly-derived.json)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else default_output()
    command = f"python -m oak.workloads.philly derive {args.path}" + (f" --out {args.out}" if args.out else "")
    try:
        doc = derive(read_trace(args.path), command)
    except OakInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_atomic(out, dump_derived(doc))
    print(f"wrote {out}: {doc['provenance']['rows_kept']} of {doc['provenance']['rows']} jobs kept")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
