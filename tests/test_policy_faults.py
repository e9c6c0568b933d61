"""A user's policy that fails under `oak serve`, `oak simulate` and `oak compare` (issue [hardening], row 6): the
round is skipped and the service keeps serving; an allocation that cannot run is one clear line."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from support.service import ONE_STEP
from support.service import in_process_service as _service


class _Flaky:
    """A user's policy that raises while ``broken`` is set, and is ``oak`` otherwise."""

    name = "flaky"
    reads_clock = True
    needs_node_goodput = False
    avoids_failing_nodes = False

    def __init__(self) -> None:
        from oak.policies import make_policy

        self.broken = True
        self.inner = make_policy("oak")

    def decide(self, snap):  # type: ignore[no-untyped-def]
        if self.broken:
            raise ZeroDivisionError("a bug in the user's policy")
        return self.inner.decide(snap)


def test_a_raising_policy_leaves_oak_serve_serving(tmp_path: Path) -> None:
    """A policy that raises under ``oak serve`` stopped the service (exit 1). Now the round is skipped (every job
    keeps its devices), ``oak status`` shows the error and answers, and once the policy decides again the job
    runs to its end."""
    from oak.service.protocol import call

    run_dir = tmp_path / "run"
    policy = _Flaky()
    with _service(run_dir, policy, 1) as thread:
        job = f"jobs:\n  - {{name: a, command: {ONE_STEP.format(py=sys.executable)}}}\n"
        assert call(run_dir, "submit", text=job, source="a.yaml")["ok"]
        deadline = time.monotonic() + 30
        while not (state := call(run_dir, "status")).get("policy_error"):
            assert time.monotonic() < deadline and thread.is_alive(), state
            time.sleep(0.1)
        # the whole message: the exception and the line of the user's file, and no round time, so that the
        # service, which reports a change of message, says it once however many rounds fail
        assert re.fullmatch(
            rf"policy 'flaky' raised ZeroDivisionError: a bug in the user's policy \({re.escape(__file__)}:\d+, "
            r"in decide\)",
            state["policy_error"],
        ), state["policy_error"]
        assert thread.is_alive() and {r["name"]: r["state"] for r in state["jobs"]} == {"a": "queued"}
        policy.broken = False
        deadline = time.monotonic() + 60
        while (state := call(run_dir, "status"))["jobs"][0]["state"] != "done":
            assert time.monotonic() < deadline, state
            time.sleep(0.2)
        assert state["policy_error"] is None


BAD_POLICY = """
import numpy as np
from oak.model.snapshot import Allocation


class Greedy:
    name = "greedy"
    reads_clock = False
    needs_node_goodput = False
    avoids_failing_nodes = False

    def decide(self, snap):
        return Allocation(config=np.full(snap.num_jobs, len(snap.configs) - 1))  # the largest, for every job
"""


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_an_invalid_allocation_of_a_user_policy_is_one_clear_line(tmp_path: Path, command: str) -> None:
    """Row 6, second half: a user's policy whose allocation cannot run gave a 111-line traceback naming neither
    job nor configuration. Now: exit 2, one line naming the policy, the time, the job and the configuration (or
    the GPU type over capacity)."""
    import subprocess

    (tmp_path / "greedy.py").write_text(BAD_POLICY, encoding="utf-8")
    args = ["--workload", "small", "--failure-rates" if command == "compare" else "--failure-rate", "0"]
    policy = ["--policies" if command == "compare" else "--policy", f"{tmp_path / 'greedy.py'}:Greedy"]
    res = subprocess.run(
        [sys.executable, "-m", "oak", command, *args, *policy],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 2, res.stdout[-1000:] + res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert "policy 'greedy' at t = " in res.stderr
    assert re.search(r"job '[^']+' was given configuration \d+ \(.+\), which is not valid|GPUs of type", res.stderr)
