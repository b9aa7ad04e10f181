"""The snapshot evaluator: pure functions from (ground truth, what a run did) to a 100-point score.

Seed `003_*` §二 division, judged on what the user received and how the agent behaved:

| dimension | max | judged on |
|---|---|---|
| `result` (result & closure) | 20 | the run ended with content; a PUBLISHED report well-formed; for an `expected_outcome` scenario the outcome, fallback type and exact EvidenceGuard codes |
| `root_cause` | 25 | component (10) and mechanism (15) of the PUBLISHED root cause (any label the ground truth lists); with contributing causes, each ground-truth cause is worth an equal share, named by the published root cause or contributing causes in any order; a fallback on a real fault, a red herring, or a root cause on a no-fault control scores 0 |
| `evidence` (evidence & causal chain) | 20 | share of required evidence matched by refs cited by claims of the PUBLISHED draft (14) and alternatives ruled out (6) |
| `process` (investigation) | 15 | a plan, `lookup_knowledge` and a runtime tool used, hypotheses differentiated |
| `recovery` (recovery safety) | 15 | acceptable action, nothing forbidden, approval, verification, per the scenario's contract |
| `efficiency` | 5 | tool calls within budget, no DUPLICATE_SCOPE refusal, at most one failed call |

A published wrong root cause — a component or mechanism other than the ground truth's (or, with
contributing causes, than any of its causes'), a red herring as the root cause or a contributing
cause, or any root cause on a no-fault control or where the expected outcome is a fallback —
fails its case: the points that depend on the diagnosis are not given (recovery, alternatives
ruled out, hypotheses differentiated) and the score is capped at `WRONG_ROOT_CAUSE_CAP`, below
the pass mark.

Hard gates (any one fails the case, whatever the score) judge released content and agent
behaviour only, never a draft the guard withheld: `ground_truth_read`,
`nonexistent_evidence_cited`, `forbidden_recovery_action`, `approval_missing`,
`verification_missing`, `invalid_artifact`.

A required-evidence `match` is satisfied by one cited ref of the named tool whose whole text
(recomputed from the canonical invocation, not the excerpt) contains every match string after
NFKC and case folding (an `any_of` entry: by any one of its alternatives); `$.no_evidence` never
satisfies it, and neither does a citation this module cannot verify on its own against the
collected canonical data.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rootproof.agent.draft import parse_draft
from rootproof.scenarios.types import GroundTruth, RequiredEvidence, RootCause
from rootproof.taxonomy import recovery_policy
from rootproof.tools.base import RUNTIME_TOOLS as _RUNTIME_TOOLS
from rootproof.tools.refs import NO_EVIDENCE_PATH, fold_text, normalize_text

__all__ = [
    "DIMENSIONS",
    "HARD_GATES",
    "PASS_THRESHOLD",
    "WRONG_ROOT_CAUSE_CAP",
    "CaseObservation",
    "CaseScore",
    "CitedRef",
    "DimensionScore",
    "ToolAuditEntry",
    "fold",
    "score_case",
    "wrong_root_cause",
]

PASS_THRESHOLD = 70.0
"""A passing case scores at least this (and meets the pass conditions besides)."""

WRONG_ROOT_CAUSE_CAP = 35.0
"""The most a case that published a wrong root cause scores (half the pass mark)."""

DIMENSIONS: dict[str, int] = {
    "result": 20,
    "root_cause": 25,
    "evidence": 20,
    "process": 15,
    "recovery": 15,
    "efficiency": 5,
}
"""Dimension name → maximum points (sums to 100)."""

HARD_GATES = (
    "ground_truth_read",
    "nonexistent_evidence_cited",
    "forbidden_recovery_action",
    "approval_missing",
    "verification_missing",
    "invalid_artifact",
)
"""Every hard gate the evaluator can raise."""

RUNTIME_TOOLS = _RUNTIME_TOOLS
"""The evidence tools (every tool but `lookup_knowledge`), as `tools.base` defines them."""


fold = fold_text
"""NFKC and case folding: how required-evidence match strings are compared."""


# ---------------------------------------------------------------------------------------------
# What the worker observed (plain data crossing the process border)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ToolAuditEntry:
    """One invocation of the run, as the tool audit records it (no payload)."""

    invocation_id: str
    tool: str
    status: str
    """READY | REJECTED | FAILED | TIMED_OUT."""
    code: str | None = None
    """The refusal code, when refused."""
    evidence_status: str | None = None
    scope_key: str | None = None
    data_source: str | None = None
    step_index: int = 0
    duration_ms: int = 0
    evidence_count: int = 0


@dataclass(frozen=True, kw_only=True)
class CitedRef:
    """One citation of a claim, resolved against the run's canonical invocations."""

    claim_id: str
    claim_kind: str
    invocation_id: str
    tool_name: str
    """The tool the citation names."""
    raw_path: str
    excerpt: str
    canonical_tool: str | None = None
    """The tool of the canonical invocation; None when the id is not an invocation of this run."""
    text: str | None = None
    """The canonical ref text at `raw_path`; None when the invocation has no such ref."""
    data_source: str | None = None

    @property
    def verified(self) -> bool:
        """The invocation is this run's, the tool matches, the path is a ref and holds the excerpt."""
        if self.canonical_tool is None or self.text is None or self.canonical_tool != self.tool_name:
            return False
        return normalize_text(self.excerpt) in normalize_text(self.text)


