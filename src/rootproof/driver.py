"""The per-run driver: one run's context, record, events and outcome, from routing to `done`.

`Harness.diagnose` prepares a run (its context, record and backends) and hands it to a
`RunDriver`, which routes, runs the agent loop through the ToolBoundary, releases through both
guards or a safe fallback, persists the terminal record and emits the public events.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rootproof.agent.draft import DiagnosisDraft
from rootproof.agent.loop import CancellableModel, LoopResult, ModelStepInfo, run_agent
from rootproof.agent.models.base import Model, ToolSpec
from rootproof.agent.prompts import load_prompt, prompt_audit
from rootproof.agent.router import Route, route
from rootproof.alerts import AlertPayload
from rootproof.backends.registry import BackendRegistry
from rootproof.boundary.boundary import ToolBoundary, ToolOutcome
from rootproof.boundary.store import CanonicalInvocation, InvocationStatus
from rootproof.errors import ConfigError, StoreError, UsageError
from rootproof.guard.aiops import evaluate_aiops
from rootproof.guard.evidence import EvidenceGuardResult
from rootproof.guard.fallback import FallbackType, SafeFallbackFactory, call_limitation, model_limitation
from rootproof.guard.release import ReleaseDecision, release_draft, tool_trace_summary
from rootproof.guard.rules import rule_set
from rootproof.guard.semantic import SemanticResult
from rootproof.observability.otel import RunTelemetry
from rootproof.run.context import RunContext
from rootproof.run.events import EventStream
from rootproof.run.lifecycle import RunState
from rootproof.run.records import RunRecord
from rootproof.tools.base import TOOLS

if TYPE_CHECKING:
    from rootproof.harness import Harness

__all__ = ["RunDriver", "RunOutcome", "RunPlan", "thin_evidence"]

_BUDGET_CODES = frozenset({"BUDGET_EXHAUSTED", "SCOPE_SATURATED"})
"""Refusals that mean a budget (the run's or a tool's) ran out."""
_EMPTY_EVALUATION: dict[str, Any] = {"rule_set_version": None, "evidence_guard": None, "semantic_guard": None, "tool_trace_summary": None, "aiops_rule_evaluation": None}
_NO_EVIDENCE_CALL = {
    "en": "No evidence tool (logs, metrics, database, cache, proxy) was called in this run",
    "zh": "本次诊断未调用任何证据工具（日志、指标、数据库、缓存、代理）",
}
_ENDS = {
    "NO_DRAFT": (FallbackType.NO_DRAFT, "SUCCESS"),
    "BUDGET_EXHAUSTED": (FallbackType.BUDGET_EXHAUSTED, "SUCCESS"),
    "DEADLINE_EXCEEDED": (FallbackType.DEADLINE_EXCEEDED, "TIMED_OUT"),
    "MODEL_UNAVAILABLE": (FallbackType.MODEL_UNAVAILABLE, "FAILED"),
}
"""How a loop that ended without a draft ends the run: fallback type and run status."""


@dataclass(kw_only=True)
class RunOutcome:
    """Everything a caller may want about one finished run."""

    run_id: str
    session_id: str
    status: str
    release_outcome: str
    content: dict[str, Any] | None
    route: str
    fallback_type: str | None = None
    duration_ms: int = 0
    tokens: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    draft: DiagnosisDraft | None = None
    evidence: EvidenceGuardResult | None = None
    semantic: SemanticResult | None = None
    outcomes: list[ToolOutcome] = field(default_factory=list)
    loop_end: str | None = None
    alert: AlertPayload | None = None
    language: str = "en"
    """The run's language (en | zh): what its content is written in."""
    aiops_rule_evaluation: dict[str, Any] | None = None
    """Alert mode only: `self_evaluation.aiops_rule_evaluation`."""

    def public(self) -> dict[str, Any]:
        """What `diagnose --json` prints (alert mode adds the AIOps rule evaluation)."""
        out: dict[str, Any] = {
            "run_id": self.run_id,
            "session_id": self.session_id,
            "status": self.status,
            "release_outcome": self.release_outcome,
            "route": self.route,
            "content": self.content,
            "duration_ms": self.duration_ms,
            "tokens": self.tokens,
        }
        if self.alert is not None:
            out["aiops_rule_evaluation"] = self.aiops_rule_evaluation
        return out


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """What one run is asked to do and with what."""

    question: str
    model: Model
    backends: BackendRegistry
    alert: AlertPayload | None = None
    incident: bool = False
    """The run is about an incident (a scenario, an alert or live targets): the router diagnoses."""
    evidence: bool = False
    """Evidence tools are mounted (a scenario's snapshot or live targets)."""
    on_model_step: Callable[[ModelStepInfo], None] | None = None
    """Hears what each agent model step cost (CLI progress lines)."""


