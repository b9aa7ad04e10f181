"""KnowledgeBackend: the `lookup_knowledge` tool over a `KnowledgeBase` (the ToolBackend seam)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from rootproof.errors import BackendError, UsageError
from rootproof.kb.index import GRADES, KnowledgeBase
from rootproof.kb.tracker import RetrievedDocTracker
from rootproof.tools.base import BackendResult, LookupKnowledgeArgs
from rootproof.tools.refs import DataSource, EvidenceStatus
from rootproof.tools.results import KnowledgeResult

__all__ = ["KnowledgeBackend"]

TOOL = "lookup_knowledge"


class KnowledgeBackend:
    """Serves `lookup_knowledge`: hybrid search, then per-run de-duplication of cards."""

    def __init__(self, kb: KnowledgeBase, tracker: RetrievedDocTracker | None = None) -> None:
        """Search `kb`; remember returned cards per run in `tracker` (a new one by default)."""
        self.kb = kb
        self.tracker = tracker or RetrievedDocTracker()

    def close(self) -> None:
        """Nothing to release: the knowledge base belongs to the runtime."""

    def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
        """Run one lookup. Cards already returned in this run are left out; if nothing else
        clears the floor the result is DEDUPLICATED (or NO_EVIDENCE when nothing matched at all)."""
        if tool != TOOL:
            raise UsageError(f"KnowledgeBackend serves only {TOOL} (got {tool!r})")
        if not isinstance(args, LookupKnowledgeArgs):
            raise UsageError(f"{TOOL} expects LookupKnowledgeArgs (got {type(args).__name__})")
        known = self.tracker.seen(run_id)
        try:
            resp = self.kb.search(args.query, args.top_k, exclude_cards=known)
        except (ValueError, RuntimeError, OSError) as exc:
            raise BackendError(f"{TOOL}: search failed: {exc}") from exc
        results: list[dict[str, Any]] = [
            {
                "card_id": h.card_id,
                "title": h.title,
                "chunk_id": h.chunk_id,
                "grade": h.grade,
                "text": h.text,
                "channels": h.channels,
            }
            for h in resp.hits
        ]
        status: str | None = None
        deduplicated = no_evidence = None
        if not results:
            if resp.l1_match_count > 0 and known:
                status = EvidenceStatus.DEDUPLICATED.value
                deduplicated = (
                    f"lookup_knowledge found only cards already returned in this run for query "
                    f"'{args.query}' ({', '.join(sorted(known))}); cite the earlier lookup"
                )
            else:
                no_evidence = f"lookup_knowledge found no card above the relevance floor for query '{args.query}'"
        else:
            self.tracker.record(run_id, (r["card_id"] for r in results))
        result = KnowledgeResult(query=args.query, results=results, no_evidence=no_evidence, deduplicated=deduplicated)
        best = min((GRADES.index(h.grade) for h in resp.hits), default=None)
        details: dict[str, Any] = {
            "layer": resp.layer,
            "l0_match_count": resp.l0_match_count,
            "l1_match_count": resp.l1_match_count,
            "l0_hint_cards": resp.l0_hint_cards,
            "channel_ranks": [
                {"card_id": h.card_id, **{ch: v.get("rank") for ch, v in h.channels.items()}}
                for h in resp.hits
            ],
            "relevance_level": GRADES[best] if best is not None else "NO_EVIDENCE",
            "excluded_cards": sorted(known),
        }
        return BackendResult(
            result=result, data_source=DataSource.KNOWLEDGE.value, details=details, evidence_status=status
        )
