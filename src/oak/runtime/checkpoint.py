"""Crash-safe checkpoint store in one job directory.

Layout (all files mode 0600, nothing is read or written outside the directory)::

    ckpt-000000120.pt       torch.save of the state dict
    ckpt-000000120.sha256   "<hex sha-256 of the .pt bytes>  ckpt-000000120.pt"

A save writes the sidecar first and the checkpoint second, each through a temporary file in the same directory
(write → flush → fsync → os.replace), then fsyncs the directory. A checkpoint counts only when its sidecar exists
and matches its bytes and ``torch.load(weights_only=True)`` accepts it, so a process killed at any point of a
save leaves either the previous checkpoints untouched or a new one that is complete. Older checkpoints are
pruned only after the new one is durable.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch

from oak.job import Fenced, holding_fence

CKPT_RE = re.compile(r"^ckpt-(\d{9})\.pt$")
_TMP_PREFIX = ".tmp-"
DEFAULT_KEEP = 3


def ckpt_name(step: int) -> str:
    """File name of the checkpoint for ``step`` (zero-padded to 9 digits)."""
    if not 0 <= step < 10**9:
        raise ValueError(f"checkpoint step must be in [0, 1e9), got {step}")
    return f"ckpt-{step:09d}.pt"


def sidecar_name(step: int) -> str:
    """File name of the SHA-256 sidecar of the checkpoint for ``step``."""
    return f"ckpt-{step:09d}.sha256"


def fsync_dir(directory: str | Path) -> None:
    """fsync a directory so that renames/unlinks inside it are durable (no-op where unsupported)."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some filesystems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` via a 0600 temporary file in the same directory and ``os.replace``.

    ``durable``: flush and fsync the file before the rename (the caller fsyncs the directory when it needs the
    rename itself to survive a power loss). Readers never see a partial file either way.
    """
    fd, tmp = tempfile.mkstemp(prefix=f"{_TMP_PREFIX}{path.name}.", dir=path.parent)  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def list_checkpoints(directory: str | Path) -> list[int]:
    """Steps of the checkpoint files present in ``directory`` (verified or not), ascending."""
    d = Path(directory)
    if not d.is_dir():
        return []
    steps = []
    for name in os.listdir(d):
        m = CKPT_RE.match(name)
        if m:
            steps.append(int(m.group(1)))
    return sorted(steps)


def save(directory: str | Path, state: dict[str, Any], step: int, *, keep: int = DEFAULT_KEEP) -> Path:
    """Durably write ``state`` as the checkpoint for ``step`` in ``directory``; return its path.

    ``state`` must hold only what ``torch.load(weights_only=True)`` reads back: tensors, numbers, strings,
    None and (nested) dicts/lists/tuples of those. After the new checkpoint is durable, all but the newest
    ``keep`` checkpoints with step ≤ ``step`` are deleted, as are checkpoints with a larger step (they belong
    to a timeline abandoned by resuming from an older checkpoint) and temporary files of interrupted saves.
    A rank of an incarnation the launcher has fenced off (``oak.job.fenced``: a newer one runs the job) writes
    and deletes nothing: :class:`oak.job.Fenced`.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    d = Path(directory)
    d.mkdir(mode=0o700, exist_ok=True)
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    target = d / ckpt_name(step)
    # Sidecar first: a crash between the two renames leaves an orphan sidecar (ignored), never a checkpoint
    # without one; re-saving an existing step replaces the sidecar, so the old bytes no longer verify until
    # the new bytes land.
    with holding_fence() as current:  # only the job's current incarnation writes (and prunes) its checkpoints
        if not current:
            raise Fenced(f"checkpoint of step {step} not written: a newer incarnation of the job runs")
        write_bytes_atomic(d / sidecar_name(step), f"{digest}  {target.name}\n".encode())
        write_bytes_atomic(target, data)
        fsync_dir(d)
        _prune(d, step, keep)
    return target


