"""The data tables that map an OpenSRE answer key onto the rootproof taxonomy.

Every rule the importer applies to `answer.yml` and `scenario.yml` is a row here, so a reader
(and docs/importing.md) can see exactly what prose leads to which label. Phrases are matched
on case-folded text with whitespace collapsed. Nothing here names a case.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ACTIONS",
    "CATEGORIES",
    "COMPOSITIONAL",
    "CONTROL_FORBIDDEN",
    "DISMISS_AFTER",
    "DISMISS_SENTENCE",
    "ENGINES",
    "FAILURE_MODES",
    "FORWARD",
    "HEALTHY_CATEGORIES",
    "MECHANISMS",
    "REVERSE",
    "RULING_OUT_WORDS",
    "SINGLE_CAUSE",
    "MechanismRule",
    "rule_for",
]


@dataclass(frozen=True, kw_only=True)
class MechanismRule:
    """How answer prose names one mechanism, and what goes with it."""

    mechanism: str
    phrases: tuple[str, ...]
    """Case-folded phrases that name the mechanism (a metric name counts: `replicalag`)."""
    component: str | None = None
    """The component at fault; None: the database engine's (`ENGINES`)."""
    also_mechanisms: tuple[str, ...] = ()
    """Labels also accepted for this root cause (an ambiguous one: storage full is disk_full too)."""
    also_components: tuple[str, ...] = ()
    also_if: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(mechanism, phrases): also accepted when the sentence naming the root cause has one of the
    phrases (CPU burnt by a full scan is a slow query too)."""
    acceptable: tuple[str, ...] = ()
    """Recovery actions that fix it, accepted whatever the answer proposes."""
    forbidden: tuple[str, ...] = ()
    """Recovery actions that must not be proposed for it."""


MECHANISMS: tuple[MechanismRule, ...] = (
    MechanismRule(
        mechanism="pool_leak",
        component="connection_pool",
        phrases=(
            "connection pool leak",
            "pool leak",
            "connection leak",
            "leaked connection",
            "leaked client session",
            "leaked session",
            "leaking connections",
        ),
        acceptable=("restart_service",),
        forbidden=("increase_pool_size", "restart_database"),
    ),
    MechanismRule(
        mechanism="failover",
        phrases=("failover", "failed over", "fail over", "fail-over"),
        acceptable=("no_action",),
        forbidden=("failover_replica", "restart_database"),
    ),
    MechanismRule(
        mechanism="checkpoint_storm",
        phrases=("checkpoint storm", "checkpoints are occurring too frequently", "checkpoint"),
        acceptable=("throttle_job",),
        forbidden=("restart_database",),
    ),
    MechanismRule(
        mechanism="vacuum_storm",
        phrases=("vacuum storm", "autovacuum", "vacuum", "wraparound"),
        acceptable=("throttle_job",),
        forbidden=("restart_database",),
    ),
    MechanismRule(
        mechanism="storage_full",
        phrases=(
            "out of storage",
            "storage full",
            "storage-full",
            "storage exhaustion",
            "storage is full",
            "storage space",
            "freestoragespace",
            "insufficient storage",
            "low storage",
            "storage pressure",
            "disk full",
            "disk is full",
        ),
        also_mechanisms=("disk_full",),
        also_components=("disk",),
        acceptable=("expand_storage",),
        forbidden=("restart_database",),
    ),
    MechanismRule(
        mechanism="replication_lag",
        phrases=(
            "replication lag",
            "replica lag",
            "replicalag",
            "replay lag",
            "replication delay",
            "replica is behind",
            "lagging replica",
        ),
        acceptable=("throttle_job",),
        forbidden=("failover_replica", "restart_database"),
    ),
    MechanismRule(
        mechanism="connection_exhaustion",
        phrases=(
            "connection exhaustion",
            "connections exhausted",
            "exhausting the connection",
            "max_connections",
            "connection limit",
            "connection ceiling",
            "too many connections",
            "databaseconnections",
            "connection saturation",
        ),
        acceptable=("kill_idle_clients",),
        forbidden=("restart_database",),
    ),
    MechanismRule(
        mechanism="slow_query",
        phrases=("slow query", "slow queries"),
        acceptable=("add_index", "cancel_query"),
        forbidden=("restart_database",),
    ),
    MechanismRule(
        mechanism="cpu_saturation",
        phrases=(
            "cpu saturation",
            "cpu saturat",
            "cpuutilization",
            "cpu utilization",
            "cpu-bound",
            "cpu bound",
            "cpu elevation",
            "high cpu",
            "cpu contention",
            "cpu pressure",
        ),
        also_if=(
            (
                "slow_query",
                (
                    "query",
                    "full table scan",
                    "full-table scan",
                    "sequential scan",
                    "seq scan",
                    "missing index",
                    "statement",
                ),
            ),
        ),
        acceptable=("add_index", "cancel_query"),
        forbidden=("restart_database",),
    ),
)
"""Mechanisms the answers name. Where one statement names several, the causal connectives
decide (`FORWARD`, `REVERSE`), then the position (the first named)."""

ENGINES: dict[str, str] = {
    "postgres": "postgresql",
    "aurora-postgres": "postgresql",
    "aurora-postgresql": "postgresql",
    "mysql": "mysql",
    "aurora-mysql": "mysql",
    "mariadb": "mysql",
}
"""`scenario.yml` engine → the component a database mechanism lives in (default postgresql)."""

FAILURE_MODES: dict[str, str] = {
    "replication_lag": "replication_lag",
    "connection_exhaustion": "connection_exhaustion",
    "storage_full": "storage_full",
    "cpu_saturation": "cpu_saturation",
    "failover": "failover",
    "checkpoint_storm": "checkpoint_storm",
    "vacuum_storm": "vacuum_storm",
    "pool_leak": "pool_leak",
}
"""`failure_mode` → mechanism, used only when the answer's prose names no mechanism (the prose
decides: 009's failure_mode says connection_exhaustion, its answer a pool leak)."""

