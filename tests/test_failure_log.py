"""A failure log replayed: --failure-model trace:FILE (oak.failures.trace), in the simulator and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oak.engine.rules import PhysicsOptions
from oak.errors import OakInputError
from oak.failures.trace import FailureEvent, failure_log_csv, load_failure_trace
from oak.policies import make_policy
from oak.sim.simulator import Simulator
from oak.workloads import load_workload
from support.cli import oak

HEADER = "time_s,job,node,kind,down_s\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ":1: empty failure log"),
        ("time_s,job,kind\n", ":1: header time_s,job,kind: missing column(s) node"),
        ("time_s,job,node,kind,when\n", ":1: header time_s,job,node,kind,when: unknown column(s) when"),
        (HEADER + "10,a,,explode,\n", ":2: kind 'explode': expected one of injected, crash, stall, node-loss"),
        (HEADER + "10,a,1,crash,\n", ":2: expected exactly one of job and node"),
        (HEADER + "10,,,crash,\n", ":2: expected exactly one of job and node"),
        (HEADER + "ten,a,,crash,\n", ":2: time_s 'ten': expected a number of seconds"),
        (HEADER + "-1,a,,crash,\n", ":2: time_s '-1': expected a finite number of seconds >= 0"),
        (HEADER + "1_000,a,,crash,\n", ":2: time_s '1_000': expected a number of seconds"),  # read as 1000 before
        (HEADER + "1,,\u0663,node-loss,60\n", ":2: node '\u0663': expected a node index"),  # Arabic-Indic 3
        (HEADER + "1,,0,node-loss,inf\n", ":2: down_s 'inf': expected a finite number of seconds > 0"),
        (HEADER + "1,a,,crash,60\n", ":2: down_s is a node's repair time"),
        (HEADER + "1,,x,node-loss,60\n", ":2: node 'x': expected a node index"),
        (HEADER + "1,,0,node-loss,0\n", ":2: down_s '0': expected a finite number of seconds > 0"),
        (HEADER + "1,a,,crash,\n2,a,crash\n", ":3: 3 field(s); expected 5"),
    ],
)
def test_a_bad_failure_log_names_its_file_line_and_field(tmp_path: Path, text: str, expected: str) -> None:
    f = tmp_path / "log.csv"
    f.write_text(text)
    with pytest.raises(OakInputError) as info:
        load_failure_trace(f)
    assert f"{f}{expected}" in str(info.value)


def test_a_failure_log_round_trips_through_its_csv(tmp_path: Path) -> None:
    events = [FailureEvent(30.0, "crash", job="a"), FailureEvent(5.5, "node-loss", node=2, down_s=90.0)]
    f = tmp_path / "log.csv"
    f.write_text(failure_log_csv(events))
    assert load_failure_trace(f).events == (events[1], events[0])  # sorted by time


def _small(log: Path, policy: str = "oak") -> Any:
    sim = Simulator(load_workload("small"), physics=PhysicsOptions(failure_model=f"trace:{log}"))
    return {j.name: j for j in sim.run(make_policy(policy), 0.0, 0).jobs}


@pytest.mark.parametrize("policy", ["oak", "sia"])
def test_a_logged_job_failure_fires_only_while_the_job_holds_gpus(tmp_path: Path, policy: str) -> None:
    """small: cifar10-0 runs from 0 s, bert-2 arrives at 1,200 s. A line for each at 700 s fails cifar10-0
    only; a line for bert-2 at 1,300 s fails it (it runs then, under every policy)."""
    log = tmp_path / "log.csv"
    log.write_text(HEADER + "700,cifar10-0,,crash,\n700,bert-2,,crash,\n1300,bert-2,,stall,\n")
    jobs = _small(log, policy)
    assert jobs["cifar10-0"].failures == 1 and jobs["bert-2"].failures == 1
    assert jobs["deepspeech2-1"].failures == jobs["yolov3-3"].failures == 0
    assert _small(log, policy) == jobs  # a pure function of the file


def test_a_logged_node_loss_takes_the_node_for_its_downtime(tmp_path: Path) -> None:
    """Every node of paper-12 down from 100 s for 1,000 s: no job holds GPUs then, each job that held some
    fails once, and the run is later than without the log by about the downtime."""
    log = tmp_path / "log.csv"
    log.write_text(HEADER + "".join(f"100,,{k},node-loss,1000\n" for k in range(3)))
    sim = Simulator(load_workload("small"), physics=PhysicsOptions(failure_model=f"trace:{log}"))
    seen: list[tuple[float, int]] = []
    res = sim.run(
        make_policy("oak"),
        0.0,
        0,
        on_round=lambda snap, alloc, placed: seen.append((snap.time_s, sum(len(g) for g in placed))),
    )
    assert res.hardware_events == (100.0, 100.0, 100.0)
    assert all(n == 0 for t, n in seen if 100.0 < t < 1100.0), seen
    assert {j.name: j.failures for j in res.jobs} == {"cifar10-0": 1, "deepspeech2-1": 0, "bert-2": 0, "yolov3-3": 0}
    plain = Simulator(load_workload("small")).run(make_policy("oak"), 0.0, 0)
    assert res.jobs[0].jct_s is not None and plain.jobs[0].jct_s is not None
    assert res.jobs[0].jct_s - plain.jobs[0].jct_s > 900.0


def test_a_failure_log_must_name_the_workloads_jobs_and_the_clusters_nodes(tmp_path: Path) -> None:
    log = tmp_path / "log.csv"
    log.write_text(HEADER + "10,nobody,,crash,\n")
    with pytest.raises(OakInputError, match="nobody not in workload 'small'"):
        _small(log)
    log.write_text(HEADER + "10,,7,node-loss,60\n")
    with pytest.raises(OakInputError, match=r"node 7 .*has 3 node"):
        _small(log)


def test_cli_simulate_reads_a_failure_log_and_rejects_a_bad_one(tmp_path: Path) -> None:
    log = tmp_path / "log.csv"
    log.write_text(HEADER + "700,cifar10-0,,crash,\n")
    out = oak("simulate", "--workload", "small", "--failure-model", f"trace:{log}", "--json", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    run = json.loads((tmp_path / "r.json").read_text())["runs"][0]
    assert run["failure_model"].startswith("trace(") and run["failures_per_job"] == 0.25
    log.write_text(HEADER + "700,cifar10-0,,melt,\n")
    bad = oak("simulate", "--workload", "small", "--failure-model", f"trace:{log}")
    assert (
        bad.returncode == 2
        and f"{log}:2: kind 'melt'" in bad.stderr.replace("\n", "")
        and "Traceback" not in bad.stderr
    )
