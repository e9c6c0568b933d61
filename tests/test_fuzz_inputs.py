"""Fuzzing the input parsers: any text either loads or raises the project's own OakInputError."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oak.catalog import Catalog
from oak.errors import OakInputError
from oak.workloads import read_workload_csv

HEADERS = [
    "name,submit_time_s,application,min_gpus,max_gpus",
    "name,submit_time_s,application,min_gpus,max_gpus,gpus,restart_penalty_s,batch_size",
    "name,time,application,num_replicas,batch_size",
]
cell = st.one_of(
    st.sampled_from(["", "0", "1", "-1", "2.5", "nan", "inf", "1e400", "cifar10", "bert", "x", '"', "8", "64"]),
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
