"""Hostile input to the jobs-file parser that `oak run` and `oak serve` share (issue [hardening]): each probe
ends in a clear error, quickly, instead of freezing or exhausting the scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest

from oak.errors import OakInputError
from oak.runtime.jobs_file import MAX_ALIAS_NODES, parse_jobs


def _alias_bomb(levels: int, fan: int = 10) -> str:
    """A jobs file whose `command` list is an alias bomb: each level an anchored list of ``fan`` aliases of the
    level below, fan^levels strings in all (under 500 bytes at 6 levels)."""
    lines = ['a0: &a0 ["x"]']
    for k in range(1, levels + 1):
        lines.append(f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * fan)}]")
    return "\n".join(lines) + f"\njobs:\n  - {{name: j, command: *a{levels}}}\n"


def test_an_alias_bomb_is_refused_before_it_expands() -> None:
    """6 levels of 10 aliases: 10^6 strings if expanded (7 levels took ~100 s and 520 MB before the limit)."""
    text = _alias_bomb(6)
    assert len(text) < 500
    with pytest.raises(OakInputError, match=r"bomb.yaml:\d+: not valid YAML \(its aliases expand to more than"):
        parse_jobs(text, "bomb.yaml")


def test_aliases_within_the_limit_still_work() -> None:
    """A defaults block merged into many jobs (the usual use of anchors) is far below the limit."""
    jobs = "\n".join(f"  - {{<<: *base, name: j{i}}}" for i in range(200))
    text = f"defaults: &base {{model: tiny, target_steps: 10, batch_size: 8}}\njobs:\n{jobs}\n"
    assert MAX_ALIAS_NODES > 200 * 7
    parsed = parse_jobs(text, "ok.yaml")
    assert len(parsed.jobs) == 200 and all(j.target_steps == 10 for j in parsed.jobs)


@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_a_request_nested_100000_deep_gets_an_error_reply(opener: str) -> None:
    """The socket's and HTTP's request handler (``protocol._handle``): JSON nested 100,000 deep raised
    RecursionError in the server's thread and the client got no reply; now it is refused with a reply. Brackets
    inside strings do not count."""
    from oak.service.protocol import MAX_REQUEST_DEPTH, _handle

    closer = "]" if opener == "[" else "}"
    deep = opener * 100_000 + "1" + closer * 100_000
    reply = _handle(lambda op, req: {"ok": True}, deep)
    assert reply == {"ok": False, "error": f"request nested deeper than {MAX_REQUEST_DEPTH} levels"}
    text = '{"op": "status", "note": "' + "[{" * 1000 + '"}'
    assert _handle(lambda op, req: {"ok": True, "op": op, **req}, text) == {
        "ok": True,
        "op": "status",
        "note": "[{" * 1000,
    }


def test_a_request_over_the_size_limit_is_refused_before_it_is_sent(tmp_path: Path) -> None:
    """A 10 MB jobs file: the client said "lost the connection … (Broken pipe)" when the service stopped reading
    at 4 MiB; now it names the limit, before connecting (no service needed)."""
    from oak.service.protocol import call

    with pytest.raises(OakInputError, match=r"the submit request is 10\.0 MiB; oak serve accepts requests up to 4 MiB"):
        call(tmp_path, "submit", text="x" * (10 * 2**20))
