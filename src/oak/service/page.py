"""The status page of ``oak serve --listen`` (``GET /``): server-rendered HTML, no script, no build step, no CDN.

It shows the queue and the running jobs (state, devices, restarts, failures and why each holds what it holds),
the cluster's utilisation over the recorded rounds, and per job a timeline of its devices, restarts and
failures — the data of ``oak simulate --trace-plot``, from the run's own ``state.sqlite`` (the ``rounds`` table's
allocations and the ``failures`` log), so a restarted service shows the whole run. Charts are inline SVG. The
page reloads itself every ``REFRESH_S`` seconds (a ``<meta>`` refresh; ``?refresh=0`` turns it off).

Pure functions of data: :func:`render_page` takes the published state and the history; :func:`read_history`
reads the history from the database, read-only.
"""

from __future__ import annotations

import html
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: seconds between the page's reloads
REFRESH_S = 10
#: rounds of history the charts show (the newest)
HISTORY_ROUNDS = 2000
#: jobs the timelines show: those holding devices or queued first, then the most recently finished
TIMELINE_JOBS = 40

_STATE_COLOUR = {
    "running": "#2ca02c",
    "restoring": "#d4a017",
    "queued": "#1f77b4",
    "done": "#555",
    "failed": "#d62728",
    "cancelled": "#999",
}


@dataclass(frozen=True)
class History:
    """What the charts draw: each recorded round's time and devices per job, and the failure log."""

    rounds: tuple[tuple[float, dict[str, list[int]]], ...]
    failures: tuple[dict[str, Any], ...]


def read_history(db: Path, rounds: int = HISTORY_ROUNDS) -> History:
    """The newest ``rounds`` rounds and the failure log of ``db`` (``state.sqlite``), opened read-only."""
    try:
        con = sqlite3.connect(f"{Path(db).absolute().as_uri()}?mode=ro", uri=True, timeout=5.0)  # '#', '?' escaped
    except sqlite3.Error:
        return History((), ())
    try:
        rows = con.execute("SELECT time_s, allocation FROM rounds ORDER BY k DESC LIMIT ?", (int(rounds),)).fetchall()
        fails = con.execute("SELECT time_s, job, node, kind, detail FROM failures ORDER BY seq").fetchall()
    except sqlite3.Error:
        return History((), ())
    finally:
        con.close()
    out = []
    for t, text in reversed(rows):
        try:
            alloc = json.loads(text)
        except ValueError:
            continue
        out.append((float(t), {k: list(v) for k, v in alloc.items() if not k.startswith("_") and isinstance(v, list)}))
    keys = ("time_s", "job", "node", "kind", "detail")
    return History(tuple(out), tuple(dict(zip(keys, f, strict=True)) for f in fails))


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _fmt_s(s: float) -> str:
    if s < 120:
        return f"{s:,.0f} s"
    if s < 7200:
        return f"{s / 60:,.1f} min"
    return f"{s / 3600:,.1f} h"


def _utilisation_svg(h: History, devices: int, now: float, width: int = 900, height: int = 160) -> str:
    if not h.rounds or devices <= 0:
        return '<p class="none">no round recorded yet</p>'
    t0, t1 = h.rounds[0][0], max(h.rounds[-1][0], now, h.rounds[0][0] + 1e-9)
    pad = 36

    def x(t: float) -> float:
        return pad + (t - t0) / (t1 - t0) * (width - pad - 8)

    def y(u: float) -> float:
        return 8 + (1.0 - u) * (height - 30)

    pts: list[str] = []
    prev: float | None = None
    for t, alloc in h.rounds:
        u = min(sum(len(v) for v in alloc.values()) / devices, 1.0)
        if prev is not None:
            pts.append(f"{x(t):.1f},{y(prev):.1f}")
        pts.append(f"{x(t):.1f},{y(u):.1f}")
        prev = u
    if prev is not None:
        pts.append(f"{x(t1):.1f},{y(prev):.1f}")  # the last round's allocation holds until now
    axis = "".join(
        f'<line x1="{pad}" x2="{width - 8}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>'
        f'<text x="{pad - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{int(v * 100)}%</text>'
        for v in (0.0, 0.5, 1.0)
    )
    span = f'<text x="{pad}" y="{height - 4}">t = {t0:,.0f} s</text>' + (
        f'<text x="{width - 8}" y="{height - 4}" text-anchor="end">t = {t1:,.0f} s</text>'
    )
    return (
        f'<svg id="utilisation" viewBox="0 0 {width} {height}" width="100%" role="img" '
        f'aria-label="devices held over time">{axis}{span}'
        f'<polyline points="{" ".join(pts)}" class="util"/></svg>'
    )


