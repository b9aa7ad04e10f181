"""`rootproof models check` and the `auto` provider, over real HTTP against fake servers that
behave like the real ones: each fake renders the request into a prompt the way its server's chat
template does and counts `prompt_tokens` from that text, so the probe measures behaviour, not a
script.

- `llama_like`: llama-cpp-python 0.3.x with `chatml-function-calling` (content null → HTTP 500,
  role tool dropped, content HTML-escaped, function descriptions dropped, streams without usage,
  a streamed tool call with tool_choice auto → 200, then the stream ends without `[DONE]`).
- `plain_like`: plain OpenAI behaviour everywhere.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

import pytest

from rootproof.agent.models.base import (
    AssistantMessage,
    ModelRequest,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from rootproof.agent.models.openai_compat import OpenAICompatModel, Quirks
from rootproof.agent.models.probe import MAX_PROBE_TOKENS, probe_server
from rootproof.errors import ConfigError
from rootproof.runtime import Runtime
from rootproof.settings import load_settings
from tests.test_cli_exits import _free_port, rp

from .fake_openai_server import FakeOpenAI, Reply, completion, error, fake_openai  # noqa: F401

LLAMA_QUIRKS = [
    "empty_assistant_content",
    "relay_tool_results",
    "html_escaped_prompt",
    "stream_usage",
    "stream_auto_tools",
    "tool_description_in_parameters",
]
KEY = "sk-probe-4f9a2c7e1b8d3a6f5e0c9b2a"


# -- fake servers -----------------------------------------------------------------------------


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _sse(chunks: list[dict[str, Any]]) -> Reply:
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return Reply(body=text, headers={"Content-Type": "text/event-stream"})


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _wants_ping(body: dict[str, Any]) -> bool:
    return any(t["function"]["name"] == "ping" for t in body.get("tools", [])) and "ping" in json.dumps(body["messages"]).lower()


def _answer(body: dict[str, Any], prompt: str, *, stream_usage: bool, reasoning: str | None = None) -> Reply:
    """A completion (or an SSE stream) for `body`: the forced tool, ping when asked, else text."""
    choice = body.get("tool_choice")
    name = choice["function"]["name"] if isinstance(choice, dict) else "ping" if choice == "auto" and _wants_ping(body) else None
    args = '{"host": "db1"}' if name == "ping" else '{"summary": "' if name else None
    if not body.get("stream"):
        calls = [{"id": "call_0", "name": name, "arguments": args}] if name else None
        return completion(content=None if name else "OK", tool_calls=calls, prompt_tokens=_tokens(prompt), completion_tokens=3, reasoning_content=reasoning)
    delta: dict[str, Any] = {"role": "assistant", "content": "OK"}
    if name:
        delta = {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_0", "type": "function", "function": {"name": name, "arguments": args}}]}
    chunks = [_chunk(delta), _chunk({}, "tool_calls" if name else "stop")]
    if stream_usage and (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [], "usage": {"prompt_tokens": _tokens(prompt), "completion_tokens": 2, "total_tokens": 9}})
    return _sse(chunks)


def llama_like(body: dict[str, Any]) -> Reply:
    """llama-cpp-python's `chatml-function-calling`: its template, validation and stream limits."""
    for m in body["messages"]:
        if m["role"] == "assistant" and "content" in m and m["content"] is None:
            return error(500, "1 validation error for ChatCompletionRequestAssistantMessage content: Input should be a valid string")
    choice = body.get("tool_choice")
    if body.get("stream") and choice == "auto" and _wants_ping(body):
        # "Automatic streaming tool choice is not supported" is raised after the SSE response began:
        # the client sees 200, then the stream ends without a chunk or [DONE].
        return Reply(body="", headers={"Content-Type": "text/event-stream"})
    prompt = ""
    for m in body["messages"]:
        if m["role"] == "tool":
            continue  # the template has no branch for role tool
        prompt += f"<|im_start|>{m['role']}\n" + html.escape(m.get("content") or "")
        if m["role"] == "system" and choice and body.get("tools"):
            prompt += "".join(f"\nfunctions.{t['function']['name']}:\n" + json.dumps(t["function"]["parameters"]) for t in body["tools"])
        for call in m.get("tool_calls") or []:
            prompt += f"functions.{call['function']['name']}:\n" + call["function"]["arguments"]
        prompt += "<|im_end|>\n"
    return _answer(body, prompt, stream_usage=False)


