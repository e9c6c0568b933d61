"""Atomic writes: a Parquet table streamed in batches is the table written at once, and a failed writer leaves
nothing behind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oak.io_util import AtomicParquetWriter

SCHEMA = (("t", pa.float64()), ("name", pa.string()), ("n", pa.int64()), ("flag", pa.bool_()))


def _chunk(rng: np.random.Generator, rows: int, start: int) -> dict[str, object]:
    return {
        "t": rng.random(rows),
        "name": tuple(f"job-{start + i}" for i in range(rows)),
        "n": np.arange(start, start + rows, dtype=np.int64),
        "flag": rng.random(rows) < 0.5,
    }


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 30), max_size=12), batch=st.integers(1, 40))
def test_batches_write_the_table_written_at_once(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], batch: int
) -> None:
    out = tmp_path_factory.mktemp("pq") / "t.parquet"
    rng = np.random.default_rng(len(sizes) * 100 + batch)
    chunks, start = [], 0
    for k in sizes:
        chunks.append(_chunk(rng, k, start))
        start += k
    with AtomicParquetWriter(out, SCHEMA, batch_rows=batch) as w:
        for c in chunks:
            w.append(c)
    assert w.rows == sum(sizes)
    assert pq.read_schema(out).equals(pa.schema(list(SCHEMA)))
    columns = {name: [v for c in chunks for v in np.asarray(c[name]).tolist()] for name, _ in SCHEMA}
    want = pa.Table.from_pydict(columns, schema=pa.schema(list(SCHEMA))).to_pandas()
    pd.testing.assert_frame_equal(pd.read_parquet(out), want, check_exact=True)
    assert [p.name for p in out.parent.iterdir()] == ["t.parquet"]


def test_a_failed_writer_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    out.write_bytes(b"before")
    rng = np.random.default_rng(0)
    with pytest.raises(RuntimeError, match="simulated crash"), AtomicParquetWriter(out, SCHEMA, batch_rows=4) as w:
        w.append(_chunk(rng, 10, 0))  # two batches already on disk, in the temporary file
        raise RuntimeError("simulated crash")
    assert out.read_bytes() == b"before"
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]
    w.abort()  # twice: nothing more to do


def test_columns_of_unequal_length_are_refused(tmp_path: Path) -> None:
    w = AtomicParquetWriter(tmp_path / "t.parquet", SCHEMA)
    bad = _chunk(np.random.default_rng(0), 3, 0)
    bad["n"] = np.arange(2)
    with pytest.raises(ValueError, match="unequal length"):
        w.append(bad)
    w.abort()
    assert list(tmp_path.iterdir()) == []


def test_an_empty_table_keeps_its_columns(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    with AtomicParquetWriter(out, SCHEMA):
        pass
    got = pd.read_parquet(out)
    assert got.empty and list(got.columns) == [name for name, _ in SCHEMA]