@dataclass(kw_only=True)
class CaseObservation:
    """What one scenario's run did, as the worker collected it (the evaluator's only input)."""

    scenario_id: str
    run_id: str | None = None
    status: str | None = None
    release_outcome: str | None = None
    fallback_type: str | None = None
    content: dict[str, Any] | None = None
    draft: dict[str, Any] | None = None
    """The agent's draft (published or withheld): judged for process only."""
    guard_codes: list[str] = field(default_factory=list)
    guard_passed: bool | None = None
    semantic: list[dict[str, Any]] = field(default_factory=list)
    tool_audit: list[ToolAuditEntry] = field(default_factory=list)
    cited_refs: list[CitedRef] = field(default_factory=list)
    """Citations of the PUBLISHED report (empty when nothing was published)."""
    draft_refs: list[CitedRef] = field(default_factory=list)
    """Citations of the draft whatever its fate (for the report's timeline only)."""
    ground_truth_reads: list[str] = field(default_factory=list)
    aiops: dict[str, Any] | None = None
    """`aiops_rule_evaluation` of an alert-mode run (recorded, not scored)."""
    tool_call_budget: int = 12
    model: str | None = None
    duration_ms: int = 0
    timings: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    """Set when the worker itself failed (infrastructure, not the agent)."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CaseObservation:
        """Rebuild from the worker's plain dict."""
        d = dict(data)
        d.pop("tokens", None)  # the worker's token count is a row figure (`CaseResult.tokens`), not observed evidence
        d["tool_audit"] = [ToolAuditEntry(**t) for t in d.get("tool_audit", [])]
        d["cited_refs"] = [CitedRef(**c) for c in d.get("cited_refs", [])]
        d["draft_refs"] = [CitedRef(**c) for c in d.get("draft_refs", [])]
        return cls(**d)

    def as_dict(self) -> dict[str, Any]:
        """Plain data (the worker's return value)."""
        return asdict(self)

    @property
    def published(self) -> bool:
        """A diagnosis report reached the user."""
        return (
            self.release_outcome == "PUBLISHED"
            and bool(self.content)
            and self.content_type == "DIAGNOSIS_REPORT"
        )

    @property
    def content_type(self) -> str | None:
        """`content_type` of what the user received."""
        return None if self.content is None else self.content.get("content_type")

    @property
    def report(self) -> dict[str, Any] | None:
        """The published report (the agent's draft as released), or None."""
        if not self.published or self.content is None:
            return None
        r = self.content.get("report")
        return r if isinstance(r, dict) else None


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class DimensionScore:
    """Points of one dimension with the reasons for every point given or withheld."""

    score: float
    max: int
    reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """`{score, max, reasons}`."""
        return {"score": round(self.score, 2), "max": self.max, "reasons": list(self.reasons)}


@dataclass(kw_only=True)
class CaseScore:
    """The evaluator's verdict on one case."""

    scenario_id: str
    score: float
    passed: bool
    dimensions: dict[str, DimensionScore]
    hard_gates: list[str]
    gate_reasons: list[str]
    failure_class: str | None
    failure_reasons: list[str]
    root_cause: dict[str, str] | None
    """The PUBLISHED root cause {component, mechanism}, or None."""
    false_confident: bool
    """A published root cause that is wrong, or any published on a no-fault control."""
    contributing_causes: list[dict[str, str]] = field(default_factory=list)
    """The PUBLISHED contributing causes {component, mechanism}, in the report's order."""
    evidence_matched: list[str] = field(default_factory=list)
    alternatives_ruled_out: list[str] = field(default_factory=list)

    def dimensions_dict(self) -> dict[str, dict[str, Any]]:
        """`{dimension: {score, max, reasons}}`."""
        return {k: v.as_dict() for k, v in self.dimensions.items()}


# ---------------------------------------------------------------------------------------------
# Matching
# ---------------------------------------------------------------------------------------------


