"""The recovery executor: apart from the agent, it runs only whitelisted actions, only when
their deterministic preconditions hold at execution time and the approval policy allows them.

Approval policies (`--approve`):
- `none` (default): nothing runs; the proposal is recorded;
- `listed`: runs a proposed action only if the scenario's recovery contract lists it as
  executable (`LiveScenario.executable`);
- `all`: runs any whitelisted action the report proposes.

Every decision, precondition check and result is one `RecoveryRecord`, persisted with the run.

The actions and their preconditions (each a `Check`, checked just before running it):

| action | preconditions | runs |
|---|---|---|
| `terminate_blocking_session` | `evidence_names_blocker` (a pid the cited evidence names as the blocker: `blocking_pids":[P]`, `Process holding the lock: P`, `blocked by process P`, else `"pid":P`; and the proposal's target, if it names a pid, is the same) equals the fault's `blocker_pid`; `blocker_same_backend` (that pid still runs with the same `backend_start`); `blocker_idle_in_transaction`; `blocker_not_order_service` | `pg_terminate_backend` as the superuser |
| `kill_idle_clients` | `clients_exist` (each of the fault's `client_ids`), `clients_idle` (idle ≥ `idle_min_s`), `clients_not_protected` (not `order-service`, `redis_exporter`, `rootproof*`) | `CLIENT KILL ID` for each |
| `restart_service` | `target_is_order_service` (a target, if given, names the order service), `pool_exhausted` | `env.restart("order_service")` |
| `no_action` | — | nothing |
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from rootproof.live.bench.checks import Check
from rootproof.live.bench.faults import Fault, RedisMaxclients, client_list

__all__ = ["APPROVALS", "WHITELIST", "Approval", "RecoveryExecutor", "RecoveryRecord", "evidence_pids"]

Approval = Literal["none", "listed", "all"]
APPROVALS: tuple[Approval, ...] = ("none", "listed", "all")

WHITELIST: frozenset[str] = frozenset(
    {"terminate_blocking_session", "kill_idle_clients", "restart_service", "no_action"}
)
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

    def run(
        self, proposals: list[dict[str, Any]], report: dict[str, Any] | None, evidence_text: str
    ) -> list[RecoveryRecord]:
        """One record per proposal (the report's `recovery` items, in order; at most one action
        is executed: the first approved whitelisted one whose preconditions hold).
        `evidence_text`: the verified excerpts the report's root-cause claims cite, where the
        preconditions look for what the evidence named (the blocker's pid, …)."""
        del report  # the proposals are the report's; nothing else of it decides what runs
        records: list[RecoveryRecord] = []
        done = False
        for proposal in proposals:
            action = str(proposal.get("action", "")).strip()
            target = str(proposal.get("target", "") or "")
            whitelisted = action in WHITELIST
            approved = whitelisted and (
                self.approval == "all" or (self.approval == "listed" and action in self.executable)
            )
            rec = RecoveryRecord(
                action=action,
                target=target,
                whitelisted=whitelisted,
                approved=approved,
                approval=self.approval,
            )
            records.append(rec)
            if not whitelisted:
                rec.result = f"not whitelisted ({', '.join(sorted(WHITELIST))}): never executed"
                continue
            if not approved:
                rec.result = f"not approved under approval {self.approval!r}" + (
                    f" (executable: {', '.join(self.executable) or 'none'})"
                    if self.approval == "listed"
                    else ""
                )
                continue
            if done:
                rec.result = "not executed: one action was already executed"
                continue
            started = time.perf_counter()
            pre, act = self._plan(action, target, evidence_text)
            rec.preconditions = pre
            if all(c.ok for c in pre):
                rec.executed, done = True, True
                try:
                    rec.ok, rec.result = act()
                except Exception as exc:  # noqa: BLE001 - an action's failure is its record's result
                    rec.ok, rec.result = False, f"{type(exc).__name__}: {exc}"[:500]
            else:
                rec.result = "not executed: precondition failed: " + ", ".join(
                    c.name for c in pre if not c.ok
                )
            rec.duration_ms = int((time.perf_counter() - started) * 1000)
        return records

    # -- the actions -----------------------------------------------------------------------

    def _plan(
        self, action: str, target: str, evidence: str
    ) -> tuple[list[Check], Callable[[], tuple[bool, str]]]:
        """The action's preconditions, checked now, and the callable that runs it."""
        planners = {
            "terminate_blocking_session": self._terminate,
            "kill_idle_clients": self._kill_clients,
            "restart_service": self._restart,
            "no_action": self._no_action,
        }
        try:
            return planners[action](target, evidence)
        except Exception as exc:  # noqa: BLE001 - a precondition that cannot be checked does not hold
            return [
                Check(name="preconditions_checkable", ok=False, detail=f"{type(exc).__name__}: {exc}"[:300])
            ], lambda: (False, "")

    def _no_action(self, target: str, evidence: str) -> tuple[list[Check], Callable[[], tuple[bool, str]]]:
        return [], lambda: (True, "no action taken")

    def _terminate(self, target: str, evidence: str) -> tuple[list[Check], Callable[[], tuple[bool, str]]]:
        facts = self.fault.facts
        blocker = facts.get("blocker_pid")
        named = evidence_pids(evidence)
        wanted = [int(p) for p in re.findall(r"\d+", target)]
        # The target names the blocker among what it names (a culprit such as "pid 41 blocks
        # pid 42" names the waiter too); the cited evidence must name it as the blocker.
        ok = blocker is not None and blocker in named and (not wanted or blocker in wanted)
        checks = [
            Check(
                name="evidence_names_blocker",
                ok=ok,
                detail=f"evidence names {sorted(named) or 'no pid'}; target {target or '-'}; the blocker is {blocker}",
            )
        ]
        if blocker is None:
            return checks, lambda: (False, "")
        rows = self.fault.superuser_rows(
            "SELECT pid, backend_start, state, application_name, usename FROM pg_stat_activity WHERE pid = %s",
            (blocker,),
        )
        row = rows[0] if rows else None
        same = row is not None and row["backend_start"].isoformat() == facts.get("blocker_backend_start")
        checks.append(
            Check(
                name="blocker_same_backend",
                ok=same,
                detail=f"pid {blocker}: "
                + (f"backend_start {row['backend_start'].isoformat()}" if row else "no such session"),
            )
        )
        checks.append(
            Check(
                name="blocker_idle_in_transaction",
                ok=row is not None and row["state"] == "idle in transaction",
                detail=f"state {row['state'] if row else '-'}",
            )
        )
        app = row["application_name"] if row else "-"
        checks.append(
            Check(
                name="blocker_not_order_service",
                ok=row is not None and app != "order-service" and row["usename"] != "orders_app",
                detail=f"application_name {app}",
            )
        )

        def act() -> tuple[bool, str]:
            out = self.fault.superuser_rows("SELECT pg_terminate_backend(%s) AS ok", (blocker,))
            return bool(
                out and out[0]["ok"]
            ), f"pg_terminate_backend({blocker}): {bool(out and out[0]['ok'])}"

        return checks, act

    def _kill_clients(self, target: str, evidence: str) -> tuple[list[Check], Callable[[], tuple[bool, str]]]:
        ids = [int(i) for i in self.fault.facts.get("client_ids", [])]
        idle_min = float(getattr(self.fault, "idle_min_s", 5.0))
        protected = tuple(getattr(self.fault, "protected", RedisMaxclients.protected))
        clients = {
            int(c["id"]): c
            for c in client_list(str(self.fault.redis_call("CLIENT", "LIST")))
            if c.get("id", "").isdigit()
        }
        present = [i for i in ids if i in clients]
        idle = [i for i in present if int(clients[i].get("idle", "0")) >= idle_min]
        bad = [
            f"{i} ({clients[i].get('name')})"
            for i in present
            if any(clients[i].get("name", "").startswith(p) for p in protected)
        ]
        checks = [
            Check(
                name="clients_exist",
                ok=bool(ids) and len(present) == len(ids),
                detail=f"{len(present)} of {len(ids)} clients still connected",
            ),
            Check(
                name="clients_idle",
                ok=bool(ids) and len(idle) == len(ids),
                detail=f"{len(idle)} of {len(ids)} idle >= {idle_min:g} s",
            ),
            Check(
                name="clients_not_protected",
                ok=not bad,
                detail=f"protected: {', '.join(bad)}" if bad else f"none is {', '.join(protected)}",
            ),
        ]

        def act() -> tuple[bool, str]:
            killed = sum(int(self.fault.redis_call("CLIENT", "KILL", "ID", str(i)) or 0) for i in ids)
            return killed == len(ids), f"CLIENT KILL ID: {killed} of {len(ids)} clients killed"

        return checks, act

    def _restart(self, target: str, evidence: str) -> tuple[list[Check], Callable[[], tuple[bool, str]]]:
        env = self.fault.env
        # The service to restart is the one the target or the cited evidence names (the target
        # is often the culprit: a database user, a session).
        service = re.compile(r"order[-_ ]?service")
        named = bool(service.search(target) or service.search(evidence))
        pool = env.order_admin().pool()
        checks = [
            Check(
                name="target_is_order_service",
                ok=named,
                detail=f"target {target or '-'}; the cited evidence {'names' if service.search(evidence) else 'does not name'} order-service",
            ),
            Check(
                name="pool_exhausted",
                ok=int(pool["checked_out"]) >= int(pool["size"]),
                detail=f"pool checked_out {pool['checked_out']} of {pool['size']}",
            ),
        ]

        def act() -> tuple[bool, str]:
            old = env.pids().get("order_service")
            new = env.restart("order_service")
            return True, f"order service restarted: pid {old} -> {new.pid}"

        return checks, act


_BLOCKER_PATTERNS = (
    re.compile(r"blocking_pids\\?\"?\s*[:=]\s*[\[{]([\d,\s]+)[\]}]"),
    re.compile(r"Process holding the lock:\s*(\d+)"),
    re.compile(r"blocked by process\s+(\d+)"),
)
_PID_PATTERN = re.compile(r"\bpid\\?\"?\s*[:=]\s*(\d+)")


def evidence_pids(text: str) -> set[int]:
    """The pids the cited evidence names as a blocker (`blocking_pids":[P]`, `Process holding
    the lock: P`, `blocked by process P`); when it names none that way, every `"pid": P`."""
    found = {
        int(p)
        for pat in _BLOCKER_PATTERNS
        for m in pat.finditer(text)
        for p in re.findall(r"\d+", m.group(1))
    }
    return found or {int(m.group(1)) for m in _PID_PATTERN.finditer(text)}
