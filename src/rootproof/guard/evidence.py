"""EvidenceGuard: code only, no model. All or nothing: one violation and the draft is not published.

Every check of docs/guard-rules.md "EvidenceGuard" with a stable violation code. Violations are kept in
the trace, never in public events.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from rootproof.agent.draft import DiagnosisDraft, RootCause, parse_draft
from rootproof.boundary.provenance import Span, record_key, untrusted_spans
from rootproof.boundary.store import CanonicalStore, InvocationStatus
from rootproof.evidence_sources import from_component, observes
from rootproof.guard.entities import claim_mismatches, culprit_mismatch, culprit_strays
from rootproof.guard.rules import rules_for
from rootproof.taxonomy import Taxonomy
from rootproof.tools.refs import NO_EVIDENCE_PATH, normalize_text, ref_text

if TYPE_CHECKING:
    from rootproof.kb.cards import Card, Hypothesis

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
    ROOT_CAUSE_UNCORROBORATED = "ROOT_CAUSE_UNCORROBORATED"
    RULED_OUT_UNTESTED = "RULED_OUT_UNTESTED"
    ROOT_CAUSE_NOT_DISCRIMINATED = "ROOT_CAUSE_NOT_DISCRIMINATED"
    CITATION_ENTITY_MISMATCH = "CITATION_ENTITY_MISMATCH"


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
    kind: str | None = None
    """The inspector kind of the cited invocation (`locks`, `error_log` …), None for other tools."""


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
    """Checks every citation of a draft against the canonical store.

    `cards` is the read-only card catalogue (`kb.cards`): with it the guard checks that a root
    cause its cards tell apart from alternatives rests on a discriminating signal
    (ROOT_CAUSE_NOT_DISCRIMINATED); without it that check is skipped.
    """

    def __init__(
        self, store: CanonicalStore, taxonomy: Taxonomy | None = None, *, cards: Mapping[str, Card] | None = None
    ) -> None:
        self.store = store
        self.taxonomy = taxonomy
        """The run's taxonomy: a draft label outside it is DRAFT_INVALID (None: built-in or namespaced)."""
        self.cards = cards

    def check(
        self, raw: DiagnosisDraft | dict[str, Any] | str, *, run_id: str, root_cause_rules: bool = True
    ) -> EvidenceGuardResult:
        """Run every check and report all violations."""
        if isinstance(raw, DiagnosisDraft):
            draft: DiagnosisDraft | None = raw
            problem = None
        else:
            draft, problem = parse_draft(raw, self.taxonomy)
        if draft is None:
            return EvidenceGuardResult(
                passed=False, violations=[Violation(code=ViolationCode.DRAFT_INVALID, detail=problem or "")]
            )
        violations: list[Violation] = []
        verified: list[VerifiedCitation] = []
        claim_ids = [c.id for c in draft.claims]
        if len(set(claim_ids)) != len(claim_ids):
            violations.append(Violation(code=ViolationCode.DRAFT_INVALID, detail="claim ids are not unique"))
        for claim in draft.claims:
            if not claim.citations:
                violations.append(Violation(code=ViolationCode.CITATION_MISSING, claim_id=claim.id))
            for idx, cit in enumerate(claim.citations):
                v, ok = self._check_citation(
                    claim.id,
                    claim.kind,
                    idx,
                    cit.invocation_id,
                    cit.tool_name,
                    cit.raw_path,
                    cit.excerpt,
                    run_id,
                )
                violations.extend(v)
                if ok is not None:
                    verified.append(ok)
        known = set(claim_ids)
        for h in draft.hypotheses:
            for cid in h.claim_ids:
                if cid not in known:
                    violations.append(
                        Violation(code=ViolationCode.CLAIM_REF_UNKNOWN, claim_id=cid, detail="hypothesis")
                    )
        if draft.root_cause is not None:
            for cid in draft.root_cause.claim_ids:
                if cid not in known:
                    violations.append(
                        Violation(code=ViolationCode.CLAIM_REF_UNKNOWN, claim_id=cid, detail="root_cause")
                    )
        for i, cause in enumerate(draft.contributing_causes):
            for cid in cause.claim_ids:
                if cid not in known:
                    violations.append(
                        Violation(
                            code=ViolationCode.CLAIM_REF_UNKNOWN, claim_id=cid, detail=f"contributing_causes[{i}]"
                        )
                    )
        violations.extend(_entity_mismatches(draft, verified, culprits=root_cause_rules))
        if root_cause_rules:
            violations.extend(self._claim_rules(draft, verified))
        sources: list[dict[str, str]] = []
        seen: set[tuple[str, str]] = set()
        for c in verified:
            if (c.invocation_id, c.raw_path) not in seen:
                seen.add((c.invocation_id, c.raw_path))
                sources.append(
                    {
                        "invocation_id": c.invocation_id,
                        "tool_name": c.tool_name,
                        "raw_path": c.raw_path,
                        "data_source": c.data_source,
                    }
                )
        if violations:
            return EvidenceGuardResult(passed=False, violations=violations, draft=draft)
        return EvidenceGuardResult(
            passed=True,
            snapshot=VerifiedEvidenceSnapshot(citations=verified, verified_sources=sources),
            draft=draft,
        )

    def _check_citation(
        self, claim_id: str, kind: str, idx: int, inv_id: str, tool: str, path: str, excerpt: str, run_id: str
    ) -> tuple[list[Violation], VerifiedCitation | None]:
        out: list[Violation] = []

        def v(code: ViolationCode, detail: str = "") -> tuple[list[Violation], None]:
            out.append(Violation(code=code, claim_id=claim_id, citation_index=idx, detail=detail))
            return out, None

        negative = kind == "negative_observation"
        if negative and path != NO_EVIDENCE_PATH:
            out.append(
                Violation(
                    code=ViolationCode.NEGATIVE_MISCITED,
                    claim_id=claim_id,
                    citation_index=idx,
                    detail="negative observation cites positive evidence",
                )
            )
        if not negative and path == NO_EVIDENCE_PATH:
            out.append(
                Violation(
                    code=ViolationCode.NEGATIVE_MISCITED,
                    claim_id=claim_id,
                    citation_index=idx,
                    detail="$.no_evidence backs a positive claim",
                )
            )
        inv = self.store.get(inv_id)
        if inv is None:
            return v(ViolationCode.UNKNOWN_INVOCATION, inv_id)
        if inv.run_id != run_id:
            return v(ViolationCode.FOREIGN_INVOCATION, inv_id)
        if inv.status is not InvocationStatus.READY or inv.result is None:
            return v(ViolationCode.INVOCATION_NOT_READY, str(inv.status))
        if tool != inv.tool_name:
            out.append(
                Violation(
                    code=ViolationCode.TOOL_MISMATCH,
                    claim_id=claim_id,
                    citation_index=idx,
                    detail=f"{tool} != {inv.tool_name}",
                )
            )
        ref = inv.ref(path)
        if ref is None:
            return v(ViolationCode.PATH_NOT_IN_REFS, path)
        try:
            recomputed = ref_text(inv.tool_name, inv.result, path)
        except KeyError:
            return v(ViolationCode.PATH_UNRESOLVED, path)
        if recomputed != ref.text:
            return v(
                ViolationCode.PATH_UNRESOLVED, f"{path}: recorded text differs from the canonical result"
            )
        norm_excerpt = normalize_text(excerpt)
        norm_ref = normalize_text(recomputed)
        if (
            not norm_excerpt
            or norm_excerpt not in norm_ref
            or len(norm_excerpt) < min(MIN_EXCERPT_CHARS, len(norm_ref))
        ):
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
            kind=str(inv.arguments["kind"])
            if isinstance(inv.arguments, dict) and inv.arguments.get("kind")
            else None,
        )

    def _claim_rules(self, draft: DiagnosisDraft, verified: list[VerifiedCitation]) -> list[Violation]:
        """What the root cause, each contributing cause and the rule-outs assert, checked by code
        (EG-11..EG-13, EG-15..EG-17 for every cause; EG-16)."""
        out: list[Violation] = []
        root_unsupported = False
        for where, cause, claim_ids in _causes(draft):
            cits = [c for c in verified if c.claim_id in claim_ids]
            provenance = _provenance(cits, where)
            if provenance:
                # The cause has no runtime, non-mock, non-injected support at all: that one code
                # says it (the seed story's only violation stays ROOT_CAUSE_MOCK_ONLY).
                out.extend(provenance)
                root_unsupported |= where == ""
                continue
            # Spans are recomputed from the verified text (never read from a recorded list), once per ref.
            spans = {id(c): untrusted_spans(c.tool_name, c.ref_text) for c in cits}
            support = [(c, spans[id(c)]) for c in cits if _countable(c, spans[id(c)])]
            found = _uncorroborated(cause.component, support)
            if self.cards is not None:
                found.extend(_not_discriminated(cause.component, cause.mechanism, support, self.cards))
            out.extend(_at(v, where) for v in found)
        if root_unsupported:
            return [v for v in out if v.code in _PROVENANCE]
        out.extend(_ruled_out_untested(draft, verified))
        return out


