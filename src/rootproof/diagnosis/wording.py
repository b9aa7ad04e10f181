"""The words of a diagnosis, per language: what an operator acts on, from the analyzers' findings."""

from __future__ import annotations

from typing import Any

__all__ = ["blocker_culprit", "limit_culprit"]

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
    reached, colon, comma, semi = ("已用尽", "：", "，", "；") if zh else (" reached", ": ", ", ", "; ")
    text = f"{limit[0]} {limit[1]}{' ' if zh else ''}{reached}"
    if used:
        text += f"{colon}{used[0]} {used[1]}"
    if policy:
        text += f"{comma}maxmemory_policy {policy}"
    return text + (semi + semi.join(refused) if refused else "")


def blocker_culprit(findings: list[dict[str, Any]], zh: bool, row: dict[str, Any] | None = None) -> str | None:
    """The root blocker as an operator acts on it (pid, application, user, client, state,
    transaction age, last query) and how many sessions it blocks; None without a blocking finding.
    `row`: the blocker's own session row, when one was read (its fields complete the finding's)."""
    f = next((f for f in findings if f.get("finding") == "postgresql.blocking" and (f.get("facts") or {}).get("pid") is not None), None)
    if f is None:
        return None
    facts, n = dict(f["facts"]), (f.get("numbers") or {}).get("blocked")
    if row and str(row.get("pid")) == str(facts["pid"]):
        facts.update({k: v for k, v in row.items() if k not in facts and v not in (None, "")})
    labels = (
        ("application_name", "应用", "application"),
        ("usename", "用户", "user"),
        ("client_addr", "客户端", "client"),
        ("datname", "数据库", "database"),
        ("state", "状态", "state"),
    )
    parts = [f"{zl if zh else el} {facts[k]}" for k, zl, el in labels if facts.get(k) not in (None, "")]
    if isinstance(facts.get("xact_age_s"), int | float):
        parts.append(f"事务已打开 {facts['xact_age_s']:g} 秒" if zh else f"transaction open {facts['xact_age_s']:g} s")
    elif facts.get("xact_start"):
        parts.append(f"事务开始于 {facts['xact_start']}" if zh else f"transaction open since {facts['xact_start']}")
    if facts.get("query"):
        q = " ".join(str(facts["query"]).split())[:120]
        parts.append(f"最后的语句 '{q}'" if zh else f"last query '{q}'")
    inner = ("，" if zh else ", ").join(parts)
    who = f"pid {facts['pid']}" + ((f"（{inner}）" if zh else f" ({inner})") if inner else "")
    if n:
        return f"{who} 阻塞了 {n} 个会话" if zh else f"{who} blocks {n} session(s)"
    return who


_LABELS_ZH = {
    "row_lock_contention": "行锁争用", "deadlock": "死锁", "connection_exhaustion": "连接耗尽", "pool_leak": "连接池泄漏",
    "slow_query": "慢查询", "replication_lag": "复制延迟", "max_clients_reached": "达到最大客户端数", "memory_eviction": "内存驱逐",
    "upstream_timeout": "上游超时", "gc_pause": "gc 停顿", "oom_kill": "OOM kill", "disk_full": "磁盘满",
    "dns_resolution_failure": "DNS 解析失败", "certificate_expired": "证书过期", "bad_config_rollout": "配置变更",
    "cpu_saturation": "CPU 饱和", "thread_pool_exhaustion": "线程池耗尽", "queue_backlog": "队列积压", "network_partition": "网络分区",
    "failover": "故障切换", "storage_full": "存储空间耗尽", "checkpoint_storm": "检查点风暴", "vacuum_storm": "vacuum 风暴",
}


def _label(component: str, mechanism: str, zh: bool) -> str:
    comp = component.replace("_", " ")
    if zh:
        return f"{comp} {_LABELS_ZH.get(mechanism, mechanism.replace('_', ' '))}"
    return f"{comp} {mechanism.replace('_', ' ')}"


def _is_zh(text: str) -> bool:
    return sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff") >= 2

