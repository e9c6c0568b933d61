"""The one registry of named policies: what each is, how it is built, what it accepts and costs.

The command line (``--policy``, parameter scoping), ``oak reproduce`` (seeds, run costs) and the report
(labels, colours) read :data:`REGISTRY`; nothing else lists policies.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oak.errors import OakInputError
from oak.policies.base import Policy

#: Parameters the command line can set, and which policies take them.
PAPER_PARAMS = frozenset({"p", "alpha", "k_max", "mu_na", "solver"})
GA_PARAMS = frozenset({"population", "generations", "seed"})


@dataclass(frozen=True)
class PolicySpec:
    """A registered policy.

    ``params``: the command-line parameters it accepts (``solver``: it solves a round MILP; ``seed``: it is
    stochastic and draws from the run's seed). ``cost``: its run time relative to an ``oak-paper`` run (to start
    the longest runs first). ``label``/``color``: how reports name and draw it (colour None: a default grey)."""

    name: str
    description: str
    label: str
    build: Callable[..., Policy]
    params: frozenset[str]
    cost: float = 1.0
    color: str | None = None
    #: a plug-in's source digest (its defining file), so that stored results of an edited plug-in are not reused
    source_digest: str | None = None

    @property
    def stochastic(self) -> bool:
        return "seed" in self.params

    def make(self, **overrides: Any) -> Policy:
        """The policy with ``overrides`` (constructor keywords); ``solver`` and ``seed`` are dropped where they
        do not apply, so that every caller may pass them."""
        return self.build(**{k: v for k, v in overrides.items() if k not in ("solver", "seed") or k in self.params})


def _oak(**kw: Any) -> Policy:
    from oak.policies.restart_aware import RestartAwareOakPolicy

    return RestartAwareOakPolicy(**kw)


def _paper(preset: str) -> Callable[..., Policy]:
    def build(**kw: Any) -> Policy:
        from oak.policies.oak import OakPolicy
        from oak.scoring import RestartFactor

        presets: dict[str, dict[str, Any]] = {
            "oak-paper": {},
            "goodput": {"age_key": False, "restart_factor": RestartFactor.OFF},
            "oak-no-age": {"age_key": False},
            "oak-no-restart": {"restart_factor": RestartFactor.OFF},
            "oak-aggregate": {"restart_factor": RestartFactor.AGGREGATE},
            "oak-sia-factor": {"restart_factor": RestartFactor.SIA},
        }
        return OakPolicy.with_params(name=preset, **{**presets[preset], **kw})

    return build


def _sia(paper: bool) -> Callable[..., Policy]:
    def build(**kw: Any) -> Policy:
        from oak.policies.sia import SiaPolicy

        if paper:
            return SiaPolicy(**{"p": 0.5, "lambda_n": -1.1, "name": "sia-paper", **kw})
        return SiaPolicy(**kw)

    return build


def _pollux(**kw: Any) -> Policy:
    from oak.policies.pollux import PolluxPolicy

    return PolluxPolicy(**kw)


def _hybrid(**kw: Any) -> Policy:
    from oak.policies.hybrid import HybridOakPolicy

    return HybridOakPolicy.with_params(**kw)


def _gavel_throughput(**kw: Any) -> Policy:
    from oak.policies.gavel_throughput import GavelThroughputPolicy

    return GavelThroughputPolicy(**kw)


def _gavel(**kw: Any) -> Policy:
    from oak.policies.gavel import GavelPolicy

    return GavelPolicy(**kw)


def _drf(**kw: Any) -> Policy:
    from oak.policies.drf import DrfPolicy

    return DrfPolicy(**kw)


_SPECS = (
    PolicySpec(
        "oak",
        (
            "OAK as shipped: (G·m)^p − θ_i (θ by remaining time), measured restart and switching cost only on "
            "moves, restores priced, exact MILP"
        ),
        "OAK (product)",
        _oak,
        frozenset({"p", "solver"}),
        color="#17becf",
    ),
    PolicySpec(
        "oak-paper",
        "OAK read literally (paper §III): U = (G·r)^p·K + μ_na·#unallocated, r on every configuration",
        "OAK (paper)",
        _paper("oak-paper"),
        PAPER_PARAMS,
        color="#1f77b4",
    ),
    PolicySpec(
        "goodput",
        "the paper's 'Sia' cell (a): OAK's MILP with r = 1 and K = 1 (goodput only, p = 0.5)",
        "goodput (paper's Sia)",
        _paper("goodput"),
        PAPER_PARAMS,
        color="#d62728",
    ),
    PolicySpec(
        "oak-no-age",
        "ablation (c) of oak-paper: without the age key (K = 1)",
        "OAK without age key",
        _paper("oak-no-age"),
        PAPER_PARAMS,
    ),
    PolicySpec(
        "oak-no-restart",
        "ablation (b) of oak-paper: without the restart factor (r = 1)",
        "OAK without restart factor",
        _paper("oak-no-restart"),
        PAPER_PARAMS,
    ),
    PolicySpec(
        "oak-sia-factor",
        "ablation (b) read with Sia's factor: oak-paper with Sia's reallocation factor on moves, not r",
        "OAK with Sia's factor",
        _paper("oak-sia-factor"),
        PAPER_PARAMS,
    ),
    PolicySpec(
        "oak-aggregate",
        "§V-D: oak-paper with the aggregate factor max(A − n·P, 0)/(A + P) instead of the decomposed one",
        "OAK, aggregate factor",
        _paper("oak-aggregate"),
        PAPER_PARAMS,
    ),
    PolicySpec(
        "sia",
        "faithful Sia (reference §5): p = −0.5, λ_n = 1.1, realloc factor on changed configurations",
        "sia (faithful Sia)",
        _sia(paper=False),
        frozenset({"solver"}),
        color="#ff7f0e",
    ),
    PolicySpec(
        "sia-paper",
        "the paper's 'Sia' as the Sia artifact runs it: Sia's policy at p = +0.5, λ_n = −1.1 (a penalty)",
        "sia-paper (Sia at p = +0.5)",
        _sia(paper=True),
        frozenset({"solver"}),
        color="#e377c2",
    ),
    PolicySpec(
        "pollux",
        "Pollux (reference §4): NSGA-II over replicas per (job, node), power mean (p = −1) of fair-share speedups",
        "Pollux",
        _pollux,
        GA_PARAMS,
        cost=12.0,  # measured with the compiled NSGA-II engine
        color="#2ca02c",
    ),
    PolicySpec(
        "hybrid-oak",
        "Hybrid OAK (paper §V-E): OAK's objective optimised by NSGA-II (population 20 × 20 generations)",
        "Hybrid OAK",
        _hybrid,
        GA_PARAMS | (PAPER_PARAMS - {"solver"}),
        cost=3.0,
        color="#9467bd",
    ),
    PolicySpec(
        "gavel",
        "Gavel finish-time fairness (reference §6): min max finish-time ratio at rigid GPU counts",
        "Gavel",
        _gavel,
        frozenset(),
        cost=3.0,
        color="#8c564b",
    ),
    PolicySpec(
        "gavel-throughput",
        "the Sia artifact's Gavel: maximum summed normalised throughput at rigid GPU counts, 360 s rounds",
        "Gavel (sum throughput)",
        _gavel_throughput,
        frozenset({"solver"}),
        color="#c49c94",
    ),
    PolicySpec(
        "drf",
        "DRF (reference §8): max-min fair GPU counts up to each job's demand, no throughput model",
        "DRF",
        _drf,
        frozenset(),
        color="#7f7f7f",
    ),
)

REGISTRY: dict[str, PolicySpec] = {s.name: s for s in _SPECS}


def policy_spec(name: str) -> PolicySpec:
    """The registry entry of ``name``: a built-in, a policy an installed package publishes under the
    ``oak.policies`` entry-point group, or a user's ``MODULE:NAME`` / ``FILE.py:NAME`` (loaded once per process;
    an import error, a missing name or an object that is not a policy is an input error naming what is wrong)."""
    spec = REGISTRY.get(name) or _PLUGINS.get(name)
    if spec is not None:
        return spec
    eps = _entry_points() if ":" not in name else {}
    if name in eps:
        try:
            obj = eps[name].load()
        except Exception as exc:
            raise OakInputError(
                f"policy {name!r} (entry point {eps[name].value!r}): cannot load it: {type(exc).__name__}: {exc}"
            ) from exc
        spec = _plugin_spec(name, obj, f"entry point {eps[name].value}")
    else:
        spec = _load_plugin(name)
    _PLUGINS[name] = spec
    return spec


def policy_label(name: str) -> str:
    """How reports name a policy: its registry label (a plug-in's own ``name``), or ``name`` itself."""
    try:
        return policy_spec(name).label
    except OakInputError:
        return name


def make_policy(name: str, **overrides: Any) -> Policy:
    """Build a registered policy; ``overrides`` go to its constructor (e.g. ``p=0.25``, ``solver='highs'``)."""
    return policy_spec(name).make(**overrides)


def policy_names() -> tuple[str, ...]:
    """The built-in policies and those installed packages publish (entry-point group ``oak.policies``)."""
    return tuple(REGISTRY) + tuple(sorted(set(_entry_points()) - set(REGISTRY)))


POLICY_DESCRIPTIONS: dict[str, str] = {s.name: s.description for s in _SPECS}


# ---------------------------------------------------------------------------------------------- plug-ins
#: Entry-point group through which installed packages publish policies (``name = "pkg.module:Class"``).
ENTRY_POINT_GROUP = "oak.policies"
_PLUGINS: dict[str, PolicySpec] = {}


def _import_target(ref: str, target: str) -> Any:
    """The module ``target``: a dotted module path, or a ``.py`` file (loaded under a name derived from its
    absolute path, so that process-pool workers load the same module)."""
    import importlib
    import importlib.util
    import sys

    try:
        if target.endswith(".py") or "/" in target or "\\" in target:
            path = Path(target).expanduser().resolve()
            if path.is_dir():
                raise OakInputError(f"policy {ref!r}: {str(path)!r} is a folder; expected a .py file (FILE.py:NAME)")
            if not path.is_file():
                raise OakInputError(f"policy {ref!r}: no such file {str(path)!r}")
            name = f"oak_plugin_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:10]}"
            if name in sys.modules:
                return sys.modules[name]
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise OakInputError(f"policy {ref!r}: cannot load {str(path)!r} as Python")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
            return module
        return importlib.import_module(target)
    except OakInputError:
        raise
    except ModuleNotFoundError as exc:
        raise OakInputError(f"policy {ref!r}: cannot import module {target!r} ({exc})") from exc
    except Exception as exc:
        raise OakInputError(f"policy {ref!r}: importing {target!r} failed: {type(exc).__name__}: {exc}") from exc


def _plugin_spec(ref: str, obj: Any, where: str) -> PolicySpec:
    """A registry entry for a user's policy factory ``obj`` (a class or a function returning a policy)."""
    import inspect

    from oak.policies.base import Policy as PolicyProtocol

    if not callable(obj):
        raise OakInputError(f"policy {ref!r}: {where} is a {type(obj).__name__}, not a policy class or factory")
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        sig = None
    try:
        sample = obj()
    except Exception as exc:
        raise OakInputError(
            f"policy {ref!r}: {where}() failed: {type(exc).__name__}: {exc} (a policy must be constructible "
            "without arguments; parameters need defaults)"
        ) from exc
    if not isinstance(sample, PolicyProtocol):
        missing = [
            m
            for m in ("name", "decide", "reads_clock", "needs_node_goodput", "avoids_failing_nodes")
            if not hasattr(sample, m)
        ]
        raise OakInputError(
            f"policy {ref!r}: {where}() returned a {type(sample).__name__}, not a policy (missing: "
            f"{', '.join(missing)}; subclass oak.PolicyBase and define name and decide, see docs/policies.md)"
        )
    accepted: frozenset[str] = frozenset()
    if sig is not None:
        kinds = {p.kind for p in sig.parameters.values()}
        names = {n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        accepted = frozenset(names | ({"seed", "solver"} if inspect.Parameter.VAR_KEYWORD in kinds else set()))
    doc = (inspect.getdoc(obj) or "").split("\n")[0] or f"user policy {ref}"
    digest = None
    with contextlib.suppress(TypeError, OSError):
        source = inspect.getsourcefile(obj)
        if source is not None:
            digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()[:16]
    return PolicySpec(ref, doc, str(sample.name), obj, accepted, source_digest=digest)


def _load_plugin(ref: str) -> PolicySpec:
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr.isidentifier():
        raise OakInputError(
            f"policy {ref!r} is unknown; expected one of {', '.join(policy_names())}, or a user policy as "
            "MODULE:NAME or FILE.py:NAME (docs/policies.md)"
        )
    module = _import_target(ref, target)
    obj = getattr(module, attr, None)
    if obj is None:
        raise OakInputError(f"policy {ref!r}: {target!r} defines no {attr!r}")
    return _plugin_spec(ref, obj, f"{target}:{attr}")


def _entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
