"""OAK's version: the one place it is written (the package metadata and ``oak --version`` read it)."""

__version__ = "0.1.0"
