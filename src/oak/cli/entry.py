"""The ``oak`` command's entry point. Ctrl-C while the command loads — its imports, and typer building the
command line from the commands' signatures, a few tenths of a second — ends it as Ctrl-C during a command does,
with status 130 and no traceback from the middle of an import."""

from __future__ import annotations

import sys

#: the exit status of a command ended by Ctrl-C (128 + SIGINT), as the shell reports it
INTERRUPTED = 130


def main() -> None:
    try:
        from oak.cli.main import main as run

        run()
    except KeyboardInterrupt:  # the commands handle their own; this is one that came before a command ran
        sys.stderr.write("\ninterrupted\n")
        sys.exit(INTERRUPTED)
