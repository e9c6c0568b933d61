"""The policy interface and the registry of named policies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from oak.model.snapshot import Allocation, RoundSnapshot


@runtime_checkable
class Policy(Protocol):
    """A scheduling policy: ``decide`` is a pure function of the snapshot.

    Every capability the engine reads is declared here (mypy checks each implementation); :class:`PolicyBase`
    gives the defaults:

    * ``needs_node_goodput`` (default False): fill ``RoundSnapshot.node_goodput``.
    * ``avoids_failing_nodes`` (default False): the engine places this policy's jobs on the nodes with the fewest
      *observed* hardware failures first (what a real scheduler can see, not the simulator's hidden rates), so
      repeat offenders get work last; a job whose configuration is unchanged keeps its GPUs either way.
    * ``reads_clock`` (default True): False declares that ``decide`` is deterministic and reads none of the
      snapshot's clock fields (``time_s``, ``age_s``, ``t_queue_s``), so two snapshots equal in every other field
      get the same allocation. The simulator then skips the rounds of an idle stretch (no job holds GPUs, no
      arrival) whose decision is provably the one just taken.

    Optional hooks live on :class:`PolicyBase` (a policy that does not derive from it simply has none).
    """

    @property
    def name(self) -> str: ...

    @property
    def reads_clock(self) -> bool: ...

    @property
    def needs_node_goodput(self) -> bool: ...

    @property
    def avoids_failing_nodes(self) -> bool: ...

    def decide(self, snap: RoundSnapshot) -> Allocation: ...


class PolicyBase:
    """The defaults of the optional capabilities (a policy that reads the clock and no per-node goodput), and the
    optional hooks:

    * ``notes(snap, alloc)`` (default none): the policy's own word on why some jobs hold what they hold after its
      decision (e.g. the waiting guard's protection), by job position; called only where reasons are shown
      (``oak.engine.reasons``), never by ``decide``.
    * ``state_to_json(state)`` / ``state_from_json(data)`` (default: not kept): the policy's ``Allocation.state``
      as JSON values and back. A runtime scheduler commits it with each round, so that a scheduler restarted on
      its run directory hands the next round the state the last one left (the waiting guard's ledger, the stint
      each job's moves are measured from) instead of starting without. ``state_from_json`` returns None for data
      it does not recognise: the policy then starts without state, as on a fresh run.
    """

    @property
    def reads_clock(self) -> bool:
        return True

    @property
    def needs_node_goodput(self) -> bool:
        return False

    @property
    def avoids_failing_nodes(self) -> bool:
        return False

    def notes(self, snap: RoundSnapshot, alloc: Allocation) -> Mapping[int, str]:
        return {}

    def state_to_json(self, state: object) -> object | None:
        return None

    def state_from_json(self, data: object) -> object | None:
        return None
