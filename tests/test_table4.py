"""The Table IV harness: its job set and its report (the runs themselves are `oak reproduce table4`)."""

from __future__ import annotations

from pathlib import Path

from oak.reproduce.table4 import SCALES, table4_jobs, write_table4_report


def test_table4_jobs_follow_the_paper_and_small_scale_divides_by_ten() -> None:
    full = table4_jobs(SCALES["full"]).jobs
    assert [j.target_steps for j in full] == [1500, 1500, 2000, 2000]
    assert [(j.min_gpus, j.max_gpus) for j in full] == [(1, 2), (1, 2), (1, 4), (1, 4)]
    assert [j.submit_s for j in full] == [0, 0, 30, 60]
    assert all(j.restart_penalty_s == 100 and j.model == "resnet18" for j in full)
    small = table4_jobs(SCALES["small"]).jobs
    assert [j.target_steps * 10 for j in small] == [j.target_steps for j in full]
    assert [j.submit_s * 10 for j in small] == [j.submit_s for j in full]
    assert SCALES["small"].round_s * 10 == SCALES["full"].round_s


def test_table4_report_puts_paper_beside_ours(tmp_path: Path) -> None:
    def run(policy: str, lam: float, seed: int, mean: float) -> dict[str, object]:
        return {
            "policy": policy,
            "failure_rate": lam,
            "seed": seed,
            "mean_jct_s": mean,
            "max_jct_s": 2 * mean,
            "decision_ms_mean": 0.5,
            "restarts_per_job": 1.0,
            "unfinished_jobs": 0,
        }

    results = [run("oak-paper", 0.1, s, 100.0 + s) for s in range(2)] + [run("goodput", 0.1, 0, 200.0)]
    path = write_table4_report(tmp_path, results, "small", "4 cpu", 12.0)
    text = path.read_text()
    assert "| oak-paper | 0.1 | 2 | 100.5 | 0.7 |" in text
    assert "297.3" in text and "487.6" in text  # the paper's OAK and Sia means at λ = 0.1, as reference
    assert "ours -49.8 %" in text
    assert "Small scale" in text
