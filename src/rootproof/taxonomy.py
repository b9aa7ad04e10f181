"""The diagnosis taxonomy: components, mechanisms and recovery actions (scenario-format.md).

Unknown values are load errors wherever the taxonomy is used (scenarios, cards, drafts). The
`Literal` aliases give JSON-schema enums; the frozensets and the action table are for checks.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "CARD_DOMAINS",
    "COMPONENTS",
    "MECHANISMS",
    "RECOVERY_ACTIONS",
    "CardDomain",
    "Component",
    "Mechanism",
    "RecoveryAction",
    "Risk",
]

Component = Literal[
    "application",
    "connection_pool",
    "postgresql",
    "mysql",
    "redis",
    "nginx",
    "jvm",
    "kubernetes",
    "message_queue",
    "network",
    "dns",
    "disk",
    "tls",
    "host",
    "configuration",
]
"""A taxonomy component: the part of the system a root cause lives in."""

Mechanism = Literal[
    "row_lock_contention",
    "deadlock",
    "connection_exhaustion",
    "pool_leak",
    "slow_query",
    "replication_lag",
    "max_clients_reached",
    "memory_eviction",
    "upstream_timeout",
    "gc_pause",
    "oom_kill",
    "disk_full",
    "dns_resolution_failure",
    "certificate_expired",
    "bad_config_rollout",
    "cpu_saturation",
    "thread_pool_exhaustion",
    "queue_backlog",
    "network_partition",
]
"""A taxonomy mechanism: how the fault works."""

RecoveryAction = Literal[
    "terminate_blocking_session",
    "kill_idle_clients",
    "restart_service",
    "rollback_config",
    "increase_pool_size",
    "scale_out",
    "failover_replica",
    "clear_disk_space",
    "renew_certificate",
    "tune_timeout",
    "restart_database",
    "no_action",
]
"""A taxonomy recovery action."""

Risk = Literal["low", "medium", "high"]
"""Risk of a recovery action."""

CardDomain = Literal[
    "postgresql",
    "mysql",
    "redis",
    "nginx",
    "kubernetes",
    "message_queue",
    "jvm",
    "network",
    "dns",
    "disk",
    "tls",
    "connection_pool",
    "application",
    "host",
]
"""The domain of a knowledge card (docs/knowledge-cards.md)."""

COMPONENTS: frozenset[str] = frozenset(get_args(Component))
"""Every taxonomy component."""
MECHANISMS: frozenset[str] = frozenset(get_args(Mechanism))
"""Every taxonomy mechanism."""
CARD_DOMAINS: frozenset[str] = frozenset(get_args(CardDomain))
"""Every knowledge-card domain."""

RECOVERY_ACTIONS: dict[str, tuple[Risk, bool]] = {
    "terminate_blocking_session": ("medium", True),
    "kill_idle_clients": ("medium", True),
    "restart_service": ("medium", True),
    "rollback_config": ("medium", True),
    "increase_pool_size": ("medium", True),
    "scale_out": ("low", False),
    "failover_replica": ("high", True),
    "clear_disk_space": ("medium", True),
    "renew_certificate": ("low", True),
    "tune_timeout": ("medium", True),
    "restart_database": ("high", True),
    "no_action": ("low", False),
}
"""Recovery action → (risk, requires approval by default)."""
