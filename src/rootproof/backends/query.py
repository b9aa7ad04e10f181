"""Query semantics shared by every backend (docs/scenario-files.md "Query semantics").

`query` is whitespace-separated terms and `"quoted phrases"`, case-insensitive (NFKC +
casefold, whitespace collapsed); an item matches if it contains any term or phrase; matches
are ordered by the number of distinct terms matched, then newest first, then as read. A
window ends at the run's clock (the scenario's `now`, the wall clock live).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from rootproof.scenarios.types import format_timestamp
from rootproof.tools.refs import normalize_text

__all__ = ["TextQuery", "TimeWindow", "fold", "order_matches", "parse_query"]

_T = TypeVar("_T")
_OLDEST = datetime.min.replace(tzinfo=UTC)
_QUERY_TOKEN = re.compile(r'"([^"]*)(?:"|$)|([^\s"]+)')


def fold(text: str) -> str:
    """What matching compares: NFKC, case-folded, whitespace collapsed."""
    if text.isascii():  # NFKC leaves ASCII as it is, and casefold is lower there
        return " ".join(text.split()).lower()
    return unicodedata.normalize("NFKC", normalize_text(text).casefold())


@dataclass(frozen=True)
class TextQuery:
    """A parsed query: distinct normalised terms and phrases."""

    terms: tuple[str, ...]

    def score(self, text: str) -> int:
        """How many distinct terms or phrases `text` contains."""
        return self.score_folded(fold(text))

    def score_folded(self, folded: str) -> int:
        """`score` of a text already folded (`_fold`)."""
        return sum(1 for t in self.terms if t in folded)

    @property
    def empty(self) -> bool:
        """An empty query matches everything."""
        return not self.terms


def parse_query(query: str) -> TextQuery:
    """Split `query` into terms and `"quoted phrases"` (an unterminated quote runs to the end)."""
    query = query.replace("\u201c", '"').replace("\u201d", '"')
    terms: list[str] = []
    for m in _QUERY_TOKEN.finditer(query):
        raw = m.group(1) if m.group(1) is not None else m.group(2)
        term = fold(raw or "")
        if term and term not in terms:
            terms.append(term)
    return TextQuery(tuple(terms))


@dataclass(frozen=True)
class TimeWindow:
    start: datetime
    end: datetime

    def __contains__(self, ts: datetime | None) -> bool:
        return ts is None or self.start <= ts <= self.end

    def as_dict(self) -> dict[str, str]:
        return {"from": format_timestamp(self.start), "to": format_timestamp(self.end)}

    def text(self) -> str:
        return f"{format_timestamp(self.start)}..{format_timestamp(self.end)}"


def order_matches(items: Iterable[tuple[int, datetime | None, _T]]) -> list[_T]:
    """Most distinct terms first, then newest first, then as written."""
    ranked = list(enumerate(items))
    ranked.sort(key=lambda r: r[0])
    ranked.sort(key=lambda r: r[1][1] or _OLDEST, reverse=True)
    ranked.sort(key=lambda r: r[1][0], reverse=True)
    return [r[1][2] for r in ranked]
