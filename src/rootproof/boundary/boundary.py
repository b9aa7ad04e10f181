"""ToolBoundary: the interceptor chain every tool call passes, in the documented order (README "How a run goes").

 1 run active                      RUN_INACTIVE       REJECTED
 2 progress protocol (this step)   RUN_INACTIVE       REJECTED
 3 tool known, allowed, read-only  TOOL_NOT_ALLOWED   REJECTED
 4 arguments validate              INVALID_ARGUMENTS  REJECTED
 5 scope: duplicate / per-tool cap DUPLICATE_SCOPE / SCOPE_SATURATED  REJECTED
 6 run budget                      BUDGET_EXHAUSTED   REJECTED
 7 circuit breaker per backend     CIRCUIT_OPEN       REJECTED
   and target (the resolved mount)
 8 execute with a timeout          TIMED_OUT / BACKEND_ERROR  TIMED_OUT / FAILED
 9 project, redact, flag, record   —                  READY

Checks 1-7 run one call at a time (deterministic under parallel calls); admitted calls of a
step execute in parallel, on the runtime's tool pool. `BackendUnavailable`, a plain
`BackendError`, a timeout and an unexpected exception count toward the breaker of the resolved
backend and target; `BackendQueryError` (the system answered: bad query, missing extension)
is a FAILED call too but does not.
"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ValidationError

from rootproof.backends.registry import BackendRegistry, Resolved
from rootproof.boundary.provenance import untrusted_spans
from rootproof.boundary.safety import is_instruction_like, redact, redact_value
from rootproof.boundary.store import CanonicalInvocation, CanonicalStore, InvocationStatus
from rootproof.boundary.views import audit_record, control_view, model_observation
from rootproof.diagnosis.findings import Ref, analyze
from rootproof.errors import BackendError, BackendQueryError
from rootproof.limits import clip_text
from rootproof.observability.otel import OTHER_TOOL, ToolSpan
from rootproof.run.context import RunContext
from rootproof.run.events import EventStream
from rootproof.run.records import TraceSink
from rootproof.tools.base import TOOLS, ToolBackend, ToolDefinition, window_start
from rootproof.tools.refs import (
    NO_EVIDENCE_PATH,
    EvidenceRef,
    EvidenceStatus,
    canonical_json,
    ref_items,
)

__all__ = ["CircuitBreaker", "RefusalCode", "ToolBoundary", "ToolCallRequest", "ToolOutcome", "scope_key"]


class RefusalCode(StrEnum):
    """Stable refusal codes of the boundary."""

    RUN_INACTIVE = "RUN_INACTIVE"
    TOOL_NOT_ALLOWED = "TOOL_NOT_ALLOWED"
    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    DUPLICATE_SCOPE = "DUPLICATE_SCOPE"
    SCOPE_SATURATED = "SCOPE_SATURATED"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    CIRCUIT_OPEN = "CIRCUIT_OPEN"
    TIMED_OUT = "TIMED_OUT"
    BACKEND_ERROR = "BACKEND_ERROR"


@dataclass(frozen=True, kw_only=True)
class ToolCallRequest:
    """A call the model asked for."""

    name: str
    arguments: dict[str, Any] | str
    call_id: str = ""
    step_index: int = 0


@dataclass(frozen=True, kw_only=True)
class ToolOutcome:
    """What the loop gets back for one call."""

    invocation: CanonicalInvocation
    observation: dict[str, Any]
    control: dict[str, Any]
    call_id: str

    @property
    def new_evidence(self) -> bool:
        """READY and executed (not refused, not deduplicated)."""
        return self.invocation.status is InvocationStatus.READY and self.invocation.evidence_status != EvidenceStatus.DEDUPLICATED


class CircuitBreaker:
    """Breakers by key (one per backend and target: `postgres`, `postgres:orders-db`): a key
    opens after `threshold` consecutive failures and half-opens after `cooldown_s`."""

    def __init__(self, threshold: int = 3, cooldown_s: float = 30.0) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self._lock = threading.Lock()
        self._failures: dict[str, int] = {}
        self._opened: dict[str, float] = {}

    def allows(self, backend: str) -> bool:
        """False while the backend's circuit is open."""
        with self._lock:
            opened = self._opened.get(backend)
            if opened is None:
                return True
            if time.monotonic() - opened >= self.cooldown_s:
                del self._opened[backend]
                self._failures[backend] = self.threshold - 1  # half-open: one more failure reopens
                return True
            return False

    def record(self, backend: str, ok: bool) -> None:
        """Count a success (resets) or a failure (may open)."""
        with self._lock:
            if ok:
                self._failures[backend] = 0
                return
            n = self._failures.get(backend, 0) + 1
            self._failures[backend] = n
            if n >= self.threshold:
                self._opened[backend] = time.monotonic()


