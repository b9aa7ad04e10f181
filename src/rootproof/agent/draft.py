"""DiagnosisDraft (`diagnosis_draft_v1`): what the agent writes; not a report until released.

Its JSON schema (taxonomy values as enums) is what a model is shown. The enums come from the
run's `Taxonomy` (the built-in one plus the namespaced labels its knowledge cards declare), and
`parse_draft` checks the labels against the same taxonomy. Without one, a label must be
built-in or well-formed namespaced (`acme.ledger_lock_wait`).
"""

from __future__ import annotations

import copy
import json
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)

from rootproof.taxonomy import BUILTIN_TAXONOMY, LabelKind, Risk, Taxonomy, is_namespaced

__all__ = [
    "ANSWER_VERSION",
    "MAX_CITATIONS_PER_CLAIM",
    "MAX_CLAIMS",
    "MAX_CONTRIBUTING_CAUSES",
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
MAX_CONTRIBUTING_CAUSES = 3
MAX_DRAFT_BYTES = 64 * 1024


def _label(kind: LabelKind) -> AfterValidator:
    """Checks a label against the taxonomy in the validation context (`{"taxonomy": ...}`)."""

    def check(value: str, info: ValidationInfo) -> str:
        taxonomy = info.context.get("taxonomy") if isinstance(info.context, dict) else None
        if isinstance(taxonomy, Taxonomy):
            wrong = taxonomy.unknown(kind, value)
        elif is_namespaced(value):
            wrong = None
        else:
            wrong = BUILTIN_TAXONOMY.unknown(kind, value)
        if wrong:
            raise ValueError(wrong)
        return value

    return AfterValidator(check)


def _enum(kind: LabelKind, title: str) -> WithJsonSchema:
    return WithJsonSchema({"enum": list(BUILTIN_TAXONOMY.values(kind)), "title": title, "type": "string"})


ComponentLabel = Annotated[str, _label("component"), _enum("component", "Component")]
"""A taxonomy component of the run (schema: the built-in enum, widened by `draft_json_schema`)."""
MechanismLabel = Annotated[str, _label("mechanism"), _enum("mechanism", "Mechanism")]
"""A taxonomy mechanism of the run."""
ActionLabel = Annotated[str, _label("recovery action"), _enum("recovery action", "Action")]
"""A taxonomy recovery action of the run."""

# Where the schema carries each kind of label: ($defs model, property).
_ENUM_SITES: tuple[tuple[str, str, LabelKind], ...] = (
    ("RootCause", "component", "component"),
    ("RootCause", "mechanism", "mechanism"),
    ("Hypothesis", "component", "component"),
    ("Hypothesis", "mechanism", "mechanism"),
    ("RecoveryProposal", "action", "recovery action"),
)


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
    """The root cause (or a contributing cause), from the taxonomy."""

    component: ComponentLabel
    mechanism: MechanismLabel
    culprit: str = Field(default="", description="What exactly (session, pid, host, config line).", max_length=500)
    claim_ids: list[str] = Field(default_factory=list, description="Claims that establish it (kind root_cause).")


class Hypothesis(_Model):
    """A candidate explanation and its status."""

    statement: str = Field(max_length=1000)
    component: ComponentLabel
    mechanism: MechanismLabel
    status: Literal["confirmed", "ruled_out", "explained", "open"]
    claim_ids: list[str] = Field(default_factory=list)


class PlanStep(_Model):
    """One step of the investigation plan."""

    step: int = Field(ge=0)
    hypothesis: str = Field(default="", max_length=200)
    tool: str = Field(default="", max_length=64)
    why: str = Field(default="", max_length=500)


class RecoveryProposal(_Model):
    """A proposed recovery action (never executed by the agent)."""

    action: ActionLabel
    target: str = Field(default="", max_length=300)
    risk: Risk
    requires_approval: bool
    verification: str = Field(default="", description="How to verify the recovery worked.", max_length=500)


class DiagnosisDraft(_Model):
    """The agent's draft diagnosis."""

    answer_version: Literal["diagnosis_draft_v1"] = "diagnosis_draft_v1"
    summary: str = Field(max_length=4000)
    root_cause: RootCause | None = None
    contributing_causes: list[RootCause] = Field(
        default_factory=list,
        max_length=MAX_CONTRIBUTING_CAUSES,
        description="Further independent causes of a compositional incident, each proven like the root cause; only with a root_cause.",
    )
    claims: list[Claim] = Field(default_factory=list, max_length=MAX_CLAIMS)
    hypotheses: list[Hypothesis] = Field(default_factory=list, max_length=20)
    plan: list[PlanStep] = Field(default_factory=list, max_length=30)
    recovery: list[RecoveryProposal] = Field(default_factory=list, max_length=10)
    limitations: list[str] = Field(default_factory=list, max_length=20)
    next_steps: list[str] = Field(default_factory=list, max_length=20)

    @model_validator(mode="after")
    def _causes_distinct(self) -> DiagnosisDraft:
        if self.contributing_causes and self.root_cause is None:
            raise ValueError("contributing_causes need a root_cause (leave them empty without one)")
        seen = [(self.root_cause.component, self.root_cause.mechanism)] if self.root_cause else []
        for i, cause in enumerate(self.contributing_causes):
            pair = (cause.component, cause.mechanism)
            if pair in seen:
                what = "the root cause" if seen.index(pair) == 0 else f"contributing_causes[{seen.index(pair) - 1}]"
                raise ValueError(f"contributing_causes[{i}] repeats {what} ({pair[0]}/{pair[1]})")
            seen.append(pair)
        return self

    def causes(self) -> list[RootCause]:
        """The root cause and the contributing causes (empty without a root cause)."""
        return [self.root_cause, *self.contributing_causes] if self.root_cause is not None else []


_BASE_SCHEMA = DiagnosisDraft.model_json_schema()


def draft_json_schema(taxonomy: Taxonomy | None = None) -> dict[str, Any]:
    """The JSON schema a model is shown; its label enums are those of `taxonomy` (default: built-in)."""
    schema = copy.deepcopy(_BASE_SCHEMA)
    if taxonomy is not None:
        for model, prop, kind in _ENUM_SITES:
            schema["$defs"][model]["properties"][prop]["enum"] = list(taxonomy.values(kind))
    return schema


def canonical_size(data: Any) -> int:
    """Bytes of `data` as canonical JSON."""
    return len(json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())


def parse_draft(raw: dict[str, Any] | str, taxonomy: Taxonomy | None = None) -> tuple[DiagnosisDraft | None, str | None]:
    """Parse a submitted draft; return (draft, None) or (None, what is wrong).

    With `taxonomy` (the run's), every label must be one of it; without, built-in or namespaced.
    """
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            return None, f"draft is not valid JSON: {exc.msg} at position {exc.pos}"
        except (ValueError, RecursionError):  # a number of thousands of digits, arrays nested thousands deep
            return None, "draft is not usable JSON: a number too long or nesting too deep"
    if not isinstance(raw, dict):
        return None, "draft must be a JSON object"
    if canonical_size(raw) > MAX_DRAFT_BYTES:
        return None, f"draft is larger than {MAX_DRAFT_BYTES} bytes as canonical JSON"
    try:
        return DiagnosisDraft.model_validate(raw, context={"taxonomy": taxonomy}), None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else str(e["msg"]) for e in exc.errors()[:5]
        )
        return None, f"draft does not match diagnosis_draft_v1: {problems}"