class RunDriver:
    """Drives one run to a terminal state: its context, record, events and outcome."""

    def __init__(self, harness: Harness, ctx: RunContext, record: RunRecord, events: EventStream) -> None:
        self.harness = harness
        self.ctx = ctx
        self.record = record
        self.events = events
        self.out = RunOutcome(run_id=ctx.run_id, session_id=ctx.session_id, status="", release_outcome="", content=None, route="", language=ctx.language)
        ctx.telemetry = harness.runtime.telemetry.run(run_id=ctx.run_id, session_id=ctx.session_id)

    @contextlib.contextmanager
    def traced(self, plan: RunPlan) -> Iterator[None]:
        """The run's `invoke_agent` span around the whole run (a no-op unless tracing is on):
        the agent's provider and model, then how the run ended (docs/observability.md)."""
        with self.ctx.telemetry.invoke_agent(plan.model) as span:
            try:
                yield
            finally:
                out = self.out
                span.ended(status=out.status, release_outcome=out.release_outcome, fallback_type=out.fallback_type, tokens=out.tokens)

    # -- the run ---------------------------------------------------------------------------
    def run(self, plan: RunPlan) -> None:
        """Route, then answer (system message), look knowledge up or diagnose; may raise."""
        ctx, events, h = self.ctx, self.events, self.harness
        ctx.advance(RunState.ROUTING)
        events.emit("status", {"phase": "ROUTING"})
        alert = plan.alert
        message = plan.question if alert is None else f"{plan.question}\n{alert.router_text()}"
        router = h.router_model(plan.model)
        chosen = route(
            ctx, message, incident_scope=plan.incident, model=CancellableModel(router, ctx.cancellation) if router else None, alert=alert is not None
        )
        self.record.route = self.out.route = str(chosen)
        if chosen is Route.SYSTEM_CHAT:
            ctx.advance(RunState.RELEASING)
            msg = (
                "我是 rootproof 诊断助手：描述故障现象或告警，我会调用工具收集证据，只发布能被证据证明的结论。"
                if ctx.language == "zh"
                else "I am rootproof's diagnosis assistant: describe a symptom or an alert and I will gather evidence with tools and publish only what the evidence proves."
            )
            self.emit_content({"content_type": "SYSTEM_MESSAGE", "message": msg}, "PUBLISHED", None)
            return
        knowledge = chosen is Route.KNOWLEDGE_QUERY
        if not knowledge and not plan.evidence:
            raise UsageError("DIAGNOSIS needs a scenario (--scenario) or a live backend (--targets)")
        ctx.advance(RunState.RUNNING)
        events.emit("status", {"phase": "KNOWLEDGE_LOOKUP" if knowledge else "DIAGNOSIS_RUNNING"})
        tools = plan.backends.tools(TOOLS)
        boundary = ToolBoundary(
            ctx, backends=plan.backends, store=h.canonical, sink=h.sink, events=events, breaker=h.breaker, tools=tools, pool=h.runtime.pool
        )
        prompts = ["router", "knowledge_answer", "semantic_judge"] if knowledge else ["router", "diagnosis_agent", "semantic_judge"] + (["aiops"] if alert else [])
        self.record.prompt_audit = prompt_audit(prompts)
        specs = [ToolSpec(name=n, description=t.description, parameters=t.json_schema()) for n, t in tools.items() if n in ctx.scope.allowed_tools]
        system = load_prompt("knowledge_answer" if knowledge else "diagnosis_agent").text
        user = plan.question
        if alert:
            system += "\n\n" + load_prompt("aiops").text
            user = plan.question + "\n\nAlert payload (data):\n" + json.dumps(alert.for_agent(), ensure_ascii=False)
        model = plan.model
        if knowledge:
            from rootproof.agent.models.offline import KnowledgeAnswerer

            model = KnowledgeAnswerer(ctx.language)
        loop = run_agent(
            ctx,
            model,
            boundary,
            system_prompt=system,
            user_prompt=user,
            tools=specs,
            sink=h.sink,
            taxonomy=h.taxonomy(),
            prompt_token_budget=h.settings.prompt_token_budget,
            max_output_tokens=h.settings.model_max_output_tokens,
            on_step=plan.on_model_step,
        )
        self.out.loop_end = loop.end
        self.out.outcomes = list(boundary.outcomes)
        self.after_loop(loop, dataclasses.replace(plan, model=model), knowledge)  # the judge follows the model that drafted

    def after_loop(self, loop: LoopResult, plan: RunPlan, knowledge: bool) -> None:
        """Release the loop's draft through both guards, or end in the fallback its end calls for."""
        ctx, record, out, h = self.ctx, self.record, self.out, self.harness
        if loop.end == "CANCELLED" or ctx.cancellation.cancelled:
            self.cancelled()
            return
        if loop.end in _ENDS or loop.draft is None:
            kind, status = _ENDS.get(loop.end, (FallbackType.NO_DRAFT, "SUCCESS"))
            extra: list[str] = []
            if loop.detail and loop.end in ("MODEL_UNAVAILABLE", "DEADLINE_EXCEEDED"):
                record.error = loop.detail[:2000]
                extra.append(model_limitation(loop.detail, ctx.language, status=loop.model_status))
            elif loop.detail and loop.end == "NO_DRAFT":
                record.error = loop.detail[:2000]  # why the draft was unusable, for the trace only
            if kind in (FallbackType.BUDGET_EXHAUSTED, FallbackType.DEADLINE_EXCEEDED):
                extra += [call_limitation(i, ctx.language) for i in _failed_calls(h.canonical.for_run(ctx.run_id))]
            self.fallback(kind, status=status, extra=extra)
            return
        ctx.advance(RunState.VALIDATING)
        self.events.emit("status", {"phase": "SAFETY_VALIDATING"})
        raw = loop.raw_draft if isinstance(loop.raw_draft, dict) else loop.draft.model_dump(mode="json")
        decision: ReleaseDecision = release_draft(
            raw,
            run_id=ctx.run_id,
            store=h.canonical,
            semantic=h.semantic_guard(ctx, plan.model),
            language=ctx.language,
            question=plan.question,
            content_type="KNOWLEDGE_ANSWER" if knowledge else "DIAGNOSIS_REPORT",
            root_cause_rules=not knowledge,
            taxonomy=h.taxonomy(),
            cards=h.cards(),
        )
        out.draft, out.evidence, out.semantic = loop.draft, decision.evidence, decision.semantic
        _trace_verdicts(ctx.telemetry, decision)
        record.self_evaluation = {
            "rule_set_version": decision.evidence.rule_set_version,
            "evidence_guard": decision.evidence.as_dict(),
            "semantic_guard": decision.semantic.as_dict() if decision.semantic else None,
            "tool_trace_summary": tool_trace_summary(h.canonical, ctx.run_id, loop.draft),
            "aiops_rule_evaluation": None,
        }
        if ctx.cancellation.cancelled:
            self.cancelled()
            return
        if ctx.time_left() <= 0:
            self.fallback(FallbackType.DEADLINE_EXCEEDED, status="TIMED_OUT")
            return
        if decision.release_outcome == "PUBLISHED" and not knowledge and loop.draft.root_cause is None:
            # "No fault found" is an answer only if the run could look: when most evidence calls
            # were refused, timed out or failed, say so instead (the draft itself is never edited).
            thin = thin_evidence(h.canonical.for_run(ctx.run_id))
            if thin is not None:
                kind, failed = thin
                extra = [call_limitation(i, ctx.language) for i in failed] or [_NO_EVIDENCE_CALL.get(ctx.language, _NO_EVIDENCE_CALL["en"])]
                self.fallback(kind, status="SUCCESS", extra=extra)
                return
        if decision.release_outcome == "PUBLISHED" and loop.draft.root_cause is not None:
            record.conclusion = loop.draft.root_cause.model_dump(mode="json", exclude={"claim_ids"})
            if loop.draft.contributing_causes:
                record.conclusion["contributing_causes"] = [
                    c.model_dump(mode="json", exclude={"claim_ids"}) for c in loop.draft.contributing_causes
                ]
        ctx.advance(RunState.RELEASING)
        self.emit_content(decision.content, decision.release_outcome, decision.fallback_type)

    # -- endings ---------------------------------------------------------------------------
    def cancelled(self) -> None:
        """CANCELLED / release_outcome NONE, persisted; `done` is the last event, no content."""
        ctx, out = self.ctx, self.out
        ctx.advance(RunState.CANCELLED)
        self.record.error = f"cancelled: {ctx.cancellation.reason}" if ctx.cancellation.reason else None
        self.finish("CANCELLED", "NONE", None, None)
        out.status, out.release_outcome = "CANCELLED", "NONE"
        out.duration_ms, out.tokens = ctx.elapsed_ms(), ctx.usage.tokens
        self.events.emit("done", {"release_outcome": "NONE", "status": "CANCELLED", "duration_ms": out.duration_ms, "tokens": out.tokens})

    def fallback(self, kind: FallbackType, *, status: str, extra: list[str] | None = None) -> None:
        """End in the safe fallback `kind` (run status SUCCESS, TIMED_OUT or FAILED)."""
        ctx = self.ctx
        if ctx.lifecycle.terminal:
            return
        if ctx.lifecycle.state is not RunState.RELEASING:
            ctx.advance(RunState.RELEASING)
        content = SafeFallbackFactory.build(kind, ctx.language, extra_limitations=extra)
        terminal = {"SUCCESS": RunState.COMPLETED, "TIMED_OUT": RunState.TIMED_OUT, "FAILED": RunState.FAILED}[status]
        self.emit_content(content, "FALLBACK", str(kind), terminal=terminal)

    def emit_content(self, content: dict[str, Any], outcome: str, fallback: str | None, terminal: RunState = RunState.COMPLETED) -> None:
        """Emit `content`, reach `terminal`, persist the record and emit `done`."""
        ctx, record, out, events = self.ctx, self.record, self.out, self.events
        if out.alert is not None:
            invocations = self._invocations(ending=terminal is RunState.FAILED)
            aiops = evaluate_aiops(out.alert, content=content, draft=out.draft, invocations=invocations).as_dict()
            record.self_evaluation = {**(record.self_evaluation or _EMPTY_EVALUATION), "aiops_rule_evaluation": aiops}
            out.aiops_rule_evaluation = aiops
        events.emit("content", content)
        ctx.advance(terminal)
        status = "SUCCESS" if terminal is RunState.COMPLETED else str(terminal)
        self.finish(status, outcome, content, fallback)
        out.status, out.release_outcome, out.content, out.fallback_type = status, outcome, content, fallback
        out.duration_ms, out.tokens = ctx.elapsed_ms(), ctx.usage.tokens
        events.emit("done", {"release_outcome": outcome, "status": status, "duration_ms": out.duration_ms, "tokens": out.tokens})

    def finish(self, status: str, outcome: str, content: dict[str, Any] | None, fallback: str | None) -> None:
        """Persist the terminal record (status, release outcome, content, evaluation, usage)."""
        record, ctx = self.record, self.ctx
        record.status = status
        record.release_outcome = outcome
        record.content = content
        record.fallback_type = fallback
        record.lifecycle_state = str(ctx.lifecycle.state)
        record.self_evaluation = self._evaluation()
        record.budget_usage = ctx.usage.as_dict()
        record.tokens = ctx.usage.tokens
        record.ended_at = datetime.now(UTC)
        record.duration_ms = ctx.elapsed_ms()
        self.harness.sink.save_run(record)

    def _evaluation(self) -> dict[str, Any]:
        """Every trace names the guards' rule set in force and summarises its tool calls, even when the guards never ran."""
        se = {**_EMPTY_EVALUATION, **(self.record.self_evaluation or {})}
        if not se.get("rule_set_version"):
            try:
                se["rule_set_version"] = rule_set().version
            except ConfigError as exc:
                se["rule_set_version"] = f"unavailable: {exc}"
        if se.get("tool_trace_summary") is None:
            try:
                se["tool_trace_summary"] = tool_trace_summary(self.harness.canonical, self.record.run_id, None)
            except StoreError:
                if self.record.status not in _ENDING_ANYWAY:
                    raise
                se["tool_trace_summary"] = []  # the canonical store is down: `record.error` says so
        return se

    def _invocations(self, *, ending: bool) -> list[CanonicalInvocation]:
        """The run's invocations; none when the canonical store is down (a Redis outage) and the
        run is `ending` anyway (failed): its store failure must not stop it from ending."""
        try:
            return self.harness.canonical.for_run(self.ctx.run_id)
        except StoreError:
            if not ending:
                raise
            return []


