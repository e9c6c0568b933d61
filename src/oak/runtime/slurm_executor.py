"""The SLURM executor of ``oak run --backend slurm``: each job incarnation as one SLURM batch job.

An incarnation of W ranks on one node is submitted with ``sbatch --nodes=1 --ntasks=W`` (one CPU per rank for CPU slots,
``--gres=gpu:W`` for GPUs) and ``--no-requeue``, named ``oak-<run tag>-<job>`` with the comment
``oak:<run tag>:<job>:<incarnation>`` (the run tag hashes the run directory, as the Ray executor's does). Its batch
script, written into ``JOB_DIR/slurm/<incarnation>/``, runs this module's supervisor
(``python -m oak.runtime.slurm_executor DIR``), which starts the W rank processes exactly as
:mod:`oak.runtime.launch` does locally (:func:`~oak.runtime.launch.rank_commands`,
:func:`~oak.runtime.launch.spawn_rank`: ``rankR.log`` with its ``=== ... start`` line), records their pids in
``pids.json`` and each rank's exit status in ``exit-R`` (both written atomically), SIGKILLs the peers of a rank
that fails, and exits 0 only when every rank did. The ranks die with the supervisor (``PR_SET_PDEATHSIG``):
``proctrack/linuxproc`` loses track of a process whose parent died.

* **across nodes** (a launch whose ranks are planned on several nodes: ``--cluster-from slurm``): the job is
  submitted with ``--distribution=arbitrary`` and ``SLURM_HOSTFILE`` naming each rank's node, its batch script
  is one ``srun`` step of one supervisor per node (``--node-agent``: the ranks planned there, ``pids-NODE.json``),
  ``MASTER_ADDR`` is rank 0's node's ``NodeAddr`` and its supervisor publishes a command's port (``port``);
  signals go to that step, not to the batch step (``srun`` would end the step on SIGTERM). A launch first
  probes each planned node (up in ``sinfo``, its slurmd answering): ``NodeLost`` if one is not;
* **launch** waits (``start_timeout_s``, default 60 s) until the supervisor has started every rank (so that the
  scheduler records their pids); a job SLURM does not start in time is cancelled and the launch fails;
* **stop** is ``scancel --signal=TERM --full`` (every rank checkpoints at its next step boundary and exits 0),
  a wait up to the timeout, then the kill below for the stragglers;
* **kill** (an injected failure, or the clean-up of an ended job) SIGKILLs the ranks without a checkpoint:
  ``scancel --signal=USR1 --batch`` (the supervisor SIGKILLs every rank's process group), after 3 s
  ``scancel --signal=KILL --batch`` and ``scancel``, then a bounded wait for the job to end. (SLURM turns
  ``scancel --signal=KILL`` of a whole job into a cancel — SIGTERM, ``KillWait``, SIGKILL — so the ranks
  would checkpoint first: not a failure.)
* **state**: ``failed`` when a rank exited non-zero, or when SLURM ended the job otherwise (``NODE_FAIL``: its
  node went down, ``CANCELLED``, ``TIMEOUT``, ...); ``done`` / ``stopped`` when every rank exited 0, with / without
  the worker's ``done`` marker; else ``running`` (``PENDING`` included). SLURM's view comes from one
  ``squeue --me -t all`` listing, cached for ``poll_s`` seconds, whatever the number of jobs.

Every SLURM command runs with a timeout (``command_timeout_s``, default 30 s; a hung ``squeue`` is killed and
reported by name). :meth:`SlurmExecutor.reconcile` and :meth:`SlurmExecutor.adopt_or_cancel_orphans` act only on
jobs whose comment carries this run's tag: another run's or user's jobs are never touched. The run directory must
be on a filesystem every node shares (checkpoints, logs, exit files), and this interpreter must exist there.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from oak.errors import OakInputError
from oak.io_util import write_atomic
from oak.runtime.executor import JobState, Launch, classify, job_spec
from oak.runtime.incarnations import Incarnations, Ranks
from oak.runtime.launch import (
    DONE_FILE,
    CommandSpec,
    WorkerSpec,
    free_port,
    prepare_job_dir,
    rank_commands,
    spawn_rank,
)
from oak.runtime.nodes import NodeLost, RuntimeNode, probe
from oak.runtime.procs import die_with_parent, write_exit_status

PREFIX = "oak"
"""Jobs are named ``oak-<run tag>-<job>`` and commented ``oak:<run tag>:<job>:<incarnation>``."""
COMMAND_TIMEOUT_S = 30.0
START_TIMEOUT_S = 60.0
KILL_WAIT_S = 10.0
"""Bound on waiting for a cancelled or ended SLURM job to leave the queue's active states."""
KILL_SIGNAL_WAIT_S = 3.0
"""How long a SIGUSR1 to a batch step (its supervisor SIGKILLs the ranks) may take before SIGKILL to the step."""
POLL_S = 1.0
INCARNATIONS_SUBDIR = "slurm"
PIDS_FILE = "pids.json"
RANKS_FILE = "ranks.json"
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETING",
        "RESIZING",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESV_DEL_HOLD",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
    }
)
"""squeue states of a job that holds (or waits for) resources; every other state is an end (COMPLETED, FAILED,
CANCELLED, NODE_FAIL, TIMEOUT, BOOT_FAIL, OUT_OF_MEMORY, PREEMPTED, DEADLINE, ...)."""
_BENIGN_SCANCEL = ("Invalid job id", "already completing or completed", "Job can not be altered now")


def _spec(item: Launch) -> WorkerSpec | CommandSpec:
    """What every rank of ``item`` runs: the user's command (job contract) or the packaged worker."""
    return job_spec(item.job, item.seed)


def run_tag(run_dir: str | Path) -> str:
    """The tag of a run directory in its SLURM jobs' names and comments (as the Ray executor's placement groups)."""
    return hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:12]


EXIT_FILE_GRACE_S = 5.0
"""How long an ended SLURM job's missing rank exit files are waited for before it counts as failed (NFS
attribute caches can hide a file written on another node; raise it for such filesystems)."""
OUTAGE_S = 300.0
"""How long squeue may fail (slurmctld restarting, a socket timeout) before the executor gives up: until then
the last listing stands."""

LOCAL_CLUSTER_CONF = Path(os.environ.get("OAK_SLURM_DIR", "/tmp/oak-local-slurm")) / "slurm.conf"
"""The configuration ``scripts/local-slurm start`` writes: SLURM's clients use it when SLURM_CONF is unset and
the machine has no /etc/slurm/slurm.conf of its own, so that the local cluster works without an export."""