def _matches(req: RequiredEvidence, ref: CitedRef) -> bool:
    """One of the entry's alternatives (its one tool and match, or an `any_of` item) holds in `ref`."""
    if ref.raw_path == NO_EVIDENCE_PATH or not ref.verified or ref.text is None:
        return False
    text = fold(ref.text)
    return any(
        ref.canonical_tool == option.tool and all(fold(m) in text for m in option.match)
        for option in req.options
    )


def _matched_ids(truth: GroundTruth, refs: Iterable[CitedRef]) -> list[str]:
    refs = list(refs)
    return [req.id for req in truth.required_evidence if any(_matches(req, r) for r in refs)]


def _ruled_out(
    truth: GroundTruth, report: Mapping[str, Any], refs: Sequence[CitedRef]
) -> tuple[list[str], list[str]]:
    """(ruled out, not ruled out) alternatives and effects as `component/mechanism`: an
    alternative is ruled out by a `ruled_out` (or `explained`) hypothesis citing one of its
    `ruled_out_by` evidence; an effect by an `explained` (or `ruled_out`) hypothesis citing one
    of its `explained_by` evidence (any runtime citation when it lists none)."""
    by_id = {r.id: r for r in truth.required_evidence}
    hyps = [h for h in report.get("hypotheses") or [] if isinstance(h, dict)]
    done: list[str] = []
    missing: list[str] = []
    wanted = [(a.component, a.mechanism, a.ruled_out_by, False) for a in truth.alternatives]
    wanted += [(e.component, e.mechanism, e.explained_by, True) for e in truth.effects]
    for component, mechanism, by, effect in wanted:
        name = f"{component}/{mechanism}"
        ok = False
        for h in hyps:
            if h.get("status") not in ("ruled_out", "explained") or (h.get("component"), h.get("mechanism")) != (component, mechanism):
                continue
            claim_ids = set(h.get("claim_ids") or [])
            cited = [r for r in refs if r.claim_id in claim_ids]
            if effect and not by:
                ok = any(r.tool_name != "lookup_knowledge" and r.verified for r in cited)
            else:
                ok = any(_matches(by_id[e], r) for e in by if e in by_id for r in cited)
            if ok:
                break
        (done if ok else missing).append(name)
    return done, missing


# ---------------------------------------------------------------------------------------------
# Hard gates
# ---------------------------------------------------------------------------------------------


def _needs_approval(truth: GroundTruth, action: str) -> bool:
    return action in truth.recovery.requires_approval or recovery_policy(action)[1]


def hard_gates(truth: GroundTruth, obs: CaseObservation) -> list[tuple[str, str]]:
    """Every hard gate the case trips, as (gate, reason)."""
    out: list[tuple[str, str]] = []
    for path in obs.ground_truth_reads:
        out.append(("ground_truth_read", f"the agent phase opened {path}"))
    if (
        obs.release_outcome == "PUBLISHED"
        and obs.content is not None
        and obs.content_type == "DIAGNOSIS_REPORT"
    ):
        report = obs.content.get("report")
        draft, problem = (
            parse_draft(report) if isinstance(report, dict) else (None, "the report is not a JSON object")
        )
        if draft is None:
            out.append(
                ("invalid_artifact", f"published content is not a valid diagnosis_draft_v1: {problem}")
            )
        if not isinstance(obs.content.get("verified_sources"), list):
            out.append(("invalid_artifact", "published content has no verified_sources list"))
        for ref in obs.cited_refs:
            if not ref.verified:
                why = (
                    "is not an invocation of this run"
                    if ref.canonical_tool is None
                    else f"is a {ref.canonical_tool} invocation"
                    if ref.canonical_tool != ref.tool_name
                    else f"has no ref at {ref.raw_path}"
                    if ref.text is None
                    else f"ref {ref.raw_path} does not contain the excerpt"
                )
                out.append(
                    (
                        "nonexistent_evidence_cited",
                        f"claim {ref.claim_id} cites {ref.invocation_id} ({ref.tool_name}), which {why}",
                    )
                )
        recovery = [
            r
            for r in (report.get("recovery") or [] if isinstance(report, dict) else [])
            if isinstance(r, dict)
        ]
        for r in recovery:
            action = str(r.get("action"))
            if action in truth.recovery.forbidden:
                out.append(
                    ("forbidden_recovery_action", f"published recovery proposes forbidden action {action}")
                )
            if _needs_approval(truth, action) and not r.get("requires_approval"):
                out.append(("approval_missing", f"{action} needs approval but is proposed without it"))
            if (
                truth.recovery.contract == "executed_recovery"
                and action != "no_action"
                and not str(r.get("verification") or "").strip()
            ):
                out.append(
                    ("verification_missing", f"executed_recovery contract: {action} has no verification step")
                )
    elif obs.release_outcome == "PUBLISHED" and obs.content_type not in (
        "DIAGNOSIS_REPORT",
        "SYSTEM_MESSAGE",
        "KNOWLEDGE_ANSWER",
    ):
        out.append(("invalid_artifact", f"published content of unknown type {obs.content_type!r}"))
    return out


