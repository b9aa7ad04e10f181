"""nginx's error log: failed upstream requests per upstream, split by cause (timed out → 504;
refused, reset or no live upstream → 502)."""

from __future__ import annotations

import re
from typing import Any

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
