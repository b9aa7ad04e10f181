"""What a small local model's server needs, over real HTTP against the scripted server: the compact
draft schema, the JSON-text fallback when a forced tool fails at the server, streamed answers with
first-token and between-token timeouts, llama.cpp's escaped prompts, the prompt budget, and the
plain message after a step of refused calls."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from rootproof.agent.draft import MAX_CITATIONS_PER_CLAIM, MAX_CLAIMS, draft_json_schema, parse_draft
from rootproof.agent.loop import fit_prompt_budget
from rootproof.agent.models.base import (
    ModelRequest,
    SystemMessage,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from rootproof.agent.models.compact import compact_draft_schema, compact_schema, estimate_tokens
from rootproof.agent.models.openai_compat import OpenAICompatModel, Provider
from rootproof.agent.prompts import load_prompt
from rootproof.errors import ModelUnavailable
from rootproof.harness import Harness, memory_harness
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings
from rootproof.tools.base import TOOLS

from .fake_openai_server import FakeOpenAI, Reply, completion, error, stream_chunks
from .fake_openai_server import fake_openai as fake_openai  # the fixture

TOOL_SPECS = [ToolSpec(name=n, description=t.description, parameters=t.json_schema()) for n, t in TOOLS.items()]
BOUNDS = ("maxLength", "minLength", "maxItems", "minItems", "maximum", "minimum", "title", "default")


def _keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {k for v in node.values() for k in _keys(v)}
    if isinstance(node, list):
        return {k for v in node for k in _keys(v)}
    return set()


def _depth(node: Any, seen: int = 0) -> int:
    """Object nesting depth below the root (arrays of objects count their objects)."""
    if isinstance(node, dict):
        here = seen + 1 if node.get("type") == "object" else seen
        return max([here, *(_depth(v, here) for v in node.values())])
    if isinstance(node, list):
        return max([seen, *(_depth(v, seen) for v in node)])
    return seen


def _arrays(node: Any) -> list[dict[str, Any]]:
    """Every array schema in `node`, outermost first."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if node.get("type") == "array":
            found.append(node)
        for v in node.values():
            found += _arrays(v)
    elif isinstance(node, list):
        for v in node:
            found += _arrays(v)
    return found


def make(fake: FakeOpenAI, made: list[OpenAICompatModel], provider: Provider = "llamacpp", **kw: Any) -> OpenAICompatModel:
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("timeout_s", 5.0)
    kw.setdefault("max_retries", 0)
    m = OpenAICompatModel(base_url=fake.base_url, api_key=None, model="local", provider=provider, **kw)
    made.append(m)
    return m


def draft_request(**kw: Any) -> ModelRequest:
    kw.setdefault("tools", [])
    return ModelRequest(
        messages=[SystemMessage(content="sys"), UserMessage(content="Why do orders hang?")],
        draft_schema=compact_draft_schema(),
        mode="draft",
        **kw,
    )


GOOD_DRAFT = {
    "summary": "orders wait on a row lock",
    "claims": [
        {
            "id": "c1",
            "text": "pid 5301 waits for a ShareLock",
            "kind": "finding",
            "citations": [{"invocation_id": "inv-1", "tool_name": "query_logs", "raw_path": "$.entries[0]", "excerpt": 'waiting for "ShareLock"'}],
        }
    ],
    "hypotheses": [],
    "root_cause": None,
    "recovery": [],
    "limitations": [],
    "next_steps": [],
}


# -- the compact draft schema ---------------------------------------------------------------------