def _terms(query: str) -> list[str]:
    out: list[str] = []
    rest = query
    while '"' in rest:
        before, _, after = rest.partition('"')
        phrase, closed, rest = after.partition('"')
        out.extend(before.split())
        if closed:
            if phrase.strip():
                out.append(" ".join(phrase.lower().split()))
        else:
            out.extend(phrase.split())
    out.extend(rest.split())
    return sorted({t.lower() for t in out if t})


def _storable(value: Any, depth: int = 0) -> Any:
    """Raw (unvalidated) arguments as every store can keep them: text without NUL or lone
    surrogates and at most 1000 characters, finite numbers, at most 50 items and 8 levels."""
    if isinstance(value, str):
        return clip_text(value.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00"), 1000)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict | list) and depth >= 8:
        return "…"
    if isinstance(value, dict):
        return {_storable(str(k)): _storable(v, depth + 1) for k, v in list(value.items())[:50]}
    if isinstance(value, list):
        return [_storable(v, depth + 1) for v in value[:50]]
    return value


def scope_key(tool: str, args: BaseModel, now: datetime) -> str:
    """Tool name + canonical JSON of the normalised arguments (terms sorted, windows resolved
    against `now`: the run's fixed clock, or its start time on the wall clock)."""
    data = args.model_dump(mode="json", exclude_none=True)
    data.pop("limit", None)
    data.pop("offset", None)
    if "query" in data and tool != "lookup_knowledge":
        data["query"] = _terms(str(data["query"]))
    elif "query" in data:
        data["query"] = " ".join(str(data["query"]).lower().split())
    if "since" in data:
        start = window_start(now, str(data.pop("since")))
        data["window"] = [start.isoformat(), now.isoformat()]
    data.pop("top_k", None)
    return f"{tool}:{canonical_json(data)}"


class ToolBoundary:
    """Runs tool calls of one run through the interceptor chain."""

    def __init__(
        self,
        ctx: RunContext,
        *,
        backends: BackendRegistry | Mapping[str, ToolBackend],
        store: CanonicalStore,
        sink: TraceSink | None = None,
        events: EventStream | None = None,
        breaker: CircuitBreaker | None = None,
        tools: Mapping[str, ToolDefinition] | None = None,
        pool: ThreadPoolExecutor | None = None,
    ) -> None:
        """`backends`: a registry, or mount key → backend. `tools`: the run's definitions
        (default: the registry's, with a `target` argument where a system has several).
        `pool`: where backend calls run (the runtime's); without one, each call gets a thread
        of its own."""
        self.ctx = ctx
        self.backends = backends if isinstance(backends, BackendRegistry) else BackendRegistry(backends)
        self.store = store
        self.sink = sink
        self.events = events
        self.breaker = breaker or CircuitBreaker()
        self.tools = dict(tools) if tools is not None else self.backends.tools(TOOLS)
        self._pool = pool
        self._lock = threading.Lock()
        self._scopes: dict[str, str] = {}
        self._executed: dict[str, int] = {}
        self.outcomes: list[ToolOutcome] = []

    # -- public ---------------------------------------------------------------------------
    def call(self, request: ToolCallRequest) -> ToolOutcome:
        """Run one call through the chain."""
        return self.call_many([request])[0]

    def call_many(self, requests: list[ToolCallRequest]) -> list[ToolOutcome]:
        """Check each call in order; execute the admitted ones in parallel (a sequential tool's calls one
        after another, in request order); return outcomes in order. Each call is an `execute_tool`
        span of the run (a no-op unless tracing is on), from its admission to its outcome."""
        with ExitStack() as stack:
            telemetry = self.ctx.telemetry
            spans = [stack.enter_context(telemetry.execute_tool(r.name if r.name in self.tools else OTHER_TOOL, r.call_id)) for r in requests]
            return self._call_many(requests, spans)

    def _call_many(self, requests: list[ToolCallRequest], spans: list[ToolSpan]) -> list[ToolOutcome]:
        admitted: list[tuple[int, CanonicalInvocation, ToolDefinition, BaseModel]] = []
        outcomes: list[ToolOutcome | None] = [None] * len(requests)
        for i, req in enumerate(requests):
            inv, tool, args = self._admit(req)
            if tool is None or args is None:
                outcomes[i] = self._finish(inv, req.call_id, spans[i])
            else:
                admitted.append((i, inv, tool, args))
        if len(admitted) == 1:
            i, inv, tool, args = admitted[0]
            outcomes[i] = self._finish(self._execute(inv, tool, args), requests[i].call_id, spans[i])
        elif admitted:
            # One lane per call, except that a sequential tool's calls share one lane in request
            # order: which of two lookups in a step gets a card must not depend on thread timing.
            lanes: dict[str, list[tuple[int, CanonicalInvocation, ToolDefinition, BaseModel]]] = {}
            lane_of: dict[int, str] = {}
            for item in admitted:
                lane_of[item[0]] = item[2].name if item[2].sequential else f"#{item[0]}"
                lanes.setdefault(lane_of[item[0]], []).append(item)
            # Lanes get their own short-lived threads: a lane waits on backend calls submitted to
            # the pool, so running lanes on that same pool could leave no thread for the calls.
            pool = ThreadPoolExecutor(max_workers=min(8, len(lanes)), thread_name_prefix="tool")
            try:
                futures = {lane: pool.submit(self._run_lane, items) for lane, items in lanes.items()}
                for i, *_ in admitted:
                    outcomes[i] = self._finish(futures[lane_of[i]].result()[i], requests[i].call_id, spans[i])
            finally:
                pool.shutdown(wait=False)
        return [o for o in outcomes if o is not None]

    def _run_lane(
        self, items: list[tuple[int, CanonicalInvocation, ToolDefinition, BaseModel]]
    ) -> dict[int, CanonicalInvocation]:
        return {i: self._execute(inv, tool, args) for i, inv, tool, args in items}

    # -- chain ----------------------------------------------------------------------------
    def _new(self, req: ToolCallRequest) -> CanonicalInvocation:
        return CanonicalInvocation(
            invocation_id="inv-" + uuid.uuid4().hex[:12],
            run_id=self.ctx.run_id,
            session_id=self.ctx.session_id,
            step_index=req.step_index,
            tool_name=req.name,
            arguments=_storable(req.arguments),  # replaced by the validated arguments once they validate
            scope_key=None,
            status=InvocationStatus.REJECTED,
        )

    @staticmethod
    def _refuse(inv: CanonicalInvocation, code: RefusalCode, message: str) -> CanonicalInvocation:
        inv.status = InvocationStatus.REJECTED
        inv.refusal_code = str(code)
        inv.message = message
        return inv

    def _admit(self, req: ToolCallRequest) -> tuple[CanonicalInvocation, ToolDefinition | None, BaseModel | None]:
        inv = self._new(req)
        ctx = self.ctx
        # 1 run active
        if not ctx.active:
            msg = "The run is no longer active (cancelled, ended or past its deadline); do not call tools."
            return self._refuse(inv, RefusalCode.RUN_INACTIVE, msg), None, None
        # 2 progress protocol
        if req.step_index != ctx.progress.step_index:
            return (
                self._refuse(inv, RefusalCode.RUN_INACTIVE, f"This call claims step {req.step_index} but the run is at step {ctx.progress.step_index}; only calls of the current step run."),
                None,
                None,
            )
        # 3 tool known, allowed, read-only
        tool = self.tools.get(req.name)
        if tool is None or not tool.read_only or req.name not in ctx.scope.allowed_tools:
            allowed = ", ".join(sorted(ctx.scope.allowed_tools))
            return self._refuse(inv, RefusalCode.TOOL_NOT_ALLOWED, f"Tool '{req.name}' is not allowed in this run; allowed tools: {allowed}."), None, None
        # 4 arguments validate
        raw = req.arguments
        if isinstance(raw, str):
            try:
                raw = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError as exc:
                return self._refuse(inv, RefusalCode.INVALID_ARGUMENTS, f"Arguments are not valid JSON ({exc.msg}); send a JSON object matching the tool's schema."), None, None
            except (ValueError, RecursionError):  # a number of thousands of digits, arrays nested thousands deep
                return self._refuse(inv, RefusalCode.INVALID_ARGUMENTS, "Arguments are not usable JSON (a number too long or nesting too deep); send a JSON object matching the tool's schema."), None, None
        if not isinstance(raw, dict):
            return self._refuse(inv, RefusalCode.INVALID_ARGUMENTS, "Arguments must be a JSON object matching the tool's schema."), None, None
        try:
            args = tool.args_model.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"]) or "(root)"
            return self._refuse(inv, RefusalCode.INVALID_ARGUMENTS, f"Invalid arguments: {loc}: {err['msg']}. Fix the arguments and call again."), None, None
        inv.arguments = args.model_dump(mode="json", exclude_none=True)
        # 5 scope (windows against the run's clock, else its start: a repeat is a repeat on the wall clock too)
        key = scope_key(req.name, args, ctx.clock or ctx.started_at)
        inv.scope_key = key
        with self._lock:
            earlier = self._scopes.get(key)
            if earlier is not None:
                return self._refuse(inv, RefusalCode.DUPLICATE_SCOPE, f"The same query already ran as invocation {earlier}; cite {earlier} instead of calling again."), None, None
            cap = ctx.budget.calls_per_tool
            # A system with several targets has the per-tool limit per target: two Redis of one
            # targets file are two systems to look at, not one.
            target = getattr(args, "target", None)
            counted = req.name if not isinstance(target, str) else f"{req.name}:{target}"
            if self._executed.get(counted, 0) >= cap:
                where = "" if counted == req.name else f" on target '{target}'"
                return self._refuse(inv, RefusalCode.SCOPE_SATURATED, f"Tool '{req.name}' reached its limit of {cap} calls{where} in this run; use the evidence already gathered or another tool."), None, None
            # 6 run budget
            if ctx.time_left() <= 0.05:
                return self._refuse(inv, RefusalCode.BUDGET_EXHAUSTED, "No time is left before the run's deadline; write the draft now."), None, None
            refused = ctx.usage.try_take_tool_call(req.name, ctx.budget)
            if refused is not None:
                return self._refuse(inv, RefusalCode.BUDGET_EXHAUSTED, f"The run's budget is used up ({refused}); write the draft from the evidence gathered."), None, None
            # 7 circuit breaker of the backend and target that would serve the call
            where = self._breaker_key(tool, args)
            if not self.breaker.allows(where):
                ctx.usage.refund_tool_call(req.name)
                return self._refuse(inv, RefusalCode.CIRCUIT_OPEN, f"The {where} backend failed repeatedly and is paused; use other tools or write the draft."), None, None
            self._scopes[key] = inv.invocation_id
            self._executed[counted] = self._executed.get(counted, 0) + 1
        return inv, tool, args

    def _resolve(self, tool: ToolDefinition, args: BaseModel) -> Resolved | None:
        target = getattr(args, "target", None)
        return self.backends.resolve(tool.backend, target if isinstance(target, str) else None)

    def _breaker_key(self, tool: ToolDefinition, args: BaseModel) -> str:
        resolved = self._resolve(tool, args)
        return resolved.key if resolved is not None else tool.backend

    def _execute(self, inv: CanonicalInvocation, tool: ToolDefinition, args: BaseModel) -> CanonicalInvocation:
        ctx = self.ctx
        resolved = self._resolve(tool, args)
        t0 = time.monotonic()
        if resolved is None:
            inv.status = InvocationStatus.FAILED
            inv.refusal_code = str(RefusalCode.BACKEND_ERROR)
            inv.message = f"No {tool.backend} backend is configured for '{tool.name}'; use other tools."
            self._release_scope(inv)
            return inv
        timeout = max(0.0, min(ctx.budget.tool_timeout_s, ctx.time_left()))
        key = resolved.key
        # On the pool so a timeout or a cancellation can stop waiting for the call.
        pool = self._pool or ThreadPoolExecutor(max_workers=1, thread_name_prefix="backend")
        future: Future[Any] = pool.submit(resolved.backend.call, tool.name, args, now=ctx.now, run_id=ctx.run_id)
        deadline = time.monotonic() + timeout
        try:
            while True:
                remaining = deadline - time.monotonic()
                done, _ = wait([future], timeout=max(0.0, min(0.05, remaining)), return_when=FIRST_COMPLETED)
                if done:
                    break
                if ctx.cancellation.cancelled:
                    inv.status = InvocationStatus.FAILED
                    inv.refusal_code = str(RefusalCode.RUN_INACTIVE)
                    inv.message = "The run was cancelled while this call was running."
                    self._release_scope(inv)
                    return inv
                if remaining <= 0:
                    inv.status = InvocationStatus.TIMED_OUT
                    inv.refusal_code = str(RefusalCode.TIMED_OUT)
                    inv.message = f"The call took longer than {timeout:.1f}s; narrow the query (service, level, since, terms)."
                    self.breaker.record(key, ok=False)
                    self._release_scope(inv)
                    return inv
            try:
                out = future.result()
            except BackendQueryError as exc:  # the system answered: this query failed, the backend is fine
                return self._fail(inv, None, f"The query failed: {exc}. Change the arguments (kind, query, metric, since) or use another tool.")
            except BackendError as exc:  # BackendUnavailable, or a backend that does not say
                return self._fail(inv, key, f"The backend failed: {exc}. Try another tool or a narrower query.")
            except Exception as exc:  # a backend bug must not kill the run
                return self._fail(inv, key, f"The backend failed unexpectedly ({type(exc).__name__}). Try another tool.")
        finally:
            inv.duration_ms = int((time.monotonic() - t0) * 1000)
            if pool is not self._pool:
                pool.shutdown(wait=False)  # its thread ends when the call returns
        self.breaker.record(key, ok=True)
        self._project(inv, tool, out.json(), out.data_source, out.ref_sources, out.details, out.evidence_status)
        return inv

    def _fail(self, inv: CanonicalInvocation, breaker_key: str | None, message: str) -> CanonicalInvocation:
        """FAILED / BACKEND_ERROR; counts toward the breaker `breaker_key` unless it is None."""
        inv.status = InvocationStatus.FAILED
        inv.refusal_code = str(RefusalCode.BACKEND_ERROR)
        inv.message = redact(message)  # a driver's error may quote a connection string
        if breaker_key is not None:
            self.breaker.record(breaker_key, ok=False)
        self._release_scope(inv)
        return inv

    def _release_scope(self, inv: CanonicalInvocation) -> None:
        with self._lock:
            if inv.scope_key and self._scopes.get(inv.scope_key) == inv.invocation_id:
                del self._scopes[inv.scope_key]

    def _project(
        self,
        inv: CanonicalInvocation,
        tool: ToolDefinition,
        result: dict[str, Any],
        data_source: str,
        ref_sources: dict[str, str],
        details: dict[str, Any],
        evidence_status: str | None,
    ) -> None:
        result = redact_value(result)
        # Each path with its text (`ref_text` of the path, read without parsing the path back).
        items = ref_items(tool.name, result)
        if not items and evidence_status != EvidenceStatus.DEDUPLICATED and "no_evidence" not in result:
            result["no_evidence"] = f"{tool.name} found no match for {canonical_json(inv.arguments)}"
        refs: list[EvidenceRef] = []
        for path, text in items:
            refs.append(
                EvidenceRef(
                    raw_path=path,
                    text=text,
                    data_source=ref_sources.get(path, data_source),
                    instruction_like=is_instruction_like(text),
                    untrusted_spans=untrusted_spans(tool.name, text),
                )
            )
        if not refs and evidence_status != EvidenceStatus.DEDUPLICATED:
            refs.append(EvidenceRef(raw_path=NO_EVIDENCE_PATH, text=str(result["no_evidence"]), data_source=data_source))
        inv.result = result
        inv.evidence_refs = refs
        # The analyzers read the whole result (not the bounded view): their findings travel with
        # the observation, the refs they name shown first. Text that reads as instructions is
        # never read by them.
        kind = inv.arguments.get("kind") if isinstance(inv.arguments, dict) else None
        found = analyze(tool.name, str(kind) if kind else None, result, [Ref(r.raw_path, r.text, tuple(r.untrusted_spans or ())) for r in refs if not r.instruction_like])
        if found:
            details = {**details, "findings": [f.as_dict() for f in found]}
        inv.details = details
        inv.status = InvocationStatus.READY
        if evidence_status:
            inv.evidence_status = evidence_status
        else:
            inv.evidence_status = str(EvidenceStatus.EVIDENCE_FOUND if items else EvidenceStatus.NO_EVIDENCE)
        sources = {r.data_source for r in refs} or {data_source}
        inv.data_source = "mock" if "mock" in sources else (data_source if data_source in sources else sorted(sources)[0])
        inv.result_bytes = len(canonical_json(result).encode())

    def _finish(self, inv: CanonicalInvocation, call_id: str, span: ToolSpan) -> ToolOutcome:
        if inv.status is InvocationStatus.READY and inv.evidence_status != EvidenceStatus.DEDUPLICATED:
            self.ctx.progress.record_evidence()
        self.store.put(inv)
        obs = model_observation(inv, self.ctx.budget.observation_bytes)
        control = control_view(inv)
        if self.sink is not None:
            self.sink.add_invocation(audit_record(inv, obs))
        if self.events is not None:
            self.events.emit("tool", control)
        outcome = ToolOutcome(invocation=inv, observation=obs, control=control, call_id=call_id)
        with self._lock:
            self.outcomes.append(outcome)
        span.outcome(inv)
        return outcome
