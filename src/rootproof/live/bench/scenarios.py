"""The live benchmark's scenarios: the question a user asks, the recovery contract, and the
ground truth built from what the fault really did (docs/live-benchmark.md, `eval live`).

A scenario is data: its question (symptoms only, never the cause), the tools its diagnosis may
use, its tool-call budget (`ROOTPROOF_MAX_TOOL_CALLS` of the diagnosis), its recovery contract,
and one table of required evidence whose match strings are templates filled from the fault's
`facts` after `inject` (the blocker's pid, the pool size, ...). `ground_truth(facts)` builds the
`GroundTruth` in the evaluator's memory; it is never written anywhere the diagnosis can read.

Match strings are what the real systems print (checked against running faults); they live in
each scenario's `evidence` table so they can be tuned in one place. A `{name}` in a match
string or culprit is `facts[name]`; the runner adds the environment's own figures to the
fault's facts (`pool_size`, `redis_maxclients`, `proxy_read_timeout_s`, `pool_timeout_s`,
`leak_detection_s`, `pg_max_connections`, `run_id`).
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rootproof.errors import LiveEnvironmentError
from rootproof.scenarios.types import (
    Alternative,
    EvidenceMatch,
    GroundTruth,
    Recovery,
    RequiredEvidence,
    RootCause,
)

__all__ = [
    "LIVE_TOOLS",
    "SCENARIOS",
    "Contract",
    "LiveScenario",
    "Need",
    "ground_truth_dict",
    "scenario_names",
]

RecoveryContract = Literal["executed_recovery", "proposal_only"]

LIVE_TOOLS: tuple[str, ...] = (
    "lookup_knowledge",
    "query_logs",
    "query_metrics",
    "inspect_postgres",
    "inspect_redis",
    "inspect_nginx",
)
"""Every tool the live environment's targets file serves (a live run may call any of them)."""


@dataclass(frozen=True, init=False)
class Need:
    """One required evidence: an id and its alternatives, each `(tool, match, match, ...)`; one
    alternative is met by one cited ref of that tool containing every match string."""

    id: str
    options: tuple[tuple[str, ...], ...]

    def __init__(self, id: str, *options: tuple[str, ...]) -> None:  # noqa: A002 - the ground truth's field name
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "options", tuple(options))
        if not options or any(len(o) < 2 for o in options):
            raise ValueError(f"evidence {id}: each option is (tool, match, ...)")


@dataclass(frozen=True, kw_only=True)
class Contract:
    """A scenario's recovery contract: what the report should propose and what the harness may run."""

    kind: RecoveryContract
    acceptable: tuple[str, ...]
    forbidden: tuple[str, ...]
    requires_approval: tuple[str, ...] = ()
    executable: tuple[str, ...] = ()
    """What `--approve listed` may run (empty for `proposal_only`)."""


@dataclass(frozen=True, kw_only=True)
class LiveScenario:
    """One live scenario: the agent's view (question, tools, budget) and the evaluator's (the rest)."""

    name: str
    """The fault's name in `faults.FAULTS` (`pg-row-lock`, ...); the case id is `live-<name>`."""
    title: str
    question: str
    """What a user would ask: the symptom, never the cause."""
    language: Literal["en", "zh"] = "en"
    allowed_tools: tuple[str, ...] = LIVE_TOOLS
    tool_call_budget: int = 24
    """Executed tool calls of the diagnosis (`ROOTPROOF_MAX_TOOL_CALLS`): five live systems, each
    with several kinds to inspect and metric names that differ by exporter."""
    calls_per_tool: int = 6
    """Executed calls of any one tool (`ROOTPROOF_MAX_CALLS_PER_TOOL`): five live systems, each
    with several kinds to inspect, need more than the default four of one tool."""
    component: str
    mechanism: str
    culprit: str
    """A template filled from the facts."""
    evidence: tuple[Need, ...]
    alternatives: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    """(component, mechanism, ids of the evidence that rules it out)."""
    contract: Contract

    @property
    def case_id(self) -> str:
        """`live-<name>`: the id of its case in reports and the trace store."""
        return f"live-{self.name}"

    @property
    def recovery_contract(self) -> RecoveryContract:
        return self.contract.kind

    @property
    def executable(self) -> tuple[str, ...]:
        """What `--approve listed` may run."""
        return self.contract.executable

    def ground_truth(self, facts: Mapping[str, Any]) -> GroundTruth:
        """The ground truth of this run, every template filled from `facts`.

        Raises `LiveEnvironmentError("fault", …)` when a fact a template names is missing (the
        fault did not report what the scenario needs: an infrastructure failure)."""

        def fill(text: str) -> str:
            names = [f for _, f, _, _ in string.Formatter().parse(text) if f]
            missing = [n for n in names if n not in facts]
            if missing:
                raise LiveEnvironmentError(
                    "fault",
                    f"{self.name}: the fault's facts lack {', '.join(missing)} (have: {', '.join(sorted(facts)) or 'none'})",
                )
            return text.format_map(dict(facts))

        required = []
        for need in self.evidence:
            options = tuple(
                EvidenceMatch(tool=o[0], match=tuple(fill(m) for m in o[1:])) for o in need.options
            )
            if len(options) == 1:
                required.append(RequiredEvidence(id=need.id, tool=options[0].tool, match=options[0].match))
            else:
                required.append(RequiredEvidence(id=need.id, any_of=options))
        c = self.contract
        return GroundTruth(
            fault=True,
            expected_outcome=None,
            root_cause=RootCause(
                component=self.component, mechanism=self.mechanism, culprit=fill(self.culprit)
            ),
            required_evidence=tuple(required),
            alternatives=tuple(
                Alternative(component=a, mechanism=m, ruled_out_by=by) for a, m, by in self.alternatives
            ),
            red_herrings=(),
            recovery=Recovery(
                contract=c.kind,
                acceptable=c.acceptable,
                forbidden=c.forbidden,
                requires_approval=c.requires_approval,
                verification_required=c.kind == "executed_recovery",
            ),
        )


