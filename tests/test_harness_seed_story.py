"""The seed story (seed 002), reproduced exactly on the embedded default."""

from __future__ import annotations

import pytest

from rootproof.harness import Harness
from rootproof.run.records import MemoryTraceSink
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings

SEED_FALLBACK = {
    "content_type": "SAFE_FALLBACK",
    "fallback": {
        "type": "EVIDENCE_VALIDATION_FAILED",
        "conclusion": None,
        "message": "当前证据无法完成真实性校验，无法确认根因",
        "verified_sources": [],
        "limitations": ["证据引用校验未通过"],
        "next_steps": ["重新收集当前诊断范围内的证据后再发起诊断"],
    },
}


SEED_EVENTS = [
    ("metadata", None),
    ("status", "ROUTING"),
    ("status", "DIAGNOSIS_RUNNING"),
    ("status", "SAFETY_VALIDATING"),
    ("content", "SAFE_FALLBACK"),
    ("done", "FALLBACK"),
]
"""The seed story's public events without `tool` (seed 002, section 9): the CLI's and the SSE's."""


@pytest.mark.parametrize("question", ["支付接口最近出现超时"])
def test_payment_timeout_seed_story(tmp_path: object, question: str) -> None:
    sink = MemoryTraceSink()
    h = Harness(Runtime.from_settings(load_settings(data_dir=tmp_path), sink=sink))
    out = h.diagnose(question, scenario=load_scenario("payment-timeout"))
    # step 0 calls both tools; both READY / EVIDENCE_FOUND; the logs are mock
    first = [o.invocation for o in out.outcomes if o.invocation.step_index == 0]
    assert sorted(i.tool_name for i in first) == ["lookup_knowledge", "query_logs"]
    assert all((str(i.status), i.evidence_status) == ("READY", "EVIDENCE_FOUND") for i in first)
    assert next(i for i in first if i.tool_name == "query_logs").data_source == "mock"
    # the draft's root cause rests on the mock logs → ROOT_CAUSE_MOCK_ONLY, nothing else
    assert out.draft is not None and out.draft.root_cause is not None
    assert out.evidence is not None and out.evidence.codes == ["ROOT_CAUSE_MOCK_ONLY"]
    assert (out.status, out.release_outcome) == ("SUCCESS", "FALLBACK")
    assert out.content == SEED_FALLBACK
    public = [(e["type"], e["data"].get("phase") or e["data"].get("content_type") or e["data"].get("release_outcome")) for e in out.events if e["type"] != "tool"]
    assert public == SEED_EVENTS
    run = sink.runs[out.run_id]
    assert (run.status, run.release_outcome, run.fallback_type) == ("SUCCESS", "FALLBACK", "EVIDENCE_VALIDATION_FAILED")
    steps = [s for s in sink.steps if s.run_id == out.run_id]
    assert [s.has_tool_call for s in steps] == [True, False]  # step 0 calls both tools, step 1 writes the draft
    assert len(out.outcomes) == 2
    # violations stay in the trace, never in public events
    assert "ROOT_CAUSE_MOCK_ONLY" not in str(out.events)
    assert run.self_evaluation is not None and run.self_evaluation["evidence_guard"]["codes"] == ["ROOT_CAUSE_MOCK_ONLY"]
