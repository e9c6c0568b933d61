"""The ``oak`` command line."""
