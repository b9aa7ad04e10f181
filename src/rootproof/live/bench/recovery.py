"""The recovery executor: apart from the agent, it runs only whitelisted actions, only when
their deterministic preconditions hold at execution time and the approval policy allows them
(CONTRACT — being built).

Approval policies (`--approve`):
- `none` (default): nothing runs; the proposal is recorded;
- `listed`: runs a proposed action only if the scenario's recovery contract lists it as
  executable (`LiveScenario.executable`);
- `all`: runs any whitelisted action the report proposes.

Every decision, precondition check and result is one `RecoveryRecord`, persisted with the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rootproof.live.bench.checks import Check
from rootproof.live.bench.faults import Fault

__all__ = ["APPROVALS", "WHITELIST", "Approval", "RecoveryExecutor", "RecoveryRecord"]

Approval = Literal["none", "listed", "all"]
APPROVALS: tuple[Approval, ...] = ("none", "listed", "all")

WHITELIST: frozenset[str] = frozenset({"terminate_blocking_session", "kill_idle_clients", "restart_service", "no_action"})
"""Taxonomy actions the executor knows how to run."""


@dataclass(kw_only=True)
class RecoveryRecord:
    """One proposed action and what the executor did with it."""

    action: str
    target: str = ""
    whitelisted: bool
    approved: bool
    approval: Approval
    preconditions: list[Check] = field(default_factory=list)
    executed: bool = False
    ok: bool = False
    result: str = ""
    duration_ms: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "target": self.target,
            "whitelisted": self.whitelisted,
            "approved": self.approved,
            "approval": self.approval,
            "preconditions": [c.as_dict() for c in self.preconditions],
            "executed": self.executed,
            "ok": self.ok,
            "result": self.result,
            "duration_ms": self.duration_ms,
        }


class RecoveryExecutor:
    """Runs a report's proposed recovery against one fault of one environment."""

    def __init__(self, fault: Fault, *, approval: Approval, executable: tuple[str, ...]) -> None:
        self.fault = fault
        self.approval = approval
        self.executable = executable

    def run(self, proposals: list[dict[str, Any]], report: dict[str, Any] | None, evidence_text: str) -> list[RecoveryRecord]:
        """One record per proposal (the report's `recovery` items, in order; at most one action
        is executed: the first approved whitelisted one whose preconditions hold).
        `evidence_text`: the verified excerpts the report's root-cause claims cite, where the
        preconditions look for what the evidence named (the blocker's pid, …)."""
        raise NotImplementedError