HEALTHY_CATEGORIES = frozenset({"healthy"})
"""`root_cause_category` values of a no-fault case (`fault: false`, no root cause)."""

CATEGORIES: dict[str, str] = {
    "cpu_saturation": "cpu_saturation",
    "connection_exhaustion": "connection_exhaustion",
    "replication_lag": "replication_lag",
    "storage_full": "storage_full",
    "failover": "failover",
    "infrastructure": "failover",
}
"""`forbidden_categories` → the alternative it stands for (`resource_exhaustion` and `healthy`
name no mechanism and are skipped)."""

RULING_OUT_WORDS: dict[str, str] = {
    "connection": "connection_exhaustion",
    "connections": "connection_exhaustion",
    "replication": "replication_lag",
    "replica": "replication_lag",
    "failover": "failover",
    "cpu": "cpu_saturation",
    "storage": "storage_full",
    "checkpoint": "checkpoint_storm",
    "vacuum": "vacuum_storm",
    "leak": "pool_leak",
}
"""`ruling_out_keywords` (a word the answer must use to dismiss an alternative) → that alternative."""

FORWARD: tuple[str, ...] = (
    "caused by",
    "because",
    "due to",
    "driven by",
    "triggered by",
    "as a result of",
    "resulting from",
    "stemming from",
)
"""`<effect> caused by <cause>`: the mechanism after the connective is the root cause; one
named before it (the headline: "the database hit connection exhaustion because …") is accepted too."""
REVERSE: tuple[str, ...] = (
    "is causing",
    "are causing",
    "causing",
    "leads to",
    "led to",
    "resulting in",
    "results in",
)
"""`<cause> is causing <effect>`: the mechanism before the connective is the root cause; the effects are not."""

