"""nginx's error log: failed upstream requests per upstream, split by cause (timed out → 504;
refused, reset or no live upstream → 502); its access log: the upstream response time of the
requests that timed out against the others'. The parts of a line a client wrote (the request,
the user agent) are blanked first."""

from __future__ import annotations

import re
import statistics
from typing import Any

from rootproof.boundary.provenance import outside_spans
from rootproof.diagnosis.findings import Finding, Ref, phrases

_UPSTREAM = re.compile(r'upstream: "([a-z]+://)?([^/"]+)')
CAUSES = (("nginx.upstream_timeouts", "timed out (504)"), ("nginx.upstream_refused", "refused or reset (502)"))
MAX_REFS = 3


def nginx_errors(kind: str | None, result: dict[str, Any], refs: list[Ref]) -> list[Finding]:
    if kind not in (None, "error_log"):
        return []
    out: list[Finding] = []
    for code, label in CAUSES:
        words = phrases(code)
        by_upstream: dict[str, list[str]] = {}
        for r in refs:
            if any(r.says(w) for w in words):
                m = _UPSTREAM.search(r.text)
                by_upstream.setdefault(m.group(2) if m else "unknown upstream", []).append(r.path)
        for upstream, paths in sorted(by_upstream.items(), key=lambda kv: -len(kv[1])):
            out.append(
                Finding(
                    code=code,
                    text=f"{len(paths)} request(s) to upstream {upstream} {label} in this result",
                    refs=tuple(paths[:MAX_REFS]),
                    numbers={"count": len(paths), "upstream": upstream},
                    subject=f"upstream {upstream}",
                )
            )
    return out


_ACCESS = re.compile(r'^\S+ \S+ \S+ \[[^\]]+\] "(?:[^"\\]|\\.)*" (\d{3}) ')
_URT_KV = re.compile(r"\burt=([\d.]+)")
_TAIL = re.compile(r" ([\d.]+)(?:, [\d.]+)* (?:\d{3}|-)(?:, (?:\d{3}|-))*$")
_UA_KV = re.compile(r"\bua=(\S+)")


def _timing(text: str) -> tuple[int, float | None, str] | None:
    """(status, upstream response time in s, upstream address) of an access line: the
    `upstream` format (combined + `$upstream_response_time $upstream_status`) or `urt=` / `ua=`
    key-value fields."""
    m = _ACCESS.match(text)
    if m is None:
        return None
    urt = _URT_KV.search(text) or _TAIL.search(text)
    ua = _UA_KV.search(text)
    try:
        return int(m.group(1)), float(urt.group(1)) if urt else None, ua.group(1) if ua else ""
    except ValueError:
        return None


def upstream_times(kind: str | None, result: dict[str, Any], refs: list[Ref]) -> list[Finding]:
    """Requests that ended in 504 after the same upstream response time: the proxy's read
    timeout, as nginx applied it (`$upstream_response_time` of a timed-out request is the
    timeout), against the time the other requests took."""
    if kind not in (None, "access_log"):
        return []
    timed: list[tuple[str, int, float]] = []
    for r in refs:
        parsed = _timing(outside_spans(r.text, r.spans))
        if parsed is not None and parsed[1] is not None:
            timed.append((r.path, parsed[0], parsed[1]))
    cut = [t for t in timed if t[1] == 504]
    if not cut:
        return []
    others = sorted(t[2] for t in timed if t[1] < 500)
    limit = statistics.median(t[2] for t in cut)
    typical = statistics.median(others) if others else None
    return [
        Finding(
            code="nginx.upstream_response_times",
            text=(
                f"{len(cut)} request(s) ended 504 after an upstream response time of {limit:g} s (the read timeout nginx applied)"
                + (f"; the {len(others)} other request(s) with an upstream answered in {typical:g} s (median)" if typical is not None else "")
            ),
            refs=tuple(p for p, _, _ in cut[:MAX_REFS]),
            numbers={"timed_out": len(cut), "timeout_s": limit, **({"median_s": typical} if typical is not None else {})},
        )
    ]
