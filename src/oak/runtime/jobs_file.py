"""The runtime's jobs file (YAML): what to train, how far, on how many devices, and when it arrives.

Layout::

    jobs:
      - name: cifar-1            # unique; letters, digits, '-', '_', '.'
        model: resnet18          # tiny | resnet18 (the packaged worker's models), or instead:
        # command: [python, train.py, --lr, "0.1"]   # your own training script (docs/jobs.md; no shell)
        # env: {MY_FLAG: "1"}    # optional, command jobs: extra environment variables
        target_steps: 1500       # optimiser steps to completion (command jobs: optional, else reported)
        min_gpus: 1              # device bounds of any allocation
        max_gpus: 2
        submit_s: 0              # submission offset from the start of the run (s)
        batch_size: 128          # global batch (samples), split over the allocated devices
        ckpt_every: 50           # checkpoint interval (steps), or "advised": the scheduler's advice
        restart_penalty_s: 100   # P_restart of the restart factor (s)
        application: cifar10     # optional: catalog application whose goodput model scores this job
        width_mult: 1.0          # optional: channel multiplier of resnet18 (CPU runs shrink it)
        data: /path/to/cifar     # optional: real CIFAR-10 batches instead of synthetic data
        min_step_s: 0            # optional: pad every step to at least this long (emulates a slower model)
    defaults: {ckpt_every: 50}   # optional: values every job inherits unless it sets its own

Every error names the file, the line and the field, the value and what was expected
(:class:`oak.errors.OakInputError`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from oak.errors import OakInputError
from oak.workloads.loader import MAX_PENALTY_S, MAX_TIME_S

MODELS = ("tiny", "resnet18")
#: Catalog application that scores each packaged model when the job does not name one.
DEFAULT_APPLICATION = {"tiny": "cifar10", "resnet18": "cifar10"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: Longest step padding a job may ask for (s).
MAX_MIN_STEP_S = 60.0
#: Largest integer field value: exact as a float and within int64.
_MAX_INT = 2**53
_FIELDS = (
    "name",
    "model",
    "target_steps",
    "min_gpus",
    "max_gpus",
    "submit_s",
    "batch_size",
    "ckpt_every",
    "restart_penalty_s",
    "application",
    "width_mult",
    "data",
    "min_step_s",
    "command",
    "env",
    "workdir",
)
#: Longest command (arguments) and environment a command job may carry.
MAX_COMMAND_ARGS = 1024
MAX_ENV_VARS = 256
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: Variables the job contract sets for every rank; a jobs file may not override them.
CONTRACT_VARS = frozenset(
    {
        "OAK_JOB",
        "OAK_JOB_DIR",
        "OAK_RANK",
        "OAK_LOCAL_RANK",
        "OAK_WORLD_SIZE",
        "OAK_CHECKPOINT_DIR",
        "OAK_STATUS_FILE",
        "OAK_INCARNATION",
        "OAK_WORKDIR",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES",
        "OAK_CHECKPOINT_INTERVAL_S",  # the scheduler's advice (docs/jobs.md)
        "OMP_NUM_THREADS",  # the rank's share of the devices (CPU slots) or 1
        "MKL_NUM_THREADS",
    }
)


@dataclass(frozen=True)
class RuntimeJob:
    """One job of a jobs file (units: steps, devices, seconds, samples).

    A *command job* (``command`` set, ``model`` empty) runs the user's argument list under the job contract
    (docs/jobs.md); its ``target_steps`` is 0 when the file gives none (the job may report its total) and its
    ``application`` is empty unless the file names a catalog model as the prior of its learned goodput."""

    name: str
    model: str
    target_steps: int
    min_gpus: int
    max_gpus: int
    submit_s: float
    batch_size: int
    ckpt_every: int
    restart_penalty_s: float
    application: str
    width_mult: float = 1.0
    data: str | None = None
    min_step_s: float = 0.0
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    #: where a command job's ranks start: the jobs file's ``workdir``, else (``oak submit``) the submitter's
    #: working directory; None: the scheduler's
    workdir: str | None = None

    @property
    def is_command(self) -> bool:
        """A user's own command under the job contract (not the packaged worker)."""
        return bool(self.command)


@dataclass(frozen=True)
class JobsFile:
    path: str
    jobs: tuple[RuntimeJob, ...]


