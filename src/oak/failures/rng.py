"""Counter-based random numbers: a uniform in [0, 1) is a pure function of (seed, stream, key, counter).

Every policy therefore sees the same failure events and arrival jitter (paired comparisons), however many
random numbers it consumed elsewhere. The mixer is SplitMix64's finaliser, vectorised in NumPy.
"""

from __future__ import annotations

import zlib

import numpy as np
import numpy.typing as npt

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)

STREAM_FAILURE = 1
STREAM_FAILURE_OFFSET = 2
STREAM_ARRIVAL = 3
STREAM_STEP_NOISE = 4


#: Seeds are 64-bit: the streams mix ``seed mod 2^64``, so a larger or negative seed would name another seed's run.
SEED_LIMIT = 1 << 64


def seed_problem(seed: object) -> str | None:
    """Why ``seed`` is not a seed (an integer in [0, 2^64)), or None."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= int(seed) < SEED_LIMIT:
        return f"{seed!r}: expected an integer from 0 to 2^64 - 1 (seeds are 64-bit)"
    return None


def _mix(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def job_key(name: str) -> int:
    """A stable 32-bit key for a job name (CRC-32)."""
    return zlib.crc32(name.encode("utf-8"))


def uniforms(seed: int, stream: int, keys: npt.ArrayLike, counter: int) -> npt.NDArray[np.float64]:
    """Uniforms in [0, 1), one per key, for this (seed, stream, counter)."""
    k = np.asarray(keys, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = _mix(np.asarray(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * _GOLDEN + np.uint64(stream)))
        z = _mix(z ^ (np.uint64(counter & 0xFFFFFFFFFFFFFFFF) * _GOLDEN))
        z = _mix(z ^ (k * _M1 + _GOLDEN))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def uniforms_block(seed: int, stream: int, keys: npt.ArrayLike, first: int, count: int) -> npt.NDArray[np.float64]:
    """(count, len(keys)) uniforms for counters first … first + count − 1; row c equals
    ``uniforms(seed, stream, keys, first + c)`` bit for bit (the same element-wise mix, broadcast)."""
    k = np.asarray(keys, dtype=np.uint64)
    counters = (np.arange(count, dtype=np.int64) + int(first)).astype(np.uint64)[:, None]
    with np.errstate(over="ignore"):
        z = _mix(np.asarray(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * _GOLDEN + np.uint64(stream)))
        z = _mix(z ^ (counters * _GOLDEN))
        z = _mix(z ^ (k * _M1 + _GOLDEN)[None, :])
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
