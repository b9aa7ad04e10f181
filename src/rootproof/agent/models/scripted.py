"""Scripted model for tests: a list of steps (tool calls, drafts, failures), played in order."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rootproof.agent.models.base import ModelRequest, ModelTurn, TokenUsage, ToolCall
from rootproof.errors import ModelOutputError, ModelUnavailable

__all__ = ["ScriptedModel", "ScriptedStep"]


@dataclass(kw_only=True)
class ScriptedStep:
    """One scripted turn. `calls` are (name, arguments) pairs; `draft` may be a callable of the requests so far."""

    calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    draft: dict[str, Any] | str | Callable[[list[ModelRequest]], dict[str, Any] | str] | None = None
    text: str | None = None
    reasoning: str | None = None
    fail: str | None = None
    """`unavailable` raises ModelUnavailable; `malformed` raises ModelOutputError."""
    sleep_s: float = 0.0
    tokens: int = 100
    refused: bool = False


class ScriptedModel:
    """Plays `steps`; past the end it returns an empty turn."""

    name = "scripted"

    def __init__(self, steps: list[ScriptedStep]) -> None:
        self.steps = list(steps)
        self.requests: list[ModelRequest] = []

    def step(self, request: ModelRequest) -> ModelTurn:
        self.requests.append(request)
        idx = len(self.requests) - 1
        if idx >= len(self.steps):
            return ModelTurn(text="", usage=TokenUsage(input_tokens=10))
        s = self.steps[idx]
        if s.sleep_s:
            time.sleep(s.sleep_s)
        if s.fail == "unavailable":
            raise ModelUnavailable("scripted provider down")
        if s.fail == "malformed":
            raise ModelOutputError("scripted malformed output")
        draft = s.draft(self.requests) if callable(s.draft) else s.draft
        calls = [ToolCall(id=f"call_{idx}_{i}", name=n, arguments=a) for i, (n, a) in enumerate(s.calls)]
        return ModelTurn(
            text=s.text,
            tool_calls=calls,
            draft=draft,
            reasoning=s.reasoning,
            usage=TokenUsage(input_tokens=s.tokens // 2, output_tokens=s.tokens - s.tokens // 2),
            refused=s.refused,
        )