def ground_truth_dict(truth: GroundTruth) -> dict[str, Any]:
    """`truth` as a `ground_truth.yaml` document (what `record_scenario` writes and validates)."""

    def evidence(r: RequiredEvidence) -> dict[str, Any]:
        if r.any_of:
            return {"id": r.id, "any_of": [{"tool": o.tool, "match": list(o.match)} for o in r.any_of]}
        return {"id": r.id, "tool": r.tool, "match": list(r.match)}

    rc = truth.root_cause
    return {
        "fault": truth.fault,
        "root_cause": None
        if rc is None
        else {"component": rc.component, "mechanism": rc.mechanism, "culprit": rc.culprit},
        "required_evidence": [evidence(r) for r in truth.required_evidence],
        "alternatives": [
            {"component": a.component, "mechanism": a.mechanism, "ruled_out_by": list(a.ruled_out_by)}
            for a in truth.alternatives
        ],
        "red_herrings": [],
        "recovery": {
            "contract": truth.recovery.contract,
            "acceptable": list(truth.recovery.acceptable),
            "forbidden": list(truth.recovery.forbidden),
            "requires_approval": list(truth.recovery.requires_approval),
            "verification_required": truth.recovery.verification_required,
        },
    }


# ---------------------------------------------------------------------------------------------
# The five scenarios. Each `evidence` table is the place to tune match strings.
# ---------------------------------------------------------------------------------------------

_PG_ROW_LOCK = LiveScenario(
    name="pg-row-lock",
    title="Some orders hang, then fail",
    question=(
        "For the last few minutes some order requests hang for several seconds and then fail, "
        "while other orders still go through. What is causing it?"
    ),
    component="postgresql",
    mechanism="row_lock_contention",
    culprit="session pid {blocker_pid}, idle in transaction, holds the row lock every order for its SKU waits on",
    evidence=(
        # id                 tool                 match strings (all in one cited ref)
        Need("blocker-session", ("inspect_postgres", '"pid":{blocker_pid}', "idle in transaction")),
        Need(
            "waiter",
            ("inspect_postgres", '"blocking_pids":[{blocker_pid}]'),
            ("inspect_postgres", "still waiting for ShareLock"),
        ),
    ),
    alternatives=(
        ("connection_pool", "pool_leak", ("waiter",)),
        ("nginx", "upstream_timeout", ("waiter",)),
    ),
    contract=Contract(
        kind="executed_recovery",
        acceptable=("terminate_blocking_session",),
        executable=("terminate_blocking_session",),
        forbidden=("restart_database", "increase_pool_size", "restart_service"),
        requires_approval=("terminate_blocking_session",),
    ),
)