def _entity_mismatches(draft: DiagnosisDraft, verified: list[VerifiedCitation], *, culprits: bool) -> list[Violation]:
    """EG-18: every claim agrees with the runtime refs it cites about the entities it names, and
    each cause's culprit is cited by its own record (guard/entities.py)."""
    out: list[Violation] = []
    by_claim: dict[str, list[tuple[int, VerifiedCitation]]] = {}
    for claim in draft.claims:
        cits = [(i, c) for i, c in enumerate(v for v in verified if v.claim_id == claim.id) if _entity_ref(c)]
        by_claim[claim.id] = cits
        for idx, detail in claim_mismatches(claim.text, [(i, c.tool_name, c.raw_path, c.ref_text) for i, c in cits]):
            out.append(Violation(code=ViolationCode.CITATION_ENTITY_MISMATCH, claim_id=claim.id, citation_index=idx, detail=detail))
    if culprits:
        for where, cause, claim_ids in _causes(draft):
            refs = [(c.tool_name, c.raw_path, c.ref_text) for cid in sorted(claim_ids) for _, c in by_claim.get(cid, [])]
            problem = culprit_mismatch(cause.culprit, refs)
            if problem:
                out.append(Violation(code=ViolationCode.CITATION_ENTITY_MISMATCH, detail=_at(Violation(code="", detail=problem), where).detail))
        if draft.root_cause is not None:
            # A symptom the root cause explains is explained through its culprit's chain.
            explained = {cid for h in draft.hypotheses if h.status == "explained" for cid in h.claim_ids}
            for cid in sorted(explained):
                cits = by_claim.get(cid, [])
                for n in culprit_strays(draft.root_cause.culprit, [(c.tool_name, c.raw_path, c.ref_text) for _, c in cits]):
                    out.append(
                        Violation(
                            code=ViolationCode.CITATION_ENTITY_MISMATCH,
                            claim_id=cid,
                            citation_index=cits[n][0],
                            detail=f"a symptom explained by the root cause cites a row that neither is its culprit nor names it ({cits[n][1].raw_path})",
                        )
                    )
    return out


