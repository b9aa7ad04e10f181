"""EvidenceGuard: code only, no model. All or nothing: one violation and the draft is not published.

Every check of DESIGN.md "EvidenceGuard" with a stable violation code. Violations are kept in
the trace, never in public events.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from rootproof.agent.draft import DiagnosisDraft, parse_draft
from rootproof.boundary.store import CanonicalStore, InvocationStatus
from rootproof.guard.rules import rules_for
from rootproof.taxonomy import Taxonomy
from rootproof.tools.refs import NO_EVIDENCE_PATH, normalize_text, ref_text

__all__ = [
    "EvidenceGuard",
    "EvidenceGuardResult",
    "VerifiedCitation",
    "VerifiedEvidenceSnapshot",
    "Violation",
    "ViolationCode",
]

MIN_EXCERPT_CHARS = 12


class ViolationCode(StrEnum):
    """Stable violation codes."""

    DRAFT_INVALID = "DRAFT_INVALID"
    CITATION_MISSING = "CITATION_MISSING"
    UNKNOWN_INVOCATION = "UNKNOWN_INVOCATION"
    FOREIGN_INVOCATION = "FOREIGN_INVOCATION"
    INVOCATION_NOT_READY = "INVOCATION_NOT_READY"
    TOOL_MISMATCH = "TOOL_MISMATCH"
    PATH_NOT_IN_REFS = "PATH_NOT_IN_REFS"
    PATH_UNRESOLVED = "PATH_UNRESOLVED"
    EXCERPT_MISMATCH = "EXCERPT_MISMATCH"
    NEGATIVE_MISCITED = "NEGATIVE_MISCITED"
    ROOT_CAUSE_KNOWLEDGE_ONLY = "ROOT_CAUSE_KNOWLEDGE_ONLY"
    ROOT_CAUSE_MOCK_ONLY = "ROOT_CAUSE_MOCK_ONLY"
    ROOT_CAUSE_INJECTED = "ROOT_CAUSE_INJECTED"
    CLAIM_REF_UNKNOWN = "CLAIM_REF_UNKNOWN"


@dataclass(frozen=True, kw_only=True)
class Violation:
    """One failed check."""

    code: str
    claim_id: str | None = None
    citation_index: int | None = None
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class VerifiedCitation:
    """A citation that passed every check, with what it points at."""

    claim_id: str
    invocation_id: str
    tool_name: str
    raw_path: str
    excerpt: str
    ref_text: str
    data_source: str
    instruction_like: bool = False


@dataclass(kw_only=True)
class VerifiedEvidenceSnapshot:
    """The claims with their verified citations, and the verified sources."""

    citations: list[VerifiedCitation]
    verified_sources: list[dict[str, str]]

    def for_claim(self, claim_id: str) -> list[VerifiedCitation]:
        """Verified citations of one claim."""
        return [c for c in self.citations if c.claim_id == claim_id]


@dataclass(kw_only=True)
class EvidenceGuardResult:
    """Passed with a snapshot, or the violations."""

    passed: bool
    violations: list[Violation] = field(default_factory=list)
    snapshot: VerifiedEvidenceSnapshot | None = None
    draft: DiagnosisDraft | None = None
    rule_set_version: str = ""
    rules: list[dict[str, str]] = field(default_factory=list)
    """The rules that ran ({id, code, description}); every check always runs."""

    def __post_init__(self) -> None:
        if not self.rule_set_version:
            self.rule_set_version, self.rules = rules_for("evidence_guard", ViolationCode)

    @property
    def codes(self) -> list[str]:
        """Distinct violation codes, sorted."""
        return sorted({v.code for v in self.violations})

    def as_dict(self) -> dict[str, Any]:
        """For the trace (`self_evaluation.evidence_guard`)."""
        return {
            "passed": self.passed,
            "rule_set_version": self.rule_set_version,
            "rules": self.rules,
            "codes": self.codes,
            "violations": [asdict(v) for v in self.violations],
            "verified_sources": self.snapshot.verified_sources if self.snapshot else [],
        }


class EvidenceGuard:
    """Checks every citation of a draft against the canonical store."""

    def __init__(self, store: CanonicalStore, taxonomy: Taxonomy | None = None) -> None:
        self.store = store
        self.taxonomy = taxonomy
        """The run's taxonomy: a draft label outside it is DRAFT_INVALID (None: built-in or namespaced)."""

    def check(self, raw: DiagnosisDraft | dict[str, Any] | str, *, run_id: str, root_cause_rules: bool = True) -> EvidenceGuardResult:
        """Run every check and report all violations."""
        if isinstance(raw, DiagnosisDraft):
            draft: DiagnosisDraft | None = raw
            problem = None
        else:
            draft, problem = parse_draft(raw, self.taxonomy)
        if draft is None:
            return EvidenceGuardResult(passed=False, violations=[Violation(code=ViolationCode.DRAFT_INVALID, detail=problem or "")])
        violations: list[Violation] = []
        verified: list[VerifiedCitation] = []
        claim_ids = [c.id for c in draft.claims]
        if len(set(claim_ids)) != len(claim_ids):
            violations.append(Violation(code=ViolationCode.DRAFT_INVALID, detail="claim ids are not unique"))
        for claim in draft.claims:
            if not claim.citations:
                violations.append(Violation(code=ViolationCode.CITATION_MISSING, claim_id=claim.id))
            for idx, cit in enumerate(claim.citations):
                v, ok = self._check_citation(claim.id, claim.kind, idx, cit.invocation_id, cit.tool_name, cit.raw_path, cit.excerpt, run_id)
                violations.extend(v)
                if ok is not None:
                    verified.append(ok)
        known = set(claim_ids)
        for h in draft.hypotheses:
            for cid in h.claim_ids:
                if cid not in known:
                    violations.append(Violation(code=ViolationCode.CLAIM_REF_UNKNOWN, claim_id=cid, detail="hypothesis"))
        if draft.root_cause is not None:
            for cid in draft.root_cause.claim_ids:
                if cid not in known:
                    violations.append(Violation(code=ViolationCode.CLAIM_REF_UNKNOWN, claim_id=cid, detail="root_cause"))
            if root_cause_rules:
                violations.extend(self._root_cause_rules(draft, verified))
        sources: list[dict[str, str]] = []
        seen: set[tuple[str, str]] = set()
        for c in verified:
            if (c.invocation_id, c.raw_path) not in seen:
                seen.add((c.invocation_id, c.raw_path))
                sources.append({"invocation_id": c.invocation_id, "tool_name": c.tool_name, "raw_path": c.raw_path, "data_source": c.data_source})
        if violations:
            return EvidenceGuardResult(passed=False, violations=violations, draft=draft)
        return EvidenceGuardResult(passed=True, snapshot=VerifiedEvidenceSnapshot(citations=verified, verified_sources=sources), draft=draft)

    def _check_citation(
        self, claim_id: str, kind: str, idx: int, inv_id: str, tool: str, path: str, excerpt: str, run_id: str
    ) -> tuple[list[Violation], VerifiedCitation | None]:
        out: list[Violation] = []

        def v(code: ViolationCode, detail: str = "") -> tuple[list[Violation], None]:
            out.append(Violation(code=code, claim_id=claim_id, citation_index=idx, detail=detail))
            return out, None

        negative = kind == "negative_observation"
        if negative and path != NO_EVIDENCE_PATH:
            out.append(Violation(code=ViolationCode.NEGATIVE_MISCITED, claim_id=claim_id, citation_index=idx, detail="negative observation cites positive evidence"))
        if not negative and path == NO_EVIDENCE_PATH:
            out.append(Violation(code=ViolationCode.NEGATIVE_MISCITED, claim_id=claim_id, citation_index=idx, detail="$.no_evidence backs a positive claim"))
        inv = self.store.get(inv_id)
        if inv is None:
            return v(ViolationCode.UNKNOWN_INVOCATION, inv_id)
        if inv.run_id != run_id:
            return v(ViolationCode.FOREIGN_INVOCATION, inv_id)
        if inv.status is not InvocationStatus.READY or inv.result is None:
            return v(ViolationCode.INVOCATION_NOT_READY, str(inv.status))
        if tool != inv.tool_name:
            out.append(Violation(code=ViolationCode.TOOL_MISMATCH, claim_id=claim_id, citation_index=idx, detail=f"{tool} != {inv.tool_name}"))
        ref = inv.ref(path)
        if ref is None:
            return v(ViolationCode.PATH_NOT_IN_REFS, path)
        try:
            recomputed = ref_text(inv.tool_name, inv.result, path)
        except KeyError:
            return v(ViolationCode.PATH_UNRESOLVED, path)
        if recomputed != ref.text:
            return v(ViolationCode.PATH_UNRESOLVED, f"{path}: recorded text differs from the canonical result")
        norm_excerpt = normalize_text(excerpt)
        norm_ref = normalize_text(recomputed)
        if not norm_excerpt or norm_excerpt not in norm_ref or len(norm_excerpt) < min(MIN_EXCERPT_CHARS, len(norm_ref)):
            return v(ViolationCode.EXCERPT_MISMATCH, path)
        if out:
            return out, None
        return out, VerifiedCitation(
            claim_id=claim_id,
            invocation_id=inv_id,
            tool_name=inv.tool_name,
            raw_path=path,
            excerpt=excerpt,
            ref_text=recomputed,
            data_source=ref.data_source,
            instruction_like=ref.instruction_like,
        )

    @staticmethod
    def _root_cause_rules(draft: DiagnosisDraft, verified: list[VerifiedCitation]) -> list[Violation]:
        assert draft.root_cause is not None
        rc_claims = set(draft.root_cause.claim_ids) | {c.id for c in draft.claims if c.kind == "root_cause"}
        cits = [c for c in verified if c.claim_id in rc_claims]
        runtime = [c for c in cits if c.data_source != "knowledge"]
        if any(c.data_source != "mock" and not c.instruction_like for c in runtime):
            return []
        if not runtime:
            return [Violation(code=ViolationCode.ROOT_CAUSE_KNOWLEDGE_ONLY, detail="no runtime citation backs the root cause")]
        if all(c.data_source == "mock" for c in runtime):
            return [Violation(code=ViolationCode.ROOT_CAUSE_MOCK_ONLY, detail="the root cause rests only on mock data")]
        return [Violation(code=ViolationCode.ROOT_CAUSE_INJECTED, detail="the root cause rests only on instruction-like tool output")]
