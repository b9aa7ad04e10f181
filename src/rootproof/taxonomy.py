"""The diagnosis taxonomy: components, mechanisms and recovery actions (docs/taxonomy.md).

Unknown values are load errors wherever the taxonomy is used (scenarios, cards, drafts). The
`Literal` aliases are the built-in taxonomy; the frozensets and the action table are for checks.
Users' knowledge cards may add labels outside it only when namespaced (`acme.ledger_lock_wait`,
see `is_namespaced`); a `Taxonomy` is the built-in one plus the labels the loaded cards declare,
and is what the draft schema's enums and the checks of a run are built from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

__all__ = [
    "BUILTIN_TAXONOMY",
    "CARD_DOMAINS",
    "COMPONENTS",
    "MECHANISMS",
    "NAMESPACED_ACTION_POLICY",
    "NAMESPACE_RULE",
    "RECOVERY_ACTIONS",
    "CardDomain",
    "Component",
    "LabelKind",
    "Mechanism",
    "RecoveryAction",
    "Risk",
    "Taxonomy",
    "is_namespaced",
    "recovery_policy",
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
    "failover",
    "storage_full",
    "checkpoint_storm",
    "vacuum_storm",
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
    "add_index",
    "expand_storage",
    "throttle_job",
    "cancel_query",
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
    "add_index": ("medium", True),
    "expand_storage": ("medium", True),
    "throttle_job": ("medium", True),
    "cancel_query": ("medium", True),
}
"""Recovery action → (risk, requires approval by default)."""

LabelKind = Literal["component", "mechanism", "recovery action"]
"""The three kinds of taxonomy label."""

_NAMESPACED = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")
NAMESPACE_RULE = (
    "<namespace>.<name>: two parts of lower-case letters, digits and '_', each starting with a "
    "letter, joined by one dot"
)
"""The rule a label outside the built-in taxonomy must follow (docs/taxonomy.md)."""

NAMESPACED_ACTION_POLICY: tuple[Risk, bool] = ("high", True)
"""(risk, requires approval) of a namespaced recovery action: the most cautious default."""


def is_namespaced(label: str) -> bool:
    """True for `<namespace>.<name>` labels such as `acme.ledger_lock_wait` (NAMESPACE_RULE)."""
    return _NAMESPACED.match(label) is not None


def recovery_policy(action: str) -> tuple[Risk, bool]:
    """(risk, requires approval by default) of a recovery action: the built-in table, or
    `NAMESPACED_ACTION_POLICY` for an action a user's card adds."""
    return RECOVERY_ACTIONS.get(action, NAMESPACED_ACTION_POLICY)


def _merged(base: tuple[str, ...], more: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*base, *more)))


@dataclass(frozen=True, kw_only=True)
class Taxonomy:
    """The labels a run may use: the built-in taxonomy plus the namespaced labels its cards add."""

    components: tuple[str, ...]
    """Every component, built-in first, in order."""
    mechanisms: tuple[str, ...]
    """Every mechanism, built-in first, in order."""
    recovery_actions: tuple[str, ...]
    """Every recovery action, built-in first, in order."""

    def values(self, kind: LabelKind) -> tuple[str, ...]:
        """The labels of one kind."""
        if kind == "component":
            return self.components
        if kind == "mechanism":
            return self.mechanisms
        return self.recovery_actions

    def extended(
        self,
        *,
        components: Iterable[str] = (),
        mechanisms: Iterable[str] = (),
        recovery_actions: Iterable[str] = (),
    ) -> Taxonomy:
        """This taxonomy plus more labels (kept in order, each once)."""
        return Taxonomy(
            components=_merged(self.components, components),
            mechanisms=_merged(self.mechanisms, mechanisms),
            recovery_actions=_merged(self.recovery_actions, recovery_actions),
        )

    def unknown(self, kind: LabelKind, label: str) -> str | None:
        """None when `label` is a known label of `kind`; else what is wrong, for an error message."""
        known = self.values(kind)
        if label in known:
            return None
        builtin = BUILTIN_TAXONOMY.values(kind)
        expected = f"one of {', '.join(sorted(builtin))}"
        if is_namespaced(label):
            return (
                f"unknown {kind} {label!r}: a namespaced {kind} must be declared by a knowledge card "
                f"(ROOTPROOF_CARDS_DIR); expected {expected}"
                + (
                    f", or one the cards declare: {', '.join(k for k in known if k not in builtin)}"
                    if len(known) > len(builtin)
                    else ""
                )
            )
        return f"unknown {kind} {label!r} (expected {expected}, or a namespaced {kind}: {NAMESPACE_RULE})"


BUILTIN_TAXONOMY = Taxonomy(
    components=get_args(Component),
    mechanisms=get_args(Mechanism),
    recovery_actions=tuple(RECOVERY_ACTIONS),
)
"""The built-in taxonomy alone (no user cards)."""
