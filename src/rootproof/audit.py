"""`rootproof audit`: re-verify published runs from the trace store alone.

Independent of the release path: it does not use the EvidenceGuard or the canonical store.
It reads what the user received (`diagnosis_run.content`) and the durable `tool_invocation`
rows, and checks every citation of a published report against them: the invocation belongs
to the run and was READY, the tool matches, the path is one of the recorded refs, the excerpt
is contained in the recorded ref text (NFKC + whitespace), `$.no_evidence` backs only
negative observations, and a root cause (and each contributing cause) rests on runtime data
that is neither mock nor instruction-like.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rootproof.tools.refs import normalize_text as _norm

__all__ = ["AuditFinding", "audit_run"]


@dataclass(kw_only=True)
class AuditFinding:
    """The audit of one run."""

    run_id: str
    release_outcome: str | None
    checked_citations: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No problem found."""
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {"run_id": self.run_id, "release_outcome": self.release_outcome, "ok": self.ok, "checked_citations": self.checked_citations, "problems": self.problems}


def audit_run(trace: dict[str, Any]) -> AuditFinding:
    """Audit one run's trace (as `SqlTraceStore.trace` returns it)."""
    run = trace["run"]
    finding = AuditFinding(run_id=run["run_id"], release_outcome=run.get("release_outcome"))
    content = run.get("content") or {}
    if run.get("release_outcome") != "PUBLISHED" or content.get("content_type") not in ("DIAGNOSIS_REPORT", "KNOWLEDGE_ANSWER"):
        return finding
    report = content.get("report") or content.get("answer") or {}
    invocations = {i["invocation_id"]: i for i in trace["invocations"]}
    claims = report.get("claims") or []
    rc = report.get("root_cause")
    rc_ids = set(rc.get("claim_ids", [])) if rc else set()
    rc_sources: list[tuple[str, bool]] = []
    contributing = [c for c in report.get("contributing_causes") or [] if isinstance(c, dict)]
    sources_of: dict[str, list[tuple[str, bool]]] = {}  # claim id → its refs' (data source, flagged)
    for claim in claims:
        cid = claim.get("id")
        if not claim.get("citations"):
            finding.problems.append(f"{cid}: claim without citation")
        for cit in claim.get("citations", []):
            finding.checked_citations += 1
            inv = invocations.get(cit.get("invocation_id"))
            where = f"{cid}: {cit.get('invocation_id')} {cit.get('raw_path')}"
            if inv is None:
                finding.problems.append(f"{where}: no such invocation in this run")
                continue
            if inv["status"] != "READY":
                finding.problems.append(f"{where}: invocation status {inv['status']}")
                continue
            if inv["tool_name"] != cit.get("tool_name"):
                finding.problems.append(f"{where}: tool {cit.get('tool_name')} but the invocation ran {inv['tool_name']}")
            ref = next((r for r in inv.get("evidence_refs") or [] if r.get("raw_path") == cit.get("raw_path")), None)
            if ref is None:
                finding.problems.append(f"{where}: path not among the recorded refs")
                continue
            excerpt = _norm(str(cit.get("excerpt", "")))
            if not excerpt or excerpt not in _norm(str(ref.get("text", ""))):
                finding.problems.append(f"{where}: excerpt not in the recorded ref text")
            negative = claim.get("kind") == "negative_observation"
            if negative != (cit.get("raw_path") == "$.no_evidence"):
                finding.problems.append(f"{where}: $.no_evidence must back negative observations and only them")
            source = (str(ref.get("data_source")), bool(ref.get("instruction_like")))
            sources_of.setdefault(str(cid), []).append(source)
            if cid in rc_ids or claim.get("kind") == "root_cause":
                rc_sources.append(source)
    if rc and content.get("content_type") == "DIAGNOSIS_REPORT":
        if not any(src not in ("knowledge", "mock") and not flagged for src, flagged in rc_sources):
            finding.problems.append("root cause rests on no runtime, non-mock, non-injected evidence")
        for i, cause in enumerate(contributing):
            cited = [x for cid in cause.get("claim_ids") or [] for x in sources_of.get(str(cid), [])]
            if not any(src not in ("knowledge", "mock") and not flagged for src, flagged in cited):
                finding.problems.append(
                    f"contributing_causes[{i}] rests on no runtime, non-mock, non-injected evidence"
                )
    return finding
