"""Fuzzing the input parsers: any text either loads or raises the project's own OakInputError."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oak.catalog import Catalog
from oak.errors import OakInputError
from oak.policies import make_policy
from oak.workloads import read_workload_csv

HEADERS = [
    "name,submit_time_s,application,min_gpus,max_gpus",
    "name,submit_time_s,application,min_gpus,max_gpus,gpus,restart_penalty_s,batch_size",
    "name,time,application,num_replicas,batch_size",
]
#: Finite extremes: the largest double, values just inside and outside the documented ranges, the smallest
#: normal and subnormal doubles (a submission time of 1e308 once overflowed the failure stream's arithmetic).
EXTREMES = [
    "1e308", "1.7976931348623157e308", "-1e308", "1e9", "1000000001", "1e6", "1000001", "2.2250738585072014e-308",
    "5e-324", "-5e-324", "1e-300", "1048576", "1048577", "16777216", "16777217", "9" * 30,
]  # fmt: skip
cell = st.one_of(
    st.sampled_from(["", "0", "1", "-1", "2.5", "nan", "inf", "1e400", "cifar10", "bert", "x", '"', "8", "64"]),
    st.sampled_from(EXTREMES),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(max_size=6),
)


@st.composite
def workload_text(draw: st.DrawFn) -> str:
    header = draw(st.sampled_from([*HEADERS, draw(st.text(max_size=40))]))
    n = draw(st.integers(0, 5))
    rows = [",".join(draw(st.lists(cell, min_size=0, max_size=9))) for _ in range(n)]
    return "\n".join([header, *rows]) + draw(st.sampled_from(["", "\n", "\n# c\n"]))


@given(workload_text())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_workload_parser_loads_or_raises_oak_error(text: str) -> None:
    try:
        wl = read_workload_csv(text, "fuzz.csv", "fuzz", known_apps={"cifar10", "bert"})
    except OakInputError as exc:
        assert "fuzz.csv" in str(exc) or "job" in str(exc)
        return
    for job in wl.jobs:
        assert job.min_gpus >= 1 and job.max_gpus >= job.min_gpus and job.submit_time_s >= 0


def test_documented_ranges_are_enforced() -> None:
    head = "name,submit_time_s,application,min_gpus,max_gpus,gpus,restart_penalty_s,batch_size\n"
    for row, field in (
        ("a,1e308,cifar10,1,2,,,", "submit_time_s"),
        ("a,1000000001,cifar10,1,2,,,", "submit_time_s"),
        ("a,0,cifar10,1,2,,1000001,", "restart_penalty_s"),
        ("a,0,cifar10,1,1048577,,,", "max_gpus"),
        ("a,0,cifar10,1,2,,,16777217", "batch_size"),
    ):
        try:
            read_workload_csv(head + row, "w.csv", "w")
        except OakInputError as exc:
            assert f"w.csv:2: field {field!r}" in str(exc) and "expected" in str(exc), exc
        else:
            raise AssertionError(f"{row} was accepted")
    wl = read_workload_csv(head + "a,1e9,cifar10,1,1048576,,1e6,16777216\nb,5e-324,bert,1,2,,2.2e-308,1", "w.csv", "w")
    assert [j.submit_time_s for j in wl.jobs] == [5e-324, 1e9]


seconds = st.one_of(
    st.sampled_from(EXTREMES),
    st.sampled_from(["0", "60", "3600", "19999"]),
    st.floats(0, 3e4).map(repr),
    st.floats(0, 1e-300).map(repr),
)
count = st.one_of(
    st.sampled_from(["1048576", "1048577", "16777216", "16777217", "0", "9" * 30]),
    st.integers(1, 16).map(str),
    st.integers(1, 16).map(str),
)


@st.composite
def plausible_workload_text(draw: st.DrawFn) -> str:
    """Well-formed rows of either format whose numbers range over the extremes: most of them load."""
    sia = draw(st.booleans())
    header = HEADERS[2] if sia else HEADERS[1]
    rows = []
    for i in range(draw(st.integers(1, 4))):
        app = draw(st.sampled_from(["cifar10", "bert"]))
        if sia:
            rows.append(f"j{i},{draw(seconds)},{app},{draw(count)},{draw(count)}")
        else:
            lo, hi = sorted((draw(count), draw(count)), key=len)
            gpus, penalty, batch = draw(st.one_of(st.just(""), count)), draw(seconds), draw(count)
            rows.append(f"j{i},{draw(seconds)},{app},{lo},{hi},{gpus},{penalty},{batch}")
    return "\n".join([header, *rows])


@given(st.one_of(workload_text(), plausible_workload_text()))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_workload_that_loads_simulates_or_raises_oak_error(text: str) -> None:
    """Whatever the parser accepts, the simulator runs or rejects with OakInputError (never a traceback)."""
    from oak.sim import PhysicsOptions, Simulator

    try:
        wl = read_workload_csv(text, "fuzz.csv", "fuzz", known_apps={"cifar10", "bert"})
        sim = Simulator(wl, physics=PhysicsOptions(horizon_s=2e4))
    except OakInputError:
        return
    result = sim.run(make_policy("goodput"), failure_rate=0.1, seed=1)
    assert all(j.jct_s is None or 0 <= j.jct_s <= 2e4 for j in result.jobs)


@given(st.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_catalog_parser_on_arbitrary_text(text: str) -> None:
    try:
        Catalog.from_json(text, source="fuzz.json")
    except OakInputError as exc:
        assert "fuzz.json" in str(exc)


PACKAGED = json.loads(Catalog.load().to_json())


def _mutations() -> st.SearchStrategy[tuple[list[str], object]]:
    paths: list[list[str]] = []
    app = next(iter(PACKAGED["apps"]))
    paths += [["apps", app, k] for k in PACKAGED["apps"][app]]
    gpu = next(iter(PACKAGED["apps"][app]["gpus"]))
    paths += [["apps", app, "gpus", gpu, k] for k in PACKAGED["apps"][app]["gpus"][gpu]]
    values = st.one_of(
        st.none(), st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=3), st.just([]), st.just({})
    )
    return st.tuples(st.sampled_from(paths), values)


@given(st.lists(_mutations(), min_size=1, max_size=3))
@settings(max_examples=150, deadline=None)
def test_catalog_parser_on_mutated_catalogs(muts: list[tuple[list[str], object]]) -> None:
    doc = json.loads(json.dumps(PACKAGED))
    for path, value in muts:
        node = doc
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):  # an earlier mutation may have replaced a parent
            node[path[-1]] = value
    try:
        Catalog.from_json(json.dumps(doc), source="mutant.json")
    except OakInputError as exc:
        assert "mutant.json" in str(exc)
