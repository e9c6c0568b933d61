"""A process pool for sweeps: one pipe per worker and no thread in the parent.

``concurrent.futures.ProcessPoolExecutor`` reads every worker's results through one queue in a manager thread,
which the interpreter joins at exit. A worker ended while it wrote a result (a sweep's Ctrl-C or SIGTERM ends the
runs still going) leaves half a message in that queue, whose write end the parent also holds: the thread waits for
the rest for ever, and so does the parent's exit. Here each worker has a pipe of its own whose other end only the
worker holds, so a worker that dies mid-message gives the parent an end of file, not a wait; and the parent reads
the pipes itself, in the calls that hand out and collect work, so nothing is left to join at exit."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from types import TracebackType
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: How often an idle worker checks that its parent is still there.
PARENT_CHECK_S = 1.0

#: How long a worker may take to end once asked (its last task done), and once terminated, before it is killed.
END_WAIT_S = 5.0


class WorkerDied(RuntimeError):
    """A worker process (``pid``) ended while it ran task ``task`` (killed, out of memory, a crash in native
    code); ``running`` says what the task was where the caller knows."""

    def __init__(self, pid: int | None, exitcode: int | None, task: int, running: str | None = None) -> None:
        self.pid, self.exitcode, self.task, self.running = pid, exitcode, task, running
        super().__init__(
            f"a sweep's worker (pid {pid}) ended, {exit_description(exitcode)}, while it ran "
            f"{running if running is not None else f'task {task}'}"
        )


def exit_description(exitcode: int | None) -> str:
    """A process's exit code in words: ``-9`` → "killed by SIGKILL (kill -9 or the out-of-memory killer)"."""
    if exitcode is None:
        return "no exit code"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        why = " (kill -9 or the out-of-memory killer)" if exitcode == -signal.SIGKILL else ""
        return f"killed by {name}{why}"
    return f"exit code {exitcode}"


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker (set as the re-raised exception's ``__cause__``)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


def _die_with(parent: int | None) -> int:
    """End this process when its parent ends (a killed sweep leaves no worker running its last task): on Linux the
    kernel's parent-death signal. ``parent``: the sweep's pid where the worker was forked from it (then a check that
    it was not gone already); None where a fork server or a fresh interpreter started it, whose parent is that
    server (which ends with the sweep). Returns the parent pid the idle worker then watches."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if parent is None:
        return os.getppid()
    if os.getppid() != parent:
        os._exit(0)
    return parent


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _serve(
    conn: Connection,
    parent: int | None,
    fn: Callable[[Any], Any],
    initializer: Callable[..., None] | None,
    initargs: tuple[Any, ...],
) -> None:
    """A worker: run ``fn`` on each task received until ``None``, the parent's end of the pipe closes, or the
    parent is gone (checked every :data:`PARENT_CHECK_S` while idle, where no parent-death signal exists). Ctrl-C
    is left to the parent, which ends its workers."""
    parent = _die_with(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if initializer is not None:
        try:
            initializer(*initargs)
        except BaseException as exc:  # said once, as itself, not as the first task's death
            with contextlib.suppress(OSError):
                conn.send(("init-error", _portable(exc)))
            return
    while True:
        try:
            while not conn.poll(PARENT_CHECK_S):
                if os.getppid() != parent:
                    return
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        try:
            reply: tuple[str, Any] = ("ok", fn(task))
        except BaseException as exc:  # every failure goes back to the parent, which re-raises it
            reply = ("error", _portable(exc))
        try:
            conn.send(reply)
        except OSError:  # the parent is gone (killed): nobody to tell
            return


def _portable(exc: BaseException) -> tuple[BaseException, str]:
    """The exception and its formatted traceback, the exception replaced by a RuntimeError naming it where it
    cannot be pickled."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # any pickling failure: send its description instead
        exc = RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc, text


class _Worker:
    def __init__(self, ctx: Any, args: tuple[Any, ...]) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        parent = os.getpid() if ctx.get_start_method() == "fork" else None  # else a fork server is its parent
        self.proc = ctx.Process(target=_serve, args=(child, parent, *args), name="oak-sweep-worker")
        self.proc.start()
        child.close()  # the worker holds the only other end: its death is an end of file here
        self.task: int | None = None  # the id of the task it runs


class WorkerPool(Generic[T, R]):
    """``workers`` processes that each run ``fn(task)``; ``initializer(*initargs)`` once in each first.

    :meth:`submit` hands a task to an idle worker, :meth:`results` yields ``(id, result)`` as tasks end (the
    worker's exception re-raised here, with its traceback as the cause; :class:`WorkerDied` if it died). Leaving
    the ``with`` block normally lets the workers end; leaving it by an exception terminates them at once (the
    tasks still going are abandoned)."""

    def __init__(
        self,
        workers: int,
        fn: Callable[[T], R],
        initializer: Callable[..., None] | None = None,
        initargs: tuple[Any, ...] = (),
        start_method: str | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers {workers}: expected a positive integer")
        ctx = multiprocessing.get_context(start_method)  # None: the platform's default
        self._workers: list[_Worker] = []
        try:
            for _ in range(workers):
                self._workers.append(_Worker(ctx, (fn, initializer, initargs)))
        except BaseException:
            self._terminate()
            raise

    def __enter__(self) -> WorkerPool[T, R]:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self._finish()
        else:
            self._terminate()

    @property
    def pids(self) -> list[int]:
        """The workers' process ids."""
        return [w.proc.pid for w in self._workers if w.proc.pid is not None]

    @property
    def idle(self) -> int:
        return sum(w.task is None for w in self._workers)

    @property
    def busy(self) -> int:
        return len(self._workers) - self.idle

    def submit(self, task_id: int, task: T) -> None:
        """Start ``task`` on an idle worker (there must be one: :attr:`idle`)."""
        worker = next(w for w in self._workers if w.task is None)
        try:
            worker.conn.send(task)
        except OSError:  # it died while idle, or its initializer failed (then its message is waiting)
            self._raise_early_end(worker, task_id)
        worker.task = task_id

    def _raise_early_end(self, w: _Worker, task_id: int) -> None:
        """Raise why ``w`` ended: its initializer's error where it sent one, else :class:`WorkerDied`."""
        message: tuple[str, Any] | None = None
        with contextlib.suppress(EOFError, OSError):
            if w.conn.poll():
                message = w.conn.recv()
        if message is not None and message[0] == "init-error":
            error, text = message[1]
            raise error from RemoteTraceback(text)
        w.proc.join(END_WAIT_S)
        raise WorkerDied(w.proc.pid, w.proc.exitcode, task_id)

    def results(self) -> Iterator[tuple[int, R]]:
        """Wait until at least one running task ends; yield ``(id, result)`` for each that has."""
        running = [w for w in self._workers if w.task is not None]
        if not running:
            return
        ready = set(wait([w.conn for w in running] + [w.proc.sentinel for w in running]))
        for w in running:
            if w.conn not in ready and w.proc.sentinel not in ready:
                continue
            task_id = w.task
            assert task_id is not None
            try:
                kind, payload = w.conn.recv()
            except (EOFError, OSError):
                w.proc.join(END_WAIT_S)
                raise WorkerDied(w.proc.pid, w.proc.exitcode, task_id) from None
            w.task = None
            if kind in ("error", "init-error"):
                error, text = payload
                raise error from RemoteTraceback(text)
            yield task_id, payload

    def _finish(self) -> None:
        for w in self._workers:
            with contextlib.suppress(OSError):  # a worker gone already
                w.conn.send(None)
        for w in self._workers:
            w.proc.join(END_WAIT_S)
        self._terminate()

    def _terminate(self) -> None:
        """End every worker: SIGTERM, then SIGKILL for one still there after :data:`END_WAIT_S`."""
        for w in self._workers:
            if w.proc.is_alive():
                w.proc.terminate()
        for w in self._workers:
            w.proc.join(END_WAIT_S)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join()
            w.conn.close()
            w.proc.close()
        self._workers = []