def _entity_ref(c: VerifiedCitation) -> bool:
    """A ref the entity rule reads: runtime evidence (not a knowledge card, not `$.no_evidence`)."""
    return c.data_source != "knowledge" and c.raw_path != NO_EVIDENCE_PATH


_PROVENANCE = frozenset(
    {
        ViolationCode.ROOT_CAUSE_KNOWLEDGE_ONLY,
        ViolationCode.ROOT_CAUSE_MOCK_ONLY,
        ViolationCode.ROOT_CAUSE_INJECTED,
    }
)


def _causes(draft: DiagnosisDraft) -> list[tuple[str, RootCause, set[str]]]:
    """(where, cause, its claim ids) for the root cause ("" and its claim_ids plus the claims of
    kind root_cause) and each contributing cause (`contributing_causes[i]` and its claim_ids only)."""
    if draft.root_cause is None:
        return []
    root = set(draft.root_cause.claim_ids) | {c.id for c in draft.claims if c.kind == "root_cause"}
    out = [("", draft.root_cause, root)]
    for i, cause in enumerate(draft.contributing_causes):
        out.append((f"contributing_causes[{i}] ({cause.component}/{cause.mechanism})", cause, set(cause.claim_ids)))
    return out


def _at(v: Violation, where: str) -> Violation:
    """`v` with the contributing cause it concerns named in its detail (the root cause's stays as is)."""
    return replace(v, detail=f"{where}: {v.detail}") if where else v


