"""The ReAct agent loop: model step → tool calls through the ToolBoundary → observations → next step.

Ends at a valid draft, a budget, the deadline, cancellation or a provider failure. Max steps end
gracefully: a final no-tools step asks for the draft. A model step runs in a helper thread so that
cancellation (Ctrl-C, SIGTERM, a client gone) ends the run at once, even while a slow model
server has not answered; the abandoned answer is ignored. A provider failure is recorded as that
step's `agent_step` row (its message, secrets removed) and ends the run MODEL_UNAVAILABLE, or
DEADLINE_EXCEEDED when the run's deadline is what stopped the attempts.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from rootproof.agent.draft import DiagnosisDraft, parse_draft
from rootproof.agent.models.base import (
    AssistantMessage,
    Message,
    Model,
    ModelRequest,
    ModelTurn,
    SystemMessage,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
    map_strings,
)
from rootproof.agent.models.compact import compact_draft_schema, estimate_tokens
from rootproof.boundary.boundary import ToolBoundary, ToolCallRequest
from rootproof.boundary.safety import redact
from rootproof.boundary.store import InvocationStatus
from rootproof.errors import BudgetExhausted, ModelError, ModelOutputError, ModelUnavailable, RunCancelled
from rootproof.run.context import RunCancellation, RunContext
from rootproof.run.records import ReasoningAuditRecord, StepRecord, TraceSink
from rootproof.taxonomy import Taxonomy

__all__ = ["CancellableModel", "LoopEnd", "LoopResult", "ModelStepInfo", "draft_note", "fit_prompt_budget", "refusal_note", "run_agent"]

LoopEnd = Literal["DRAFT", "NO_DRAFT", "BUDGET_EXHAUSTED", "DEADLINE_EXCEEDED", "MODEL_UNAVAILABLE", "CANCELLED"]
SUMMARY_CAP = 600
DEFAULT_PROMPT_TOKEN_BUDGET = 6000
SHORT_REFS = 3
"""Refs an observation keeps when shortened to fit the prompt budget."""
MAX_NOTE_INVOCATIONS = 20
"""Invocations the draft note lists at most."""
SHORT_REF_CHARS = 240
"""Characters of each ref's text an observation keeps when shortened."""
CANCEL_POLL_S = 0.05
"""How often a waiting model step looks at the run's cancellation, seconds."""


