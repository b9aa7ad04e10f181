"""A refusal is evidence: when a server refuses rootproof's own connection and says why (a limit
ran out), the call's result is that answer, citable at `$.refused`, not a failed call.

`refusal_answer(text)` finds such an answer in a driver's error text (the phrases are the
servers' own: Redis `max number of clients reached`, PostgreSQL `sorry, too many clients
already`, `remaining connection slots are reserved`, `too many connections for role`, MySQL
`Too many connections`); `refused_result(kind, answer, ...)` is the result of the shape the kind
returns, empty but for `refused`. rootproof never gets past a limit with other credentials or a
reserved slot: the refusal is reported as it came.
"""

from __future__ import annotations

from datetime import datetime

from rootproof.scenarios.types import format_timestamp
from rootproof.tools.base import window_start
from rootproof.tools.results import InfoResult, LinesResult, RowsResult, SettingsResult, Window

__all__ = ["REFUSAL_PHRASES", "refusal_answer", "refused_result"]

REFUSAL_PHRASES = (
    "max number of clients reached",
    "sorry, too many clients already",
    "remaining connection slots are reserved",
    "too many connections",  # PostgreSQL's "… for role" / "… for database", MySQL's 1040
)
"""Lower-case phrases that say a server refused a connection because a limit ran out."""
MAX_ANSWER_CHARS = 300


def refusal_answer(text: str) -> str | None:
    """The server's answer (one line, bounded) when `text` says a connection limit refused it."""
    low = text.lower()
    if not any(p in low for p in REFUSAL_PHRASES):
        return None
    line = " ".join(text.split())
    # The server's own words: a driver's "connection to server at … failed: FATAL: …" keeps the FATAL part.
    if "FATAL:" in line:
        line = line[line.index("FATAL:") :]
    return line[:MAX_ANSWER_CHARS]


def refused_result(
    kind: str, shape: str, answer: str, *, now: datetime, since: str | None = None
) -> RowsResult | LinesResult | SettingsResult | InfoResult:
    """The empty result of `shape` (`rows`, `lines`, `settings`, `info`) for `kind`, refused."""
    if shape == "rows":
        return RowsResult(kind=kind, total_matches=0, refused=answer)
    if shape == "settings":
        return SettingsResult(kind=kind, refused=answer)
    if shape == "info":
        return InfoResult(kind=kind, refused=answer)
    start = window_start(now, since) if since else now
    return LinesResult(
        kind=kind,
        window=Window(from_=format_timestamp(start), to=format_timestamp(now)),
        total_matches=0,
        refused=answer,
    )
