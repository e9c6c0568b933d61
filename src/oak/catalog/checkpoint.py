"""Checkpoint write time per application: what one periodic checkpoint costs a running job (seconds).

A checkpoint holds the model's weights and the optimiser's state (fp32): SGD with momentum 2×, Adam 3× the
parameter bytes. It is written to shared storage at ``WRITE_BANDWIDTH`` bytes/s per job, plus ``FIXED_S`` of
synchronisation, serialisation and fsync; the job makes no progress meanwhile (its GPUs count as checkpoint
GPU-time). Parameter counts are the published model sizes of the applications in Pollux's and Sia's workloads
(``../shared/reference/baselines.md``); the bandwidth and fixed cost are assumptions, stated here and in
docs/model.md ("Checkpoints"), and the runtime measures the real ones (``oak run``'s workers report their
checkpoint write time).

====================  ==================================  ============  ==========  ===========
application           model                               parameters    optimiser   write (s)
====================  ==================================  ============  ==========  ===========
bert                  BERT-base fine-tuning (SQuAD)       110 M         Adam (3×)   1 + 2.64
cifar10               ResNet-18                           11.7 M        SGD (2×)    1 + 0.19
deepspeech2           DeepSpeech2                         38 M          Adam (3×)   1 + 0.91
imagenet              ResNet-50                           25.6 M        SGD (2×)    1 + 0.41
ncf                   NeuMF (MovieLens)                   5.4 M         Adam (3×)   1 + 0.13
yolov3                YOLOv3                              62 M          SGD (2×)    1 + 0.99
====================  ==================================  ============  ==========  ===========
"""

from __future__ import annotations

#: bytes per second one job writes to shared storage (an assumption: a parallel file system's per-client rate)
WRITE_BANDWIDTH = 0.5e9
#: seconds of synchronisation, serialisation and fsync per checkpoint (an assumption)
FIXED_S = 1.0

#: application -> (parameters, optimiser state multiple of the fp32 weights)
MODEL_STATE: dict[str, tuple[float, int]] = {
    "bert": (110e6, 3),
    "cifar10": (11.7e6, 2),
    "deepspeech2": (38e6, 3),
    "imagenet": (25.6e6, 2),
    "ncf": (5.4e6, 3),
    "yolov3": (62e6, 2),
}
#: a job whose application is not listed (a runtime job's learned model): until measured, this many seconds
DEFAULT_WRITE_S = 2.0


def checkpoint_write_s(application: str) -> float:
    """Seconds one checkpoint of ``application`` takes (the module's table; ``DEFAULT_WRITE_S`` if unlisted)."""
    state = MODEL_STATE.get(application)
    if state is None:
        return DEFAULT_WRITE_S
    params, multiple = state
    return FIXED_S + params * 4.0 * multiple / WRITE_BANDWIDTH
