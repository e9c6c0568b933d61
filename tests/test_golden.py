"""Results that must not move: the golden runs (tests/golden/) recomputed with the current code.

Integers (restarts, failures, rounds), names and unfinished jobs (None JCTs) must match exactly; floats to a
relative 1e-9 (absolute 1e-6 s). The same code with the same seed is bit-identical on one machine (checked by
``python tests/golden/golden.py``, which reports "same"); the tolerance covers only another CPU's or NumPy
build's last-bit differences in transcendental kernels (np.power, np.exp), which sums over a few thousand
events carry to ~1e-12 relative. Decisions do not see those differences: the solvers snap values to a grid
(``oak.solve.assignment.snap_values``), so indistinguishable jobs tie exactly on every CPU and the tie rule decides
(tests/test_portable.py). A changed decision moves a JCT by at least one round (60 s) and a count by 1.
"""

from __future__ import annotations

import json

import pytest

from golden import golden  # tests/golden/golden.py (tests/ is on sys.path under pytest's default import mode)

pytestmark = pytest.mark.portable


@pytest.mark.long
@pytest.mark.parametrize("case", golden.CASES, ids=[c.name for c in golden.CASES])
def test_golden_results_do_not_move(case: golden.Case) -> None:
    want = json.loads(golden.path_of(case).read_text(encoding="utf-8"))
    got = golden.compute(case, workers=1)
    diffs = golden.differences(want, got)
    assert not diffs, f"{len(diffs)} differences from {golden.path_of(case).name}; first: {diffs[:5]}"


def test_the_comparison_sees_a_moved_result() -> None:
    want = json.loads(golden.path_of(golden.CASES[0]).read_text(encoding="utf-8"))
    moved = json.loads(json.dumps(want))
    moved["runs"][3]["jobs"][1]["jct_s"] = (moved["runs"][3]["jobs"][1]["jct_s"] or 0.0) + 60.0
    moved["runs"][5]["jobs"][0]["restarts"] += 1
    assert len(golden.differences(want, moved)) == 2
    assert golden.differences(want, want) == []
