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


def _damaged_rows(run_dir: Path) -> None:
    """A readable database whose rows were edited by hand: a job record that is null, a reason that is not
    JSON, a run setting of the wrong type."""
    import sqlite3

    from oak.runtime.store import JobRecord

    db = run_dir / "state.sqlite"
    store = RunStore(db)
    store.save(
        [JobRecord("w")],
        meta={"run": {"policy": "oak", "seed": 0, "round_s": 5.0, "failure_rate": 0.0, "devices": 1}},
        rnd=(1, 5.0, 0.1, "{}"),
        explain=[("w", "waiting", {"text": "no room"})],
    )
    store.close()
    con = sqlite3.connect(db)
    con.execute("UPDATE jobs SET record = 'null'")
    con.execute("UPDATE explain SET detail = '{bad'")
    con.commit()
    con.close()


def test_rows_edited_by_hand_are_unreadable_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """status (a null job record: AttributeError), explain (a reason that is not JSON) and export-trace ended in
    tracebacks; each now names the file and what it could not read (exit 2)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _damaged_rows(run_dir)
    for args, said in (
        (["status", "--run-dir", str(run_dir)], "state.sqlite: unreadable (AttributeError"),
        (["explain", "--run-dir", str(run_dir), "w"], "state.sqlite: unreadable ("),
        (["export-trace", str(run_dir), "--out", str(tmp_path / "t.json")], "the run's state cannot be read ("),
    ):
        monkeypatch.setattr(sys, "argv", ["oak", *args])
        with pytest.raises(SystemExit) as exit_:
            main()
        out = capsys.readouterr()
        text = " ".join((out.out + out.err).split())
        assert exit_.value.code == 2 and "Traceback" not in text, (args, text)
        assert said in text, (args, text)
