"""What every stage of the evidence-first planner shares: the verdict's thresholds, the run's
budget defaults, reading the request (question, alert, language), how a record is counted and
how an excerpt is cut, and the state one planner keeps between its stages."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rootproof.agent.models.base import ModelRequest, ToolCall, UserMessage
from rootproof.agent.models.evidence_view import (
    Hit,
    Observation,
)
from rootproof.boundary.provenance import record_key

if TYPE_CHECKING:
    from rootproof.diagnosis.candidates import Candidate
    from rootproof.diagnosis.reach import Gap
    from rootproof.kb import KnowledgeBase
    from rootproof.kb.cards import Hypothesis, Signal


ROOT_THRESHOLD = 3.0


MARGIN = 1.5


LOOKUP_TOP_K = 3


CONTEXT_WEIGHT = 1.0


MIN_RECORDS = 2


MAX_CALLS_PER_TOOL = 4


MAX_TOOL_CALLS = 16


EXCERPT_MAX = 280


def _question(request: ModelRequest) -> str:
    for m in request.messages:
        if isinstance(m, UserMessage):
            return m.content
    return ""


def _alert(question: str) -> dict[str, Any]:
    """The primary alert of an alert-mode request; related alerts are context and never steer the plan."""
    marker = "Alert payload (data):\n"
    if marker in question:
        try:
            data = json.loads(question.split(marker, 1)[1])
        except json.JSONDecodeError:
            return {}
        primary = data.get("primary_alert") if isinstance(data, dict) else None
        return primary if isinstance(primary, dict) else {}
    return {}


def _excerpt(text: str, anchors: list[str], spans: tuple[tuple[int, int], ...] = ()) -> str:
    """A verbatim piece of `text` (whole when short), centred on the first anchor found outside
    the untrusted `spans`."""
    if len(text) <= EXCERPT_MAX:
        return text
    masked = text
    for start, end in spans:
        masked = masked[:start] + "\x00" * max(0, min(end, len(masked)) - start) + masked[end:]
    low = masked.casefold()
    pos = -1
    for a in anchors:
        pos = low.find(a.casefold())
        if pos >= 0:
            break
    start = max(0, pos - 80) if pos >= 0 else 0
    piece = text[start : start + EXCERPT_MAX]
    if start > 0 and " " in piece[:40]:
        piece = piece[piece.index(" ") + 1 :]
    if start + EXCERPT_MAX < len(text) and " " in piece[-40:]:
        piece = piece[: piece.rindex(" ")]
    return piece.strip()


def _record(h: Hit) -> tuple[str, str]:
    """Which record a hit is: its tool and its text without timestamps."""
    return (h.tool, record_key(h.text))





class PlannerState:
    """What one planner keeps between its stages (set by `step`), and the stages' methods each
    stage calls on the others (declared for the type checker)."""

    kb: KnowledgeBase
    _kinds: dict[str, frozenset[str]]
    _targets: dict[str, tuple[str, ...]]
    _offered: set[str]
    _impact: str | None
    _observations: list[Observation]
    _alerted: bool
    _gaps: dict[str, Gap]
    _explained: set[str]
    _max_calls: int
    _per_tool: int

    if TYPE_CHECKING:
        def _asks(self, s: Signal, offered: set[str]) -> bool:
            ...

        def _first_look(self, question: str, offered: set[str], step: int) -> list[ToolCall]:
            ...

        def _cap(self, tool: str) -> int:
            ...

        def _aimed(self, tool: str, args: dict[str, Any], candidates: list[Candidate]) -> list[dict[str, Any]]:
            ...

        def _candidates(self, observations: list[Observation]) -> list[Candidate]:
            ...

        @staticmethod
        def _merge(out: dict[str, Candidate], h: Hypothesis, card_id: str) -> None:
            ...

        @staticmethod
        def _score(candidates: list[Candidate], observations: list[Observation]) -> None:
            ...

        def _gate(self, c: Candidate, by_key: dict[str, Candidate]) -> tuple[list[tuple[str, str]], bool]:
            ...

        @staticmethod
        def _independent(a: Candidate, b: Candidate) -> bool:
            ...

        def _verdict(self, candidates: list[Candidate]) -> tuple[list[Candidate], Candidate | None, float, bool, list[tuple[str, str]], list[Candidate]]:
            ...

        def _next_calls(self, question: str, candidates: list[Candidate], observations: list[Observation], offered: set[str], step: int) -> list[ToolCall]:
            ...

        def _general(self, c: Candidate) -> bool:
            ...

        @staticmethod
        def _named(observations: list[Observation]) -> frozenset[str]:
            ...

        def _state_identifiers(self, observations: list[Observation], asked: str = "") -> list[str]:
            ...

        @staticmethod
        def _error_lines(observations: list[Observation], asked: str = "") -> list[str]:
            ...

        def _draft(self, question: str, candidates: list[Candidate], observations: list[Observation]) -> dict[str, Any]:
            ...

        def _unchecked_causes(self, best: Candidate, candidates: list[Candidate]) -> list[Candidate]:
            ...

        @staticmethod
        def _related(best: Candidate, candidates: list[Candidate]) -> list[str]:
            ...

        def _declared(self, key: str, observations: list[Observation]) -> Candidate | None:
            ...

        def _unchecked(self, key: str, alt: Candidate | None) -> list[Signal]:
            ...

        @staticmethod
        def _observing(component: str, best: Candidate, alt: Candidate | None, observations: list[Observation]) -> list[Hit]:
            ...

        @staticmethod
        def _first_refs(observations: list[Observation], n: int = 3) -> list[Hit]:
            ...

        def _card_hit(self, c: Candidate, observations: list[Observation], language: str) -> Hit | None:
            ...

        @staticmethod
        def _symptom(alert: dict[str, Any], observations: list[Observation], shown: set[tuple[str, str]]) -> list[tuple[str, Hit]]:
            ...

        @staticmethod
        def _culprit_hit(c: Candidate) -> Hit | None:
            ...

        @staticmethod
        def _findings(key: str, observations: list[Observation]) -> list[tuple[dict[str, Any], list[Hit]]]:
            ...

        @staticmethod
        def _own_row(findings: list[dict[str, Any]], observations: list[Observation]) -> Hit | None:
            ...

        @staticmethod
        def _describe_row(h: Hit) -> str:
            ...

        def _culprit(self, c: Candidate) -> str:
            ...

        @staticmethod
        def _describe(s: Signal) -> str:
            ...
