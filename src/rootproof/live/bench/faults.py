"""The live benchmark's five faults: inject, confirm, cleanup, residue (CONTRACT — being built).

A fault is held by processes outside the agent's reach (holder processes started by the
benchmark, or the order service's admin switch); the agent only observes them through the
targets file. Every holder process is recorded in the run's `pids/fault_<name>.pid` (a
`ProcessRecord`), so `rootproof live down` and the next preflight's stale-run cleanup stop it
like any component.

Facts the ground truth and the recovery preconditions need (the blocker's pid, the idle
clients' ids, …) are in `Fault.facts` after `inject`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rootproof.live.bench.checks import Check
from rootproof.live.env import LiveEnvironment

__all__ = ["FAULTS", "Fault"]


class Fault:
    """One fault of one scenario in one live environment."""

    name: ClassVar[str]
    """The scenario name (`pg-row-lock`, `pg-deadlock`, `redis-maxclients`, `nginx-upstream-timeout`, `order-pool-leak`)."""

    def __init__(self, env: LiveEnvironment) -> None:
        self.env = env
        self.facts: dict[str, Any] = {}

    def inject(self) -> None:
        """Make the fault happen (run-scoped); fill `facts`. Raises LiveEnvironmentError when it cannot."""
        raise NotImplementedError

    def confirm(self, *, timeout_s: float = 30.0) -> Check:
        """Wait (bounded) until a probe shows the fault really happens (business probe failing,
        waiters present, clients at the maximum, …)."""
        raise NotImplementedError

    def verify(self) -> list[Check]:
        """After recovery (or none): the checks of the recovery contract, each one instant;
        the runner holds them for several seconds (`checks.hold`)."""
        raise NotImplementedError

    def cleanup(self) -> list[Check]:
        """Remove everything the fault made (holders stopped, switches reset, test rows
        removed); safe to call twice and after a failed inject."""
        raise NotImplementedError

    def residue(self) -> list[str]:
        """What the fault left behind (sessions, locks, clients, holder processes, files); empty when clean."""
        raise NotImplementedError


FAULTS: dict[str, type[Fault]] = {}
"""Scenario name → its fault class."""
