"""Hardware failure models from real clusters: nodes, failure domains (racks, switches), lemon nodes, software.

Every event is a pure function of (seed, node or job, grid interval k) through the counter-based stream, so every
policy meets the same hardware events at the same times (paired comparisons). In grid interval k of length
``round_s``:

* node j fails if u(seed, node j, k) < 1 − exp(−ρ_j·scale·round_s / 86 400), at (k + v)·round_s, with ρ_j its
  rate per node-day: the model's ``node_rate`` (per 1,000 node-days), times ``lemon_factor`` for the lemon
  nodes (node j is a lemon if u(seed, node j, LEMON) < ``lemon_fraction``: a heavy tail of bad machines);
* failure domain d (``domain_nodes`` consecutive nodes: a rack or a switch) fails likewise at
  ``domain_rate`` per 1,000 domain-days, taking down all its nodes at once;
* a failed node is out of service for ``repair_s`` seconds (capacity shrinks meanwhile); every job with a GPU on
  it fails at once, loses its GPUs and the work since its last checkpoint, and is placed again;
* a running job also fails on its own (software, user errors) with ``software_rate`` per 1,000 job-hours.

``scale`` multiplies every rate (compress months of a real cluster into a simulated week) and is printed with
every result. Presets (``PRESETS``) carry their published source.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from oak.errors import OakInputError
from oak.failures import rng
from oak.failures.trace import FailureTrace, load_failure_trace

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

STREAM_NODE = 11
STREAM_NODE_OFFSET = 12
STREAM_DOMAIN = 13
STREAM_DOMAIN_OFFSET = 14
STREAM_LEMON = 15
STREAM_SOFTWARE = 16
STREAM_SOFTWARE_OFFSET = 17
#: keys of nodes and domains lie above every job key (CRC-32 < 2^32)
_NODE_KEY_BASE = 1 << 33
_DOMAIN_KEY_BASE = 1 << 34


@dataclass(frozen=True)
class HardwareModel:
    """A hardware failure model (rates per 1,000 node-days, domain-days or job-hours; seconds)."""

    name: str
    node_rate: float = 0.0
    repair_s: float = 3600.0
    domain_nodes: int = 0
    domain_rate: float = 0.0
    lemon_fraction: float = 0.0
    lemon_factor: float = 1.0
    software_rate: float = 0.0
    scale: float = 1.0
    source: str = ""
    trace: FailureTrace | None = None
    """A failure log replayed (``trace:FILE``, :mod:`oak.failures.trace`): its node lines are node events (down
    for their ``down_s``, else ``repair_s``), its job lines the jobs' own failures."""

    def __post_init__(self) -> None:
        for f in ("node_rate", "domain_rate", "lemon_fraction", "software_rate", "repair_s"):
            v = getattr(self, f)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise OakInputError(f"failure model {self.name!r}: {f}={v!r}: expected a number >= 0")
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise OakInputError(f"failure model {self.name!r}: scale={self.scale!r}: expected a number > 0")
        if not (math.isfinite(self.lemon_factor) and self.lemon_factor >= 1):
            raise OakInputError(f"failure model {self.name!r}: lemon_factor={self.lemon_factor!r}: expected >= 1")
        if not self.repair_s > 0:
            raise OakInputError(
                f"failure model {self.name!r}: repair_s={self.repair_s!r}: expected a number of seconds > 0"
            )
        if self.lemon_fraction > 1:
            raise OakInputError(f"failure model {self.name!r}: lemon_fraction={self.lemon_fraction!r}: expected <= 1")
        if isinstance(self.domain_nodes, bool) or not isinstance(self.domain_nodes, int) or self.domain_nodes < 0:
            raise OakInputError(
                f"failure model {self.name!r}: domain_nodes={self.domain_nodes!r}: expected an integer >= 0"
            )
        if self.domain_rate > 0 and self.domain_nodes < 1:
            raise OakInputError(f"failure model {self.name!r}: domain_rate needs domain_nodes >= 1")

    @property
    def hardware(self) -> bool:
        """Whether the model has node or domain events (else only software failures)."""
        return self.node_rate > 0 or self.domain_rate > 0 or (self.trace is not None and bool(self.trace.node_events))

    @property
    def active(self) -> bool:
        """Whether the model makes any event beyond the per-job coin: node, domain, software or logged ones."""
        return self.hardware or self.software_rate > 0 or (self.trace is not None and bool(self.trace.events))

    def describe(self) -> str:
        if self.trace is not None:
            jobs, nodes = len(self.trace.job_events), len(self.trace.node_events)
            return f"trace({self.trace.path}: {jobs} job and {nodes} node failure(s))"
        parts = [f"{k}={getattr(self, k):g}" for k in _KEYS if getattr(self, k) != getattr(_ZERO, k)]
        return f"{self.name}({', '.join(parts)})" + (f" — rates ×{self.scale:g}" if self.scale != 1 else "")

    # ------------------------------------------------------------------ draws
    def lemons(self, seed: int, n_nodes: int) -> BoolArray:
        """Which nodes are lemons (a draw per (seed, node), fixed for the run)."""
        return np.asarray(rng.uniforms(seed, STREAM_LEMON, _node_keys(n_nodes), 0) < self.lemon_fraction)

    def node_rates(self, seed: int, n_nodes: int) -> FloatArray:
        """Each node's failure rate per second (per-node rate × scale, lemons × lemon_factor)."""
        per_day = self.node_rate / 1000.0 * np.where(self.lemons(seed, n_nodes), self.lemon_factor, 1.0)
        return np.asarray(per_day * self.scale / 86_400.0, dtype=np.float64)

    def interval_events(
        self, seed: int, n_nodes: int, k: int, round_s: float, *, first: bool = False
    ) -> list[tuple[float, tuple[int, ...], float]]:
        """The hardware events of grid interval ``k``: (time, the nodes that go down, for how long), by time;
        ``first``: the run's first interval, which also takes the failure log's node lines before it."""
        events: list[tuple[float, tuple[int, ...], float]] = []
        if self.node_rate > 0 and n_nodes:
            p = _node_probabilities(self, seed, n_nodes, round_s)
            for j, when in _fired(seed, STREAM_NODE, STREAM_NODE_OFFSET, _node_keys(n_nodes), k, p, round_s):
                events.append((when, (j,), self.repair_s))
        if self.domain_rate > 0 and self.domain_nodes > 0 and n_nodes:
            n_dom = -(-n_nodes // self.domain_nodes)
            keys = np.arange(n_dom, dtype=np.uint64) + np.uint64(_DOMAIN_KEY_BASE)
            p_dom = -math.expm1(-self.domain_rate / 1000.0 * self.scale / 86_400.0 * round_s)
            for d, when in _fired(seed, STREAM_DOMAIN, STREAM_DOMAIN_OFFSET, keys, k, p_dom, round_s):
                nodes = tuple(range(d * self.domain_nodes, min(n_nodes, (d + 1) * self.domain_nodes)))
                events.append((when, nodes, self.repair_s))
        if self.trace is not None:
            lo = -math.inf if first else k * round_s
            for e in self.trace.nodes_between(lo, (k + 1) * round_s):
                if e.node < n_nodes:
                    events.append((e.time_s, (e.node,), e.down_s if e.down_s is not None else self.repair_s))
        events.sort()
        return events

    def logged_job_failures(self, k: int, round_s: float) -> list[tuple[float, str]]:
        """The failure log's job lines in grid interval ``k``: (time, job name), by time."""
        if self.trace is None:
            return []
        return [(e.time_s, e.job) for e in self.trace.jobs_between(k * round_s, (k + 1) * round_s)]

    def software_draws(
        self, seed: int, keys: npt.NDArray[np.uint64], k: int, round_s: float
    ) -> tuple[FloatArray, FloatArray, float]:
        """(u, failure times, probability) of the jobs' own failures in interval ``k`` (while they run)."""
        p = -math.expm1(-self.software_rate / 1000.0 * self.scale / 3600.0 * round_s)
        u = rng.uniforms(seed, STREAM_SOFTWARE, keys, k)
        v = rng.uniforms(seed, STREAM_SOFTWARE_OFFSET, keys, k)
        return u, (k + v) * round_s, p


def _trace(path: str) -> FailureTrace:
    """The failure log at ``path``, read once per version of the file (runs of a comparison share it)."""
    from pathlib import Path

    try:
        st = Path(path).stat()
    except OSError as exc:
        raise OakInputError(f"--failure-model trace:{path}: cannot read the failure log ({exc})") from None
    return _trace_cached(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _trace_cached(path: str, mtime_ns: int, size: int) -> FailureTrace:
    return load_failure_trace(path)


def _node_keys(n_nodes: int) -> npt.NDArray[np.uint64]:
    return np.arange(n_nodes, dtype=np.uint64) + np.uint64(_NODE_KEY_BASE)


@functools.lru_cache(maxsize=32)
def _node_probabilities(model: HardwareModel, seed: int, n_nodes: int, round_s: float) -> FloatArray:
    """Each node's failure probability per interval (the lemon draw is made once per run, not per interval)."""
    return np.asarray(-np.expm1(-model.node_rates(seed, n_nodes) * round_s), dtype=np.float64)


def _fired(
    seed: int,
    stream: int,
    offset_stream: int,
    keys: npt.NDArray[np.uint64],
    k: int,
    p: FloatArray | float,
    round_s: float,
) -> list[tuple[int, float]]:
    """(index, time) of the keys whose uniform in interval ``k`` falls below ``p``, at (k + v)·round_s."""
    u = rng.uniforms(seed, stream, keys, k)
    v = rng.uniforms(seed, offset_stream, keys, k)
    return [(i, (k + float(v[i])) * round_s) for i in np.flatnonzero(u < p).tolist()]


_ZERO = HardwareModel("zero")
_KEYS = (
    "node_rate",
    "repair_s",
    "domain_nodes",
    "domain_rate",
    "lemon_fraction",
    "lemon_factor",
    "software_rate",
    "scale",
)

#: Presets from published measurements (docs/model.md, "Hardware failure models"); ``paper`` is the
#: paper's per-job coin (λ, ``--failure-rate``) with no hardware events.
PRESETS: dict[str, HardwareModel] = {
    "paper": HardwareModel(
        "paper", source="OAK paper §IV: one coin per job per round (λ = --failure-rate); no node events"
    ),
    "llama3": HardwareModel(
        "llama3",
        node_rate=3.8,
        repair_s=4 * 3600.0,
        software_rate=0.0,
        source="Llama 3 405B (Meta 2024, §3.3.4): 419 unexpected interruptions in 54 days on 2,048 nodes = 3.8 per "
        "1,000 node-days; repair time assumed 4 h",
    ),
    "rsc1": HardwareModel(
        "rsc1",
        node_rate=6.5,
        repair_s=4 * 3600.0,
        source="Meta RSC-1 (Kokolis et al. 2024): 6.5 failures per 1,000 node-days; repair time assumed 4 h",
    ),
    "lemon": HardwareModel(
        "lemon",
        node_rate=2.0,
        lemon_fraction=0.05,
        lemon_factor=20.0,
        repair_s=4 * 3600.0,
        source="RSC-1's rate concentrated on lemon nodes (Kokolis et al. 2024: removing them cut large-job failures "
        "from 14 % to 4 %): 5 % of nodes fail 20× as often; overall ≈ 3.9 per 1,000 node-days",
    ),
    "domain": HardwareModel(
        "domain",
        node_rate=3.8,
        domain_nodes=4,
        domain_rate=1.0,
        repair_s=4 * 3600.0,
        source="Llama 3's node rate plus racks of 4 nodes under one switch failing together at 1 per 1,000 "
        "rack-days (Alibaba HPN: ~0.05 % of ToR switches crash per month, plus cabling; assumed)",
    ),
}


def parse_failure_model(text: str) -> HardwareModel:
    """``NAME[:key=value,...]``: a preset with fields overridden (e.g. ``llama3:scale=300,repair_s=1800``);
    ``trace:FILE``: a failure log replayed (:mod:`oak.failures.trace`)."""
    name, sep, rest = text.strip().partition(":")
    if name == "trace":
        if not rest.strip():
            raise OakInputError("--failure-model trace:FILE: expected the failure log's path after 'trace:'")
        return HardwareModel("trace", trace=_trace(rest.strip()), source=f"failure log {rest.strip()}")
    base = PRESETS.get(name)
    if base is None:
        raise OakInputError(f"--failure-model {text!r}: unknown model {name!r}; expected one of {', '.join(PRESETS)}")
    changes: dict[str, object] = {}
    if rest and name == "paper":
        raise OakInputError(
            f"--failure-model {text!r}: the paper's model takes no parameters (its rate is --failure-rate)"
        )
    for part in rest.split(",") if rest or sep else ():
        key, eq, value = part.partition("=")
        key = key.strip()
        if not part.strip():
            raise OakInputError(f"--failure-model {text!r}: an empty item; expected key=value[,key=value...]")
        if not eq or key not in _KEYS:
            raise OakInputError(
                f"--failure-model {text!r}: {part!r}: expected key=value with key one of {', '.join(_KEYS)}"
            )
        if key in changes:
            raise OakInputError(f"--failure-model {text!r}: {key} given twice")
        try:
            changes[key] = int(value) if key == "domain_nodes" else float(value)
        except ValueError:
            kind = "an integer" if key == "domain_nodes" else "a number"
            raise OakInputError(f"--failure-model {text!r}: {key}={value!r}: expected {kind}") from None
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]