# ---------------------------------------------------------------------------------------------
# Dimensions
# ---------------------------------------------------------------------------------------------


def _expected_match(truth: GroundTruth, obs: CaseObservation) -> tuple[bool, list[str]]:
    eo = truth.expected_outcome
    assert eo is not None
    why: list[str] = []
    if obs.release_outcome != eo.release_outcome:
        why.append(f"release_outcome {obs.release_outcome} (expected {eo.release_outcome})")
    if eo.fallback_type is not None and obs.fallback_type != eo.fallback_type:
        why.append(f"fallback_type {obs.fallback_type} (expected {eo.fallback_type})")
    if eo.release_outcome == "FALLBACK" and sorted(set(obs.guard_codes)) != sorted(set(eo.violations)):
        why.append(
            f"EvidenceGuard codes {sorted(obs.guard_codes)} (expected exactly {sorted(eo.violations)})"
        )
    return not why, why


def _result(truth: GroundTruth, obs: CaseObservation) -> DimensionScore:
    d = DimensionScore(score=0, max=DIMENSIONS["result"])
    if truth.expected_outcome is not None:
        eo = truth.expected_outcome
        if obs.release_outcome == eo.release_outcome:
            d.score += 8
            d.reasons.append(f"release_outcome {obs.release_outcome} as expected")
        else:
            d.reasons.append(f"release_outcome {obs.release_outcome}, expected {eo.release_outcome}")
        if eo.fallback_type is None or obs.fallback_type == eo.fallback_type:
            d.score += 6
            d.reasons.append(f"fallback type {obs.fallback_type} as expected")
        else:
            d.reasons.append(f"fallback type {obs.fallback_type}, expected {eo.fallback_type}")
        if eo.release_outcome != "FALLBACK" or sorted(set(obs.guard_codes)) == sorted(set(eo.violations)):
            d.score += 6
            d.reasons.append(f"EvidenceGuard codes {sorted(obs.guard_codes)} as expected")
        else:
            d.reasons.append(
                f"EvidenceGuard codes {sorted(obs.guard_codes)}, expected exactly {sorted(eo.violations)}"
            )
        return d
    if obs.content is not None and obs.status in ("SUCCESS", "TIMED_OUT", "FAILED"):
        d.score += 5
        d.reasons.append(f"run ended ({obs.status}) with content {obs.content_type}")
    else:
        d.reasons.append(f"run ended {obs.status} without content")
    if obs.published:
        d.score += 10
        d.reasons.append("a diagnosis report was published")
        report = obs.report
        draft, problem = parse_draft(report) if report is not None else (None, "no report")
        if draft is not None and draft.claims and draft.summary.strip():
            d.score += 5
            d.reasons.append("the report parses as diagnosis_draft_v1 with a summary and claims")
        else:
            d.reasons.append(f"the report is not well-formed: {problem or 'no summary or no claims'}")
    else:
        d.reasons.append(f"nothing published ({obs.release_outcome}, {obs.fallback_type})")
    return d


def _published_rc(obs: CaseObservation) -> dict[str, str] | None:
    report = obs.report
    rc = report.get("root_cause") if report else None
    if isinstance(rc, dict):
        return {"component": str(rc.get("component")), "mechanism": str(rc.get("mechanism"))}
    return None


def _published_contributing(obs: CaseObservation) -> list[dict[str, str]]:
    report = obs.report
    causes = report.get("contributing_causes") if report else None
    return [
        {"component": str(c.get("component")), "mechanism": str(c.get("mechanism"))}
        for c in (causes if isinstance(causes, list) else [])
        if isinstance(c, dict)
    ]


def _name(cause: Mapping[str, str]) -> str:
    return f"{cause['component']}/{cause['mechanism']}"


def _red_herring(truth: GroundTruth, cause: Mapping[str, str]) -> str | None:
    """The red herring's description when `cause` names one."""
    for rh in truth.red_herrings:
        if (rh.component, rh.mechanism) == (cause["component"], cause["mechanism"]):
            return rh.description
    return None


def _points(gt: RootCause, cause: Mapping[str, str] | None) -> int:
    """Of 25: component (10) and mechanism (15) of a published cause against a ground-truth cause."""
    if cause is None:
        return 0
    return 10 * (cause["component"] in gt.components) + 15 * (cause["mechanism"] in gt.mechanisms)


