"""How the embedded workloads are composed from paper §IV-B (documented in docs/workloads.md).

The paper names the families (CIFAR-10, ImageNet, YOLOv3, BERT, DeepSpeech2), the job counts (small 4,
medium 12, congestion 24, stress 40) and says arrivals are timed to overlap and contend; it publishes
neither the job lists nor the GPU bounds. These recipes are our composition: a fixed cycle of families,
evenly spaced arrivals, and per-family GPU bounds. ``python -m oak.workloads.compose DIR`` rewrites the
shipped CSVs; a test checks that the shipped files equal this recipe's output.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

#: (min_gpus, max_gpus, gpus) per family on the paper's 12-GPU cluster. ``gpus`` is the demand (the count a
#: rigid scheduler runs the job at): the median ``num_replicas`` of the family in Sia's ``newtrace`` workloads
#: (64-GPU cluster; cifar10 8, deepspeech2 8, bert 12, yolov3 4, imagenet 12) scaled by 12/64 and rounded to
#: the nearest Sia configuration (1, 2, 4 GPUs), never below min_gpus.
GPU_BOUNDS: dict[str, tuple[int, int, int]] = {
    "cifar10": (1, 8, 2),
    "deepspeech2": (1, 8, 2),
    "bert": (1, 8, 2),
    "yolov3": (1, 8, 1),
    "imagenet": (2, 12, 2),
}


@dataclass(frozen=True)
class Recipe:
    """``families`` in arrival order, one job every ``spacing_s`` seconds from t = 0."""

    name: str
    description: str
    families: tuple[str, ...]
    spacing_s: float


_MEDIUM = (
    "cifar10", "deepspeech2", "bert", "yolov3", "imagenet", "cifar10",
    "deepspeech2", "bert", "yolov3", "cifar10", "deepspeech2", "cifar10",
)  # fmt: skip
_STRESS_CYCLE = (
    "cifar10", "deepspeech2", "bert", "yolov3", "cifar10",
    "deepspeech2", "bert", "yolov3", "imagenet", "cifar10",
)  # fmt: skip

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("small", "4 jobs, light load: one of each short family", ("cifar10", "deepspeech2", "bert", "yolov3"), 600.0),
        Recipe("medium", "12 jobs, typical usage: all five families, one ImageNet", _MEDIUM, 900.0),
        Recipe("congestion", "24 jobs, resource scarcity: medium's mix twice, arrivals twice as dense", _MEDIUM * 2, 450.0),
        Recipe("stress", "40 jobs, queue always full: four ImageNets, arrivals every 5 min", _STRESS_CYCLE * 4, 300.0),
        Recipe(
            "ckpt-variance",
            "12 jobs mixing restart costs from 25 s (DeepSpeech2) to 250 s (ImageNet)",
            (
                "deepspeech2", "imagenet", "deepspeech2", "bert", "deepspeech2", "yolov3",
                "deepspeech2", "bert", "cifar10", "yolov3", "deepspeech2", "cifar10",
            ),
            600.0,
        ),
    )
}  # fmt: skip


def render(recipe: Recipe) -> str:
    """The workload as OAK-format CSV text."""
    lines = [f"# {recipe.name}: {recipe.description}", "name,submit_time_s,application,min_gpus,max_gpus,gpus"]
    for i, fam in enumerate(recipe.families):
        lo, hi, demand = GPU_BOUNDS[fam]
        lines.append(f"{fam}-{i},{i * recipe.spacing_s:.0f},{fam},{lo},{hi},{demand}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path(__file__).parent / "data"
    out.mkdir(parents=True, exist_ok=True)
    for r in RECIPES.values():
        (out / f"{r.name}.csv").write_text(render(r), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
