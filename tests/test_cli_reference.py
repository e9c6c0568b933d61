"""docs/cli-reference.md is every command and option of `oak`, generated from the code: it may not go stale."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli-reference.md"


def _commands() -> list[tuple[list[str], Any]]:
    import typer.main

    from oak.cli.main import app

    out: list[tuple[list[str], Any]] = []

    def walk(path: list[str], command: Any, parent: Any) -> None:
        ctx = command.context_class(command, info_name=path[-1], parent=parent)
        out.append((path, command))
        for name in getattr(command, "commands", {}):
            walk([*path, name], command.commands[name], ctx)

    walk(["oak"], typer.main.get_command(app), None)
    return out


def test_the_reference_page_is_what_the_code_writes() -> None:
    from oak.cli.main import app
    from oak.cli.reference import reference

    assert PAGE.read_text(encoding="utf-8") == reference(app), (
        "docs/cli-reference.md is stale: run scripts/cli-reference"
    )


def test_every_command_and_option_is_on_the_page() -> None:
    """Independent of the generator's own walk: each visible command has its heading and each option its line."""
    text = PAGE.read_text(encoding="utf-8")
    commands = [(p, c) for p, c in _commands() if len(p) > 1 and not getattr(c, "hidden", False)]
    assert len(commands) >= 25
    for path, command in commands:
        heading = f"## `{' '.join(path)}`\n"
        assert heading in text, path
        section = text.split(heading, 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            for opt in [*param.opts, *param.secondary_opts] if param.param_type_name == "option" else []:
                assert f"`{opt}" in section or f" {opt}" in section, (path, opt)


def test_the_script_checks_the_page() -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cli-reference"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