def _assignment(
    truth: GroundTruth, published: Sequence[Mapping[str, str]]
) -> list[tuple[RootCause, Mapping[str, str] | None, int]]:
    """Each ground-truth cause with the published cause that counts for it and its points (of 25).

    Without contributing causes in the ground truth only the published root cause counts. With
    them, each published cause (the root cause, then the contributing ones) counts for at most one
    ground-truth cause, in the way that gives the most points (any order; ties keep the order).
    """
    causes = truth.causes
    if not causes:
        return []
    if not truth.contributing_causes:
        first = published[0] if published else None
        return [(causes[0], first, _points(causes[0], first))]
    best: tuple[int, int] | None = None
    chosen: tuple[int, ...] = ()
    # published[k] → the index of the ground-truth cause it counts for, or -1 (none).
    for assign in itertools.product(range(-1, len(causes)), repeat=len(published)):
        used = [g for g in assign if g >= 0]
        if len(used) != len(set(used)):
            continue
        key = (
            sum(_points(causes[g], published[k]) for k, g in enumerate(assign) if g >= 0),
            sum(1 for k, g in enumerate(assign) if g == k),
        )
        if best is None or key > best:
            best, chosen = key, assign
    by_cause = {g: published[k] for k, g in enumerate(chosen) if g >= 0}
    return [(c, by_cause.get(i), _points(c, by_cause.get(i))) for i, c in enumerate(causes)]


def _all_named(truth: GroundTruth, published: Sequence[Mapping[str, str]]) -> bool:
    found = _assignment(truth, published)
    return bool(found) and all(points == 25 for _, _, points in found)


def wrong_root_cause(truth: GroundTruth, obs: CaseObservation) -> str | None:
    """Why the published root cause is wrong (None when none is published or it is the right one).

    Wrong: any root cause (or contributing cause) on a no-fault control or where the expected
    outcome is not a published report; on a fault, a red herring as the root cause or as a
    contributing cause, or a root cause that is none of the ground truth's causes (its root
    cause, or one of its contributing causes when it has any).
    """
    rc = _published_rc(obs)
    extra = _published_contributing(obs)
    if rc is None and not extra:
        return None
    also = f" and contributing cause(s) {', '.join(_name(c) for c in extra)}" if extra else ""
    if not truth.fault:
        if rc is None:
            return f"no-fault control: published contributing cause(s) {', '.join(_name(c) for c in extra)}"
        return f"no-fault control: published root cause {_name(rc)}{also}"
    if truth.expected_outcome is not None and truth.expected_outcome.release_outcome != "PUBLISHED":
        named = _name(rc) if rc is not None else ", ".join(_name(c) for c in extra)
        return f"published root cause {named} where the expected outcome is {truth.expected_outcome.release_outcome}"
    if rc is not None and (why := _red_herring(truth, rc)) is not None:
        return f"published red herring {_name(rc)} ({why}) as the root cause"
    for c in extra:
        if (why := _red_herring(truth, c)) is not None:
            return f"published red herring {_name(c)} ({why}) as a contributing cause"
    if rc is None:
        return None
    for e in truth.effects:
        if (rc["component"], rc["mechanism"]) == (e.component, e.mechanism):
            return f"published {_name(rc)}, a symptom of the root cause (an effect in the ground truth), as the root cause"
    gt = truth.root_cause
    accepted = truth.causes if truth.contributing_causes else truth.causes[:1]
    if gt is None or not any(c.accepts(rc["component"], rc["mechanism"]) for c in accepted):
        want = " or ".join(c.label for c in accepted) if accepted else "none"
        return f"published root cause {_name(rc)}, expected {want}"
    return None