def _timelines_svg(state: dict[str, Any], h: History, width: int = 900) -> str:
    rows: list[dict[str, Any]] = state.get("jobs", [])
    live = [r for r in rows if r["state"] in ("running", "restoring", "queued")]
    over = [r for r in rows if r["state"] not in ("running", "restoring", "queued")]
    chosen = (live + over[::-1])[:TIMELINE_JOBS]
    if not chosen or not h.rounds:
        return '<p class="none">no round recorded yet</p>'
    t0 = h.rounds[0][0]
    t1 = max(float(state.get("time_s", 0.0)), h.rounds[-1][0], t0 + 1e-9)
    most = max((len(v) for _, a in h.rounds for v in a.values()), default=1) or 1
    label_w, row_h, pad = 150, 22, 8

    def x(t: float) -> float:
        return label_w + (t - t0) / (t1 - t0) * (width - label_w - pad)

    parts: list[str] = []
    for k, r in enumerate(chosen):
        name = r["name"]
        top = k * row_h + 4
        parts.append(f'<text x="{label_w - 6}" y="{top + 13}" text-anchor="end">{_e(name)}</text>')
        parts.append(f'<line x1="{label_w}" x2="{width - pad}" y1="{top + 17}" y2="{top + 17}" class="grid"/>')
        seg_start: float | None = None
        seg_devs: list[int] = []
        for t, alloc in h.rounds:
            devs = alloc.get(name) or []
            if devs != seg_devs:
                if seg_devs and seg_start is not None:
                    parts.append(_bar(x(seg_start), x(t), top, len(seg_devs), most, seg_devs))
                if seg_devs and devs:  # other devices: a restart (a move, or a failure's restore)
                    parts.append(
                        f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top}" y2="{top + 18}" class="restart">'
                        f"<title>{_e(name)}: restarted at t = {t:,.0f} s</title></line>"
                    )
                seg_start, seg_devs = t, devs
        if seg_devs and seg_start is not None:
            parts.append(_bar(x(seg_start), x(t1), top, len(seg_devs), most, seg_devs))
        for f in h.failures:
            if f["job"] == name and f["time_s"] >= t0:
                fx = x(float(f["time_s"]))
                parts.append(
                    f'<path d="M{fx - 4:.1f},{top + 1} l8,8 m0,-8 l-8,8" class="failure">'
                    f"<title>{_e(name)}: {_e(f['kind'])} at t = {float(f['time_s']):,.0f} s {_e(f['detail'])}</title>"
                    "</path>"
                )
    height = len(chosen) * row_h + 24
    legend = (
        f'<text x="{label_w}" y="{height - 4}">t = {t0:,.0f} s</text>'
        f'<text x="{width - pad}" y="{height - 4}" text-anchor="end">t = {t1:,.0f} s · bar height: devices held '
        f"(most: {most}) · orange: restart · red ×: failure</text>"
    )
    return (
        f'<svg id="timelines" viewBox="0 0 {width} {height}" width="100%" role="img" '
        f'aria-label="devices, restarts and failures per job">{"".join(parts)}{legend}</svg>'
    )


