"""Composition root: a Runtime's parts → a run, end to end.

`Harness(runtime).diagnose` creates the RunContext before any model is called, mounts the run's
backends (a scenario's snapshot, or the live backends of a targets file), and hands the run to
a `RunDriver` (routing, the agent loop through the ToolBoundary, both guards, the release, the
terminal record and the public events). Every long-lived part belongs to the `Runtime`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rootproof.agent.loop import CancellableModel, ModelStepInfo
from rootproof.agent.models.base import Model
from rootproof.alerts import AlertPayload, as_payload
from rootproof.backends.registry import BackendRegistry
from rootproof.boundary.boundary import CircuitBreaker, ToolBoundary, ToolCallRequest, ToolOutcome
from rootproof.boundary.redaction import redact, redact_value
from rootproof.boundary.store import CanonicalStore
from rootproof.driver import RunDriver, RunOutcome, RunPlan, thin_evidence
from rootproof.errors import RunCancelled, UsageError
from rootproof.guard.fallback import FallbackType
from rootproof.guard.semantic import LlmJudge, OfflineJudge, SemanticGuard
from rootproof.limits import clip_text
from rootproof.run.context import RunBudget, RunCancellation, RunContext, ToolScope
from rootproof.run.events import EventStream, Listener
from rootproof.run.lifecycle import RunState
from rootproof.run.records import MemoryTraceSink, RunRecord, TraceReader, TraceSink
from rootproof.runtime import Runtime
from rootproof.settings import Settings
from rootproof.taxonomy import Taxonomy
from rootproof.tools.base import TOOLS

if TYPE_CHECKING:
    from rootproof.kb import KnowledgeBase
    from rootproof.kb.cards import Card
    from rootproof.scenarios.types import Alert, Scenario
    from rootproof.targets import LoadedTargets

__all__ = ["Harness", "RunOutcome", "memory_harness", "thin_evidence"]


def _language_of(text: str) -> str:
    cjk = sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")
    return "zh" if cjk >= 2 else "en"


class Harness:
    """Builds and drives runs on a Runtime (which holds the stores, the knowledge base, the
    breakers, the tool pool, the model clients and the backends)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    # -- parts (the runtime's) ---------------------------------------------------------------
    @property
    def settings(self) -> Settings:
        """The runtime's settings."""
        return self.runtime.settings

    @property
    def sink(self) -> TraceSink:
        """The trace store (SQL by default; opened on first use)."""
        return self.runtime.sink

    def reader(self) -> TraceReader:
        """The trace store for commands that only read (read-only when it is not writable)."""
        return self.runtime.reader()

    @property
    def canonical(self) -> CanonicalStore:
        """The canonical store (whole results, by invocation id, across runs)."""
        return self.runtime.canonical

    @property
    def breaker(self) -> CircuitBreaker:
        """The circuit breakers (one per backend and target)."""
        return self.runtime.breakers

    @property
    def knowledge(self) -> KnowledgeBase:
        """The knowledge base (built-in cards plus `cards_dir`), loaded once."""
        return self.runtime.knowledge

    def taxonomy(self) -> Taxonomy:
        """The built-in taxonomy plus the namespaced labels of the loaded cards (docs/taxonomy.md)."""
        return self.runtime.taxonomy()

    def cards(self) -> Mapping[str, Card]:
        """The card catalogue the EvidenceGuard reads, for every run."""
        return self.runtime.cards()

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

    def backends(self, scenario: Scenario | None, targets: LoadedTargets | None = None) -> BackendRegistry:
        """Backends for a run: the knowledge base, a scenario's snapshot (`*`) or a targets file's live backends."""
        return self.runtime.backends(scenario, targets)

    def model(self, name: str | Model | None) -> Model:
        """The agent model by name (`offline`, `openai`; one client per runtime) or as given."""
        if name is not None and not isinstance(name, str):
            return name
        return self.runtime.model(name)

    def semantic_guard(self, ctx: RunContext | None = None, model: Model | None = None) -> SemanticGuard:
        """The offline judge (default), or the LLM judge when `judge = llm` and a model is configured."""
        if self.settings.judge == "llm" and model is not None and ctx is not None and not isinstance(model, _OFFLINE_TYPES()):
            return SemanticGuard(LlmJudge(_judge_ask(ctx, model)))
        from rootproof.kb.channels import encode as embed_texts

        return SemanticGuard(OfflineJudge(embed=embed_texts))

    def router_model(self, model: Model) -> Model | None:
        """The model routes only when a real model drives the run; else offline rules do."""
        return None if isinstance(model, _OFFLINE_TYPES()) or model.name == "scripted" else model

    # -- a run's scope ---------------------------------------------------------------------
    def _scope(self, scenario: Scenario | None, targets: LoadedTargets | None) -> tuple[BackendRegistry, ToolScope]:
        """The run's backends and tool scope: a scenario's tools, or lookup_knowledge and the
        tools whose system a live backend serves, or lookup_knowledge alone."""
        if scenario is not None and targets is not None:
            raise UsageError("a run reads either a scenario (--scenario) or live targets (--targets), not both")
        registry = self.backends(scenario, targets)
        if scenario is not None:
            return registry, ToolScope(allowed_tools=frozenset(scenario.allowed_tools), scenario_id=scenario.id)
        if targets is not None:
            allowed = frozenset(n for n, t in TOOLS.items() if registry.serves(t.backend))
            return registry, ToolScope(allowed_tools=allowed, backend="live")
        return registry, ToolScope(allowed_tools=frozenset({"lookup_knowledge"}))

    # -- one tool call ---------------------------------------------------------------------
    def tool_call(
        self, name: str, arguments: dict[str, Any] | str, *, scenario: Scenario | None, targets: LoadedTargets | None = None
    ) -> tuple[ToolOutcome, RunContext]:
        """`rootproof tool call`: one call through the full boundary as a one-step run."""
        if name not in TOOLS:
            raise UsageError(f"unknown tool {name!r} (expected one of {', '.join(TOOLS)})")
        registry, scope = self._scope(scenario, targets)
        ctx = RunContext(
            session_id=str(uuid.uuid4()), scope=scope, budget=self.budget(scenario), clock=scenario.now if scenario is not None else None
        )
        record = RunRecord(
            run_id=ctx.run_id,
            session_id=ctx.session_id,
            question=f"tool call {name}",
            route="TOOL_CALL",
            scenario_id=ctx.scope.scenario_id,
            targets_checksum=targets.checksum if targets is not None else None,
        )
        sink = self.sink
        sink.save_run(record)
        driver = RunDriver(self, ctx, record, EventStream(ctx.run_id, None, None))
        ctx.advance(RunState.RUNNING)
        ctx.progress.begin_step()
        boundary = ToolBoundary(ctx, backends=registry, store=self.canonical, sink=sink, breaker=self.breaker, pool=self.runtime.pool)
        try:
            outcome = boundary.call(ToolCallRequest(name=name, arguments=arguments, call_id="cli", step_index=0))
        except Exception as exc:
            record.error = redact(f"{type(exc).__name__}: {str(exc)[:500]}")
            ctx.advance(RunState.FAILED)
            driver.finish("FAILED", "NONE", None, str(FallbackType.INTERNAL_ERROR))
            raise
        ctx.advance(RunState.COMPLETED)
        driver.finish("SUCCESS", "NONE", None, None)
        return outcome, ctx

    # -- a whole run -----------------------------------------------------------------------
    def diagnose(
        self,
        question: str,
        *,
        scenario: Scenario | None = None,
        targets: LoadedTargets | None = None,
        alert: AlertPayload | Alert | dict[str, Any] | None = None,
        model: str | Model | None = None,
        listeners: list[Listener] | None = None,
        session_id: str | None = None,
        cancellation: RunCancellation | None = None,
        language: str | None = None,
        on_model_step: Callable[[ModelStepInfo], None] | None = None,
        run_id: str | None = None,
        principal: str | None = None,
    ) -> RunOutcome:
        """Run one request to a safe end; never raises for run failures (they become fallbacks).

        With an alert (AIOps mode) and no question, the question is built from the primary
        alert in the alert's language; with a question too, the question leads and the alert
        is context. A malformed alert raises AlertError before the run starts. With `targets`
        the run reads the live backends of that targets file (built once per runtime), on the
        wall clock, and records the file's checksum. `run_id` is the run's id when the caller
        gave it out before the run started (the service answers a webhook with it); `principal`
        is who asked (the service's API key id; default `cli`).
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
        registry, scope = self._scope(scenario, targets)
        ctx = RunContext(
            session_id=session_id or str(uuid.uuid4()),
            scope=scope,
            budget=self.budget(scenario),
            language="zh" if lang == "zh" else "en",
            clock=scenario.now if scenario is not None else None,
        )
        if run_id:
            ctx.run_id = run_id
        if principal:
            ctx.principal = principal
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
            principal=ctx.principal,
            deadline_at=ctx.deadline,
            alert=payload.trace(limits.stored_related_alerts) if payload is not None else None,
            targets_checksum=targets.checksum if targets is not None else None,
        )
        sink.save_run(record)
        events.emit("metadata", {"session_id": ctx.session_id, "run_id": ctx.run_id})
        driver = RunDriver(self, ctx, record, events)
        driver.out.alert = payload
        plan = RunPlan(
            question=question,
            model=agent_model,
            backends=registry,
            alert=payload,
            incident=scenario is not None or targets is not None or payload is not None,
            evidence=scenario is not None or targets is not None,
            on_model_step=on_model_step,
        )
        with driver.traced(plan):  # the run's OpenTelemetry span (a no-op unless tracing is on)
            try:
                driver.run(plan)
            except RunCancelled:
                if not ctx.lifecycle.terminal:
                    driver.cancelled()
            except Exception as exc:  # a bug or a store failure still ends in a fallback
                record.error = redact(f"{type(exc).__name__}: {str(exc)[:500]}")
                driver.fallback(FallbackType.INTERNAL_ERROR, status="FAILED")
        out = driver.out
        out.events = [{"seq": e.seq, "type": e.type, "data": e.data} for e in events.events]
        return out


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


def memory_harness(settings: Settings, **parts: Any) -> Harness:
    """A harness on a runtime whose trace goes to memory (tests, benchmarks); `parts` as
    `Runtime.from_settings` takes them (canonical, knowledge, breakers, ...)."""
    parts.setdefault("sink", MemoryTraceSink())
    return Harness(Runtime.from_settings(settings, **parts))
