"""The report's Markdown as one self-contained HTML page, through markdown-it-py (CommonMark + tables).

Figures (``![alt](figures/x.png)``) are embedded as base64 data URIs; table cells get classes for the paper's
reference columns (``paper…`` headers), free-text columns and claim verdicts, which the page's CSS colours.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1400px;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ccc; padding-bottom: .2em; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: .15em; margin-top: 2em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; display: block; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; white-space: nowrap; }
th { background: #f2f2f2; }
td:first-child, th:first-child { text-align: left; }
td.text { text-align: left; white-space: normal; min-width: 16em; }
th.paper, td.paper { background: #fbf7e9; color: #555; }
tr:nth-child(even) td { background-color: rgba(0, 0, 0, .025); }
figure { margin: 1em 0; }
img { max-width: 100%; height: auto; }
code { background: #f4f4f4; padding: 0 .25em; border-radius: 3px; }
em { color: #444; }
td.holds { color: #1a7f37; } td.fails { color: #b42318; } td.na { color: #777; }
"""
VERDICT_CLASSES = {"holds": "holds", "does not hold": "fails", "n/a": "na"}
TEXT_COLUMNS = ("paper's claim", "measured (ours)", "rule")


def _classify_tables(tokens: Sequence[Token]) -> None:
    """Set the class attribute of every th/td from its column's header and its own content."""
    header: list[str] = []
    col = 0
    in_head = False
    for k, tok in enumerate(tokens):
        if tok.type == "thead_open":
            in_head, header = True, []
        elif tok.type == "thead_close":
            in_head = False
        elif tok.type == "tr_open":
            col = 0
        elif tok.type in ("th_open", "td_open"):
            content = tokens[k + 1].content if k + 1 < len(tokens) else ""
            if in_head:
                header.append(content)
            name = header[col] if col < len(header) else ""
            names = (["paper"] if name.lower().startswith("paper") else []) + (["text"] if name in TEXT_COLUMNS else [])
            verdict = content.strip("*") if content.startswith("**") and content.endswith("**") else None
            if not in_head and verdict in VERDICT_CLASSES:
                names.append(VERDICT_CLASSES[verdict])
            if names:
                tok.attrSet("class", " ".join(names))
            tok.attrs.pop("style", None)
            col += 1


def markdown_to_html(md: str, images: Mapping[str, bytes], base: Path | None = None, title: str = "") -> str:
    """The page for ``md``; images from ``images`` (by their path in the Markdown) or read under ``base``."""
    parser = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = parser.parse(md)
    _classify_tables(tokens)
    first_h1 = title
    for k, tok in enumerate(tokens):
        if not first_h1 and tok.type == "heading_open" and tok.tag == "h1":
            first_h1 = tokens[k + 1].content

    def image(self: Any, toks: Sequence[Token], idx: int, options: Any, env: Any) -> str:
        tok = toks[idx]
        src = str(tok.attrGet("src") or "")
        alt = "".join(c.content for c in tok.children or [])
        data = images.get(src)
        if data is None and base is not None and (base / src).is_file():
            data = (base / src).read_bytes()
        if data is None:
            return f"<em>[missing figure: {html.escape(src)}]</em>"
        uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        return f'<img alt="{html.escape(alt)}" src="{uri}">'

    parser.add_render_rule("image", image)
    body = str(parser.renderer.render(tokens, parser.options, {}))
    head = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(first_h1 or 'OAK report')}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
    )
    return head + body + "</body>\n</html>\n"
