"""What a run leaves behind: records for the trace store, and the sink protocol that stores them.

Core code writes records through `TraceSink`; the SQLAlchemy store implements it (core never
imports SQLAlchemy). `MemoryTraceSink` keeps them in memory for tests and benchmarks.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "EvalCaseRecord",
    "EvalRunRecord",
    "EventRecord",
    "InvocationRecord",
    "MemoryTraceSink",
    "ReasoningAuditRecord",
    "RunRecord",
    "StepRecord",
    "TraceReader",
    "TraceSink",
    "utcnow",
]

REASONING_FIELD_CAP = 32_000
SUMMARY_CAP = 2_000


def utcnow() -> datetime:
    """Timezone-aware UTC now."""
    return datetime.now(UTC)


@dataclass(kw_only=True)
class RunRecord:
    """One `diagnosis_run` row: what ran, what it cost, where it stopped, what the user got."""

    run_id: str
    session_id: str
    question: str
    language: str = "en"
    route: str | None = None
    model: str | None = None
    scenario_id: str | None = None
    principal: str = "cli"
    lifecycle_state: str = "CREATED"
    status: str | None = None
    """SUCCESS for COMPLETED, else the terminal state's name; None while running."""
    release_outcome: str | None = None
    """PUBLISHED | FALLBACK | NONE."""
    fallback_type: str | None = None
    conclusion: dict[str, Any] | None = None
    """The published root cause {component, mechanism, culprit} (with `contributing_causes`, a list
    of the same, when the report names any), or None."""
    content: dict[str, Any] | None = None
    """Exactly what the user received."""
    prompt_audit: dict[str, Any] | None = None
    alert: dict[str, Any] | None = None
    """The input alert payload, normalised (alert mode only)."""
    targets_checksum: str | None = None
    """`sha256:<hex>` of the targets file a live run read (live runs only; never its secrets)."""
    self_evaluation: dict[str, Any] | None = None
    """{rule_set_version, evidence_guard, semantic_guard, tool_trace_summary, aiops_rule_evaluation}."""
    budget_usage: dict[str, Any] | None = None
    tokens: int = 0
    error: str | None = None
    started_at: datetime = field(default_factory=utcnow)
    deadline_at: datetime | None = None
    ended_at: datetime | None = None
    duration_ms: int | None = None


@dataclass(kw_only=True)
class StepRecord:
    """One `agent_step` row: bounded summaries, never whole prompts."""

    run_id: str
    session_id: str
    step_index: int
    agent_name: str = "diagnosis_agent"
    model_input: str = ""
    model_output: str = ""
    has_text: bool = False
    has_tool_call: bool = False
    duration_ms: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    created_at: datetime = field(default_factory=utcnow)


@dataclass(kw_only=True)
class InvocationRecord:
    """One `tool_invocation` row: metadata, bounded preview, evidence refs; never the whole payload."""

    invocation_id: str
    run_id: str
    session_id: str
    step_index: int
    tool_name: str
    input_params: dict[str, Any]
    scope_key: str | None
    status: str
    refusal_code: str | None = None
    message: str | None = None
    evidence_status: str | None = None
    data_source: str | None = None
    evidence_refs: list[dict[str, Any]] = field(default_factory=list)
    output_preview: str = ""
    retrieval_layer: str | None = None
    l0_match_count: int | None = None
    l1_match_count: int | None = None
    retrieval_details: dict[str, Any] | None = None
    relevance_level: str | None = None
    dedup_reason: str | None = None
    duration_ms: int = 0
    result_bytes: int = 0
    success: bool = False
    error_message: str | None = None
    created_at: datetime = field(default_factory=utcnow)


@dataclass(kw_only=True)
class ReasoningAuditRecord:
    """One `agent_reasoning_audit` row, a row per model step; never invented."""

    run_id: str
    session_id: str
    step_index: int
    agent_name: str = "diagnosis_agent"
    reasoning_available: bool = False
    reasoning_content: str | None = None
    assistant_text: str | None = None
    content_source: str = "NONE"
    content_bytes: int = 0
    created_at: datetime = field(default_factory=utcnow)

    @classmethod
    def build(
        cls,
        *,
        run_id: str,
        session_id: str,
        step_index: int,
        reasoning: str | None,
        assistant_text: str | None,
        tool_call_plan: str | None = None,
        agent_name: str = "diagnosis_agent",
    ) -> ReasoningAuditRecord:
        """Apply the audit rules: 32 000-character cap per field, content_source, content_bytes."""
        reasoning = reasoning[:REASONING_FIELD_CAP] if reasoning else None
        text = assistant_text or ""
        if tool_call_plan:
            text = (text + "\n" if text else "") + "tool_calls: " + tool_call_plan
        text_out = text[:REASONING_FIELD_CAP] if text else None
        if reasoning and assistant_text:
            source = "PROVIDER_REASONING+ASSISTANT_TEXT"
        elif reasoning:
            source = "PROVIDER_REASONING"
        elif assistant_text:
            source = "ASSISTANT_TEXT"
        elif tool_call_plan:
            source = "TOOL_CALL_PLAN"
        else:
            source = "NONE"
        nbytes = len((reasoning or "").encode()) + len((text_out or "").encode())
        return cls(
            run_id=run_id,
            session_id=session_id,
            step_index=step_index,
            agent_name=agent_name,
            reasoning_available=bool(reasoning),
            reasoning_content=reasoning,
            assistant_text=text_out,
            content_source=source,
            content_bytes=nbytes,
        )


