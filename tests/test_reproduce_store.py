"""Results store and runner: keyed by the full configuration, resumable, same results on every backend."""

from __future__ import annotations

import dataclasses
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from oak.engine.rules import PhysicsOptions
from oak.errors import OakInputError
from oak.reproduce.experiments import EXPERIMENTS, SeedPlan
from oak.reproduce.runner import execute
from oak.reproduce.store import JOB_FILE, RUN_FILE, ResultsStore, spec_key
from oak.sim.compare import RunSpec, run_one
from support.cli import oak

SPECS = [
    RunSpec("oak", "small", 0.1, 0),
    RunSpec("sia", "small", 0.1, 0),
    RunSpec("goodput", "small", 0.0, 0),
]


def test_key_covers_every_field() -> None:
    base = SPECS[0]
    variants = [
        dataclasses.replace(base, policy="sia"),
        dataclasses.replace(base, workload="medium"),
        dataclasses.replace(base, failure_rate=0.05),
        dataclasses.replace(base, seed=1),
        dataclasses.replace(base, physics=PhysicsOptions(restore_cost="60")),
        dataclasses.replace(base, policy_params=(("p", 0.25),)),
    ]
    keys = {spec_key(s) for s in [base, *variants]}
    assert len(keys) == len(variants) + 1
    assert spec_key(base) == spec_key(RunSpec("oak", "small", 0.1, 0))


