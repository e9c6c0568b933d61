"""Small I/O helpers: atomic file writes."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (``write_bytes_atomic``)."""
    write_bytes_atomic(path, text.encode("utf-8"), mode)


def write_json(path: str | Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_bytes_atomic(path: str | Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` via a temporary file, fsync and rename: readers never see a partial file. The
    file's mode is ``mode`` when given (e.g. 0o600 for a private file, whatever the umask), else 0666 & ~umask."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        os.fchmod(fd, mode if mode is not None else 0o666 & ~_umask())  # mkstemp makes 0600
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # the rename itself durable too (not every filesystem allows it)
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_rows_parquet(path: str | Path, rows: list[dict[str, Any]], columns: tuple[str, ...]) -> None:
    """Write ``rows`` (dicts with ``columns``) as a Parquet table, atomically."""
    import io

    import pandas as pd

    buf = io.BytesIO()
    pd.DataFrame(rows, columns=list(columns)).to_parquet(buf, index=False)
    write_bytes_atomic(path, buf.getvalue())