DISMISS_SENTENCE: tuple[str, ...] = (
    "confounder",
    "red herring",
    "not the root cause",
    "not the active root cause",
    "not the cause",
    "historical event",
    "unrelated",
    "coincidental",
    "side effect",
    "downstream symptom",
    "a symptom of",
)
"""A sentence with one of these dismisses every mechanism it names (a red herring)."""
DISMISS_AFTER: tuple[str, ...] = (
    "rather than",
    "instead of",
    "not with",
    "not a ",
    "not an ",
    "not the ",
    "ruling out",
    "ruled out",
    "no sign of",
    "no evidence of",
)
"""What follows one of these in a sentence is dismissed; what precedes it stands."""

COMPOSITIONAL: tuple[str, ...] = (
    "two independent",
    "compositional",
    "dual fault",
    "dual-fault",
    "two separate",
    "independent root causes",
    "two root causes",
)
"""The root cause statement describes more than one independent cause."""
SINGLE_CAUSE: tuple[str, ...] = (
    "two root causes",
    "separate root causes",
    "two independent problems",
    "multiple root causes",
    "independent root causes",
    "second root cause",
    "contributing cause",
)
"""A forbidden keyword/phrase saying the answer is one cause: never read as compositional."""

ACTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "expand_storage",
        (
            "expand storage",
            "expanding storage",
            "expand the storage",
            "storage autoscaling",
            "increase allocated storage",
            "increasing allocated storage",
            "increase storage",
            "add storage",
            "expanding the volume",
            "expand the volume",
            "scale storage",
        ),
    ),
    (
        "add_index",
        (
            "add an index",
            "adding an index",
            "add a partial index",
            "adding a partial index",
            "create an index",
            "creating an index",
            "add a selective index",
            "adding a selective index",
        ),
    ),
    (
        "throttle_job",
        (
            "throttl",
            "reduce batch size",
            "reducing batch size",
            "smaller batches",
            "off-peak",
            "pause the job",
            "pausing the job",
            "reschedul",
            "rate limit",
            "rate-limit",
        ),
    ),
    (
        "cancel_query",
        (
            "cancel the query",
            "cancelling the query",
            "canceling the query",
            "terminate the query",
            "kill the query",
            "pg_cancel_backend",
            "cancel the runaway",
        ),
    ),
    (
        "kill_idle_clients",
        (
            "terminating leaked sessions",
            "terminate leaked sessions",
            "terminate idle",
            "terminating idle",
            "kill idle",
            "close idle",
            "idle_session_timeout",
        ),
    ),
    ("terminate_blocking_session", ("terminate the blocking", "pg_terminate_backend")),
    (
        "scale_out",
        (
            "adding replica capacity",
            "add replica capacity",
            "add a replica",
            "adding read replicas",
            "scale out",
            "scaling out",
            "larger instance",
        ),
    ),
    (
        "failover_replica",
        (
            "fail over to",
            "promote the replica",
            "promote a replica",
            "promoting the replica",
            "manual failover",
        ),
    ),
    (
        "restart_service",
        (
            "fixing the connection pool",
            "fix the connection pool",
            "connection pool cleanup",
            "restart the service",
            "restarting the service",
            "restart the application",
        ),
    ),
    (
        "rollback_config",
        ("roll back the", "rolling back the", "revert the deployment", "reverting the deployment"),
    ),
    ("increase_pool_size", ("increase max_connections", "raise max_connections", "increase the pool size")),
    ("no_action", ("no action", "no remediation", "without intervention")),
)
"""Recovery a reference answer proposes (anywhere in `model_response`) → recovery action."""

CONTROL_FORBIDDEN: tuple[str, ...] = ("restart_database", "failover_replica")
"""Actions a no-fault case forbids (its contract is `none`: nothing is called for)."""


def rule_for(mechanism: str) -> MechanismRule:
    """The rule of a mechanism (KeyError for one no rule names)."""
    for r in MECHANISMS:
        if r.mechanism == mechanism:
            return r
    raise KeyError(mechanism)
