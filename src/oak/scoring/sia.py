"""Sia's reallocation factor (reference §5.4): scoring, used by the Sia policies, the traces and OAK's ablation
that values moves as Sia does."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from oak.model.snapshot import FloatArray

#: Sia policy's assumed checkpoint-restore cost S_i per application (reference §5.4), seconds.
SIA_RESTART_COST_S: Mapping[str, float] = {
    "deepspeech2": 25.0,
    "imagenet": 250.0,
    "cifar10": 30.0,
    "bert": 120.0,
    "yolov3": 45.0,
}
SIA_DEFAULT_RESTART_COST_S = 30.0


def sia_restart_factor(age_s: FloatArray, restarts: FloatArray, cost_s: FloatArray) -> FloatArray:
    """r = max(T − K·S, 0)/(T + S), r = 1 if T < S (reference §5.4)."""
    r = np.maximum(age_s - restarts * cost_s, 0.0) / (age_s + cost_s)
    return np.asarray(np.where(age_s < cost_s, 1.0, r), dtype=np.float64)