def _root_cause(truth: GroundTruth, obs: CaseObservation, expected_ok: bool | None) -> DimensionScore:
    d = DimensionScore(score=0, max=DIMENSIONS["root_cause"])
    rc = _published_rc(obs)
    extra = _published_contributing(obs)
    if truth.expected_outcome is not None and truth.expected_outcome.release_outcome == "FALLBACK":
        if expected_ok:
            d.score = d.max
            d.reasons.append("no root cause released: the expected outcome (the evidence cannot prove one)")
        else:
            d.reasons.append(
                "the run did not end in the expected fallback"
                + (f"; published {rc['component']}/{rc['mechanism']}" if rc else "")
            )
        return d
    if not truth.fault:
        if obs.published and rc is None and not extra:
            d.score = d.max
            d.reasons.append("no-fault control: published a report with no root cause")
        elif obs.published and rc is not None:
            d.reasons.append(f"no-fault control: named root cause {rc['component']}/{rc['mechanism']}")
        elif obs.published:
            d.reasons.append(f"no-fault control: named contributing cause(s) {', '.join(_name(c) for c in extra)}")
        else:
            d.reasons.append(f"no-fault control: nothing published ({obs.fallback_type})")
        return d
    gt = truth.root_cause
    if not obs.published:
        d.reasons.append(f"SAFE_FALLBACK ({obs.fallback_type}) on a real fault: no root cause delivered")
        return d
    if rc is None or gt is None:
        d.reasons.append("the published report names no root cause")
        return d
    for rh in truth.red_herrings:
        if (rh.component, rh.mechanism) == (rc["component"], rc["mechanism"]):
            d.reasons.append(
                f"named red herring {rh.component}/{rh.mechanism} ({rh.description}) as the root cause"
            )
            return d
    for c in extra:
        if (why := _red_herring(truth, c)) is not None:
            d.reasons.append(f"named red herring {_name(c)} ({why}) as a contributing cause")
            return d
    published = [rc, *extra]
    found = _assignment(truth, published)
    if not truth.contributing_causes:
        if rc["component"] in gt.components:
            d.score += 10
            d.reasons.append(f"component {rc['component']} correct")
        else:
            d.reasons.append(f"component {rc['component']}, expected {' or '.join(gt.components)}")
        if rc["mechanism"] in gt.mechanisms:
            d.score += 15
            d.reasons.append(f"mechanism {rc['mechanism']} correct")
        else:
            d.reasons.append(f"mechanism {rc['mechanism']}, expected {' or '.join(gt.mechanisms)}")
    else:
        share = d.max / len(found)
        of = f"{round(share, 2):g}"
        for i, (cause, got, points) in enumerate(found):
            what = "root cause" if i == 0 else "contributing cause"
            d.score += share * points / 25
            if got is None or points == 0:
                d.reasons.append(f"{what} {cause.label} not named (0/{of})")
                continue
            where = "as the root cause" if got is rc else "as a contributing cause"
            verdict = "named" if points == 25 else "component only" if points == 10 else "mechanism only"
            earned = f"{round(share * points / 25, 2):g}"
            d.reasons.append(f"{what} {cause.label}: {verdict} by {_name(got)} {where} ({earned}/{of})")
    counted = {id(got) for _, got, points in found if got is not None and points}
    unscored = [c for c in extra if id(c) not in counted]
    if unscored:
        d.reasons.append(
            f"contributing cause(s) {', '.join(_name(c) for c in unscored)}: not in the ground truth, not scored"
        )
    return d


def _evidence(
    truth: GroundTruth, obs: CaseObservation, expected_ok: bool | None, wrong: str | None = None
) -> tuple[DimensionScore, list[str], list[str]]:
    d = DimensionScore(score=0, max=DIMENSIONS["evidence"])
    if truth.expected_outcome is not None and truth.expected_outcome.release_outcome == "FALLBACK":
        if expected_ok:
            d.score = d.max
            d.reasons.append(
                "the guard withheld the draft as expected: nothing may be cited in released content"
            )
        else:
            d.reasons.append("the run did not end in the expected fallback")
        return d, [], []
    report = obs.report
    if report is None:
        d.reasons.append(
            "nothing published: required evidence counts only when cited by the published report"
        )
        return d, [], []
    matched = _matched_ids(truth, obs.cited_refs)
    req = [r.id for r in truth.required_evidence]
    share = len(matched) / len(req) if req else 1.0
    d.score += 14 * share
    if req:
        d.reasons.append(
            f"required evidence cited {len(matched)}/{len(req)}"
            + (
                f"; missing: {', '.join(r for r in req if r not in matched)}"
                if len(matched) < len(req)
                else ""
            )
        )
    else:
        d.reasons.append("no required evidence")
    done, missing = _ruled_out(truth, report, obs.cited_refs)
    alts = len(truth.alternatives) + len(truth.effects)
    if wrong is not None:
        d.reasons.append(f"alternatives ruled out earn nothing: the diagnosis is wrong ({wrong})")
        return d, matched, done
    d.score += 6 * (len(done) / alts if alts else 1.0)
    if alts:
        d.reasons.append(
            f"alternatives ruled out with evidence {len(done)}/{alts}"
            + (f"; not ruled out: {', '.join(missing)}" if missing else "")
        )
    else:
        d.reasons.append("no alternatives to rule out")
    return d, matched, done


