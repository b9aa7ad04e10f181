"""RunContext and its parts: budget, usage, cancellation, progress.

Every request gets a `RunContext` before any model is called. Every model call and tool call
first proves that it belongs to this run and that the run is still active.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from rootproof.errors import BudgetExhausted, DeadlineExceeded, RunCancelled
from rootproof.observability.otel import RunTelemetry
from rootproof.run.lifecycle import TERMINAL_STATES, RunLifecycle, RunState

__all__ = [
    "BudgetUsage",
    "ProgressTracker",
    "RunBudget",
    "RunCancellation",
    "RunContext",
    "ToolScope",
]

Language = Literal["en", "zh"]


@dataclass(frozen=True, kw_only=True)
class RunBudget:
    """Limits of one run."""

    model_calls: int = 8
    """Agent model calls."""
    tool_calls: int = 16
    """Executed tool calls (refused calls do not count)."""
    calls_per_tool: int = 4
    """Executed calls of one tool."""
    tokens: int = 60_000
    """Tokens over all model calls of the run (router, agent, judge)."""
    observation_bytes: int = 4096
    """Bytes of model observation per tool call."""
    deadline_s: float = 120.0
    """Seconds from the run's start to its deadline."""
    tool_timeout_s: float = 20.0
    """Per-call timeout of an evidence tool, seconds."""
    router_calls: int = 2
    """Router model calls: 1 call + 1 explicit retry."""
    router_timeout_s: float = 10.0
    """Router timeout, seconds."""
    judge_calls: int = 12
    """LLM semantic judge calls (1 per claim)."""


