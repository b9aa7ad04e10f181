"""`rootproof audit` re-verifies published runs from the trace alone."""

from __future__ import annotations

import copy
from pathlib import Path

from rootproof.audit import audit_run
from rootproof.harness import Harness
from rootproof.run.records import MemoryTraceSink
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings
from rootproof.store import SqlTraceStore


def test_published_run_audits_clean_and_tampering_is_found(tmp_path: Path) -> None:
    store = SqlTraceStore(f"sqlite:///{tmp_path / 't.db'}")
    h = Harness(Runtime.from_settings(load_settings(data_dir=tmp_path), sink=store))
    sc = load_scenario("pg-row-lock")
    out = h.diagnose(sc.question, scenario=sc)
    assert out.release_outcome == "PUBLISHED"
    trace = store.trace(out.run_id)
    assert trace is not None
    clean = audit_run(trace)
    assert clean.ok and clean.checked_citations > 0

    bad = copy.deepcopy(trace)
    claim = bad["run"]["content"]["report"]["claims"][0]
    claim["citations"][0]["excerpt"] = claim["citations"][0]["excerpt"].replace("4", "5", 1) + " tampered"
    assert any("excerpt not in the recorded ref text" in p for p in audit_run(bad).problems)

    bad2 = copy.deepcopy(trace)
    bad2["invocations"] = []
    assert any("no such invocation" in p for p in audit_run(bad2).problems)

    # A contributing cause is audited like the root cause: it must rest on runtime evidence.
    report = trace["run"]["content"]["report"]
    backed = copy.deepcopy(trace)
    backed["run"]["content"]["report"]["contributing_causes"] = [
        {"component": "redis", "mechanism": "max_clients_reached", "culprit": "", "claim_ids": report["root_cause"]["claim_ids"]}
    ]
    assert audit_run(backed).ok
    bare = copy.deepcopy(backed)
    bare["run"]["content"]["report"]["contributing_causes"][0]["claim_ids"] = []
    assert audit_run(bare).problems == ["contributing_causes[0] rests on no runtime, non-mock, non-injected evidence"]


def test_fallback_runs_have_nothing_to_audit(tmp_path: Path) -> None:
    sink = MemoryTraceSink()
    h = Harness(Runtime.from_settings(load_settings(data_dir=tmp_path), sink=sink))
    out = h.diagnose("支付接口最近出现超时", scenario=load_scenario("payment-timeout"))
    finding = audit_run(sink.trace(out.run_id))
    assert finding.ok and finding.release_outcome == "FALLBACK" and finding.checked_citations == 0
