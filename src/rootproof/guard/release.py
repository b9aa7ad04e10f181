"""The release pipeline: EvidenceGuard, then SemanticGuard; only SUPPORTED publishes the draft unchanged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rootproof.agent.draft import DiagnosisDraft
from rootproof.boundary.store import CanonicalStore
from rootproof.guard.evidence import EvidenceGuard, EvidenceGuardResult
from rootproof.guard.fallback import FallbackType, SafeFallbackFactory
from rootproof.guard.semantic import SemanticGuard, SemanticResult
from rootproof.taxonomy import Taxonomy

if TYPE_CHECKING:
    from rootproof.kb.cards import Card

__all__ = ["ReleaseDecision", "release_draft", "tool_trace_summary"]


@dataclass(kw_only=True)
class ReleaseDecision:
    """What the user gets, and why."""

    content: dict[str, Any]
    release_outcome: str
    fallback_type: str | None
    evidence: EvidenceGuardResult
    semantic: SemanticResult | None


def tool_trace_summary(store: CanonicalStore, run_id: str, draft: DiagnosisDraft | None) -> list[dict[str, Any]]:
    """Compact `ToolTraceSummary`: tool, status, evidence status, counts, cited paths; never raw results."""
    cited: dict[str, list[str]] = {}
    if draft is not None:
        for c in draft.claims:
            for cit in c.citations:
                cited.setdefault(cit.invocation_id, []).append(cit.raw_path)
    return [
        {
            "invocation_id": inv.invocation_id,
            "tool": inv.tool_name,
            "status": str(inv.status),
            "evidence_status": inv.evidence_status,
            "evidence_count": len(inv.evidence_refs),
            "cited_paths": sorted(set(cited.get(inv.invocation_id, []))),
        }
        for inv in store.for_run(run_id)
    ]


def release_draft(
    draft: DiagnosisDraft | dict[str, Any] | str,
    *,
    run_id: str,
    store: CanonicalStore,
    semantic: SemanticGuard,
    language: str,
    question: str = "",
    content_type: str = "DIAGNOSIS_REPORT",
    root_cause_rules: bool = True,
    taxonomy: Taxonomy | None = None,
    cards: Mapping[str, Card] | None = None,
) -> ReleaseDecision:
    """Run both guards and build the public content.

    `taxonomy`: the run's, for DRAFT_INVALID; `cards`: the catalogue for ROOT_CAUSE_NOT_DISCRIMINATED.
    """
    ev = EvidenceGuard(store, taxonomy, cards=cards).check(draft, run_id=run_id, root_cause_rules=root_cause_rules)
    if not ev.passed or ev.snapshot is None or ev.draft is None:
        return ReleaseDecision(
            content=SafeFallbackFactory.build(FallbackType.EVIDENCE_VALIDATION_FAILED, language),
            release_outcome="FALLBACK",
            fallback_type=str(FallbackType.EVIDENCE_VALIDATION_FAILED),
            evidence=ev,
            semantic=None,
        )
    sem = semantic.check(ev.draft, ev.snapshot, question=question, tool_trace=tool_trace_summary(store, run_id, ev.draft))
    if not sem.available:
        kind = FallbackType.GUARD_UNAVAILABLE
    elif not sem.supported:
        kind = FallbackType.SEMANTIC_UNSUPPORTED
    else:
        key = "report" if content_type == "DIAGNOSIS_REPORT" else "answer"
        content = {"content_type": content_type, key: ev.draft.model_dump(mode="json"), "verified_sources": ev.snapshot.verified_sources}
        return ReleaseDecision(content=content, release_outcome="PUBLISHED", fallback_type=None, evidence=ev, semantic=sem)
    return ReleaseDecision(
        content=SafeFallbackFactory.build(kind, language, ev.snapshot.verified_sources),
        release_outcome="FALLBACK",
        fallback_type=str(kind),
        evidence=ev,
        semantic=sem,
    )
