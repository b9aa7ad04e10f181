"""PostgreSQL sessions and locks: the blocking tree (who blocks whom, with the blocker's own
record), sessions waiting on locks, transactions left idle.

Rows come as refs `$.rows[i]` whose text is the row's canonical JSON (`kind: activity` from
`pg_stat_activity`, `kind: locks` from `pg_locks` with `pg_blocking_pids`). The blocking tree is
read from `blocking_pids`: a root blocker blocks others and waits on no one; its own record is
the row whose `pid` is the blocker (a waiter's row that lists it in `blocking_pids` is not).
"""

from __future__ import annotations

import json
from typing import Any

from rootproof.diagnosis.findings import Finding, Ref, threshold

MAX_LISTED = 5
"""Waiters (and their refs) a finding lists."""
FACTS = ("pid", "application_name", "usename", "client_addr", "datname", "state", "xact_age_s", "query")
"""The fields of a session's row that name it as an operator acts on it."""


def _rows(refs: list[Ref]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for r in refs:
        if not r.path.startswith("$.rows["):
            continue
        try:
            row = json.loads(r.text)
        except ValueError:
            continue
        if isinstance(row, dict):
            out.append((r.path, row))
    return out


def _pid(v: Any) -> int | None:
    try:
        return int(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError):
        return None


def _pids(v: Any) -> list[int]:
    if isinstance(v, str):  # "{6494}" as text
        v = [p for p in v.strip("{}[] ").split(",") if p.strip()]
    return [p for p in (_pid(x) for x in v) if p is not None] if isinstance(v, list) else []


def _age(row: dict[str, Any]) -> float | None:
    for k in ("xact_age_s", "state_age_s", "query_age_s"):
        v = row.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
    return None


def describe(row: dict[str, Any]) -> str:
    """The session as an operator acts on it: pid, application, client, state, transaction age, query."""
    parts = [f"pid {row.get('pid')}"]
    for key, label in (("application_name", "application"), ("usename", "user"), ("client_addr", "client"), ("state", "state")):
        if row.get(key) not in (None, ""):
            parts.append(f"{label} {row[key]}")
    if isinstance(row.get("xact_age_s"), int | float):
        parts.append(f"transaction open {row['xact_age_s']:g} s")
    if row.get("query"):
        parts.append(f"last query {str(row['query'])[:120]!r}")
    return ", ".join(parts)


def blocking_tree(kind: str | None, result: dict[str, Any], refs: list[Ref]) -> list[Finding]:
    if kind not in (None, "activity", "locks"):
        return []
    rows = _rows(refs)
    blocked_by: dict[int, list[int]] = {}
    waiter_ref: dict[int, str] = {}
    own: dict[int, tuple[str, dict[str, Any]]] = {}
    for path, row in rows:
        pid = _pid(row.get("pid"))
        if pid is None:
            continue
        blockers = _pids(row.get("blocking_pids"))
        if blockers:
            blocked_by.setdefault(pid, [])
            blocked_by[pid] += [b for b in blockers if b not in blocked_by[pid]]
            waiter_ref.setdefault(pid, path)
        elif pid not in own or row.get("granted") is True:
            # The session's own record: a row of it that waits on no one (its granted lock, its activity).
            own[pid] = (path, row)
    out: list[Finding] = []
    if blocked_by:
        blocks: dict[int, list[int]] = {}
        for waiter, blockers in blocked_by.items():
            for b in blockers:
                blocks.setdefault(b, []).append(waiter)
        # Root blockers: block someone and wait on no one (in a cycle, every member blocks: all listed).
        roots = [b for b in blocks if b not in blocked_by] or list(blocks)
        for b in sorted(roots, key=lambda p: -len(_reach(p, blocks))):
            reach = _reach(b, blocks)
            waiters = sorted(reach)[:MAX_LISTED]
            mine = own.get(b)
            wrefs = tuple(dict.fromkeys(waiter_ref[w] for w in waiters if w in waiter_ref))
            who = describe(mine[1]) if mine else f"pid {b} (its own row is not in this result: ask `kind: activity`)"
            numbers: dict[str, float | int | str] = {"blocked": len(reach)}
            if mine and (age := _age(mine[1])) is not None:
                numbers["age_s"] = age
            out.append(
                Finding(
                    code="postgresql.blocking",
                    text=f"{who} blocks {len(reach)} session(s): pids {', '.join(map(str, waiters))}",
                    refs=((mine[0],) if mine else ()) + wrefs[:3],
                    numbers=numbers,
                    subject=f"pid {b}",
                    facts={"pid": b, **({k: mine[1][k] for k in FACTS if mine[1].get(k) not in (None, "")} if mine else {})},
                )
            )
            if len(out) >= 2:
                break
        return out
    # Without blocking_pids (pg_stat_activity alone): who waits on a lock, for `kind: locks` to name the blocker.
    lock_waiters = [(p, r) for p, r in rows if str(r.get("wait_event_type") or "") == "Lock"]
    if lock_waiters:
        pids = [str(r.get("pid")) for _, r in lock_waiters[:MAX_LISTED]]
        # The oldest open transactions that wait on no lock: who may hold it (`kind: locks` says).
        open_tx = sorted(
            ((p, r) for p, r in rows if r.get("xact_start") and str(r.get("wait_event_type") or "") != "Lock" and str(r.get("state") or "") != "idle"),
            key=lambda pr: str(pr[1].get("xact_start")),
        )[:2]
        held = "; ".join(describe(r) for _, r in open_tx)
        out.append(
            Finding(
                code="postgresql.lock_waits",
                text=f"{len(lock_waiters)} session(s) wait on a lock (wait_event_type Lock): pids {', '.join(pids)}; oldest open transactions not waiting: {held or 'none'}; `kind: locks` names who blocks them",
                refs=tuple(p for p, _ in open_tx) + tuple(p for p, _ in lock_waiters[:2]),
                numbers={"waiting": len(lock_waiters)},
            )
        )
    return out


def _reach(b: int, blocks: dict[int, list[int]]) -> set[int]:
    """Every session `b` blocks, directly or through a session it blocks."""
    seen: set[int] = set()
    todo = list(blocks.get(b, []))
    while todo:
        p = todo.pop()
        if p in seen or p == b:
            continue
        seen.add(p)
        todo.extend(blocks.get(p, []))
    return seen


def sessions(kind: str | None, result: dict[str, Any], refs: list[Ref]) -> list[Finding]:
    if kind not in (None, "activity"):
        return []
    limit_s = threshold("postgresql.idle_in_transaction", "age_s", 30.0)
    idle = [(p, r) for p, r in _rows(refs) if str(r.get("state") or "").startswith("idle in transaction") and (_age(r) or 0.0) >= limit_s]
    if not idle:
        return []
    idle.sort(key=lambda pr: -(_age(pr[1]) or 0.0))
    apps = sorted({str(r.get("application_name") or "") for _, r in idle} - {""})
    return [
        Finding(
            code="postgresql.idle_in_transaction",
            text=f"{len(idle)} session(s) idle in transaction for {limit_s:g} s or more (applications: {', '.join(apps) or 'unnamed'}); oldest: {describe(idle[0][1])}",
            refs=tuple(p for p, _ in idle[:MAX_LISTED]),
            numbers={"count": len(idle), "age_s": _age(idle[0][1]) or 0.0},
            subject=f"pid {idle[0][1].get('pid')}",
        )
    ]


def long_statements(kind: str | None, result: dict[str, Any], refs: list[Ref]) -> list[Finding]:
    """Statements running for `age_s` or more (`active`, not waiting on a lock: a lock wait is
    the blocking tree's), the longest first: what a slow plan or a runaway job looks like now."""
    if kind not in (None, "activity"):
        return []
    limit_s = threshold("postgresql.long_statements", "age_s", 30.0)
    rows = [
        (p, r)
        for p, r in _rows(refs)
        if str(r.get("state") or "") == "active"
        and str(r.get("wait_event_type") or "") != "Lock"
        and str(r.get("backend_type") or "client backend") == "client backend"
        and isinstance(r.get("query_age_s"), int | float)
        and float(r["query_age_s"]) >= limit_s
    ]
    if not rows:
        return []
    rows.sort(key=lambda pr: -float(pr[1]["query_age_s"]))
    top = rows[0][1]
    return [
        Finding(
            code="postgresql.long_statements",
            text=f"{len(rows)} statement(s) running for {limit_s:g} s or more; the longest: {describe(top)}, running {float(top['query_age_s']):g} s",
            refs=tuple(p for p, _ in rows[:MAX_LISTED]),
            numbers={"count": len(rows), "age_s": float(top["query_age_s"])},
            subject=f"pid {top.get('pid')}",
            facts={k: top[k] for k in FACTS if top.get(k) not in (None, "")},
        )
    ]


def replication_lag(kind: str | None, result: dict[str, Any], refs: list[Ref]) -> list[Finding]:
    """A standby behind its primary by `lag_s` seconds of replay or `lag_bytes` of WAL (on a
    primary, per standby; on a standby, its own receiver)."""
    if kind != "replication":
        return []
    max_s = threshold("postgresql.replication_lag", "lag_s", 30.0)
    max_bytes = threshold("postgresql.replication_lag", "lag_bytes", 256 * 1024 * 1024)
    behind: list[tuple[str, dict[str, Any], float | None, float | None]] = []
    for p, r in _rows(refs):
        seconds = _seconds(r.get("replay_lag"))
        size = r.get("replay_lag_bytes")
        size_f = float(size) if isinstance(size, int | float) and not isinstance(size, bool) else None
        if (seconds is not None and seconds >= max_s) or (size_f is not None and size_f >= max_bytes):
            behind.append((p, r, seconds, size_f))
    if not behind:
        return []
    behind.sort(key=lambda b: -((b[2] or 0.0) + (b[3] or 0.0) / max_bytes * max_s))
    p, r, seconds, size_f = behind[0]
    who = r.get("application_name") or r.get("sender_host") or r.get("client_addr") or f"pid {r.get('pid')}"
    numbers: dict[str, float | int | str] = {"standbys": len(behind)}
    if seconds is not None:
        numbers["lag_s"] = seconds
    if size_f is not None:
        numbers["lag_bytes"] = size_f
    return [
        Finding(
            code="postgresql.replication_lag",
            text=f"{len(behind)} standby(s) behind: {who} replay lag {seconds if seconds is not None else 'unknown'} s, {size_f if size_f is not None else 'unknown'} bytes of WAL (state {r.get('state')})",
            refs=tuple(q for q, *_ in behind[:MAX_LISTED]),
            numbers=numbers,
            subject=str(who),
        )
    ]


def _seconds(v: Any) -> float | None:
    """A lag in seconds: a number, or an interval as text (`00:01:02.5`, `1 day 02:00:00`)."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    if not isinstance(v, str) or not v.strip():
        return None
    text, days = v.strip(), 0.0
    if "day" in text:
        head, _, text = text.partition("day")
        text = text.lstrip("s ").strip()
        try:
            days = float(head.strip())
        except ValueError:
            return None
    parts = text.split(":") if text else ["0"]
    try:
        nums = [float(x) for x in parts]
    except ValueError:
        return None
    total = 0.0
    for n in nums:
        total = total * 60 + n
    return days * 86400 + total
