"""OpenAI-compatible chat-completions backend (OpenAI, DeepSeek, vLLM, Ollama, llama.cpp servers).

The only module that imports the `openai` SDK. The SDK's own retries are off (`max_retries=0`):
retries, backoff and the deadline are ours, and every SDK exception becomes a `ModelError` here.

Provider quirks (see `QUIRKS`):

- llama.cpp rejects an assistant message with `content: null` (HTTP 500): send `""`.
- Some llama.cpp chat templates drop `role: "tool"` messages: also relay each tool result as a
  user message, after the run of tool messages it belongs to.
- DeepSeek thinking mode returns `reasoning_content` and requires it back on the assistant
  message of a tool-call turn; it rejects forced tool choices, so the draft is asked for as
  plain JSON in a final no-tools turn.
- llama-cpp-python's `chatml-function-calling` template also HTML-escapes content (the model
  copies `&quot;` back: its strings are unescaped), shows tools' parameters without their
  descriptions, cannot stream a `tool_choice: "auto"` step, and streams no usage.
- No provider here accepts `tool_choice: "required"`: it is never sent.

Completions are streamed where the server can (`Quirks.streaming`): the timeout is then on the
first token (`timeout_s`, which covers a local server's prompt processing) and on each gap
between chunks (`token_timeout_s`), and the run's deadline caps both. Tool schemas are offered
compacted and the draft schema is the compact one (`compact.py`): a server that turns a forced
tool's schema into a grammar cannot take the full schema's bounds.
"""

from __future__ import annotations

import email.utils
import html
import json
import logging
import random
import re
import socket
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx

try:
    import httpx2  # the HTTP client of openai >= 3 (a fork of httpx): its errors surface mid-stream
except ImportError:  # pragma: no cover - older SDKs use httpx itself
    httpx2 = httpx  # type: ignore[no-redef,misc]

try:
    import openai
except ImportError as exc:  # pragma: no cover - openai is a core dependency
    raise ImportError(
        "the OpenAI-compatible model needs the `openai` package: pip install 'openai>=3.50'"
    ) from exc

from rootproof.agent.models.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    ModelTurn,
    SystemMessage,
    TokenUsage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    map_strings,
)
from rootproof.agent.models.compact import compact_schema, estimate_tokens
from rootproof.boundary.safety import redact
from rootproof.errors import ConfigError, ModelOutputError, ModelUnavailable

__all__ = [
    "DRAFT_TOOL_DESCRIPTION",
    "DRAFT_TOOL_NAME",
    "OpenAICompatModel",
    "QUIRKS",
    "Provider",
    "Quirks",
    "extract_json_object",
]

log = logging.getLogger(__name__)

Provider = Literal["openai", "deepseek", "vllm", "ollama", "llamacpp", "auto"]

DRAFT_TOOL_NAME = "submit_draft"
DRAFT_TOOL_DESCRIPTION = (
    "Submit the final DiagnosisDraft. Every claim must cite evidence refs from observations of this run."
)
DRAFT_AS_JSON_PROMPT = (
    "Write the final DiagnosisDraft now, as one JSON object that validates against the JSON schema "
    "below, and nothing else (no tool calls, no prose around it). Every claim must cite evidence refs "
    "from observations of this run.\n\nJSON schema:\n{schema}"
)

_MAX_RETRY_AFTER_S = 30.0
"""A `Retry-After` longer than this is not honoured; our own backoff applies instead."""
_RETRYABLE_STATUS = frozenset({408, 409, 429})
"""Retryable 4xx statuses (timeouts, conflicts, rate limits); every 5xx is retryable too. Any
other 4xx (a rejected key, a bad request) fails at once: retrying cannot change the answer."""
_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


