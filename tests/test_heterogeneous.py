"""Heterogeneous clusters: presets and their xK scaling, one GPU type per job in simulation, Sia's cross-type
projection of goodput (reference §3.6)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from oak.catalog import Catalog
from oak.errors import OakInputError
from oak.goodput.batch import best_batch
from oak.goodput.projection import project_goodput, projected_shapes, scale_choice, single_gpu_throughput
from oak.goodput.table import GoodputTable
from oak.model.cluster import CLUSTER_PRESETS, cluster_preset, preset_scale, scale_cluster
from oak.model.config import sia_configurations
from oak.model.job import JobSpec
from oak.model.snapshot import Allocation, RoundSnapshot
from oak.placement.placer import GpuSet
from oak.policies import make_policy
from oak.sim.simulator import Simulator
from oak.workloads import Workload

CATALOG = Catalog.load()


# ---------------------------------------------------------------------------------------------- presets


def test_sia_64_matches_sia_cluster() -> None:
    c = cluster_preset("sia-64")
    assert c.gpu_types == ("aws", "dgx-ext", "rtx")
    assert [(len(c.nodes_of(t)), c.nodes_of(t)[0].gpus) for t in c.gpu_types] == [(6, 4), (2, 8), (3, 8)]
    assert c.total_gpus == 64
    # Reference §3.4: 8 + 5 + 6 = 19 configurations per job, each of one GPU type.
    configs = sia_configurations(c)
    assert [sum(cfg.gpu_type == t for cfg in configs) for t in c.gpu_types] == [8, 5, 6]


@pytest.mark.parametrize(("name", "gpus", "k"), [("sia-64x32", 2048, 32), ("paper-12x4", 48, 4), ("sia-64x1", 64, 1)])
def test_scaled_presets(name: str, gpus: int, k: int) -> None:
    base = cluster_preset(name.split("x")[0])
    c = cluster_preset(name)
    assert c.total_gpus == gpus and c.name == name and preset_scale(name) == k
    assert c.gpu_types == base.gpu_types
    for t in base.gpu_types:
        assert len(c.nodes_of(t)) == k * len(base.nodes_of(t))
        assert c.capacity(t) == k * base.capacity(t)
    assert scale_cluster(base, k).nodes == c.nodes


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("sia-128", "unknown"),
        ("foox2", "unknown"),
        ("sia-64x0", "positive integer"),
        ("sia-64x-2", "positive integer"),
        ("sia-64x1.5", "positive integer"),
        ("sia-64x", "positive integer"),
        ("sia-64x99999", "positive integer"),
    ],
)
def test_bad_preset_names(name: str, message: str) -> None:
    with pytest.raises(OakInputError, match=message):
        cluster_preset(name)


@pytest.mark.parametrize("k", [0, -1, 2.0, True])
def test_scale_cluster_rejects_bad_k(k: object) -> None:
    with pytest.raises(OakInputError, match="positive integer"):
        scale_cluster(cluster_preset("paper-12"), k)  # type: ignore[arg-type]


def test_cli_help_names_every_preset() -> None:
    from oak.cli.main import CLUSTER_HELP

    for name in CLUSTER_PRESETS:
        assert name in CLUSTER_HELP
    assert "xK" in CLUSTER_HELP


def test_node_of_gpu_on_a_large_cluster() -> None:
    c = cluster_preset("sia-64x3")
    expect = [i for i, n in enumerate(c.nodes) for _ in range(n.gpus)]
    assert [c.node_of_gpu(g) for g in range(c.total_gpus)] == expect
    for bad in (-1, c.total_gpus):
        with pytest.raises(ValueError):
            c.node_of_gpu(bad)


# ------------------------------------------------------------------------------- one GPU type per job


def _mixed_workload() -> Workload:
    jobs = (
        JobSpec("cifar10-0", "cifar10", 0.0, 1, 24, gpus=4),
        JobSpec("bert-1", "bert", 60.0, 1, 16, gpus=2),
        JobSpec("deepspeech2-2", "deepspeech2", 120.0, 1, 24, gpus=8),
        JobSpec("cifar10-3", "cifar10", 180.0, 1, 8, gpus=1),
        JobSpec("yolov3-4", "yolov3", 240.0, 2, 16, gpus=4),
        JobSpec("bert-5", "bert", 300.0, 1, 24, gpus=8),
    )
    return Workload("mixed", jobs)


@pytest.mark.parametrize("policy", ["oak", "sia"])
def test_no_job_spans_gpu_types(policy: str) -> None:
    cluster = cluster_preset("sia-64")
    sim = Simulator(_mixed_workload(), cluster)
    types_used: set[str] = set()
    placements = 0

    def check(snap: RoundSnapshot, alloc: Allocation, placed: list[GpuSet]) -> None:
        nonlocal placements
        for pos, gpus in enumerate(placed):
            cfg = int(alloc.config[pos])
            if cfg < 0:
                assert gpus == ()
                continue
            kinds = {cluster.nodes[cluster.node_of_gpu(g)].gpu_type for g in gpus}
            assert kinds == {snap.configs[cfg].gpu_type}, (snap.job_names[pos], kinds, str(snap.configs[cfg]))
            assert len(gpus) == snap.configs[cfg].gpus
            types_used.update(kinds)
            placements += 1
        # Capacity per type, from the placement itself.
        held = [g for gs in placed for g in gs]
        assert len(held) == len(set(held))

    result = sim.run(make_policy(policy, seed=0), 0.0, 0, on_round=check)
    assert placements > 0
    assert len(types_used) >= 2, f"{policy} used only {types_used}: the test would not exercise heterogeneity"
    assert all(j.jct_s is not None for j in result.jobs)


# ------------------------------------------------------------------------------------------ projection


def test_projected_shapes_and_formula_by_hand() -> None:
    nodes_b, reps_b = projected_shapes([1, 2, 4, 5, 8, 12], gpus_per_node_b=4)
    assert nodes_b.tolist() == [1, 1, 1, 2, 2, 3] and reps_b.tolist() == [1, 2, 4, 5, 8, 12]
    assert projected_shapes([3, 4], gpus_per_node_b=8, unit_b=4)[0].tolist() == [2, 2]  # ⌈K·unit/R⌉

    def goodput_b(n: np.ndarray, r: np.ndarray) -> np.ndarray:
        return np.asarray(10.0 * r - n, dtype=np.float64)

    # A's node counts do not enter; B's are ⌈K/4⌉: K = 1, 2, 5, 8 -> N_B = 1, 1, 2, 2.
    got = project_goodput(goodput_b, [1, 1, 1, 1], [1, 2, 5, 8], x1_a=30.0, x1_b=20.0, gpus_per_node_b=4)
    assert got.tolist() == pytest.approx([9 * 1.5, 19 * 1.5, 48 * 1.5, 78 * 1.5])
    with pytest.raises(ValueError):
        project_goodput(goodput_b, [1], [1], x1_a=0.0, x1_b=1.0, gpus_per_node_b=4)


def test_single_gpu_throughput_by_hand() -> None:
    gpu = CATALOG.app("cifar10").gpus["aws"]
    p = gpu.params
    t_c = p.alpha_c + p.beta_c * gpu.b_max  # one replica: the all-reduce term (1e-8 s) vanishes in the γ-norm
    assert single_gpu_throughput(p, gpu.b_max) == pytest.approx(gpu.b_max / t_c, rel=1e-9)


def _drop_types(catalog: Catalog, keep: dict[str, tuple[str, ...]]) -> Catalog:
    apps = {}
    for name, types in keep.items():
        app = catalog.app(name)
        apps[name] = dataclasses.replace(app, gpus={t: app.gpus[t] for t in types})
    return Catalog(apps=apps, provenance=catalog.provenance)


def _x1(app: str, t: str) -> float:
    g = CATALOG.app(app).gpus[t]
    return g.b_max / (g.params.alpha_c + g.params.beta_c * g.b_max)


def test_table_projects_an_app_without_a_model_for_a_type() -> None:
    # cifar10 has no rtx model; bert and imagenet (fitted on aws and rtx) give the rtx/aws speed ratio.
    catalog = _drop_types(
        CATALOG, {"cifar10": ("aws",), "bert": ("aws", "rtx"), "imagenet": ("aws", "rtx"), "yolov3": ("aws",)}
    )
    types = ["aws"] * 4 + ["rtx"] * 5
    nodes = [1, 1, 1, 2, 1, 1, 1, 1, 2]
    reps = [1, 2, 4, 8, 1, 2, 4, 8, 16]
    table = GoodputTable(catalog, nodes, reps, types)
    assert table.has_profile("cifar10", "rtx") and not table.has_fitted_profile("cifar10", "rtx")
    proj = table.projection("cifar10", "rtx")
    assert proj is not None and proj.source == "aws" and proj.gpus_per_node == 4
    assert proj.reference_apps == ("bert", "imagenet")
    ratio = math.sqrt(_x1("bert", "rtx") / _x1("bert", "aws") * _x1("imagenet", "rtx") / _x1("imagenet", "aws"))
    assert proj.ratio == pytest.approx(ratio, rel=1e-9)

    app = catalog.app("cifar10")
    ch = table.choices("cifar10", 3)
    rtx = np.arange(4, 9)
    assert np.all(np.isfinite(ch.goodput[rtx])) and np.all(ch.goodput[rtx] > 0)
    # By hand: aws's model at (⌈K/4⌉ nodes, K replicas), times the x1 ratio.
    aws = app.gpus["aws"]
    k = np.array(reps)[rtx]
    ref = best_batch(
        aws.params,
        app.m0,
        app.m_max,
        aws.b_min,
        aws.b_max,
        lambda m: app.grad_stats(3, m)[0],
        lambda m: app.grad_stats(3, m)[1],
        -(-k // 4),
        k,
    )
    np.testing.assert_allclose(ch.goodput[rtx], ref.goodput * ratio, rtol=1e-9)
    np.testing.assert_allclose(ch.progress_rate[rtx], ref.progress_rate * ratio, rtol=1e-9)
    np.testing.assert_array_equal(ch.batch[rtx], ref.batch)
    # ... the same as the pure projection function, and as moving the choice with scale_choice.
    fn = project_goodput(
        lambda n, r: best_batch(
            aws.params, app.m0, app.m_max, aws.b_min, aws.b_max,
            lambda m: app.grad_stats(3, m)[0], lambda m: app.grad_stats(3, m)[1], n, r,
        ).goodput,
        np.array(nodes)[rtx], k, x1_a=_x1("imagenet", "rtx"), x1_b=_x1("imagenet", "aws"), gpus_per_node_b=4,
    )  # fmt: skip
    np.testing.assert_allclose(fn, ref.goodput * _x1("imagenet", "rtx") / _x1("imagenet", "aws"), rtol=1e-12)
    np.testing.assert_allclose(scale_choice(ref, ratio).iter_time_s, ref.iter_time_s / ratio, rtol=1e-12)
    # Fitted types are untouched; any app fitted on aws is projected to rtx through the same reference apps.
    np.testing.assert_array_equal(
        ch.goodput[:4], GoodputTable(CATALOG, nodes, reps, types).choices("cifar10", 3).goodput[:4]
    )
    assert table.projection("yolov3", "rtx") is not None  # bert/imagenet still relate rtx to aws
    assert not table.has_profile("cifar10", "tpu") and not table.has_profile("nope", "aws")


def test_projection_off_and_no_reference() -> None:
    catalog = _drop_types(CATALOG, {"cifar10": ("aws",), "bert": ("aws",)})
    table = GoodputTable(catalog, [1, 1], [1, 2], ["aws", "rtx"])
    assert table.projection("cifar10", "rtx") is None and not table.has_profile("cifar10", "rtx")
    assert table.choices("cifar10", 0).goodput[1] == 0.0
    full = _drop_types(CATALOG, {"cifar10": ("aws",), "bert": ("aws", "rtx")})
    off = GoodputTable(full, [1, 1], [1, 2], ["aws", "rtx"], project=False)
    assert not off.has_profile("cifar10", "rtx") and off.choices("cifar10", 0).goodput[1] == 0.0


def test_simulator_runs_a_projected_app_on_other_types() -> None:
    catalog = _drop_types(CATALOG, {"cifar10": ("aws",), "bert": ("aws", "rtx", "dgx-ext")})
    sim = Simulator(_mixed_workload_of(("cifar10", "bert")), cluster_preset("sia-64"), catalog)
    cifar = next(i for i, j in enumerate(sim.model.workload.jobs) if j.application == "cifar10")
    on_type = {
        t: sim.model.bounds[cifar][[c.gpu_type == t for c in sim.model.configs]].any() for t in ("dgx-ext", "rtx")
    }
    assert on_type == {"dgx-ext": True, "rtx": True}
    result = sim.run(make_policy("sia", seed=0))
    assert all(j.jct_s is not None for j in result.jobs)


def _mixed_workload_of(apps: tuple[str, ...]) -> Workload:
    return Workload("m", tuple(JobSpec(f"{a}-{i}", a, 30.0 * i, 1, 16, gpus=2) for i, a in enumerate(apps * 2)))