def plain_like(body: dict[str, Any], *, reasoning: str | None = None) -> Reply:
    """Plain OpenAI behaviour: every message and tool field reaches the prompt, as it was sent."""
    prompt = json.dumps(body["messages"], ensure_ascii=False) + json.dumps(body.get("tools", []), ensure_ascii=False)
    return _answer(body, prompt, stream_usage=True, reasoning=reasoning)


def serve_like(fake: FakeOpenAI, reply: Any, model_ids: list[str] | None = None) -> None:
    fake.model_ids = ["local"] if model_ids is None else model_ids
    fake.script([reply] * 100)


def _env(fake: FakeOpenAI, **extra: str) -> dict[str, str]:
    return {"ROOTPROOF_OPENAI_BASE_URL": fake.base_url, "ROOTPROOF_OPENAI_MODEL": "local", **extra}


# -- the probe --------------------------------------------------------------------------------


def test_llama_cpp_quirks_are_detected(fake_openai: FakeOpenAI) -> None:  # noqa: F811
    serve_like(fake_openai, llama_like)
    report = probe_server(fake_openai.base_url, None, "local", timeout_s=10)
    assert report.reachable and report.can_run, report.reason
    assert sorted(report.quirks.active()) == sorted(LLAMA_QUIRKS)
    statuses = {c.name: c.status for c in report.checks}
    assert statuses["models"] == statuses["chat"] == statuses["tools_auto"] == statuses["forced_tool"] == "ok"
    assert statuses["null_content"] == statuses["tool_messages"] == statuses["html_escape"] == "quirk"
    assert report.quirks.forced_tool_choice and report.quirks.streaming and report.quirks.max_tokens_field == "max_tokens"
    # every request is tiny and names the model
    assert all(r["model"] == "local" and r["max_tokens"] <= MAX_PROBE_TOKENS for r in fake_openai.requests)
    assert len(fake_openai.requests) <= 16


def test_a_plain_server_has_no_quirks(fake_openai: FakeOpenAI) -> None:  # noqa: F811
    serve_like(fake_openai, plain_like)
    report = probe_server(fake_openai.base_url, None, "local", timeout_s=10)
    assert report.can_run and report.quirks == Quirks() and report.quirks.active() == []
    assert {c.status for c in report.checks} == {"ok"}, [(c.name, c.detail) for c in report.checks]
    assert set(report.measured) == {f for f in Quirks.__dataclass_fields__}


def test_reasoning_a_refused_forced_tool_and_max_completion_tokens_are_measured(fake_openai: FakeOpenAI) -> None:  # noqa: F811
    def reasoner(body: dict[str, Any]) -> Reply:
        if "max_tokens" in body:
            return error(400, "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", kind="invalid_request_error")
        if isinstance(body.get("tool_choice"), dict):
            return error(400, "deepseek-reasoner does not support this tool_choice", kind="invalid_request_error")
        return plain_like(body, reasoning="thinking…")

    serve_like(fake_openai, reasoner, model_ids=["other-model"])
    report = probe_server(fake_openai.base_url, None, "local", timeout_s=10)
    assert report.can_run and "JSON text" in report.reason
    q = report.quirks
    assert (q.replay_reasoning, q.forced_tool_choice, q.max_tokens_field) == (True, False, "max_completion_tokens")
    models = report.check("models")
    assert models is not None and models.status == "warning" and "'other-model'" in models.detail
    assert all("max_tokens" not in r for r in fake_openai.requests[1:])


