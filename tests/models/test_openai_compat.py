"""OpenAICompatModel over real HTTP against a scripted local server: what it sends, what it returns."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rootproof.agent.models.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    SystemMessage,
    TokenUsage,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from rootproof.agent.models.compact import compact_schema
from rootproof.agent.models.openai_compat import (
    DRAFT_TOOL_DESCRIPTION,
    OpenAICompatModel,
    Provider,
    extract_json_object,
)
from rootproof.errors import ConfigError, ModelOutputError, ModelUnavailable

from .fake_openai_server import FakeOpenAI, Reply, completion, error
from .fake_openai_server import fake_openai as fake_openai  # the fixture

API_KEY = "sk-test-secret-123"
DRAFT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "claims": {"type": "array", "items": {"type": "object"}}},
    "required": ["summary", "claims"],
}
QUERY_LOGS = ToolSpec(
    name="query_logs",
    description="Search logs.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}, "additionalProperties": False},
)
DRAFT = {"summary": "row lock held by pid 4242", "claims": [{"id": "c1", "text": "pid 4242 holds the lock"}]}
FORCED = {"type": "function", "function": {"name": "submit_draft"}}


def make(
    fake: FakeOpenAI, made: list[OpenAICompatModel], provider: Provider = "openai", **kw: Any
) -> OpenAICompatModel:
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("timeout_s", 5.0)
    m = OpenAICompatModel(base_url=fake.base_url, api_key=API_KEY, model="m-1", provider=provider, **kw)
    made.append(m)
    return m


def request(messages: list[Message] | None = None, **kw: Any) -> ModelRequest:
    if messages is None:
        messages = [
            SystemMessage(content="You diagnose incidents."),
            UserMessage(content="Why is checkout slow?"),
        ]
    kw.setdefault("tools", [QUERY_LOGS])
    return ModelRequest(messages=messages, draft_schema=DRAFT_SCHEMA, **kw)


def call(id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {
        "id": id,
        "name": name,
        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
    }


def history_with_tools(reasoning: str | None = None) -> list[Message]:
    """A conversation after one assistant turn with two tool calls and their results."""
    return [
        SystemMessage(content="sys"),
        UserMessage(content="Why is checkout slow?"),
        AssistantMessage(
            content=None,
            reasoning=reasoning,
            tool_calls=(
                ToolCall(id="call_a", name="query_logs", arguments={"query": "lock"}),
                ToolCall(id="call_b", name="query_logs", arguments='{"query": "tim'),
            ),
        ),
        ToolResultMessage(tool_call_id="call_a", name="query_logs", content='{"items": ["still waiting"]}'),
        ToolResultMessage(tool_call_id="call_b", name="query_logs", content='{"error": "bad args"}'),
        UserMessage(content="Continue."),
    ]


@pytest.fixture(autouse=True)
def never_required(fake_openai: FakeOpenAI) -> Iterator[None]:
    """No request of any test may use `tool_choice: "required"`."""
    yield
    for body in fake_openai.requests:
        assert body.get("tool_choice") != "required"


# -- what is sent -------------------------------------------------------------------------------


def test_gather_sends_tools_with_submit_draft_and_auto_choice(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([completion(content="looking")])
    make(fake_openai, models).step(request(max_output_tokens=300))

    [body] = fake_openai.requests
    assert body["model"] == "m-1"
    assert body["messages"] == [
        {"role": "system", "content": "You diagnose incidents."},
        {"role": "user", "content": "Why is checkout slow?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "query_logs",
                "description": "Search logs.",
                "parameters": compact_schema(QUERY_LOGS.parameters),
            },
        },
        {
            "type": "function",
            "function": {
                "name": "submit_draft",
                "description": DRAFT_TOOL_DESCRIPTION,
                "parameters": DRAFT_SCHEMA,
            },
        },
    ]
    assert body["tool_choice"] == "auto"
    assert body["temperature"] == 0.0
    assert body["max_completion_tokens"] == 300
    assert "max_tokens" not in body and body["stream"] is True  # streamed: the timeout is on the first token
    assert fake_openai.headers[0]["authorization"] == f"Bearer {API_KEY}"


@pytest.mark.parametrize("provider", ["openai", "vllm", "ollama", "llamacpp"])
def test_draft_mode_forces_submit_draft_by_name(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel], provider: Provider
) -> None:
    fake_openai.script([completion(tool_calls=[call("call_1", "submit_draft", DRAFT)])])
    turn = make(fake_openai, models, provider).step(request(mode="draft", tools=[]))

    [body] = fake_openai.requests
    assert body["tool_choice"] == FORCED
    assert [t["function"]["name"] for t in body["tools"]] == ["submit_draft"]
    assert turn.draft == DRAFT
    assert turn.tool_calls == []


def test_max_tokens_and_temperature_per_provider(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([completion(content="a"), completion(content="b")])
    make(fake_openai, models, "vllm", temperature=None).step(request(max_output_tokens=64))
    make(fake_openai, models, "deepseek", temperature=0.3).step(request())

    vllm, deepseek = fake_openai.requests
    assert vllm["max_tokens"] == 64 and "max_completion_tokens" not in vllm
    assert "temperature" not in vllm
    assert deepseek["temperature"] == 0.3 and "max_tokens" not in deepseek


def test_deepseek_replays_reasoning_on_the_assistant_message(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([completion(content="ok", reasoning_content="next: metrics")])
    make(fake_openai, models, "deepseek").step(
        request(history_with_tools(reasoning="I should look at locks."))
    )

    messages = fake_openai.requests[0]["messages"]
    assert messages[2] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "I should look at locks.",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "query_logs", "arguments": '{"query": "lock"}'},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "query_logs", "arguments": '{"query": "tim'},
            },
        ],
    }
    assert messages[3:] == [
        {"role": "tool", "tool_call_id": "call_a", "content": '{"items": ["still waiting"]}'},
        {"role": "tool", "tool_call_id": "call_b", "content": '{"error": "bad args"}'},
        {"role": "user", "content": "Continue."},
    ]


def test_other_providers_never_send_reasoning(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([completion(content="ok")])
    make(fake_openai, models, "openai").step(request(history_with_tools(reasoning="private thoughts")))

    assistant = fake_openai.requests[0]["messages"][2]
    assert "reasoning_content" not in assistant
    assert assistant["content"] is None


def test_llamacpp_sends_empty_content_and_relays_tool_results(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([completion(content="ok")])
    make(fake_openai, models, "llamacpp").step(request(history_with_tools()))

    messages = fake_openai.requests[0]["messages"]
    assert messages[2]["content"] == ""
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "user",
        "user",
    ]
    assert messages[5:] == [
        {"role": "user", "content": 'Tool result for query_logs (call_a):\n{"items": ["still waiting"]}'},
        {"role": "user", "content": 'Tool result for query_logs (call_b):\n{"error": "bad args"}'},
        {"role": "user", "content": "Continue."},
    ]


def test_relay_at_the_end_of_the_conversation(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([completion(content="ok")])
    make(fake_openai, models, "llamacpp").step(request(history_with_tools()[:-1]))

    messages = fake_openai.requests[0]["messages"]
    assert [m["role"] for m in messages][-3:] == ["tool", "user", "user"]
    assert messages[-1]["content"].startswith("Tool result for query_logs (call_b):\n")


def test_assistant_text_without_tool_calls_is_never_null(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([completion(content="ok")])
    history: list[Message] = [
        UserMessage(content="q"),
        AssistantMessage(content=None),
        UserMessage(content="go"),
    ]
    make(fake_openai, models).step(request(history))

    assert fake_openai.requests[0]["messages"][1] == {"role": "assistant", "content": ""}


def test_deepseek_draft_mode_sends_no_tools_and_parses_fenced_json(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fenced = "```json\n" + json.dumps(DRAFT, indent=2) + "\n```"
    fake_openai.script([completion(content=fenced, reasoning_content="The lock holder is pid 4242.")])
    turn = make(fake_openai, models, "deepseek").step(request(history_with_tools(), mode="draft"))

    [body] = fake_openai.requests
    assert "tools" not in body and "tool_choice" not in body
    last = body["messages"][-1]
    assert last["role"] == "user"
    assert "one JSON object" in last["content"]
    assert json.dumps(DRAFT_SCHEMA, separators=(",", ":")) in last["content"]
    assert turn.draft == DRAFT
    assert turn.reasoning == "The lock holder is pid 4242."
    assert turn.text == fenced


# -- what comes back ----------------------------------------------------------------------------


def test_tool_call_turn_is_parsed(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    fake_openai.script(
        [
            completion(
                content="Checking logs.",
                tool_calls=[
                    call("call_1", "query_logs", {"query": "ShareLock"}),
                    call("call_2", "query_logs", {}),
                ],
                prompt_tokens=1234,
                completion_tokens=56,
            )
        ]
    )
    turn = make(fake_openai, models).step(request())

    assert turn.text == "Checking logs."
    assert turn.tool_calls == [
        ToolCall(id="call_1", name="query_logs", arguments={"query": "ShareLock"}),
        ToolCall(id="call_2", name="query_logs", arguments={}),
    ]
    assert turn.draft is None
    assert turn.reasoning is None
    assert turn.usage == TokenUsage(input_tokens=1234, output_tokens=56)
    assert turn.refused is False


def test_deepseek_reasoning_is_captured(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    fake_openai.script(
        [
            completion(
                reasoning_content="Locks first.", tool_calls=[call("c1", "query_logs", {"query": "lock"})]
            )
        ]
    )
    turn = make(fake_openai, models, "deepseek").step(request())

    assert turn.reasoning == "Locks first."
    assert turn.text is None
    assert [c.name for c in turn.tool_calls] == ["query_logs"]


def test_unparseable_arguments_are_kept_raw(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    fake_openai.script(
        [
            completion(
                tool_calls=[
                    call("c1", "query_logs", '{"query": "lock'),
                    call("c2", "query_logs", "[1, 2]"),
                    call("c3", "submit_draft", '{"summary": "cut off'),
                ]
            )
        ]
    )
    turn = make(fake_openai, models).step(request())

    assert [c.arguments for c in turn.tool_calls] == ['{"query": "lock', "[1, 2]"]
    assert turn.draft == '{"summary": "cut off'


def test_submit_draft_in_gather_mode_is_the_draft(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script(
        [completion(tool_calls=[call("c1", "query_logs", {"query": "x"}), call("c2", "submit_draft", DRAFT)])]
    )
    turn = make(fake_openai, models).step(request())

    assert turn.draft == DRAFT
    assert [c.id for c in turn.tool_calls] == ["c1"]


def test_draft_mode_plain_content_is_parsed_or_kept_raw(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script(
        [
            completion(content="Here is the draft: " + json.dumps(DRAFT) + " Hope it helps."),
            completion(content="I cannot decide yet."),
            completion(content="Here is the draft: " + json.dumps(DRAFT)),
        ]
    )
    model = make(fake_openai, models)
    assert model.step(request(mode="draft")).draft == DRAFT
    assert model.step(request(mode="draft")).draft == "I cannot decide yet."
    assert model.step(request(mode="gather")).draft is None  # text is only a draft when one was asked for


def test_usage_absent_counts_zero_and_refusal(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script(
        [completion(refusal="I can't help with that.", prompt_tokens=None, completion_tokens=None)]
    )
    turn = make(fake_openai, models).step(request())

    # Streamed without a usage chunk: the input is estimated from the prompt, no token was output.
    assert turn.usage.estimated is True and turn.usage.input_tokens > 0 and turn.usage.output_tokens == 0
    assert turn.refused is True
    assert turn.reasoning is None


def test_missing_tool_call_id_gets_ours(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    fake_openai.script([completion(tool_calls=[call("", "query_logs", {"query": "x"})])])
    turn = make(fake_openai, models).step(request(step_index=3))

    assert turn.tool_calls[0].id == "call_3_0"


def test_a_200_that_is_not_a_completion_is_an_output_error(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([Reply(body={"object": "chat.completion", "choices": []})])
    with pytest.raises(ModelOutputError, match="no choices"):
        make(fake_openai, models).step(request())


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (Reply(body="<html>proxy page</html>"), "no choices"),
        (Reply(body='{"choices": [', headers={"Content-Type": "application/json"}), "not valid JSON"),
    ],
)
def test_a_body_that_is_not_a_completion_is_an_output_error(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel], reply: Reply, match: str
) -> None:
    fake_openai.script([reply])
    with pytest.raises(ModelOutputError, match=match):
        make(fake_openai, models).step(request())

    assert len(fake_openai.requests) == 1


# -- retries and failures -----------------------------------------------------------------------


def test_429_then_success_honours_retry_after(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([error(429, "Rate limit reached", retry_after="0.4"), completion(content="done")])
    turn = make(fake_openai, models, backoff_s=0.01).step(request())

    assert turn.text == "done"
    assert len(fake_openai.requests) == 2
    assert fake_openai.times[1] - fake_openai.times[0] >= 0.4
    assert fake_openai.requests[0] == fake_openai.requests[1]


def test_a_long_retry_after_falls_back_to_backoff(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([error(503, "overloaded", retry_after="3600"), completion(content="done")])
    started = time.monotonic()
    turn = make(fake_openai, models, backoff_s=0.01).step(request())

    assert turn.text == "done"
    assert time.monotonic() - started < 2


def test_persistent_500_is_unavailable_after_max_retries(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([error(500, "upstream exploded")] * 5)
    model = make(fake_openai, models, max_retries=2)
    with pytest.raises(ModelUnavailable) as info:
        model.step(request())

    assert len(fake_openai.requests) == 3
    message = str(info.value)
    assert "openai model 'm-1'" in message
    assert fake_openai.base_url in message
    assert "HTTP 500: upstream exploded" in message
    assert "3 attempt(s)" in message
    assert API_KEY not in message


@pytest.mark.parametrize(
    ("status", "text"),
    [(400, "Invalid parameter: messages"), (401, "Incorrect API key provided"), (404, "no model")],
)
def test_client_errors_are_unavailable_at_once(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel], status: int, text: str
) -> None:
    fake_openai.script([error(status, text), completion(content="never")])
    with pytest.raises(ModelUnavailable, match=re.escape(f"HTTP {status}: {text}")):
        make(fake_openai, models).step(request())

    assert len(fake_openai.requests) == 1


def test_timeouts_are_retried_then_unavailable(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([completion(content="late", delay_s=0.8)] * 3)
    with pytest.raises(ModelUnavailable, match="no first token within 0.2 s .*after 2 attempt"):
        make(fake_openai, models, timeout_s=0.2, max_retries=1).step(request())

    assert len(fake_openai.requests) == 2


@pytest.mark.serial  # margins under a second: measured alone
def test_request_timeout_is_capped_by_the_time_left(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([completion(content="late", delay_s=2.0)] * 5)
    deadline = time.monotonic() + 0.3
    started = time.monotonic()
    with pytest.raises(ModelUnavailable):
        make(fake_openai, models, timeout_s=30, max_retries=5).step(
            request(time_left=lambda: deadline - time.monotonic())
        )

    assert time.monotonic() - started < 1.0
    assert len(fake_openai.requests) == 1


@pytest.mark.serial  # margins under a second: measured alone
def test_retries_stop_when_time_left_is_exhausted(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([error(500, "down")] * 50)
    deadline = time.monotonic() + 0.5
    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match="deadline"):
        make(fake_openai, models, max_retries=40, backoff_s=0.05).step(
            request(time_left=lambda: deadline - time.monotonic())
        )

    elapsed = time.monotonic() - started
    assert elapsed < 0.55  # never sleeps past the deadline
    assert 2 <= len(fake_openai.requests) < 6  # 0.05, 0.1, 0.2 s of backoff fit; 0.4 s does not


@pytest.mark.serial  # margins under a second: measured alone
def test_retry_after_beyond_the_deadline_stops_at_once(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel]
) -> None:
    fake_openai.script([error(429, "slow down", retry_after="5"), completion(content="never")])
    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match="HTTP 429: slow down after 1 attempt"):
        make(fake_openai, models).step(request(time_left=lambda: 1.0))

    assert time.monotonic() - started < 0.5
    assert len(fake_openai.requests) == 1


def test_no_time_left_sends_nothing(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    with pytest.raises(ModelUnavailable, match="no time left"):
        make(fake_openai, models).step(request(time_left=lambda: 0.0))

    assert fake_openai.requests == []


def test_connection_refused_is_retried_then_unavailable(models: list[OpenAICompatModel]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base_url = f"http://user:pw@127.0.0.1:{port}/v1?key=leak"
    model = OpenAICompatModel(
        base_url=base_url, api_key=API_KEY, model="m", provider="vllm", max_retries=2, backoff_s=0.01
    )
    models.append(model)
    with pytest.raises(ModelUnavailable) as info:
        model.step(request())

    message = str(info.value)
    assert f"vllm model 'm' at http://127.0.0.1:{port}/v1: connection error" in message
    assert "3 attempt(s)" in message
    assert "pw" not in message and "leak" not in message and API_KEY not in message


def test_no_api_key_does_not_borrow_the_environment(
    fake_openai: FakeOpenAI, models: list[OpenAICompatModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-must-not-leak")
    fake_openai.script([completion(content="ok")])
    model = OpenAICompatModel(base_url=fake_openai.base_url, api_key=None, model="qwen", provider="llamacpp")
    models.append(model)
    model.step(request())

    assert "sk-env-must-not-leak" not in fake_openai.headers[0].get("authorization", "")
    assert model.name == "openai:qwen"


def test_bad_configuration_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="provider must be one of"):
        OpenAICompatModel(base_url="http://x/v1", api_key=None, model="m", provider="bedrock")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="timeout_s must be > 0"):
        OpenAICompatModel(base_url="http://x/v1", api_key=None, model="m", timeout_s=0)


# -- JSON extraction ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": {"b": [1, 2]}}\n```', {"a": {"b": [1, 2]}}),
        ('```\n{"a": 1}\n```', {"a": 1}),
        ('Sure! {"a": "x}y"} Done.', {"a": "x}y"}),
        ('{"a": 1} and later {"b": 2}', {"a": 1}),
        ("[1, 2]", None),
        ("no json here", None),
        ('{"a": ', None),
    ],
)
def test_extract_json_object(text: str, expected: dict[str, Any] | None) -> None:
    assert extract_json_object(text) == expected
