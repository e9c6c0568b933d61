"""A run directory whose state.sqlite SQLite cannot read (overwritten, truncated) is an input error for every
command that opens it — exit 2 and one message naming the file — never a traceback, and it is left as found."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from oak.cli.main import main
from oak.runtime.store import RunStore, UnreadableRunState


def _garbage(run_dir: Path) -> bytes:
    run_dir.mkdir()
    data = b"not a database\n"
    (run_dir / "state.sqlite").write_bytes(data)
    return data


def _truncated(run_dir: Path) -> bytes:
    db = run_dir / "state.sqlite"
    store = RunStore(db)
    store.save([], meta={"run": {"jobs": [], "note": "x" * 20_000}})
    store.close()
    data = db.read_bytes()[: db.stat().st_size // 2]
    db.write_bytes(data)
    for side in store.sidecars():
        side.unlink(missing_ok=True)
    return data


@pytest.mark.parametrize("make", [_garbage, _truncated], ids=["overwritten", "truncated"])
def test_every_command_that_opens_the_state_says_it_is_unreadable(
    tmp_path: Path, make: object, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"
    data = make(run_dir)  # type: ignore[operator]
    with pytest.raises(UnreadableRunState, match=r"state\.sqlite: unreadable"):
        RunStore(run_dir / "state.sqlite")
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text('jobs:\n  - {name: w, command: [python3, -c, "pass"], min_gpus: 1, max_gpus: 1}\n')
    commands = [
        ["status", "--run-dir", str(run_dir)],
        ["explain", "--run-dir", str(run_dir), "w"],
        ["logs", "--run-dir", str(run_dir), "w"],
        ["export-trace", str(run_dir), "--out", str(tmp_path / "t.json")],
        ["replay", str(run_dir)],
        ["run", str(jobs), "--cpu-slots", "1", "--run-dir", str(run_dir)],
    ]
    monkeypatch.chdir(tmp_path)
    for args in commands:  # through the entry point, as the console script runs it
        monkeypatch.setattr(sys, "argv", ["oak", *args])
        with pytest.raises(SystemExit) as exit_:
            main()
        out = capsys.readouterr()
        text = " ".join((out.out + out.err).split())
        assert exit_.value.code == 2, (args, text)
        assert "Traceback" not in text, (args, text)
        assert f"{run_dir / 'state.sqlite'}: unreadable (" in text, (args, text)
        assert "move it away to start a new run there" in text, (args, text)
        assert text.count("unreadable") == 1, (args, text)  # said once, not wrapped twice
    assert (run_dir / "state.sqlite").read_bytes() == data  # left as found
    assert not (tmp_path / "t.json").exists()
