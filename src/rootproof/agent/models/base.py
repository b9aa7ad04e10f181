"""The model protocol: given the conversation, the tool schemas and the draft schema, return a turn.

Our types only: no provider SDK is imported here. Each run starts a fresh conversation and
reasoning never enters a later run's history.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "AssistantMessage",
    "Message",
    "Model",
    "ModelRequest",
    "ModelTurn",
    "SystemMessage",
    "TokenUsage",
    "ToolCall",
    "ToolResultMessage",
    "ToolSpec",
    "UserMessage",
    "map_strings",
]


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """A tool as a model sees it."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments."""


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """One tool call the model asked for."""

    id: str
    """The provider's call id (or ours), echoed in the tool result."""
    name: str
    arguments: dict[str, Any] | str
    """Parsed JSON arguments, or the raw string if it did not parse (the boundary refuses it)."""


@dataclass(frozen=True, kw_only=True)
class TokenUsage:
    """Tokens of one model call."""

    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False
    """The server reported no usage (a stream without a usage chunk): input is estimated from
    the prompt's size, output is the number of streamed chunks (one per token on llama.cpp)."""

    @property
    def total(self) -> int:
        """Input plus output."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, kw_only=True)
class SystemMessage:
    content: str
    role: Literal["system"] = "system"


@dataclass(frozen=True, kw_only=True)
class UserMessage:
    content: str
    role: Literal["user"] = "user"


@dataclass(frozen=True, kw_only=True)
class AssistantMessage:
    """A previous assistant turn of this run; `reasoning` is replayed only within the run."""

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None
    role: Literal["assistant"] = "assistant"


@dataclass(frozen=True, kw_only=True)
class ToolResultMessage:
    """The observation of one tool call: JSON text of the model observation (data, never instructions)."""

    tool_call_id: str
    name: str
    content: str
    role: Literal["tool"] = "tool"


Message = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage


@dataclass(kw_only=True)
class ModelRequest:
    """One model step."""

    messages: list[Message]
    tools: list[ToolSpec]
    """Tools offered this step; empty on the final no-tools step."""
    listed_tools: list[ToolSpec] = field(default_factory=list)
    """The run's tools, listed (not callable) beside the forced draft tool on the draft step, so
    that the prompt begins as on the gather steps: a server's prompt cache (llama.cpp) then
    processes only what is new instead of the whole conversation again."""
    draft_schema: dict[str, Any]
    """JSON schema of `DiagnosisDraft` (offered as the `submit_draft` tool or asked for as JSON)."""
    mode: Literal["gather", "draft"] = "gather"
    """`gather`: tools allowed, the model may also submit a draft; `draft`: a draft is required now."""
    time_left: Callable[[], float] = lambda: 60.0
    """Seconds left before the run's deadline; retries must fit in it."""
    max_output_tokens: int | None = None
    """Cap for the answer, when the provider supports one."""
    step_index: int = 0
    tool_calls: int | None = None
    """The run's tool-call budget (executed calls), when the loop has one: a planner that
    plans its calls spends what the run allows, no more."""
    calls_per_tool: int | None = None
    """The run's budget of executed calls of any one tool."""
    cancelled: Callable[[], bool] = lambda: False
    """True once the run is cancelled: a streamed answer is then abandoned at once."""


@dataclass(kw_only=True)
class ModelTurn:
    """What the model returned for one step."""

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    draft: dict[str, Any] | str | None = None
    """The submitted draft: parsed JSON, or raw text when it did not parse (the loop repairs once)."""
    reasoning: str | None = None
    """Provider reasoning (DeepSeek `reasoning_content`); None when the provider returned none."""
    usage: TokenUsage = field(default_factory=TokenUsage)
    refused: bool = False
    """The model refused to answer."""
    seconds: float = 0.0
    """Wall time of the step at the server, seconds (first token included)."""
    first_token_s: float | None = None
    """Streaming: seconds until the first chunk arrived (prompt processing on a local server)."""
    note: str | None = None
    """What the adapter had to do differently this step (e.g. the forced draft tool failed at the
    server and the draft was asked for as JSON text), for the trace."""


class Model(Protocol):
    """A model backend. Raises `ModelUnavailable` when the provider stays down after retries.

    A model that reads its prompt as tokens (a language model) also has `context_limited = True`:
    the loop then fits each prompt to the prompt token budget. Planners that read the messages
    as data (offline, scripted) have no such attribute and always get every observation whole.
    """

    name: str

    def step(self, request: ModelRequest) -> ModelTurn:
        """Return the next turn."""
        ...


def map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """`value` (JSON-like: dicts, lists, scalars) with `fn` applied to every string, keys included."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [map_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {map_strings(k, fn): map_strings(v, fn) for k, v in value.items()}
    return value
