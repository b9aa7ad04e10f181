"""Redis `INFO`: memory against `maxmemory` with its policy, refused writes, evictions, clients
against `maxclients`, rejected connections, blocked clients.

Counters (`errorstat_OOM`, `evicted_keys`, `rejected_connections`) count since the server
started: the finding gives `uptime_in_seconds` beside them. The refs are `key:value` lines
(`$.info.<section>.<key>` from a live server, `$.info.<key>` or `$.<key>` in a snapshot):
the analyzer reads keys from the ref texts, whatever the shape.
"""

from __future__ import annotations

from typing import Any

from rootproof.diagnosis.findings import Finding, Ref, threshold


def _fields(refs: list[Ref]) -> dict[str, tuple[str, str]]:
    """key → (raw path, value) of the `key:value` refs."""
    out: dict[str, tuple[str, str]] = {}
    for r in refs:
        key, sep, value = r.text.partition(":")
        if sep and key and " " not in key and key not in out:
            out[key.strip()] = (r.path, value.strip())
    return out


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def _count(value: str) -> int | None:
    """`count=301` (an errorstat line's value) → 301."""
    for part in value.split(","):
        k, _, v = part.partition("=")
        if k.strip() == "count":
            return _int(v)
    return None


def redis_info(kind: str | None, result: dict[str, Any], refs: list[Ref]) -> list[Finding]:
    if kind not in (None, "info"):
        return []
    f = _fields(refs)
    out: list[Finding] = []
    uptime = _int(f.get("uptime_in_seconds", ("", ""))[1])
    since: dict[str, int] = {"uptime_s": uptime} if uptime is not None else {}
    used, limit = _int(f.get("used_memory", ("", ""))[1]), _int(f.get("maxmemory", ("", ""))[1])
    policy = f.get("maxmemory_policy")
    mem_refs = tuple(f[k][0] for k in ("used_memory", "maxmemory", "maxmemory_policy") if k in f)
    evicting = policy is not None and policy[1] != "noeviction"
    code = "redis.memory_full_evicting" if evicting else "redis.memory_at_limit"
    if used is not None and limit and used / limit >= threshold(code, "ratio", 0.9):
        out.append(
            Finding(
                code=code,
                text=f"used_memory {used} is {used / limit:.0%} of maxmemory {limit} (policy {policy[1] if policy else 'unknown'})",
                refs=mem_refs,
                numbers={"value": used, "limit": limit, "ratio": round(used / limit, 3), **({"policy": policy[1]} if policy else {})},
                subject=f"maxmemory {limit}",
            )
        )
    full = bool(out) and out[-1].code == "redis.memory_at_limit"
    oom = f.get("errorstat_OOM")
    n = _count(oom[1]) if oom else None
    if oom and n:
        # A count since start: refusals now only while memory is at its limit now.
        out.append(
            Finding(
                code="redis.oom_refused_writes" if full else "redis.oom_refused_before",
                text=f"{n} commands refused with OOM since the server started (errorstat_OOM){f' {uptime} s ago' if uptime is not None else ''}",
                refs=(oom[0], *mem_refs),
                numbers={"count": n, **since},
                subject=f"maxmemory {limit}" if limit else None,
            )
        )
    ev = f.get("evicted_keys")
    if ev and (k := _int(ev[1])):
        out.append(Finding(code="redis.evictions", text=f"{k} keys evicted since the server started", refs=(ev[0], *mem_refs), numbers={"count": k, **since}))
    clients, maxc = f.get("connected_clients"), f.get("maxclients")
    nc, mc = (_int(clients[1]) if clients else None), (_int(maxc[1]) if maxc else None)
    client_refs = tuple(x[0] for x in (clients, maxc) if x)
    if nc is not None and mc and nc / mc >= threshold("redis.clients_at_limit", "ratio", 0.9):
        out.append(
            Finding(
                code="redis.clients_at_limit",
                text=f"connected_clients {nc} is {nc / mc:.0%} of maxclients {mc}",
                refs=client_refs,
                numbers={"value": nc, "limit": mc, "ratio": round(nc / mc, 3)},
                subject=f"maxclients {mc}",
            )
        )
    at_limit = bool(out) and out[-1].code == "redis.clients_at_limit"
    rej = f.get("rejected_connections")
    if rej and (k := _int(rej[1])):
        out.append(
            Finding(
                code="redis.rejected_connections" if at_limit else "redis.rejected_before",
                text=f"{k} connections rejected since the server started (maxclients {mc if mc else 'unknown'})",
                refs=(rej[0], *client_refs),
                numbers={"count": k, **({"limit": mc} if mc else {}), **since},
                subject=f"maxclients {mc}" if mc else None,
            )
        )
    blocked = f.get("blocked_clients")
    if blocked and (k := _int(blocked[1])):
        out.append(Finding(code="redis.blocked_clients", text=f"{k} clients blocked on a blocking command", refs=(blocked[0],), numbers={"count": k}))
    return out