class BudgetUsage:
    """What the run has spent so far; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.model_calls = 0
        self.tool_calls = 0
        self.per_tool: dict[str, int] = {}
        self.tokens = 0
        self.router_calls = 0
        self.judge_calls = 0

    def add_tokens(self, n: int) -> None:
        """Count `n` tokens of any model call."""
        with self._lock:
            self.tokens += max(0, n)

    def take_model_call(self, budget: RunBudget) -> None:
        """Spend one agent model call or raise `BudgetExhausted`."""
        with self._lock:
            if self.model_calls >= budget.model_calls:
                raise BudgetExhausted(f"model_calls limit of {budget.model_calls} reached (model_calls={self.model_calls})")
            if self.tokens >= budget.tokens:
                raise BudgetExhausted(f"tokens limit of {budget.tokens} reached (tokens={self.tokens})")
            self.model_calls += 1

    def try_take_tool_call(self, tool: str, budget: RunBudget) -> str | None:
        """Spend one tool call; return None on success or which limit refused it."""
        with self._lock:
            if self.tool_calls >= budget.tool_calls:
                return f"tool_calls limit of {budget.tool_calls} reached (tool_calls={self.tool_calls})"
            if self.tokens >= budget.tokens:
                return f"tokens limit of {budget.tokens} reached (tokens={self.tokens})"
            self.tool_calls += 1
            self.per_tool[tool] = self.per_tool.get(tool, 0) + 1
            return None

    def refund_tool_call(self, tool: str) -> None:
        """Give back a call taken by a check that a later interceptor refused."""
        with self._lock:
            self.tool_calls -= 1
            self.per_tool[tool] -= 1

    def as_dict(self) -> dict[str, object]:
        """A snapshot for the trace."""
        with self._lock:
            return {
                "model_calls": self.model_calls,
                "tool_calls": self.tool_calls,
                "per_tool": dict(self.per_tool),
                "tokens": self.tokens,
                "router_calls": self.router_calls,
                "judge_calls": self.judge_calls,
            }


class RunCancellation:
    """Cooperative cancellation, safe across threads; callbacks interrupt work in flight."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.reason: str | None = None

    @property
    def cancelled(self) -> bool:
        """True once `cancel` was called."""
        return self._event.is_set()

    def cancel(self, reason: str = "cancelled") -> None:
        """Cancel the run (idempotent) and fire the registered callbacks once."""
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb()

    def on_cancel(self, cb: Callable[[], None]) -> None:
        """Register `cb` to run at cancellation (at once if already cancelled)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(cb)
                return
        cb()

    def wait(self, timeout: float) -> bool:
        """Block up to `timeout` seconds; True if cancelled meanwhile."""
        return self._event.wait(timeout)


class ProgressTracker:
    """Which model step is current, and how many steps in a row produced no new evidence."""

    STALL_LIMIT = 2

    def __init__(self) -> None:
        self.step_index = -1
        self.stalled_steps = 0
        self._new_evidence = False

    def begin_step(self) -> int:
        """Start a new model step and return its index."""
        self.step_index += 1
        self._new_evidence = False
        return self.step_index

    def record_evidence(self) -> None:
        """A call of the current step produced new evidence (READY, executed)."""
        self._new_evidence = True

    def end_step(self, had_calls: bool) -> None:
        """Close the step; a step whose calls were all refused or duplicated is stalled."""
        if had_calls and not self._new_evidence:
            self.stalled_steps += 1
        elif self._new_evidence:
            self.stalled_steps = 0

    @property
    def stalled(self) -> bool:
        """True after `STALL_LIMIT` stalled steps: stop offering tools, ask for the draft."""
        return self.stalled_steps >= self.STALL_LIMIT


@dataclass(frozen=True, kw_only=True)
class ToolScope:
    """Which tools and backends this run may use."""

    allowed_tools: frozenset[str]
    """Tool names the run may call."""
    backend: str = "snapshot"
    """`snapshot` (a scenario's frozen data) or `live`."""
    scenario_id: str | None = None
    """The scenario in scope, if any."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(kw_only=True)
class RunContext:
    """Identity, limits and state of one run."""

    session_id: str
    """The conversation (many runs)."""
    scope: ToolScope
    """Tools and backends of this run."""
    budget: RunBudget = field(default_factory=RunBudget)
    """Limits."""
    run_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    """This request (uuid4)."""
    language: Language = "en"
    """The user's language: fallbacks and answers follow it."""
    principal: str = "cli"
    """Who asked (API key role)."""
    clock: datetime | None = None
    """The run's clock for relative windows: a scenario's `now`, else the wall clock."""
    started_at: datetime = field(default_factory=_utcnow)
    """Wall-clock start."""
    usage: BudgetUsage = field(default_factory=BudgetUsage)
    cancellation: RunCancellation = field(default_factory=RunCancellation)
    lifecycle: RunLifecycle = field(default_factory=RunLifecycle)
    progress: ProgressTracker = field(default_factory=ProgressTracker)
    telemetry: RunTelemetry = field(default_factory=RunTelemetry)
    """This run's OpenTelemetry spans: a no-op unless tracing is on (the driver sets it; docs/observability.md)."""
    _t0: float = field(default_factory=time.monotonic)

    GRACE_S = 1.0

    @property
    def now(self) -> datetime:
        """The clock relative windows end at."""
        return self.clock or _utcnow()

    @property
    def deadline_monotonic(self) -> float:
        """The deadline on the monotonic clock."""
        return self._t0 + self.budget.deadline_s

    @property
    def deadline(self) -> datetime:
        """The deadline as a wall-clock time."""
        return datetime.fromtimestamp(self.started_at.timestamp() + self.budget.deadline_s, UTC)

    def time_left(self) -> float:
        """Seconds until the deadline (negative once passed)."""
        return self.deadline_monotonic - time.monotonic()

    def elapsed_ms(self) -> int:
        """Milliseconds since the run started."""
        return int((time.monotonic() - self._t0) * 1000)

    @property
    def active(self) -> bool:
        """Not cancelled, not terminal, deadline not passed."""
        return (
            not self.cancellation.cancelled
            and self.lifecycle.state not in TERMINAL_STATES
            and self.time_left() > 0
        )

    def ensure_active(self) -> None:
        """Raise `RunCancelled` or `DeadlineExceeded` (or `RunCancelled` if terminal) unless active."""
        if self.cancellation.cancelled:
            raise RunCancelled(f"run {self.run_id} was cancelled ({self.cancellation.reason})")
        if self.lifecycle.state in TERMINAL_STATES:
            raise RunCancelled(f"run {self.run_id} already ended ({self.lifecycle.state})")
        if self.time_left() <= 0:
            raise DeadlineExceeded(f"run {self.run_id} passed its deadline of {self.budget.deadline_s}s")

    def advance(self, state: RunState) -> None:
        """Move the lifecycle."""
        self.lifecycle.advance(state)
