"""Workload files: the embedded ones equal their documented recipe; both CSV formats load; bad input is named."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from oak.errors import OakInputError
from oak.workloads import builtin_workloads, load_workload, read_workload_csv
from oak.workloads.compose import RECIPES, render

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "sia" / "workloads"


def test_embedded_workloads_match_recipes() -> None:
    assert set(builtin_workloads()) == {"small", "medium", "congestion", "stress", "ckpt-variance"}
    for name, recipe in RECIPES.items():
        shipped = resources.files("oak.workloads").joinpath("data", f"{name}.csv").read_text(encoding="utf-8")
        assert shipped == render(recipe), f"{name}.csv differs from its recipe: run python -m oak.workloads.compose"


@pytest.mark.parametrize(("name", "count"), [("small", 4), ("medium", 12), ("congestion", 24), ("stress", 40)])
def test_paper_job_counts(name: str, count: int) -> None:
    wl = load_workload(name)
    assert len(wl.jobs) == count
    assert {j.application for j in wl.jobs} <= {"cifar10", "imagenet", "yolov3", "bert", "deepspeech2"}


def test_sia_format() -> None:
    text = "name,time,application,num_replicas,batch_size\nj0,10.5,cifar10,4,256\nj1,3,bert,2,12\n"
    wl = read_workload_csv(text, "t.csv", "t")
    assert [j.name for j in wl.jobs] == ["j1", "j0"]  # sorted by submission
    assert wl.jobs[1].max_gpus == 4 and wl.jobs[1].batch_size == 256


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/data not present")
def test_sia_trace_files_load() -> None:
    wl = load_workload(str(SHARED / "newtrace" / "workload-1.csv"))
    assert len(wl.jobs) > 100


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty workload"),
        ("a,b\n1,2\n", "matches no workload format"),
        ("name,submit_time_s,application,min_gpus,max_gpus\n", "no jobs"),
        ("name,submit_time_s,application,min_gpus,max_gpus\nj,x,cifar10,1,2\n", ":2: field 'submit_time_s'"),
        ("name,submit_time_s,application,min_gpus,max_gpus\nj,-5,cifar10,1,2\n", ">= 0"),
        ("name,submit_time_s,application,min_gpus,max_gpus\nj,0,cifar10,0,2\n", "'min_gpus'"),
        ("name,submit_time_s,application,min_gpus,max_gpus\nj,0,cifar10,3,2\n", "below min_gpus"),
        (
            "name,submit_time_s,application,min_gpus,max_gpus\nj,0,cifar10,1,2\nj,5,bert,1,2\n",
            "duplicate job name",
        ),
        ("name,submit_time_s,application,min_gpus,max_gpus\nj,0,cifar10,1\n", "4 fields; expected 5"),
        (
            "name,submit_time_s,application,min_gpus,max_gpus\nj,0,gpt9,1,2\n",
            "'application' = 'gpt9' is unknown",
        ),
        ("name,submit_time_s,application,min_gpus,max_gpus\nj,nan,cifar10,1,2\n", "finite"),
        (  # a misspelt optional column was ignored: the job ran with the default penalty
            "name,submit_time_s,application,min_gpus,max_gpus,restart_penalty\nj,0,cifar10,1,2,500\n",
            "column 'restart_penalty' is not one OAK reads; did you mean 'restart_penalty_s'",
        ),
        ("name,submit_time_s,application,min_gpus,max_gpus,GPUs\nj,0,cifar10,1,2,2\n", "did you mean 'gpus'"),
        (
            "name,time,application,Num_Replica,batch_size\nj,0,cifar10,4,128\n",
            r"missing num_replicas; misspelt\? 'Num_Replica' for 'num_replicas'",
        ),
        (  # Sia's demand column in the OAK format was ignored: the job ran at max_gpus
            "name,submit_time_s,application,min_gpus,max_gpus,num_replicas\nj,0,cifar10,1,8,2\n",
            "column 'num_replicas' is the demand of Sia's format; in this format .* the column 'gpus'",
        ),
        # Python's number forms that no CSV writer produces were read silently: 1_000 as 1000, ٣ as 3
        ("name,submit_time_s,application,min_gpus,max_gpus\nj,1_000,cifar10,1,2\n", "'1_000'; expected a number"),
        ("name,submit_time_s,application,min_gpus,max_gpus\nj,0,cifar10,1,\u0663\n", "expected an integer"),
        # a form feed or U+2028 inside a row split it in two (two jobs, or an error on the wrong line)
        ("name,submit_time_s,application,min_gpus,max_gpus\nj\x0ck,0,cifar10,1,2\nl,0,bert,\n", "w.csv:3: 4"),
    ],
)
def test_malformed_workloads(text: str, message: str) -> None:
    with pytest.raises(OakInputError, match=message):
        read_workload_csv(text, "w.csv", "w", known_apps={"cifar10", "bert"})


def test_a_row_is_split_at_line_ends_only() -> None:
    """A job name holding a form feed or a Unicode line separator is one job on its own line, whatever the line
    ends (\\n, \\r\\n, \\r)."""
    for end in ("\n", "\r\n", "\r"):
        rows = ["name,submit_time_s,application,min_gpus,max_gpus", "a\x0cb,0,cifar10,1,2", "c\u2028d,5,bert,1,2"]
        w = read_workload_csv(end.join(rows) + end, "w.csv", "w", known_apps={"cifar10", "bert"})
        assert [j.name for j in w.jobs] == ["a\x0cb", "c\u2028d"]


def test_other_columns_are_ignored() -> None:
    """Columns OAK does not read and that are no near miss of one it reads (notes, a trace's own fields) are
    ignored, in either format."""
    oak = read_workload_csv(
        "name,submit_time_s,application,min_gpus,max_gpus,note\nj,0,cifar10,1,2,first try\n", "w.csv", "w"
    )
    sia = read_workload_csv("name,time,application,num_replicas,batch_size,duration\nj,0,cifar10,4,128,60\n", "s", "s")
    assert oak.jobs[0].max_gpus == 2 and sia.jobs[0].max_gpus == 4


def test_missing_file() -> None:
    with pytest.raises(OakInputError, match="no such file"):
        load_workload("/nonexistent/w.csv")


def test_a_file_named_like_an_embedded_workload_is_not_silently_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file ``small`` in the working folder was ignored for the embedded ``small``; the name is now refused as
    ambiguous, and ``./small`` loads the file."""
    from oak.errors import OakInputError
    from oak.workloads import load_workload

    monkeypatch.chdir(tmp_path)
    (tmp_path / "small").write_text("name,submit_time_s,application,min_gpus,max_gpus\nmine,0,cifar10,1,4\n")
    with pytest.raises(OakInputError, match=r"'small': both an embedded workload and a file here .* give ./small"):
        load_workload("small")
    assert [j.name for j in load_workload("./small").jobs] == ["mine"]
    (tmp_path / "small").unlink()
    assert len(load_workload("small").jobs) == 4
