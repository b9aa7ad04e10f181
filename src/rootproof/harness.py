"""Composition root: settings → backends, model, stores → a run, end to end.

`Harness.diagnose` creates the RunContext before any model is called, routes, runs the agent
loop through the ToolBoundary, releases through both guards, persists the terminal record and
emits the public events.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rootproof.agent.draft import DiagnosisDraft
from rootproof.agent.loop import CancellableModel, LoopResult, run_agent
from rootproof.agent.models.base import Model, ToolSpec
from rootproof.agent.prompts import load_prompt, prompt_audit
from rootproof.agent.router import Route, route
from rootproof.alerts import AlertPayload, as_payload
from rootproof.boundary.boundary import CircuitBreaker, ToolBoundary, ToolCallRequest, ToolOutcome
from rootproof.boundary.redaction import redact, redact_value
from rootproof.boundary.store import (
    CanonicalInvocation,
    CanonicalStore,
    InMemoryCanonicalStore,
    InvocationStatus,
)
from rootproof.errors import ConfigError, RunCancelled, UsageError
from rootproof.guard.aiops import evaluate_aiops
from rootproof.guard.evidence import EvidenceGuardResult
from rootproof.guard.fallback import FallbackType, SafeFallbackFactory, call_limitation, model_limitation
from rootproof.guard.release import ReleaseDecision, release_draft, tool_trace_summary
from rootproof.guard.rules import rule_set
from rootproof.guard.semantic import LlmJudge, OfflineJudge, SemanticGuard, SemanticResult
from rootproof.limits import clip_text
from rootproof.run.context import RunBudget, RunCancellation, RunContext, ToolScope
from rootproof.run.events import EventStream, Listener
from rootproof.run.lifecycle import RunState
from rootproof.run.records import MemoryTraceSink, RunRecord, TraceSink
from rootproof.settings import Settings, data_dir_variable
from rootproof.taxonomy import Taxonomy
from rootproof.tools.base import TOOLS, ToolBackend

if TYPE_CHECKING:
    from rootproof.kb import KnowledgeBase
    from rootproof.kb.cards import Card
    from rootproof.scenarios.types import Alert, Scenario

__all__ = ["Harness", "RunOutcome", "thin_evidence"]

_KEYED_PROVIDERS = frozenset({"openai", "deepseek"})
"""Providers whose servers always need an API key (local servers need none)."""
_BUDGET_CODES = frozenset({"BUDGET_EXHAUSTED", "SCOPE_SATURATED"})
"""Refusals that mean a budget (the run's or a tool's) ran out."""

_CANONICAL = InMemoryCanonicalStore()
_BREAKER = CircuitBreaker()


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


def _language_of(text: str) -> str:
    cjk = sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")
    return "zh" if cjk >= 2 else "en"


class Harness:
    """Builds runs from settings; holds the process-wide stores and the knowledge base."""

    def __init__(
        self,
        settings: Settings,
        *,
        sink: TraceSink | None = None,
        canonical: CanonicalStore | None = None,
        knowledge: KnowledgeBase | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.settings = settings
        self._sink = sink
        self.canonical = canonical or _CANONICAL
        self.breaker = breaker or _BREAKER
        self._kb = knowledge
        self._kb_lock = threading.Lock()
        self._taxonomy: Taxonomy | None = None
        self._cards: Mapping[str, Card] | None = None

    # -- parts ------------------------------------------------------------------------
    @property
    def sink(self) -> TraceSink:
        """The trace store (SQL by default; opened on first use)."""
        if self._sink is None:
            from rootproof.store import SqlTraceStore

            self._make_data_dir()
            self._sink = SqlTraceStore(self.settings.resolved_database_url())
        return self._sink

    def reader(self) -> TraceSink:
        """The trace store for commands that only read: opened read-only when its SQLite file or
        that file's folder is not writable (a read-only data folder or mount); else `sink`."""
        if self._sink is None:
            from rootproof.store.sql import needs_read_only

            url = self.settings.resolved_database_url()
            if needs_read_only(url):
                from rootproof.store import SqlTraceStore

                self._sink = SqlTraceStore(url, read_only=True)
        return self.sink

    def _make_data_dir(self) -> None:
        folder = self.settings.data_dir
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{data_dir_variable()}: cannot create the data folder {folder}: {exc.strerror or exc}") from exc

    @property
    def knowledge(self) -> KnowledgeBase:
        """The knowledge base (built-in cards plus `cards_dir`), loaded once."""
        with self._kb_lock:
            if self._kb is None:
                from rootproof.kb import KnowledgeBase

                extra = [self.settings.cards_dir] if self.settings.cards_dir else []
                self._kb = KnowledgeBase.load(
                    extra, cache_dir=self.settings.data_dir / "kb-index", max_card_bytes=self.settings.max_card_bytes
                )
            return self._kb

    def taxonomy(self) -> Taxonomy:
        """The built-in taxonomy plus the namespaced labels of the loaded cards (docs/taxonomy.md).

        Read from the knowledge base when it is loaded, else from the cards alone (no index).
        """
        if self._taxonomy is None:
            from rootproof.kb.cards import card_taxonomy, taxonomy_for

            with self._kb_lock:
                kb = self._kb
            self._taxonomy = card_taxonomy(kb.cards.values()) if kb is not None else taxonomy_for(self.settings.cards_dir)
        return self._taxonomy

    def cards(self) -> Mapping[str, Card]:
        """The card catalogue the EvidenceGuard reads (ROOT_CAUSE_NOT_DISCRIMINATED), for every run.

        The knowledge base's cards when it is loaded; else the cards alone, parsed once (no
        index), so a model that never looks knowledge up still meets the discrimination rule.
        """
        with self._kb_lock:
            if self._kb is not None:
                return self._kb.cards
            if self._cards is None:
                from rootproof.kb.cards import load_cards

                extra = [self.settings.cards_dir] if self.settings.cards_dir else []
                self._cards = load_cards(extra, max_bytes=self.settings.max_card_bytes)
            return self._cards

    def budget(self, scenario: Scenario | None = None) -> RunBudget:
        """Budget from settings, with a scenario's overrides."""
        s = self.settings
        over = dict(scenario.budget) if scenario is not None and scenario.budget else {}
        return RunBudget(
            model_calls=int(over.get("model_calls", s.max_model_calls)),
            tool_calls=int(over.get("tool_calls", s.max_tool_calls)),
            calls_per_tool=int(over.get("calls_per_tool", s.max_calls_per_tool)),
            tokens=s.max_tokens,
            observation_bytes=s.observation_bytes,
            deadline_s=s.deadline_s,
            tool_timeout_s=s.tool_timeout_s,
        )

    def backends(self, scenario: Scenario | None) -> dict[str, ToolBackend]:
        """Backends for a run: the scenario's snapshot for runtime tools, the knowledge base."""
        out: dict[str, ToolBackend] = {"knowledge": _LazyKnowledge(self)}
        if scenario is not None:
            from rootproof.backends.snapshot import SnapshotBackend

            out["runtime"] = SnapshotBackend(scenario)
        return out

    def model(self, name: str | Model | None) -> Model:
        """The agent model by name (`offline`, `openai`) or as given."""
        if name is not None and not isinstance(name, str):
            return name
        choice = name or self.settings.model
        if choice == "offline":
            from rootproof.agent.models.offline import OfflinePlanner

            return OfflinePlanner(self.knowledge)
        if choice == "openai":
            from rootproof.agent.models.openai_compat import OpenAICompatModel

            s = self.settings
            if not s.openai_base_url:
                # Never a silent default: a public API must be chosen, not fallen into.
                raise ConfigError(
                    "ROOTPROOF_OPENAI_BASE_URL: not set; the openai model needs its server's URL "
                    "(e.g. https://api.openai.com/v1, https://api.deepseek.com/v1 or http://127.0.0.1:8080/v1)"
                )
            key = s.openai_api_key.get_secret_value() if s.openai_api_key else None
            if not key and s.openai_provider in _KEYED_PROVIDERS:
                raise ConfigError(f"ROOTPROOF_OPENAI_API_KEY: not set; the {s.openai_provider} provider needs an API key")
            return OpenAICompatModel(
                base_url=s.openai_base_url, api_key=key, model=s.openai_model, provider=s.openai_provider, timeout_s=s.model_timeout_s, max_retries=s.model_max_retries
            )
        raise ConfigError(f"ROOTPROOF_MODEL: unknown model {choice!r} (expected offline or openai)")

    def semantic_guard(self, ctx: RunContext | None = None, model: Model | None = None) -> SemanticGuard:
        """The offline judge (default), or the LLM judge when `judge = llm` and a model is configured."""
        if self.settings.judge == "llm" and model is not None and ctx is not None and not isinstance(model, _OFFLINE_TYPES()):
            return SemanticGuard(LlmJudge(_judge_ask(ctx, model)))
        from rootproof.kb.channels import encode as embed_texts

        return SemanticGuard(OfflineJudge(embed=embed_texts))

    def router_model(self, model: Model) -> Model | None:
        """The model routes only when a real model drives the run; else offline rules do."""
        return None if isinstance(model, _OFFLINE_TYPES()) or model.name == "scripted" else model

    # -- one tool call ---------------------------------------------------------------------
    def tool_call(self, name: str, arguments: dict[str, Any] | str, *, scenario: Scenario | None) -> tuple[ToolOutcome, RunContext]:
        """`rootproof tool call`: one call through the full boundary as a one-step run."""
        if name not in TOOLS:
            raise UsageError(f"unknown tool {name!r} (expected one of {', '.join(TOOLS)})")
        allowed = frozenset(scenario.allowed_tools) if scenario is not None else frozenset({"lookup_knowledge"})
        ctx = RunContext(
            session_id=str(uuid.uuid4()),
            scope=ToolScope(allowed_tools=allowed, scenario_id=scenario.id if scenario else None),
            budget=self.budget(scenario),
            clock=scenario.now if scenario is not None else None,
        )
        record = RunRecord(run_id=ctx.run_id, session_id=ctx.session_id, question=f"tool call {name}", route="TOOL_CALL", scenario_id=ctx.scope.scenario_id)
        sink = self.sink
        sink.save_run(record)
        ctx.advance(RunState.RUNNING)
        ctx.progress.begin_step()
        boundary = ToolBoundary(ctx, backends=self.backends(scenario), store=self.canonical, sink=sink, breaker=self.breaker)
        try:
            outcome = boundary.call(ToolCallRequest(name=name, arguments=arguments, call_id="cli", step_index=0))
        except Exception as exc:
            record.error = redact(f"{type(exc).__name__}: {str(exc)[:500]}")
            ctx.advance(RunState.FAILED)
            self._finish(record, ctx, status="FAILED", outcome="NONE", content=None, fallback=str(FallbackType.INTERNAL_ERROR))
            raise
        ctx.advance(RunState.COMPLETED)
        self._finish(record, ctx, status="SUCCESS", outcome="NONE", content=None, fallback=None)
        return outcome, ctx

    # -- a whole run -----------------------------------------------------------------------
    def diagnose(
        self,
        question: str,
        *,
        scenario: Scenario | None = None,
        alert: AlertPayload | Alert | dict[str, Any] | None = None,
        model: str | Model | None = None,
        listeners: list[Listener] | None = None,
        session_id: str | None = None,
        cancellation: RunCancellation | None = None,
        language: str | None = None,
    ) -> RunOutcome:
        """Run one request to a safe end; never raises for run failures (they become fallbacks).

        With an alert (AIOps mode) and no question, the question is built from the primary
        alert in the alert's language; with a question too, the question leads and the alert
        is context. A malformed alert raises AlertError before the run starts.
        """
        limits = self.settings.input_limits()
        payload = as_payload(alert, limits=limits)
        if payload is not None:  # secrets in the user's input are never stored nor shown to a model
            payload = AlertPayload.model_validate(redact_value(payload.model_dump()))
        question = redact(question)
        if payload is not None and not question.strip():
            question = payload.question()
            lang = language or payload.language
        else:
            lang = language or (scenario.language if scenario is not None and not question.strip() else _language_of(question or (scenario.question if scenario else "")))
        question = clip_text(question, limits.question_chars)  # what the run asks is what it keeps
        allowed = frozenset(scenario.allowed_tools) if scenario is not None else frozenset({"lookup_knowledge"})
        ctx = RunContext(
            session_id=session_id or str(uuid.uuid4()),
            scope=ToolScope(allowed_tools=allowed, scenario_id=scenario.id if scenario else None),
            budget=self.budget(scenario),
            language="zh" if lang == "zh" else "en",
            clock=scenario.now if scenario is not None else None,
        )
        if cancellation is not None:
            ctx.cancellation = cancellation
        sink = self.sink
        events = EventStream(ctx.run_id, sink, listeners)
        agent_model = self.model(model)
        self.taxonomy()  # before the run exists: a malformed card is bad input (exit 2), not a failed run
        record = RunRecord(
            run_id=ctx.run_id,
            session_id=ctx.session_id,
            question=question,
            language=ctx.language,
            model=agent_model.name,
            scenario_id=ctx.scope.scenario_id,
            deadline_at=ctx.deadline,
            alert=payload.trace(limits.stored_related_alerts) if payload is not None else None,
        )
        sink.save_run(record)
        events.emit("metadata", {"session_id": ctx.session_id, "run_id": ctx.run_id})
        out = RunOutcome(run_id=ctx.run_id, session_id=ctx.session_id, status="", release_outcome="", content=None, route="", alert=payload)
        try:
            self._run(ctx, record, events, out, question, scenario, payload, agent_model)
        except RunCancelled:
            if not ctx.lifecycle.terminal:
                self._cancelled(ctx, record, events, out)
        except Exception as exc:  # a bug or a store failure still ends in a fallback
            record.error = redact(f"{type(exc).__name__}: {str(exc)[:500]}")
            self._fallback(ctx, record, events, out, FallbackType.INTERNAL_ERROR, status="FAILED")
        out.events = [{"seq": e.seq, "type": e.type, "data": e.data} for e in events.events]
        return out

    def _run(
        self,
        ctx: RunContext,
        record: RunRecord,
        events: EventStream,
        out: RunOutcome,
        question: str,
        scenario: Scenario | None,
        alert: AlertPayload | None,
        model: Model,
    ) -> None:
        ctx.advance(RunState.ROUTING)
        events.emit("status", {"phase": "ROUTING"})
        incident = scenario is not None or alert is not None
        message = question if alert is None else f"{question}\n{alert.router_text()}"
        router = self.router_model(model)
        chosen = route(
            ctx, message, incident_scope=incident, model=CancellableModel(router, ctx.cancellation) if router else None, alert=alert is not None
        )
        record.route = out.route = str(chosen)
        if chosen is Route.SYSTEM_CHAT:
            ctx.advance(RunState.RELEASING)
            msg = (
                "我是 rootproof 诊断助手：描述故障现象或告警，我会调用工具收集证据，只发布能被证据证明的结论。"
                if ctx.language == "zh"
                else "I am rootproof's diagnosis assistant: describe a symptom or an alert and I will gather evidence with tools and publish only what the evidence proves."
            )
            content = {"content_type": "SYSTEM_MESSAGE", "message": msg}
            self._emit_content(ctx, record, events, out, content, "PUBLISHED", None)
            return
        knowledge = chosen is Route.KNOWLEDGE_QUERY
        if not knowledge and scenario is None:
            raise UsageError("DIAGNOSIS needs a scenario (--scenario) or a live backend")
        ctx.advance(RunState.RUNNING)
        events.emit("status", {"phase": "KNOWLEDGE_LOOKUP" if knowledge else "DIAGNOSIS_RUNNING"})
        boundary = ToolBoundary(ctx, backends=self.backends(scenario), store=self.canonical, sink=self.sink, events=events, breaker=self.breaker)
        prompts = ["router", "knowledge_answer", "semantic_judge"] if knowledge else ["router", "diagnosis_agent", "semantic_judge"] + (["aiops"] if alert else [])
        record.prompt_audit = prompt_audit(prompts)
        tools = [ToolSpec(name=n, description=TOOLS[n].description, parameters=TOOLS[n].json_schema()) for n in TOOLS if n in ctx.scope.allowed_tools]
        system = load_prompt("knowledge_answer" if knowledge else "diagnosis_agent").text
        if alert:
            system += "\n\n" + load_prompt("aiops").text
        user = question
        if alert:
            user = question + "\n\nAlert payload (data):\n" + json.dumps(alert.for_agent(), ensure_ascii=False)
        if knowledge:
            from rootproof.agent.models.offline import KnowledgeAnswerer

            model = KnowledgeAnswerer(ctx.language)
        loop = run_agent(ctx, model, boundary, system_prompt=system, user_prompt=user, tools=tools, sink=self.sink, taxonomy=self.taxonomy())
        out.loop_end = loop.end
        out.outcomes = list(boundary.outcomes)
        self._after_loop(ctx, record, events, out, loop, question, knowledge, model)

    def _after_loop(
        self, ctx: RunContext, record: RunRecord, events: EventStream, out: RunOutcome, loop: LoopResult, question: str, knowledge: bool, agent_model: Model
    ) -> None:
        if loop.end == "CANCELLED" or ctx.cancellation.cancelled:
            self._cancelled(ctx, record, events, out)
            return
        ends = {
            "NO_DRAFT": (FallbackType.NO_DRAFT, "SUCCESS"),
            "BUDGET_EXHAUSTED": (FallbackType.BUDGET_EXHAUSTED, "SUCCESS"),
            "DEADLINE_EXCEEDED": (FallbackType.DEADLINE_EXCEEDED, "TIMED_OUT"),
            "MODEL_UNAVAILABLE": (FallbackType.MODEL_UNAVAILABLE, "FAILED"),
        }
        if loop.end in ends or loop.draft is None:
            kind, status = ends.get(loop.end, (FallbackType.NO_DRAFT, "SUCCESS"))
            extra: list[str] = []
            if loop.detail and loop.end in ("MODEL_UNAVAILABLE", "DEADLINE_EXCEEDED"):
                record.error = loop.detail[:2000]
                extra.append(model_limitation(loop.detail, ctx.language, status=loop.model_status))
            if kind in (FallbackType.BUDGET_EXHAUSTED, FallbackType.DEADLINE_EXCEEDED):
                extra += [call_limitation(i, ctx.language) for i in _failed_calls(self.canonical.for_run(ctx.run_id))]
            self._fallback(ctx, record, events, out, kind, status=status, extra=extra)
            return
        ctx.advance(RunState.VALIDATING)
        events.emit("status", {"phase": "SAFETY_VALIDATING"})
        raw = loop.raw_draft if isinstance(loop.raw_draft, dict) else loop.draft.model_dump(mode="json")
        decision: ReleaseDecision = release_draft(
            raw,
            run_id=ctx.run_id,
            store=self.canonical,
            semantic=self.semantic_guard(ctx, agent_model),
            language=ctx.language,
            question=question,
            content_type="KNOWLEDGE_ANSWER" if knowledge else "DIAGNOSIS_REPORT",
            root_cause_rules=not knowledge,
            taxonomy=self.taxonomy(),
            cards=self.cards(),
        )
        out.draft, out.evidence, out.semantic = loop.draft, decision.evidence, decision.semantic
        record.self_evaluation = {
            "rule_set_version": decision.evidence.rule_set_version,
            "evidence_guard": decision.evidence.as_dict(),
            "semantic_guard": decision.semantic.as_dict() if decision.semantic else None,
            "tool_trace_summary": tool_trace_summary(self.canonical, ctx.run_id, loop.draft),
            "aiops_rule_evaluation": None,
        }
        if ctx.cancellation.cancelled:
            self._cancelled(ctx, record, events, out)
            return
        if ctx.time_left() <= 0:
            self._fallback(ctx, record, events, out, FallbackType.DEADLINE_EXCEEDED, status="TIMED_OUT")
            return
        if decision.release_outcome == "PUBLISHED" and not knowledge and loop.draft.root_cause is None:
            # "No fault found" is an answer only if the run could look: when most evidence calls
            # were refused, timed out or failed, say so instead (the draft itself is never edited).
            thin = thin_evidence(self.canonical.for_run(ctx.run_id))
            if thin is not None:
                kind, failed = thin
                extra = [call_limitation(i, ctx.language) for i in failed] or [_NO_EVIDENCE_CALL.get(ctx.language, _NO_EVIDENCE_CALL["en"])]
                self._fallback(ctx, record, events, out, kind, status="SUCCESS", extra=extra)
                return
        if decision.release_outcome == "PUBLISHED" and loop.draft.root_cause is not None:
            record.conclusion = loop.draft.root_cause.model_dump(mode="json", exclude={"claim_ids"})
        ctx.advance(RunState.RELEASING)
        self._emit_content(ctx, record, events, out, decision.content, decision.release_outcome, decision.fallback_type)

    def _cancelled(self, ctx: RunContext, record: RunRecord, events: EventStream, out: RunOutcome) -> None:
        """CANCELLED / release_outcome NONE, persisted; `done` is the last event, no content."""
        ctx.advance(RunState.CANCELLED)
        record.error = f"cancelled: {ctx.cancellation.reason}" if ctx.cancellation.reason else None
        self._finish(record, ctx, status="CANCELLED", outcome="NONE", content=None, fallback=None)
        out.status, out.release_outcome = "CANCELLED", "NONE"
        out.duration_ms, out.tokens = ctx.elapsed_ms(), ctx.usage.tokens
        events.emit("done", {"release_outcome": "NONE", "status": "CANCELLED", "duration_ms": out.duration_ms, "tokens": out.tokens})

    def _fallback(
        self, ctx: RunContext, record: RunRecord, events: EventStream, out: RunOutcome, kind: FallbackType, *, status: str, extra: list[str] | None = None
    ) -> None:
        if ctx.lifecycle.terminal:
            return
        if ctx.lifecycle.state is not RunState.RELEASING:
            ctx.advance(RunState.RELEASING)
        content = SafeFallbackFactory.build(kind, ctx.language, extra_limitations=extra)
        terminal = {"SUCCESS": RunState.COMPLETED, "TIMED_OUT": RunState.TIMED_OUT, "FAILED": RunState.FAILED}[status]
        self._emit_content(ctx, record, events, out, content, "FALLBACK", str(kind), terminal=terminal)

    def _emit_content(
        self,
        ctx: RunContext,
        record: RunRecord,
        events: EventStream,
        out: RunOutcome,
        content: dict[str, Any],
        outcome: str,
        fallback: str | None,
        terminal: RunState = RunState.COMPLETED,
    ) -> None:
        if out.alert is not None:
            aiops = evaluate_aiops(out.alert, content=content, draft=out.draft, invocations=self.canonical.for_run(ctx.run_id)).as_dict()
            record.self_evaluation = {**(record.self_evaluation or _EMPTY_EVALUATION), "aiops_rule_evaluation": aiops}
            out.aiops_rule_evaluation = aiops
        events.emit("content", content)
        ctx.advance(terminal)
        status = "SUCCESS" if terminal is RunState.COMPLETED else str(terminal)
        self._finish(record, ctx, status=status, outcome=outcome, content=content, fallback=fallback)
        out.status, out.release_outcome, out.content, out.fallback_type = status, outcome, content, fallback
        out.duration_ms, out.tokens = ctx.elapsed_ms(), ctx.usage.tokens
        events.emit("done", {"release_outcome": outcome, "status": status, "duration_ms": out.duration_ms, "tokens": out.tokens})

    def _evaluation(self, record: RunRecord) -> dict[str, Any]:
        """Every trace names the guards' rule set in force and summarises its tool calls, even when the guards never ran."""
        se = {**_EMPTY_EVALUATION, **(record.self_evaluation or {})}
        if not se.get("rule_set_version"):
            try:
                se["rule_set_version"] = rule_set().version
            except ConfigError as exc:
                se["rule_set_version"] = f"unavailable: {exc}"
        if se.get("tool_trace_summary") is None:
            se["tool_trace_summary"] = tool_trace_summary(self.canonical, record.run_id, None)
        return se

    def _finish(self, record: RunRecord, ctx: RunContext, *, status: str, outcome: str, content: dict[str, Any] | None, fallback: str | None) -> None:
        record.status = status
        record.release_outcome = outcome
        record.content = content
        record.fallback_type = fallback
        record.lifecycle_state = str(ctx.lifecycle.state)
        record.self_evaluation = self._evaluation(record)
        record.budget_usage = ctx.usage.as_dict()
        record.tokens = ctx.usage.tokens
        record.ended_at = datetime.now(UTC)
        record.duration_ms = ctx.elapsed_ms()
        self.sink.save_run(record)


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


