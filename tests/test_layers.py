"""The layering of docs/architecture.md ("Layers (enforced)"), checked on the source: every `import` of an `oak`
module — at module level, inside functions, under TYPE_CHECKING — goes to a lower layer, to the importer's own
unit, or to a pair the document allows; every module belongs to a listed unit."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "oak"
DOC = ROOT / "docs" / "architecture.md"


def _layers() -> tuple[dict[str, int], set[frozenset[str]], set[frozenset[str]]]:
    """Unit → layer, the pairs allowed within a layer, and the pairs forbidden to import each other."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Layers (enforced)", 1)[1].split("\n## ", 1)[0]
    layer: dict[str, int] = {}
    for row in re.findall(r"^\| (\d+) \| (.+) \|$", section, flags=re.M):
        for unit in re.findall(r"`([\w.]+)`", row[1]):
            layer[unit] = int(row[0])
    allowed = {frozenset(p) for p in re.findall(r"`([\w.]+)` ↔ `([\w.]+)`", section)}
    forbidden = {frozenset(p) for p in re.findall(r"`([\w.]+)` and `([\w.]+)` share layer \d+ and must not", section)}
    return layer, allowed, forbidden


def _unit(module: str) -> str:
    """The unit of a dotted module name: `oak.engine.X` for the engine's modules, else `oak.X` (or `oak`)."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == "engine":
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) of every absolute import of an `oak` module in ``path``; `from X import name` counts
    X.name where that is a module of its own."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                is_module = (SRC.parent / Path(*sub.split("."))).with_suffix(".py").exists() or (
                    SRC.parent / Path(*sub.split("."))
                ).is_dir()
                out.append((node.lineno, sub if is_module else node.module))
    return [(n, m) for n, m in out if m == "oak" or m.startswith("oak.")]


def test_the_table_is_read() -> None:
    layer, allowed, forbidden = _layers()
    assert layer["oak.errors"] == 0 and layer["oak.__main__"] == max(layer.values())
    assert frozenset({"oak.catalog", "oak.goodput"}) in allowed
    assert frozenset({"oak.sim", "oak.runtime"}) in forbidden


def _problems(paths: list[Path], unit_of: dict[Path, str] | None = None) -> list[str]:
    """Every import of ``paths`` that breaks the layers (``unit_of``: the unit a path stands for, else its own)."""
    layer, allowed, forbidden = _layers()
    problems = []
    for path in paths:
        here = (unit_of or {}).get(path) or _unit(_module_of(path))
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        if here not in layer:
            problems.append(f"{where}: its unit {here} is in no layer of docs/architecture.md")
            continue
        for line, module in _imports(path):
            there = _unit(module)
            if there == here:
                continue
            if there not in layer:
                problems.append(f"{where}:{line}: imports {module}, whose unit is in no layer")
            elif frozenset({here, there}) in forbidden:
                problems.append(f"{where}:{line}: {here} must not import {there}")
            elif layer[there] > layer[here] or (
                layer[there] == layer[here] and frozenset({here, there}) not in allowed
            ):
                problems.append(f"{where}:{line}: {here} (layer {layer[here]}) imports {module} (layer {layer[there]})")
    return problems


def test_every_import_goes_down_the_layers() -> None:
    problems = _problems(sorted(SRC.rglob("*.py")))
    assert not problems, "\n".join(problems)


def test_a_violation_is_reported(tmp_path: Path) -> None:
    """The check can fail: a lazy upward import, a forbidden pair and a same-layer import are each reported."""
    up = tmp_path / "up.py"
    up.write_text("def f():\n    from oak.policies.sia import SiaPolicy\n")
    sideways = tmp_path / "sideways.py"
    sideways.write_text("import oak.sim.simulator\n")
    same = tmp_path / "same.py"
    same.write_text("from oak.solve import solve_assignment\n")
    problems = _problems([up, sideways, same], {up: "oak.model", sideways: "oak.runtime", same: "oak.placement"})
    assert len(problems) == 3, problems
    assert "oak.model (layer 1) imports oak.policies.sia (layer 3)" in problems[0]
    assert "oak.runtime must not import oak.sim" in problems[1]
    assert "oak.placement (layer 2) imports oak.solve (layer 2)" in problems[2]