def job_to_dict(job: RuntimeJob) -> dict[str, Any]:
    """A job as JSON-able data (a live run's submissions are stored so)."""
    d = dataclasses.asdict(job)
    d["command"] = list(job.command)
    d["env"] = [list(kv) for kv in job.env]
    return d


def job_from_dict(d: dict[str, Any]) -> RuntimeJob:
    """The job ``job_to_dict`` stored."""
    d = dict(d)
    d["command"] = tuple(d.get("command") or ())
    d["env"] = tuple((str(k), str(v)) for k, v in d.get("env") or ())
    return RuntimeJob(**d)


#: The most nodes a jobs file's aliases may expand to, all aliases together. A merge of a defaults block into each
#: of a thousand jobs is ~10^4; an alias bomb (aliases of aliases, 10 per level) is 10^k for k levels and, if
#: expanded, freezes the scheduler for minutes (issue [hardening], row 2).
MAX_ALIAS_NODES = 100_000


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps each mapping's line numbers (1-based) under the key ``__lines__`` and refuses
    aliases that would expand to more than MAX_ALIAS_NODES nodes."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._alias_nodes = 0
        self._sizes: dict[int, int] = {}
        self.own_keys: dict[int, int] = {}
        """Per mapping node flattened by a merge key (``<<``): how many of its pairs, last in it, are its own
        (the merged ones come first and may repeat a key the mapping gives itself)."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        if id(node) not in self.own_keys:
            self.own_keys[id(node)] = sum(1 for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge")
        super().flatten_mapping(node)  # type: ignore[no-untyped-call]

    def _size(self, node: yaml.Node) -> int:
        """Nodes of ``node`` with every alias inside expanded (memoised: shared subtrees are counted where they
        appear, but measured once)."""
        known = self._sizes.get(id(node))
        if known is not None:
            return known
        if isinstance(node, yaml.MappingNode):
            n = 1 + sum(self._size(k) + self._size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            n = 1 + sum(self._size(v) for v in node.value)
        else:
            n = 1
        self._sizes[id(node)] = n
        return n

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            node = self.anchors.get(event.anchor)
            if node is not None:
                self._alias_nodes += self._size(node)
                if self._alias_nodes > MAX_ALIAS_NODES:
                    raise yaml.composer.ComposerError(
                        None,
                        None,
                        f"its aliases expand to more than {MAX_ALIAS_NODES:,} nodes (at alias *{event.anchor})",
                        event.start_mark,
                    )
        return super().compose_node(parent, index)  # type: ignore[no-any-return]


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _literal(item: yaml.Node, value: Any) -> Any:
    """A plain number's text as written (``1e-3`` stays "1e-3", not "0.001"): command arguments and environment
    values are strings the user typed."""
    return item.value if isinstance(item, yaml.ScalarNode) and item.tag in _NUMBER_TAGS else value


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    own = loader.own_keys.get(id(node), len(node.value))
    for k, _ in node.value[len(node.value) - own :]:  # YAML requires unique keys; PyYAML keeps the last one
        key = k.value if isinstance(k, yaml.ScalarNode) else id(k)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {_show(key)} given twice in one mapping", k.start_mark
            )
        seen.add(key)
    mapping = loader.construct_mapping(node, deep=True)
    for k, v in node.value:
        key = str(k.value)
        if key == "command" and isinstance(v, yaml.SequenceNode) and isinstance(mapping.get(key), list):
            mapping[key] = [_literal(item, got) for item, got in zip(v.value, mapping[key], strict=False)]
        elif key == "env" and isinstance(v, yaml.MappingNode) and isinstance(mapping.get(key), dict):
            env = mapping[key]
            for ek, ev in v.value:
                if isinstance(ek, yaml.ScalarNode) and ek.value in env:
                    env[ek.value] = _literal(ev, env[ek.value])
    lines = {str(k.value): k.start_mark.line + 1 for k, _ in node.value}
    mapping["__line__"] = node.start_mark.line + 1
    mapping["__lines__"] = lines
    return mapping


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# YAML 1.2's core schema for plain scalars, as docs/jobs.md promises. PyYAML follows YAML 1.1, where `1e2` is a
# string, `010` is 8 (octal), `12:30` is 750 (base 60), `1_000` is 1000, `on`/`yes` are true and `2020-01-01` is a
# date; under YAML 1.2 (and JSON, and Python) `1e2` is 100.0, `010` is 10, and the others are strings.
_CORE = {
    "tag:yaml.org,2002:null": (r"~|null|Null|NULL|", "~nN"),
    "tag:yaml.org,2002:bool": (r"true|True|TRUE|false|False|FALSE", "tTfF"),
    "tag:yaml.org,2002:int": (r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
    "tag:yaml.org,2002:float": (
        r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
        "-+.0123456789",
    ),
}
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _CORE and not tag.endswith((":timestamp", ":value"))]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _tag, (_pattern, _first) in _CORE.items():
    _Loader.add_implicit_resolver(
        _tag, re.compile(f"^(?:{_pattern})$"), [*_first] + ([""] if _tag.endswith("null") else [])
    )


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    """A YAML 1.2 integer: decimal (leading zeros too: `010` is 10), `0o` octal or `0x` hexadecimal."""
    text = str(loader.construct_scalar(node))
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _show(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for an error message: shortened, and safe for integers too long to print and for deeply
    nested values (a message must never raise)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # ints beyond sys.get_int_max_str_digits(), absurd nesting
        text = f"<{type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_jobs_file(path: str | Path, known_apps: tuple[str, ...] | None = None) -> JobsFile:
    """Parse and validate a jobs file; ``known_apps``: catalog applications allowed as ``application``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise OakInputError(f"{p}: cannot read the jobs file ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise OakInputError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    return parse_jobs(text, str(p), known_apps)


def parse_jobs(text: str, source: str, known_apps: tuple[str, ...] | None = None) -> JobsFile:
    """Parse jobs-file ``text`` (``source`` names it in errors)."""
    try:
        doc = yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise OakInputError(f"{where}: not valid YAML ({e.problem})") from None
    except yaml.YAMLError as e:
        raise OakInputError(f"{source}: not valid YAML ({e})") from None
    except RecursionError:
        raise OakInputError(f"{source}: not valid YAML (nested too deeply)") from None
    except Exception as e:  # PyYAML's constructors on odd input: int('') for "!!int", a bad date, a too-long int
        raise OakInputError(f"{source}: not valid YAML ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(doc, dict) or "jobs" not in doc:
        raise OakInputError(f"{source}: expected a mapping with a 'jobs' list at the top level")
    unknown_top = sorted((k for k in doc if k not in ("jobs", "defaults", "__line__", "__lines__")), key=str)
    if unknown_top:
        line = doc["__lines__"].get(str(unknown_top[0]), doc["__line__"])
        raise OakInputError(
            f"{source}:{line}: unknown top-level key {_show(unknown_top[0])}; expected 'jobs', 'defaults'"
        )
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise OakInputError(f"{source}:{doc['__lines__'].get('defaults', 1)}: 'defaults' must be a mapping")
    jobs_node = doc["jobs"]
    if not isinstance(jobs_node, list) or not jobs_node:
        raise OakInputError(f"{source}:{doc['__lines__'].get('jobs', 1)}: 'jobs' must be a non-empty list")
    jobs: list[RuntimeJob] = []
    seen: dict[str, int] = {}
    for k, entry in enumerate(jobs_node):
        if not isinstance(entry, dict):
            raise OakInputError(f"{source}: jobs[{k}] must be a mapping of fields, got {_show(entry)}")
        job = _job(entry, defaults, source, k, known_apps)
        line = entry["__line__"]
        if job.name in seen:
            raise OakInputError(
                f"{source}:{line}: jobs[{k}].name={job.name!r} duplicates the job on line {seen[job.name]}"
            )
        seen[job.name] = line
        jobs.append(job)
    return JobsFile(path=source, jobs=tuple(sorted(jobs, key=lambda j: (j.submit_s, j.name))))


def _cifar_folder_problem(data: str) -> str:
    """What is wrong with ``data`` as a CIFAR-10 batches folder ("" when nothing is)."""
    try:
        folder = Path(data).expanduser()
        if not folder.is_dir():
            return "no such directory"
        if not any(p.name.startswith("data_batch_") for p in folder.iterdir()):
            return "no data_batch_* files in it"
    except (OSError, ValueError, RuntimeError) as exc:  # embedded NUL, unknown ~user, unreadable folder
        return f"not a usable path ({exc})"
    return ""


def _job(
    entry: dict[str, Any], defaults: dict[str, Any], source: str, k: int, known_apps: tuple[str, ...] | None
) -> RuntimeJob:
    lines: dict[str, int] = entry["__lines__"]

    def where(field: Any) -> str:
        line = lines.get(str(field), defaults.get("__lines__", {}).get(str(field), entry["__line__"]))
        return f"{source}:{line}: jobs[{k}].{field}"

    for key in list(entry) + list(defaults):
        if key not in _FIELDS and key not in ("__line__", "__lines__"):
            raise OakInputError(f"{where(key)}: unknown field; expected one of {', '.join(_FIELDS)}")

    def get(field: str, default: Any = ...) -> Any:
        if field in entry:
            return entry[field]
        if field in defaults:
            return defaults[field]
        if default is ...:
            raise OakInputError(f"{where(field)}: missing (required)")
        return default

    def integer(field: str, minimum: int, default: Any = ...) -> int:
        v = get(field, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise OakInputError(f"{where(field)}={_show(v)}: expected an integer >= {minimum}")
        if v > _MAX_INT:  # the runtime does float and int64 arithmetic on these
            raise OakInputError(f"{where(field)}={_show(v)}: expected an integer <= {_MAX_INT} (2^53)")
        return int(v)

    def number(
        field: str, minimum: float, default: Any = ..., strict: bool = False, maximum: float = math.inf
    ) -> float:
        v = get(field, default)
        try:
            f = float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan
        except OverflowError:  # an integer beyond the float range
            f = math.inf
        if not math.isfinite(f) or (f <= minimum if strict else f < minimum):
            rel = ">" if strict else ">="
            raise OakInputError(f"{where(field)}={_show(v)}: expected a finite number {rel} {minimum:g}")
        if f > maximum:
            raise OakInputError(f"{where(field)}={_show(v)}: expected at most {maximum:g}")
        return f

    name = get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):  # fullmatch: '$' alone would accept "a\n"
        raise OakInputError(
            f"{where('name')}={_show(name)}: expected 1-64 characters of letters, digits, '-', '_', '.', "
            "starting with a letter or digit"
        )
    command = _command(entry.get("command"), where) if "command" in entry else ()
    if command:
        if "model" in entry:
            raise OakInputError(f"{where('model')}: a job has either 'model' or 'command', not both")
        for f in ("width_mult", "data", "min_step_s"):
            if f in entry:
                raise OakInputError(f"{where(f)}: only for the packaged worker's models, not a 'command' job")
        model = ""
        target = integer("target_steps", 1) if "target_steps" in entry or "target_steps" in defaults else 0
    else:
        for f in ("env", "workdir"):
            if f in entry:
                raise OakInputError(f"{where(f)}: only for a 'command' job")
        given: Any = get("model") if "model" in entry or "model" in defaults else None
        if given is None:
            raise OakInputError(f"{where('model')}: missing; a job needs 'model' ({', '.join(MODELS)}) or 'command'")
        if given not in MODELS:
            raise OakInputError(f"{where('model')}={_show(given)}: expected one of {', '.join(MODELS)}")
        model = str(given)
        target = integer("target_steps", 1)
    lo = integer("min_gpus", 1, 1)
    hi = integer("max_gpus", 1, lo)
    if hi < lo:
        raise OakInputError(f"{where('max_gpus')}={hi}: expected >= min_gpus ({lo})")
    submit = number("submit_s", 0.0, 0.0, maximum=MAX_TIME_S)
    batch = integer("batch_size", 1, 128)
    if batch < hi:
        raise OakInputError(
            f"{where('batch_size')}={batch}: expected >= max_gpus ({hi}) so that every device gets a sample"
        )
    # "advised": as the scheduler advises (its interval from the job's checkpoint cost and failure rate, in steps)
    given_ckpt = get("ckpt_every", 50)
    if isinstance(given_ckpt, str) and given_ckpt != "advised":
        raise OakInputError(f"{where('ckpt_every')}={_show(given_ckpt)}: expected an integer >= 1 or 'advised'")
    ckpt = 0 if given_ckpt == "advised" else integer("ckpt_every", 1, 50)
    penalty = number("restart_penalty_s", 0.0, 30.0, maximum=MAX_PENALTY_S)
    app = get("application", DEFAULT_APPLICATION[model] if model else "")
    if command and app == "":
        pass  # learned online from the job's own step times, with a linear-scaling prior
    elif not isinstance(app, str) or (known_apps is not None and app not in known_apps):
        expected = ", ".join(known_apps) if known_apps is not None else "a catalog application name"
        raise OakInputError(f"{where('application')}={_show(app)}: expected one of {expected}")
    width = number("width_mult", 0.0, 1.0, strict=True)
    data = get("data", None)
    if data is not None and not isinstance(data, str):
        raise OakInputError(f"{where('data')}={_show(data)}: expected a directory path")
    if data is not None:  # checked here, once, rather than by every incarnation of the job's ranks
        problem = _cifar_folder_problem(data)
        if problem:
            raise OakInputError(f"{where('data')}={_show(data)}: {problem} (expected the cifar-10-batches-py folder)")
    min_step = number("min_step_s", 0.0, 0.0, maximum=MAX_MIN_STEP_S) if not command else 0.0
    env = _env(entry.get("env"), where) if "env" in entry else ()
    workdir = get("workdir", None) if command else None
    if workdir is not None:
        if not isinstance(workdir, str) or not os.path.isabs(workdir) or "\0" in workdir:
            raise OakInputError(f"{where('workdir')}={_show(workdir)}: expected an absolute directory path")
        if not os.path.isdir(workdir):
            raise OakInputError(f"{where('workdir')}={_show(workdir)}: no such directory")
    return RuntimeJob(
        name=name,
        model=model,
        target_steps=target,
        min_gpus=lo,
        max_gpus=hi,
        submit_s=submit,
        batch_size=batch,
        ckpt_every=ckpt,
        restart_penalty_s=penalty,
        application=app,
        width_mult=width,
        data=data,
        min_step_s=min_step,
        command=command,
        env=env,
        workdir=workdir,
    )


def _command(value: Any, where: Any) -> tuple[str, ...]:
    """A command job's argument list: non-empty strings, no shell (a string is refused: say what to write)."""
    if isinstance(value, str):
        raise OakInputError(
            f"{where('command')}={_show(value)}: expected a list of arguments (no shell), "
            f"e.g. [{', '.join(repr(w) for w in value.split()[:3])}]"
        )
    if not isinstance(value, list) or not value:
        raise OakInputError(f"{where('command')}={_show(value)}: expected a non-empty list of arguments")
    if len(value) > MAX_COMMAND_ARGS:
        raise OakInputError(f"{where('command')}: {len(value)} arguments; expected at most {MAX_COMMAND_ARGS}")
    out: list[str] = []
    for i, arg in enumerate(value):
        if isinstance(arg, bool) or not isinstance(arg, str | int | float):
            raise OakInputError(f"{where('command')}[{i}]={_show(arg)}: expected a string")
        text = str(arg)
        if "\0" in text or (i == 0 and not text):
            raise OakInputError(f"{where('command')}[{i}]={_show(arg)}: expected a non-empty string without NUL")
        out.append(text)
    return tuple(out)


def _env(value: Any, where: Any) -> tuple[tuple[str, str], ...]:
    """A command job's extra environment: NAME: value strings; the contract's own variables are refused."""
    if not isinstance(value, dict):
        raise OakInputError(f"{where('env')}={_show(value)}: expected a mapping of NAME: value")
    items = [(k, v) for k, v in value.items() if k not in ("__line__", "__lines__")]
    if len(items) > MAX_ENV_VARS:
        raise OakInputError(f"{where('env')}: {len(items)} variables; expected at most {MAX_ENV_VARS}")
    out: list[tuple[str, str]] = []
    for k, v in items:
        if not isinstance(k, str) or not _ENV_NAME.fullmatch(k):
            raise OakInputError(f"{where('env')}: variable name {_show(k)}: expected letters, digits and '_'")
        if k in CONTRACT_VARS:
            raise OakInputError(f"{where('env')}.{k}: set by the job contract for every rank; cannot be overridden")
        if isinstance(v, bool) or not isinstance(v, str | int | float) or "\0" in str(v):
            raise OakInputError(f"{where('env')}.{k}={_show(v)}: expected a string")
        out.append((k, str(v)))
    return tuple(sorted(out))
