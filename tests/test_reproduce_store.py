"""Results store and runner: keyed by the full configuration, resumable, same results on every backend."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from oak.engine.rules import PhysicsOptions
from oak.reproduce.experiments import EXPERIMENTS, SeedPlan
from oak.reproduce.runner import execute
from oak.reproduce.store import ResultsStore, spec_key
from oak.sim.compare import RunSpec, run_one

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