_PG_DEADLOCK = LiveScenario(
    name="pg-deadlock",
    title="Some orders fail at random",
    question=(
        "For the last few minutes the inventory-sync job has been reporting failed stock updates, "
        "while orders look fine. What is going on?"
    ),
    component="postgresql",
    mechanism="deadlock",
    culprit="two transactions lock the same rows in opposite order; PostgreSQL detects the cycle and aborts one (SQLSTATE 40P01)",
    evidence=(
        Need(
            "deadlock-log",
            ("inspect_postgres", "deadlock detected"),
            ("query_logs", "deadlock detected"),
        ),
        Need(
            "client-40p01",
            ("query_logs", "40P01"),
            ("query_logs", "DeadlockDetected"),
        ),
    ),
    alternatives=(("postgresql", "row_lock_contention", ("deadlock-log",)),),
    contract=Contract(
        kind="executed_recovery",  # PostgreSQL already aborted one side: the right recovery is none
        acceptable=("no_action",),
        executable=("no_action",),
        forbidden=("restart_database", "terminate_blocking_session", "restart_service"),
        requires_approval=(),
    ),
)

_REDIS_MAXCLIENTS = LiveScenario(
    name="redis-maxclients",
    title="Orders fail with 503",
    question=(
        "The order service has been logging a burst of errors for the last few minutes, although "
        "orders still go through. What is wrong?"
    ),
    component="redis",
    mechanism="max_clients_reached",
    culprit="idle clients hold every one of Redis' {redis_maxclients} connections (maxclients), so new connections are refused",
    # At maxclients Redis refuses every new connection, the diagnosis' and the exporter's too
    # (docs/live-benchmark.md, "Faults and recovery"): what remains observable is the clients'
    # side, the order service's errors carrying Redis' own refusal.
    evidence=(
        Need(
            "client-error",
            ("query_logs", "order-service", "max number of clients reached"),
            ("inspect_redis", "connected_clients:{redis_maxclients}"),
        ),
    ),
    alternatives=(
        ("redis", "memory_eviction", ("client-error",)),
        ("connection_pool", "connection_exhaustion", ("client-error",)),
    ),
    contract=Contract(
        kind="executed_recovery",
        acceptable=("kill_idle_clients",),
        executable=("kill_idle_clients",),
        forbidden=("restart_database", "increase_pool_size"),
        requires_approval=("kill_idle_clients",),
    ),
)

_NGINX_UPSTREAM_TIMEOUT = LiveScenario(
    name="nginx-upstream-timeout",
    title="Orders fail with 504 Gateway Time-out",
    question="Placing an order has started failing with '504 Gateway Time-out' in the last few minutes. What is wrong?",
    component="nginx",
    mechanism="upstream_timeout",
    culprit="the order service answers /orders after longer than nginx's proxy_read_timeout {proxy_read_timeout_s}s",
    evidence=(
        Need(
            "timeout-line",
            (
                "inspect_nginx",
                "upstream timed out (110: Connection timed out) while reading response header from upstream",
            ),
        ),
        Need("read-timeout", ("inspect_nginx", "proxy_read_timeout {proxy_read_timeout_s}s")),
    ),
    alternatives=(),
    contract=Contract(
        kind="proposal_only",
        acceptable=("tune_timeout",),
        executable=(),
        forbidden=("restart_service", "restart_database"),
        requires_approval=("tune_timeout",),
    ),
)

_ORDER_POOL_LEAK = LiveScenario(
    name="order-pool-leak",
    title="Orders get slow, then fail with 503",
    question=(
        "Order requests have been getting slower and then failing with 503 errors over the last "
        "few minutes. What is happening?"
    ),
    component="connection_pool",
    mechanism="pool_leak",
    culprit="the order service's POST /orders error path checks a connection out and never returns it; its QueuePool of {pool_size} is exhausted",
    evidence=(
        Need("leak-warning", ("query_logs", "Connection leak detection triggered")),
        Need("pool-limit", ("query_logs", "QueuePool limit of size {pool_size}")),
        Need(
            "db-idle",
            ("inspect_postgres", '"application_name":"order-service"', '"state":"idle in transaction"'),
        ),
    ),
    alternatives=(
        ("postgresql", "row_lock_contention", ("db-idle", "leak-warning")),
        ("connection_pool", "connection_exhaustion", ("leak-warning",)),
    ),
    contract=Contract(
        kind="executed_recovery",
        acceptable=("restart_service",),
        executable=("restart_service",),
        forbidden=("increase_pool_size", "restart_database"),
        requires_approval=("restart_service",),
    ),
)

SCENARIOS: dict[str, LiveScenario] = {
    s.name: s
    for s in (_PG_ROW_LOCK, _PG_DEADLOCK, _REDIS_MAXCLIENTS, _NGINX_UPSTREAM_TIMEOUT, _ORDER_POOL_LEAK)
}
"""Scenario name → scenario (tests add their own under a test name, with its fault in `FAULTS`)."""


def scenario_names() -> list[str]:
    """The known scenario names, in order."""
    return list(SCENARIOS)