def test_the_compact_draft_schema_bounds_only_its_arrays_keeps_the_enums_and_is_shallow() -> None:
    schema = compact_draft_schema()
    # No string or number bounds; every array is closed after a few items (a small model loops).
    assert not _keys(schema) & (set(BOUNDS) - {"maxItems"})
    arrays = _arrays(schema)
    assert arrays and all(0 < a.get("maxItems", 0) <= 8 for a in arrays)
    assert schema["properties"]["claims"]["maxItems"] <= MAX_CLAIMS
    assert schema["$defs"] and _arrays(schema["properties"]["claims"]["items"])[0]["maxItems"] <= MAX_CITATIONS_PER_CLAIM
    assert _depth(schema) <= 3
    # The taxonomy enums are kept, each written once.
    assert "row_lock_contention" in schema["$defs"]["mechanism"]["enum"]
    assert "postgresql" in schema["$defs"]["component"]["enum"]
    assert json.dumps(schema).count("row_lock_contention") == 1
    # Far smaller than the full schema (6.3 KB of bounds).
    assert len(json.dumps(schema)) < len(json.dumps(draft_json_schema())) * 0.6


def test_a_draft_valid_for_the_compact_schema_is_checked_against_the_full_draft() -> None:
    draft, problem = parse_draft(GOOD_DRAFT)
    assert problem is None and draft is not None
    # The caps the compact schema leaves out still hold: 13 claims is one too many.
    many = {**GOOD_DRAFT, "claims": [dict(GOOD_DRAFT["claims"][0], id=f"c{i}") for i in range(13)]}
    draft, problem = parse_draft(many)
    assert draft is None and problem is not None and "claims" in problem
    long_excerpt = json.loads(json.dumps(GOOD_DRAFT))
    long_excerpt["claims"][0]["citations"][0]["excerpt"] = "x" * 4001
    assert parse_draft(long_excerpt)[0] is None


