"""The command-line reference page (``docs/cli-reference.md``): every command and every option, generated from the
command-line definitions themselves so that it cannot leave one out (``scripts/cli-reference`` writes it; a test
fails when the page is stale)."""

from __future__ import annotations

import inspect
import re
from typing import Any

HEADER = """# Command-line reference

Every command of `oak` with every option, its default and its help, as `oak COMMAND --help` prints them.
Generated from the command-line definitions by `scripts/cli-reference` (a test fails when it is stale); the
[overview](cli.md) says what the commands are for and how they fit together.
"""


def _text(raw: str | None) -> str:
    """Help text as Markdown paragraphs: whitespace within a paragraph joined, ``<`` and ``*`` escaped (not a tag,
    not emphasis)."""
    if not raw:
        return ""
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(raw))
    joined = (" ".join(p.replace("\b", "").split()) for p in paragraphs)
    return "\n\n".join(p.replace("&", "&amp;").replace("<", "&lt;").replace("*", "\\*") for p in joined if p)


def _usage(path: list[str], command: Any) -> str:
    args = " ".join(
        p.name.upper() if p.required else f"[{p.name.upper()}]"
        for p in command.params
        if p.param_type_name == "argument"
    )
    sub = " COMMAND" if hasattr(command, "commands") else ""
    return " ".join([*path, "[OPTIONS]", *([args] if args else [])]) + sub


def _command(path: list[str], command: Any, ctx: Any) -> list[str]:
    lines = [f"## `{' '.join(path)}`", ""]
    if text := _text(command.help):
        lines += [text, ""]
    lines += ["```", _usage(path, command), "```", ""]
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, help_text = record
        if param.param_type_name == "argument":
            names = f"{param.name.upper()} {names.split(' ', 1)[1]}" if " " in names else param.name.upper()
        rows.append(f"* `{names}`: {_text(help_text)}" if help_text else f"* `{names}`")
    rows.append("* `--help`: Show the help and exit.")
    return [*lines, *rows, ""]


def reference(app: Any) -> str:
    """The reference page of the typer application ``app`` (the ``oak`` command), as Markdown."""
    import typer.main

    root = typer.main.get_command(app)
    out = [HEADER]

    def walk(path: list[str], command: Any, parent: Any) -> None:
        ctx = command.context_class(command, info_name=path[-1], parent=parent)
        if len(path) > 1:
            out.extend(_command(path, command, ctx))
        for name in command.list_commands(ctx) if hasattr(command, "commands") else []:
            sub = command.get_command(ctx, name)
            if sub is not None and not getattr(sub, "hidden", False):
                walk([*path, name], sub, ctx)

    walk(["oak"], root, None)
    return "\n".join(out).rstrip("\n") + "\n"
