"""PostgreSQL's server log: who held the locks others waited for, deadlocks, statements a lock
or statement timeout cancelled, connections refused at a limit.

With `log_lock_waits` on, a session that waits longer than `deadlock_timeout` logs
`process W still waiting for <mode> on <object> after N ms` with the DETAIL `Process holding
the lock: H. Wait queue: …`: the log keeps the waits that `pg_locks` shows only while they
last. Holders are chained as the blocking tree is (a holder that waits on no one in the log is
a root); the finding names the root holder, its refs are the lines that name it. Only the
server's own words count: the parts of a line an outsider wrote (a statement's text) are
blanked first (the ref's untrusted spans).
"""

from __future__ import annotations

import re
from typing import Any

from rootproof.boundary.provenance import outside_spans
from rootproof.diagnosis.findings import Finding, Ref, entry, phrases, threshold

_WAIT = re.compile(r"process (\d+) (still waiting|acquired) for (\w+) on (.{1,200}?) after ([\d.]+) ms")
_HOLD = re.compile(r"Process holding the lock: ([\d, ]+)\.")
_TS = re.compile(r"^(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?)")
MAX_REFS = 3
"""Lines a finding cites."""
COUNTED = (
    "postgresql.deadlocks",
    "postgresql.lock_timeouts",
    "postgresql.statement_timeouts",
    "postgresql.connections_refused",
)
"""Findings that count the lines saying one of their vocabulary phrases."""


def _pids(text: str) -> list[int]:
    return [int(p) for p in re.findall(r"\d+", text)]


def lock_log(kind: str | None, result: dict[str, Any], refs: list[Ref]) -> list[Finding]:
    if kind != "log":
        return []
    lines = [(r, outside_spans(r.text, r.spans)) for r in refs if r.path.startswith("$.lines[")]
    if not lines:
        return []
    out: list[Finding] = []
    waits = _lock_waits(lines)
    if waits is not None:
        out.append(waits)
    cancelled = _cancelled_waiting(lines)
    if cancelled is not None:
        out.append(cancelled)
    for code in COUNTED:
        said = phrases(code)
        hit = [r for r, text in lines if any(p in text.lower() for p in said)]
        if len(hit) >= threshold(code, "min_lines", 1):
            first = _TS.match(hit[0].text)
            out.append(
                Finding(
                    code=code,
                    text=f"{len(hit)} log line(s) say {' / '.join(repr(p) for p in said[:3])}; the first at {first.group(1) if first else 'an unknown time'}",
                    refs=tuple(r.path for r in hit[:MAX_REFS]),
                    numbers={"count": len(hit), **({"first": first.group(1)} if first else {})},
                )
            )
    return out


_RELATION = re.compile(r'in relation "([^"]{1,128})"')


def _cancelled_waiting(lines: list[tuple[Ref, str]]) -> Finding | None:
    """Statements a timeout cancelled while they waited for another transaction's row lock: the
    CONTEXT PostgreSQL adds only to that wait (`while updating tuple (0,25) in relation "x"`)."""
    code = "postgresql.lock_wait_cancelled"
    said, waiting = phrases(code), [str(c).lower() for c in entry(code).get("contexts") or []]
    hit = [(r, t) for r, t in lines if any(p in t.lower() for p in said) and any(c in t.lower() for c in waiting)]
    if len(hit) < threshold(code, "min_lines", 1):
        return None
    relations = list(dict.fromkeys(m.group(1) for _, t in hit if (m := _RELATION.search(t))))
    first = _TS.match(hit[0][0].text)
    return Finding(
        code=code,
        text=(
            f"{len(hit)} statement(s) cancelled by a timeout while waiting for another transaction's row lock"
            f"{' on ' + ', '.join(relations[:3]) if relations else ''}; the first at {first.group(1) if first else 'an unknown time'}"
        ),
        refs=tuple(r.path for r, _ in hit[:MAX_REFS]),
        numbers={"count": len(hit), **({"first": first.group(1)} if first else {})},
        subject=f"relation {relations[0]}" if relations else None,
    )


def _lock_waits(lines: list[tuple[Ref, str]]) -> Finding | None:
    """The root holder of the lock waits the log shows (a wait that ended counts too)."""
    holder_of: dict[int, set[int]] = {}  # waiter -> holders
    naming: dict[int, list[Ref]] = {}  # holder -> lines naming it as the holder
    waits = 0
    for ref, text in lines:
        m, h = _WAIT.search(text), _HOLD.search(text)
        if m is None or h is None:
            continue
        waits += 1
        waiter, holders = int(m.group(1)), _pids(h.group(1))
        holder_of.setdefault(waiter, set()).update(holders)
        for p in holders:
            naming.setdefault(p, []).append(ref)
    if waits < threshold("postgresql.lock_waits_logged", "min_waits", 2) or not naming:
        return None
    blocks: dict[int, set[int]] = {}
    for waiter, held_by in holder_of.items():
        for p in held_by:
            blocks.setdefault(p, set()).add(waiter)
    roots = [p for p in naming if p not in holder_of] or list(naming)

    def reach(p: int) -> set[int]:
        seen: set[int] = set()
        todo = list(blocks.get(p, ()))
        while todo:
            q = todo.pop()
            if q not in seen and q != p:
                seen.add(q)
                todo.extend(blocks.get(q, ()))
        return seen

    root = max(roots, key=lambda p: (len(reach(p)), len(naming[p])))
    waiting = sorted(reach(root))
    first = _TS.match(naming[root][0].text)
    return Finding(
        code="postgresql.lock_waits_logged",
        text=(
            f"the server log shows {waits} lock wait(s) past deadlock_timeout; pid {root} held the lock "
            f"{len(waiting)} session(s) waited for (pids {', '.join(map(str, waiting[:5]))}); the first at {first.group(1) if first else 'an unknown time'}"
        ),
        refs=tuple(dict.fromkeys(r.path for r in naming[root]))[:MAX_REFS],
        numbers={"waits": waits, "blocked": len(waiting)},
        subject=f"pid {root}",
        facts={"pid": root},
    )
