"""Small I/O helpers: atomic file writes (whole files, and Parquet tables streamed in batches)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (``write_bytes_atomic``)."""
    write_bytes_atomic(path, text.encode("utf-8"), mode)


def write_json(path: str | Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_target(path: str | Path) -> tuple[Path, bool]:
    """Where a write to ``path`` lands and whether it is atomic. Symbolic links are followed, so a link keeps
    pointing where it did and its target gets the content. A regular file, or a path not there yet, is replaced
    by a rename (atomic). A device, pipe or socket, and any path under /dev or /proc (``/dev/null``,
    ``/dev/stdout``, whatever the shell redirected it to), is written in place: a rename would replace the
    device node, or the file behind the descriptor, instead of writing to it.

    Raises IsADirectoryError for a directory."""
    given = Path(path).absolute()
    if given.parts[1:2] in (("dev",), ("proc",)):  # /dev/stdout, /dev/fd/N, /proc/self/fd/N: the open file itself
        if given.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", str(path))
        return given, False
    real = Path(os.path.realpath(path))
    try:
        mode = os.stat(real).st_mode
    except (FileNotFoundError, NotADirectoryError):  # not there yet (or a file in the way: said on writing)
        return real, True
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", str(path))
    return real, stat.S_ISREG(mode)


def output_file_problem(path: str | Path) -> str | None:
    """Why a file could not be written at ``path`` (None: it can, as far as can be told without writing). The
    check that lets a command refuse a bad output path before its work: an existing directory, a file where a
    parent directory should be, or a directory the user may not create files in (or on a read-only file
    system). Missing parent directories are fine: the writers create them."""
    try:
        real, atomic = write_target(path)
    except IsADirectoryError:
        return "is a directory; expected a file name"
    except OSError as exc:  # e.g. a loop of symbolic links
        return exc.strerror or str(exc)
    if not atomic:  # written in place
        return None if os.access(real, os.W_OK) else "no permission to write it"
    return _creatable(real.parent)


def output_dir_problem(path: str | Path) -> str | None:
    """Why files could not be written in the folder ``path`` (None: they can; a missing folder is created):
    a file there instead, a file in the way of a parent, no permission or a read-only file system."""
    real = Path(os.path.realpath(path))
    if real.exists() and not real.is_dir():
        return "is a file; expected a folder"
    return _creatable(real)


def _creatable(directory: Path) -> str | None:
    """Why files could not be created in ``directory``, made with its missing parents if need be (None: they
    can). The nearest existing ancestor decides."""
    parent = directory
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file, not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create files in {parent} (no write permission or a read-only file system)"
    return None


def write_bytes_atomic(path: str | Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` via a temporary file, fsync and rename: readers never see a partial file. The
    file's mode is ``mode`` when given (e.g. 0o600 for a private file, whatever the umask), else 0666 & ~umask.
    A symbolic link is followed, and a device or pipe is written in place (:func:`write_target`)."""
    target, atomic = write_target(path)
    if not atomic:
        with open(target, "wb") as fh:
            fh.write(data)
        return
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
    _fsync_dir(target.parent)


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (not every filesystem allows it: then nothing)."""
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class AtomicParquetWriter:
    """A Parquet table written a batch of rows at a time to a temporary file beside ``path`` and renamed onto it
    by :meth:`close`: memory holds one batch, however long the table; readers never see a partial file, and a
    writer that is aborted (or left by an exception in its ``with`` block) leaves none.

    ``schema``: (column, pyarrow type) in order; :meth:`append` takes one sequence or array per column, all of
    one length."""

    def __init__(self, path: str | Path, schema: tuple[tuple[str, pa.DataType], ...], batch_rows: int = 65_536) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.path, self._atomic = write_target(path)
        self._schema = pa.schema(list(schema))
        self._batch_rows = batch_rows
        self._pending: dict[str, list[Any]] = {name: [] for name, _ in schema}
        self._pending_rows = 0
        self.rows = 0
        if self._atomic:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
            os.close(fd)
            self._tmp = Path(tmp)
        else:  # a device or pipe, written in place (write_target), through a Python file: Arrow's seeks fail on a pipe
            self._tmp = self.path
        self._fh: Any = None
        self._writer: pq.ParquetWriter | None = None
        try:
            if self._atomic:
                self._writer = pq.ParquetWriter(str(self._tmp), self._schema)
            else:
                self._fh = open(self.path, "wb")  # noqa: SIM115 - closed by close() and abort()
                self._writer = pq.ParquetWriter(pa.PythonFile(self._fh, mode="w"), self._schema)
        except BaseException:
            self.abort()
            raise

    def append(self, columns: Mapping[str, Any]) -> None:
        """Add rows: ``columns`` maps every column of the schema to its values for these rows."""
        lengths = {len(columns[name]) for name in self._pending}
        if len(lengths) != 1:
            raise ValueError(f"columns of unequal length: {sorted(lengths)}")
        n = lengths.pop()
        if n == 0:
            return
        for name, chunk in self._pending.items():
            chunk.append(columns[name])
        self._pending_rows += n
        self.rows += n
        if self._pending_rows >= self._batch_rows:
            self._flush()

    def _flush(self) -> None:
        import numpy as np
        import pyarrow as pa

        if self._writer is None:
            raise ValueError(f"{self.path}: the writer is closed")
        if self._pending_rows:
            arrays = [
                pa.array(np.concatenate([np.asarray(c) for c in chunks]), type=field.type)
                if field.type != pa.string()
                else pa.array([v for c in chunks for v in c], type=field.type)
                for field, chunks in zip(self._schema, self._pending.values(), strict=True)
            ]
            self._writer.write_table(pa.Table.from_arrays(arrays, schema=self._schema))
        self._pending = {name: [] for name in self._pending}
        self._pending_rows = 0

    def close(self) -> None:
        """Write what is left, make the file durable and rename it onto ``path``."""
        if self._writer is None:
            return
        try:
            self._flush()
            self._writer.close()
            self._writer = None
            if not self._atomic:
                self._fh.close()
                return
            with open(self._tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.chmod(self._tmp, 0o666 & ~_umask())  # mkstemp makes 0600
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        _fsync_dir(self.path.parent)

    def abort(self) -> None:
        """Drop what was written: no file at ``path`` (one already there stays as it was)."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
        if self._atomic:
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> AtomicParquetWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


def text_lines(text: str) -> list[str]:
    """A text file's lines, split at ``\\n``, ``\\r\\n`` and ``\\r`` only. ``str.splitlines`` also splits at form
    feeds, vertical tabs and Unicode separators (U+2028, U+0085, ...), which turned one CSV row holding one into
    two rows and shifted the line numbers of errors."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def plain_float(raw: str) -> float:
    """``float(raw)`` for plain ASCII numbers only (``1.5``, ``-2e3``, ``inf``); ValueError for the forms Python
    also reads that no CSV or spreadsheet writes as a number: digit separators (``1_000``) and non-ASCII digits
    (``٣``, full-width ``３``)."""
    if not raw.isascii() or "_" in raw:
        raise ValueError(f"not a plain number: {raw!r}")
    return float(raw)


def plain_int(raw: str) -> int:
    """``int(raw)`` for plain ASCII integers only (see :func:`plain_float`)."""
    if not raw.isascii() or "_" in raw:
        raise ValueError(f"not a plain integer: {raw!r}")
    return int(raw)