def _bar(x0: float, x1: float, top: int, n: int, most: int, devs: Sequence[int]) -> str:
    hgt = max(3.0, 16.0 * n / most)
    return (
        f'<rect x="{x0:.1f}" y="{top + 17 - hgt:.1f}" width="{max(x1 - x0, 1.0):.1f}" height="{hgt:.1f}" '
        f'class="held"><title>{n} device(s): {_e(",".join(map(str, devs)))}</title></rect>'
    )


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.2em 2em;color:#222}
h1{font-size:1.3em;margin:0 0 .2em} h2{font-size:1.05em;margin:1.4em 0 .4em}
.meta{color:#555} .err{color:#b00;font-weight:600}
table{border-collapse:collapse;width:100%} th,td{padding:3px 8px;border-bottom:1px solid #e4e4e4;text-align:left;
vertical-align:top} th{background:#f4f4f4} td.n{text-align:right;font-variant-numeric:tabular-nums}
td.why{color:#444;max-width:46em} .state{font-weight:600} td:first-child{white-space:nowrap}
svg text{font-size:11px;fill:#444} .grid{stroke:#ddd;stroke-width:1} .util{fill:none;stroke:#1f77b4;stroke-width:1.5}
.held{fill:#1f77b4;opacity:.8} .restart{stroke:#ff7f0e;stroke-width:2} .failure{stroke:#d62728;stroke-width:2}
.none{color:#777}
"""


def render_page(state: dict[str, Any], history: History, *, refresh_s: int = REFRESH_S) -> str:
    """The status page for the published ``state`` (``StatePublisher.status``) and the run's ``history``."""
    rows: list[dict[str, Any]] = state.get("jobs", [])
    devices = int(state.get("devices") or 0)
    held = sum(len(r.get("devices") or []) for r in rows)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    summary = " · ".join(f"{n} {s}" for s, n in counts.items()) or "no jobs yet"
    head = (
        f"t = {float(state.get('time_s', 0.0)):,.0f} s · {devices} {_e(state.get('device_kind', ''))} device(s), "
        f"{held} held · policy {_e(state.get('policy', ''))} · {int(state.get('rounds') or 0)} round(s) · {summary}"
    )
    err = state.get("policy_error")
    order = {"running": 0, "restoring": 1, "queued": 2, "failed": 3, "done": 4, "cancelled": 5}
    body_rows = []
    for r in sorted(rows, key=lambda r: order.get(r["state"], 9)):
        total = f"/{r['total_steps']}" if r.get("total_steps") else ""
        why = r.get("why") or (r.get("reason") or "")
        colour = _STATE_COLOUR.get(r["state"], "#222")
        body_rows.append(
            f'<tr data-job="{_e(r["name"])}"><td>{_e(r["name"])}</td>'
            f'<td class="state" style="color:{colour}">{_e(r["state"])}</td>'
            f"<td>{_e(','.join(str(d) for d in r.get('devices') or []) or '-')}</td>"
            f'<td class="n">{_e(r.get("step", 0))}{_e(total)}</td><td class="n">{_e(r.get("restarts", 0))}</td>'
            f'<td class="n">{_e(r.get("failures", 0))}</td><td class="n">{_fmt_s(float(r.get("t_queue_s") or 0))}</td>'
            f'<td class="why">{_e(why)}</td></tr>'
        )
    table = (
        '<table id="jobs"><thead><tr><th>job</th><th>state</th><th>devices</th><th>step</th><th>restarts</th>'
        "<th>failures</th><th>waited</th><th>why</th></tr></thead><tbody>" + "".join(body_rows) + "</tbody></table>"
        if body_rows
        else '<p class="none" id="jobs">no jobs submitted yet (oak submit JOBS.yaml)</p>'
    )
    refresh = f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if refresh_s > 0 else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f'<meta name="viewport" content="width=device-width,initial-scale=1">{refresh}'
        f"<title>oak serve · {held}/{devices} devices</title><style>{_CSS}</style></head><body>"
        f'<h1>oak serve</h1><p class="meta" id="summary">{head}</p>'
        + (f'<p class="err">last round not decided: {_e(err)} (jobs keep their devices)</p>' if err else "")
        + f"<h2>Jobs</h2>{table}"
        + f"<h2>Utilisation: devices held</h2>{_utilisation_svg(history, devices, float(state.get('time_s', 0.0)))}"
        + f"<h2>Per job: devices, restarts, failures</h2>{_timelines_svg(state, history)}"
        + "</body></html>"
    )


LOGIN_PAGE = (
    "<!doctype html><html lang=en><head><meta charset=utf-8><title>oak serve · sign in</title>"
    f"<style>{_CSS}</style></head><body><h1>oak serve</h1>"
    "<p>Paste the service's token (the file <code>RUN_DIR/token</code>) to see the status page.</p>"
    '<form method="post" action="/login"><input type="password" name="token" size="50" autofocus> '
    '<button type="submit">Sign in</button></form></body></html>'
)