_ENDING_ANYWAY = frozenset({"FAILED", "CANCELLED"})
"""Run statuses that end even when the canonical store cannot be read (its failure is the error)."""


def _trace_verdicts(telemetry: RunTelemetry, decision: ReleaseDecision) -> None:
    """Each guard's verdict as a `gen_ai.evaluation.result` event of the run's span: its label and
    violation codes (the semantic guard's: the share of supported claims too), never a reason."""
    if not telemetry.enabled:
        return
    ev = decision.evidence
    telemetry.evaluation("evidence_guard", "PASS" if ev.passed else "FAIL", codes=ev.codes)
    sem = decision.semantic
    if sem is not None:
        label = "UNAVAILABLE" if not sem.available else "SUPPORTED" if sem.supported else "UNSUPPORTED"
        codes = sorted({v.code for v in sem.verdicts if v.code})
        score = sum(v.verdict == "SUPPORTED" for v in sem.verdicts) / len(sem.verdicts) if sem.verdicts and sem.available else None
        telemetry.evaluation("semantic_guard", label, codes=codes, score=score, error=None if sem.available else "GUARD_UNAVAILABLE")


def _failed_calls(invocations: list[CanonicalInvocation]) -> list[CanonicalInvocation]:
    """Evidence calls (not knowledge lookups) that were refused, timed out or failed; a duplicate's refusal is not a failure."""
    return [
        i
        for i in invocations
        if i.status is not InvocationStatus.READY and i.refusal_code != "DUPLICATE_SCOPE" and _is_evidence_call(i)
    ]


