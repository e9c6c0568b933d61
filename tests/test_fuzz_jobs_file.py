"""Fuzzing the runtime's jobs-file parser and ``oak run``'s input handling (docs/reliability.md, "Invariants").

``parse_jobs`` either returns a JobsFile whose every job is valid, or raises OakInputError whose message starts
with the source name; never any other exception. Malformed files and bad parameters through ``oak run`` exit
with status 2 and a one-line message naming the file and line/field (or the option), never a traceback.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oak.cli.main import main
from oak.errors import OakInputError
from oak.runtime.jobs_file import MODELS, JobsFile, parse_jobs
from oak.runtime.scheduler import RuntimeOptions

SOURCE = "fuzz/jobs.yaml"
KNOWN_APPS = ("cifar10", "bert")
FIELDS = (
    "name", "model", "target_steps", "min_gpus", "max_gpus", "submit_s", "batch_size", "ckpt_every",
    "restart_penalty_s", "application", "width_mult", "data", "min_step_s",
)  # fmt: skip
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def parse_or_oak_error(text: str) -> JobsFile | None:
    """The property: a JobsFile of valid jobs, or an OakInputError naming the source; nothing else escapes."""
    try:
        jobs = parse_jobs(text, SOURCE, KNOWN_APPS)
    except OakInputError as exc:
        assert str(exc).startswith(SOURCE), str(exc)
        return None
    assert isinstance(jobs, JobsFile) and jobs.jobs
    names = [j.name for j in jobs.jobs]
    assert len(set(names)) == len(names)
    for j in jobs.jobs:
        assert isinstance(j.name, str) and NAME.fullmatch(j.name)
        assert j.model in MODELS and j.application in KNOWN_APPS
        for v in (j.target_steps, j.min_gpus, j.max_gpus, j.batch_size, j.ckpt_every):
            assert type(v) is int and 1 <= v <= 2**53
        assert j.min_gpus <= j.max_gpus <= j.batch_size
        for f in (j.submit_s, j.restart_penalty_s, j.width_mult, j.min_step_s):
            assert type(f) is float and math.isfinite(f) and f >= 0
        assert j.submit_s <= 1e9 and j.restart_penalty_s <= 1e6 and j.min_step_s <= 60
        assert j.width_mult > 0 and (j.data is None or isinstance(j.data, str))
    assert list(jobs.jobs) == sorted(jobs.jobs, key=lambda j: (j.submit_s, j.name))
    return jobs


# ---------------------------------------------------------------- arbitrary text

YAML_TOKENS = st.sampled_from(
    [
        "jobs:", "defaults:", "\n", "\n  - ", "  ", "\t", "- ", ": ", "{", "}", "[", "]", ",", "#", "&a ", "*a",
        "!!str ", "!!int ", "!!float ", "!!binary ", "!!set ", "!!python/object:os.system ", "<<: ", "? ", "|",
        ">", "'", '"', "---\n", "...\n", "%YAML 1.1\n", "~", ".nan", ".inf", "-.inf", "1e999", "9" * 40, "0x1F",
        "0o17", "2001-13-45", "\\u0000", "\ufeff", "é", "名", "\U0001f600", "true", "null",
        *(f"{f}: " for f in FIELDS),
    ]
)  # fmt: skip


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_arbitrary_text(text: str) -> None:
    parse_or_oak_error(text)


@given(st.lists(st.one_of(YAML_TOKENS, st.text(max_size=5)), max_size=40).map("".join))
@settings(max_examples=400, deadline=None)
def test_yaml_token_soup(text: str) -> None:
    parse_or_oak_error(text)


# ---------------------------------------------------------------- arbitrary YAML structures

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, -1, 2**53, 2**53 + 1, 2**63, 10**400, -(10**300)]),
    # finite extremes: the largest double, the documented maxima and just past them, the smallest normal and
    # subnormal doubles
    st.sampled_from([1e308, 1.7976931348623157e308, -1e308, 1e9, 1e9 + 1, 1e6, 1e6 + 1, 60.0, 60.5]),
    st.sampled_from([2.2250738585072014e-308, 5e-324, -5e-324, 1e-300]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["tiny", "resnet18", "cifar10", "bert", "imagenet", "a", "a\n", "../x", "[/]", "", "1.5"]),
)
KEYS = st.one_of(
    st.sampled_from([*FIELDS, "jobs", "defaults", "__line__", "__lines__"]),
    st.text(max_size=8),
    st.integers(-5, 5),
    st.none(),
    st.booleans(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=5)),
    max_leaves=8,
)
#: Coin flips that hypothesis draws uniformly (``st.integers(0, 9) == 0`` would favour the boundary 0).
ONE_IN_4 = st.sampled_from([False, False, False, True])
ONE_IN_10 = st.sampled_from([False] * 9 + [True])
GOOD_VALUES: dict[str, Any] = {
    "model": st.sampled_from(MODELS),
    "target_steps": st.integers(1, 10**6),
    "min_gpus": st.integers(1, 2),
    "max_gpus": st.integers(2, 4),
    "submit_s": st.one_of(st.integers(0, 10**6), st.floats(0, 1e6), st.sampled_from([1e308, 1e9, 5e-324])),
    "batch_size": st.integers(4, 512),
    "ckpt_every": st.integers(1, 100),
    "restart_penalty_s": st.one_of(st.floats(0, 1e4), st.sampled_from([1e6, 1e6 + 1, 1e308, 5e-324])),
    "min_step_s": st.one_of(st.floats(0, 0.1), st.sampled_from([60.0, 61.0, 5e-324])),
    "application": st.sampled_from(KNOWN_APPS),
    "width_mult": st.floats(0.1, 4.0),
    "data": st.text(max_size=10),
}


@st.composite
def job_entry(draw: st.DrawFn, names: list[str]) -> Any:
    """A job mapping: the required fields and some optional ones with valid values, then up to two mutations (a
    field set to an arbitrary value: wrong type, NaN, huge int, ...; a field removed; an unknown key); names come
    from a small pool so that duplicates occur. Sometimes not a job mapping at all."""
    if draw(ONE_IN_10):
        return draw(VALUES)
    entry: dict[Any, Any] = {
        "name": draw(st.sampled_from(names)),
        "model": draw(GOOD_VALUES["model"]),
        "target_steps": draw(st.integers(1, 10**6)),
    }
    for f in draw(st.lists(st.sampled_from(list(GOOD_VALUES)), max_size=5, unique=True)):
        entry[f] = draw(GOOD_VALUES[f])
    for f in draw(st.lists(st.sampled_from([*FIELDS, "<drop>", "<extra>"]), max_size=2)):
        if f == "<drop>":
            entry.pop(draw(st.sampled_from(FIELDS)), None)
        elif f == "<extra>":
            entry[draw(KEYS)] = draw(VALUES)
        else:
            entry[f] = draw(VALUES)
    return entry


@st.composite
def documents(draw: st.DrawFn) -> Any:
    if draw(ONE_IN_10):
        return draw(VALUES)
    names = draw(
        st.lists(st.sampled_from(["a", "b", "job-1", "x.y_z", "A9"] * 3 + ["café", "a\n", "", "-x"]), min_size=1)
    )
    doc: dict[Any, Any] = {"jobs": draw(st.lists(job_entry(names), min_size=int(not draw(ONE_IN_10)), max_size=3))}
    if draw(ONE_IN_4):
        optional = {f: GOOD_VALUES[f] for f in ("ckpt_every", "min_gpus", "restart_penalty_s")}
        doc["defaults"] = draw(VALUES) if draw(ONE_IN_4) else draw(st.fixed_dictionaries({}, optional=optional))
    if draw(ONE_IN_10):
        doc[draw(KEYS)] = draw(VALUES)
    return doc


@given(documents(), st.sampled_from([None, True, False]), st.booleans())
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_yaml_structures(doc: Any, flow: bool | None, unicode: bool) -> None:
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=flow, allow_unicode=unicode)
    parse_or_oak_error(text)


def test_valid_documents_parse() -> None:
    """The structures above without mutations are accepted (so the fuzzer reaches the success path)."""
    text = yaml.safe_dump(
        {
            "defaults": {"ckpt_every": 10},
            "jobs": [
                {"name": "b", "model": "tiny", "target_steps": 2**53, "submit_s": 5},
                {"name": "a", "model": "resnet18", "target_steps": 1, "max_gpus": 2, "width_mult": 0.25},
            ],
        }
    )
    jobs = parse_or_oak_error(text)
    assert jobs is not None and [j.name for j in jobs.jobs] == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("jobs: [{name: a, model: tiny, target_steps: 1}]\n1: x\nb: y\n", f"{SOURCE}:2: unknown top-level key 1"),
        ("jobs: [{name: a, model: tiny, target_steps: 1}]\n~: x\nb: y\n", "unknown top-level key None"),
        ("jobs: [{name: a, model: tiny, target_steps: 1, submit_s: %s}]\n" % ("9" * 400), "jobs[0].submit_s=999"),
        ("jobs: [{name: a, model: tiny, target_steps: %s}]\n" % ("9" * 5000), "not valid YAML"),
        ("jobs: [{name: a, model: tiny, target_steps: %s}]\n" % (2**53 + 1), "expected an integer <= "),
        ("jobs: " + "[" * 600 + "]" * 600, "nested too deeply"),
        ('jobs: [{name: "a\\n", model: tiny, target_steps: 1}]\n', "jobs[0].name='a\\n'"),
        # YAML 1.2 has no dates: a string, which the field refuses (PyYAML's 1.1 date constructor raised)
        ("jobs: [{name: a, model: tiny, target_steps: 1, submit_s: 2001-13-45}]\n", "submit_s='2001-13-45': expected"),
        ("jobs: [!!int ]\n", "not valid YAML"),
    ],
    ids=[
        "mixed-keys",
        "null-key",
        "int-beyond-float",
        "int-beyond-str",
        "int-beyond-2^53",
        "deep",
        "newline-name",
        "bad-date",
        "empty-int-tag",
    ],
)
def test_found_by_fuzzing(text: str, expected: str) -> None:
    """Inputs that once escaped as TypeError/OverflowError/RecursionError/ValueError, or were accepted."""
    with pytest.raises(OakInputError) as exc:
        parse_jobs(text, SOURCE, KNOWN_APPS)
    assert str(exc.value).startswith(SOURCE) and expected in str(exc.value)


# ---------------------------------------------------------------- through the CLI

GOOD = "jobs:\n  - name: a\n    model: tiny\n    target_steps: 10\n"
MALFORMED: list[tuple[str, str | bytes, tuple[str, ...]]] = [
    ("tab.yaml", "jobs:\n\t- name: a\n", ("tab.yaml:2:", "not valid YAML")),
    ("unknown.yaml", GOOD + "    epochs: 3\n", ("unknown.yaml:5:", "jobs[0].epochs", "unknown field")),
    ("type.yaml", GOOD.replace("10", "ten"), ("type.yaml:4:", "jobs[0].target_steps='ten'")),
    ("dup.yaml", GOOD + GOOD[6:], ("dup.yaml:5:", "jobs[1].name='a'", "duplicates the job on line 2")),
    ("huge.yaml", GOOD + "    submit_s: " + "9" * 400 + "\n", ("huge.yaml:5:", "jobs[0].submit_s=")),
    ("longint.yaml", GOOD.replace("10", "9" * 5000), ("longint.yaml:", "not valid YAML")),
    ("nan.yaml", GOOD + "    restart_penalty_s: .nan\n", ("nan.yaml:5:", "jobs[0].restart_penalty_s=nan")),
    ("bounds.yaml", GOOD + "    min_gpus: 4\n    max_gpus: 2\n", ("bounds.yaml:6:", "jobs[0].max_gpus=2")),
    ("toplevel.yaml", GOOD + "1: x\nb: y\n", ("toplevel.yaml:5:", "unknown top-level key 1")),
    ("deep.yaml", "jobs: " + "[" * 600, ("deep.yaml:", "not valid YAML")),
    ("app.yaml", GOOD + "    application: imagenet2\n", ("app.yaml:5:", "jobs[0].application='imagenet2'")),
    ("empty.yaml", "", ("empty.yaml:", "expected a mapping with a 'jobs' list")),
    ("latin1.yaml", b"jobs:\n  - name: caf\xe9\n", ("latin1.yaml:", "not UTF-8")),
    ("missing.yaml", b"", ("missing.yaml:", "cannot read the jobs file")),  # not written
]


def oak_run_inprocess(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[Any, str]:
    """``oak run ARGS`` through the real entry point ``main()``; (exit status, stdout + stderr, whitespace-joined)."""
    monkeypatch.setattr(sys, "argv", ["oak", "run", *args])
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # typer installs its own
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return exc.value.code, " ".join((out.out + out.err).split())


@pytest.mark.parametrize(("name", "content", "expected"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_jobs_file_exits_2(
    name: str,
    content: str | bytes,
    expected: tuple[str, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    if name != "missing.yaml":
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    code, out = oak_run_inprocess(monkeypatch, capsys, name, "--cpu-slots", "1", "--run-dir", "run")
    assert code == 2, out
    assert out.startswith(f"error: {name}:"), out
    for part in expected:
        assert part in out, (part, out)
    assert "Traceback" not in out and not (tmp_path / "run").exists()


BAD_PARAMETERS: list[tuple[tuple[str, ...], str]] = [
    (("--cpu-slots", "0"), "--cpu-slots 0: expected an integer from 1 to 4,096"),
    (("--cpu-slots", "100000000"), "--cpu-slots 100000000: expected an integer from 1 to 4,096"),
    (("--cpu-slots", "1", "--gpus", "1"), "give exactly one of --gpus"),
    (("--failure-rate", "1.5"), "--failure-rate 1.5: expected a probability in [0, 1]"),
    (("--failure-rate", "nan"), "--failure-rate nan"),
    (("--round-seconds", "0"), "--round-seconds 0.0: expected a positive number of seconds"),
    (("--round-seconds", "inf"), "--round-seconds inf"),
    (("--stop-seconds", "0"), "--stop-seconds 0.0: expected a positive number of seconds"),
    (("--address", "1.2.3.4:6379"), "--address 1.2.3.4:6379: the address of a Ray cluster; it applies to --backend"),
    (("--time-limit", "-1"), "--time-limit -1.0"),
    (("--seed", "-1"), "--seed -1: expected an integer from 0 to 2^64 - 1"),
    (("--seed", str(1 << 64)), "--seed 18446744073709551616: expected an integer from 0 to 2^64 - 1"),
    (("--policy", "nope"), "policy 'nope' is unknown"),
    (("--policy", "pollux", "--backend", "x"), "--backend 'x'"),
    (("--cpu-slots", "x"), "Invalid value for '--cpu-slots'"),  # typer's own usage error: also status 2
]


@pytest.mark.parametrize(("args", "expected"), BAD_PARAMETERS, ids=[" ".join(a) for a, _ in BAD_PARAMETERS])
def test_bad_run_parameters_exit_2(
    args: tuple[str, ...],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.yaml").write_text(GOOD)
    slots = () if "--cpu-slots" in args else ("--cpu-slots", "1")
    code, out = oak_run_inprocess(monkeypatch, capsys, "good.yaml", *slots, *args, "--run-dir", "run")
    assert code == 2, out
    assert expected in out and "Traceback" not in out, out
    assert not (tmp_path / "run").exists(), "nothing is started for a bad parameter"


def test_run_gives_its_stop_grace_period_to_the_scheduler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``oak run --stop-seconds`` (docs/runtime.md: a stopping job is SIGKILLed that long after the request)
    did not exist: only ``oak serve`` had it."""
    from oak.runtime import scheduler

    seen: list[Any] = []

    def capture(self: Any, jobs: Any, policy: Any, directory: Any, opts: Any, **kw: Any) -> None:
        seen.append(opts)
        raise SystemExit(7)

    monkeypatch.setattr(scheduler.RuntimeScheduler, "__init__", capture)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.yaml").write_text(GOOD)
    for args, want in (((), 60.0), (("--stop-seconds", "2.5"), 2.5)):
        code, out = oak_run_inprocess(monkeypatch, capsys, "good.yaml", "--cpu-slots", "1", *args)
        assert code == 7, out
        assert seen.pop().stop_timeout_s == want


