"""``python -m oak``: the ``oak`` command (for environments where the console script is not on PATH)."""

from oak.cli.entry import main

main()
