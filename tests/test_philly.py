"""Philly-derived workloads: seeded, faithful to the trace's GPU counts and arrival rate, loadable, runnable."""

from __future__ import annotations

import json
import re
from collections import Counter
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from oak.catalog import Catalog
from oak.errors import OakInputError
from oak.model.cluster import cluster_preset
from oak.policies import make_policy
from oak.sim.simulator import Simulator
from oak.workloads import load_workload
from oak.workloads.philly import (
    BAND_APPS,
    BASE_INTERARRIVAL_S,
    TraceModel,
    application_caps,
    derive,
    dump_derived,
    read_trace,
    synth_workload_text,
    synthesize,
)
from support.cli import oak

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "sia" / "philly-jobs.csv"
MODEL = TraceModel.packaged()
APPS = Catalog.load().apps.keys()


@pytest.mark.portable
def test_same_seed_same_bytes_other_seed_differs() -> None:
    a, _ = synth_workload_text(300, "sia-64", 1.0, 7)
    b, _ = synth_workload_text(300, "sia-64", 1.0, 7)
    c, _ = synth_workload_text(300, "sia-64", 1.0, 8)
    assert a == b
    assert a != c
    assert a.splitlines()[2:] != c.splitlines()[2:]


def test_gpu_count_distribution_matches_the_trace() -> None:
    """N = 5,000 on sia-64x32, where every application's cap is 64: only 128-GPU requests are clipped."""
    n = 5000
    jobs = synthesize(MODEL, n, cluster_preset("sia-64x32"), 32.0, seed=11)
    assert {j.max_gpus for j in jobs} == {64}
    expected: dict[int, float] = {}
    for gpus, freq in MODEL.gpu_frequencies.items():
        expected[min(gpus, 64)] = expected.get(min(gpus, 64), 0.0) + freq
    got = Counter(j.gpus for j in jobs)
    assert set(got) <= set(expected)
    diffs = {g: abs(got[g] / n - f) for g, f in expected.items()}
    assert max(diffs.values()) <= 0.01, diffs
    # Chi-square on the categories with >= 5 expected jobs plus one pooled rest category.
    big = [g for g, f in expected.items() if f * n >= 5]
    obs = [got[g] for g in big] + [n - sum(got[g] for g in big)]
    exp = [expected[g] * n for g in big] + [n * (1 - sum(expected[g] for g in big))]
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    # The requested counts themselves follow the trace too (before clipping).
    assert max(abs(sum(j.requested_gpus == g for j in jobs) / n - f) for g, f in MODEL.gpu_frequencies.items()) <= 0.01


def test_application_mix_follows_the_gpu_time_bands() -> None:
    n = 5000
    jobs = synthesize(MODEL, n, cluster_preset("sia-64"), 1.0, seed=3)
    band = MODEL.joint.sum(axis=0) / MODEL.joint.sum()
    got = Counter(j.application for j in jobs)
    expect = {
        "cifar10": band[0],
        "deepspeech2": band[1] / 2,
        "bert": band[1] / 2,
        "yolov3": band[2],
        "imagenet": band[3],
    }
    assert set(got) == set(expect) == {a for apps in BAND_APPS for a in apps}
    for app, f in expect.items():
        assert abs(got[app] / n - f) <= 0.015, (app, got[app] / n, f)


def test_arrival_rate_scales_with_k() -> None:
    n = 5000
    one = synthesize(MODEL, n, cluster_preset("sia-64"), 1.0, seed=5)
    four = synthesize(MODEL, n, cluster_preset("sia-64x4"), 4.0, seed=5)
    t1 = np.array([j.submit_time_s for j in one])
    t4 = np.array([j.submit_time_s for j in four])
    assert t1[0] == t4[0] == 0.0
    np.testing.assert_allclose(t4 * 4.0, t1, rtol=1e-12)
    assert [j.application for j in one] == [j.application for j in four]
    # The mean gap is Sia's 180 s / K (heavy-tailed gaps: coefficient of variation ~2.3, so ±10 % is ~3 σ).
    assert abs(np.diff(t1).mean() / BASE_INTERARRIVAL_S - 1.0) < 0.10
    assert abs(np.diff(t4).mean() / (BASE_INTERARRIVAL_S / 4) - 1.0) < 0.10


def test_gpu_bounds_are_clipped_to_cluster_and_app() -> None:
    caps = application_caps(cluster_preset("sia-64"), ["cifar10", "bert", "imagenet"])
    assert caps == {"cifar10": 24, "bert": 24, "imagenet": 24}
    assert application_caps(cluster_preset("paper-12"), ["cifar10"]) == {"cifar10": 12}
    jobs = synthesize(MODEL, 3000, cluster_preset("sia-64"), 1.0, seed=2)
    for j in jobs:
        assert j.min_gpus == 1 and j.max_gpus == 24 and j.gpus == min(j.requested_gpus, 24)
    assert any(j.requested_gpus > 24 for j in jobs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"jobs": 0}, "--jobs"),
        ({"jobs": -3}, "--jobs"),
        ({"jobs": 1_000_000_000}, "expected an integer from 1 to 1,000,000"),  # refused before any memory is used
        ({"scale": 0.0}, "--scale"),
        ({"scale": -2.0}, "--scale"),
        ({"scale": float("nan")}, "--scale"),
        ({"seed": -1}, "--seed"),
        ({"cluster_name": "sia-65"}, "unknown"),
        ({"cluster_name": "sia-64x0"}, "positive integer"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"jobs": 10, "cluster_name": "sia-64", "scale": 1.0, "seed": 0}
    args.update(kwargs)
    with pytest.raises(OakInputError, match=message):
        synth_workload_text(**args)  # type: ignore[arg-type]