@dataclass(frozen=True, kw_only=True)
class Quirks:
    """What one provider needs beyond plain OpenAI chat completions (`QUIRKS` per provider;
    `rootproof models check` and the `auto` provider measure them on the server itself)."""

    empty_assistant_content: bool = False
    """Send `content: ""` rather than null on an assistant tool-call message (llama.cpp)."""
    relay_tool_results: bool = False
    """Also relay tool results as user messages (templates that drop `role: tool`)."""
    replay_reasoning: bool = False
    """Send `reasoning_content` back on assistant messages of this run (DeepSeek)."""
    forced_tool_choice: bool = True
    """The provider accepts forcing a named tool; if not, the draft is asked for as JSON text."""
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """Name of the output cap (OpenAI's reasoning models refuse the older `max_tokens`)."""
    html_escaped_prompt: bool = False
    """The server's chat template HTML-escapes message content (llama-cpp-python's
    `chatml-function-calling`): the model sees `&quot;` for `"`, so the strings it copies back
    (tool arguments, draft excerpts) are HTML-unescaped, which restores the original text."""
    streaming: bool = True
    """Stream completions (`stream: true`): the timeout applies to the first token and to the
    gap between tokens, not to the whole answer."""
    stream_usage: bool = True
    """Ask for token usage in the stream's last chunk (`stream_options.include_usage`)."""
    stream_auto_tools: bool = True
    """Streaming also works with `tool_choice: "auto"` (llama-cpp-python fails such a stream once
    the model calls a tool: a 200 whose stream ends with no chunk; those steps are sent whole)."""
    tool_description_in_parameters: bool = False
    """The server's chat template drops `function.description` (llama-cpp-python's
    `chatml-function-calling`): copy it into the parameters schema's `description`."""

    def active(self) -> list[str]:
        """Names of the quirks that differ from plain OpenAI chat completions."""
        plain = Quirks()
        return [f.name for f in fields(self) if getattr(self, f.name) != getattr(plain, f.name)]


QUIRKS: dict[str, Quirks] = {
    "openai": Quirks(max_tokens_field="max_completion_tokens"),
    "deepseek": Quirks(replay_reasoning=True, forced_tool_choice=False),
    "vllm": Quirks(),
    "ollama": Quirks(),
    "llamacpp": Quirks(
        empty_assistant_content=True,
        relay_tool_results=True,
        html_escaped_prompt=True,
        stream_usage=False,
        stream_auto_tools=False,
        tool_description_in_parameters=True,
    ),
}
"""The quirks of each named provider (`auto` measures them with `rootproof models check`'s probe)."""


@dataclass(frozen=True)
class _Retryable:
    """One failed attempt that may be retried."""

    status: str
    """What went wrong, for the final message (`HTTP 503: overloaded`, `request timed out`)."""
    retry_after: float | None = None
    """Seconds the server asked us to wait, if it said."""
    http_status: int | None = None
    """The HTTP status, when the server answered."""