def test_resume_skips_stored_runs(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    assert execute(SPECS[:2], store, workers=1) == 2
    # A new store object on the same folder (as after a crash or a restart) sees what was flushed.
    again = ResultsStore(tmp_path)
    assert again.missing(SPECS) == [SPECS[2]]
    assert execute(SPECS, again, workers=1) == 1
    runs = ResultsStore(tmp_path).runs(SPECS)
    assert len(runs) == 3
    jobs = ResultsStore(tmp_path).jobs(runs["key"])
    assert len(jobs) == 3 * 4
    direct = run_one(SPECS[0]).summary()["mean_jct_s"]
    assert runs.set_index("key").loc[spec_key(SPECS[0]), "mean_jct_s"] == direct


def test_a_flush_cut_between_its_two_tables_stores_no_run_without_its_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two tables are written one after the other; a crash between them must not leave a run counted as
    stored whose jobs were never written (its per-job rows missing for good), nor duplicate job rows after it is
    run again."""
    import oak.reproduce.store as store_module

    store = ResultsStore(tmp_path)
    assert execute(SPECS[:1], store, workers=1) == 1
    real = store_module._write_parquet
    calls: list[Path] = []

    def crash_on_second(df: object, path: Path) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise OSError("simulated crash between the two tables")
        real(df, path)  # type: ignore[arg-type]

    monkeypatch.setattr(store_module, "_write_parquet", crash_on_second)
    with pytest.raises(OSError, match="simulated crash"):
        execute(SPECS[1:2], store, workers=1)
    monkeypatch.setattr(store_module, "_write_parquet", real)
    again = ResultsStore(tmp_path)
    stored = again.runs()
    assert set(again.jobs(stored["key"])["key"]) == set(stored["key"])  # every stored run has its jobs
    assert again.missing(SPECS[:2]) == [SPECS[1]]  # the cut run is done again
    assert execute(SPECS[:2], again, workers=1) == 1
    final = ResultsStore(tmp_path)
    runs = final.runs(SPECS[:2])
    assert len(runs) == 2
    jobs = final.jobs(runs["key"])
    assert len(jobs) == 2 * 4 and not jobs.duplicated(["key", "name"]).any()


def test_a_flush_cut_short_is_redone_by_the_next_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flush cut between its two tables (an error, or Ctrl-C or SIGTERM, after which the sweep flushes again)
    is written whole by the next flush of the same store, each run once."""
    import oak.reproduce.store as store_module

    store = ResultsStore(tmp_path)
    real = store_module._write_parquet
    calls: list[Path] = []

    def cut_once(df: object, path: Path) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(df, path)  # type: ignore[arg-type]

    monkeypatch.setattr(store_module, "_write_parquet", cut_once)
    store.add(SPECS[0], run_one(SPECS[0]))
    with pytest.raises(KeyboardInterrupt):
        store.flush()
    store.flush()
    runs = ResultsStore(tmp_path).runs()
    assert list(runs["key"]) == [spec_key(SPECS[0])]


@pytest.fixture(scope="module")
def one_run_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding one run (copy it before changing it)."""
    root = tmp_path_factory.mktemp("one-run")
    assert execute(SPECS[:1], ResultsStore(root), workers=1) == 1
    return root


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:1000])


def _garbage(path: Path) -> None:
    path.write_bytes(b"not parquet at all\n" * 100)


def _foreign(path: Path) -> None:
    pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}).to_parquet(path)


@pytest.mark.parametrize(
    ("name", "damage", "what"),
    [
        (RUN_FILE, _truncate, "unreadable (Parquet magic bytes not found in footer)"),
        (JOB_FILE, _garbage, "unreadable (Parquet magic bytes not found in footer)"),
        (RUN_FILE, _foreign, "not an OAK results table (columns missing: key, code_version, policy, workload, "),
        (JOB_FILE, _foreign, "not an OAK results table (columns missing: key, name, jct_s, submit_s)"),
    ],
    ids=["truncated-runs", "garbage-jobs", "foreign-runs", "foreign-jobs"],
)
def test_a_damaged_or_foreign_table_is_an_input_error_naming_the_file(
    one_run_store: Path, tmp_path: Path, name: str, damage: object, what: str
) -> None:
    """A table the store cannot read, or a Parquet table that is not the store's (another table copied in), is an
    input error naming the file, what is wrong and what to do: never a traceback, never merged."""
    root = tmp_path / "store"
    shutil.copytree(one_run_store, root)
    damage(root / name)  # type: ignore[operator]
    with pytest.raises(OakInputError) as info:
        ResultsStore(root)
    message = str(info.value)
    assert message.startswith(f"results store {root / name}: {what}"), message
    assert message.endswith("move it away to start the store again (every stored run is then done again)")


def test_reproduce_on_a_damaged_store_exits_2_with_one_message(one_run_store: Path, tmp_path: Path) -> None:
    root = tmp_path / "store"
    shutil.copytree(one_run_store, root)
    _truncate(root / RUN_FILE)
    res = oak("reproduce", "table3-ablation", "--quick", "--workers", "1", "--out", str(root))
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "ArrowInvalid" not in res.stderr
    text = " ".join(res.stderr.split())
    assert text.startswith(f"error: results store {root / RUN_FILE}: unreadable"), text
    assert "move it away to start the store again" in text


def test_runs_without_their_job_rows_are_not_stored(one_run_store: Path, tmp_path: Path) -> None:
    """The other direction of the orphan job rows: a runs table whose runs have no job rows (the jobs table lost or
    moved away) does not count them as stored; they are run again, once."""
    root = tmp_path / "store"
    shutil.copytree(one_run_store, root)
    (root / JOB_FILE).unlink()
    store = ResultsStore(root)
    assert store.runs().empty
    assert store.missing(SPECS[:2]) == SPECS[:2]
    before = signal.getsignal(signal.SIGTERM)
    assert execute(SPECS[:2], store, workers=1) == 2
    assert signal.getsignal(signal.SIGTERM) is before  # the sweep's SIGTERM handler is gone with it
    final = ResultsStore(root)
    runs = final.runs()
    assert sorted(runs["key"]) == sorted(spec_key(s) for s in SPECS[:2])  # once each
    assert set(final.jobs(runs["key"])["key"]) == set(runs["key"])


#: ``oak reproduce`` whose first completed run signals it (MARKER written) and then waits there for the signal,
#: mid-sweep: the signal comes while the run is done but not yet written (results are flushed every 15 s).
_SIGNALLED_REPRODUCE = """
import signal, sys, time
from pathlib import Path
import oak.reproduce.runner as runner

# Ctrl-C as a terminal delivers it: a test run started in the background of a non-interactive shell inherits SIGINT
# ignored, and Python then leaves it ignored (as it should for a background job)
signal.signal(signal.SIGINT, signal.default_int_handler)

marker, real = Path(sys.argv[1]), runner.execute

def execute(*args, progress, **kwargs):
    def tick(spec, result):
        progress(spec, result)
        marker.write_text("done")
        end = time.monotonic() + 60.0
        while time.monotonic() < end:  # the test's signal ends this wait
            time.sleep(0.01)
        sys.exit("no signal came in 60 s")

    return real(*args, progress=tick, **kwargs)

runner.execute = execute
sys.argv = ["oak", *sys.argv[2:]]
from oak.cli.main import main

main()
"""


@pytest.mark.parametrize(
    ("signum", "workers"),
    [(signal.SIGTERM, 1), (signal.SIGTERM, 2), (signal.SIGINT, 1)],
    ids=["sigterm", "sigterm-pool", "sigint"],
)
def test_a_signalled_sweep_stores_its_complete_runs(tmp_path: Path, signum: signal.Signals, workers: int) -> None:
    """SIGTERM (timeout, SLURM, docker stop) is handled as Ctrl-C is: the complete runs are stored, a short message
    says how to resume, and the status is 128 + the signal's number (143, 130)."""
    out, marker = tmp_path / "out", tmp_path / "first-run-done"
    cmd = [sys.executable, "-c", _SIGNALLED_REPRODUCE, str(marker), "reproduce", "table3-ablation", "--quick"]
    proc = subprocess.Popen(
        [*cmd, "--workers", str(workers), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120.0
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no run done in 120 s"
            time.sleep(0.02)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signum, err[-3000:]
    assert "Traceback" not in err
    text = " ".join(err.split())
    assert f"interrupted: 1 of 12 runs done, stored in {out}; run the same command again to resume" in text, text
    store = ResultsStore(out)
    runs = store.runs()
    assert len(runs) == 1
    assert set(store.jobs(runs["key"])["key"]) == set(runs["key"])


def test_local_pool_matches_serial(tmp_path: Path) -> None:
    """Exact equality across processes is sound: the simulator's floating point is NumPy element-wise work and
    sums (the same kernels in every process of one machine) and BLAS products of length <= 4 (too short to be
    split over threads); no result depends on the thread count."""
    a, b = ResultsStore(tmp_path / "a"), ResultsStore(tmp_path / "b")
    execute(SPECS, a, workers=1)
    execute(SPECS, b, workers=2)
    ra = a.runs().sort_values("key")[["key", "mean_jct_s", "max_jct_s", "restarts_per_job"]].reset_index(drop=True)
    rb = b.runs().sort_values("key")[["key", "mean_jct_s", "max_jct_s", "restarts_per_job"]].reset_index(drop=True)
    assert ra.equals(rb)


def test_quick_plan_covers_every_experiment() -> None:
    plan = SeedPlan(quick=True)
    for name, exp in EXPERIMENTS.items():
        cells = exp.cells(plan)
        assert cells, name
        for cell in cells:
            assert cell.specs, (name, cell.labels)
    # Deterministic cells at λ = 0 collapse to one seed; stochastic policies keep theirs.
    paper = {c.label("policy"): len(c.specs) for c in EXPERIMENTS["fig3-baselines"].cells(SeedPlan(paper=True))}
    assert paper["oak-paper"] == 1 and paper["pollux"] == 5


@pytest.mark.long
@pytest.mark.xdist_group("ray")
def test_ray_backend_matches_local(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    import ray

    ray.init(num_cpus=2, object_store_memory=80 * 1024 * 1024, include_dashboard=False, log_to_driver=False)
    try:
        store = ResultsStore(tmp_path / "ray")
        assert execute(SPECS[:2], store, backend="ray") == 2
        assert execute(SPECS[:2], store, backend="ray") == 0  # resumed: nothing left to do
    finally:
        ray.shutdown()
    local = ResultsStore(tmp_path / "local")
    execute(SPECS[:2], local, workers=1)
    cols = ["key", "mean_jct_s", "max_jct_s"]
    ra = store.runs().sort_values("key")[cols].reset_index(drop=True)
    rl = local.runs().sort_values("key")[cols].reset_index(drop=True)
    assert ra.equals(rl)


def test_a_second_writer_of_one_store_is_refused_while_the_first_holds_it(tmp_path: Path) -> None:
    """Two ``oak reproduce`` on one --out each rewrote whole tables from what they had read: the later flush
    dropped the other's runs. A writer now holds the store's lock; a second is an input error naming the
    first's pid, and the lock is free again once the first closes (or ends)."""
    import os

    from oak.errors import OakInputError
    from oak.reproduce.store import ResultsStore

    first = ResultsStore(tmp_path, exclusive=True)
    with pytest.raises(OakInputError, match=rf"another oak reproduce \(pid {os.getpid()}\) is writing"):
        ResultsStore(tmp_path, exclusive=True)
    ResultsStore(tmp_path)  # a reader needs no lock
    cmd = [sys.executable, "-c", "from oak.cli.main import main; main()", "reproduce", "table2", "--quick"]
    res = subprocess.run([*cmd, "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "another oak reproduce" in " ".join(res.stderr.split()), res.stderr
    first.close()
    ResultsStore(tmp_path, exclusive=True).close()
