"""Test-suite set-up: ``tests/`` on sys.path, so that every module imports shared helpers as ``support.*``
(never from another test module), whatever pytest's import mode."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
