"""Test-suite set-up: ``tests/`` on sys.path, so that every module imports shared helpers as ``support.*``
(never from another test module), whatever pytest's import mode."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


def pytest_collection_modifyitems(config: object, items: list[object]) -> None:
    """Tests marked ``long`` (tens of seconds each) run first, in collection order otherwise: under pytest-xdist a
    long test that starts last would leave the other workers idle while it finishes."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("long") is not None else 1)  # type: ignore[attr-defined]
