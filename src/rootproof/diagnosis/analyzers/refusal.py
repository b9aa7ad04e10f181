"""A server that refused rootproof's own connection and said why: the limit ran out."""

from __future__ import annotations

from typing import Any

from rootproof.diagnosis.findings import Finding, Ref, phrases
from rootproof.tools.refs import REFUSED_PATH

CODES = ("refusal.max_clients", "refusal.too_many_connections")


def refusal(kind: str | None, result: dict[str, Any], refs: list[Ref]) -> list[Finding]:
    ref = next((r for r in refs if r.path == REFUSED_PATH), None)
    if ref is None:
        return []
    for code in CODES:
        if any(ref.says(p) for p in phrases(code)):
            return [Finding(code=code, text=f"the server refused rootproof's own connection: {ref.text[:200]}", refs=(REFUSED_PATH,))]
    return []
