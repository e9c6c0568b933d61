"""Training data for the runtime worker: a seeded synthetic CIFAR-10-shaped set, or real CIFAR-10 batches.

Sample order is a pure function of (seed, position in the sample stream): the stream is the concatenation of
per-epoch permutations seeded by (seed, epoch), so resuming at any step — at any world size — needs no data
loader state, only the number of samples consumed so far.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oak.errors import OakInputError

NUM_CLASSES = 10
IMAGE_SHAPE = (3, 32, 32)
SYNTHETIC_SAMPLES = 2048
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


@dataclass
class Dataset:
    """In-memory image classification data.

    ``x``: (N, 3, 32, 32), float32 already normalised (synthetic) or uint8 pixels (CIFAR-10, normalised per
    batch); ``y``: (N,) int64 labels in [0, 10); ``augment``: random horizontal flips (torch RNG) per batch.
    """

    x: torch.Tensor
    y: torch.Tensor
    name: str
    augment: bool = False

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (float32, normalised) and labels of the samples ``idx``."""
        x = self.x[idx]
        if x.dtype == torch.uint8:
            mean = torch.tensor(CIFAR_MEAN).view(1, 3, 1, 1)
            std = torch.tensor(CIFAR_STD).view(1, 3, 1, 1)
            x = (x.float() / 255.0 - mean) / std
        if self.augment and x.shape[0] > 0:
            flip = torch.rand(x.shape[0]) < 0.5
            x = torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)
        return x, self.y[idx]


def synthetic(seed: int, n: int = SYNTHETIC_SAMPLES, *, separation: float = 0.1) -> Dataset:
    """A fixed, learnable CIFAR-10-shaped set: x = μ_class + N(0, 1) noise, μ_class ~ separation·N(0, 1).

    Depends only on ``seed`` (a private generator; the global RNGs are untouched).
    """
    g = torch.Generator().manual_seed(0x5EED0000 + seed)
    means = torch.randn((NUM_CLASSES, *IMAGE_SHAPE), generator=g) * separation
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    x = means[y] + torch.randn((n, *IMAGE_SHAPE), generator=g)
    return Dataset(x=x, y=y, name=f"synthetic(seed={seed}, n={n})")


_PICKLE_ALLOWED = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }
)


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler that only rebuilds numpy arrays (the CIFAR-10 python batches need nothing else)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _PICKLE_ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")
        return super().find_class(module, name)


def _read_batch(path: Path) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    try:
        with open(path, "rb") as fh:
            obj = _ArrayUnpickler(fh, encoding="bytes").load()
    except Exception as exc:
        raise OakInputError(f"{path}: not a CIFAR-10 python batch ({type(exc).__name__}: {exc})") from None
    if not isinstance(obj, dict):
        raise OakInputError(f"{path}: expected a pickled dict, got {type(obj).__name__}")
    entries = {k.decode() if isinstance(k, bytes) else str(k): v for k, v in obj.items()}
    if "data" not in entries or "labels" not in entries:
        raise OakInputError(f"{path}: missing 'data' or 'labels' (found keys {sorted(entries)})")
    data = np.asarray(entries["data"])
    labels = np.asarray(entries["labels"])
    n_pix = int(np.prod(IMAGE_SHAPE))
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != n_pix:
        raise OakInputError(f"{path}: field 'data' is {data.dtype} {data.shape}, expected uint8 (N, {n_pix})")
    if labels.ndim != 1 or labels.shape[0] != data.shape[0] or not np.issubdtype(labels.dtype, np.integer):
        raise OakInputError(f"{path}: field 'labels' is {labels.dtype} {labels.shape}, expected {data.shape[0]} ints")
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise OakInputError(f"{path}: labels outside [0, {NUM_CLASSES}): min {labels.min()}, max {labels.max()}")
    return data, labels.astype(np.int64)


def load_cifar10(directory: str | Path) -> Dataset:
    """Read the training split of CIFAR-10 from the python-pickle batches directory (``data_batch_*`` files).

    Raises ``OakInputError`` naming the file when the directory or a batch is missing or malformed. The
    pickles are read with an unpickler that refuses every global except numpy array reconstruction.
    """
    d = Path(directory)
    if not d.is_dir():
        raise OakInputError(f"--data {d}: not a directory (expected the cifar-10-batches-py folder)")
    files = sorted(p for p in d.iterdir() if p.name.startswith("data_batch_") and p.is_file())
    if not files:
        raise OakInputError(f"--data {d}: no data_batch_* files (expected the cifar-10-batches-py folder)")
    parts = [_read_batch(p) for p in files]
    data = np.concatenate([p[0] for p in parts]).reshape(-1, *IMAGE_SHAPE)
    labels = np.concatenate([p[1] for p in parts])
    if data.shape[0] == 0:
        raise OakInputError(f"--data {d}: the batches hold no samples")
    return Dataset(x=torch.from_numpy(data), y=torch.from_numpy(labels), name=f"cifar10({d})", augment=True)


class SampleStream:
    """Infinite, deterministic stream of sample indices over a dataset of ``n`` samples.

    Position p maps to epoch p // n and to element p % n of that epoch's permutation, seeded by (seed, epoch).
    """

    def __init__(self, n: int, seed: int) -> None:
        if n < 1:
            raise ValueError("empty dataset")
        self.n = n
        self.seed = seed
        self._cache: dict[int, torch.Tensor] = {}

    def _perm(self, epoch: int) -> torch.Tensor:
        if epoch not in self._cache:
            if len(self._cache) > 2:
                self._cache.pop(min(self._cache))
            g = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) % (2**63))
            self._cache[epoch] = torch.randperm(self.n, generator=g)
        return self._cache[epoch]

    def indices(self, start: int, count: int) -> torch.Tensor:
        """Indices at stream positions [start, start + count)."""
        out = []
        pos, end = start, start + count
        while pos < end:
            epoch, off = divmod(pos, self.n)
            take = min(end - pos, self.n - off)
            out.append(self._perm(epoch)[off : off + take])
            pos += take
        return torch.cat(out) if out else torch.empty(0, dtype=torch.int64)


def shard(global_batch: int, world_size: int, rank: int) -> tuple[int, int]:
    """(offset, size) of ``rank``'s share of a global batch: sizes differ by at most one sample."""
    base, extra = divmod(global_batch, world_size)
    size = base + (1 if rank < extra else 0)
    offset = rank * base + min(rank, extra)
    return offset, size