def test_cli_subprocess_exit_status_and_no_traceback(tmp_path: Path) -> None:
    """The installed entry point as a user runs it: status 2, one error line, no traceback on either stream."""
    (tmp_path / "bad.yaml").write_text(GOOD + "    epochs: 3\n")
    (tmp_path / "good.yaml").write_text(GOOD)
    for args, expected in (
        (("bad.yaml", "--cpu-slots", "1"), "bad.yaml:5: jobs[0].epochs: unknown field"),
        (("good.yaml", "--cpu-slots", "1", "--failure-rate", "1.5"), "--failure-rate 1.5"),
    ):
        res = subprocess.run(
            [sys.executable, "-c", "from oak.cli.main import main; main()", "run", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=tmp_path,
        )
        assert res.returncode == 2, res.stderr
        assert expected in " ".join(res.stderr.split())
        assert "Traceback" not in res.stdout + res.stderr


def test_error_message_with_markup_characters_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text(GOOD.replace("name: a", 'name: "[/]"'))
    code, out = oak_run_inprocess(monkeypatch, capsys, "m.yaml", "--cpu-slots", "1", "--run-dir", "run")
    assert code == 2 and "jobs[0].name='[/]'" in out


@pytest.mark.parametrize(
    "bad",
    [
        {"devices": 0},
        {"devices": True},
        {"failure_rate": 1.5},
        {"failure_rate": math.nan},
        {"round_s": 0.0},
        {"round_s": math.inf},
        {"time_limit_s": math.nan},
        {"seed": -1},
        {"device_kind": "tpu"},
    ],
)
def test_runtime_options_reject_bad_values(bad: dict[str, Any]) -> None:
    with pytest.raises(OakInputError):
        RuntimeOptions(**{"devices": 1, **bad})


def test_data_folder_is_checked_when_the_file_is_loaded(tmp_path: Path) -> None:
    """A ``data:`` folder that does not exist, or holds no CIFAR-10 batches, is an input error naming the file,
    line and field at load — not a worker that exits 2 and is relaunched round after round."""
    missing = tmp_path / "nowhere"
    text = f"jobs:\n  - name: a\n    model: tiny\n    target_steps: 5\n    data: {missing}\n"
    with pytest.raises(OakInputError, match=r"jobs\.yaml:5: jobs\[0\]\.data=.*no such directory"):
        parse_jobs(text, "jobs.yaml")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(OakInputError, match="no data_batch_"):
        parse_jobs(text.replace(str(missing), str(empty)), "jobs.yaml")
    (empty / "data_batch_1").write_bytes(b"")
    assert parse_jobs(text.replace(str(missing), str(empty)), "jobs.yaml").jobs[0].data == str(empty)


def test_a_second_oak_run_on_a_run_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two `oak run` on one run directory both ran every job (steps computed twice, opposite verdicts); the
    second now exits 2 before anything starts, as a second `oak serve` does."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "run").mkdir()
    held = os.open(tmp_path / "run" / "serve.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another process's scheduler (a lock of another open file)
    try:
        code, out = oak_run_inprocess(monkeypatch, capsys, "good.yaml", "--cpu-slots", "1", "--run-dir", "run")
    finally:
        os.close(held)
    assert code == 2, out
    assert "another oak run or oak serve is running on this run directory" in out and "Traceback" not in out
    assert not (tmp_path / "run" / "state.sqlite").exists(), "nothing was started"
    # the command's own lock ends with the command (an in-process run, then another, or an oak serve)
    monkeypatch.setattr(
        sys, "argv", ["oak", "run", "good.yaml", "--cpu-slots", "1", "--run-dir", "run", "--time-limit", "1"]
    )
    with contextlib.suppress(SystemExit):
        main()
    again = os.open(tmp_path / "run" / "serve.lock", os.O_RDWR)
    try:
        fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(again)


def test_a_file_system_without_locks_warns_and_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where flock is not supported (NFS without a lock daemon: ENOLCK; Lustre without flock: ENOSYS) every run
    was refused as if another scheduler held the directory."""
    import errno

    from oak.service import protocol

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(protocol.fcntl, "flock", no_locks)
    assert protocol.lock_run_dir(tmp_path) is None
    assert "cannot lock files (No locks available)" in " ".join(capsys.readouterr().err.split())


def test_json_into_the_default_run_directorys_state_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.yaml").write_text(GOOD)
    code, out = oak_run_inprocess(
        monkeypatch, capsys, "good.yaml", "--cpu-slots", "1", "--json", "runs/good-oak-l0-s0/state.sqlite"
    )
    assert code == 2 and "inside what the run directory runs/good-oak-l0-s0 (the default --run-dir)" in out, out


def test_json_into_a_new_run_directorys_state_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--json RUN/state.sqlite` was refused only when RUN existed: on a new run the JSON replaced the state."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.yaml").write_text(GOOD)
    for name in ("state.sqlite", "run.json", "serve.lock"):
        code, out = oak_run_inprocess(
            monkeypatch, capsys, "good.yaml", "--cpu-slots", "1", "--run-dir", "new", "--json", f"new/{name}"
        )
        assert code == 2 and "inside what the run directory new" in out, out
        assert not (tmp_path / "new").exists()


def test_a_job_larger_than_the_run_is_said_in_the_files_terms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """min_gpus: 2 on one CPU slot was "GPU bounds [2, 2] admit no feasible configuration of cluster '1-cpu'"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "big.yaml").write_text("jobs:\n  - {name: a, model: tiny, target_steps: 5, min_gpus: 2, max_gpus: 4}\n")
    code, out = oak_run_inprocess(monkeypatch, capsys, "big.yaml", "--cpu-slots", "1", "--run-dir", "run")
    assert code == 2, out
    assert "big.yaml: job 'a': min_gpus=2 exceeds the 1 CPU slot(s) this run has" in out, out
