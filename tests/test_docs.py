"""The front page and the documentation site (issue [front-page]): a README that stays a front page, a site
whose navigation reaches every page, and an API reference that names the whole public API. ``mkdocs build
--strict`` (in ``.ci/run``) checks the links."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import oak

ROOT = Path(__file__).resolve().parents[1]


def _nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    if isinstance(node, dict):
        return [p for v in node.values() for p in _nav_pages(v)]
    return []


def test_the_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for target in re.findall(r"\]\(((?!http)[^)#]+)", text):  # every local link resolves
        assert (ROOT / target).exists(), target


def test_the_site_navigation_reaches_every_page() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = set(_nav_pages(config["nav"]))
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert pages == nav, (pages - nav, nav - pages)


def test_the_api_reference_names_every_public_name() -> None:
    text = (ROOT / "docs" / "reference" / "oak.md").read_text()
    documented = set(re.findall(r"^::: ([\w.]+)$", text, flags=re.M))
    assert documented == {f"{module}.{name}" for name, module in oak._PUBLIC.items()}
    assert set(oak.__all__) - {"__version__"} == set(oak._PUBLIC)