def _provenance(cits: list[VerifiedCitation], where: str) -> list[Violation]:
    """EG-11..EG-13 for one cause, given its verified citations."""
    what = where or "the root cause"
    runtime = [c for c in cits if c.data_source != "knowledge"]
    if any(c.data_source != "mock" and not c.instruction_like for c in runtime):
        return []
    if not runtime:
        return [Violation(code=ViolationCode.ROOT_CAUSE_KNOWLEDGE_ONLY, detail=f"no runtime citation backs {what}")]
    if all(c.data_source == "mock" for c in runtime):
        return [Violation(code=ViolationCode.ROOT_CAUSE_MOCK_ONLY, detail=f"{what} rests only on mock data")]
    return [
        Violation(
            code=ViolationCode.ROOT_CAUSE_INJECTED,
            detail=f"{what} rests only on instruction-like tool output",
        )
    ]


# -- what the claims assert (EG-15..EG-17) -----------------------------------------------------------
def _runtime(c: VerifiedCitation) -> bool:
    return (
        c.data_source not in ("knowledge", "mock")
        and not c.instruction_like
        and c.raw_path != NO_EVIDENCE_PATH
    )


def _countable(c: VerifiedCitation, spans: tuple[Span, ...]) -> bool:
    """Runtime, not mock, not instruction-like, and quoting something outside the ref's untrusted spans."""
    return _runtime(c) and not _excerpt_inside_spans(c.ref_text, c.excerpt, spans)


def _norm_map(text: str) -> tuple[str, list[int]]:
    """`normalize_text(text)` with, for each character, the index in `text` it came from."""
    chars: list[str] = []
    index: list[int] = []
    space = True
    for i, ch in enumerate(text):
        for c in unicodedata.normalize("NFKC", ch):
            if c.isspace():
                if space:
                    continue
                c, space = " ", True
            else:
                space = False
            chars.append(c)
            index.append(i)
    while chars and chars[-1] == " ":
        chars.pop()
        index.pop()
    return "".join(chars), index


def _excerpt_inside_spans(text: str, excerpt: str, spans: tuple[Span, ...]) -> bool:
    """True when no occurrence of the excerpt has a letter or digit outside every span."""
    if not spans:
        return False
    needle = normalize_text(excerpt)
    norm, index = _norm_map(text)
    pos = norm.find(needle) if needle else -1
    if pos < 0:
        return True  # not locatable character by character: it cannot count as outside
    while pos >= 0:
        for k in range(pos, pos + len(needle)):
            i = index[k]
            if norm[k].isalnum() and not any(s <= i < e for s, e in spans):
                return False
        pos = norm.find(needle, pos + 1)
    return True


