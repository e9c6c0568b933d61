"""The ``oak`` console script's entry point: Ctrl-C while the command's modules load."""

from __future__ import annotations

import importlib
import sys
import tomllib
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


class _LoadingInterrupted(types.ModuleType):
    """A module whose names are not there yet: Ctrl-C lands while it loads."""

    def __getattr__(self, name: str) -> object:
        raise KeyboardInterrupt


def _building_interrupted() -> None:
    """Ctrl-C while typer builds the command line from the commands' signatures, before click handles it."""
    raise KeyboardInterrupt


def _module(when: str) -> types.ModuleType:
    if when == "importing":
        return _LoadingInterrupted("oak.cli.main")
    module = types.ModuleType("oak.cli.main")
    module.main = _building_interrupted  # type: ignore[attr-defined]
    return module


@pytest.mark.parametrize("when", ["importing", "building"])
def test_ctrl_c_while_the_command_loads_exits_130_without_a_traceback(
    when: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["oak"]
    module, name = target.split(":")
    entry = getattr(importlib.import_module(module), name)  # the function the console script calls
    monkeypatch.setitem(sys.modules, "oak.cli.main", _module(when))
    with pytest.raises(SystemExit) as info:
        entry()
    assert info.value.code == 130
    assert capsys.readouterr().err.strip() == "interrupted"