_NO_EVIDENCE_CALL = {
    "en": "No evidence tool (logs, metrics, database, cache, proxy) was called in this run",
    "zh": "本次诊断未调用任何证据工具（日志、指标、数据库、缓存、代理）",
}


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


_EMPTY_EVALUATION: dict[str, Any] = {"rule_set_version": None, "evidence_guard": None, "semantic_guard": None, "tool_trace_summary": None, "aiops_rule_evaluation": None}


def _OFFLINE_TYPES() -> tuple[type, ...]:  # noqa: N802 - a lazily built constant
    from rootproof.agent.models.offline import KnowledgeAnswerer, OfflinePlanner

    return (OfflinePlanner, KnowledgeAnswerer)


def _judge_ask(ctx: RunContext, model: Model) -> Any:
    """`ask(system, user) -> text` for the LLM judge: one call per claim, its own budget, tokens counted."""
    from rootproof.agent.models.base import ModelRequest, SystemMessage, UserMessage
    from rootproof.errors import BudgetExhausted

    judge = CancellableModel(model, ctx.cancellation)

    def ask(system: str, user: str) -> str:
        if ctx.usage.judge_calls >= ctx.budget.judge_calls:
            raise BudgetExhausted(f"judge_calls limit of {ctx.budget.judge_calls} reached")
        ctx.usage.judge_calls += 1
        turn = judge.step(ModelRequest(messages=[SystemMessage(content=system), UserMessage(content=user)], tools=[], draft_schema={}, mode="gather", time_left=ctx.time_left))
        ctx.usage.add_tokens(turn.usage.total)
        return turn.text or ""

    return ask


class _LazyKnowledge:
    """Loads the knowledge base on the first `lookup_knowledge` call only."""

    def __init__(self, harness: Harness) -> None:
        self._harness = harness
        self._backend: ToolBackend | None = None

    def close(self) -> None:
        """Nothing to release: the knowledge base belongs to the harness."""

    def call(self, tool: str, args: Any, *, now: datetime, run_id: str) -> Any:
        if self._backend is None:
            from rootproof.kb.backend import KnowledgeBackend

            self._backend = KnowledgeBackend(self._harness.knowledge)
        return self._backend.call(tool, args, now=now, run_id=run_id)


def memory_harness(settings: Settings, **kwargs: Any) -> Harness:
    """A harness whose trace goes to memory (tests, benchmarks)."""
    return Harness(settings, sink=MemoryTraceSink(), **kwargs)

