"""Impact: what was seen going wrong for someone in the incident's window.

A root cause explains a symptom seen in the window (DESIGN, "Diagnosis: evidence first"):
errors a service logged, a proxy's 5xx, work refused or blocked (a limit's refusals, sessions
waiting on a lock), a latency or error series that rose, or the alert itself. A signal that
explains nothing seen is an observation, never the root cause: without impact the verdict
publishes no root cause.

The window starts where the first look's window starts (or at the alert's start when it is
earlier); lines older than that (yesterday's errors a wide query brought back) are not impact.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from rootproof.agent.models.evidence_view import Observation
from rootproof.diagnosis.findings import entry
from rootproof.tools.refs import parse_log_ref

__all__ = ["impact_refs", "impact_seen"]

ERROR_LEVELS = frozenset({"ERROR", "FATAL", "CRITICAL", "PANIC", "ALERT", "EMERG", "SEVERE"})
_ACCESS_5XX = re.compile(r'" (5\d\d) \d+')
_SERIES = re.compile(r"^([A-Za-z_:][\w:.]*)\S*\s+first=(\S+)\s+last=(\S+)\s+min=(\S+)\s+max=(\S+)")
_HURT = re.compile(r"latency|duration|response_time|error|5xx|timeout|failed|failure|rejected|p9\d", re.I)
_GOOD = re.compile(r"hit_ratio|hit_rate|success|availability|apdex", re.I)
RISE = 2.0
"""A latency or error series shows impact when its max is at least this many times its first value."""
FALL = 0.8
"""A success series (hit ratio, success rate, availability) shows impact when its min falls to this share of its first value."""


def _ts(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _start(observations: list[Observation]) -> datetime | None:
    """The window's start: the earliest `from` of the first look's windowed calls."""
    starts = [t for o in observations if o.step == 0 and o.window for t in [_ts(str(o.window.get("from", "")))] if t is not None]
    return min(starts) if starts else None


def _num(v: str) -> float | None:
    try:
        return float(v)
    except ValueError:
        return None


def impact_seen(observations: list[Observation], alert: bool) -> str | None:
    """What shows impact in the window (one phrase naming it), None when nothing does."""
    if alert:
        return "the alert"
    for o, ref in impact_refs(observations, alert):
        return str(ref.get("text", o.tool))[:200]
    return None


def impact_refs(observations: list[Observation], alert: bool) -> Iterator[tuple[Observation, dict[str, Any]]]:
    """Every record that shows impact in the window, with its observation (an analyzer's impact
    finding is given as a ref of its own text)."""
    del alert  # the alert is impact of its own, with no record
    start = _start(observations)
    for o in observations:
        if not o.ready or o.tool == "lookup_knowledge":
            continue
        for f in o.findings:
            if entry(str(f.get("finding", ""))).get("impact"):
                yield o, {"text": str(f.get("text", ""))}
        for ref in o.refs:
            text = str(ref.get("text", ""))
            if ref.get("instruction_like") or str(ref.get("raw_path")) == "$.no_evidence":
                continue
            if o.tool == "query_logs":
                log = parse_log_ref(text)
                when = _ts(log.ts) if log else None
                if log and log.level in ERROR_LEVELS and (start is None or when is None or when >= start):
                    yield o, ref
            elif o.tool == "inspect_nginx" and _ACCESS_5XX.search(text):
                yield o, ref
            elif o.tool == "query_metrics":
                m = _SERIES.match(text)
                if not m:
                    continue
                first, low, top = _num(m.group(2)), _num(m.group(4)), _num(m.group(5))
                if first is None or low is None or top is None:
                    continue
                if _GOOD.search(m.group(1)):
                    if first > 0 and low <= FALL * first:
                        yield o, ref
                elif _HURT.search(m.group(1)) and top > 0 and top >= RISE * max(first, 1e-9):
                    yield o, ref