def test_a_server_that_refuses_tools_cannot_run_and_the_key_never_shows(fake_openai: FakeOpenAI) -> None:  # noqa: F811
    def no_tools(body: dict[str, Any]) -> Reply:
        if body.get("tools"):
            return error(400, f"tools are not supported (key {KEY})", kind="invalid_request_error")
        return plain_like(body)

    serve_like(fake_openai, no_tools)
    report = probe_server(fake_openai.base_url, KEY, "local", timeout_s=10)
    assert not report.can_run and "tool_choice auto failed: HTTP 400" in report.reason
    assert KEY not in json.dumps(report.as_dict()) and "***" in report.reason
    assert fake_openai.headers[0]["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize(
    "failure",
    [
        error(500, "Automatic streaming tool choice is not supported"),
        Reply(body="data: " + json.dumps({"error": {"message": "Automatic streaming tool choice is not supported"}}) + "\n\n", headers={"Content-Type": "text/event-stream"}),
    ],
    ids=["http-500", "error-chunk"],
)
def test_every_shape_of_a_failed_streamed_tool_call_is_measured(fake_openai: FakeOpenAI, failure: Reply) -> None:  # noqa: F811
    def server(body: dict[str, Any]) -> Reply:
        return failure if body.get("stream") and body.get("tools") else plain_like(body)

    serve_like(fake_openai, server)
    report = probe_server(fake_openai.base_url, None, "local", timeout_s=10)
    check = report.check("stream_auto_tools")
    assert check is not None and check.status == "quirk" and "Automatic streaming tool choice" in check.detail
    assert report.quirks.active() == ["stream_auto_tools"]


def test_a_model_that_answers_in_prose_leaves_stream_auto_tools_unmeasured(fake_openai: FakeOpenAI) -> None:  # noqa: F811
    def prose(body: dict[str, Any]) -> Reply:
        return plain_like(body | {"tool_choice": "none"}) if body.get("tool_choice") == "auto" else plain_like(body)

    serve_like(fake_openai, prose)
    report = probe_server(fake_openai.base_url, None, "local", timeout_s=10)
    check = report.check("stream_auto_tools")
    assert check is not None and check.status == "not measured" and "stream_auto_tools" not in report.measured


def test_an_invalid_base_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not an http"):
        probe_server("ftp://example.org/v1", None, "m", timeout_s=1)


# -- the command ------------------------------------------------------------------------------


def test_models_check_prints_the_llama_quirks_and_exits_0(fake_openai: FakeOpenAI, tmp_path: Path) -> None:  # noqa: F811
    serve_like(fake_openai, llama_like)
    p = rp("models", "check", home=tmp_path, **_env(fake_openai, ROOTPROOF_MODEL="offline", ROOTPROOF_OPENAI_PROVIDER="llamacpp"))
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert p.stderr == ""
    lines = p.stdout.splitlines()
    assert lines[0] == f"probing model 'local' at {fake_openai.base_url}"
    assert any(line.startswith("null_content") and " quirk " in line for line in lines)
    quirks = next(line for line in lines if line.startswith("quirks: "))
    assert all(q in quirks for q in LLAMA_QUIRKS) and "stream_usage=False" in quirks
    # The llamacpp table is what this server shows; another provider's table is not.
    assert "ROOTPROOF_OPENAI_PROVIDER=llamacpp: its quirks agree with every measured one" in p.stdout
    p = rp("models", "check", home=tmp_path, **_env(fake_openai, ROOTPROOF_MODEL="offline", ROOTPROOF_OPENAI_PROVIDER="vllm"))
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "ROOTPROOF_OPENAI_PROVIDER=vllm: its quirks differ from the measured ones in" in p.stdout and "tool_description_in_parameters" in p.stdout
    assert lines[-1].startswith("verdict: a full run can work")


def test_models_check_json_is_one_document(fake_openai: FakeOpenAI, tmp_path: Path) -> None:  # noqa: F811
    serve_like(fake_openai, plain_like)
    p = rp("models", "check", "--json", home=tmp_path, **_env(fake_openai, ROOTPROOF_OPENAI_API_KEY=KEY))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["can_run"] is True and doc["active_quirks"] == [] and doc["reachable"] is True
    assert [c["name"] for c in doc["checks"]][:3] == ["models", "chat", "max_tokens"]
    assert KEY not in p.stdout + p.stderr


