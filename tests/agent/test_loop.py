"""The agent loop with the scripted model: duplicates, budgets, deadline, cancellation, failures, malformed output."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rootproof.agent.models.base import ModelRequest
from rootproof.agent.models.scripted import ScriptedModel, ScriptedStep
from rootproof.harness import Harness
from rootproof.run.context import RunCancellation
from rootproof.run.records import MemoryTraceSink
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    home = tmp_path_factory.mktemp("home")
    return Harness(Runtime.from_settings(load_settings(data_dir=home, deadline_s=30), sink=MemoryTraceSink()))


def _obs(requests: list[ModelRequest]) -> list[dict[str, Any]]:
    import json

    out = []
    for m in requests[-1].messages:
        if m.role == "tool":
            out.append(json.loads(m.content))
    return out


def _valid_draft(requests: list[ModelRequest]) -> dict[str, Any]:
    """Cite the first READY non-mock log ref observed, verbatim."""
    for o in _obs(requests):
        if o["status"] == "READY" and o.get("refs") and o["refs"][0]["raw_path"] != "$.no_evidence":
            ref = o["refs"][0]
            return {
                "summary": "finding only",
                "root_cause": None,
                "claims": [{"id": "c1", "text": f'Logs show "{ref["text"][:120]}"', "kind": "finding", "citations": [{"invocation_id": o["invocation_id"], "tool_name": o["tool"], "raw_path": ref["raw_path"], "excerpt": ref["text"][:120]}]}],
            }
    raise AssertionError("no observation to cite")


def test_duplicate_call_refused_and_model_recovers(harness: Harness) -> None:
    sc = load_scenario("pg-row-lock")
    model = ScriptedModel(
        [
            ScriptedStep(calls=[("query_logs", {"query": "ShareLock"})]),
            ScriptedStep(calls=[("query_logs", {"query": "sharelock"})]),  # same scope: refused
            ScriptedStep(draft=_valid_draft),
        ]
    )
    out = harness.diagnose(sc.question, scenario=sc, model=model)
    codes = [o.invocation.refusal_code for o in out.outcomes]
    assert codes == [None, "DUPLICATE_SCOPE"]
    dup_msg = out.outcomes[1].invocation.message or ""
    assert out.outcomes[0].invocation.invocation_id in dup_msg
    assert out.release_outcome == "PUBLISHED" and out.status == "SUCCESS"


def test_budget_exhaustion_falls_back(harness: Harness) -> None:
    sc = load_scenario("pg-row-lock")
    steps = [ScriptedStep(calls=[("query_logs", {"query": f"term{i}"})]) for i in range(20)]
    out = harness.diagnose(sc.question, scenario=sc, model=ScriptedModel(steps))
    assert (out.status, out.release_outcome, out.fallback_type) == ("SUCCESS", "FALLBACK", "BUDGET_EXHAUSTED")
    assert out.content is not None and out.content["fallback"]["conclusion"] is None


def test_deadline(tmp_path: Any) -> None:
    h = Harness(Runtime.from_settings(load_settings(data_dir=tmp_path, deadline_s=0.3), sink=MemoryTraceSink()))
    sc = load_scenario("pg-row-lock")
    model = ScriptedModel([ScriptedStep(calls=[("query_logs", {})], sleep_s=0.5), ScriptedStep(draft=_valid_draft)])
    out = h.diagnose(sc.question, scenario=sc, model=model)
    assert (out.status, out.release_outcome, out.fallback_type) == ("TIMED_OUT", "FALLBACK", "DEADLINE_EXCEEDED")
    assert [e["type"] for e in out.events][-2:] == ["content", "done"]


def test_cancellation_mid_tool(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from rootproof.backends import snapshot

    real = snapshot.SnapshotBackend.call

    def slow(self: Any, *a: Any, **k: Any) -> Any:
        time.sleep(4)
        return real(self, *a, **k)

    monkeypatch.setattr(snapshot.SnapshotBackend, "call", slow)
    sc = load_scenario("pg-row-lock")
    cancel = RunCancellation()
    threading.Timer(0.2, cancel.cancel, args=("user",)).start()
    t0 = time.monotonic()
    out = harness.diagnose(sc.question, scenario=sc, model=ScriptedModel([ScriptedStep(calls=[("query_logs", {})])]), cancellation=cancel)
    assert time.monotonic() - t0 < 3.0  # interrupted, not waited out
    assert (out.status, out.release_outcome, out.content) == ("CANCELLED", "NONE", None)
    types = [e["type"] for e in out.events]
    assert "content" not in types and types[-1] == "done"


def test_provider_failure_is_model_unavailable(harness: Harness) -> None:
    sc = load_scenario("pg-row-lock")
    out = harness.diagnose(sc.question, scenario=sc, model=ScriptedModel([ScriptedStep(fail="unavailable")]))
    assert (out.status, out.release_outcome, out.fallback_type) == ("FAILED", "FALLBACK", "MODEL_UNAVAILABLE")


def test_malformed_output_gets_one_repair_then_no_draft(harness: Harness) -> None:
    sc = load_scenario("pg-row-lock")
    model = ScriptedModel([ScriptedStep(draft="{not json"), ScriptedStep(draft={"summary": 3})])
    out = harness.diagnose(sc.question, scenario=sc, model=model)
    assert (out.status, out.release_outcome, out.fallback_type) == ("SUCCESS", "FALLBACK", "NO_DRAFT")
    assert "invalid" in model.requests[1].messages[-1].content  # the repair turn
    model2 = ScriptedModel([ScriptedStep(calls=[("query_logs", {})]), ScriptedStep(draft="{oops"), ScriptedStep(draft=_valid_draft)])
    assert harness.diagnose(sc.question, scenario=sc, model=model2).release_outcome == "PUBLISHED"


def test_fabricated_citation_never_publishes(harness: Harness) -> None:
    sc = load_scenario("pg-row-lock")
    draft = {"summary": "x", "root_cause": {"component": "postgresql", "mechanism": "row_lock_contention", "claim_ids": ["c1"]},
             "claims": [{"id": "c1", "text": "lock", "kind": "root_cause", "citations": [{"invocation_id": "inv-000000000000", "tool_name": "query_logs", "raw_path": "$.entries[0]", "excerpt": "still waiting for ShareLock"}]}]}
    out = harness.diagnose(sc.question, scenario=sc, model=ScriptedModel([ScriptedStep(draft=draft)]))
    assert out.fallback_type == "EVIDENCE_VALIDATION_FAILED"
    assert out.evidence is not None and "UNKNOWN_INVOCATION" in out.evidence.codes


def test_reasoning_audit_never_invented(harness: Harness) -> None:
    sink = MemoryTraceSink()
    h = Harness(Runtime.from_settings(harness.settings, sink=sink, knowledge=harness.runtime.loaded_knowledge()))
    sc = load_scenario("pg-row-lock")
    model = ScriptedModel([ScriptedStep(calls=[("query_logs", {})], reasoning="thinking about locks"), ScriptedStep(draft=_valid_draft, text="here")])
    out = h.diagnose(sc.question, scenario=sc, model=model)
    rows = [r for r in sink.reasoning if r.run_id == out.run_id]
    assert [(r.reasoning_available, r.content_source) for r in rows] == [(True, "PROVIDER_REASONING"), (False, "ASSISTANT_TEXT")]
    assert rows[1].reasoning_content is None
    assert all("thinking about locks" not in str(e["data"]) for e in out.events)
