"""A file that starts with a UTF-8 byte-order mark (a spreadsheet's "CSV UTF-8" export, Windows editors) reads as
the same file without it: the mark is not part of the first column's name or of the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oak.catalog.schema import Catalog
from oak.errors import OakInputError
from oak.failures.trace import load_failure_trace
from oak.runtime.export import load_trace
from oak.workloads import load_workload
from oak.workloads.philly import read_trace

BOM = b"\xef\xbb\xbf"


def _both(tmp_path: Path, name: str, text: str) -> tuple[Path, Path]:
    plain, marked = tmp_path / f"plain-{name}", tmp_path / f"bom-{name}"
    plain.write_bytes(text.encode("utf-8"))
    marked.write_bytes(BOM + text.encode("utf-8"))
    return plain, marked


def test_a_workload_csv(tmp_path: Path) -> None:
    text = "name,submit_time_s,application,min_gpus,max_gpus\r\nj1,0,cifar10,1,4\r\nj2,10,bert,1,4\r\n"
    plain, marked = _both(tmp_path, "w.csv", text)
    assert load_workload(str(marked)).jobs == load_workload(str(plain)).jobs
    sia = "name,time,application,num_replicas,batch_size\nj1,0,cifar10,4,128\n"
    plain, marked = _both(tmp_path, "sia.csv", sia)
    assert load_workload(str(marked)).jobs == load_workload(str(plain)).jobs


def test_a_failure_log(tmp_path: Path) -> None:
    plain, marked = _both(tmp_path, "f.csv", "time_s,job,node,kind\n100,j1,,crash\n250,,1,node-loss\n")
    assert load_failure_trace(marked).events == load_failure_trace(plain).events


def test_a_philly_trace(tmp_path: Path) -> None:
    rows = "".join(f"{i * 600},{3600 + i},{1 + i % 4}\n" for i in range(20))
    plain, marked = _both(tmp_path, "philly.csv", "timestamp,duration,num_gpus\n" + rows)
    a, b = read_trace(plain), read_trace(marked)
    assert a.rows == b.rows > 0
    for field in ("submit_s", "duration_s", "num_gpus"):
        assert (getattr(a, field) == getattr(b, field)).all()


def test_a_catalog(tmp_path: Path) -> None:
    plain, marked = _both(tmp_path, "catalog.json", Catalog.load().to_json())
    assert Catalog.load(marked).to_json() == Catalog.load(plain).to_json()


def test_a_run_trace(tmp_path: Path) -> None:
    """A trace whose fields are missing fails past the decoding, the same way with the mark and without."""
    plain, marked = _both(tmp_path, "t.json", json.dumps({"format": "oak-run-trace", "version": 1}))
    errors = []
    for p in (plain, marked):
        with pytest.raises(OakInputError) as caught:
            load_trace(p)
        errors.append(str(caught.value).replace(str(p), "FILE"))
    assert errors[0] == errors[1]
