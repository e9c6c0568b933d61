"""Build the application catalog from raw profiles (``oak catalog build DIR --out PATH``).

Everything numeric in the catalog is computed here from the profile files, except the per-application constants
in :data:`APP_CONSTANTS`, which are documented facts of the reference systems:

* max_epochs and the calibration slowdown: reference §7.2 (Sia applications.py);
* restart_penalty_s: the OAK paper's P_restart (§IV-D), 30 s for applications not listed;
* sia_restart_cost_s: Sia's policy restart cost S_i, reference §7.2 (Sia applications.py), 30 s otherwise;
* b_max of deepspeech2 on rtx overridden to 57, reference §7.2 (Sia applications.py).

The output carries no timestamps, so rebuilding from the same files with the same numpy/scipy gives a
byte-identical file.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import scipy

from oak.catalog.fit import fit_throughput, fitter_settings
from oak.catalog.profiles import (
    placement_bsz_range,
    profile_files,
    profile_gpu_types,
    read_observations,
    read_validation,
    validation_files,
)
from oak.catalog.schema import CATALOG_FORMAT_VERSION, AppProfile, Catalog, GpuProfile, ValidationCurves
from oak.errors import OakInputError

CONSTANTS_SOURCE = "reference §7.2 (Sia applications.py)"
RESTART_PENALTY_SOURCE = "OAK paper §IV-D (P_restart)"
DEFAULT_RESTART_PENALTY_S = 30.0
DEFAULT_SIA_RESTART_COST_S = 30.0


@dataclass(frozen=True)
class AppConstants:
    """Documented per-application constants (not measured by the builder).

    Attributes:
        max_epochs: epochs of progress to completion.
        calibration: simulated-goodput slowdown factor (dimensionless).
        restart_penalty_s: OAK restart penalty P_restart (seconds).
        sia_restart_cost_s: Sia policy restart cost S_i (seconds).
    """

    max_epochs: int
    calibration: float
    restart_penalty_s: float
    sia_restart_cost_s: float


#: max_epochs, calibration, S_i: reference §7.2 (Sia applications.py); P_restart: OAK paper §IV-D.
APP_CONSTANTS: dict[str, AppConstants] = {
    "cifar10": AppConstants(max_epochs=100, calibration=1.8, restart_penalty_s=50.0, sia_restart_cost_s=30.0),
    "imagenet": AppConstants(max_epochs=90, calibration=1.2, restart_penalty_s=250.0, sia_restart_cost_s=250.0),
    "bert": AppConstants(max_epochs=2, calibration=1.2, restart_penalty_s=120.0, sia_restart_cost_s=120.0),
    "yolov3": AppConstants(max_epochs=50, calibration=1.2, restart_penalty_s=80.0, sia_restart_cost_s=45.0),
    "deepspeech2": AppConstants(max_epochs=80, calibration=1.2, restart_penalty_s=25.0, sia_restart_cost_s=25.0),
    "ncf": AppConstants(max_epochs=10, calibration=1.5, restart_penalty_s=25.0, sia_restart_cost_s=30.0),
}

#: (app, GPU type) -> b_max overriding the profiled maximum; reference §7.2 (Sia applications.py).
B_MAX_OVERRIDES: dict[tuple[str, str], int] = {("deepspeech2", "rtx"): 57}

#: Applications built by default (gpt_pmp, a pipeline-parallel model, is skipped).
DEFAULT_APPS: tuple[str, ...] = ("cifar10", "imagenet", "bert", "yolov3", "deepspeech2", "ncf")

BUILD_COMMAND = "oak catalog build <dir>"


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Run the block with scipy's bundled OpenBLAS limited to one thread, then restore its setting.

    L-BFGS-B calls BLAS on 7-vectors thousands of times per fit; OpenBLAS's thread pool makes that up to 10x
    slower on a busy machine. Best effort: does nothing where scipy does not bundle OpenBLAS (wheels do).
    """
    restore: list[tuple[Callable[[int], object], int]] = []
    libdir = Path(scipy.__file__).resolve().parent.parent / "scipy.libs"
    try:
        libs = sorted(libdir.glob("libscipy_openblas*.so*")) if libdir.is_dir() else []
        for so in libs:
            lib = ctypes.CDLL(str(so))
            for suffix in ("", "64_"):
                get = getattr(lib, f"scipy_openblas_get_num_threads{suffix}", None)
                put = getattr(lib, f"scipy_openblas_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    restore.append((put, int(get())))
                    put(1)
                    break
    except OSError:
        pass
    try:
        yield
    finally:
        for put, threads in restore:
            put(threads)


def _sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise OakInputError(f"{path}: cannot read: {exc}") from exc


def _validation(app: str, app_dir: Path, max_epochs: int, inputs: list[Path]) -> ValidationCurves:
    files = validation_files(app_dir)
    if not files:
        raise OakInputError(f"{app_dir}: no validation-<batch>.csv files for application {app!r}")
    runs = []
    for batch, path in files:
        inputs.append(path)
        run = read_validation(path, batch)
        if len(run.progress) < max_epochs:
            raise OakInputError(
                f"{path}: field progress: expected at least max_epochs={max_epochs} rows (one per epoch) "
                f"for {app!r}, got {len(run.progress)}"
            )
        runs.append(run)
    progress = tuple(min(run.progress[e] for run in runs) for e in range(max_epochs))
    return ValidationCurves(
        batches=tuple(run.batch for run in runs),
        epoch_progress=progress,
        grad_sqr=tuple(tuple(run.grad_sqr[:max_epochs]) for run in runs),
        grad_var=tuple(tuple(run.grad_var[:max_epochs]) for run in runs),
    )


def _gpu_profile(app: str, gpu_type: str, app_dir: Path, inputs: list[Path]) -> GpuProfile:
    placements, scalability = profile_files(app_dir, gpu_type)
    inputs.append(placements)
    if scalability is not None:
        inputs.append(scalability)
    obs = read_observations(placements, scalability)
    fit = fit_throughput(obs)
    b_min, b_max = placement_bsz_range(placements)
    b_max = B_MAX_OVERRIDES.get((app, gpu_type), b_max)
    if b_max < b_min:
        raise OakInputError(f"{placements}: field local_bsz: b_max override {b_max} is below b_min {b_min}")
    return GpuProfile(
        gpu_type=gpu_type,
        params=fit.params,
        b_min=b_min,
        b_max=b_max,
        fit_rmsle_step=fit.rmsle_step,
        fit_rmsle_acc=fit.rmsle_acc,
        n_observations=fit.n_observations,
        max_nodes_profiled=int(obs.nodes.max()),
        max_replicas_profiled=int(obs.replicas.max()),
    )


def build_app(app: str, app_dir: Path, inputs: list[Path]) -> AppProfile:
    """Build one application's profile from its folder; appends every file it read to ``inputs``."""
    if app not in APP_CONSTANTS:
        raise OakInputError(f"{app_dir}: no documented constants for application {app!r}")
    if not app_dir.is_dir():
        raise OakInputError(f"{app_dir}: profile folder of application {app!r} not found")
    const = APP_CONSTANTS[app]
    validation = _validation(app, app_dir, const.max_epochs, inputs)
    gpu_types = profile_gpu_types(app_dir)
    if not gpu_types:
        raise OakInputError(f"{app_dir}: no placements[-<gpu>].csv file for application {app!r}")
    gpus = {t: _gpu_profile(app, t, app_dir, inputs) for t in gpu_types}
    return AppProfile(
        name=app,
        m0=validation.batches[0],
        m_max=validation.batches[-1],
        max_epochs=const.max_epochs,
        calibration=const.calibration,
        restart_penalty_s=const.restart_penalty_s,
        sia_restart_cost_s=const.sia_restart_cost_s,
        gpus=gpus,
        validation=validation,
    )


def gpu_type_gaps(catalog: Catalog) -> dict[str, list[str]]:
    """Per application, the GPU types another application of ``catalog`` has a profile of and it has not (a
    placements file missing from its folder): its jobs cannot run on those types."""
    every = sorted({t for app in catalog.apps.values() for t in app.gpus})
    gaps = {name: [t for t in every if t not in app.gpus] for name, app in catalog.apps.items()}
    return {name: missing for name, missing in gaps.items() if missing}


def build_catalog(profiles_dir: Path, apps: Sequence[str] = DEFAULT_APPS) -> Catalog:
    """Fit every application in ``apps`` on every GPU type with a placements file under ``profiles_dir``.

    ``profiles_dir`` holds one folder per application (the layout of ``sia/profiles``).
    """
    root = Path(profiles_dir)
    if not root.is_dir():
        raise OakInputError(f"{root}: profiles folder not found")
    inputs: list[Path] = []
    with single_threaded_blas():
        built = {app: build_app(app, root / app, inputs) for app in apps}
    hashes = {path.relative_to(root).as_posix(): _sha256(path) for path in inputs}
    provenance: dict[str, object] = {
        "format_version": CATALOG_FORMAT_VERSION,
        "command": BUILD_COMMAND,
        "source": "profiles of the Sia (SOSP 2023) artifact, extending Pollux (OSDI 2021): <dir>/<app>/*.csv",
        "inputs_sha256": dict(sorted(hashes.items())),
        "fitter": fitter_settings(),
        "constants": {
            "source": CONSTANTS_SOURCE,
            "restart_penalty_source": RESTART_PENALTY_SOURCE,
            "default_restart_penalty_s": DEFAULT_RESTART_PENALTY_S,
            "default_sia_restart_cost_s": DEFAULT_SIA_RESTART_COST_S,
            "apps": {
                app: {
                    "max_epochs": APP_CONSTANTS[app].max_epochs,
                    "calibration": APP_CONSTANTS[app].calibration,
                    "restart_penalty_s": APP_CONSTANTS[app].restart_penalty_s,
                    "sia_restart_cost_s": APP_CONSTANTS[app].sia_restart_cost_s,
                }
                for app in built
            },
            "b_max_overrides": {f"{a}/{t}": v for (a, t), v in sorted(B_MAX_OVERRIDES.items())},
        },
        "derived": {
            "m0_m_max": "smallest / largest batch of the validation-<batch>.csv files",
            "b_min_b_max": "smallest / largest local_bsz of placements[-<gpu>].csv (before overrides)",
            "epoch_progress": "per epoch (row), the minimum over validation files of progress",
            "gpu_type_pollux": "profile files without a GPU suffix (the original Pollux cluster)",
        },
    }
    return Catalog(apps=built, provenance=provenance)


def write_catalog(catalog: Catalog, path: Path) -> None:
    """Write ``catalog`` as canonical JSON to ``path`` atomically (``oak.io_util.write_bytes_atomic``)."""
    from oak.io_util import write_bytes_atomic

    write_bytes_atomic(path, catalog.to_json().encode("utf-8"))