def test_a_dead_server_exits_1_with_one_error_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    p = rp("models", "check", home=tmp_path, ROOTPROOF_OPENAI_BASE_URL=url)
    assert p.returncode == 1, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {url}: unreachable: connection failed"), p.stderr
    j = rp("models", "check", "--json", home=tmp_path, ROOTPROOF_OPENAI_BASE_URL=url)
    assert j.returncode == 1 and json.loads(j.stdout)["reachable"] is False and len(j.stderr.strip().splitlines()) == 1


def test_a_server_that_cannot_run_rootproof_exits_1(fake_openai: FakeOpenAI, tmp_path: Path) -> None:  # noqa: F811
    serve_like(fake_openai, lambda body: error(404, "model 'local' not found", kind="invalid_request_error"))
    p = rp("models", "check", home=tmp_path, **_env(fake_openai))
    assert p.returncode == 1, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot run rootproof: a plain chat completion failed: HTTP 404: model 'local' not found" in lines[0]


@pytest.mark.parametrize(("value", "needle"), [(None, "not set"), ("127.0.0.1:8080", "not an http(s) URL"), ("http://h:99999/v1", "not a valid URL")])
def test_an_unset_or_invalid_base_url_exits_2_naming_it(tmp_path: Path, value: str | None, needle: str) -> None:
    env = {"ROOTPROOF_OPENAI_BASE_URL": value} if value else {}
    p = rp("models", "check", home=tmp_path, **env)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ROOTPROOF_OPENAI_BASE_URL: ") and needle in lines[0], p.stderr
    assert p.stdout == ""


# -- the auto provider ------------------------------------------------------------------------


def _tool_turn() -> ModelRequest:
    return ModelRequest(
        messages=[
            UserMessage(content="why?"),
            AssistantMessage(content=None, tool_calls=(ToolCall(id="call_1", name="query_logs", arguments={"query": "x"}),)),
            ToolResultMessage(tool_call_id="call_1", name="query_logs", content="RESULT-1"),
        ],
        tools=[],
        draft_schema={},
    )


def test_auto_applies_the_probed_quirks_once_per_runtime(fake_openai: FakeOpenAI, tmp_path: Path) -> None:  # noqa: F811
    serve_like(fake_openai, llama_like)
    settings = load_settings(data_dir=tmp_path, model="openai", openai_base_url=fake_openai.base_url, openai_model="local", openai_provider="auto")
    with Runtime.from_settings(settings) as runtime:
        model = runtime.model()
        assert isinstance(model, OpenAICompatModel) and model.provider == "auto"
        assert sorted(model._quirks.active()) == sorted(LLAMA_QUIRKS)
        probed = len(fake_openai.requests)
        assert runtime.model() is model and len(fake_openai.requests) == probed
        body = model.build_request(_tool_turn())
    assistant = body["messages"][1]
    assert assistant["role"] == "assistant" and assistant["content"] == ""
    assert body["messages"][3]["role"] == "user" and "RESULT-1" in body["messages"][3]["content"]


def test_auto_against_a_dead_server_is_a_config_error_naming_the_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    settings = load_settings(data_dir=tmp_path, model="openai", openai_base_url=url, openai_provider="auto", model_timeout_s=5)
    with Runtime.from_settings(settings) as runtime, pytest.raises(ConfigError, match=r"ROOTPROOF_OPENAI_BASE_URL: the server at .* is unreachable \(connection failed"):
        runtime.model()


def test_a_server_that_dies_on_the_forced_draft_cannot_run_rootproof(fake_openai: FakeOpenAI, tmp_path: Path) -> None:  # noqa: F811
    """The failure the forced-tool check exists for: a grammar the server cannot build kills it.
    From the forced request on, every connection is dropped without an answer."""
    dead = {"yes": False}

    def dies_on_forcing(body: dict[str, Any]) -> Reply:
        if isinstance(body.get("tool_choice"), dict) or dead["yes"]:
            dead["yes"] = True
            raise ConnectionAbortedError("the server process died")  # the handler drops the connection
        return plain_like(body)

    serve_like(fake_openai, dies_on_forcing)
    p = rp("models", "check", home=tmp_path, **_env(fake_openai, ROOTPROOF_MODEL="offline"))
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("Error: ") and "went away when submit_draft was forced" in p.stderr
