"""Researchers' own policies: the docs/policies.md walk-through, plug-in discovery, errors, both worlds."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "policies.md"
EXAMPLE = ROOT / "examples" / "my_policy.py"


def _oak(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oak", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_the_walkthrough_in_docs_policies_runs_as_written(tmp_path: Path) -> None:
    """The file and the command of docs/policies.md, taken from the document itself, in a folder outside the
    repository: the user's policy is compared with oak, sia and pollux in one command."""
    doc = DOC.read_text(encoding="utf-8")
    code = re.search(r"<!-- walkthrough: (\S+\.py) -->\n```python\n(.*?)```", doc, re.S)
    command = re.search(r"<!-- walkthrough: command -->\n```\n(.*?)\n```", doc, re.S)
    assert code is not None and command is not None, "docs/policies.md lost its walk-through markers"
    (tmp_path / code.group(1)).write_text(code.group(2), encoding="utf-8")
    argv = command.group(1).split()
    assert argv[0] == "oak"
    res = _oak([*argv[1:], "--json", "out.json"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    runs = json.loads((tmp_path / "out.json").read_text())["runs"]
    by_policy = {(r["policy"], r["failure_rate"], r["seed"]) for r in runs}
    for pol in ("oak", "sia", "pollux", "fewest-gpus"):
        assert {(pol, lam, s) for lam in (0.0, 0.1) for s in (0, 1)} <= by_policy, pol
    mine = [r for r in runs if r["policy"] == "fewest-gpus"]
    assert all(r["unfinished_jobs"] == 0 for r in mine)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no_such_module_xyz:Thing", "cannot import module 'no_such_module_xyz'"),
        ("missing.py:Thing", "no such file"),
        ("plug.py:Nope", "defines no 'Nope'"),
        ("plug.py:NotAPolicy", "not a policy (missing: name, decide"),
        ("plug.py:NeedsArgs", "must be constructible without arguments"),
        ("plug.py:CONSTANT", "is a int, not a policy class or factory"),
        ("broken.py:X", "importing 'broken.py' failed: ZeroDivisionError"),
        ("nonsense", "policy 'nonsense' is unknown"),
    ],
)
def test_bad_plugins_are_input_errors(tmp_path: Path, ref: str, message: str) -> None:
    (tmp_path / "plug.py").write_text(
        "CONSTANT = 3\n\nclass NotAPolicy:\n    pass\n\n"
        "class NeedsArgs:\n    def __init__(self, x):\n        self.x = x\n",
        encoding="utf-8",
    )
    (tmp_path / "broken.py").write_text("1 / 0\n", encoding="utf-8")
    res = _oak(["simulate", "--workload", "small", "--policy", ref], tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in " ".join(res.stderr.split()), res.stderr
    assert "Traceback" not in res.stderr


def test_a_failing_or_wrong_decide_is_an_input_error_naming_the_round_and_the_line(tmp_path: Path) -> None:
    """A user's decide that raises, or returns something other than an Allocation, stops the run with one
    message (exit 2): the policy, the round's time, the exception and the line of the user's file."""
    (tmp_path / "plug.py").write_text(
        "from oak import PolicyBase\n\n"
        "class Raises(PolicyBase):\n    name = 'raises'\n\n"
        "    def decide(self, snap):\n        return {}[snap.job_names[0]]\n\n"
        "class ReturnsNone(PolicyBase):\n    name = 'returns-none'\n\n"
        "    def decide(self, snap):\n        return None\n\n"
        "class Exits(PolicyBase):\n    name = 'exits'\n\n"
        "    def decide(self, snap):\n        raise SystemExit(3)\n",
        encoding="utf-8",
    )
    want = {
        # SystemExit ended the command with status 3 and no word
        "plug.py:Exits": f"policy 'exits' failed at t = 0 s: SystemExit: 3 ({tmp_path / 'plug.py'}:19, in decide)",
        "plug.py:Raises": f"policy 'raises' failed at t = 0 s: KeyError: 'cifar10-0' ({tmp_path / 'plug.py'}:7, in decide)",
        "plug.py:ReturnsNone": "policy 'returns-none' returned NoneType at t = 0 s; expected an oak.Allocation",
    }
    for ref, message in want.items():
        for args in (["simulate", "--policy", ref], ["compare", "--policies", f"oak,{ref}", "--seeds", "1"]):
            res = _oak([*args, "--workload", "small"], tmp_path)
            assert res.returncode == 2, res.stdout + res.stderr
            assert message in " ".join(res.stderr.split()), res.stderr
            assert "Traceback" not in res.stderr


def test_an_exception_in_oaks_own_policy_is_not_blamed_on_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    from oak.errors import PolicyError
    from oak.policies import make_policy
    from oak.policies.drf import DrfPolicy
    from oak.sim import Simulator
    from oak.workloads import load_workload

    def broken(self: object, snap: object) -> None:
        raise ZeroDivisionError("a bug of OAK's")

    monkeypatch.setattr(DrfPolicy, "decide", broken)
    with pytest.raises(ZeroDivisionError, match="a bug of OAK's") as caught:
        Simulator(load_workload("small")).run(make_policy("drf"), 0.0, 0)
    assert not isinstance(caught.value, PolicyError)


def test_installed_packages_publish_policies_through_entry_points(tmp_path: Path) -> None:
    """A package that declares ``[project.entry-points."oak.policies"] mine = ...`` is found by name."""
    site = tmp_path / "site"
    (site / "mine_pkg").mkdir(parents=True)
    (site / "mine_pkg" / "__init__.py").write_text(
        "from oak import Allocation, PolicyBase, make_policy\n\n"
        "class Mine(PolicyBase):\n"
        "    name = 'mine'\n"
        "    def __init__(self):\n        self.inner = make_policy('sia')\n"
        "    def decide(self, snap):\n        return Allocation(config=self.inner.decide(snap).config)\n",
        encoding="utf-8",
    )
    info = site / "mine_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mine-pkg\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[oak.policies]\nmine = mine_pkg:Mine\n", encoding="utf-8")
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    names = subprocess.run(
        [sys.executable, "-c", "import oak; print(' '.join(oak.policy_names()))"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
        timeout=120,
    )
    assert "mine" in names.stdout.split()
    res = _oak(
        ["compare", "--workload", "small", "--policies", "sia,mine", "--seeds", "1", "--json", "o.json"], tmp_path, env
    )
    assert res.returncode == 0, res.stderr
    runs = json.loads((tmp_path / "o.json").read_text())["runs"]
    jct = {(r["policy"], r["failure_rate"]): r["mean_jct_s"] for r in runs}
    assert jct[("mine", 0.0)] == jct[("sia", 0.0)] and jct[("mine", 0.1)] == jct[("sia", 0.1)]  # same decisions


def test_the_plugin_runs_real_training_processes(tmp_path: Path) -> None:
    """One policy code path for both worlds: the example plug-in schedules real (tiny) workers in ``oak run``."""
    pytest.importorskip("torch")
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "jobs:\n"
        "  - {name: a, model: tiny, target_steps: 30, max_gpus: 2, batch_size: 8, ckpt_every: 10}\n"
        "  - {name: b, model: tiny, target_steps: 20, max_gpus: 1, batch_size: 8, ckpt_every: 10, submit_s: 1}\n",
        encoding="utf-8",
    )
    args = ["run", str(jobs), "--policy", f"{EXAMPLE}:ShortestRemainingFirst", "--cpu-slots", "2"]
    res = _oak([*args, "--round-seconds", "3", "--run-dir", "r", "--json", "r.json"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    run = json.loads((tmp_path / "r.json").read_text())["runs"][0]
    assert run["policy"] == "srtf" and run["unfinished_jobs"] == 0


def test_an_edited_plugin_is_not_read_back_from_the_results_store(tmp_path: Path) -> None:
    from oak.policies import registry
    from oak.reproduce.store import spec_key
    from oak.sim.compare import RunSpec

    plug = tmp_path / "p.py"
    body = "from oak import PolicyBase, make_policy\nclass P(PolicyBase):\n    name = 'p'\n"
    body += "    def decide(self, snap):\n        return make_policy('sia').decide(snap)\n"
    plug.write_text(body, encoding="utf-8")
    ref = f"{plug}:P"
    before = spec_key(RunSpec(ref, "small", 0.0, 0))
    registry._PLUGINS.pop(ref)
    plug.write_text(body + "# edited\n", encoding="utf-8")
    assert spec_key(RunSpec(ref, "small", 0.0, 0)) != before


def test_import_oak_is_light() -> None:
    """``import oak`` loads the public names lazily (the command starts fast)."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, oak; print('numpy' in sys.modules); oak.Allocation; print('numpy' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.split() == ["False", "True"]


def test_compare_keeps_a_plugin_named_like_a_builtin_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin whose ``name`` is ``oak`` beside ``oak`` gets its own row (labelled as given), not a merged
    mean over both; the CI is Student's t over the seeds, and none with one seed."""
    from typer.testing import CliRunner

    from oak.cli.main import app

    (tmp_path / "clash.py").write_text(
        "import numpy as np\n"
        "from oak.model.snapshot import Allocation\n"
        "from oak.policies.base import PolicyBase\n\n"
        "class Idle(PolicyBase):\n"
        "    name = 'oak'\n"
        "    def decide(self, snap):\n"
        "        return Allocation(config=np.full(snap.num_jobs, -1))\n"
    )
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "c.json"
    args = ["compare", "--workload", "small", "--policies", "oak,clash.py:Idle"]
    args += ["--failure-rates", "0.1", "--seeds", "2", "--workers", "1", "--horizon", "20000", "--json", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    rows = {r["policy"]: r for r in json.loads(out.read_text())["summary"]}
    assert set(rows) == {"oak", "oak (clash.py:Idle)"}, rows
    assert all(r["seeds"] == 2 for r in rows.values())
    assert rows["oak"]["mean_jct_s"] < rows["oak (clash.py:Idle)"]["mean_jct_s"]
    # the idle policy's jobs are unfinished: its JCT cells are lower bounds, marked as such; oak's are not
    lines = [line for line in res.output.splitlines() if "│" in line]
    idle = next(line for line in lines if "Idle" in line)
    assert idle.count("≥ ") == 3 and "≥" not in next(line for line in lines if "│ oak " in line), res.output
    runs = json.loads(out.read_text())["runs"]
    means = np.array([r["mean_jct_s"] for r in runs if r["policy"] == "oak"])
    from scipy import stats

    expected = stats.t.ppf(0.975, 1) * means.std(ddof=1) / np.sqrt(2)
    assert rows["oak"]["mean_jct_ci95_s"] == pytest.approx(expected, rel=1e-12)


BAD_ALLOCATIONS = [
    ("np.full(snap.num_jobs, np.nan)", None, "returned configurations that are not whole numbers (e.g. nan)"),
    ("np.full(snap.num_jobs, 0.5)", None, "returned configurations that are not whole numbers (e.g. 0.5)"),
    ("np.array(['a'] * snap.num_jobs)", None, "returned configurations of type <U1; expected integers"),
    ("np.full(snap.num_jobs, -1)", "np.full((snap.num_jobs, 3), 99)", "GPUs on node 0, which has 4 available"),
    ("np.full(snap.num_jobs, -1)", "np.full((snap.num_jobs, 3), -1)", "GPUs on node 0; expected a count >= 0"),
    ("np.full(snap.num_jobs, -1)", "np.zeros((snap.num_jobs, 2))", "expected (1, 3) (one row per job, one column"),
    (
        "np.full(snap.num_jobs, -1)",
        "np.full((snap.num_jobs, 3), 4)",
        "an invalid placement (12 GPUs on nodes [0, 1, 2])",
    ),
]


@pytest.mark.parametrize(("config", "replicas", "message"), BAD_ALLOCATIONS, ids=[m for _, _, m in BAD_ALLOCATIONS])
def test_an_allocation_the_world_cannot_run_is_a_policy_error(
    tmp_path: Path, config: str, replicas: str | None, message: str
) -> None:
    """Replicas out of bounds, of the wrong shape or over a node, and configurations that are not integers,
    are one PolicyError naming the policy and the round (exit 2 in the CLI), not a RuntimeError traceback or
    a silent cast of NaN."""
    from oak.errors import PolicyError
    from oak.model.cluster import cluster_preset
    from oak.model.snapshot import Allocation
    from oak.policies.base import PolicyBase
    from oak.sim import Simulator
    from oak.workloads import load_workload

    class Bad(PolicyBase):
        name = "bad"

        def decide(self, snap: Any) -> Allocation:
            rep = None if replicas is None else eval(replicas)
            return Allocation(config=eval(config), replicas=rep)

    wl = load_workload("small")
    with pytest.raises(PolicyError) as caught:
        Simulator(wl, cluster_preset("paper-12")).run(Bad(), 0.0, 0)
    assert "policy 'bad' at t = 0 s" in str(caught.value) and message in str(caught.value), str(caught.value)
