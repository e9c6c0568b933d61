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


def test_every_import_goes_down_the_layers() -> None:
    layer, allowed, forbidden = _layers()
    problems = []
    for path in sorted(SRC.rglob("*.py")):
        here = _unit(_module_of(path))
        if here not in layer:
            problems.append(f"{path.relative_to(ROOT)}: its unit {here} is in no layer of docs/architecture.md")
            continue
        for line, module in _imports(path):
            there = _unit(module)
            if there == here:
                continue
            if there not in layer:
                problems.append(f"{path.relative_to(ROOT)}:{line}: imports {module}, whose unit is in no layer")
            elif frozenset({here, there}) in forbidden:
                problems.append(f"{path.relative_to(ROOT)}:{line}: {here} must not import {there}")
            elif layer[there] > layer[here] or (
                layer[there] == layer[here] and frozenset({here, there}) not in allowed
            ):
                problems.append(
                    f"{path.relative_to(ROOT)}:{line}: {here} (layer {layer[here]}) imports {module} "
                    f"(layer {layer[there]})"
                )
    assert not problems, "\n".join(problems)


def test_a_violation_is_reported(tmp_path: Path) -> None:
    """The check can fail: an upward import in a copy of a low-layer module is found."""
    layer, _, _ = _layers()
    assert layer["oak.model"] < layer["oak.policies"]
    fake = SRC / "model" / "snapshot.py"
    imports = _imports(fake)
    assert all(layer[_unit(m)] < layer["oak.model"] or _unit(m) == "oak.model" for _, m in imports)
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from oak.policies.sia import SiaPolicy\n")
    got = [m for _, m in _imports(bad)]
    assert got == ["oak.policies.sia"] and layer[_unit(got[0])] > layer["oak.model"]
