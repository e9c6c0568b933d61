"""Test-suite set-up: ``tests/`` on sys.path, so that every module imports shared helpers as ``support.*``
(never from another test module), whatever pytest's import mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

_TESTS = str(Path(__file__).resolve().parent)

# every runtime scheduler of the suite (in process, or an `oak run` / `oak serve` it starts) treats a change of a
# job's phase that oak.runtime.lifecycle.TRANSITIONS does not allow as the defect it is: it raises
os.environ["OAK_LIFECYCLE_STRICT"] = "1"
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
# pytest keeps each test module's assertion-rewritten code in __pycache__ (ignored by git) for the next run, but
# not where bytecode writing is off (PYTHONDONTWRITEBYTECODE, as on the CI machine): then every pytest-xdist worker
# rewrites all ~170 test modules again, ~6 s of CPU each. This process writes them; the environment of the
# commands the tests start is left as it is.
sys.dont_write_bytecode = False


def pytest_collection_modifyitems(config: object, items: list[object]) -> None:
    """Tests marked ``long`` (tens of seconds each) run first, in collection order otherwise: under pytest-xdist a
    long test that starts last would leave the other workers idle while it finishes."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("long") is not None else 1)  # type: ignore[attr-defined]


def pytest_configure(config: Any) -> None:
    """Under pytest-xdist, the controller compiles the numba kernels into numba's cache in the background
    (support/warm_numba.py) while the workers start, so that they load them instead of each compiling them."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    config.oak_warm_numba = [
        subprocess.Popen(
            [sys.executable, str(Path(_TESTS) / "support" / "warm_numba.py"), policy],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for policy in ("pollux", "hybrid-oak", "solver")  # separate modules: compiled side by side
    ]


def pytest_unconfigure(config: Any) -> None:
    for warm in getattr(config, "oak_warm_numba", ()):
        if warm.poll() is None:
            warm.kill()
            warm.wait()