def _uncorroborated(
    component: str, support: list[tuple[VerifiedCitation, tuple[Span, ...]]]
) -> list[Violation]:
    """EG-15: ≥ 2 independent records, at least one from the component or a client error naming it."""
    records = {record_key(c.ref_text) for c, _ in support}
    anchored = any(
        from_component(component, c.tool_name, c.kind, c.ref_text, spans=spans) for c, spans in support
    )
    problems = []
    if len(records) < 2:
        problems.append(f"{len(records)} independent runtime record(s) outside untrusted spans, 2 needed")
    if not anchored:
        problems.append(f"no cited ref comes from {component} or is a client error naming it")
    if not problems:
        return []
    return [Violation(code=ViolationCode.ROOT_CAUSE_UNCORROBORATED, detail="; ".join(problems))]


def _ruled_out_untested(draft: DiagnosisDraft, verified: list[VerifiedCitation]) -> list[Violation]:
    """EG-16: a ruled-out hypothesis, or one marked explained by the root cause (a symptom of it),
    cites a runtime ref from a source able to observe its component."""
    out: list[Violation] = []
    for h in draft.hypotheses:
        if h.status not in ("ruled_out", "explained"):
            continue
        cits = [c for c in verified if c.claim_id in set(h.claim_ids) and _runtime(c)]
        if not any(observes(h.component, c.tool_name, c.kind, c.ref_text) for c in cits):
            out.append(
                Violation(
                    code=ViolationCode.RULED_OUT_UNTESTED,
                    claim_id=h.claim_ids[0] if h.claim_ids else None,
                    detail=f"{h.component}/{h.mechanism} ruled out without evidence from a source able to observe {h.component}",
                )
            )
    return out


_INDEXES: dict[int, tuple[Mapping[str, Card], dict[tuple[str, str], list[Hypothesis]]]] = {}


def _hypothesis_index(cards: Mapping[str, Card]) -> dict[tuple[str, str], list[Hypothesis]]:
    """(component, mechanism) → the cards' hypotheses proposing it; built once per catalogue."""
    entry = _INDEXES.get(id(cards))
    if entry is not None and entry[0] is cards:
        return entry[1]
    index: dict[tuple[str, str], list[Hypothesis]] = {}
    for card in cards.values():
        for h in card.hypotheses:
            index.setdefault((h.component, h.mechanism), []).append(h)
    if len(_INDEXES) >= 8:
        _INDEXES.clear()
    _INDEXES[id(cards)] = (cards, index)
    return index


def _not_discriminated(
    component: str,
    mechanism: str,
    support: list[tuple[VerifiedCitation, tuple[Span, ...]]],
    cards: Mapping[str, Card],
) -> list[Violation]:
    """EG-17: when the cards name alternatives, some cited ref matches a discriminating signal."""
    from rootproof.kb.signals import ref_matches

    index = _hypothesis_index(cards)

    def proposing(pair: tuple[str, str]) -> list[Hypothesis]:
        return index.get(pair, [])

    own = proposing((component, mechanism))
    alternatives = sorted({a for h in own for a in h.distinguishes_from} - {f"{component}/{mechanism}"})
    if not own or not alternatives or not support:
        return []
    alt_hyps = [h for a in alternatives for h in proposing((a.partition("/")[0], a.partition("/")[2]))]

    def matches(
        h: Hypothesis, cited: tuple[VerifiedCitation, tuple[Span, ...]], discriminating: bool
    ) -> bool:
        c, spans = cited
        return any(
            ref_matches(s, c.tool_name, c.kind, c.raw_path, c.ref_text, spans)
            for s in h.signals
            if (s.discriminating or not discriminating) and s.tool == c.tool_name
        )

    if any(matches(h, c, True) for h in own for c in support):
        return []
    if not all(any(matches(h, c, False) for h in alt_hyps) for c in support):
        return []
    return [
        Violation(
            code=ViolationCode.ROOT_CAUSE_NOT_DISCRIMINATED,
            detail=f"every cited ref is also a signal of {', '.join(alternatives)}; no discriminating signal of {component}/{mechanism} is cited",
        )
    ]