def _is_evidence_call(inv: CanonicalInvocation) -> bool:
    tool = TOOLS.get(inv.tool_name)
    return tool is None or tool.backend != "knowledge"


def thin_evidence(invocations: list[CanonicalInvocation]) -> tuple[FallbackType, list[CanonicalInvocation]] | None:
    """The fallback a draft without a root cause gets when its run could barely look, else None.

    Counted over evidence calls (every tool but knowledge lookups; a refused duplicate is not
    counted, its query already ran): when at least half of them were refused, timed out or
    failed, "no fault found" would be a claim about evidence nobody saw. The fallback is
    BUDGET_EXHAUSTED when budget refusals (run or per-tool) are at least half of the failures,
    else INSUFFICIENT_EVIDENCE; the failed calls are returned to be named in its limitations.
    """
    counted = [i for i in invocations if _is_evidence_call(i) and i.refusal_code != "DUPLICATE_SCOPE"]
    if not counted:  # a run that never looked cannot report that nothing is wrong
        return FallbackType.INSUFFICIENT_EVIDENCE, []
    failed = _failed_calls(invocations)
    if not failed or len(failed) * 2 < len(counted):
        return None
    budget = sum(1 for i in failed if i.refusal_code in _BUDGET_CODES)
    kind = FallbackType.BUDGET_EXHAUSTED if budget * 2 >= len(failed) else FallbackType.INSUFFICIENT_EVIDENCE
    return kind, failed