@dataclass(kw_only=True)
class LoopResult:
    """How the loop ended."""

    end: LoopEnd
    draft: DiagnosisDraft | None = None
    raw_draft: dict[str, Any] | str | None = None
    steps: int = 0
    detail: str = ""
    """Why the loop ended, for the trace (a provider's error message, secrets removed)."""
    model_status: int | None = None
    """The model server's HTTP status when a provider failure ended the loop."""
    messages: list[Message] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class ModelStepInfo:
    """What one model step cost, for progress lines (never stored: the trace has `agent_step`)."""

    step_index: int
    mode: str
    input_tokens: int
    output_tokens: int
    estimated: bool
    seconds: float
    first_token_s: float | None
    calls: int
    draft: bool
    note: str | None = None

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of the step (generation after the first token when streamed)."""
        gen = self.seconds - (self.first_token_s or 0.0)
        return self.output_tokens / gen if gen > 0 else 0.0


def _shorten(content: str, level: int) -> str:
    """An older observation cut to fit the prompt: its ids kept, at most `SHORT_REFS` refs of
    `SHORT_REF_CHARS` each (level 1), or none (level 2). A ref's text is cut from its end, so an
    excerpt taken from what is kept is still a substring of the ref."""
    try:
        obs = json.loads(content)
    except ValueError:
        return content[: SHORT_REF_CHARS * 2]
    if not isinstance(obs, dict):
        return content[: SHORT_REF_CHARS * 2]
    refs = obs.get("refs")
    if isinstance(refs, list):
        keep = [] if level >= 2 else refs[:SHORT_REFS]
        cut = []
        for r in keep:
            if isinstance(r, dict) and isinstance(r.get("text"), str):
                r = {**r, "text": r["text"][:SHORT_REF_CHARS]}
            cut.append(r)
        obs["refs"] = cut
        obs["omitted"] = int(obs.get("omitted") or 0) + len(refs) - len(cut)
        obs["shortened"] = "to fit the prompt budget; every ref of this invocation stays citable by raw_path"
        obs.pop("hint", None)
    return json.dumps(obs, ensure_ascii=False)


def _message_tokens(m: Message) -> int:
    text = getattr(m, "content", None) or ""
    calls = getattr(m, "tool_calls", ())
    extra = sum(len(json.dumps(c.arguments, ensure_ascii=False)) + len(c.name) for c in calls) if calls else 0
    return estimate_tokens(text) + extra // 3 + 4


def fit_prompt_budget(messages: list[Message], overhead_tokens: int, budget: int) -> int:
    """Shorten tool results in `messages`, in place, oldest first, until the estimated prompt
    (messages plus `overhead_tokens` for tool and draft schemas) fits `budget`; the newest
    batch of results is cut last. Returns the estimated prompt tokens after."""
    total = overhead_tokens + sum(_message_tokens(m) for m in messages)
    if total <= budget:
        return total
    for level in (1, 2):
        for i, m in enumerate(messages):
            if total <= budget:
                return total
            if not isinstance(m, ToolResultMessage):
                continue
            short = _shorten(m.content, level)
            if len(short) < len(m.content):
                before = _message_tokens(m)
                messages[i] = dataclasses.replace(m, content=short)
                total += _message_tokens(messages[i]) - before
    return total


def refusal_note(outcomes: list[Any], uncalled: list[str] | None = None) -> str:
    """The plain message after a step whose calls were all refused: what, why, what instead
    (`uncalled`: the offered tools this run has not called yet)."""
    parts = []
    for o in outcomes:
        inv = o.invocation
        parts.append(f"{inv.tool_name[:64]} was refused ({inv.refusal_code or inv.status}: {(inv.message or 'no reason given')[:300]})")
    return (
        "None of your calls of this step ran: " + "; ".join(parts) + ". Do not repeat a refused call. "
        "Cite the refs of the earlier invocation it names, call a different tool or query, "
        "or, if you have enough evidence, submit the draft with submit_draft." + uncalled_hint(uncalled)
    )


def uncalled_hint(uncalled: list[str] | None) -> str:
    """The sentence naming the offered tools this run has not called yet (empty when none)."""
    return f" Tools not called yet: {', '.join(uncalled)}." if uncalled else ""


def draft_note(boundary: ToolBoundary) -> str:
    """The message that asks a language model for the draft: the invocations it may cite, each
    with its tool and ref paths (never their texts: those are in the observations)."""
    lines = []
    for o in boundary.outcomes:
        inv = o.invocation
        if inv.status is not InvocationStatus.READY:
            continue
        paths = [r.raw_path for r in inv.evidence_refs]
        shown = ", ".join(paths[:3]) + (f" … {paths[-1]} ({len(paths)} refs)" if len(paths) > 3 else "")
        lines.append(f"- {inv.invocation_id} ({inv.tool_name}): {shown}")
    cite = "\n".join(lines[:MAX_NOTE_INVOCATIONS]) if lines else "- none: no call returned evidence, so no claim can cite anything; say so under limitations"
    return (
        "Gathering is over. Submit the DiagnosisDraft now with submit_draft. The invocations you may cite "
        "(copy the excerpt verbatim from that ref's text in its observation):\n" + cite
    )


def _uncalled(tools: list[ToolSpec], boundary: ToolBoundary) -> list[str]:
    ran = {o.invocation.tool_name for o in boundary.outcomes if o.invocation.status is InvocationStatus.READY}
    return [t.name for t in tools if t.name not in ran]


def _summary(messages: list[Message]) -> str:
    last = messages[-1]
    content = getattr(last, "content", "") or ""
    return f"{len(messages)} messages; last {last.role}: {content[:SUMMARY_CAP]}"


def _output_summary(turn: ModelTurn) -> str:
    parts = []
    if turn.text:
        parts.append(turn.text[:SUMMARY_CAP])
    for c in turn.tool_calls:
        args = c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments, ensure_ascii=False)
        parts.append(f"call {c.name}({args[:200]})")
    if isinstance(turn.draft, str):
        parts.append(f"draft submitted, not JSON: {turn.draft[:SUMMARY_CAP]}")
    elif turn.draft is not None:
        parts.append("draft submitted")
    if turn.usage.estimated:
        parts.append("tokens estimated (the server reported no usage)")
    if turn.note:
        parts.append(turn.note)
    return " | ".join(parts)[: SUMMARY_CAP * 2]


def _budget_spent(ctx: RunContext) -> bool:
    u, b = ctx.usage, ctx.budget
    return u.tool_calls >= b.tool_calls or u.tokens >= b.tokens or u.model_calls >= b.model_calls


class CancellableModel:
    """Wraps a `Model`: each step runs in a helper thread and ends at once, raising `RunCancelled`,
    when the run is cancelled before the model answered (the late answer is dropped)."""

    def __init__(self, model: Model, cancellation: RunCancellation) -> None:
        self.inner = model
        self.name = model.name
        self._cancellation = cancellation

    def step(self, request: ModelRequest) -> ModelTurn:
        """The inner model's turn, or `RunCancelled` as soon as the run is cancelled."""
        if self._cancellation.cancelled:
            raise RunCancelled(f"cancelled before the model step ({self._cancellation.reason})")
        box: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                box["turn"] = self.inner.step(request)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=work, name="model-step", daemon=True).start()
        while not done.wait(CANCEL_POLL_S):
            if self._cancellation.cancelled:
                raise RunCancelled(f"cancelled while the model was answering ({self._cancellation.reason})")
        if "error" in box:
            raise box["error"]
        turn: ModelTurn = box["turn"]
        try:
            return _without_surrogates(turn)
        except RecursionError:
            raise ModelOutputError(f"{self.name}: the answer is nested too deeply") from None


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _plain(value: Any) -> Any:
    return map_strings(value, lambda text: _SURROGATE.sub("\ufffd", text))