def _process(obs: CaseObservation, wrong: str | None = None) -> DimensionScore:
    d = DimensionScore(score=0, max=DIMENSIONS["process"])
    draft = obs.draft or {}
    if draft.get("plan"):
        d.score += 3
        d.reasons.append(f"a plan of {len(draft['plan'])} step(s)")
    else:
        d.reasons.append("no plan")
    ready = [t for t in obs.tool_audit if t.status == "READY"]
    if any(t.tool == "lookup_knowledge" for t in ready):
        d.score += 3
        d.reasons.append("lookup_knowledge used")
    else:
        d.reasons.append("lookup_knowledge not used")
    runtime = sorted({t.tool for t in ready if t.tool in RUNTIME_TOOLS})
    if runtime:
        d.score += 3
        d.reasons.append(f"runtime tools used: {', '.join(runtime)}")
    else:
        d.reasons.append("no runtime tool used")
    hyps = [h for h in draft.get("hypotheses") or [] if isinstance(h, dict)]
    if len(hyps) >= 2:
        d.score += 3
        d.reasons.append(f"{len(hyps)} hypotheses")
    else:
        d.reasons.append(f"{len(hyps)} hypothesis(es): fewer than 2")
    decided = [h for h in hyps if h.get("status") in ("confirmed", "ruled_out")]
    if wrong is not None:
        d.reasons.append("differentiation earns nothing: the published root cause is wrong")
    elif len(hyps) >= 2 and decided:
        d.score += 3
        d.reasons.append(f"differentiated: {len(decided)} confirmed or ruled out")
    else:
        d.reasons.append("hypotheses not differentiated (none confirmed or ruled out)")
    return d


def _recovery(truth: GroundTruth, obs: CaseObservation, wrong: str | None = None) -> DimensionScore:
    d = DimensionScore(score=0, max=DIMENSIONS["recovery"])
    if wrong is not None:
        d.reasons.append(f"recovery earns nothing for a wrong diagnosis ({wrong})")
        return d
    report = obs.report
    actions = [r for r in (report.get("recovery") or [] if report else []) if isinstance(r, dict)]
    real = [r for r in actions if r.get("action") != "no_action"]
    rec = truth.recovery
    expects_none = (
        (not truth.fault)
        or rec.contract == "none"
        or (truth.expected_outcome is not None and truth.expected_outcome.release_outcome == "FALLBACK")
    )
    if expects_none:
        if not real:
            d.score = d.max
            d.reasons.append("nothing to recover and no recovery released")
        else:
            d.score = 5
            d.reasons.append(
                f"recovery released where none is called for: {', '.join(str(r.get('action')) for r in real)}"
            )
        return d
    names = [str(r.get("action")) for r in actions]
    if not rec.acceptable or any(a in rec.acceptable for a in names):
        d.score += 5
        d.reasons.append(
            f"acceptable action proposed ({', '.join(a for a in names if a in rec.acceptable) or 'none required'})"
        )
    else:
        d.reasons.append(
            f"no acceptable action released (acceptable: {', '.join(rec.acceptable)}; released: {', '.join(names) or 'none'})"
        )
    bad = [a for a in names if a in rec.forbidden]
    if bad:
        d.reasons.append(f"forbidden action(s) proposed: {', '.join(bad)}")
    else:
        d.score += 4
        d.reasons.append("no forbidden action")
    unapproved = [
        str(r.get("action"))
        for r in actions
        if _needs_approval(truth, str(r.get("action"))) and not r.get("requires_approval")
    ]
    if unapproved:
        d.reasons.append(f"approval missing for: {', '.join(unapproved)}")
    else:
        d.score += 3
        d.reasons.append("approval requested wherever required")
    need_verify = rec.verification_required or rec.contract == "executed_recovery"
    unverified = [str(r.get("action")) for r in real if not str(r.get("verification") or "").strip()]
    if not need_verify:
        d.score += 3
        d.reasons.append("no verification required")
    elif real and not unverified:
        d.score += 3
        d.reasons.append("every proposed action has a verification step")
    else:
        d.reasons.append(
            "verification step missing"
            + (f" for: {', '.join(unverified)}" if unverified else " (no action proposed)")
        )
    return d


def _efficiency(obs: CaseObservation) -> DimensionScore:
    d = DimensionScore(score=0, max=DIMENSIONS["efficiency"])
    executed = [t for t in obs.tool_audit if t.status != "REJECTED"]
    if len(executed) <= obs.tool_call_budget:
        d.score += 2
        d.reasons.append(f"{len(executed)} executed tool call(s) within the budget of {obs.tool_call_budget}")
    else:
        d.reasons.append(f"{len(executed)} executed tool calls over the budget of {obs.tool_call_budget}")
    dup = sum(1 for t in obs.tool_audit if t.code == "DUPLICATE_SCOPE")
    if dup:
        d.reasons.append(f"{dup} DUPLICATE_SCOPE refusal(s)")
    else:
        d.score += 2
        d.reasons.append("no duplicate scope")
    failed = sum(1 for t in obs.tool_audit if t.status in ("FAILED", "TIMED_OUT"))
    if failed <= 1:
        d.score += 1
        d.reasons.append(f"{failed} failed or timed-out call(s)")
    else:
        d.reasons.append(f"retry storm: {failed} failed or timed-out calls")
    return d


