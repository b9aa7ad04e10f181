"""DiagnosisDraft (`diagnosis_draft_v1`): what the agent writes; not a report until released.

Its JSON schema (taxonomy values as enums) is what a model is shown.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rootproof.taxonomy import Component, Mechanism, RecoveryAction, Risk

__all__ = [
    "ANSWER_VERSION",
    "MAX_CITATIONS_PER_CLAIM",
    "MAX_CLAIMS",
    "MAX_DRAFT_BYTES",
    "Citation",
    "Claim",
    "DiagnosisDraft",
    "Hypothesis",
    "PlanStep",
    "RecoveryProposal",
    "RootCause",
    "draft_json_schema",
    "parse_draft",
]

ANSWER_VERSION = "diagnosis_draft_v1"
MAX_CLAIMS = 12
MAX_CITATIONS_PER_CLAIM = 8
MAX_DRAFT_BYTES = 64 * 1024


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Citation(_Model):
    """A pointer at one evidence ref of one invocation of this run."""

    invocation_id: str = Field(description="Invocation id from an observation of this run.", max_length=64)
    tool_name: str = Field(description="The tool of that invocation.", max_length=64)
    raw_path: str = Field(description="One of the invocation's evidence ref paths, e.g. $.entries[0].", max_length=256)
    excerpt: str = Field(description="Verbatim text from that ref (a substring of it).", max_length=4000)


class Claim(_Model):
    """One statement, written in the user's language, with its citations."""

    id: str = Field(description="Claim id, e.g. c1.", max_length=32)
    text: str = Field(description="The statement.", max_length=2000)
    kind: Literal["finding", "root_cause", "negative_observation"] = Field(
        description="negative_observation cites only $.no_evidence and means only 'this query found no match'."
    )
    citations: list[Citation] = Field(default_factory=list, max_length=MAX_CITATIONS_PER_CLAIM)


class RootCause(_Model):
    """The root cause, from the taxonomy."""

    component: Component
    mechanism: Mechanism
    culprit: str = Field(default="", description="What exactly (session, pid, host, config line).", max_length=500)
    claim_ids: list[str] = Field(default_factory=list, description="Claims that establish it (kind root_cause).")


class Hypothesis(_Model):
    """A candidate explanation and its status."""

    statement: str = Field(max_length=1000)
    component: Component
    mechanism: Mechanism
    status: Literal["confirmed", "ruled_out", "open"]
    claim_ids: list[str] = Field(default_factory=list)


class PlanStep(_Model):
    """One step of the investigation plan."""

    step: int = Field(ge=0)
    hypothesis: str = Field(default="", max_length=200)
    tool: str = Field(default="", max_length=64)
    why: str = Field(default="", max_length=500)


class RecoveryProposal(_Model):
    """A proposed recovery action (never executed by the agent)."""

    action: RecoveryAction
    target: str = Field(default="", max_length=300)
    risk: Risk
    requires_approval: bool
    verification: str = Field(default="", description="How to verify the recovery worked.", max_length=500)


class DiagnosisDraft(_Model):
    """The agent's draft diagnosis."""

    answer_version: Literal["diagnosis_draft_v1"] = "diagnosis_draft_v1"
    summary: str = Field(max_length=4000)
    root_cause: RootCause | None = None
    claims: list[Claim] = Field(default_factory=list, max_length=MAX_CLAIMS)
    hypotheses: list[Hypothesis] = Field(default_factory=list, max_length=20)
    plan: list[PlanStep] = Field(default_factory=list, max_length=30)
    recovery: list[RecoveryProposal] = Field(default_factory=list, max_length=10)
    limitations: list[str] = Field(default_factory=list, max_length=20)
    next_steps: list[str] = Field(default_factory=list, max_length=20)


def draft_json_schema() -> dict[str, Any]:
    """The JSON schema a model is shown."""
    return DiagnosisDraft.model_json_schema()


def canonical_size(data: Any) -> int:
    """Bytes of `data` as canonical JSON."""
    return len(json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())


def parse_draft(raw: dict[str, Any] | str) -> tuple[DiagnosisDraft | None, str | None]:
    """Parse a submitted draft; return (draft, None) or (None, what is wrong)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            return None, f"draft is not valid JSON: {exc.msg} at position {exc.pos}"
    if not isinstance(raw, dict):
        return None, "draft must be a JSON object"
    if canonical_size(raw) > MAX_DRAFT_BYTES:
        return None, f"draft is larger than {MAX_DRAFT_BYTES} bytes as canonical JSON"
    try:
        return DiagnosisDraft.model_validate(raw), None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        return None, f"draft does not match diagnosis_draft_v1: {problems}"