def _without_surrogates(turn: ModelTurn) -> ModelTurn:
    """The turn with every lone surrogate (a model's stray `\\ud800` escape) as U+FFFD: such text
    can be neither stored nor printed, so it would end the run INTERNAL_ERROR."""
    return dataclasses.replace(
        turn,
        text=_plain(turn.text),
        reasoning=_plain(turn.reasoning),
        draft=_plain(turn.draft),
        note=_plain(turn.note),
        tool_calls=[dataclasses.replace(c, id=_plain(c.id), name=_plain(c.name), arguments=_plain(c.arguments)) for c in turn.tool_calls],
    )


def _model_failure_step(ctx: RunContext, sink: TraceSink | None, step: int, messages: list[Message], detail: str, duration: int) -> None:
    if sink is not None:
        sink.add_step(
            StepRecord(
                run_id=ctx.run_id,
                session_id=ctx.session_id,
                step_index=step,
                model_input=_summary(messages),
                model_output=f"model error: {detail}"[: SUMMARY_CAP * 2],
                duration_ms=duration,
            )
        )


def run_agent(
    ctx: RunContext,
    model: Model,
    boundary: ToolBoundary,
    *,
    system_prompt: str,
    user_prompt: str,
    tools: list[ToolSpec],
    sink: TraceSink | None = None,
    taxonomy: Taxonomy | None = None,
    prompt_token_budget: int = DEFAULT_PROMPT_TOKEN_BUDGET,
    on_step: Callable[[ModelStepInfo], None] | None = None,
    max_output_tokens: int | None = None,
) -> LoopResult:
    """Drive the model until it submits a draft or the run must stop.

    `taxonomy` (the built-in one plus the run's cards) gives the draft schema's enums and checks
    the draft. The model is offered the compact draft schema (`compact_draft_schema`); what it
    returns is validated against the full `DiagnosisDraft`. Before each step of a context-limited
    model (a language model) older tool results are shortened until the estimated prompt fits
    `prompt_token_budget`. `on_step` hears what
    each model step cost (progress lines). `max_output_tokens` caps each answer (a draft cut
    short does not parse: the repair turn, then NO_DRAFT).
    """
    messages: list[Message] = [SystemMessage(content=system_prompt), UserMessage(content=user_prompt)]
    steps = model if isinstance(model, CancellableModel) else CancellableModel(model, ctx.cancellation)
    schema = compact_draft_schema(taxonomy)
    fits_budget = bool(getattr(steps.inner, "context_limited", False))
    announced = False
    overhead = estimate_tokens(json.dumps([schema, [t.parameters for t in tools], [t.description for t in tools]], ensure_ascii=False))
    repaired = False
    force_draft = False
    while True:
        if ctx.cancellation.cancelled:
            return LoopResult(end="CANCELLED", steps=ctx.progress.step_index + 1, messages=messages)
        if ctx.time_left() <= 0:
            return LoopResult(end="DEADLINE_EXCEEDED", steps=ctx.progress.step_index + 1, messages=messages)
        remaining = ctx.budget.model_calls - ctx.usage.model_calls
        if remaining <= 0:
            return LoopResult(end="BUDGET_EXHAUSTED", steps=ctx.progress.step_index + 1, detail="model calls used up", messages=messages)
        # A language model is asked for the draft with one call to spare, for the repair turn.
        draft_mode = force_draft or remaining <= (2 if fits_budget else 1) or ctx.progress.stalled or _budget_spent(ctx)
        if draft_mode and fits_budget and not announced:
            # A language model asked for the draft is told what it may cite (ids and paths only).
            announced = True
            messages.append(UserMessage(content=draft_note(boundary)))
        step = ctx.progress.begin_step()
        try:
            ctx.usage.take_model_call(ctx.budget)
        except BudgetExhausted as exc:
            return LoopResult(end="BUDGET_EXHAUSTED", steps=step, detail=str(exc), messages=messages)
        if fits_budget:
            fit_prompt_budget(messages, overhead if not draft_mode else estimate_tokens(json.dumps(schema)), prompt_token_budget)
        request = ModelRequest(
            messages=list(messages),
            tools=[] if draft_mode else tools,
            listed_tools=tools,
            max_output_tokens=max_output_tokens,
            draft_schema=schema,
            mode="draft" if draft_mode else "gather",
            time_left=ctx.time_left,
            step_index=step,
            tool_calls=ctx.budget.tool_calls,
            calls_per_tool=ctx.budget.calls_per_tool,
            cancelled=lambda: ctx.cancellation.cancelled,
        )
        t0 = time.monotonic()
        try:
            with ctx.telemetry.chat(steps.inner, step_index=step, mode=request.mode) as chat:
                answered = steps.step(request)
                chat.usage(answered.usage)
            stepped: ModelTurn | None = answered
        except RunCancelled:
            stepped = None
        except ModelUnavailable as exc:
            detail = redact(str(exc))
            _model_failure_step(ctx, sink, step, messages, detail, int((time.monotonic() - t0) * 1000))
            end: LoopEnd = "DEADLINE_EXCEEDED" if ctx.time_left() <= 0 else "MODEL_UNAVAILABLE"
            return LoopResult(end=end, steps=step + 1, detail=detail, model_status=exc.status, messages=messages)
        except ModelError as exc:
            stepped = ModelTurn(draft=f"<unusable model output: {exc}>")
        if stepped is None:
            return LoopResult(end="CANCELLED", steps=step + 1, detail="cancelled while the model was answering", messages=messages)
        turn = stepped
        duration = int((time.monotonic() - t0) * 1000)
        ctx.usage.add_tokens(turn.usage.total)
        if on_step is not None:
            on_step(
                ModelStepInfo(
                    step_index=step,
                    mode=request.mode,
                    input_tokens=turn.usage.input_tokens,
                    output_tokens=turn.usage.output_tokens,
                    estimated=turn.usage.estimated,
                    seconds=duration / 1000,
                    first_token_s=turn.first_token_s,
                    calls=len(turn.tool_calls),
                    draft=turn.draft is not None,
                    note=turn.note,
                )
            )
        if sink is not None:
            sink.add_step(
                StepRecord(
                    run_id=ctx.run_id,
                    session_id=ctx.session_id,
                    step_index=step,
                    model_input=_summary(messages),
                    model_output=_output_summary(turn),
                    has_text=bool(turn.text),
                    has_tool_call=bool(turn.tool_calls),
                    duration_ms=duration,
                    input_tokens=turn.usage.input_tokens,
                    output_tokens=turn.usage.output_tokens,
                )
            )
            plan = ", ".join(f"{c.name}({json.dumps(c.arguments, ensure_ascii=False) if not isinstance(c.arguments, str) else c.arguments})" for c in turn.tool_calls)
            sink.add_reasoning(
                ReasoningAuditRecord.build(
                    run_id=ctx.run_id,
                    session_id=ctx.session_id,
                    step_index=step,
                    reasoning=turn.reasoning,
                    assistant_text=turn.text,
                    tool_call_plan=plan or None,
                )
            )
        if ctx.cancellation.cancelled:
            return LoopResult(end="CANCELLED", steps=step + 1, messages=messages)
        if ctx.time_left() <= 0:
            return LoopResult(end="DEADLINE_EXCEEDED", steps=step + 1, messages=messages)
        if turn.draft is not None:
            draft, problem = parse_draft(turn.draft, taxonomy)
            if draft is not None:
                return LoopResult(end="DRAFT", draft=draft, raw_draft=turn.draft, steps=step + 1, messages=messages)
            if repaired:
                return LoopResult(end="NO_DRAFT", raw_draft=turn.draft, steps=step + 1, detail=problem or "", messages=messages)
            repaired = True
            force_draft = True
            messages.append(AssistantMessage(content=turn.text or "", reasoning=turn.reasoning))
            messages.append(UserMessage(content=f"Your draft is invalid: {problem}. Submit one corrected draft now with submit_draft."))
            ctx.progress.end_step(had_calls=False)
            continue
        if turn.refused:
            return LoopResult(end="NO_DRAFT", steps=step + 1, detail="the model refused", messages=messages)
        if draft_mode:
            if _budget_spent(ctx) and not force_draft:
                return LoopResult(end="BUDGET_EXHAUSTED", steps=step + 1, detail="no draft after the final no-tools step", messages=messages)
            if repaired or ctx.budget.model_calls - ctx.usage.model_calls <= 0:
                spent: LoopEnd = "BUDGET_EXHAUSTED" if _budget_spent(ctx) else "NO_DRAFT"
                return LoopResult(end=spent, steps=step + 1, detail="no draft when one was required", messages=messages)
            repaired = True
            messages.append(AssistantMessage(content=turn.text or "", reasoning=turn.reasoning))
            messages.append(UserMessage(content="Tools are closed. Submit the DiagnosisDraft now with submit_draft, citing only evidence you observed."))
            ctx.progress.end_step(had_calls=False)
            continue
        if turn.tool_calls:
            messages.append(AssistantMessage(content=turn.text, tool_calls=tuple(turn.tool_calls), reasoning=turn.reasoning))
            outcomes = boundary.call_many(
                [ToolCallRequest(name=c.name, arguments=c.arguments, call_id=c.id, step_index=step) for c in turn.tool_calls]
            )
            for o in outcomes:
                messages.append(ToolResultMessage(tool_call_id=o.call_id, name=o.invocation.tool_name, content=json.dumps(o.observation, ensure_ascii=False)))
            if outcomes and all(o.invocation.status is InvocationStatus.REJECTED for o in outcomes):
                messages.append(UserMessage(content=refusal_note(outcomes, _uncalled(tools, boundary))))
            ctx.progress.end_step(had_calls=True)
            if ctx.usage.tool_calls >= ctx.budget.tool_calls:
                force_draft = True
        else:
            messages.append(AssistantMessage(content=turn.text or "", reasoning=turn.reasoning))
            hint = uncalled_hint(_uncalled(tools, boundary))
            messages.append(UserMessage(content="Call the tools you need, or submit the draft with submit_draft." + hint))
            ctx.progress.end_step(had_calls=True)
