"""Probe an OpenAI-compatible server: which quirks apply, and can rootproof run on it?

`probe_server` sends a handful of tiny requests (at most 16 output tokens each, prompts of a
few dozen tokens) over plain HTTP (httpx, not the SDK: the probe must see raw statuses, bodies
and SSE lines) and returns a `ProbeReport`: one `ProbeCheck` per check, the measured `Quirks`,
and whether a full run can work. It never raises for what the server does; every text it keeps
is redacted (the API key masked wherever a server echoes it). `rootproof models check` prints
the report; the `auto` provider (`ROOTPROOF_OPENAI_PROVIDER=auto`) applies its quirks.

What is measured (docs/models.md "Checking a model server"):

- `models`: `GET {base}/models` answers (a transport failure here means unreachable) and lists
  the model (another id is a warning: single-model servers list their own alias).
- `chat`: a plain chat completion returns a choice; `max_tokens`: kept unless the server
  rejects it, then `max_completion_tokens` is tried.
- `tools_auto`: a request offering `ping(host)` with `tool_choice: "auto"` is accepted.
- `forced_tool`: a request forcing `submit_draft` with the compact draft schema is accepted
  (else the draft is asked for as JSON text).
- `tool_messages`, `html_escape`, `tool_description`: the chat template seen through
  `usage.prompt_tokens` (tool results dropped, `"` escaped to `&quot;`, descriptions dropped).
- `null_content`: an assistant tool-call message with `content: null` is accepted.
- `streaming`, `stream_usage`, `stream_auto_tools`: SSE chunks ending `[DONE]`, a usage chunk
  when asked for, a streamed tool call with `tool_choice: "auto"`.
- `reasoning`: `reasoning_content` in any answer.

A quirk that cannot be measured (no usage reported, the model answered with a message where a
tool call was asked for) keeps the value of the provider guessed from the server's address and
`/models` listing.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from rootproof.agent.models.compact import compact_draft_schema
from rootproof.agent.models.openai_compat import DRAFT_TOOL_NAME, QUIRKS, Quirks, _redact_url
from rootproof.boundary.safety import redact
from rootproof.errors import ConfigError

__all__ = ["CheckStatus", "MAX_PROBE_TOKENS", "ProbeCheck", "ProbeReport", "probe_server"]

CheckStatus = Literal["ok", "quirk", "warning", "failed", "not measured", "skipped"]
"""`ok`: plain OpenAI behaviour; `quirk`: the server needs the quirk the check names; `warning`:
works, with a remark; `failed`: something a run needs does not work; `not measured`: the
answer could not tell (the guessed provider's value is kept); `skipped`: an earlier check failed."""

MAX_PROBE_TOKENS = 16
"""Output cap of every probe request (the server may be shared and slow)."""
_SAME_TOKENS = 2
"""Two prompts whose `prompt_tokens` differ by at most this count as the same prompt."""
_ESCAPE_MARGIN = 20
"""20 `"` characters costing more than this many tokens beyond one character: escaped."""
_DETAIL_CHARS = 200
"""Characters of a server's error message kept in a check's detail."""
_MAX_SSE_LINES = 2000
"""SSE lines read from one streamed answer at most (16 tokens take far fewer)."""

_PING_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Check that a host answers.",
        "parameters": {
            "type": "object",
            "properties": {"host": {"type": "string", "description": "host name"}},
            "required": ["host"],
        },
    },
}
_PING_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a network assistant. Use the functions you are given."},
    {"role": "user", "content": "Ping the host db1 with the ping function."},
]
_LONG_TOOL_RESULT = " ".join(f"line {i}: host db1 answered in {i + 3} ms, no packet lost." for i in range(8))
_LONG_DESCRIPTION = ("Check that a host answers on the network and report how long it took to answer. " * 4)[:300]
_MAX_TOKENS_REJECTED = re.compile(r"max_tokens|max_completion_tokens", re.IGNORECASE)
_GRAMMAR_ERROR = re.compile(r"grammar", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class ProbeCheck:
    """The outcome of one check."""

    name: str
    """The check: `models`, `chat`, `max_tokens`, `tools_auto`, `forced_tool`, ... (module docstring)."""
    status: CheckStatus
    """What it found (`CheckStatus`)."""
    detail: str
    """One line saying what was seen (statuses, token counts, the server's error message, redacted)."""
    quirk: str | None = None
    """The `Quirks` field this check measures, if any."""
    elapsed_s: float = 0.0
    """Seconds the check's requests took."""


@dataclass(frozen=True, kw_only=True)
class ProbeReport:
    """What `probe_server` found."""

    base_url: str
    """The server's API root, without credentials, query or fragment."""
    model: str
    """The model name the requests named."""
    reachable: bool
    """The server answered HTTP at all."""
    provider_guess: str
    """The provider guessed from the address and `/models` (`generic` if none): where the
    quirks that could not be measured come from."""
    checks: tuple[ProbeCheck, ...]
    """Every check, in the order run."""
    quirks: Quirks
    """The quirks to apply: measured where measured, else the guessed provider's."""
    measured: tuple[str, ...]
    """Names of the `Quirks` fields that were measured."""
    can_run: bool
    """A full run can work: reachable, chat completions, tool calls with `auto`, and either
    forced tools or the draft as plain JSON text (which any working chat completion allows)."""
    reason: str
    """Why (or why not), one line."""
    elapsed_s: float
    """Seconds the whole probe took."""

    def check(self, name: str) -> ProbeCheck | None:
        """The check named `name`, if it ran."""
        return next((c for c in self.checks if c.name == name), None)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (`rootproof models check --json`)."""
        return {
            "base_url": self.base_url,
            "model": self.model,
            "reachable": self.reachable,
            "can_run": self.can_run,
            "reason": self.reason,
            "provider_guess": self.provider_guess,
            "quirks": asdict(self.quirks),
            "active_quirks": self.quirks.active(),
            "measured": list(self.measured),
            "checks": [asdict(c) for c in self.checks],
            "elapsed_s": round(self.elapsed_s, 3),
        }


@dataclass
class _Answer:
    """One HTTP exchange: the status (None when no HTTP answer came), the JSON body, the error detail."""

    status: int | None
    body: Any = None
    detail: str = ""
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == 200 and isinstance(self.body, dict) and bool(self.body.get("choices"))

    def message(self) -> dict[str, Any]:
        try:
            msg = self.body["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            return {}
        return msg if isinstance(msg, dict) else {}

    def prompt_tokens(self) -> int | None:
        usage = self.body.get("usage") if isinstance(self.body, dict) else None
        value = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    def called(self, name: str) -> bool:
        calls = self.message().get("tool_calls") or []
        return any(isinstance(c, dict) and (c.get("function") or {}).get("name") == name for c in calls)

    def failure(self) -> str:
        """`HTTP 500: <message>`, or the transport failure."""
        if self.status is None:
            return self.detail
        if self.status == 200:
            return f"HTTP 200 without a choice ({self.detail})" if self.detail else "HTTP 200 without a choice"
        return f"HTTP {self.status}: {self.detail}" if self.detail else f"HTTP {self.status}"


@dataclass
class _Streamed:
    """One streamed answer: status, whether `[DONE]` came, what the chunks carried."""

    status: int | None
    detail: str = ""
    chunks: int = 0
    done: bool = False
    usage: bool = False
    tool_call: bool = False
    reasoning: bool = False
    broke: bool = False
    """The server answered 200, then the stream ended without `[DONE]` (the connection dropped
    or an error chunk came): llama-cpp-python fails a streamed auto tool call that way."""
    elapsed_s: float = 0.0

    def failure(self) -> str:
        if self.status is None:
            return self.detail
        if self.status == 200:
            return f"HTTP 200, then {self.detail or 'no [DONE]'} after {self.chunks} chunk(s)"
        return f"HTTP {self.status}: {self.detail}" if self.detail else f"HTTP {self.status}"


@dataclass
class _Prober:
    client: httpx.Client
    base: str
    model: str
    api_key: str | None
    timeout_s: float
    progress: Callable[[ProbeCheck], None] | None
    checks: list[ProbeCheck] = field(default_factory=list)
    measured: dict[str, Any] = field(default_factory=dict)
    max_tokens_field: str = "max_tokens"
    reasoning_seen: int = 0

    # -- transport -------------------------------------------------------------------------
    def clean(self, text: str) -> str:
        """One line fit to show: the key masked, secrets redacted, whitespace collapsed, capped."""
        if self.api_key and len(self.api_key) >= 4:
            text = text.replace(self.api_key, "***")
        text = " ".join(redact(text).split())
        return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"

    def transport_failure(self, exc: httpx.HTTPError) -> str:
        if isinstance(exc, httpx.TimeoutException):
            return f"no answer within {self.timeout_s:g} s ({type(exc).__name__})"
        cause = exc.__cause__ or exc
        return self.clean(f"connection failed ({type(exc).__name__}: {cause})")

    def error_detail(self, raw: bytes | str) -> str:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        try:
            body = json.loads(text)
        except (ValueError, RecursionError):
            return self.clean(text)
        if isinstance(body, dict):
            err = body.get("error", body.get("detail", body))
            if isinstance(err, dict) and isinstance(err.get("message"), str):
                return self.clean(err["message"])
            if isinstance(err, str):
                return self.clean(err)
        return self.clean(text)

    def get_models(self) -> _Answer:
        started = time.monotonic()
        try:
            response = self.client.get(f"{self.base}/models")
        except httpx.HTTPError as exc:
            return _Answer(None, detail=self.transport_failure(exc), elapsed_s=time.monotonic() - started)
        answer = _Answer(response.status_code, elapsed_s=time.monotonic() - started)
        try:
            answer.body = response.json()
        except (ValueError, RecursionError):
            answer.body = None
        if response.status_code != 200:
            answer.detail = self.error_detail(response.content)
        return answer

    def post(self, body: dict[str, Any]) -> _Answer:
        """One chat completion: `model` and the output cap added; reasoning noted."""
        payload = {"model": self.model, "temperature": 0, self.max_tokens_field: MAX_PROBE_TOKENS, **body}
        started = time.monotonic()
        try:
            response = self.client.post(f"{self.base}/chat/completions", json=payload)
        except httpx.HTTPError as exc:
            return _Answer(None, detail=self.transport_failure(exc), elapsed_s=time.monotonic() - started)
        answer = _Answer(response.status_code, elapsed_s=time.monotonic() - started)
        if response.status_code != 200:
            answer.detail = self.error_detail(response.content)
            return answer
        try:
            answer.body = response.json()
        except (ValueError, RecursionError):
            answer.detail = "the body is not JSON: " + self.clean(response.text)
            return answer
        if not answer.ok:
            answer.detail = self.clean(response.text)
        if answer.message().get("reasoning_content"):
            self.reasoning_seen += 1
        return answer

    def stream(self, body: dict[str, Any]) -> _Streamed:
        """One streamed chat completion, read to `[DONE]` (or the end of the body)."""
        payload = {"model": self.model, "temperature": 0, self.max_tokens_field: MAX_PROBE_TOKENS, "stream": True, **body}
        started = time.monotonic()
        out = _Streamed(None)
        try:
            with self.client.stream("POST", f"{self.base}/chat/completions", json=payload) as response:
                out.status = response.status_code
                if response.status_code != 200:
                    out.detail = self.error_detail(response.read())
                else:
                    self._read_sse(response.iter_lines(), out)
        except httpx.HTTPError as exc:
            out.detail = self.transport_failure(exc)
            if out.status == 200:  # the stream broke off: what came is kept, without [DONE]
                out.detail = f"the stream broke off: {out.detail}"
        if out.status == 200 and not out.done:
            out.broke = True
            out.detail = out.detail or "the stream ended without [DONE]"
        out.elapsed_s = time.monotonic() - started
        if out.reasoning:
            self.reasoning_seen += 1
        return out

    def _read_sse(self, lines: Iterator[str], out: _Streamed) -> None:
        for n, line in enumerate(lines):
            if n >= _MAX_SSE_LINES:
                out.detail = f"more than {_MAX_SSE_LINES} SSE lines"
                return
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                out.done = True
                return
            try:
                chunk = json.loads(data)
            except (ValueError, RecursionError):
                out.detail = "a chunk is not JSON: " + self.clean(data)
                continue
            if not isinstance(chunk, dict):
                continue
            out.chunks += 1
            if isinstance(chunk.get("usage"), dict) and chunk["usage"].get("prompt_tokens") is not None:
                out.usage = True
            if isinstance(chunk.get("error"), dict):
                out.broke = True
                out.detail = "an error chunk: " + self.error_detail(json.dumps(chunk))
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if isinstance(delta, dict):
                    out.tool_call = out.tool_call or bool(delta.get("tool_calls"))
                    out.reasoning = out.reasoning or bool(delta.get("reasoning_content"))

    # -- results ---------------------------------------------------------------------------
    def add(
        self, name: str, status: CheckStatus, detail: str, *, elapsed_s: float = 0.0, quirk: str | None = None, value: Any = None
    ) -> ProbeCheck:
        """Record a check; a measured quirk (`ok` or `quirk`) sets `value`."""
        check = ProbeCheck(name=name, status=status, detail=detail, quirk=quirk, elapsed_s=round(elapsed_s, 3))
        self.checks.append(check)
        if quirk is not None and status in ("ok", "quirk"):
            self.measured[quirk] = value
        if self.progress is not None:
            self.progress(check)
        return check

    def skip(self, names: list[tuple[str, str | None]], why: str) -> None:
        for name, quirk in names:
            self.add(name, "skipped", why, quirk=quirk)


# -- the checks -------------------------------------------------------------------------------


def _check_models(p: _Prober) -> tuple[_Answer, list[str]]:
    answer = p.get_models()
    ids: list[str] = []
    data = answer.body.get("data") if isinstance(answer.body, dict) else None
    for item in data if isinstance(data, list) else []:
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            ids.append(item["id"])
    if answer.status is None:
        p.add("models", "failed", f"unreachable: {answer.detail}", elapsed_s=answer.elapsed_s)
    elif answer.status != 200:
        p.add("models", "warning", f"GET /models answered {answer.failure()}", elapsed_s=answer.elapsed_s)
    elif p.model in ids:
        p.add("models", "ok", f"{p.model!r} is listed ({len(ids)} model(s))", elapsed_s=answer.elapsed_s)
    else:
        shown = ", ".join(repr(i) for i in ids[:5]) + (" …" if len(ids) > 5 else "")
        p.add(
            "models",
            "warning",
            f"{p.model!r} is not listed (listed: {shown or 'none'}); a single-model server may answer to any name",
            elapsed_s=answer.elapsed_s,
        )
    return answer, ids


def _check_chat(p: _Prober) -> _Answer:
    messages = [{"role": "user", "content": "Say OK."}]
    answer = p.post({"messages": messages})
    elapsed = answer.elapsed_s
    refused = answer.status is not None and 400 <= answer.status < 500 and bool(_MAX_TOKENS_REJECTED.search(answer.detail))
    first = answer
    if refused:
        p.max_tokens_field = "max_completion_tokens"
        answer = p.post({"messages": messages})
        elapsed += answer.elapsed_s
        if not answer.ok:
            p.max_tokens_field = "max_tokens"
    if answer.ok:
        text = str(answer.message().get("content") or "")
        p.add("chat", "ok", f"a plain chat completion answered ({len(text)} characters)", elapsed_s=elapsed)
    else:
        p.add("chat", "failed", f"a plain chat completion failed: {answer.failure()}", elapsed_s=elapsed)
    if refused and answer.ok:
        p.add("max_tokens", "quirk", f"max_tokens refused ({first.failure()}); max_completion_tokens works",
              quirk="max_tokens_field", value="max_completion_tokens")
    elif refused:
        p.add("max_tokens", "not measured", f"max_tokens refused ({first.failure()}); max_completion_tokens too",
              quirk="max_tokens_field")
    elif answer.ok:
        p.add("max_tokens", "ok", "max_tokens accepted", quirk="max_tokens_field", value="max_tokens")
    return answer


def _check_tools_auto(p: _Prober) -> _Answer:
    answer = p.post({"messages": _PING_MESSAGES, "tools": [_PING_TOOL], "tool_choice": "auto"})
    if not answer.ok:
        p.add("tools_auto", "failed", f"a tool-call request with tool_choice auto failed: {answer.failure()}", elapsed_s=answer.elapsed_s)
    elif answer.called("ping"):
        p.add("tools_auto", "ok", "accepted; the model called ping", elapsed_s=answer.elapsed_s)
    else:
        p.add("tools_auto", "ok", "accepted; the model answered with a message, not a tool call", elapsed_s=answer.elapsed_s)
    return answer


def _check_forced(p: _Prober) -> bool:
    tool = {
        "type": "function",
        "function": {"name": DRAFT_TOOL_NAME, "description": "Submit the final draft.", "parameters": compact_draft_schema()},
    }
    answer = p.post(
        {
            "messages": [{"role": "user", "content": "Submit an empty draft: nothing is known yet."}],
            "tools": [tool],
            "tool_choice": {"type": "function", "function": {"name": DRAFT_TOOL_NAME}},
        }
    )
    called = answer.called(DRAFT_TOOL_NAME)
    content = str(answer.message().get("content") or "")
    if answer.ok and (called or not _GRAMMAR_ERROR.search(content)):
        how = "the model called it" if called else "answered without a tool call"
        p.add("forced_tool", "ok", f"forcing {DRAFT_TOOL_NAME} with the compact draft schema works ({how})",
              elapsed_s=answer.elapsed_s, quirk="forced_tool_choice", value=True)
        return True
    failure = answer.failure() if not answer.ok else f"a grammar error: {p.clean(content)}"
    if answer.status is None and failure.startswith("connection failed"):
        # The failure this check exists for: a grammar the server cannot build can kill it.
        p.add("forced_tool", "failed", f"the server went away when {DRAFT_TOOL_NAME} was forced: {failure}",
              elapsed_s=answer.elapsed_s, quirk="forced_tool_choice", value=False)
        return False
    p.add("forced_tool", "quirk", f"forcing {DRAFT_TOOL_NAME} failed ({failure}); the draft is asked for as JSON text",
          elapsed_s=answer.elapsed_s, quirk="forced_tool_choice", value=False)
    return False


def _tool_conversation(content: str | None, result: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Ping db1."},
        {
            "role": "assistant",
            "content": content,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "ping", "arguments": '{"host": "db1"}'}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": result},
    ]


def _same_prompt(a: _Answer, b: _Answer) -> tuple[int, int] | str:
    """Both prompt token counts, or why they cannot be compared."""
    for x in (a, b):
        if not x.ok:
            return x.failure()
    ta, tb = a.prompt_tokens(), b.prompt_tokens()
    if ta is None or tb is None:
        return "the server reports no usage.prompt_tokens"
    return ta, tb


def _check_tool_messages(p: _Prober) -> bool:
    """Tool results dropped by the template; returns whether the `content: ""` conversation worked."""
    short = p.post({"messages": _tool_conversation("", "ok")})
    long = p.post({"messages": _tool_conversation("", _LONG_TOOL_RESULT)})
    elapsed = short.elapsed_s + long.elapsed_s
    got = _same_prompt(short, long)
    if isinstance(got, str):
        p.add("tool_messages", "not measured", f"a conversation with a tool message failed: {got}", elapsed_s=elapsed, quirk="relay_tool_results")
    elif abs(got[1] - got[0]) <= _SAME_TOKENS:
        p.add("tool_messages", "quirk", f"a {len(_LONG_TOOL_RESULT)}-character tool result adds no prompt token ({got[0]} vs {got[1]}): "
              "the template drops role tool; results are relayed as user messages", elapsed_s=elapsed, quirk="relay_tool_results", value=True)
    else:
        p.add("tool_messages", "ok", f"tool results reach the prompt ({got[0]} vs {got[1]} prompt tokens)",
              elapsed_s=elapsed, quirk="relay_tool_results", value=False)
    return short.ok


def _check_null_content(p: _Prober, empty_works: bool) -> None:
    answer = p.post({"messages": _tool_conversation(None, "ok")})
    if answer.ok:
        p.add("null_content", "ok", "an assistant tool-call message with content null is accepted",
              elapsed_s=answer.elapsed_s, quirk="empty_assistant_content", value=False)
    elif empty_works and answer.status is not None:
        p.add("null_content", "quirk", f"content null refused ({answer.failure()}) where content \"\" works: \"\" is sent",
              elapsed_s=answer.elapsed_s, quirk="empty_assistant_content", value=True)
    else:
        p.add("null_content", "not measured", f"content null failed ({answer.failure()}) and so did content \"\"",
              elapsed_s=answer.elapsed_s, quirk="empty_assistant_content")


def _check_html_escape(p: _Prober) -> None:
    one = p.post({"messages": [{"role": "user", "content": "a"}]})
    quotes = p.post({"messages": [{"role": "user", "content": '"' * 20}]})
    elapsed = one.elapsed_s + quotes.elapsed_s
    got = _same_prompt(one, quotes)
    if isinstance(got, str):
        p.add("html_escape", "not measured", got, elapsed_s=elapsed, quirk="html_escaped_prompt")
    elif got[1] - got[0] > _ESCAPE_MARGIN:
        p.add("html_escape", "quirk", f'20 " characters cost {got[1]} prompt tokens, 1 character {got[0]}: the template '
              "HTML-escapes content (&quot;); strings the model copies back are unescaped", elapsed_s=elapsed, quirk="html_escaped_prompt", value=True)
    else:
        p.add("html_escape", "ok", f'content is not escaped (20 " characters: {got[1]} prompt tokens, 1 character: {got[0]})',
              elapsed_s=elapsed, quirk="html_escaped_prompt", value=False)


def _check_tool_description(p: _Prober, forced: bool) -> None:
    choice: Any = {"type": "function", "function": {"name": "ping"}} if forced else "auto"

    def ask(description: str | None) -> _Answer:
        fn: dict[str, Any] = {"name": "ping", "parameters": _PING_TOOL["function"]["parameters"]}
        if description is not None:
            fn["description"] = description
        return p.post({"messages": _PING_MESSAGES, "tools": [{"type": "function", "function": fn}], "tool_choice": choice})

    bare, described = ask(None), ask(_LONG_DESCRIPTION)
    elapsed = bare.elapsed_s + described.elapsed_s
    got = _same_prompt(bare, described)
    if isinstance(got, str):
        p.add("tool_description", "not measured", got, elapsed_s=elapsed, quirk="tool_description_in_parameters")
    elif abs(got[1] - got[0]) <= _SAME_TOKENS:
        p.add("tool_description", "quirk", f"a {len(_LONG_DESCRIPTION)}-character function description adds no prompt token "
              f"({got[0]} vs {got[1]}): descriptions are copied into the parameters schema",
              elapsed_s=elapsed, quirk="tool_description_in_parameters", value=True)
    else:
        p.add("tool_description", "ok", f"function descriptions reach the prompt ({got[0]} vs {got[1]} prompt tokens)",
              elapsed_s=elapsed, quirk="tool_description_in_parameters", value=False)


def _check_streaming(p: _Prober) -> bool:
    messages = [{"role": "user", "content": "Say OK."}]
    got = p.stream({"messages": messages, "stream_options": {"include_usage": True}})
    elapsed = got.elapsed_s
    with_options = True
    if got.status is not None and 400 <= got.status < 500:
        with_options = False
        got = p.stream({"messages": messages})
        elapsed += got.elapsed_s
    if got.status is None:
        p.add("streaming", "not measured", f"the streamed request failed: {got.failure()}", elapsed_s=elapsed, quirk="streaming")
        return False
    if got.status != 200 or got.broke or not got.chunks:
        p.add("streaming", "quirk", f"streaming does not work ({got.failure()}): whole answers are awaited",
              elapsed_s=elapsed, quirk="streaming", value=False)
        return False
    p.add("streaming", "ok", f"stream: true answers {got.chunks} SSE chunk(s) ending [DONE]", elapsed_s=elapsed, quirk="streaming", value=True)
    if not with_options:
        p.add("stream_usage", "quirk", "stream_options is refused: usage is not asked for in streams", quirk="stream_usage", value=False)
    elif got.usage:
        p.add("stream_usage", "ok", "stream_options.include_usage yields a usage chunk", quirk="stream_usage", value=True)
    else:
        p.add("stream_usage", "quirk", "no usage chunk with stream_options.include_usage: token counts are estimated",
              quirk="stream_usage", value=False)
    return True


def _check_stream_auto_tools(p: _Prober) -> None:
    got = p.stream({"messages": _PING_MESSAGES, "tools": [_PING_TOOL], "tool_choice": "auto"})
    if (got.status is not None and got.status >= 500) or (got.broke and not got.tool_call):
        p.add("stream_auto_tools", "quirk", f"a streamed tool call with tool_choice auto failed ({got.failure()}): such requests are not streamed",
              elapsed_s=got.elapsed_s, quirk="stream_auto_tools", value=False)
    elif got.status == 200 and got.tool_call:
        p.add("stream_auto_tools", "ok", "a streamed tool call with tool_choice auto works", elapsed_s=got.elapsed_s, quirk="stream_auto_tools", value=True)
    elif got.status == 200:
        p.add("stream_auto_tools", "not measured", "the model answered with a message, not a tool call", elapsed_s=got.elapsed_s, quirk="stream_auto_tools")
    else:
        p.add("stream_auto_tools", "not measured", f"the streamed request failed: {got.failure()}", elapsed_s=got.elapsed_s, quirk="stream_auto_tools")


def _check_reasoning(p: _Prober) -> None:
    if p.reasoning_seen:
        p.add("reasoning", "quirk", f"reasoning_content in {p.reasoning_seen} answer(s): it is sent back on this run's messages",
              quirk="replay_reasoning", value=True)
    else:
        p.add("reasoning", "ok", "no reasoning_content in any answer", quirk="replay_reasoning", value=False)


# -- the probe --------------------------------------------------------------------------------


def _guess_provider(base_url: str, models: _Answer) -> str:
    """The provider the address or the `/models` listing names, else `generic` (plain OpenAI)."""
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    if host == "api.openai.com":
        return "openai"
    if host.endswith("deepseek.com"):
        return "deepseek"
    data = models.body.get("data") if isinstance(models.body, dict) else None
    owners = {str(m.get("owned_by", "")).lower() for m in data if isinstance(m, dict)} if isinstance(data, list) else set()
    if "llamacpp" in owners:
        return "llamacpp"
    if "vllm" in owners:
        return "vllm"
    if "library" in owners or "ollama" in owners or parts.port == 11434:
        return "ollama"
    return "generic"


def _verdict(p: _Prober, reachable: bool) -> tuple[bool, str]:
    by_name = {c.name: c for c in p.checks}
    if not reachable:
        return False, by_name["models"].detail.removeprefix("unreachable: ")
    chat = by_name.get("chat")
    if chat is None or chat.status == "failed":
        return False, chat.detail if chat else "no chat completion was tried"
    tools = by_name.get("tools_auto")
    if tools is None or tools.status == "failed":
        return False, tools.detail if tools else "no tool-call request was tried"
    forced = by_name.get("forced_tool")
    if forced is not None and forced.status == "failed":
        return False, forced.detail
    if p.measured.get("forced_tool_choice") is False:
        return True, "chat completions and tool calls work; forced tools do not, so the draft is asked for as JSON text"
    return True, "chat completions, tool calls and the forced draft tool work"


def _check_base_url(base_url: str) -> str:
    """`base_url` without a trailing slash, or ConfigError when it is not an http(s) URL with a host."""
    try:
        parts = urlsplit(base_url.strip())
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise ConfigError(f"not a valid URL ({exc}): {_redact_url(base_url)!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"not an http(s) URL with a host: {_redact_url(base_url)!r} (e.g. http://127.0.0.1:8080/v1)")
    return base_url.strip().rstrip("/")


def probe_server(
    base_url: str,
    api_key: str | None,
    model: str,
    *,
    timeout_s: float,
    progress: Callable[[ProbeCheck], None] | None = None,
) -> ProbeReport:
    """Probe the server at `base_url` (the API root, e.g. `http://127.0.0.1:8080/v1`).

    Args:
        base_url: The API root; `/models` and `/chat/completions` are under it.
        api_key: Bearer key, or None for servers without authentication; never shown.
        model: The model name every request names.
        timeout_s: Per-request timeout, seconds (a local server processes the prompt first).
        progress: Told of each check as it ends (the CLI prints it).

    Raises:
        ConfigError: `base_url` is not an http(s) URL. Nothing the server does raises.
    """
    base = _check_base_url(base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    started = time.monotonic()
    with httpx.Client(timeout=timeout_s, headers=headers, follow_redirects=False) as client:
        p = _Prober(client=client, base=base, model=model, api_key=api_key, timeout_s=timeout_s, progress=progress)
        models, _ = _check_models(p)
        reachable = models.status is not None
        provider = _guess_provider(base, models)
        if reachable:
            _run_checks(p)
    can_run, reason = _verdict(p, reachable)
    base_quirks = QUIRKS.get(provider, Quirks())
    known = {f.name for f in fields(Quirks)}
    quirks = replace(base_quirks, **{k: v for k, v in p.measured.items() if k in known})
    return ProbeReport(
        base_url=_redact_url(base),
        model=model,
        reachable=reachable,
        provider_guess=provider,
        checks=tuple(p.checks),
        quirks=quirks,
        measured=tuple(sorted(p.measured)),
        can_run=can_run,
        reason=reason,
        elapsed_s=time.monotonic() - started,
    )


_LATER = [
    ("tools_auto", None),
    ("forced_tool", "forced_tool_choice"),
    ("tool_messages", "relay_tool_results"),
    ("null_content", "empty_assistant_content"),
    ("html_escape", "html_escaped_prompt"),
    ("tool_description", "tool_description_in_parameters"),
    ("streaming", "streaming"),
    ("stream_usage", "stream_usage"),
    ("stream_auto_tools", "stream_auto_tools"),
    ("reasoning", "replay_reasoning"),
]


def _run_checks(p: _Prober) -> None:
    chat = _check_chat(p)
    if not chat.ok:
        p.skip(_LATER, "skipped: the plain chat completion failed")
        return
    tools = _check_tools_auto(p)
    if not tools.ok:
        p.skip(_LATER[1:], "skipped: tool calls do not work")
        return
    forced = _check_forced(p)
    empty_works = _check_tool_messages(p)
    _check_null_content(p, empty_works)
    _check_html_escape(p)
    _check_tool_description(p, forced)
    if _check_streaming(p):
        _check_stream_auto_tools(p)
    else:
        p.skip([("stream_usage", "stream_usage"), ("stream_auto_tools", "stream_auto_tools")], "skipped: streaming does not work")
    _check_reasoning(p)