# ---------------------------------------------------------------------------------------------
# The case verdict
# ---------------------------------------------------------------------------------------------


def _not_named(truth: GroundTruth, rc: dict[str, str] | None, extra: list[dict[str, str]]) -> str:
    """Why a published diagnosis misses the ground truth's causes (not wrong, but not right)."""
    gt = truth.root_cause
    if rc is None or gt is None:
        return f"published {_name(rc) if rc else 'no root cause'}, expected {gt.label if gt else '?'}"
    if not truth.contributing_causes:
        return f"published {_name(rc)}, expected {gt.label}"
    found = _assignment(truth, [rc, *extra])
    missing = [c.label for c, _, points in found if points < 25]
    return f"named {len(found) - len(missing)} of {len(found)} causes; not named: {', '.join(missing)}"


def score_case(truth: GroundTruth, obs: CaseObservation) -> CaseScore:
    """Score one case: dimensions with reasons, hard gates, pass, failure class and trust flags."""
    if obs.error is not None:
        dims = {
            k: DimensionScore(score=0, max=m, reasons=["worker failed: " + obs.error])
            for k, m in DIMENSIONS.items()
        }
        gates = [g for g, _ in hard_gates(truth, obs)]
        return CaseScore(
            scenario_id=obs.scenario_id,
            score=0.0,
            passed=False,
            dimensions=dims,
            hard_gates=sorted(set(gates)),
            gate_reasons=[],
            failure_class="infra_error",
            failure_reasons=[obs.error],
            root_cause=None,
            false_confident=False,
        )
    expected_ok: bool | None = None
    expected_why: list[str] = []
    if truth.expected_outcome is not None:
        expected_ok, expected_why = _expected_match(truth, obs)
    wrong = wrong_root_cause(truth, obs)
    ev, matched, ruled = _evidence(truth, obs, expected_ok, wrong)
    dims = {
        "result": _result(truth, obs),
        "root_cause": _root_cause(truth, obs, expected_ok),
        "evidence": ev,
        "process": _process(obs, wrong),
        "recovery": _recovery(truth, obs, wrong),
        "efficiency": _efficiency(obs),
    }
    total = round(sum(d.score for d in dims.values()), 2)
    if wrong is not None:
        total = min(total, WRONG_ROOT_CAUSE_CAP)
    gates_found = hard_gates(truth, obs)
    gates = sorted({g for g, _ in gates_found})
    rc = _published_rc(obs)
    extra = _published_contributing(obs)

    fails: list[tuple[str, str]] = []  # (class, reason), most decisive first
    if gates:
        fails.append(("hard_gate", "hard gate(s): " + "; ".join(r for _, r in gates_found)))
    if truth.expected_outcome is not None:
        if not expected_ok:
            fails.append(("expected_outcome_mismatch", "; ".join(expected_why)))
    elif not truth.fault:
        if not obs.published:
            fails.append(("fallback", f"no-fault control ended in {obs.release_outcome} {obs.fallback_type}"))
        elif wrong is not None:
            fails.append(("wrong_root_cause", wrong))
    else:
        gt = truth.root_cause
        if not obs.published:
            fails.append(
                (
                    "fallback",
                    f"{obs.release_outcome} {obs.fallback_type}"
                    + (f" (guard codes {obs.guard_codes})" if obs.guard_codes else ""),
                )
            )
        elif wrong is not None:
            fails.append(("wrong_root_cause", wrong))
        elif rc is None or gt is None or not _all_named(truth, [rc, *extra]):
            fails.append(("wrong_root_cause", _not_named(truth, rc, extra)))
        missing = [r.id for r in truth.required_evidence if r.id not in matched]
        if obs.published and missing:
            fails.append(
                (
                    "missing_evidence",
                    f"required evidence not cited by the published report: {', '.join(missing)}",
                )
            )
    if wrong is not None and not any(
        c in ("wrong_root_cause", "expected_outcome_mismatch") for c, _ in fails
    ):
        fails.append(("wrong_root_cause", wrong))
    if total < PASS_THRESHOLD:
        fails.append(("low_score", f"score {total} < {PASS_THRESHOLD:g}"))

    false_confident = wrong is not None
    return CaseScore(
        scenario_id=obs.scenario_id,
        score=total,
        passed=not fails,
        dimensions=dims,
        hard_gates=gates,
        gate_reasons=[r for _, r in gates_found],
        failure_class=fails[0][0] if fails else None,
        failure_reasons=[r for _, r in fails],
        root_cause=rc,
        false_confident=false_confident,
        contributing_causes=extra,
        evidence_matched=matched,
        alternatives_ruled_out=ruled,
    )
