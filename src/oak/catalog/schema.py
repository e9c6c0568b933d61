"""The application catalog: fitted throughput models and gradient-statistics curves per application.

The catalog is the only model input the product needs at run time (it never reads the raw profiles). It is
stored as JSON (``src/oak/catalog/data/catalog.json``), validated on load; malformed files raise
:class:`oak.errors.OakInputError` naming the file and the JSON path of the bad field.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from oak.errors import OakInputError
from oak.goodput.throughput import ThroughputParams

FloatArray = npt.NDArray[np.float64]

#: Version of the catalog JSON layout; bumped on incompatible changes.
CATALOG_FORMAT_VERSION = 1

_PARAM_FIELDS = ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma")


@dataclass(frozen=True)
class GpuProfile:
    """Throughput model of one application on one GPU type.

    Attributes:
        gpu_type: GPU type name ("aws", "rtx", "dgx-ext", ...; "pollux" = the original Pollux cluster).
        params: fitted throughput parameters (seconds; β_c in s/sample).
        b_min, b_max: smallest / largest allowed atomic (per-GPU) batch (samples).
        fit_rmsle_step: root-mean-squared log error of the synchronising step time over the profiled keys.
        fit_rmsle_acc: root-mean-squared log error of the accumulation step time over the profiled keys.
        n_observations: distinct (N, R, b) keys the fit used.
        max_nodes_profiled, max_replicas_profiled: largest N and R in the profile.
    """

    gpu_type: str
    params: ThroughputParams
    b_min: int
    b_max: int
    fit_rmsle_step: float
    fit_rmsle_acc: float
    n_observations: int
    max_nodes_profiled: int
    max_replicas_profiled: int


@dataclass(frozen=True)
class ValidationCurves:
    """Per-epoch training progress and gradient statistics, one column per profiled global batch size.

    Attributes:
        batches: profiled global batch sizes, ascending (samples).
        epoch_progress: cumulative progress at the end of each epoch, in base-batch (M0) iterations; the minimum
            over batch files of that epoch's progress; length = max_epochs.
        grad_sqr: per batch file, per epoch: squared gradient norm estimate |g|².
        grad_var: per batch file, per epoch: gradient variance estimate tr(Σ)/M0.
    """

    batches: tuple[int, ...]
    epoch_progress: tuple[float, ...]
    grad_sqr: tuple[tuple[float, ...], ...]
    grad_var: tuple[tuple[float, ...], ...]

    @cached_property
    def _batches_arr(self) -> FloatArray:
        return np.asarray(self.batches, dtype=np.float64)

    @cached_property
    def _progress_arr(self) -> FloatArray:
        return np.asarray(self.epoch_progress, dtype=np.float64)

    @cached_property
    def _sqr_arr(self) -> FloatArray:
        """Shape (epochs, batches)."""
        return np.asarray(self.grad_sqr, dtype=np.float64).T.copy()

    @cached_property
    def _var_arr(self) -> FloatArray:
        """Shape (epochs, batches)."""
        return np.asarray(self.grad_var, dtype=np.float64).T.copy()

    def epoch_of(self, progress: float) -> int:
        """Completed epochs at ``progress`` (base-batch iterations), clipped to [0, epochs − 1]."""
        done = int(np.searchsorted(self._progress_arr, progress, side="right"))
        return min(max(done, 0), len(self.epoch_progress) - 1)

    def grad_stats(self, epoch: int, batch: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
        """(sqr, var) at ``epoch`` for global batch sizes ``batch``, linear in M, clamped at the profiled ends."""
        e = min(max(int(epoch), 0), len(self.epoch_progress) - 1)
        m = np.asarray(batch, dtype=np.float64)
        sqr = np.interp(m, self._batches_arr, self._sqr_arr[e])
        var = np.interp(m, self._batches_arr, self._var_arr[e])
        return np.asarray(sqr, dtype=np.float64), np.asarray(var, dtype=np.float64)


@dataclass(frozen=True)
class AppProfile:
    """Everything the scheduler and simulator know about one application.

    Attributes:
        name: application name (cifar10, imagenet, bert, yolov3, deepspeech2, ncf).
        m0: base global batch size M0 (samples) = smallest validated batch.
        m_max: largest allowed global batch size (samples) = largest validated batch.
        max_epochs: epochs of progress to completion.
        calibration: simulated goodput is divided by this slowdown factor (dimensionless).
        restart_penalty_s: OAK restart penalty P_restart (seconds).
        sia_restart_cost_s: Sia policy restart cost S_i (seconds).
        gpus: throughput model per GPU type.
        validation: progress and gradient statistics per epoch.
    """

    name: str
    m0: int
    m_max: int
    max_epochs: int
    calibration: float
    restart_penalty_s: float
    sia_restart_cost_s: float
    gpus: dict[str, GpuProfile] = field(hash=False)
    validation: ValidationCurves

    @property
    def total_progress(self) -> float:
        """Progress at completion (base-batch iterations)."""
        return self.validation.epoch_progress[-1]

    def epoch_of(self, progress: float) -> int:
        """Completed epochs at ``progress`` (base-batch iterations), clipped to [0, max_epochs − 1]."""
        return self.validation.epoch_of(progress)

    def grad_stats(self, epoch: int, batch: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
        """(sqr, var) at ``epoch`` for global batch sizes ``batch`` (interpolated in M, clamped)."""
        return self.validation.grad_stats(epoch, batch)


@dataclass(frozen=True)
class Catalog:
    """All applications plus the provenance of the data they were built from."""

    apps: dict[str, AppProfile] = field(hash=False)
    provenance: dict[str, object] = field(hash=False)

    @classmethod
    def load(cls, path: str | Path | None = None) -> Catalog:
        """Read and validate a catalog file; default: the catalog packaged with OAK."""
        if path is None:
            res = resources.files("oak.catalog").joinpath("data", "catalog.json")
            source = str(res)
            try:
                text = res.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise OakInputError(f"{source}: cannot read the packaged catalog: {exc}") from exc
        else:
            source = str(path)
            try:
                text = Path(path).read_text(encoding="utf-8-sig")  # json refuses a leading BOM
            except (OSError, UnicodeDecodeError) as exc:
                raise OakInputError(f"{source}: cannot read catalog file: {exc}") from exc
        return cls.from_json(text, source=source)

    def to_json(self) -> str:
        """Canonical JSON text: sorted keys, floats written with repr (exact round trip), trailing newline."""
        doc = {
            "apps": {name: _app_to_obj(app) for name, app in self.apps.items()},
            "provenance": self.provenance,
        }
        return json.dumps(doc, sort_keys=True, indent=1, allow_nan=False, ensure_ascii=True) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = "<catalog>") -> Catalog:
        """Parse and validate catalog JSON; errors name ``source`` and the JSON path of the bad field."""
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OakInputError(f"{source}: not valid JSON: {exc}") from exc
        return _Reader(source).catalog(doc)

    def app(self, name: str) -> AppProfile:
        """The application called ``name``; KeyError listing the known names otherwise."""
        try:
            return self.apps[name]
        except KeyError:
            raise KeyError(f"unknown application {name!r}; catalog has {sorted(self.apps)}") from None


# ---------------------------------------------------------------------------------------------------------
# serialisation


def _app_to_obj(app: AppProfile) -> dict[str, object]:
    v = app.validation
    return {
        "name": app.name,
        "m0": app.m0,
        "m_max": app.m_max,
        "max_epochs": app.max_epochs,
        "calibration": app.calibration,
        "restart_penalty_s": app.restart_penalty_s,
        "sia_restart_cost_s": app.sia_restart_cost_s,
        "gpus": {t: _gpu_to_obj(g) for t, g in app.gpus.items()},
        "validation": {
            "batches": list(v.batches),
            "epoch_progress": list(v.epoch_progress),
            "grad_sqr": [list(row) for row in v.grad_sqr],
            "grad_var": [list(row) for row in v.grad_var],
        },
    }


def _gpu_to_obj(g: GpuProfile) -> dict[str, object]:
    return {
        "gpu_type": g.gpu_type,
        "params": {name: getattr(g.params, name) for name in _PARAM_FIELDS},
        "b_min": g.b_min,
        "b_max": g.b_max,
        "fit_rmsle_step": g.fit_rmsle_step,
        "fit_rmsle_acc": g.fit_rmsle_acc,
        "n_observations": g.n_observations,
        "max_nodes_profiled": g.max_nodes_profiled,
        "max_replicas_profiled": g.max_replicas_profiled,
    }


class _Reader:
    """Validating JSON → dataclass converter; every error names the file and the JSON path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, msg: str) -> OakInputError:
        return OakInputError(f"{self.source}: field {path}: {msg}")

    def obj(self, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a JSON object, got {_kind(value)}")
        return value

    def get(self, parent: Mapping[str, Any], key: str, path: str) -> Any:
        if key not in parent:
            raise self.fail(f"{path}.{key}", "missing required field")
        return parent[key]

    def string(self, parent: Mapping[str, Any], key: str, path: str) -> str:
        value = self.get(parent, key, path)
        if not isinstance(value, str) or not value:
            raise self.fail(f"{path}.{key}", f"expected a non-empty string, got {value!r}")
        return value

    def integer(self, parent: Mapping[str, Any], key: str, path: str, minimum: int | None = None) -> int:
        value = self.get(parent, key, path)
        return self.int_value(value, f"{path}.{key}", minimum)

    def int_value(self, value: Any, path: str, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.fail(path, f"expected an integer >= {minimum}, got {value!r}")
        return value

    def number(self, parent: Mapping[str, Any], key: str, path: str, minimum: float | None = None) -> float:
        return self.float_value(self.get(parent, key, path), f"{path}.{key}", minimum)

    def float_value(self, value: Any, path: str, minimum: float | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(path, f"expected a number, got {value!r}")
        out = float(value)
        if not math.isfinite(out):
            raise self.fail(path, f"expected a finite number, got {value!r}")
        if minimum is not None and out < minimum:
            raise self.fail(path, f"expected a number >= {minimum}, got {value!r}")
        return out

    def array(self, parent: Mapping[str, Any], key: str, path: str) -> list[Any]:
        value = self.get(parent, key, path)
        if not isinstance(value, list):
            raise self.fail(f"{path}.{key}", f"expected a JSON array, got {_kind(value)}")
        return value

    def floats(self, parent: Mapping[str, Any], key: str, path: str, length: int) -> tuple[float, ...]:
        return self.float_list(self.get(parent, key, path), f"{path}.{key}", length)

    def float_list(self, value: Any, path: str, length: int) -> tuple[float, ...]:
        if not isinstance(value, list):
            raise self.fail(path, f"expected a JSON array, got {_kind(value)}")
        if len(value) != length:
            raise self.fail(path, f"expected {length} values, got {len(value)}")
        return tuple(self.float_value(x, f"{path}[{i}]") for i, x in enumerate(value))

    # -- structure ---------------------------------------------------------------------------------------

    def catalog(self, doc: Any) -> Catalog:
        root = self.obj(doc, "$")
        prov = self.obj(self.get(root, "provenance", "$"), "$.provenance")
        version = self.integer(prov, "format_version", "$.provenance")
        if version != CATALOG_FORMAT_VERSION:
            raise self.fail(
                "$.provenance.format_version",
                f"unsupported catalog format version {version}, expected {CATALOG_FORMAT_VERSION}",
            )
        apps_obj = self.obj(self.get(root, "apps", "$"), "$.apps")
        if not apps_obj:
            raise self.fail("$.apps", "expected at least one application")
        apps = {name: self.app(name, value, f"$.apps.{name}") for name, value in apps_obj.items()}
        return Catalog(apps=apps, provenance=dict(prov))

    def app(self, key: str, value: Any, path: str) -> AppProfile:
        o = self.obj(value, path)
        name = self.string(o, "name", path)
        if name != key:
            raise self.fail(f"{path}.name", f"expected {key!r} (the application's key), got {name!r}")
        m0 = self.integer(o, "m0", path, minimum=1)
        m_max = self.integer(o, "m_max", path, minimum=m0)
        max_epochs = self.integer(o, "max_epochs", path, minimum=1)
        calibration = self.number(o, "calibration", path)
        if calibration <= 0.0:
            raise self.fail(f"{path}.calibration", f"expected a positive number, got {calibration!r}")
        restart = self.number(o, "restart_penalty_s", path, minimum=0.0)
        sia_cost = self.number(o, "sia_restart_cost_s", path, minimum=0.0)
        gpus_obj = self.obj(self.get(o, "gpus", path), f"{path}.gpus")
        gpus = {t: self.gpu(t, g, f"{path}.gpus.{t}") for t, g in gpus_obj.items()}
        validation = self.validation(self.get(o, "validation", path), f"{path}.validation", max_epochs)
        if validation.batches[0] != m0 or validation.batches[-1] != m_max:
            raise self.fail(
                f"{path}.validation.batches",
                f"expected to span [m0, m_max] = [{m0}, {m_max}], got {list(validation.batches)}",
            )
        return AppProfile(
            name=name,
            m0=m0,
            m_max=m_max,
            max_epochs=max_epochs,
            calibration=calibration,
            restart_penalty_s=restart,
            sia_restart_cost_s=sia_cost,
            gpus=gpus,
            validation=validation,
        )

    def gpu(self, key: str, value: Any, path: str) -> GpuProfile:
        o = self.obj(value, path)
        gpu_type = self.string(o, "gpu_type", path)
        if gpu_type != key:
            raise self.fail(f"{path}.gpu_type", f"expected {key!r} (the GPU type's key), got {gpu_type!r}")
        p = self.obj(self.get(o, "params", path), f"{path}.params")
        values = [self.number(p, name, f"{path}.params", minimum=0.0) for name in _PARAM_FIELDS]
        if not 1.0 <= values[-1] <= 10.0:
            raise self.fail(f"{path}.params.gamma", f"expected a number in [1, 10], got {values[-1]!r}")
        if values[0] + values[1] <= 0.0:
            raise self.fail(f"{path}.params", "alpha_c and beta_c cannot both be 0")
        b_min = self.integer(o, "b_min", path, minimum=1)
        b_max = self.integer(o, "b_max", path, minimum=b_min)
        return GpuProfile(
            gpu_type=gpu_type,
            params=ThroughputParams(*values),
            b_min=b_min,
            b_max=b_max,
            fit_rmsle_step=self.number(o, "fit_rmsle_step", path, minimum=0.0),
            fit_rmsle_acc=self.number(o, "fit_rmsle_acc", path, minimum=0.0),
            n_observations=self.integer(o, "n_observations", path, minimum=1),
            max_nodes_profiled=self.integer(o, "max_nodes_profiled", path, minimum=1),
            max_replicas_profiled=self.integer(o, "max_replicas_profiled", path, minimum=1),
        )

    def validation(self, value: Any, path: str, max_epochs: int) -> ValidationCurves:
        o = self.obj(value, path)
        raw_batches = self.array(o, "batches", path)
        if not raw_batches:
            raise self.fail(f"{path}.batches", "expected at least one batch size")
        batches = tuple(self.int_value(x, f"{path}.batches[{i}]", minimum=1) for i, x in enumerate(raw_batches))
        if any(b2 <= b1 for b1, b2 in itertools.pairwise(batches)):
            raise self.fail(f"{path}.batches", f"expected strictly increasing values, got {list(batches)}")
        progress = self.floats(o, "epoch_progress", path, max_epochs)
        if any(p < 0.0 for p in progress) or any(p2 < p1 for p1, p2 in itertools.pairwise(progress)):
            raise self.fail(f"{path}.epoch_progress", "expected non-negative, non-decreasing values")
        curves = []
        for key in ("grad_sqr", "grad_var"):
            rows = self.array(o, key, path)
            if len(rows) != len(batches):
                raise self.fail(f"{path}.{key}", f"expected {len(batches)} rows (one per batch), got {len(rows)}")
            curves.append(tuple(self.float_list(row, f"{path}.{key}[{i}]", max_epochs) for i, row in enumerate(rows)))
        return ValidationCurves(batches=batches, epoch_progress=progress, grad_sqr=curves[0], grad_var=curves[1])


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return repr(value)
