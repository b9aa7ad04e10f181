"""A whole run with the OpenAI-compatible model, over real HTTP against a local server.

Asserts what the client sent (tool schemas, replayed DeepSeek reasoning), how the run ended,
and the audit rows it left in the trace store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rootproof.agent.models.openai_compat import OpenAICompatModel
from rootproof.harness import Harness
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings
from rootproof.store import SqlTraceStore

from .fake_openai_server import FakeOpenAI, Reply, completion, error, fake_openai  # noqa: F401


def _harness(tmp_path: Path) -> tuple[Harness, SqlTraceStore]:
    store = SqlTraceStore(f"sqlite:///{tmp_path / 'trace.db'}")
    return Harness(Runtime.from_settings(load_settings(data_dir=tmp_path / "home", deadline_s=30), sink=store)), store


def _draft_from_tool_result(body: dict[str, Any], reasoning: str | None = None) -> Reply:
    """Turn 2: read the observation the client relayed and submit a draft citing it verbatim."""
    tool_msgs = [m for m in body["messages"] if m["role"] == "tool"]
    obs = json.loads(tool_msgs[0]["content"])
    # Two independent records (the guard's ROOT_CAUSE_UNCORROBORATED), both from the database's log.
    refs = [r for r in obs["refs"] if r["raw_path"] != "$.no_evidence"][:2]
    excerpts = [r["text"][:160] for r in refs]
    draft = {
        "summary": "Row lock waits in PostgreSQL.",
        "root_cause": {"component": "postgresql", "mechanism": "row_lock_contention", "culprit": "", "claim_ids": ["c1"]},
        "claims": [
            {"id": "c1", "text": "PostgreSQL logs: " + " and ".join(f'"{e}"' for e in excerpts), "kind": "root_cause",
             "citations": [{"invocation_id": obs["invocation_id"], "tool_name": "query_logs", "raw_path": r["raw_path"], "excerpt": e} for r, e in zip(refs, excerpts, strict=True)]}
        ],
    }
    return completion(reasoning_content=reasoning, tool_calls=[{"id": "call_2", "name": "submit_draft", "arguments": json.dumps(draft)}])


def test_deepseek_run_publishes_and_audits_reasoning(fake_openai: FakeOpenAI, tmp_path: Path) -> None:  # noqa: F811
    h, store = _harness(tmp_path)
    model = OpenAICompatModel(base_url=fake_openai.base_url, api_key="k", model="deepseek-reasoner", provider="deepseek", backoff_s=0.01)
    fake_openai.script(
        [
            completion(content='{"route": "DIAGNOSIS"}'),
            completion(reasoning_content="THINK-7f3a check the database log.", tool_calls=[{"id": "call_1", "name": "query_logs", "arguments": '{"query": "\\"still waiting for ShareLock\\""}'}]),
            lambda body: _draft_from_tool_result(body, "The waits are on a row lock; draft now."),
        ]
    )
    sc = load_scenario("pg-row-lock")
    out = h.diagnose(sc.question, scenario=sc, model=model)
    assert (out.status, out.release_outcome) == ("SUCCESS", "PUBLISHED"), out.evidence and out.evidence.codes
    # what the client sent: the tools (with submit_draft), auto tool choice, the replayed reasoning
    router, first, second = fake_openai.requests
    assert "tools" not in router  # the router has no tools
    names = {t["function"]["name"] for t in first["tools"]}
    assert {"query_logs", "lookup_knowledge", "submit_draft"} <= names and first["tool_choice"] == "auto"
    assistant = next(m for m in second["messages"] if m["role"] == "assistant")
    assert assistant["reasoning_content"] == "THINK-7f3a check the database log."
    # audit rows: a step and a reasoning row per model step, reasoning never in events
    trace = store.trace(out.run_id)
    assert trace is not None
    assert [s["step_index"] for s in trace["steps"]] == [0, 1] and trace["steps"][0]["has_tool_call"]
    assert [(r["reasoning_available"], r["content_source"]) for r in trace["reasoning"]] == [(True, "PROVIDER_REASONING"), (True, "PROVIDER_REASONING")]
    full = store.reasoning(out.run_id)
    assert full[0]["reasoning_content"] == "THINK-7f3a check the database log."
    assert "THINK-7f3a" not in json.dumps(trace["events"], ensure_ascii=False)
    assert trace["run"]["tokens"] == 45 and trace["invocations"][0]["tool_name"] == "query_logs"


def test_rate_limited_then_success(fake_openai: FakeOpenAI, tmp_path: Path) -> None:  # noqa: F811
    h, store = _harness(tmp_path)
    model = OpenAICompatModel(base_url=fake_openai.base_url, api_key="k", model="gpt", provider="openai", backoff_s=0.01)
    fake_openai.script(
        [
            completion(content='{"route": "DIAGNOSIS"}'),
            error(429, "slow down", retry_after="0"),
            completion(tool_calls=[{"id": "call_1", "name": "query_logs", "arguments": '{"query": "ShareLock"}'}]),
            _draft_from_tool_result,
        ]
    )
    sc = load_scenario("pg-row-lock")
    out = h.diagnose(sc.question, scenario=sc, model=model)
    assert len(fake_openai.requests) == 4
    assert out.release_outcome == "PUBLISHED"
    rows = store.reasoning(out.run_id)
    assert [r["reasoning_available"] for r in rows] == [False, False]  # never invented


def test_provider_down_ends_in_model_unavailable(fake_openai: FakeOpenAI, tmp_path: Path) -> None:  # noqa: F811
    h, store = _harness(tmp_path)
    model = OpenAICompatModel(base_url=fake_openai.base_url, api_key="k", model="gpt", provider="vllm", max_retries=2, backoff_s=0.01)
    fake_openai.script([error(500, "boom")] * 30)
    sc = load_scenario("pg-row-lock")
    out = h.diagnose(sc.question, scenario=sc, model=model)
    assert (out.status, out.release_outcome, out.fallback_type) == ("FAILED", "FALLBACK", "MODEL_UNAVAILABLE")
    # the router (1 call + 1 retry) fails over to DIAGNOSIS; the agent's step then gives up
    # after max_retries + 1 attempts
    assert len(fake_openai.requests) == 2 * 3 + 3
    run = store.get_run(out.run_id)
    assert run is not None and (run.status, run.fallback_type) == ("FAILED", "MODEL_UNAVAILABLE")
    assert out.content is not None and out.content["fallback"]["message"].startswith("The model service was unavailable")


@pytest.mark.parametrize(
    ("judge_reply", "fallback"),
    [
        ('{"verdict": "NOT_ENOUGH_INFO", "reason": "the excerpt does not say"}', "SEMANTIC_UNSUPPORTED"),
        ("I think it is probably fine", "GUARD_UNAVAILABLE"),  # unparseable: fail closed
    ],
)
def test_llm_judge_and_router_over_http(fake_openai: FakeOpenAI, tmp_path: Path, judge_reply: str, fallback: str) -> None:  # noqa: F811
    store = SqlTraceStore(f"sqlite:///{tmp_path / 'trace.db'}")
    h = Harness(Runtime.from_settings(load_settings(data_dir=tmp_path / "home", deadline_s=30, judge="llm"), sink=store))
    model = OpenAICompatModel(base_url=fake_openai.base_url, api_key="k", model="gpt", provider="openai", backoff_s=0.01)
    fake_openai.script(
        [
            completion(content='{"route": "DIAGNOSIS"}'),
            completion(tool_calls=[{"id": "call_1", "name": "query_logs", "arguments": '{"query": "ShareLock"}'}]),
            _draft_from_tool_result,
            completion(content=judge_reply),
        ]
    )
    sc = load_scenario("pg-row-lock")
    out = h.diagnose(sc.question, scenario=sc, model=model)
    # "not enough info" counts as UNSUPPORTED; output that does not parse withholds the draft too
    assert (out.release_outcome, out.fallback_type) == ("FALLBACK", fallback)
    router_req, judge_req = fake_openai.requests[0], fake_openai.requests[3]
    assert "tools" not in router_req and "tools" not in judge_req and judge_req["temperature"] == 0.0
    asked = json.loads(judge_req["messages"][1]["content"])
    assert asked["claim"].startswith("PostgreSQL logs:")
    # The judge's only view of the trace is the compact ToolTraceSummary: no raw results, no ref texts.
    assert set(asked) == {"question", "claim", "evidence", "tool_trace"}
    summary = asked["tool_trace"]
    assert [t["tool"] for t in summary] == ["query_logs"]
    assert set(summary[0]) == {"invocation_id", "tool", "status", "evidence_status", "evidence_count", "cited_paths"}
    assert summary[0]["status"] == "READY" and summary[0]["cited_paths"]
    run = store.get_run(out.run_id)
    assert run is not None and run.self_evaluation is not None
    assert run.self_evaluation["tool_trace_summary"] == summary
    sem = run.self_evaluation["semantic_guard"]
    assert sem["judge"] == "llm-judge-v1" and sem["rule_set_version"].startswith("guard-rules-v")
    assert {r["code"] for r in sem["rules"]} == {"EVERY_CLAIM_SUPPORTED", "FAIL_CLOSED", "JUDGE_UNSUPPORTED", "JUDGE_NOT_ENOUGH_INFO"}
    if fallback == "SEMANTIC_UNSUPPORTED":
        assert [v["code"] for v in sem["verdicts"]] == ["JUDGE_NOT_ENOUGH_INFO"]
    else:
        assert sem["available"] is False and sem["verdicts"] == []