TRACE_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("2017-10-09 07:01:55,66.0,1,66.0,a\n2017-10-09 07:02:55,66.0,x,66.0,a\n", ":3: field 'num_gpus'"),
        ("2017-10-09 07:01:55,66.0,1,66.0,a\nyesterday,66.0,1,66.0,a\n", ":3: field 'timestamp'"),
        ("2017-10-09 07:01:55,-5,1,66.0,a\n", ":2: field 'duration'"),
        ("2017-10-09 07:01:55,66.0,1\n", ":2: 3 fields"),
        ("2017-10-09 07:01:55,6.0,1,6.0,a\n2017-10-09 07:02:55,6.0,1,6.0,a\n", "pass the filter"),
    ],
)
def test_unreadable_trace_names_file_and_line(tmp_path: Path, body: str, where: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(TRACE_HEADER + body, encoding="utf-8")
    with pytest.raises(OakInputError, match=re.escape(f"{path}{where}" if where.startswith(":") else where)):
        read_trace(path)


def test_missing_or_headerless_trace(tmp_path: Path) -> None:
    with pytest.raises(OakInputError, match="cannot read"):
        synth_workload_text(5, "sia-64", 1.0, 0, tmp_path / "nope.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,c\n1,2,3\n", encoding="utf-8")
    with pytest.raises(OakInputError, match=r"bad.csv:1: header"):
        read_trace(bad)


def _small_trace(tmp_path: Path) -> Path:
    rows = []
    rng = np.random.default_rng(0)
    t = 1_500_000_000.0
    for i in range(400):
        t += float(rng.exponential(60.0))
        gpus = (1, 2, 8)[i % 3]
        duration = float(rng.uniform(100, 40_000))
        rows.append(f"{t:.0f},{duration:.1f},{gpus},{duration * gpus:.1f},c{i % 2}")
    path = tmp_path / "small-trace.csv"
    path.write_text(TRACE_HEADER + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_raw_trace_mode(tmp_path: Path) -> None:
    path = _small_trace(tmp_path)
    a, jobs = synth_workload_text(200, "sia-64", 1.0, 4, path)
    b, _ = synth_workload_text(200, "sia-64", 1.0, 4, path)
    assert a == b and "raw trace" in a.splitlines()[0]
    assert {j.requested_gpus for j in jobs} <= {1, 2, 8}
    model = TraceModel.from_trace(path)
    assert model.joint.sum() == 400 and model.gpu_counts.tolist() == [1, 2, 8]


def test_derived_summary_round_trip(tmp_path: Path) -> None:
    trace = read_trace(_small_trace(tmp_path))
    doc = derive(trace, "test", date="2000-01-01")
    model = TraceModel.from_derived(json.loads(dump_derived(doc)))
    assert model.joint.tolist() == doc["joint_counts"]
    gaps = model.sample_gaps(np.random.default_rng(0), 20000)
    assert abs(gaps.mean() - 1.0) < 0.05 and (gaps >= 0).all()
    broken = dict(doc, joint_counts=[[1, 2]])
    with pytest.raises(OakInputError, match="joint_counts"):
        TraceModel.from_derived(broken, "x.json")


@pytest.mark.skipif(not TRACE.exists(), reason="../shared/data/sia/philly-jobs.csv not present")
def test_packaged_summary_is_derived_from_the_shared_trace() -> None:
    text = resources.files("oak.workloads").joinpath("data", "philly-derived.json").read_text(encoding="utf-8")
    shipped = json.loads(text)
    prov = shipped["provenance"]
    fresh = derive(read_trace(TRACE), prov["command"], date=prov["date"])
    assert dump_derived(fresh) == text, "philly-derived.json is stale: run python -m oak.workloads.philly derive"
    assert prov["source"] == "philly-jobs.csv" and prov["rows"] == 82247 and prov["rows_kept"] == 74428


def test_cli_synth_loads_and_simulates_on_sia_64(tmp_path: Path) -> None:
    out = tmp_path / "philly.csv"
    res = oak("workloads", "synth", "--from", "philly", "--jobs", "6", "--cluster", "sia-64", "--seed", "1",
              "--out", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "wrote" in res.stdout
    text = out.read_text(encoding="utf-8")
    assert text == synth_workload_text(6, "sia-64", 1.0, 1)[0]
    wl = load_workload(str(out), known_apps=APPS)
    assert len(wl.jobs) == 6 and wl.description.startswith("6 jobs from philly-jobs.csv")
    sim = Simulator(wl, cluster_preset("sia-64"))
    for policy in ("oak", "sia"):
        result = sim.run(make_policy(policy, seed=0))
        assert all(j.jct_s is not None and j.jct_s > 0 for j in result.jobs)


def test_cli_synth_default_scale_follows_the_preset(tmp_path: Path) -> None:
    out = tmp_path / "x4.csv"
    res = oak("workloads", "synth", "--jobs", "5", "--cluster", "sia-64x4", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert out.read_text(encoding="utf-8") == synth_workload_text(5, "sia-64x4", 4.0, 0)[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--jobs", "0"], "--jobs"),
        (["--scale", "0"], "--scale"),
        (["--cluster", "sia-99"], "unknown"),
        (["--from", "alibaba"], "--from"),
    ],
)
def test_cli_synth_rejects_bad_arguments(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "w.csv"
    res = oak("workloads", "synth", "--out", str(out), *args)
    assert res.returncode == 2
    assert message in res.stderr and "Traceback" not in res.stderr
    assert not out.exists()
