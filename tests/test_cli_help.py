"""Every command's ``--help`` reads well on an 80-column terminal (issue [front-page], item 4): no line wider
than 80 columns and every option name printed whole (Rich's tables cut ``--restores-preemptible`` to
``--restores-preempti…``)."""

from __future__ import annotations

import click
import pytest
import typer
from typer.testing import CliRunner

from oak.cli.main import app


def _commands() -> list[tuple[str, ...]]:
    root = typer.main.get_command(app)
    out: list[tuple[str, ...]] = [()]

    def walk(cmd: click.Command, path: tuple[str, ...]) -> None:
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                out.append((*path, name))
                walk(sub, (*path, name))

    walk(root, ())
    return out


@pytest.mark.parametrize("path", _commands(), ids=lambda p: " ".join(p) or "oak")
def test_help_fits_80_columns_with_every_option_whole(path: tuple[str, ...]) -> None:
    res = CliRunner().invoke(app, [*path, "--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    wide = [line for line in res.output.splitlines() if len(line) > 80]
    assert not wide, wide
    cmd: click.Command = typer.main.get_command(app)
    for name in path:
        assert isinstance(cmd, click.Group)
        cmd = cmd.commands[name]
    for param in cmd.params:
        for opt in (*param.opts, *param.secondary_opts):
            if opt.startswith("-"):
                assert opt in res.output, (opt, res.output)
