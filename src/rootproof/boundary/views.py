"""The views of one canonical invocation: control view, model observation, durable audit."""

from __future__ import annotations

import json
from typing import Any

from rootproof.backends.query import parse_query
from rootproof.boundary.store import CanonicalInvocation, InvocationStatus
from rootproof.diagnosis.findings import finding_refs
from rootproof.run.records import InvocationRecord
from rootproof.tools.refs import canonical_json

__all__ = ["audit_record", "control_view", "model_observation"]

PREVIEW_CAP = 1000
FINDINGS_SHARE = 0.4
"""The most of an observation's byte budget its findings take."""
OMIT_HINT = "narrow the query (service, level, since, terms)"


def control_view(inv: CanonicalInvocation) -> dict[str, Any]:
    """For the loop, events and metrics: status, evidence status and count, scope, bytes, source."""
    return {
        "invocation_id": inv.invocation_id,
        "tool": inv.tool_name,
        "step_index": inv.step_index,
        "status": str(inv.status),
        "code": inv.refusal_code,
        "evidence_status": inv.evidence_status,
        "evidence_count": sum(1 for r in inv.evidence_refs if r.raw_path != "$.no_evidence"),
        "scope_key": inv.scope_key,
        "result_bytes": inv.result_bytes,
        "data_source": inv.data_source,
        "duration_ms": inv.duration_ms,
    }


def model_observation(inv: CanonicalInvocation, budget_bytes: int) -> dict[str, Any]:
    """What the agent reads: the analyzers' findings, then whole refs in result order until the
    byte budget (the refs the findings name always among them); then `omitted`.
    A call that did not run shows its status, code and message only."""
    if inv.status is not InvocationStatus.READY:
        # No invocation id: nothing of a call that did not run can be cited, and a model shown
        # the id of its refused call cites it (seen with a 1.5B local model).
        return {
            "tool": inv.tool_name,
            "status": str(inv.status),
            "code": inv.refusal_code,
            "message": inv.message,
        }
    obs: dict[str, Any] = {
        "invocation_id": inv.invocation_id,
        "tool": inv.tool_name,
        "status": str(inv.status),
        "evidence_status": inv.evidence_status,
        "data_source": inv.data_source,
    }
    if inv.result is not None:
        for key in ("window", "total_matches", "kind"):
            if key in inv.result:
                obs[key] = inv.result[key]
    if inv.message:
        obs["message"] = inv.message
    # What the analyzers found in the whole result (never citable: the refs they name are, and
    # those are shown first), within a share of the budget.
    findings: list[dict[str, Any]] = []
    for f in inv.details.get("findings") or []:
        if len(canonical_json([*findings, f]).encode()) > budget_bytes * FINDINGS_SHARE:
            break
        findings.append(f)
    if findings:
        obs["findings"] = findings
    refs: list[dict[str, Any]] = []
    obs["refs"] = refs
    # Reserve room for the `omitted`/`hint` fields so the whole observation stays within budget.
    size = len(canonical_json(obs).encode()) + len(OMIT_HINT) + 40
    omitted = 0
    shown = _shown_first(inv)
    # The refs the findings name are always shown (their room is kept), the others in order
    # while the budget lasts.
    named = set(finding_refs(findings))
    costs = [len(canonical_json(r.as_dict()).encode()) + 1 for r in shown]
    reserved = sum(c for r, c in zip(shown, costs, strict=True) if r.raw_path in named)
    for ref, cost in zip(shown, costs, strict=True):
        if ref.raw_path in named:
            reserved -= cost
        elif size + cost + reserved > budget_bytes:
            omitted += 1
            continue
        refs.append(ref.as_dict())
        size += cost
    if omitted:
        obs["omitted"] = omitted
        obs["hint"] = OMIT_HINT
    return obs


def _shown_first(inv: CanonicalInvocation) -> list[Any]:
    """The refs in the order the agent reads them: result order, except for a config returned whole
    (its line numbers are its refs, so the backend never filters it): there the lines the query
    names come first, so a long file's matching lines are read rather than omitted."""
    refs = list(inv.evidence_refs)
    query = inv.arguments.get("query") if isinstance(inv.arguments, dict) else None
    if not query or not isinstance(query, str) or not inv.result or inv.result.get("kind") != "config":
        return refs
    q = parse_query(query)
    if q.empty:
        return refs
    return sorted(refs, key=lambda r: q.score(r.text) == 0)


def audit_record(inv: CanonicalInvocation, observation: dict[str, Any]) -> InvocationRecord:
    """The durable `tool_invocation` row: metadata, bounded preview and the refs; never the payload."""
    preview = json.dumps(observation, ensure_ascii=False)[:PREVIEW_CAP]
    details = dict(inv.details)
    return InvocationRecord(
        invocation_id=inv.invocation_id,
        run_id=inv.run_id,
        session_id=inv.session_id,
        step_index=inv.step_index,
        tool_name=inv.tool_name,
        input_params=inv.arguments if isinstance(inv.arguments, dict) else {"_raw": inv.arguments[:PREVIEW_CAP]},
        scope_key=inv.scope_key,
        status=str(inv.status),
        refusal_code=inv.refusal_code,
        message=inv.message,
        evidence_status=inv.evidence_status,
        data_source=inv.data_source,
        evidence_refs=[r.as_dict() for r in inv.evidence_refs],
        output_preview=preview,
        retrieval_layer=details.get("layer"),
        l0_match_count=details.get("l0_match_count"),
        l1_match_count=details.get("l1_match_count"),
        retrieval_details=details or None,
        relevance_level=details.get("relevance_level"),
        dedup_reason=details.get("dedup_reason"),
        duration_ms=inv.duration_ms,
        result_bytes=inv.result_bytes,
        success=inv.status is InvocationStatus.READY,
        error_message=inv.message if inv.status in (InvocationStatus.FAILED, InvocationStatus.TIMED_OUT) else None,
    )
