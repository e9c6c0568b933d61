"""Run one rank of a command job and leave its exit status in the job directory (standard library only).

    python -m oak.runtime.rank_exit JOB_DIR RANK -- COMMAND [ARG ...]

The local executor starts each rank of a user's command through this: the command runs as its child, in the
same session, environment and working directory; when it ends this writes ``JOB_DIR/rank<RANK>.exit`` (its
pid's exit status, :mod:`oak.runtime.procs`) and ends the same way (the same code, or the same signal). A
scheduler that did not start the rank — one restarted after a crash, which adopted it — reads whether the
command finished, stopped or failed from that file. Signals reach the command directly (the scheduler signals
the rank's whole process group); this process keeps the stop signals blocked and waits for it. They are blocked
before the command is forked, and the command unblocks them itself just before it runs: a stop sent in between
is held pending, not lost, and ends the command as soon as it starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from oak.runtime.procs import write_exit_status

EXIT_CANNOT_RUN = 127


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m oak.runtime.rank_exit JOB_DIR RANK -- COMMAND [ARG ...]", file=sys.stderr)
        return 2
    job_dir, rank, command = argv[0], int(argv[1]), argv[3:]
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # default handling, held: for the command, not this
    try:
        proc = subprocess.Popen(command, close_fds=False, preexec_fn=_unblock)
    except OSError as exc:
        print(f"oak: cannot start {command!r}: {exc}", file=sys.stderr, flush=True)
        write_exit_status(job_dir, rank, os.getpid(), EXIT_CANNOT_RUN)
        return EXIT_CANNOT_RUN
    code = proc.wait()
    write_exit_status(job_dir, rank, os.getpid(), code)
    if code < 0:  # end as the command did: by its signal (stop signals held for this process are dropped first)
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(-code, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        os.kill(os.getpid(), -code)
    return code


STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def _unblock() -> None:
    """In the command's process, before it runs: take the stop signals again (one held pending ends it now)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
