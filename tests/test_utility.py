"""Composite utility (paper §III-B/C) and the worked example of §III-C."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from oak.errors import OakInputError
from oak.scoring import (
    UtilityParams,
    age_key,
    composite_utility,
    restart_factor_aggregate,
    restart_factor_decomposed,
)
from oak.solve import AssignmentProblem, solve_assignment


def test_worked_example_utilities_and_admission() -> None:
    """Paper §III-C: U ≈ 1.50, 1.11, 64.6 and the ILP admits J1 and J3 (μ_na = 1.1)."""
    g = np.array([[2.0], [2.2], [1.4]])
    r = np.array([1.0, 0.5, 1.0])
    # K1 = K2 ≈ 1.06 (≈ 5.8 s of waiting at α = 0.01); K3 = exp(0.01 · 400) ≈ 54.6.
    k = age_key(np.array([math.log(1.06) / 0.01, math.log(1.06) / 0.01, 400.0]), alpha=0.01, k_max=100.0)
    assert k[2] == pytest.approx(54.598, rel=1e-4)
    u = composite_utility(g, r, k, p=0.5)[:, 0]
    assert u == pytest.approx([1.50, 1.11, 64.6], abs=0.01)
    # Two 4-GPU slots (8 GPUs): the three jobs contend for them.
    problem = AssignmentProblem(
        value=u[:, None] - 1.1,
        valid=np.ones((3, 1), bool),
        gpus=np.array([4]),
        gpu_type=np.array([0]),
        capacity=np.array([8]),
    )
    for method in ("dp", "highs"):
        choice = solve_assignment(problem, method).choice
        assert choice.tolist() == [0, -1, 0], method


def test_restart_factor_decomposed() -> None:
    # Young job: r = 1 while T_progress < P.
    assert restart_factor_decomposed(10.0, 500.0, 50.0) == 1.0
    assert restart_factor_decomposed(1000.0, 200.0, 50.0) == pytest.approx(1000 / 1250)
    assert restart_factor_decomposed(1000.0, 0.0, 0.0) == 1.0


def test_restart_factor_aggregate() -> None:
    assert restart_factor_aggregate(20.0, 3, 50.0) == 1.0
    assert restart_factor_aggregate(600.0, 2, 30.0) == pytest.approx(540 / 630)
    assert restart_factor_aggregate(100.0, 5, 50.0) == 0.0


def test_age_key_is_capped_and_does_not_overflow() -> None:
    k = age_key(np.array([0.0, 100.0, 1e9]), alpha=0.01, k_max=100.0)
    assert k.tolist() == pytest.approx([1.0, math.e, 100.0])


@pytest.mark.parametrize("bad", [{"p": -0.5}, {"alpha": -1.0}, {"k_max": 0.5}, {"p": float("nan")}])
def test_bad_parameters_rejected(bad: dict[str, Any]) -> None:
    with pytest.raises(OakInputError, match=next(iter(bad))):
        UtilityParams(**bad)


@given(
    tp=st.floats(0, 1e8),
    tc=st.floats(0, 1e8),
    tq=st.floats(0, 1e8),
    pen=st.floats(0, 1e4),
    g=st.floats(1, 1e4),
    p=st.floats(0, 3),
)
def test_utility_finite_and_bounded(tp: float, tc: float, tq: float, pen: float, g: float, p: float) -> None:
    r = restart_factor_decomposed(np.array([tp]), np.array([tc]), np.array([pen]))
    assert 0.0 <= r[0] <= 1.0
    k = age_key(np.array([tq]), 0.01, 100.0)
    assert 1.0 <= k[0] <= 100.0
    u = composite_utility(np.array([[g]]), r, k, p)
    assert np.isfinite(u).all() and (u >= 0).all()