@dataclass(kw_only=True)
class EventRecord:
    """One `run_event` row: the public stream, per-run sequence."""

    run_id: str
    seq: int
    type: str
    data: dict[str, Any]
    created_at: datetime = field(default_factory=utcnow)


@dataclass(kw_only=True)
class EvalRunRecord:
    """One `eval_run` row: created → running → passed | failed | infra_invalid | cancelled."""

    eval_id: str
    kind: str
    state: str = "created"
    git_sha: str | None = None
    suite_version: str | None = None
    model: str | None = None
    settings: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    started_at: datetime = field(default_factory=utcnow)
    ended_at: datetime | None = None


@dataclass(kw_only=True)
class EvalCaseRecord:
    """One `eval_case_result` row."""

    eval_id: str
    case_id: str
    run_id: str | None
    passed: bool
    score: float
    outcome: str | None = None
    failure_class: str | None = None
    dimensions: dict[str, Any] | None = None
    hard_gates: list[str] = field(default_factory=list)
    tool_audit: list[dict[str, Any]] | None = None
    duration_ms: int = 0


class TraceSink(Protocol):
    """Where a run's records go. Implementations must be thread-safe."""

    def save_run(self, record: RunRecord) -> None:
        """Insert or update the run row."""

    def add_step(self, record: StepRecord) -> None:
        """Append an agent step."""

    def add_invocation(self, record: InvocationRecord) -> None:
        """Append a tool invocation."""

    def add_reasoning(self, record: ReasoningAuditRecord) -> None:
        """Append a reasoning audit row."""

    def add_event(self, record: EventRecord) -> None:
        """Append a public event."""


@runtime_checkable
class TraceReader(Protocol):
    """The read side of a trace store (`trace`, `audit`)."""

    def trace(self, run_id: str) -> dict[str, Any] | None:
        """Everything recorded for one run, as plain data (None or `run: None` if unknown)."""

    def list_runs(self, limit: int = 20) -> list[RunRecord]:
        """The newest runs first."""


class MemoryTraceSink:
    """Keeps every record in memory (tests, benchmarks, `--no-store`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.runs: dict[str, RunRecord] = {}
        self.steps: list[StepRecord] = []
        self.invocations: list[InvocationRecord] = []
        self.reasoning: list[ReasoningAuditRecord] = []
        self.events: list[EventRecord] = []

    def save_run(self, record: RunRecord) -> None:
        with self._lock:
            self.runs[record.run_id] = record

    def add_step(self, record: StepRecord) -> None:
        with self._lock:
            self.steps.append(record)

    def add_invocation(self, record: InvocationRecord) -> None:
        with self._lock:
            self.invocations.append(record)

    def add_reasoning(self, record: ReasoningAuditRecord) -> None:
        with self._lock:
            self.reasoning.append(record)

    def add_event(self, record: EventRecord) -> None:
        with self._lock:
            self.events.append(record)

    def list_runs(self, limit: int = 20) -> list[RunRecord]:
        """The newest runs first."""
        with self._lock:
            return sorted(self.runs.values(), key=lambda r: r.started_at, reverse=True)[:limit]

    def trace(self, run_id: str) -> dict[str, Any]:
        """Everything recorded for one run, as plain data."""
        with self._lock:
            run = self.runs.get(run_id)
            return {
                "run": asdict(run) if run else None,
                "steps": [asdict(s) for s in self.steps if s.run_id == run_id],
                "invocations": [asdict(i) for i in self.invocations if i.run_id == run_id],
                "reasoning": [asdict(r) for r in self.reasoning if r.run_id == run_id],
                "events": [asdict(e) for e in self.events if e.run_id == run_id],
            }