def _prune(d: Path, newest: int, keep: int) -> None:
    steps = list_checkpoints(d)
    older = [s for s in steps if s <= newest]
    doomed = [s for s in steps if s > newest] + older[:-keep]
    for s in doomed:
        # Checkpoint before sidecar: a crash in between leaves a sidecar alone, which is ignored.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(d / ckpt_name(s))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(d / sidecar_name(s))
    live = {sidecar_name(s) for s in steps if s not in doomed}
    for name in os.listdir(d):
        orphan_sidecar = name.startswith("ckpt-") and name.endswith(".sha256") and name not in live
        if name.startswith(f"{_TMP_PREFIX}ckpt-") or orphan_sidecar:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(d / name)
    if doomed:
        fsync_dir(d)


@dataclass
class LoadInfo:
    """What ``load_latest`` found.

    ``step``: step of the checkpoint used (None when none verified); ``corrupt_skipped``: number of newer
    checkpoint files that failed verification; ``lost_steps``: newest skipped step minus the step used (0 when
    nothing was skipped); ``skipped``: (file name, reason) per skipped file, newest first.
    """

    step: int | None = None
    path: str | None = None
    corrupt_skipped: int = 0
    lost_steps: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "path": self.path,
            "corrupt_skipped": self.corrupt_skipped,
            "lost_steps": self.lost_steps,
            "skipped": [list(s) for s in self.skipped],
        }


class Loaded(NamedTuple):
    """A verified checkpoint: its state dict, its step and the ``LoadInfo`` of the search."""

    state: dict[str, Any]
    step: int
    info: LoadInfo


def _read_regular(path: Path) -> bytes:
    """Read a regular file without following symlinks (a link planted in the job dir is refused)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path.name} is not a regular file")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _verify(d: Path, step: int) -> dict[str, Any]:
    """Return the state of checkpoint ``step`` or raise ``ValueError`` saying why it is invalid."""
    try:
        side = _read_regular(d / sidecar_name(step)).decode("ascii", "replace").split()
    except FileNotFoundError:
        raise ValueError("missing sha256 sidecar") from None
    except OSError as exc:
        raise ValueError(f"unreadable sha256 sidecar: {exc}") from None
    if not side or not re.fullmatch(r"[0-9a-f]{64}", side[0]):
        raise ValueError("malformed sha256 sidecar")
    try:
        data = _read_regular(d / ckpt_name(step))
    except OSError as exc:
        raise ValueError(f"unreadable checkpoint: {exc}") from None
    if hashlib.sha256(data).hexdigest() != side[0]:
        raise ValueError(f"sha256 mismatch ({len(data)} bytes)")
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"torch.load failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict):
        raise ValueError(f"checkpoint holds a {type(state).__name__}, expected a dict")
    return state


def scan_latest(directory: str | Path) -> tuple[Loaded | None, LoadInfo]:
    """Like ``load_latest`` but also returns the ``LoadInfo`` when no checkpoint verifies."""
    d = Path(directory)
    info = LoadInfo()
    newest_bad: int | None = None
    for step in reversed(list_checkpoints(d)):
        try:
            state = _verify(d, step)
        except ValueError as exc:
            info.corrupt_skipped += 1
            info.skipped.append((ckpt_name(step), str(exc)))
            if newest_bad is None:
                newest_bad = step
            continue
        info.step = step
        info.path = str(d / ckpt_name(step))
        info.lost_steps = 0 if newest_bad is None else newest_bad - step
        return Loaded(state, step, info), info
    info.lost_steps = 0 if newest_bad is None else newest_bad
    return None, info


def load_latest(directory: str | Path) -> Loaded | None:
    """Load the newest checkpoint in ``directory`` that verifies; None when there is none.

    Newer files that fail verification (missing/malformed sidecar, checksum mismatch, truncated, not loadable
    with ``weights_only=True``) are skipped and reported in ``info`` (``corrupt_skipped``, ``lost_steps``,
    ``skipped``). Returns ``(state, step, info)``.
    """
    loaded, _ = scan_latest(directory)
    return loaded
