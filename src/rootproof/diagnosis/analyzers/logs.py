"""Logs: errors per service against the window's own baseline (its first third), the first error
in time, and the message templates new after the baseline.

Templates are mined with Drain3 (the streaming log template miner of the LogPAI work): numbers,
ids and addresses inside a message vary, the words around them make its template. A template
of a `WARN` or worse line that first appears after the baseline, and never in it, is a
signature new at the incident's start.
"""

from __future__ import annotations

from typing import Any

from drain3 import TemplateMiner
from drain3.template_miner_config import TemplateMinerConfig

from rootproof.diagnosis.findings import Finding, Ref, threshold

SERIOUS = ("ERROR", "FATAL", "CRITICAL", "PANIC")
NOTABLE = ("WARN", *SERIOUS)
MAX_NEW = 3
"""New templates a finding lists."""


def _miner() -> TemplateMiner:
    config = TemplateMinerConfig()
    config.profiling_enabled = False
    config.drain_sim_th = threshold("logs.new_signatures", "similarity", 0.4)
    return TemplateMiner(config=config)


def log_errors(kind: str | None, result: dict[str, Any], refs: list[Ref]) -> list[Finding]:
    known = {r.path for r in refs}
    entries = [(i, e) for i, e in enumerate(result.get("entries") or []) if isinstance(e, dict) and f"$.entries[{i}]" in known]
    if not entries:
        return []
    ordered = sorted(entries, key=lambda ie: str(ie[1].get("ts", "")))
    cut = len(ordered) // 3
    out: list[Finding] = []
    errors = [(i, e) for i, e in ordered if str(e.get("level", "")).upper() in SERIOUS]
    if errors:
        by_service: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for i, e in errors:
            by_service.setdefault(str(e.get("service", "")), []).append((i, e))
        before = sum(1 for i, e in ordered[:cut] if str(e.get("level", "")).upper() in SERIOUS)
        counts = ", ".join(f"{s or 'unnamed'} {len(v)}" for s, v in sorted(by_service.items(), key=lambda kv: -len(kv[1]))[:4])
        first_i, first = errors[0]
        out.append(
            Finding(
                code="logs.errors",
                text=f"{len(errors)} error line(s) in this result ({counts}); {before} in its first third; the first at {first.get('ts')} from {first.get('service')}",
                refs=tuple(dict.fromkeys(f"$.entries[{v[0][0]}]" for v in by_service.values()))[:3],
                numbers={"count": len(errors), "baseline": before, "first": str(first.get("ts", ""))},
                subject=str(first.get("service") or "") or None,
            )
        )
    if cut:
        miner = _miner()
        seen_at: dict[int, tuple[int, int]] = {}  # cluster id -> (position of its first line, entry index)
        for pos, (i, e) in enumerate(ordered):
            message = " ".join(str(e.get("message", "")).split())[:2000]
            if not message:
                continue
            cluster = miner.add_log_message(message)["cluster_id"]
            if str(e.get("level", "")).upper() in NOTABLE or pos < cut:
                seen_at.setdefault(cluster, (pos, i))
        notable = {i for i, e in ordered if str(e.get("level", "")).upper() in NOTABLE}
        new = [(pos, i) for pos, i in seen_at.values() if pos >= cut and i in notable]
        new.sort()
        if new:
            firsts = [next(e for j, e in ordered if j == i) for _, i in new[:MAX_NEW]]
            out.append(
                Finding(
                    code="logs.new_signatures",
                    text=f"{len(new)} warning or error signature(s) new after the first third of this result; the first at {firsts[0].get('ts')}: {' '.join(str(firsts[0].get('message', '')).split())[:160]}",
                    refs=tuple(f"$.entries[{i}]" for _, i in new[:MAX_NEW]),
                    numbers={"count": len(new), "first": str(firsts[0].get("ts", ""))},
                )
            )
    return out