def test_tool_schemas_are_sent_compact_and_llamacpp_gets_descriptions_in_the_parameters(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    fake_openai.script([completion(content="ok")])
    req = ModelRequest(messages=[SystemMessage(content="s"), UserMessage(content="q")], tools=TOOL_SPECS, draft_schema=compact_draft_schema())
    make(fake_openai, models).step(req)
    body = fake_openai.requests[0]
    assert "stream" not in body  # llama-cpp-python cannot stream a tool_choice auto step
    sent = {t["function"]["name"]: t["function"] for t in body["tools"]}
    assert set(sent) == {*TOOLS, "submit_draft"}
    assert not _keys([f["parameters"] for n, f in sent.items() if n != "submit_draft"]) & set(BOUNDS)
    assert not _keys(sent["submit_draft"]["parameters"]) & (set(BOUNDS) - {"maxItems"})
    # Its template shows parameters only: what the tool does goes there too.
    assert sent["inspect_postgres"]["parameters"]["description"] == TOOLS["inspect_postgres"].description
    assert sent["submit_draft"]["parameters"]["properties"]["root_cause"]


def test_the_first_prompt_with_every_tool_is_under_2500_tokens() -> None:
    """System prompt, the longest built-in question, every tool and the draft tool, as sent to llama.cpp."""
    settings = load_settings(model="offline")
    model = OpenAICompatModel(base_url="http://127.0.0.1:9/v1", api_key=None, model="local", provider="llamacpp")
    h = memory_harness(settings)
    try:
        cards_tax = h.taxonomy()  # the built-in taxonomy and the labels the built-in cards add
    finally:
        h.runtime.close()
    questions = [load_scenario(i).question for i in ("pg-row-lock", "redis-maxclients", "nginx-upstream-timeout")]
    system = load_prompt("diagnosis_agent").text
    for q in questions:
        body = model.build_request(
            ModelRequest(messages=[SystemMessage(content=system), UserMessage(content=q)], tools=TOOL_SPECS, draft_schema=compact_draft_schema(cards_tax))
        )
        # What the server renders: message contents and each tool's name and parameters.
        rendered = "".join(m["content"] for m in body["messages"]) + "".join(
            t["function"]["name"] + json.dumps(t["function"]["parameters"]) for t in body["tools"]
        )
        assert estimate_tokens(rendered) < 2500, (q, estimate_tokens(rendered))
    model.close()


# -- a forced tool the server cannot take ---------------------------------------------------------


def test_a_forced_draft_that_fails_at_the_server_is_asked_again_as_json_text(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    grammar = error(500, "error parsing grammar: number of rules that are going to be repeated multiplied by the new repetition exceeds sane defaults")
    fenced = "Here is the draft:\n```json\n" + json.dumps(GOOD_DRAFT) + "\n```"
    fake_openai.script([grammar, completion(content=fenced), completion(content=json.dumps(GOOD_DRAFT))])
    model = make(fake_openai, models)

    turn = model.step(draft_request())

    first, second = fake_openai.requests[0], fake_openai.requests[1]
    assert first["tool_choice"] == {"type": "function", "function": {"name": "submit_draft"}}
    assert "tools" not in second and "tool_choice" not in second
    assert "JSON schema" in second["messages"][-1]["content"]
    assert turn.draft == GOOD_DRAFT  # the fenced JSON after leading prose, parsed
    assert turn.note and "asked for as JSON text" in turn.note
    # The server cannot force tools: the next draft turn goes straight to JSON text.
    model.step(draft_request())
    assert len(fake_openai.requests) == 3 and "tools" not in fake_openai.requests[2]


def test_a_json_text_draft_that_does_not_validate_is_a_problem_not_a_crash(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    fake_openai.script([error(400, "tool_choice is not supported"), completion(content="I think the database is slow.")])
    turn = make(fake_openai, models).step(draft_request())
    assert turn.draft == "I think the database is slow."
    draft, problem = parse_draft(turn.draft)
    assert draft is None and problem is not None


def test_a_server_that_is_down_is_still_model_unavailable(models: list[OpenAICompatModel]) -> None:
    model = OpenAICompatModel(base_url="http://127.0.0.1:9/v1", api_key=None, model="local", provider="llamacpp", max_retries=0, timeout_s=2)
    models.append(model)
    with pytest.raises(ModelUnavailable):
        model.step(draft_request())


# -- streaming ------------------------------------------------------------------------------------


def test_a_streamed_forced_draft_is_assembled_and_unescaped(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    # llama-cpp-python's template HTML-escapes the prompt: the model copies `&quot;` back.
    escaped = json.dumps(GOOD_DRAFT).replace('\\"ShareLock\\"', "&quot;ShareLock&quot;")
    assert "&quot;" in escaped
    fake_openai.script([completion(tool_calls=[{"id": "call_1", "name": "submit_draft", "arguments": escaped}], prompt_tokens=None, completion_tokens=None)])
    turn = make(fake_openai, models).step(draft_request())
    body = fake_openai.requests[0]
    assert body["stream"] is True and "stream_options" not in body  # it streams no usage
    assert turn.draft == GOOD_DRAFT
    assert turn.usage.estimated and turn.usage.output_tokens > 5 and turn.usage.input_tokens > 0
    assert turn.first_token_s is not None


def test_streamed_usage_is_read_when_the_server_sends_it(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    fake_openai.script([completion(content="hello there", prompt_tokens=321, completion_tokens=3)])
    turn = make(fake_openai, models, provider="vllm").step(draft_request())
    assert fake_openai.requests[0]["stream_options"] == {"include_usage": True}
    assert (turn.usage.input_tokens, turn.usage.output_tokens, turn.usage.estimated) == (321, 3, False)
    assert turn.text == "hello there"


def test_a_slow_prompt_within_the_first_token_timeout_is_fine(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    """The timeout is on the first token, not the whole answer: 2 s of chunks after 0.5 s of prompt."""
    slow = completion(content="a" * 140, prompt_tokens=5, completion_tokens=10)
    fake_openai.script([Reply(body=slow.body, first_chunk_delay_s=0.5, chunk_delay_s=0.1)])
    t0 = time.monotonic()
    turn = make(fake_openai, models, provider="vllm", timeout_s=1.5, token_timeout_s=0.6).step(draft_request())
    assert time.monotonic() - t0 > 1.5  # longer than timeout_s in all
    assert turn.text == "a" * 140
    assert turn.first_token_s is not None and turn.first_token_s >= 0.5


def test_no_first_token_within_the_timeout_fails_the_attempt(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    slow = completion(content="late")
    fake_openai.script([Reply(body=slow.body, first_chunk_delay_s=3.0)])
    t0 = time.monotonic()
    with pytest.raises(ModelUnavailable, match="no first token within 0.5 s"):
        make(fake_openai, models, provider="vllm", timeout_s=0.5).step(draft_request())
    assert time.monotonic() - t0 < 2.0


def test_a_stream_that_stalls_after_it_began_fails_on_the_token_timeout(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    stalled = completion(content="x" * 50)
    fake_openai.script([Reply(body=stalled.body, chunk_delay_s=3.0, stall_after=3), completion(content="again")])
    t0 = time.monotonic()
    turn = make(fake_openai, models, provider="vllm", timeout_s=5, token_timeout_s=0.4, max_retries=1).step(draft_request())
    # The stalled attempt ended after ~0.4 s and the retry answered.
    assert time.monotonic() - t0 < 2.5
    assert turn.text == "again" and len(fake_openai.requests) == 2


def test_a_stream_is_capped_by_the_runs_deadline(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    dripping = completion(content="y" * 200)
    fake_openai.script([Reply(body=dripping.body, chunk_delay_s=0.1)])
    deadline = time.monotonic() + 0.8
    t0 = time.monotonic()
    with pytest.raises(ModelUnavailable):
        make(fake_openai, models, provider="vllm", timeout_s=5, token_timeout_s=5).step(draft_request(time_left=lambda: deadline - time.monotonic()))
    assert time.monotonic() - t0 < 2.0


# -- the prompt budget ----------------------------------------------------------------------------


def _observation(inv: str, n: int) -> str:
    refs = [{"raw_path": f"$.entries[{i}]", "text": f"2026-08-03 line {i} of {inv} " + "detail " * 40, "data_source": "snapshot"} for i in range(n)]
    return json.dumps({"invocation_id": inv, "tool": "query_logs", "status": "READY", "refs": refs})


def test_older_observations_are_shortened_first_to_fit_the_budget() -> None:
    messages: list[Any] = [SystemMessage(content="sys"), UserMessage(content="q")]
    for i in range(4):
        messages.append(ToolResultMessage(tool_call_id=f"c{i}", name="query_logs", content=_observation(f"inv-{i}", 10)))
    before = [m.content for m in messages[2:]]
    total = fit_prompt_budget(messages, overhead_tokens=500, budget=5000)

    assert total <= 5000
    assert messages[-1].content == before[-1]  # the newest is whole
    oldest = json.loads(messages[2].content)
    assert oldest["invocation_id"] == "inv-0" and oldest["shortened"] and oldest["omitted"] >= 7
    # What is kept of a ref is its start: an excerpt from it is still a substring of the ref.
    full = json.loads(before[0])["refs"][0]["text"]
    assert full.startswith(oldest["refs"][0]["text"])


def test_a_prompt_within_the_budget_is_left_alone() -> None:
    messages: list[Any] = [SystemMessage(content="sys"), ToolResultMessage(tool_call_id="c", name="query_logs", content=_observation("inv-0", 2))]
    before = list(messages)
    fit_prompt_budget(messages, overhead_tokens=100, budget=6000)
    assert messages == before


def test_compact_schema_drops_bounds_but_keeps_enums_and_required() -> None:
    full = TOOLS["inspect_postgres"].json_schema()
    small = compact_schema(full)
    assert small["required"] == ["kind"]
    assert "top_queries" in small["properties"]["kind"]["enum"]
    assert not _keys(small) & set(BOUNDS)
    assert len(json.dumps(small)) < len(json.dumps(full)) * 0.7


# -- a whole run on a server with llama.cpp's quirks ----------------------------------------------


def _json_text_draft(body: dict[str, Any]) -> Reply:
    """The JSON-text draft turn: read the relayed observation, answer fenced JSON after prose."""
    assert "tools" not in body and "JSON schema" in body["messages"][-1]["content"]
    relayed = [m["content"] for m in body["messages"] if m["role"] == "user" and m["content"].startswith("Tool result for query_logs")]
    obs = json.loads(relayed[0].split("\n", 1)[1])
    refs = [r for r in obs["refs"] if r["raw_path"] != "$.no_evidence"][:2]
    excerpts = [r["text"][:160] for r in refs]
    draft = {
        "summary": "Row lock waits in PostgreSQL.",
        "claims": [
            {
                "id": "c1",
                "text": "PostgreSQL logs: " + " and ".join(f'"{e}"' for e in excerpts),
                "kind": "root_cause",
                "citations": [{"invocation_id": obs["invocation_id"], "tool_name": "query_logs", "raw_path": r["raw_path"], "excerpt": e} for r, e in zip(refs, excerpts, strict=True)],
            }
        ],
        "hypotheses": [],
        "root_cause": {"component": "postgresql", "mechanism": "row_lock_contention", "culprit": "", "claim_ids": ["c1"]},
        "recovery": [],
        "limitations": [],
        "next_steps": [],
    }
    return completion(content="Here is the draft.\n```json\n" + json.dumps(draft) + "\n```")


def test_a_run_that_repeats_itself_is_told_plainly_then_drafts_as_json_text_after_a_forced_tool_fails(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    from rootproof.runtime import Runtime
    from rootproof.store import SqlTraceStore

    store = SqlTraceStore(f"sqlite:///{tmp_path / 'trace.db'}")
    settings = load_settings(data_dir=tmp_path / "home", deadline_s=60, model_max_output_tokens=3000)
    h = Harness(Runtime.from_settings(settings, sink=store))
    model = OpenAICompatModel(base_url=fake_openai.base_url, api_key=None, model="local", provider="llamacpp", backoff_s=0.01, max_retries=0)
    same = {"id": "", "name": "query_logs", "arguments": '{"query": "\\"still waiting for ShareLock\\""}'}
    fake_openai.script(
        [
            completion(content='{"route": "DIAGNOSIS"}'),
            completion(tool_calls=[same]),
            completion(tool_calls=[same]),
            completion(tool_calls=[same]),
            error(500, "error parsing grammar: number of rules that are going to be repeated multiplied by the new repetition exceeds sane defaults"),
            _json_text_draft,
        ]
    )
    sc = load_scenario("pg-row-lock")
    steps: list[Any] = []
    try:
        out = h.diagnose(sc.question, scenario=sc, model=model, on_model_step=steps.append)
    finally:
        h.runtime.close()
        model.close()

    assert (out.status, out.release_outcome) == ("SUCCESS", "PUBLISHED"), out.evidence and out.evidence.codes
    _router, first, second, third, forced, as_json = fake_openai.requests
    assert first["tool_choice"] == "auto" and "stream" not in first
    assert first["max_tokens"] == forced["max_tokens"] == 3000  # ROOTPROOF_MODEL_MAX_OUTPUT_TOKENS
    # After the duplicate: what was refused, why, and what to do instead, in plain words.
    assert "None of your calls of this step ran" not in json.dumps(second)  # the first call ran
    note = third["messages"][-1]["content"]
    assert "None of your calls of this step ran: query_logs was refused (DUPLICATE_SCOPE" in note
    assert "cite inv-" in note and "submit the draft with submit_draft" in note
    assert "Tools not called yet: lookup_knowledge" in note and "inspect_postgres" in note
    # Two stalled steps end gathering: the draft is forced, the server fails it, JSON text follows.
    assert forced["tool_choice"] == {"type": "function", "function": {"name": "submit_draft"}} and forced["stream"] is True
    # The draft request starts as the gather requests did (same tools, same earlier messages):
    # a server's prompt cache then processes only the new messages.
    assert forced["tools"] == first["tools"]
    assert forced["messages"][: len(third["messages"])] == third["messages"]
    assert "tools" not in as_json
    # The draft request says what may be cited: the one call that ran, with its ref paths.
    ran = [i for i in store.trace(out.run_id)["invocations"] if i["status"] == "READY"]  # type: ignore[index]
    note = forced["messages"][-1]["content"]
    assert note.startswith("Gathering is over.") and f"- {ran[0]['invocation_id']} (query_logs): $.entries[0]" in note
    assert len(ran) == 1 and note.count("\n- ") == 1
    assert [s.mode for s in steps] == ["gather", "gather", "gather", "draft"]
    assert steps[-1].note and "asked for as JSON text" in steps[-1].note
    trace = store.trace(out.run_id)
    assert trace is not None
    assert "asked for as JSON text" in trace["steps"][-1]["model_output"]
    # The relayed observation was all the model saw of the result (its template drops role tool).
    assert any(m["role"] == "user" and m["content"].startswith("Tool result for query_logs") for m in as_json["messages"])


def test_a_stream_cut_short_without_a_finish_reason_is_retried(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    """llama-cpp-python ends a stream early when another request arrives (or fails after the
    headers): the chunks stop, no finish_reason, maybe no [DONE]. That attempt is retried."""
    cut = completion(tool_calls=[{"id": "call_1", "name": "submit_draft", "arguments": json.dumps(GOOD_DRAFT)}])
    chunks = stream_chunks(cut.body, include_usage=False)  # type: ignore[arg-type]
    truncated = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks[:4])  # role + a few argument pieces
    fake_openai.script(
        [
            Reply(body=truncated, headers={"Content-Type": "text/event-stream"}),
            Reply(body="", headers={"Content-Type": "text/event-stream"}),  # no chunk at all
            cut,
        ]
    )
    turn = make(fake_openai, models, max_retries=2).step(draft_request())
    assert turn.draft == GOOD_DRAFT and len(fake_openai.requests) == 3


def test_a_stream_cut_short_every_time_is_model_unavailable(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    fake_openai.script([Reply(body="", headers={"Content-Type": "text/event-stream"})] * 2)
    with pytest.raises(ModelUnavailable, match="the stream ended before the answer was finished"):
        make(fake_openai, models, max_retries=1).step(draft_request())


# -- a hostile model server (review findings) -----------------------------------------------------


def _sse(*chunks: dict[str, Any], done: bool = True) -> Reply:
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + ("data: [DONE]\n\n" if done else "")
    return Reply(body=text, headers={"Content-Type": "text/event-stream"})


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


@pytest.mark.parametrize(
    "reply",
    [
        _sse(_chunk({"content": 5}), _chunk({}, "stop")),  # a number where text belongs
        _sse(_chunk({"tool_calls": [{"index": [0], "function": {"name": "x", "arguments": "{}"}}]}), _chunk({}, "stop")),
        _sse({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": 5}),
    ],
    ids=["int-content", "list-index", "choices-int"],
)
def test_a_malformed_chunk_is_an_output_error_not_a_crash(fake_openai: FakeOpenAI, models: list[OpenAICompatModel], reply: Reply) -> None:
    from rootproof.errors import ModelOutputError

    fake_openai.script([reply])
    with pytest.raises(ModelOutputError, match="not a chat completion"):
        make(fake_openai, models, provider="vllm").step(draft_request())


def test_an_endless_answer_is_cut_at_the_answer_cap(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    from rootproof.agent.models.openai_compat import MAX_ANSWER_CHARS
    from rootproof.errors import ModelOutputError

    piece = "z" * 4096
    fake_openai.script([_sse(*[_chunk({"content": piece})] * (MAX_ANSWER_CHARS // len(piece) + 8), _chunk({}, "stop"))])
    with pytest.raises(ModelOutputError, match="longer than"):
        make(fake_openai, models, provider="vllm").step(draft_request())


def test_chunks_without_text_do_not_count_as_the_first_token(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    """Chunks with no text are no answer: such a stream fails (here it ends without a
    finish_reason) and is never taken for a reply. The reviewer's repro with an open connection
    showed the first-token timeout firing on it (2.0 s against a 2 s timeout)."""
    fake_openai.script([Reply(body=_sse(*[_chunk({"role": "assistant"})] * 40, done=False).body + ": keep-alive\n\n" * 10, headers={"Content-Type": "text/event-stream"}, delay_s=0.0)])
    t0 = time.monotonic()
    with pytest.raises(ModelUnavailable):
        make(fake_openai, models, provider="vllm", timeout_s=0.5).step(draft_request())
    assert time.monotonic() - t0 < 3


@pytest.mark.parametrize("status", [429, 401, 503])
def test_a_forced_draft_refused_for_other_reasons_is_not_asked_as_json_text(fake_openai: FakeOpenAI, models: list[OpenAICompatModel], status: int) -> None:
    fake_openai.script([error(status, "no")] * 3)
    model = make(fake_openai, models)
    with pytest.raises(ModelUnavailable):
        model.step(draft_request())
    assert all(isinstance(r.get("tool_choice"), dict) for r in fake_openai.requests)
    fake_openai.script([completion(tool_calls=[{"id": "c", "name": "submit_draft", "arguments": json.dumps(GOOD_DRAFT)}])])
    assert model.step(draft_request()).draft == GOOD_DRAFT  # and the next draft is still forced
    assert isinstance(fake_openai.requests[-1].get("tool_choice"), dict)


def test_a_rejected_forced_request_falls_back_for_this_turn_only(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    fake_openai.script([error(400, "maximum context length exceeded"), completion(content=json.dumps(GOOD_DRAFT)), completion(content="ok")])
    model = make(fake_openai, models)
    assert model.step(draft_request()).draft == GOOD_DRAFT
    model.step(draft_request())
    assert isinstance(fake_openai.requests[-1].get("tool_choice"), dict)  # forcing is tried again


def test_only_a_templates_escapes_are_undone() -> None:
    from rootproof.agent.models.openai_compat import _unescaped

    assert _unescaped({"q": "a &quot;b&quot; &lt;c&gt; &#39;d&#39; &amp;amp;"}) == {"q": "a \"b\" <c> 'd' &amp;"}
    assert _unescaped("?id=7&not_before=2&copy=1") == "?id=7&not_before=2&copy=1"


def test_the_runtime_gives_the_model_client_both_timeouts(tmp_path: Path) -> None:
    from rootproof.runtime import Runtime

    settings = load_settings(data_dir=tmp_path, model="openai", openai_base_url="http://127.0.0.1:9/v1", openai_provider="llamacpp", model_timeout_s=77, model_token_timeout_s=5)
    with Runtime.from_settings(settings) as rt:
        model = rt.model()
        assert isinstance(model, OpenAICompatModel)
        assert (model.timeout_s, model.token_timeout_s) == (77, 5)


def test_a_cancelled_run_ends_its_stream_at_once(fake_openai: FakeOpenAI, models: list[OpenAICompatModel]) -> None:
    slow = completion(content="w" * 200)
    fake_openai.script([Reply(body=slow.body, chunk_delay_s=0.2)])
    flag = {"cancelled": False}
    t0 = time.monotonic()

    def cancel_soon() -> bool:
        if time.monotonic() - t0 > 0.5:
            flag["cancelled"] = True
        return flag["cancelled"]

    with pytest.raises(ModelUnavailable, match="cancelled"):
        make(fake_openai, models, provider="vllm", timeout_s=10, token_timeout_s=10, max_retries=3).step(draft_request(cancelled=cancel_soon))
    assert time.monotonic() - t0 < 2.0 and len(fake_openai.requests) == 1
