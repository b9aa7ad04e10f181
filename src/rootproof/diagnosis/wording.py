"""The words of a diagnosis, per language: what an operator acts on, from the analyzers' findings."""

from __future__ import annotations

from typing import Any

__all__ = ["limit_culprit"]

_LIMITS = {
    "redis.memory_at_limit": ("maxmemory", "used_memory"),
    "redis.oom_refused_writes": ("maxmemory", "used_memory"),
    "redis.clients_at_limit": ("maxclients", "connected_clients"),
    "redis.rejected_connections": ("maxclients", "connected_clients"),
    "postgresql.sessions_at_limit": ("max_connections", "sessions"),
}


def limit_culprit(findings: list[dict[str, Any]], zh: bool) -> str | None:
    """The limit that ran out and its value, with what was refused, from the findings of one
    mechanism (None when none of them is about a limit). Raw values only."""
    limit: tuple[str, Any] | None = None
    used: tuple[str, Any] | None = None
    policy: Any = None
    refused: list[str] = []
    for f in findings:
        code, nums = str(f.get("finding", "")), f.get("numbers") or {}
        names = _LIMITS.get(code)
        if names is None:
            continue
        if "limit" in nums and limit is None:
            limit = (names[0], nums["limit"])
        if "value" in nums and used is None:
            used = (names[1], nums["value"])
        policy = policy or nums.get("policy")
        if "count" in nums:
            what = {"redis.oom_refused_writes": ("commands refused with OOM (errorstat_OOM)", "条命令因 OOM 被拒（errorstat_OOM）"), "redis.rejected_connections": ("connections rejected (rejected_connections)", "个连接被拒（rejected_connections）")}.get(code)
            if what:
                refused.append(f"{nums['count']} {what[1] if zh else what[0]}")
    if limit is None:
        return None
    if zh:
        text = f"{limit[0]} {limit[1]} 已用尽"
        if used:
            text += f"：{used[0]} {used[1]}"
        if policy:
            text += f"，maxmemory_policy {policy}"
        return text + ("；" + "；".join(refused) if refused else "")
    text = f"{limit[0]} {limit[1]} reached"
    if used:
        text += f": {used[0]} {used[1]}"
    if policy:
        text += f", maxmemory_policy {policy}"
    return text + ("; " + "; ".join(refused) if refused else "")