def client_env() -> dict[str, str] | None:
    """The environment of SLURM's client commands: this process's, plus SLURM_CONF of the local cluster when
    nothing else configures SLURM (None: unchanged)."""
    if "SLURM_CONF" in os.environ or Path("/etc/slurm/slurm.conf").exists() or not LOCAL_CLUSTER_CONF.is_file():
        return None
    try:  # only a cluster this user started: a file someone else planted in /tmp must not capture our jobs
        folder, conf = LOCAL_CLUSTER_CONF.parent.stat(), LOCAL_CLUSTER_CONF.stat()
    except OSError:
        return None
    uid = os.getuid()
    if folder.st_uid != uid or conf.st_uid != uid or folder.st_mode & 0o022 or conf.st_mode & 0o022:
        return None
    return {**os.environ, "SLURM_CONF": str(LOCAL_CLUSTER_CONF)}


def slurm_command(
    args: Sequence[str], timeout_s: float, *, check: bool = True, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one SLURM client command (argument list, no shell) in its own process group, killed with the group
    after ``timeout_s`` seconds; ``extra_env`` is added to its environment. Raises RuntimeError naming the
    command: on a timeout, or (``check``) on a non-zero exit with its stderr; OakInputError when the command is
    not installed."""
    argv = [str(a) for a in args]
    env = client_env()
    if extra_env:
        env = {**(env if env is not None else os.environ), **extra_env}
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env=env,
        )
    except FileNotFoundError as exc:
        raise OakInputError(
            f"{argv[0]}: not found on PATH; --backend slurm needs SLURM's client commands (sinfo, sbatch, squeue, "
            "scancel): install them, or try a local cluster with scripts/local-slurm start (docs/slurm.md)"
        ) from exc
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=5.0)
        raise RuntimeError(
            f"`{shlex.join(argv)}` did not answer within {timeout_s:g} s (is slurmctld up? try: scontrol ping)"
        ) from None
    if check and proc.returncode != 0:
        why = (err or "").strip() or (out or "").strip() or "no output"
        raise RuntimeError(f"`{shlex.join(argv)}` failed with exit status {proc.returncode}: {why}")
    return subprocess.CompletedProcess(argv, proc.returncode, out or "", err or "")


def _gres_gpus(gres: str) -> int:
    """GPUs in an sinfo ``%G`` field (``gpu:4``, ``gpu:a100:2(S:0-1)``, ``(null)``)."""
    total = 0
    for part in gres.split(","):
        fields = part.split("(")[0].split(":")
        if fields[0] == "gpu" and len(fields) >= 2 and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def _read_pids(inc_dir: Path, nodes: Sequence[str]) -> dict[str, Any] | None:
    """What the supervisor of an incarnation recorded once every rank started (``pids.json``: ``pids`` in rank
    order, ``host``; or ``error``); of one that spans ``nodes``, the records of each node's supervisor
    merged (None until every node's is there)."""
    if not nodes:
        try:
            obj = json.loads((inc_dir / PIDS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return obj if isinstance(obj, dict) else None
    pids: dict[int, int] = {}
    for node in nodes:
        try:
            obj = json.loads((inc_dir / f"pids-{node}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(obj, dict):
            return None
        if obj.get("error"):
            return {"error": f"on node {node}: {obj['error']}"}
        try:
            pids.update({int(r): int(p) for r, p in dict(obj.get("pids", {})).items()})
        except (TypeError, ValueError):
            return None
    return {"pids": [pids[r] for r in sorted(pids)], "host": ""}


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    """Whether a process of this machine runs (a zombie does not)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return "\nState:\tZ" not in text


@dataclass
class _Job:
    """One submitted incarnation: its SLURM job id, directories, ranks and what is known of its end."""

    name: str
    job_id: str
    job_dir: Path
    inc_dir: Path
    world: int
    command: bool
    incarnation: str
    pids: list[int] = field(default_factory=list)
    host: str = ""
    nodes: tuple[str, ...] = ()
    """The nodes of an incarnation that spans several (each runs a supervisor of its ranks); empty: one."""
    stop_requested: bool = False
    verdict: tuple[tuple[int | None, ...], str] | None = None
    """Once the incarnation has ended: its ranks' exit statuses, and why SLURM failed it apart from them."""
    ended: bool = False
    """Killed (``kill`` with SIGKILL): SLURM has ended it, or what is left of it is ``unreaped``."""
    noted: bool = False
    ended_seen_at: float | None = None
    """When SLURM was first seen to have ended the job while some rank's exit file was missing (a shared
    filesystem may show a file written on the compute node only later: ``EXIT_FILE_GRACE_S``)."""


class SlurmBackend:
    """Runs each job incarnation as one SLURM batch job (see the module doc): a
    :class:`~oak.runtime.incarnations.Backend` (launch, kill, list) that can adopt and knows what it could not
    reap.

    ``device_kind``: ``cpu`` (each rank one CPU of the node: ``--cpu-slots``) or ``gpu`` (one GPU each, SLURM's
    ``gres/gpu``). ``devices``: the devices the scheduler owns, checked at once against the largest node of
    ``partition`` (default: ``$SBATCH_PARTITION``, else SLURM's default partition); None with ``gpu``: that
    node's GPUs. ``run_dir``: the run directory, if known (else its tag is taken from the first launch's job
    directory). ``sbatch_args`` are added to every ``sbatch`` (e.g. ``--account=X``; ``SBATCH_*`` environment
    variables work too). ``command_timeout_s`` bounds every SLURM command, ``start_timeout_s`` a launch's wait
    for its ranks, ``poll_s`` the age of the cached ``squeue`` listing. ``span_nodes``: the run plans over the
    partition's nodes (``nodes()``; ``--cluster-from slurm``), so ``devices`` is bounded by all of them and a
    launch names each rank's node.
    """

    def __init__(
        self,
        device_kind: str,
        devices: int | None,
        *,
        partition: str | None = None,
        run_dir: str | Path | None = None,
        sbatch_args: Sequence[str] = (),
        command_timeout_s: float = COMMAND_TIMEOUT_S,
        start_timeout_s: float = START_TIMEOUT_S,
        poll_s: float = POLL_S,
        python: str = sys.executable,
        span_nodes: bool = False,
    ) -> None:
        if device_kind not in ("cpu", "gpu"):
            raise OakInputError(f"device_kind={device_kind!r}: expected 'cpu' or 'gpu'")
        if devices is None and device_kind != "gpu":
            raise OakInputError("devices=None (count the partition's GPUs) needs device_kind='gpu'")
        if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int) or devices < 1):
            raise OakInputError(f"devices={devices!r}: expected a positive integer")
        for what, value in (
            ("command_timeout_s", command_timeout_s),
            ("start_timeout_s", start_timeout_s),
            ("poll_s", poll_s),
        ):
            if not value > 0:
                raise OakInputError(f"{what}={value!r}: expected a positive number of seconds")
        self.device_kind: str = device_kind
        self._kind: Literal["cpu", "gpu"] = "gpu" if device_kind == "gpu" else "cpu"
        self.command_timeout_s = float(command_timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self.poll_s = float(poll_s)
        self.python = python
        self.sbatch_args = tuple(str(a) for a in sbatch_args)
        self.workdir = Path.cwd()
        """Where a job's ranks start (``--chdir``): the scheduler's working directory, as on the local and Ray
        backends, so that a command's relative paths mean the same on every backend."""
        self._jobs: dict[str, _Job] = {}
        self._stuck: dict[str, list[int]] = {}
        self._listing: dict[str, tuple[str, str, str]] = {}
        self._listed_at = -1e18
        self._tag: str | None = None
        self._swept: set[str] = set()
        self._issues: list[str] = []
        self._slurmd_port: int | None = None
        self._spread: set[str] = set()
        """SLURM job ids of incarnations on several nodes: their batch step is ``srun``, which a signal would
        make end the step at once; they are signalled through their steps (each node's supervisor)."""
        self.span_nodes = span_nodes
        try:
            self.partition, self.node_slots = self._partition(partition or os.environ.get("SBATCH_PARTITION") or None)
        except RuntimeError as exc:  # no controller answers: the user's setup, before anything started
            raise OakInputError(
                f"--backend slurm: cannot reach SLURM ({exc}); check SLURM_CONF and `scontrol ping`, or start a "
                "local cluster with scripts/local-slurm start (docs/slurm.md)"
            ) from exc
        self.node_names = sorted(self.node_slots)
        self.node_capacity = max(self.node_slots.values(), default=0)
        room = sum(self.node_slots.values()) if span_nodes else self.node_capacity
        what = "CPU(s)" if self._kind == "cpu" else "GPU(s)"
        if devices is None:
            devices = room
            if devices < 1:
                raise OakInputError(
                    f"--gpus auto: SLURM partition {self.partition!r} has no node with GPUs (gres/gpu) among "
                    f"{', '.join(self.node_names)}; run on CPU slots with --cpu-slots N"
                )
        if self.node_capacity < 1:
            raise OakInputError(
                f"{'--cpu-slots' if self._kind == 'cpu' else '--gpus'} {devices}: SLURM partition "
                f"{self.partition!r} has no {what} on its nodes ({', '.join(self.node_names) or 'none'})"
                + ("; run on CPU slots with --cpu-slots N" if self._kind == "gpu" else "")
            )
        if span_nodes and devices > room:
            flag = "--cpu-slots" if self._kind == "cpu" else "--gpus"
            raise OakInputError(
                f"{flag} {devices}: SLURM partition {self.partition!r} has {room} {what} on its nodes "
                f"({', '.join(f'{n}: {c}' for n, c in sorted(self.node_slots.items()))})"
            )
        if not span_nodes and devices > self.node_capacity:
            flag = "--cpu-slots" if self._kind == "cpu" else "--gpus"
            raise OakInputError(
                f"{flag} {devices}: SLURM partition {self.partition!r} has at most {self.node_capacity} {what} on one "
                f"node ({', '.join(self.node_names)}), and without --cluster-from slurm oak runs each job on one node; "
                f"ask for at most {self.node_capacity}, or plan over the partition's nodes with --cluster-from slurm"
            )
        self.devices: int = devices
        if run_dir is not None:
            self._tag = run_tag(run_dir)

    # ------------------------------------------------------------------ SLURM commands
    def _cmd(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return slurm_command(list(args), self.command_timeout_s, check=check)

    def _sinfo(self) -> list[list[str]]:
        """``sinfo -N`` rows: partition, node, CPUs, gres, NodeAddr, state."""
        timeout_s = min(self.command_timeout_s, 15.0)
        rows = slurm_command(["sinfo", "-h", "-N", "-o", "%P|%N|%c|%G|%o|%T"], timeout_s).stdout.splitlines()
        return [f for f in (row.strip().split("|") for row in rows) if len(f) == 6]

    def nodes(self, *, fresh: bool = False) -> list[RuntimeNode]:
        """The partition's nodes with devices of the run's kind, in SLURM's order, each with its ``NodeAddr``
        and whether it is up: a state SLURM places jobs on (idle, mixed, allocated, completing), responding
        (no ``*``). ``sinfo`` is asked every time (``fresh`` is implied)."""
        out: list[RuntimeNode] = []
        for part, node, cpus, gres, addr, state in self._sinfo():
            if part.rstrip("*") != self.partition:
                continue
            count = _gres_gpus(gres) if self._kind == "gpu" else (int(cpus) if cpus.isdigit() else 0)
            if count < 1:
                continue
            base = state.rstrip("*~#!%$@^-+")
            up = base in ("idle", "mixed", "allocated", "completing") and not state.endswith("*")
            out.append(RuntimeNode(node, addr or node, count, up))
        return out

    def _probe_nodes(self, hosts: Sequence[RuntimeNode]) -> None:
        """Each node of a planned launch: up in SLURM's view and its slurmd answering (a node killed or cut off
        a moment ago is up for SLURM until a ping fails; a job sent there would wait in vain). Raises
        :class:`~oak.runtime.nodes.NodeLost` for the first that is not."""
        if not hosts:
            return
        state = {n.name: n for n in self.nodes()}
        if self._slurmd_port is None:
            conf = self._cmd("scontrol", "show", "config", check=False).stdout
            port = next((ln.split("=", 1)[1].strip() for ln in conf.splitlines() if ln.startswith("SlurmdPort")), "")
            self._slurmd_port = int(port) if port.isdigit() else 0
        for node in dict.fromkeys(hosts):
            seen = state.get(node.name)
            if seen is None or not seen.up:
                raise NodeLost(node.name, "SLURM does not list it up")
            why = probe(seen.addr, self._slurmd_port) if self._slurmd_port else None
            if why is not None:
                raise NodeLost(node.name, f"its slurmd does not answer ({why})")

    def _partition(self, partition: str | None) -> tuple[str, dict[str, int]]:
        """(partition, each of its nodes' CPUs or GPUs) from ``sinfo -N``."""
        parts: dict[str, dict[str, int]] = {}
        default: str | None = None
        for name, node, cpus, gres, _addr, _state in self._sinfo():
            if name.endswith("*"):
                name = name[:-1]
                default = name
            count = _gres_gpus(gres) if self._kind == "gpu" else (int(cpus) if cpus.isdigit() else 0)
            parts.setdefault(name, {})[node] = count
        if partition is None:
            if default is None:
                raise OakInputError(
                    f"SLURM has no default partition (partitions: {', '.join(sorted(parts)) or 'none'}); set SBATCH_PARTITION"
                )
            partition = default
        if partition not in parts:
            raise OakInputError(
                f"SLURM has no partition {partition!r} (sinfo lists: {', '.join(sorted(parts)) or 'none'})"
            )
        return partition, parts[partition]

    def _refresh(self, *, fresh: bool = False) -> dict[str, tuple[str, str, str]]:
        """This user's oak jobs known to slurmctld (recently ended ones too): job id → (state, reason, comment);
        one ``squeue`` per ``poll_s`` unless ``fresh``."""
        if not fresh and time.monotonic() - self._listed_at < self.poll_s:
            return self._listing
        try:
            out = self._cmd("squeue", "--me", "-h", "-t", "all", "-o", "%D|%i|%T|%r|%k").stdout
        except RuntimeError:
            if time.monotonic() - self._listed_at > OUTAGE_S:
                raise
            return self._listing  # a transient failure: the last listing stands (bounded by OUTAGE_S)
        listing: dict[str, tuple[str, str, str]] = {}
        for row in out.splitlines():
            count, _, rest = row.strip().partition("|")
            fields = rest.split("|", 3)
            if len(fields) == 4 and fields[3].startswith(f"{PREFIX}:"):
                listing[fields[0]] = (fields[1].split()[0] if fields[1] else "", fields[2], fields[3])
                if count.isdigit() and int(count) > 1:
                    self._spread.add(fields[0])
        self._listing, self._listed_at = listing, time.monotonic()
        return listing

    def _slurm_state(self, rec: _Job, *, fresh: bool = False) -> str | None:
        """The job's squeue state, None once slurmctld forgot it (MinJobAge after its end)."""
        row = self._refresh(fresh=fresh).get(rec.job_id)
        return None if row is None else row[0]

    def _signal(self, job_id: str, sig: str) -> None:
        """Send ``sig`` to what runs of a SLURM job of this executor's: the batch step and its steps (one node:
        the supervisor), or only its steps (several nodes: each node's supervisor; the batch step is ``srun``,
        which would end the step on a SIGTERM)."""
        self._scancel(job_id, f"--signal={sig}", *(() if job_id in self._spread else ("--full",)))

    def _scancel(self, job_id: str, *args: str) -> None:
        res = self._cmd("scancel", *args, job_id, check=False)
        if res.returncode != 0 and not any(b in res.stderr for b in _BENIGN_SCANCEL):
            raise RuntimeError(
                f"`scancel {' '.join(args)} {job_id}` failed with exit status {res.returncode}: {res.stderr.strip()}"
            )

    # ------------------------------------------------------------------ launch
    def adopt(self, item: Launch, pids: list[int]) -> bool:
        """Follow the SLURM job an earlier scheduler of this run submitted for ``item``: an active job of the run
        (its comment names the job and its incarnation) whose supervisor recorded exactly ``pids``."""
        name = item.job.name
        if (name in self._jobs and not self._jobs[name].ended) or not pids:
            return False
        job_dir = Path(item.job_dir).resolve()
        tag = run_tag(job_dir.parent.parent)
        if self._tag is None:
            self._tag = tag
        for job_id, (state, _reason, comment) in self._refresh(fresh=True).items():
            parts = comment.split(":")
            if len(parts) != 4 or parts[:3] != [PREFIX, tag, name] or state != "RUNNING":
                continue
            inc_dir = job_dir / INCARNATIONS_SUBDIR / parts[3]
            try:
                nodes = tuple(
                    str(n) for n in json.loads((inc_dir / RANKS_FILE).read_text(encoding="utf-8")).get("nodes", [])
                )
                obj = _read_pids(inc_dir, nodes)
                recorded = [int(p) for p in obj.get("pids", [])] if obj is not None else []
            except (OSError, ValueError, TypeError, AttributeError, KeyError):
                continue
            if obj is None or recorded != list(pids):
                continue
            rec = _Job(name, job_id, job_dir, inc_dir, len(pids), item.job.is_command, parts[3], list(pids))
            rec.host, rec.nodes = str(obj.get("host", "")), nodes
            if nodes:
                self._spread.add(job_id)
            if self._outcome(rec, fresh=True) != "running":
                return False
            self._jobs[name] = rec
            return True
        return False

    def launch(self, item: Launch) -> None:
        name = item.job.name
        old = self._jobs.pop(name, None)
        if old is not None and not old.ended:  # its previous incarnation: what is left of it goes
            self._end(old)
        self._stuck.pop(name, None)
        n = len(item.devices)
        if n < 1:
            raise OakInputError(f"job {name!r}: launched on no devices")
        hosts = item.hosts
        if hosts and len(hosts) != n:
            raise OakInputError(f"job {name!r}: {len(hosts)} rank node(s) for {n} device(s)")
        spread = tuple(dict.fromkeys(h.name for h in hosts))  # its nodes, rank 0's first
        self._probe_nodes(hosts)
        for node in spread:
            here = sum(1 for h in hosts if h.name == node)
            if here > self.node_slots.get(node, 0):
                raise OakInputError(
                    f"job {name!r}: {here} rank(s) on node {node!r}, which has "
                    f"{self.node_slots.get(node, 0)} in SLURM partition {self.partition!r}"
                )
        if not hosts and n > self.node_capacity:
            what = "CPU(s)" if self._kind == "cpu" else "GPU(s)"
            raise OakInputError(
                f"job {name!r}: cannot run {n} rank(s) on one node: the largest node of SLURM partition "
                f"{self.partition!r} has {self.node_capacity} {what}"
            )
        job_dir = Path(item.job_dir).resolve()
        job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        tag = run_tag(job_dir.parent.parent)
        if self._tag is None:
            self._tag = tag
        if tag not in self._swept:  # the first launch of this run here: jobs of an earlier scheduler go first
            self._issues += self.adopt_or_cancel_orphans(job_dir.parent.parent)
        spec = _spec(item)
        command = isinstance(spec, CommandSpec)
        prepare_job_dir(job_dir, command)
        ranks, _token, incarnation = rank_commands(
            job_dir,
            spec,
            n,
            item.devices,
            job_name=name,
            device_kind=self._kind,
            # rank 0's node (one node without a plan: loopback); its supervisor picks a command's port there
            master_addr=hosts[0].addr if hosts else "127.0.0.1",
            master_port=0 if command else None,
            python=self.python,
            environ={},
        )
        inc_dir = job_dir / INCARNATIONS_SUBDIR / incarnation
        inc_dir.mkdir(mode=0o700, parents=True)
        plan = {
            "job": name,
            "job_dir": str(job_dir),
            "incarnation": incarnation,
            "kind": self._kind,
            "command": command,
            "nodes": list(spread) if len(spread) > 1 else [],
            "ranks": [
                {"argv": r.argv, "env": r.env, "node": hosts[i].name if hosts else ""} for i, r in enumerate(ranks)
            ],
        }
        write_atomic(inc_dir / RANKS_FILE, json.dumps(plan, indent=1) + "\n")
        script = inc_dir / "batch.sh"
        supervisor = f"{shlex.quote(self.python)} -m oak.runtime.slurm_executor {shlex.quote(str(inc_dir))}"
        if len(spread) > 1:  # one supervisor per node, each starting the ranks planned there
            k = len(spread)
            # (the batch's environment has the rank placement of sbatch's arbitrary distribution: not the step's)
            supervisor = (
                f"env -u SLURM_HOSTFILE -u SLURM_DISTRIBUTION srun --overlap --nodes={k} --ntasks={k} "
                f"--ntasks-per-node=1 --distribution=block --kill-on-bad-exit=0 --cpus-per-task=1 {supervisor} "
                "--node-agent"
            )
        write_atomic(script, f"#!/bin/sh\n# oak: one incarnation of job {name} (docs/slurm.md)\nexec {supervisor}\n")
        script.chmod(0o700)
        resources = [f"--gres=gpu:{n}", "--cpus-per-task=1"] if self._kind == "gpu" else ["--cpus-per-task=1"]
        extra_env: dict[str, str] | None = None
        if len(spread) > 1:  # each rank's node as planned: SLURM's arbitrary distribution, one line per rank
            hostfile = inc_dir / "hostfile"
            write_atomic(hostfile, "".join(f"{h.name}\n" for h in hosts))
            placement = ["--distribution=arbitrary", f"--nodes={len(spread)}"]
            extra_env = {"SLURM_HOSTFILE": str(hostfile)}
        elif spread:
            placement = ["--nodes=1", f"--nodelist={spread[0]}"]
        else:
            placement = ["--nodes=1"]
        argv = [
            "sbatch",
            "--parsable",
            "--no-requeue",
            f"--job-name={PREFIX}-{tag}-{name}",
            f"--comment={PREFIX}:{tag}:{name}:{incarnation}",
            f"--partition={self.partition}",
            *placement,
            f"--ntasks={n}",
            *resources,
            f"--output={inc_dir}/slurm-%j.out",
            f"--chdir={self.workdir}",
            *self.sbatch_args,
            str(script),
        ]
        out = slurm_command(argv, self.command_timeout_s, extra_env=extra_env).stdout.strip()
        job_id = out.split(";")[0].strip()
        if not job_id.isdigit():
            raise RuntimeError(f"`{shlex.join(argv)}` printed {out!r}, not a job id")
        rec = _Job(name, job_id, job_dir, inc_dir, n, command, incarnation)
        rec.nodes = spread if len(spread) > 1 else ()
        if rec.nodes:
            self._spread.add(job_id)
        try:
            self._await_start(rec)
        except BaseException:
            with contextlib.suppress(Exception):
                self._end(rec)
            raise
        self._jobs[name] = rec

    def _await_start(self, rec: _Job) -> None:
        """Wait until the supervisor recorded every rank's pid (``start_timeout_s``)."""
        deadline = time.monotonic() + self.start_timeout_s
        state: str | None = "PENDING"
        reason = ""
        next_check = 0.0
        while True:
            obj = _read_pids(rec.inc_dir, rec.nodes)
            if isinstance(obj, dict):
                if obj.get("error"):
                    msg = f"job {rec.name!r}: cannot start its ranks in SLURM job {rec.job_id}: {obj['error']}"
                    raise OakInputError(msg) if rec.command else RuntimeError(msg)
                rec.pids = [int(p) for p in obj.get("pids", [])]
                rec.host = str(obj.get("host", ""))
                return
            now = time.monotonic()
            if now >= next_check:
                row = self._refresh(fresh=True).get(rec.job_id)
                state, reason = (row[0], row[1]) if row is not None else (None, "")
                if state is None or state not in ACTIVE_STATES:
                    raise RuntimeError(
                        f"job {rec.name!r}: SLURM job {rec.job_id} ended ({state or 'gone'}) before its ranks "
                        f"started; its output ({rec.inc_dir}/slurm-{rec.job_id}.out):\n{self._output_tail(rec)}"
                    )
                next_check = now + 0.5
            if now >= deadline:
                raise RuntimeError(
                    f"job {rec.name!r}: SLURM did not start job {rec.job_id} within {self.start_timeout_s:g} s "
                    f"(state {state}, reason {reason or 'none'}); cancelled"
                )
            time.sleep(0.05)

    def _output_tail(self, rec: _Job, lines: int = 15) -> str:
        try:
            text = (rec.inc_dir / f"slurm-{rec.job_id}.out").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(none)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty)"

    # ------------------------------------------------------------------ observe
    def _codes(self, rec: _Job) -> list[int | None]:
        return [_read_int(rec.inc_dir / f"exit-{r}") for r in range(rec.world)]

    def _outcome(self, rec: _Job, *, fresh: bool = False) -> JobState:
        codes = self._codes(rec)
        ranks = classify(
            codes,
            command=rec.command,
            stop_requested=rec.stop_requested,
            done_marker=(rec.job_dir / DONE_FILE).is_file(),
        )
        if ranks == "failed":
            return "failed"
        state = self._slurm_state(rec, fresh=fresh)
        if state is not None and state not in ACTIVE_STATES and state != "COMPLETED":
            return "failed"  # NODE_FAIL, CANCELLED, TIMEOUT, ...: SLURM ended it (its ranks may have exited 0)
        if ranks != "running":  # every rank exited as asked or on its own
            if not rec.stop_requested:
                # every rank exited 0 unasked: finished — or stopped by a SIGTERM of SLURM's (a time limit, an
                # operator's scancel, its node going down). SLURM's final state tells: until it has one
                # (COMPLETING lasts a moment after the ranks exit), the job is still ending
                state = self._slurm_state(rec, fresh=True)
                if state in ACTIVE_STATES:
                    return "running"
                if state is not None and state != "COMPLETED":
                    return "failed"
            return ranks
        if state is None or state not in ACTIVE_STATES:
            if all(c == 0 for c in self._codes(rec)):  # the last exit file landed just before the job ended
                return self._outcome(rec, fresh=fresh)
            now = time.monotonic()
            if rec.ended_seen_at is None:
                rec.ended_seen_at = now
            if now - rec.ended_seen_at < EXIT_FILE_GRACE_S:
                return "running"  # its exit files may not be visible here yet (a shared filesystem's cache)
            return "failed"  # ended (COMPLETED or forgotten) without every rank's exit status
        return "running"

    def _note(self, rec: _Job, text: str) -> None:
        """Append a line about the SLURM job to rank 0's log (shown in the scheduler's failure report)."""
        if rec.noted:
            return
        rec.noted = True
        with contextlib.suppress(OSError), open(rec.job_dir / "rank0.log", "a", encoding="utf-8") as fh:
            fh.write(f"oak slurm executor: {text}\n")

    def _ranks(self, rec: _Job) -> Ranks:
        """What ``list`` shows of one incarnation: its rank exit statuses once SLURM's verdict agrees (a rank
        that exited while SLURM still ends the job shows as running), and why SLURM failed it, if it did."""
        if rec.verdict is None:
            outcome = self._outcome(rec)
            seen = tuple(self._codes(rec))
            if outcome == "running":
                return Ranks(tuple(rec.pids), seen if None in seen else (None,) * len(seen))
            lost = ""
            if outcome == "failed":
                row = self._listing.get(rec.job_id)
                how = f"{row[0]}, reason {row[1]}" if row is not None else "no longer listed"
                self._note(rec, f"SLURM job {rec.job_id} failed ({how}); rank exit statuses {list(seen)}")
                by_ranks = classify(
                    seen,
                    command=rec.command,
                    stop_requested=rec.stop_requested,
                    done_marker=(rec.job_dir / DONE_FILE).is_file(),
                )
                if by_ranks != "failed":
                    lost = f"SLURM job {rec.job_id} ended ({how})"
            rec.verdict = (seen, lost)
        codes, lost = rec.verdict
        return Ranks(tuple(rec.pids), codes, lost)

    def unreaped(self, name: str) -> list[int]:
        return list(self._stuck.get(name, []))

    def job_id(self, name: str) -> str | None:
        """The SLURM job id of a job's latest incarnation (None: none launched here)."""
        rec = self._jobs.get(name)
        return None if rec is None else rec.job_id

    # ------------------------------------------------------------------ kill
    def kill(self, name: str, sig: int) -> None:
        """SIGTERM: ``scancel --signal=TERM --full`` (a job SLURM has not started yet is just cancelled:
        nothing to checkpoint, it stopped); SIGKILL: every rank without a checkpoint, the job cancelled, and a
        bounded wait for its end (ranks still alive on this machine after it: ``unreaped``)."""
        rec = self._jobs.get(name)
        if rec is None or rec.ended:
            return
        if sig == signal.SIGKILL:
            self._end(rec)
            rec.ended = True
            if rec.verdict is None:  # killed here while it ran: a rank without an exit status was SIGKILLed
                rec.verdict = (tuple(-signal.SIGKILL if c is None else c for c in self._codes(rec)), "")
            return
        if rec.verdict is not None:
            return  # ended already
        if sig == signal.SIGTERM:
            rec.stop_requested = True
            if self._refresh(fresh=True).get(rec.job_id, ("",))[0] == "PENDING":
                self._scancel(rec.job_id)
                rec.verdict = ((0,) * rec.world, "")
            else:
                self._signal(rec.job_id, "TERM")
        else:
            self._signal(rec.job_id, signal.Signals(sig).name.removeprefix("SIG"))

    def _end(self, rec: _Job) -> None:
        """SIGKILL whatever still runs of the incarnation (``_hard_kill``) and wait (``KILL_WAIT_S``) until SLURM
        has ended it and its ranks on this machine are gone (else they are kept for ``unreaped``)."""
        state = self._slurm_state(rec, fresh=True)
        ended_cleanly = all(c is not None for c in self._codes(rec))
        if state in ACTIVE_STATES and not ended_cleanly:
            self._hard_kill({rec.job_id: state})
        deadline = time.monotonic() + KILL_WAIT_S
        while True:
            state = self._slurm_state(rec, fresh=True)
            alive = self._alive_here(rec)
            if (state is None or state not in ACTIVE_STATES) and not alive:
                self._stuck.pop(rec.name, None)
                return
            if time.monotonic() >= deadline:
                if state in ACTIVE_STATES and ended_cleanly:  # the supervisor did not exit after its ranks
                    ended_cleanly = False
                    self._hard_kill({rec.job_id: state})
                    deadline = time.monotonic() + KILL_WAIT_S
                    continue
                if alive:
                    self._stuck[rec.name] = alive
                return
            time.sleep(0.1)

    def _active(self, ids: list[str]) -> list[str]:
        listing = self._refresh(fresh=True)
        return [i for i in ids if i in listing and listing[i][0] in ACTIVE_STATES]

    def _wait_ended(self, ids: list[str], timeout_s: float) -> list[str]:
        """Wait up to ``timeout_s`` s until none of the jobs is active; returns those still active."""
        deadline = time.monotonic() + timeout_s
        left = self._active(ids)
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = self._active(left)
        return left

    def _hard_kill(self, jobs: dict[str, str]) -> list[str]:
        """SIGKILL the ranks of SLURM jobs (id → state) without a checkpoint, and cancel them.

        SLURM's own ``scancel --signal=KILL`` of a whole job is a cancel (SIGTERM, KillWait, SIGKILL: the ranks
        would checkpoint), so each batch step gets SIGUSR1 (``--batch``): its supervisor SIGKILLs every rank's
        process group, records their exit statuses and exits. A batch step still there after
        ``KILL_SIGNAL_WAIT_S`` s gets SIGKILL (its ranks die with it: ``PR_SET_PDEATHSIG``), then ``scancel``
        (a pending job: at once). Returns the ids still active ``KILL_WAIT_S`` s later."""
        pending = [i for i, st in jobs.items() if st == "PENDING"]
        started = [i for i in jobs if i not in pending]
        for job_id in pending:
            self._scancel(job_id)
        for job_id in started:  # the batch step, and the supervisors of a job on several nodes (a step)
            self._signal(job_id, "USR1")
        left = self._wait_ended(started, KILL_SIGNAL_WAIT_S)
        for job_id in left:
            self._signal(job_id, "KILL")
            self._scancel(job_id)
        return self._wait_ended(left + pending, KILL_WAIT_S)

    def _alive_here(self, rec: _Job) -> list[int]:
        """The incarnation's rank pids still alive, when it ran on this machine (else unknown: [])."""
        if rec.host != socket.gethostname():
            return []
        return [p for p in rec.pids if _alive(p)]

    # ------------------------------------------------------------------ reconcile and orphans
    def _run_jobs(self, tag: str) -> dict[str, tuple[str, str, str]]:
        """This run's SLURM jobs in an active state: job id → (state, reason, job name)."""
        prefix = f"{PREFIX}:{tag}:"
        out: dict[str, tuple[str, str, str]] = {}
        for job_id, (state, reason, comment) in self._refresh(fresh=True).items():
            if comment.startswith(prefix) and state in ACTIVE_STATES:
                out[job_id] = (state, reason, comment.split(":")[2] if comment.count(":") >= 3 else "?")
        return out

    def _cancel_all(self, jobs: dict[str, tuple[str, str, str]], grace_s: float = 0.0) -> None:
        """Cancel the given SLURM jobs (id → (state, reason, name)): with ``grace_s`` > 0, SIGTERM the running
        ones first (they checkpoint and exit) and wait up to that long; then ``_hard_kill`` what is left."""
        ids = sorted(jobs)
        if grace_s > 0 and ids:
            for job_id in ids:
                if jobs[job_id][0] != "PENDING":
                    self._signal(job_id, "TERM")
            ids = self._wait_ended([i for i in ids if jobs[i][0] != "PENDING"], grace_s) + [
                i for i in ids if jobs[i][0] == "PENDING"
            ]
        listing = self._refresh(fresh=True)
        self._hard_kill({i: listing[i][0] for i in ids if i in listing})

    def adopt_or_cancel_orphans(self, run_dir: str | Path, grace_s: float = 30.0) -> list[str]:
        """After a scheduler restart: cancel every SLURM job of the run in ``run_dir`` that this executor does not
        own — SIGTERM first (a checkpoint, as at any stop), SIGKILL after ``grace_s`` s — and wait for them to end;
        returns one line per job cancelled. What the scheduler adopted (``adopt``) is this executor's own and
        spared; the others would only hold devices. The first launch of a run does this anyway; call it
        before the scheduler starts to report what it cancelled."""
        return self.adopt_or_cancel_orphans_of_tag(run_tag(run_dir), grace_s)

    def adopt_or_cancel_orphans_of_tag(self, tag: str, grace_s: float = 30.0) -> list[str]:
        """:meth:`adopt_or_cancel_orphans` for the run tagged ``tag``."""
        if self._tag is None:
            self._tag = tag
        owned = {rec.job_id for rec in self._jobs.values()}
        orphans = {i: row for i, row in self._run_jobs(tag).items() if i not in owned}
        self._cancel_all(orphans, grace_s)
        self._swept.add(tag)
        return [
            f"{job}: SLURM job {job_id} ({state}) of an earlier scheduler of this run: cancelled"
            for job_id, (state, _reason, job) in sorted(orphans.items())
        ]

    def take_issues(self) -> list[str]:
        """What happened since the last reconciliation that it should report (orphans cancelled at a launch)."""
        issues, self._issues = self._issues, []
        return issues

    def cluster_issues(self, intended: dict[str, tuple[int, ...]], live: set[str]) -> list[str]:
        """SLURM's side of a reconciliation: an earlier scheduler's jobs of this run are cancelled with a
        checkpoint (once), this run's SLURM jobs that no ``live`` incarnation owns are cancelled, and an
        intended live job that SLURM no longer runs, or holds in another state than RUNNING, is reported."""
        if self._tag is None:
            return []
        issues: list[str] = []
        if self._tag not in self._swept:  # an earlier scheduler's jobs: stopped with a checkpoint, not killed
            issues += self.adopt_or_cancel_orphans_of_tag(self._tag)
        run = self._run_jobs(self._tag)
        owned = {rec.job_id for n, rec in self._jobs.items() if n in live and not rec.ended}
        strays = {i: row for i, row in run.items() if i not in owned}
        for job_id, (state, _reason, job) in sorted(strays.items()):
            issues.append(f"{job}: SLURM job {job_id} ({state}) is not this scheduler's: cancelled")
        self._cancel_all(strays)
        for name in sorted(set(intended) & live):
            rec = self._jobs.get(name)
            if rec is None or rec.ended or rec.verdict is not None or self._ranks(rec).lost:
                continue
            if None not in self._ranks(rec).codes:
                continue  # an end is the next state()'s to report
            row = run.get(rec.job_id)
            if row is None:
                issues.append(f"{name}: SLURM job {rec.job_id} is no longer active")
            elif row[0] != "RUNNING":
                issues.append(f"{name}: SLURM job {rec.job_id} is {row[0]} (reason {row[1]})")
        return issues

    # (last in the class: its name would hide the builtin in the annotations below it)
    def list(self) -> dict[str, Ranks]:
        """Every job's latest incarnation (one ``squeue`` per ``poll_s`` at most)."""
        return {name: self._ranks(rec) for name, rec in self._jobs.items()}


class SlurmExecutor(Incarnations):
    """The scheduler's executor on SLURM: the incarnation layer over :class:`SlurmBackend` (arguments as
    there), its reconciliation extended with SLURM's view of the run's jobs."""

    backend: SlurmBackend

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(SlurmBackend(*args, **kwargs), poll_s=0.1, list_ttl_s=0.5)

    @property
    def devices(self) -> int:
        return self.backend.devices

    def job_id(self, name: str) -> str | None:
        return self.backend.job_id(name)

    def nodes(self, *, fresh: bool = False) -> list[RuntimeNode]:
        """See :meth:`SlurmBackend.nodes` (this makes the executor a :class:`~oak.runtime.nodes.NodeListing`)."""
        return self.backend.nodes(fresh=fresh)

    def adopt_or_cancel_orphans(self, run_dir: str | Path, grace_s: float = 30.0) -> list[str]:
        """See :meth:`SlurmBackend.adopt_or_cancel_orphans`."""
        return self.backend.adopt_or_cancel_orphans(run_dir, grace_s)

    def reconcile(self, intended: dict[str, tuple[int, ...]]) -> list[str]:
        """The shared reconciliation (a job running but not intended is killed; an intended one that nothing
        runs, or on another number of ranks, reported) and SLURM's (:meth:`SlurmBackend.cluster_issues`)."""
        want = {n: d for n, d in intended.items() if d}
        issues = self.backend.take_issues() + super().reconcile(want)
        return issues + self.backend.cluster_issues(want, set(self._live))


# ---------------------------------------------------------------------------------------------- the supervisor
PORT_FILE = "port"
"""Where the supervisor of rank 0's node leaves a command's ``MASTER_PORT`` for the other nodes' supervisors."""
PORT_WAIT_S = 60.0


def _master_port(inc_dir: Path, master_addr: str, mine: bool) -> str:
    """A command's ``MASTER_PORT`` on a job across nodes: picked on rank 0's node (free there a moment ago) and
    published in the incarnation's directory, where the other nodes' supervisors wait for it."""
    path = inc_dir / PORT_FILE
    if mine:
        port = str(free_port(master_addr))
        write_atomic(path, port + "\n")
        return port
    deadline = time.monotonic() + PORT_WAIT_S
    while time.monotonic() < deadline:
        text = path.read_text(encoding="utf-8").strip() if path.is_file() else ""
        if text.isdigit():
            return text
        time.sleep(0.05)
    raise OSError(f"rank 0's node did not publish MASTER_PORT in {path} within {PORT_WAIT_S:g} s")


def supervise(inc_dir: Path, node: str | None = None) -> int:
    """The batch job of one incarnation (or, ``node`` given, the supervisor on that node of one that spans
    several: a task of the batch job's one ``srun`` step): start its ranks (``ranks.json``; on ``node``, those
    planned there), record their pids (``pids.json``; ``pids-NODE.json``) and exit statuses, forward
    SIGTERM/SIGINT (stop: checkpoint and exit 0), SIGKILL every rank's process group on SIGUSR1 (the
    executor's kill) and the peers of a failed rank on its node (those on other nodes are the executor's to
    reap: the incarnation failed). Exit status 0 when every rank it started exited 0, else 1."""
    plan = json.loads((inc_dir / RANKS_FILE).read_text(encoding="utf-8"))
    job_dir = Path(plan["job_dir"])
    command = bool(plan["command"])
    mine = [r for r, spec in enumerate(plan["ranks"]) if node is None or spec.get("node") == node]
    world = len(mine)
    pids_file = PIDS_FILE if node is None else f"pids-{node}.json"
    procs: list[subprocess.Popen[bytes]] = []
    stop = {"requested": False, "killed": False}

    def send(sig: int) -> None:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    if command or sig == signal.SIGKILL:
                        os.killpg(p.pid, sig)  # each rank leads its own session: a wrapper's children too
                    else:
                        p.send_signal(sig)

    def on_stop(signum: int, frame: Any) -> None:
        stop["requested"] = True
        send(signum)

    def on_kill(signum: int, frame: Any) -> None:  # the executor's kill: no checkpoint
        stop["killed"] = True
        send(signal.SIGKILL)

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGUSR1, on_kill)
    host = socket.gethostname()
    slurm_job = os.environ.get("SLURM_JOB_ID", "?")
    total = len(plan["ranks"])
    try:
        port = ""
        if command and mine:
            master = str(plan["ranks"][0]["env"].get("MASTER_ADDR", "127.0.0.1"))
            port = _master_port(inc_dir, master, 0 in mine) if node is not None else str(free_port(master))
        for rank in mine:
            spec = plan["ranks"][rank]
            env = dict(os.environ)
            for var in ("SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_ID", "SLURM_NTASKS"):
                env.pop(var, None)  # the supervisor's task, not the rank's
            env.update(spec["env"])
            if command and env.get("MASTER_PORT") == "0":
                env["MASTER_PORT"] = port
            if plan["kind"] == "gpu" and os.environ.get("CUDA_VISIBLE_DEVICES"):
                env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]  # the GPUs SLURM allocated
            note = f" incarnation {plan['incarnation']} rank {rank}/{total} (slurm job {slurm_job} on {host})"
            procs.append(
                spawn_rank(
                    spec["argv"],
                    env,
                    job_dir / f"rank{rank}.log",
                    note,
                    preexec_fn=die_with_parent(),
                    log_argv0=command,
                )
            )
    except OSError as exc:
        send(signal.SIGKILL)
        failed = plan["ranks"][mine[len(procs)]]["argv"] if len(procs) < world else "?"
        write_atomic(inc_dir / pids_file, json.dumps({"error": f"{failed!r}: {exc}"}))
        for r in mine:
            write_atomic(inc_dir / f"exit-{r}", "127\n")
        return 1
    if node is None:
        record: dict[str, Any] = {"pids": [p.pid for p in procs], "host": host, "job": slurm_job}
    else:
        record = {"pids": {str(r): p.pid for r, p in zip(mine, procs, strict=True)}, "host": host, "job": slurm_job}
    write_atomic(inc_dir / pids_file, json.dumps(record))
    if stop["killed"]:
        send(signal.SIGKILL)  # killed while the later ranks were starting
    elif stop["requested"]:
        send(signal.SIGTERM)  # asked to stop while the later ranks were starting
    written: set[int] = set()
    while True:
        for rank, p in zip(mine, procs, strict=True):
            code = p.poll()
            if code is None or rank in written:
                continue
            write_atomic(inc_dir / f"exit-{rank}", f"{code}\n")
            with contextlib.suppress(OSError):  # also where a restarted scheduler looks (oak.runtime.procs)
                write_exit_status(job_dir, rank, p.pid, code)
            written.add(rank)
        codes = [p.returncode for p in procs]  # the one rule (oak.runtime.incarnations.classify)
        if classify(codes, command=command, stop_requested=stop["requested"], done_marker=False) == "failed":
            send(signal.SIGKILL)  # the peers of a dead rank
            for rank, p in zip(mine, procs, strict=True):
                code = p.wait()
                if rank not in written:
                    write_atomic(inc_dir / f"exit-{rank}", f"{code}\n")
                    with contextlib.suppress(OSError):
                        write_exit_status(job_dir, rank, p.pid, code)
            return 1
        if len(written) == world:
            return 0
        time.sleep(0.05)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    agent = args[1:] == ["--node-agent"]
    if len(args) != 1 and not agent:
        print(
            "usage: python -m oak.runtime.slurm_executor INCARNATION_DIR [--node-agent] (oak's SLURM batch jobs)",
            file=sys.stderr,
        )
        return 2
    if agent:  # one task per node of the batch job's srun step: this node's ranks
        node = os.environ.get("SLURMD_NODENAME", "")
        if not node:
            print("--node-agent: SLURMD_NODENAME is not set (run under srun)", file=sys.stderr)
            return 2
        return supervise(Path(args[0]), node)
    return supervise(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