class OpenAICompatModel:
    """A `Model` on an OpenAI-compatible `/chat/completions` endpoint (sync, streamed where it can).

    Tools are offered with `tool_choice: "auto"` while gathering; the draft is the
    `submit_draft` tool (forced by name in `draft` mode) or, for DeepSeek, a JSON answer.
    """

    name: str
    """`openai:<model>`."""
    context_limited = True
    """Its prompts are fitted to the prompt token budget (see `Model`)."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        model: str,
        provider: Provider = "openai",
        timeout_s: float = 60.0,
        max_retries: int = 3,
        temperature: float | None = 0.0,
        backoff_s: float = 0.5,
        quirks: Quirks | None = None,
        token_timeout_s: float | None = None,
    ) -> None:
        """Build the client; nothing is sent until `step`.

        Args:
            base_url: The API root, e.g. `https://api.deepseek.com/v1` or `http://127.0.0.1:8080/v1`.
            api_key: Bearer key; None for servers without authentication (the `OPENAI_API_KEY`
                environment variable is never read, so one provider's key cannot leak to another).
            model: The provider's model name.
            provider: Selects the quirks to apply.
            timeout_s: Per-request HTTP timeout in seconds (capped by the run's time left).
            max_retries: Retries after the first attempt on 429, 5xx, timeouts and connection errors.
            temperature: Sampling temperature; None sends none.
            backoff_s: First retry delay in seconds; doubles on each retry, plus up to 25 % jitter.
            quirks: The server's quirks as measured (`auto`); default: the named provider's.
            token_timeout_s: Streaming: longest gap between two chunks once the first arrived
                (default: `timeout_s`). `timeout_s` is then the wait for the first chunk.
        """
        if quirks is None and provider not in QUIRKS:
            raise ConfigError(
                f"model provider must be one of {', '.join(sorted(QUIRKS))} (got {provider!r})"
                + ("; auto is resolved by probing the server first" if provider == "auto" else "")
            )
        if timeout_s <= 0:
            raise ConfigError(f"model timeout_s must be > 0 (got {timeout_s})")
        if max_retries < 0:
            raise ConfigError(f"model max_retries must be >= 0 (got {max_retries})")
        if backoff_s < 0:
            raise ConfigError(f"model backoff_s must be >= 0 (got {backoff_s})")
        self.name = f"openai:{model}"
        self.model = model
        self.provider: Provider = provider
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.temperature = temperature
        self.backoff_s = backoff_s
        self.token_timeout_s = token_timeout_s if token_timeout_s is not None else timeout_s
        self._quirks = quirks if quirks is not None else QUIRKS[provider]
        self._forcing_failed = False
        """The server failed a forced `submit_draft` request: later drafts are asked for as JSON text."""
        self._api_key = api_key
        self._where = f"{provider} model {model!r} at {_redact_url(base_url)}"
        try:
            self._client = openai.OpenAI(
                base_url=base_url,
                # A placeholder keeps the SDK from reading OPENAI_API_KEY; servers without auth ignore it.
                api_key=api_key or "unused",
                max_retries=0,
                timeout=timeout_s,
            )
        except openai.OpenAIError as exc:
            raise ConfigError(f"cannot configure the {self._where}: {exc}") from None

    @property
    def quirks(self) -> Quirks:
        """The quirks this client applies (the provider's, or those measured for `auto`)."""
        return self._quirks

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def __enter__(self) -> OpenAICompatModel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- request -----------------------------------------------------------------------------

    def step(self, request: ModelRequest) -> ModelTurn:
        """Send one chat completion (streamed where the server can) and turn it into a `ModelTurn`.

        In draft mode the `submit_draft` tool is forced by name; when the server fails that
        request (a 4xx, or a 5xx such as a grammar it cannot build), the same turn is asked
        again as a JSON-text draft, and later draft turns of this client go straight to JSON text.

        Raises:
            ModelUnavailable: The provider failed (after retries for 408/409/429/5xx/timeouts, at
                once for other 4xx, its `status` set when the server answered), or the run has no
                time left for another attempt. Messages carry the provider's own error message
                with secrets removed.
            ModelOutputError: The provider answered 200 with something that is not a completion.
        """
        t0 = time.monotonic()
        forced = request.mode == "draft" and self._quirks.forced_tool_choice and not self._forcing_failed
        note = None
        body = self.build_request(request, as_json=not forced and request.mode == "draft")
        try:
            answer = self._send(body, request)
        except ModelUnavailable as exc:
            if not forced or exc.status not in _FORCING_FAILED or request.time_left() <= 0:
                raise
            # A server failing to force the tool (a grammar it cannot build) fails it every time;
            # a rejected request (400, 422) may be about this prompt only.
            self._forcing_failed = exc.status >= 500
            note = self._clean(f"the forced {DRAFT_TOOL_NAME} request failed at the server ({exc}); the draft was asked for as JSON text")
            log.warning("model %s: %s", self.name, note)
            answer = self._send(self.build_request(request, as_json=True), request)
        turn = self._parse(answer, request)
        turn.seconds = time.monotonic() - t0
        turn.note = note
        return turn

    def build_request(self, request: ModelRequest, *, as_json: bool | None = None) -> dict[str, Any]:
        """The chat-completions body (without `timeout`) this adapter sends for `request`.

        Tool schemas are compacted (`compact_schema`: no bounds, titles or defaults; the
        boundary still validates every argument against the full model). `as_json` asks for the
        draft as JSON text rather than the forced `submit_draft` tool (default: when the
        provider cannot force a tool).
        """
        messages = self._messages(request.messages)
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if as_json is None:
            as_json = request.mode == "draft" and (not self._quirks.forced_tool_choice or self._forcing_failed)
        if not request.draft_schema and not request.tools:
            pass  # a plain completion (router, semantic judge): no tools at all
        elif as_json:
            schema = json.dumps(request.draft_schema, ensure_ascii=False, separators=(",", ":"))
            messages.append({"role": "user", "content": DRAFT_AS_JSON_PROMPT.format(schema=schema)})
        else:
            seen: set[tuple[str, str]] = set()
            # The forced draft step lists the run's tools too (it cannot call them): its prompt
            # then starts as the gather steps' did, and a prompt cache is reused.
            offered = request.tools or (request.listed_tools if request.mode == "draft" else [])
            tools = [
                self._function(t.name, t.description, _described_once(compact_schema(t.parameters), seen))
                for t in offered
                if t.name != DRAFT_TOOL_NAME
            ]
            tools.append(self._function(DRAFT_TOOL_NAME, DRAFT_TOOL_DESCRIPTION, request.draft_schema))
            body["tools"] = tools
            if request.mode == "draft":
                body["tool_choice"] = {"type": "function", "function": {"name": DRAFT_TOOL_NAME}}
            else:
                body["tool_choice"] = "auto"
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if request.max_output_tokens is not None:
            body[self._quirks.max_tokens_field] = request.max_output_tokens
        if self._streams(body):
            body["stream"] = True
            if self._quirks.stream_usage:
                body["stream_options"] = {"include_usage": True}
        return body

    def _function(self, name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
        if self._quirks.tool_description_in_parameters and description:
            # The server's template shows the parameters only: say what the tool does there.
            parameters = {"description": description, **parameters}
        return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}

    def _streams(self, body: dict[str, Any]) -> bool:
        """Whether this body is sent with `stream: true`."""
        if not self._quirks.streaming:
            return False
        return self._quirks.stream_auto_tools or body.get("tool_choice") != "auto"

    def _messages(self, messages: list[Message]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        relays: list[dict[str, Any]] = []
        for msg in messages:
            if not isinstance(msg, ToolResultMessage) and relays:
                # Relays follow the whole run of tool messages: an assistant tool-call message
                # must be followed directly by its tool messages.
                out.extend(relays)
                relays = []
            if isinstance(msg, SystemMessage):
                out.append({"role": "system", "content": msg.content})
            elif isinstance(msg, UserMessage):
                out.append({"role": "user", "content": msg.content})
            elif isinstance(msg, AssistantMessage):
                out.append(self._assistant(msg))
            else:
                out.append({"role": "tool", "tool_call_id": msg.tool_call_id, "content": msg.content})
                if self._quirks.relay_tool_results:
                    relays.append(
                        {
                            "role": "user",
                            "content": f"Tool result for {msg.name} ({msg.tool_call_id}):\n{msg.content}",
                        }
                    )
        out.extend(relays)
        return out

    def _assistant(self, msg: AssistantMessage) -> dict[str, Any]:
        item: dict[str, Any] = {"role": "assistant"}
        if msg.tool_calls:
            item["content"] = msg.content or ("" if self._quirks.empty_assistant_content else None)
            item["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": call.arguments
                        if isinstance(call.arguments, str)
                        else json.dumps(call.arguments, ensure_ascii=False),
                    },
                }
                for call in msg.tool_calls
            ]
        else:
            item["content"] = msg.content or ""
        if self._quirks.replay_reasoning and msg.reasoning:
            # Only this run's messages ever reach the adapter: replay stays in the run.
            item["reasoning_content"] = msg.reasoning
        return item

    # -- transport and retries ---------------------------------------------------------------

    def _send(self, body: dict[str, Any], request: ModelRequest) -> _Answer:
        last = "no attempt"
        last_status: int | None = None
        for attempt in range(self.max_retries + 1):
            if request.cancelled():  # the caller has gone: no further attempt
                raise ModelUnavailable(f"{self._where}: the run was cancelled", status=last_status)
            left = request.time_left()
            if left <= 0:
                # The caller sees its own deadline passed (time_left <= 0) and reports that, not this.
                raise ModelUnavailable(
                    self._clean(
                        f"{self._where}: no time left in the run after {attempt} attempt(s) (last: {last})"
                    ),
                    status=last_status,
                )
            try:
                if body.get("stream"):
                    return self._stream(body, request, left)
                return _Answer.of(self._client.chat.completions.create(**body, timeout=min(self.timeout_s, left)), self._where)
            except openai.OpenAIError as exc:
                failure = self._classify(exc)
            except _StreamStalled as exc:
                failure = _Retryable(str(exc))
            except ValueError as exc:  # a JSON content type with a body that is not JSON
                raise ModelOutputError(f"{self._where}: the response is not valid JSON ({exc})") from None
            except (TypeError, AttributeError, KeyError, IndexError) as exc:  # fields of the wrong type or shape
                raise ModelOutputError(self._clean(f"{self._where}: the answer is not a chat completion ({type(exc).__name__}: {exc})")) from None
            except RecursionError:
                raise ModelOutputError(f"{self._where}: the response is nested too deeply") from None
            last, last_status = failure.status, failure.http_status
            if attempt == self.max_retries:
                break
            delay = self._delay(attempt, failure.retry_after)
            left = request.time_left()
            if delay >= left:
                raise ModelUnavailable(
                    self._clean(
                        f"{self._where}: {last} after {attempt + 1} attempt(s); the next retry in {delay:.2f} s "
                        f"would pass the run's deadline ({max(left, 0.0):.2f} s left)"
                    ),
                    status=last_status,
                )
            log.debug("model %s: %s, retry %d in %.2f s", self.name, last, attempt + 1, delay)
            time.sleep(delay)
        raise ModelUnavailable(
            self._clean(f"{self._where}: {last} after {self.max_retries + 1} attempt(s)"), status=last_status
        )

    def _stream(self, body: dict[str, Any], request: ModelRequest, left: float) -> _Answer:
        """One streamed attempt: the first token must come within `timeout_s`, each next one within
        `token_timeout_s`, all within the run's time left and while the run is not cancelled; a
        watchdog shuts the connection down when one does not (a blocked read is not woken by
        closing the response). An answer over `MAX_ANSWER_CHARS` is refused."""
        t0 = time.monotonic()
        first_by = t0 + min(self.timeout_s, left)
        end_by = t0 + left
        # The watchdog below enforces the deadlines; the HTTP read timeout is only a backstop
        # behind it (and the wait for the response headers, which some servers send late).
        backstop = min(max(self.timeout_s, self.token_timeout_s), left) + _BACKSTOP_S
        no_first = f"no first token within {self.timeout_s:g} s (ROOTPROOF_MODEL_TIMEOUT_S)"
        try:
            stream = self._client.chat.completions.create(**body, timeout=backstop)
        except openai.APITimeoutError:
            raise _StreamStalled(no_first) from None
        if time.monotonic() >= first_by:  # the headers alone came after the first token's deadline
            _shut(stream)
            raise _StreamStalled(no_first)
        state: dict[str, Any] = {"last": t0, "first": None, "stalled": ""}
        done = threading.Event()

        def watch() -> None:
            while not done.wait(_WATCH_POLL_S):
                now = time.monotonic()
                if request.cancelled():
                    state["stalled"] = "the run was cancelled"
                elif state["first"] is None and now >= first_by:
                    state["stalled"] = no_first
                elif state["first"] is not None and now - state["last"] >= self.token_timeout_s:
                    state["stalled"] = f"no token for {self.token_timeout_s:g} s after the answer began (ROOTPROOF_MODEL_TOKEN_TIMEOUT_S)"
                elif now >= end_by:
                    state["stalled"] = "the run's deadline passed while the answer was streaming"
                if state["stalled"]:
                    _shut(stream)
                    return

        def progressed() -> None:
            now = time.monotonic()
            if state["first"] is None:
                state["first"] = now - t0
            state["last"] = now

        threading.Thread(target=watch, name="model-stream-watchdog", daemon=True).start()
        answer = _Answer()
        try:
            if "text/event-stream" not in stream.response.headers.get("content-type", ""):
                # A server that ignores `stream: true` answers one whole completion (or an error page).
                try:
                    body_json = _whole(stream, progressed)
                except ModelOutputError as exc:
                    raise ModelOutputError(f"{self._where}: {exc}") from None
                whole = _Answer.of(body_json, self._where)
                whole.first_token_s = state["first"]
                return whole
            for chunk in stream:
                if answer.add(chunk):  # only chunks that carry text count as tokens
                    progressed()
                if answer.size > MAX_ANSWER_CHARS:
                    _shut(stream)
                    raise ModelOutputError(f"{self._where}: the answer is longer than {MAX_ANSWER_CHARS} characters")
        except (openai.OpenAIError, httpx.HTTPError, httpx2.HTTPError, OSError, ValueError) as exc:
            if state["stalled"]:
                raise _StreamStalled(state["stalled"]) from None
            if isinstance(exc, openai.APIStatusError):
                raise
            if type(exc) is openai.APIError:  # an error event inside the stream: the server failed this request
                raise ModelUnavailable(self._clean(f"{self._where}: the server failed the streamed answer: {exc}"), status=500) from None
            raise _StreamStalled(f"the stream broke off ({type(exc).__name__}: {exc})") from None
        finally:
            done.set()
            stream.close()
        if state["stalled"]:
            raise _StreamStalled(state["stalled"])
        answer.finish()
        if answer.finish_reason is None and answer.usage is None:
            # No `finish_reason`: the server cut the answer short (llama-cpp-python ends a stream
            # when another request arrives, or when it fails after the headers): retry it.
            raise _StreamStalled(f"the stream ended before the answer was finished ({answer.chunks} chunk(s), no finish_reason)")
        answer.first_token_s = state["first"]
        if answer.usage is None:
            prompt = json.dumps([body.get("messages"), body.get("tools")], ensure_ascii=False)
            answer.usage = TokenUsage(input_tokens=estimate_tokens(prompt), output_tokens=answer.chunks, estimated=True)
        return answer

    def _clean(self, message: str) -> str:
        """`message` without secrets: the configured key masked wherever the server echoed it, then `redact`."""
        if self._api_key and len(self._api_key) >= 4:
            message = message.replace(self._api_key, "***")
        return redact(message)

    def _classify(self, exc: openai.OpenAIError) -> _Retryable:
        """Return a retryable failure, or raise the final `ModelError` for this exception."""
        if isinstance(exc, openai.APITimeoutError):
            return _Retryable("request timed out")
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            return _Retryable(self._clean(f"connection error ({type(cause).__name__}: {cause})"))
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            detail = self._clean(_error_detail(exc))
            if status in _RETRYABLE_STATUS or status >= 500:
                return _Retryable(
                    f"HTTP {status}: {detail}",
                    retry_after=_retry_after(exc.response.headers),
                    http_status=status,
                )
            raise ModelUnavailable(f"{self._where}: HTTP {status}: {detail}", status=status) from None
        if isinstance(exc, openai.APIResponseValidationError):
            raise ModelOutputError(
                self._clean(f"{self._where}: the response does not match a chat completion: {exc}")
            ) from None
        raise ModelUnavailable(self._clean(f"{self._where}: {type(exc).__name__}: {exc}")) from None

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None and 0 <= retry_after <= _MAX_RETRY_AFTER_S:
            return retry_after
        base = self.backoff_s * 2.0**attempt
        return base + random.uniform(0, base / 4)

    # -- response ----------------------------------------------------------------------------

    def _parse(self, answer: _Answer, request: ModelRequest) -> ModelTurn:
        text = answer.text
        calls: list[ToolCall] = []
        draft: dict[str, Any] | str | None = None
        unescape = self._quirks.html_escaped_prompt
        for i, (raw_id, name, raw_args) in enumerate(answer.tool_calls):
            call_id = raw_id or f"call_{request.step_index}_{i}"
            arguments = _parse_arguments(raw_args)
            if unescape:
                arguments = _unescaped(arguments)
            if name == DRAFT_TOOL_NAME:
                if draft is None:
                    draft = arguments
                continue
            calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
        if draft is None and request.mode == "draft" and text and text.strip():
            found = extract_json_object(text)
            draft = (_unescaped(found) if unescape else found) if found is not None else text
        return ModelTurn(
            text=text,
            tool_calls=calls,
            draft=draft,
            reasoning=answer.reasoning,
            usage=answer.usage or TokenUsage(),
            refused=bool(answer.refusal),
            first_token_s=answer.first_token_s,
        )


MAX_ANSWER_CHARS = 512 * 1024
"""Longest answer accepted (text, tool arguments and reasoning together); a draft is at most 64 KiB."""
_FORCING_FAILED = frozenset({400, 422, 500, 501})
"""Statuses of a forced `submit_draft` request that mean the server cannot force it (a grammar
it cannot build, an unsupported `tool_choice`): the draft is then asked for as JSON text.
Rate limits, authentication, overload and gateway errors are not that."""
_BACKSTOP_S = 0.25
"""Seconds the HTTP read timeout of a streamed request runs after the watchdog's deadline."""
_WATCH_POLL_S = 0.05
"""How often the stream watchdog looks at the clock, seconds."""


def _described_once(schema: dict[str, Any], seen: set[tuple[str, str]]) -> dict[str, Any]:
    """`schema` without the property descriptions an earlier tool of the same request already
    showed for a property of the same name (`since`, `query`, `limit` are alike in every tool)."""
    props = schema.get("properties")
    if not isinstance(props, dict):
        return schema
    out = {}
    for name, prop in props.items():
        desc = prop.get("description") if isinstance(prop, dict) else None
        if isinstance(desc, str):
            if (name, desc) in seen:
                prop = {k: v for k, v in prop.items() if k != "description"}
            seen.add((name, desc))
        out[name] = prop
    return {**schema, "properties": out}


def _whole(stream: Any, progressed: Callable[[], None]) -> Any:
    """The body of a non-SSE answer to a streamed request, as attribute objects (read in pieces
    under the stream's watchdog, at most `MAX_ANSWER_CHARS` bytes)."""
    parts: list[bytes] = []
    size = 0
    for piece in stream.response.iter_bytes():
        progressed()
        size += len(piece)
        if size > MAX_ANSWER_CHARS:
            raise ModelOutputError(f"the answer is longer than {MAX_ANSWER_CHARS} bytes")
        parts.append(piece)
    raw = b"".join(parts)
    try:
        return json.loads(raw, object_hook=lambda d: types.SimpleNamespace(**d))
    except (ValueError, RecursionError):
        if "json" in stream.response.headers.get("content-type", ""):
            raise ModelOutputError("the response is not valid JSON") from None
        return raw.decode("utf-8", "replace")  # an error page: "no choices", with its start


class _StreamStalled(Exception):
    """A streamed answer missed its first-token or between-token deadline (retryable)."""


def _shut(stream: Any) -> None:
    """Shut the stream's socket down, which wakes the thread blocked reading it."""
    try:
        sock = stream.response.extensions["network_stream"].get_extra_info("socket")
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except (AttributeError, KeyError, OSError):
        pass
    try:
        stream.close()
    except Exception:  # noqa: BLE001 - closing a broken stream may fail any way; it is gone anyway
        pass


class _Answer:
    """One completion, from a whole response or assembled from stream chunks."""

    def __init__(self) -> None:
        self.text: str | None = None
        self.reasoning: str | None = None
        self.refusal: str | None = None
        self.tool_calls: list[tuple[str | None, str, str | dict[str, Any] | None]] = []
        self.usage: TokenUsage | None = None
        self.first_token_s: float | None = None
        self.chunks = 0
        self.size = 0
        """Characters received so far (text, tool arguments and reasoning)."""
        self.finish_reason: str | None = None
        self._pieces: dict[str, list[str]] = {}
        self._parts: dict[int, dict[str, Any]] = {}

    @classmethod
    def of(cls, response: Any, where: str) -> _Answer:
        """The answer in a whole (non-streamed) chat completion."""
        choices = getattr(response, "choices", None)
        if not choices:
            raise ModelOutputError(f"{where}: the response has no choices ({str(response)[:200]!r})")
        message = getattr(choices[0], "message", None)
        if message is None:
            raise ModelOutputError(f"{where}: the first choice has no message")
        out = cls()
        out.text = getattr(message, "content", None)
        out.reasoning = _reasoning(message)
        out.refusal = getattr(message, "refusal", None)
        for raw in getattr(message, "tool_calls", None) or []:
            fn = getattr(raw, "function", None)
            if fn is None:  # custom (non-function) tool calls are not ours
                continue
            name = getattr(fn, "name", None)
            if not isinstance(name, str):
                raise ModelOutputError(f"{where}: a tool call has no function name")
            out.tool_calls.append((getattr(raw, "id", None), name, getattr(fn, "arguments", None)))
        usage = getattr(response, "usage", None)
        out.usage = TokenUsage(
            input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        )
        return out

    def add(self, chunk: Any) -> bool:
        """Fold one stream chunk in; True when it carried text (content, arguments, reasoning).
        Pieces are kept in lists (`finish` joins them): a long answer costs linear time."""
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = TokenUsage(
                input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            )
        any_grew = False
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) != 0:
                continue
            if finish := getattr(choice, "finish_reason", None):
                self.finish_reason = str(finish)
            delta = getattr(choice, "delta", None)
            if delta is None:
                continue
            grew = False
            for key, piece in (("text", getattr(delta, "content", None)), ("refusal", getattr(delta, "refusal", None)), ("reasoning", _reasoning(delta))):
                if piece:
                    self._pieces.setdefault(key, []).append(_text(piece))
                    self.size += len(piece)
                    grew = grew or key != "refusal"
            for call in getattr(delta, "tool_calls", None) or []:
                part = self._parts.setdefault(int(getattr(call, "index", 0) or 0), {"id": None, "name": "", "arguments": []})
                part["id"] = part["id"] or getattr(call, "id", None)
                fn = getattr(call, "function", None)
                if fn is not None:
                    if getattr(fn, "name", None) and not part["name"]:
                        part["name"] = _text(fn.name)
                    if arguments := getattr(fn, "arguments", None):
                        part["arguments"].append(_text(arguments))
                        self.size += len(arguments)
                        grew = True
            self.chunks += grew
            any_grew = any_grew or grew
        return any_grew

    def finish(self) -> None:
        """Join the streamed pieces into `text`, `refusal`, `reasoning` and `tool_calls`."""
        for key, pieces in self._pieces.items():
            setattr(self, key, "".join(pieces))
        self.tool_calls = [(p["id"], p["name"], "".join(p["arguments"])) for _, p in sorted(self._parts.items()) if p["name"]]


def _text(value: Any) -> str:
    """A streamed piece that must be text; a server sending a number or an object there is not a chat server."""
    if not isinstance(value, str):
        raise TypeError(f"a streamed text field holds a {type(value).__name__}")
    return value


_ESCAPES = re.compile(r"&(?:quot|#34|#x22|apos|#39|#x27|lt|gt|amp);")


def _unescaped(value: Any) -> Any:
    """`value` with the escapes an HTML-escaping template writes (`&quot;`, `&#39;`, `&lt;`,
    `&gt;`, `&amp;`) turned back: what the model copied from an escaped prompt. Other `&…`
    text the model wrote itself (`?a=1&copy=2`) is left as it is."""
    return map_strings(value, lambda text: _ESCAPES.sub(lambda m: html.unescape(m.group()), text))


def extract_json_object(text: str) -> dict[str, Any] | None:
    """The JSON object in a model's text answer: fences stripped, else the outermost `{...}`."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    candidates = [stripped]
    start, end = stripped.find("{"), stripped.rfind("}")
    if start != -1 and end > start:
        candidates.append(stripped[start : end + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    if start != -1:
        # Trailing prose with braces of its own: decode the first object and ignore the rest.
        try:
            value, _ = json.JSONDecoder().raw_decode(stripped, start)
        except (ValueError, RecursionError):
            return None
        if isinstance(value, dict):
            return value
    return None


def _parse_arguments(raw: object) -> dict[str, Any] | str:
    """Parsed JSON object arguments, or the raw string when they are not a JSON object."""
    if isinstance(raw, dict):
        return raw
    text = raw if isinstance(raw, str) else ""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return value if isinstance(value, dict) else text


def _reasoning(message: Any) -> str | None:
    """`reasoning_content` as the provider returned it (not in the SDK's typed model), else None."""
    value = getattr(message, "reasoning_content", None)
    if value is None:
        extra = getattr(message, "model_extra", None) or {}
        value = extra.get("reasoning_content")
    return value if isinstance(value, str) and value else None


def _error_detail(exc: openai.APIStatusError) -> str:
    """The server's own error message when its body carries one."""
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return exc.message[:500]


def _retry_after(headers: Any) -> float | None:
    """Seconds from `retry-after-ms` or `Retry-After` (seconds or an HTTP date), else None."""
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(float(ms) / 1000.0, 0.0)
        value = headers.get("retry-after")
    except (AttributeError, ValueError):
        return None
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _redact_url(url: str) -> str:
    """The URL without credentials, query or fragment (safe for messages and logs)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
    except ValueError:
        return "<invalid URL>"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
