"""Snapshot benchmark: the evaluator's rules, the worker-process runner, persistence, reports, CLI."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rootproof.agent.models.base import Model, ModelRequest, ModelTurn
from rootproof.agent.models.scripted import ScriptedModel, ScriptedStep
from rootproof.eval.report import KNOWLEDGE_OMITTED, render_html, report_json
from rootproof.eval.scoring import CaseObservation, CitedRef, ToolAuditEntry, score_case
from rootproof.eval.snapshot import run_suite
from rootproof.scenarios.loader import scenario_folder
from rootproof.scenarios.types import (
    Alternative,
    EvidenceMatch,
    ExpectedOutcome,
    GroundTruth,
    Recovery,
    RedHerring,
    RequiredEvidence,
    RootCause,
)
from rootproof.settings import Settings
from rootproof.store.sql import SqlTraceStore

# ---------------------------------------------------------------------------------------------
# Agent models for the worker (importable there as `tests.eval.test_snapshot:<name>`)
# ---------------------------------------------------------------------------------------------

GT_ENV = "ROOTPROOF_TEST_GT_PATH"


class GroundTruthReader:
    """An agent that cheats: it opens the scenario's ground truth during its step."""

    name = "ground-truth-reader"

    def step(self, request: ModelRequest) -> ModelTurn:
        with open(os.environ[GT_ENV], encoding="utf-8") as fh:
            fh.read()
        return ModelTurn(text="")


def ground_truth_reader() -> Model:
    """Factory for the worker."""
    return GroundTruthReader()


class Crasher:
    """An agent whose process dies mid-step (a worker crash, not an agent failure)."""

    name = "crasher"

    def step(self, request: ModelRequest) -> ModelTurn:
        os._exit(3)


def crasher() -> Model:
    """Factory for the worker."""
    return Crasher()


def _fabricated_draft(tool: str, component: str, mechanism: str) -> dict[str, Any]:
    return {
        "summary": "Diagnosis citing an invocation that never ran.",
        "root_cause": {"component": component, "mechanism": mechanism, "culprit": "x", "claim_ids": ["c1"]},
        "claims": [
            {
                "id": "c1",
                "text": "The evidence shows the fault.",
                "kind": "root_cause",
                "citations": [
                    {
                        "invocation_id": "inv-000000000000",
                        "tool_name": tool,
                        "raw_path": "$.rows[0]",
                        "excerpt": "idle in transaction",
                    }
                ],
            }
        ],
        "hypotheses": [
            {
                "statement": "s",
                "component": component,
                "mechanism": mechanism,
                "status": "confirmed",
                "claim_ids": ["c1"],
            },
            {
                "statement": "t",
                "component": "connection_pool",
                "mechanism": "pool_leak",
                "status": "ruled_out",
                "claim_ids": ["c1"],
            },
        ],
        "plan": [{"step": 0, "hypothesis": "s", "tool": tool, "why": "look"}],
    }


def fabricated_row_lock() -> Model:
    """Calls a real tool, then cites a made-up invocation id (pg-row-lock)."""
    return ScriptedModel(
        [
            ScriptedStep(calls=[("inspect_postgres", {"kind": "activity"})]),
            ScriptedStep(draft=_fabricated_draft("inspect_postgres", "postgresql", "row_lock_contention")),
        ]
    )


def fabricated_payment() -> Model:
    """Calls query_logs, then cites a made-up invocation id (payment-timeout, expected FALLBACK)."""
    return ScriptedModel(
        [
            ScriptedStep(calls=[("query_logs", {})]),
            ScriptedStep(draft=_fabricated_draft("query_logs", "connection_pool", "connection_exhaustion")),
        ]
    )


# ---------------------------------------------------------------------------------------------
# Evaluator rules (pure)
# ---------------------------------------------------------------------------------------------


def _truth(**over: Any) -> GroundTruth:
    base: dict[str, Any] = {
        "fault": True,
        "expected_outcome": None,
        "root_cause": RootCause(component="postgresql", mechanism="row_lock_contention", culprit="pid 4242"),
        "required_evidence": (
            RequiredEvidence(
                id="blocker", tool="inspect_postgres", match=('"pid":4242', "idle in transaction")
            ),
            RequiredEvidence(id="waiter", tool="inspect_postgres", match=('"blocking_pids":[4242]',)),
        ),
        "alternatives": (
            Alternative(component="connection_pool", mechanism="pool_leak", ruled_out_by=("waiter",)),
        ),
        "red_herrings": (RedHerring(description="CPU 85%", component="host", mechanism="cpu_saturation"),),
        "recovery": Recovery(
            contract="executed_recovery",
            acceptable=("terminate_blocking_session",),
            forbidden=("restart_database",),
            requires_approval=("terminate_blocking_session",),
            verification_required=True,
        ),
    }
    base.update(over)
    return GroundTruth(**base)


BLOCKER = '{"pid":4242,"state":"Idle In Transaction","usename":"app"}'
WAITER = '{"blocking_pids":[4242],"granted":false,"pid":5301}'


def _ref(
    claim: str,
    path: str,
    text: str | None,
    *,
    tool: str = "inspect_postgres",
    inv: str = "inv-a",
    excerpt: str | None = None,
    canonical: str | None = "same",
) -> CitedRef:
    return CitedRef(
        claim_id=claim,
        claim_kind="finding",
        invocation_id=inv,
        tool_name=tool,
        raw_path=path,
        excerpt=excerpt if excerpt is not None else (text or "")[:10],
        canonical_tool=tool if canonical == "same" else canonical,
        text=text,
        data_source="snapshot",
    )


def _report(
    rc: tuple[str, str] | None = ("postgresql", "row_lock_contention"),
    recovery: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "answer_version": "diagnosis_draft_v1",
        "summary": "Row lock held by an idle transaction.",
        "root_cause": {"component": rc[0], "mechanism": rc[1], "culprit": "pid 4242", "claim_ids": ["c1"]}
        if rc
        else None,
        "claims": [
            {
                "id": "c1",
                "text": "blocker",
                "kind": "root_cause",
                "citations": [
                    {
                        "invocation_id": "inv-a",
                        "tool_name": "inspect_postgres",
                        "raw_path": "$.rows[0]",
                        "excerpt": "x",
                    }
                ],
            },
            {
                "id": "c2",
                "text": "waiter",
                "kind": "finding",
                "citations": [
                    {
                        "invocation_id": "inv-b",
                        "tool_name": "inspect_postgres",
                        "raw_path": "$.rows[0]",
                        "excerpt": "x",
                    }
                ],
            },
        ],
        "hypotheses": [
            {
                "statement": "lock",
                "component": "postgresql",
                "mechanism": "row_lock_contention",
                "status": "confirmed",
                "claim_ids": ["c1"],
            },
            {
                "statement": "leak",
                "component": "connection_pool",
                "mechanism": "pool_leak",
                "status": "ruled_out",
                "claim_ids": ["c2"],
            },
        ],
        "plan": [{"step": 0, "hypothesis": "lock", "tool": "inspect_postgres", "why": "see locks"}],
        "recovery": recovery
        if recovery is not None
        else [
            {
                "action": "terminate_blocking_session",
                "target": "pid 4242",
                "risk": "medium",
                "requires_approval": True,
                "verification": "locks gone",
            }
        ],
        "limitations": [],
        "next_steps": [],
    }


def _obs(report: dict[str, Any] | None, refs: list[CitedRef] | None = None, **over: Any) -> CaseObservation:
    audit = [
        ToolAuditEntry(
            invocation_id="inv-k", tool="lookup_knowledge", status="READY", evidence_status="EVIDENCE_FOUND"
        ),
        ToolAuditEntry(
            invocation_id="inv-a", tool="inspect_postgres", status="READY", evidence_status="EVIDENCE_FOUND"
        ),
        ToolAuditEntry(
            invocation_id="inv-b", tool="inspect_postgres", status="READY", evidence_status="EVIDENCE_FOUND"
        ),
    ]
    published = report is not None
    data: dict[str, Any] = {
        "scenario_id": "case",
        "run_id": "run-1",
        "status": "SUCCESS",
        "release_outcome": "PUBLISHED" if published else "FALLBACK",
        "fallback_type": None if published else "EVIDENCE_VALIDATION_FAILED",
        "content": {"content_type": "DIAGNOSIS_REPORT", "report": report, "verified_sources": []}
        if published
        else {"content_type": "SAFE_FALLBACK", "fallback": {"type": "EVIDENCE_VALIDATION_FAILED"}},
        "draft": report or _report(),
        "guard_codes": [] if published else ["UNKNOWN_INVOCATION"],
        "tool_audit": audit,
        "cited_refs": (
            refs
            if refs is not None
            else [_ref("c1", "$.rows[0]", BLOCKER), _ref("c2", "$.rows[0]", WAITER, inv="inv-b")]
        )
        if published
        else [],
    }
    data.update(over)
    return CaseObservation(**data)


def test_a_correct_published_diagnosis_passes_with_full_marks() -> None:
    s = score_case(_truth(), _obs(_report()))
    assert s.passed and s.score == 100 and s.failure_class is None
    assert s.evidence_matched == ["blocker", "waiter"]
    assert s.alternatives_ruled_out == ["connection_pool/pool_leak"]
    assert s.root_cause == {"component": "postgresql", "mechanism": "row_lock_contention"}
    assert not s.false_confident
    assert all(d["reasons"] for d in s.dimensions_dict().values())


def test_required_evidence_needs_a_cited_ref_of_the_named_tool_and_never_no_evidence() -> None:
    refs = [
        _ref("c1", "$.no_evidence", "no match for '\"pid\":4242 idle in transaction'"),
        _ref("c2", "$.rows[0]", WAITER, inv="inv-b"),
        _ref("c2", "$.entries[0]", BLOCKER, tool="query_logs", inv="inv-c"),  # right text, wrong tool
    ]
    s = score_case(_truth(), _obs(_report(), refs))
    assert s.evidence_matched == ["waiter"]
    assert not s.passed and s.failure_class == "missing_evidence"
    assert s.dimensions["evidence"].score == pytest.approx(7 + 6)


def test_a_citation_the_evaluator_cannot_verify_is_a_hard_gate_in_published_content() -> None:
    refs = [
        _ref("c1", "$.rows[0]", None, inv="inv-zzz", canonical=None),
        _ref("c2", "$.rows[0]", WAITER, inv="inv-b"),
    ]
    s = score_case(_truth(), _obs(_report(), refs))
    assert "nonexistent_evidence_cited" in s.hard_gates and not s.passed and s.failure_class == "hard_gate"
    # an excerpt that is not in the ref text is not evidence either
    refs = [_ref("c1", "$.rows[0]", BLOCKER, excerpt="active"), _ref("c2", "$.rows[0]", WAITER, inv="inv-b")]
    assert "nonexistent_evidence_cited" in score_case(_truth(), _obs(_report(), refs)).hard_gates


def test_alternative_is_ruled_out_only_by_a_ruled_out_hypothesis_citing_its_evidence() -> None:
    report = _report()
    report["hypotheses"][1]["claim_ids"] = ["c1"]  # cites the blocker, not the waiter
    s = score_case(_truth(), _obs(report))
    assert s.alternatives_ruled_out == []
    assert s.dimensions["evidence"].score == 14


def test_fallback_on_a_real_fault_scores_zero_root_cause_without_a_hard_gate() -> None:
    s = score_case(_truth(), _obs(None))
    assert s.dimensions["root_cause"].score == 0 and s.dimensions["evidence"].score == 0
    assert s.hard_gates == [] and s.failure_class == "fallback" and not s.passed
    assert s.root_cause is None and not s.false_confident


def test_red_herring_as_root_cause_scores_zero_and_is_false_confident() -> None:
    s = score_case(_truth(), _obs(_report(rc=("host", "cpu_saturation"))))
    assert s.dimensions["root_cause"].score == 0 and "red herring" in s.dimensions["root_cause"].reasons[0]
    assert s.failure_class == "wrong_root_cause" and s.false_confident


def test_no_fault_control_passes_only_published_with_null_root_cause() -> None:
    control = _truth(fault=False, root_cause=None, required_evidence=(), alternatives=(), recovery=Recovery())
    ok = score_case(control, _obs(_report(rc=None, recovery=[]), refs=[]))
    assert ok.passed and ok.dimensions["root_cause"].score == 25 and ok.dimensions["recovery"].score == 15
    named = score_case(control, _obs(_report(recovery=[]), refs=[]))
    assert not named.passed and named.dimensions["root_cause"].score == 0 and named.false_confident
    assert not score_case(control, _obs(None)).passed


def test_recovery_hard_gates_judge_published_content_only() -> None:
    bad = [
        {
            "action": "restart_database",
            "target": "db",
            "risk": "high",
            "requires_approval": True,
            "verification": "ok",
        },
        {
            "action": "terminate_blocking_session",
            "target": "pid",
            "risk": "medium",
            "requires_approval": False,
            "verification": "",
        },
    ]
    s = score_case(_truth(), _obs(_report(recovery=bad)))
    assert s.hard_gates == ["approval_missing", "forbidden_recovery_action", "verification_missing"]
    assert not s.passed and s.dimensions["recovery"].score == 5
    # the same draft withheld by the guard trips no gate: that is the guard working
    withheld = score_case(_truth(), _obs(None, draft=_report(recovery=bad)))
    assert withheld.hard_gates == []


def test_published_content_that_is_not_a_draft_is_an_invalid_artifact() -> None:
    report = _report()
    report["root_cause"]["mechanism"] = "gremlins"
    s = score_case(_truth(), _obs(report))
    assert "invalid_artifact" in s.hard_gates and not s.passed


def test_expected_outcome_needs_exactly_the_expected_violations() -> None:
    truth = _truth(
        expected_outcome=ExpectedOutcome(
            release_outcome="FALLBACK",
            fallback_type="EVIDENCE_VALIDATION_FAILED",
            violations=("ROOT_CAUSE_MOCK_ONLY",),
        ),
        required_evidence=(),
        alternatives=(),
        recovery=Recovery(),
    )
    ok = score_case(truth, _obs(None, guard_codes=["ROOT_CAUSE_MOCK_ONLY"]))
    assert ok.passed and ok.score == 100
    for codes in (["UNKNOWN_INVOCATION"], ["ROOT_CAUSE_MOCK_ONLY", "UNKNOWN_INVOCATION"], []):
        s = score_case(truth, _obs(None, guard_codes=codes))
        assert not s.passed and s.failure_class == "expected_outcome_mismatch", codes
    published = score_case(truth, _obs(_report(recovery=[])))
    assert not published.passed and published.false_confident


def test_efficiency_counts_duplicates_budget_and_retry_storms() -> None:
    audit = [ToolAuditEntry(invocation_id=f"i{i}", tool="query_logs", status="READY") for i in range(3)]
    audit += [ToolAuditEntry(invocation_id="d", tool="query_logs", status="REJECTED", code="DUPLICATE_SCOPE")]
    audit += [ToolAuditEntry(invocation_id=f"f{i}", tool="query_logs", status="FAILED") for i in range(2)]
    s = score_case(_truth(), _obs(_report(), tool_audit=audit, tool_call_budget=4))
    assert s.dimensions["efficiency"].score == 0
    assert s.dimensions["process"].score == 12  # everything but lookup_knowledge


def test_observation_round_trips_through_plain_data() -> None:
    obs = _obs(_report())
    again = CaseObservation.from_dict(json.loads(json.dumps(obs.as_dict())))
    assert again == obs


# -- compositional ground truths: label lists, contributing causes, alternative evidence ------------

APP_ROLLOUT = RootCause(component="application", mechanism="bad_config_rollout", culprit="pool size 5")


def _with_contributing(rc: tuple[str, str] | None, *extra: tuple[str, str]) -> dict[str, Any]:
    report = _report(rc=rc)
    report["contributing_causes"] = [
        {"component": c, "mechanism": m, "culprit": "", "claim_ids": ["c1"]} for c, m in extra
    ]
    return report


def test_any_listed_label_of_the_root_cause_is_right() -> None:
    truth = _truth(
        root_cause=RootCause(
            component="mysql",
            mechanism="deadlock",
            culprit="",
            components=("mysql", "postgresql"),
            mechanisms=("deadlock", "row_lock_contention"),
        )
    )
    s = score_case(truth, _obs(_report()))
    assert s.passed and s.score == 100 and not s.false_confident
    wrong = score_case(truth, _obs(_report(rc=("postgresql", "slow_query"))))
    assert wrong.false_confident and wrong.dimensions["root_cause"].score == 10
    assert "expected (mysql|postgresql)/(deadlock|row_lock_contention)" in wrong.failure_reasons[0]


def test_full_root_cause_points_need_every_contributing_cause_in_any_order() -> None:
    truth = _truth(contributing_causes=(APP_ROLLOUT,))
    both = score_case(truth, _obs(_with_contributing(("postgresql", "row_lock_contention"), ("application", "bad_config_rollout"))))
    assert both.passed and both.dimensions["root_cause"].score == 25
    assert both.contributing_causes == [{"component": "application", "mechanism": "bad_config_rollout"}]
    swapped = score_case(truth, _obs(_with_contributing(("application", "bad_config_rollout"), ("postgresql", "row_lock_contention"))))
    assert swapped.passed and swapped.dimensions["root_cause"].score == 25
    assert "root cause postgresql/row_lock_contention: named by postgresql/row_lock_contention as a contributing cause (12.5/12.5)" in (
        swapped.dimensions["root_cause"].reasons
    )


def test_naming_only_some_causes_earns_a_proportional_share_and_does_not_pass() -> None:
    truth = _truth(contributing_causes=(APP_ROLLOUT,))
    only_root = score_case(truth, _obs(_report()))
    assert only_root.dimensions["root_cause"].score == 12.5
    assert not only_root.passed and only_root.failure_class == "wrong_root_cause"
    assert not only_root.false_confident and only_root.score == 87.5  # not wrong: nothing capped
    assert only_root.failure_reasons[0] == "named 1 of 2 causes; not named: application/bad_config_rollout"
    # The component alone of a cause earns its 10 of 25 of that cause's share.
    partial = score_case(truth, _obs(_with_contributing(("postgresql", "row_lock_contention"), ("application", "thread_pool_exhaustion"))))
    assert partial.dimensions["root_cause"].score == 12.5 + 12.5 * 10 / 25 and not partial.passed
    three = _truth(contributing_causes=(APP_ROLLOUT, RootCause(component="redis", mechanism="memory_eviction", culprit="")))
    s = score_case(three, _obs(_with_contributing(("postgresql", "row_lock_contention"), ("redis", "memory_eviction"))))
    assert s.dimensions["root_cause"].score == pytest.approx(25 * 2 / 3) and not s.passed


def test_a_root_cause_that_is_none_of_the_causes_is_wrong() -> None:
    truth = _truth(contributing_causes=(APP_ROLLOUT,))
    s = score_case(truth, _obs(_with_contributing(("dns", "dns_resolution_failure"), ("application", "bad_config_rollout"))))
    assert s.false_confident and s.score <= 35
    assert s.failure_reasons[0].startswith("published root cause dns/dns_resolution_failure, expected postgresql/row_lock_contention or application/bad_config_rollout")


def test_a_red_herring_as_a_contributing_cause_is_false_confident() -> None:
    for truth in (_truth(), _truth(contributing_causes=(APP_ROLLOUT,))):
        s = score_case(truth, _obs(_with_contributing(("postgresql", "row_lock_contention"), ("host", "cpu_saturation"))))
        assert s.dimensions["root_cause"].score == 0 and s.false_confident and s.failure_class == "wrong_root_cause"
        assert "published red herring host/cpu_saturation (CPU 85%) as a contributing cause" in s.failure_reasons
        assert s.score <= 35


def test_a_contributing_cause_on_a_no_fault_control_is_wrong() -> None:
    control = _truth(fault=False, root_cause=None, required_evidence=(), alternatives=(), recovery=Recovery())
    report = _with_contributing(("postgresql", "row_lock_contention"), ("redis", "max_clients_reached"))
    report["recovery"] = []
    s = score_case(control, _obs(report, refs=[]))
    assert s.false_confident and not s.passed and s.dimensions["root_cause"].score == 0
    assert s.failure_reasons[0] == (
        "no-fault control: published root cause postgresql/row_lock_contention and contributing cause(s) redis/max_clients_reached"
    )


def test_without_contributing_causes_in_the_truth_a_published_one_is_not_scored() -> None:
    s = score_case(_truth(), _obs(_with_contributing(("postgresql", "row_lock_contention"), ("redis", "memory_eviction"))))
    assert s.passed and s.score == 100 and not s.false_confident
    assert s.dimensions["root_cause"].reasons[-1] == "contributing cause(s) redis/memory_eviction: not in the ground truth, not scored"


def test_any_of_required_evidence_is_matched_by_any_alternative() -> None:
    blocker = RequiredEvidence(
        id="blocker",
        any_of=(
            EvidenceMatch(tool="query_logs", match=("idle in transaction", "4242")),
            EvidenceMatch(tool="inspect_postgres", match=('"pid":4242', "idle in transaction")),
        ),
    )
    waiter = RequiredEvidence(id="waiter", tool="inspect_postgres", match=('"blocking_pids":[4242]',))
    truth = _truth(required_evidence=(blocker, waiter))
    assert score_case(truth, _obs(_report())).evidence_matched == ["blocker", "waiter"]
    log = _ref("c1", "$.entries[0]", "ERROR app: pid 4242 idle in transaction", tool="query_logs", inv="inv-c")
    s = score_case(truth, _obs(_report(), [log, _ref("c2", "$.rows[0]", WAITER, inv="inv-b")]))
    assert s.evidence_matched == ["blocker", "waiter"]
    # Neither alternative: the right text under the wrong tool matches nothing.
    wrong_tool = _ref("c1", "$.entries[0]", BLOCKER, tool="inspect_redis", inv="inv-d")
    s = score_case(truth, _obs(_report(), [wrong_tool, _ref("c2", "$.rows[0]", WAITER, inv="inv-b")]))
    assert s.evidence_matched == ["waiter"] and s.failure_class == "missing_evidence"
    # An alternative rules an alternative out like a single-form entry does.
    assert score_case(_truth(required_evidence=(blocker, waiter)), _obs(_report())).alternatives_ruled_out == [
        "connection_pool/pool_leak"
    ]


def test_report_rows_carry_the_published_contributing_causes() -> None:
    from rootproof.eval.report import case_row
    from rootproof.eval.snapshot import CaseResult

    truth = _truth(contributing_causes=(APP_ROLLOUT,))
    obs = _obs(_with_contributing(("postgresql", "row_lock_contention"), ("application", "bad_config_rollout")))
    row = case_row(CaseResult(scenario_id="case", folder=Path("case"), observation=obs, score=score_case(truth, obs)))
    assert row["contributing_causes"] == [{"component": "application", "mechanism": "bad_config_rollout"}]
    plain = _obs(_report())
    assert case_row(CaseResult(scenario_id="case", folder=Path("case"), observation=plain, score=score_case(_truth(), plain)))["contributing_causes"] == []


# ---------------------------------------------------------------------------------------------
# The runner: worker processes, hooks, persistence (slow: each suite spawns workers)
# ---------------------------------------------------------------------------------------------


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Settings, SqlTraceStore]]:
    settings = Settings(data_dir=tmp_path / "home", database_url=f"sqlite:///{tmp_path / 'eval.db'}")
    store = SqlTraceStore(settings.resolved_database_url())
    yield settings, store
    store.close()


def _copy(tmp_path: Path, *ids: str) -> Path:
    suite = tmp_path / "suite"
    for sid in ids:
        shutil.copytree(scenario_folder(sid), suite / sid)
    return suite


@pytest.mark.slow
def test_a_user_folder_outside_the_package_runs_and_persists(
    tmp_path: Path, env: tuple[Settings, SqlTraceStore]
) -> None:
    settings, store = env
    suite_dir = _copy(tmp_path, "pg-row-lock", "payment-timeout")
    seen: list[str] = []
    suite = run_suite(
        suite_dir,
        settings=settings,
        jobs=2,
        store=store,
        progress=lambda sid, done, total: seen.append(f"{sid} {done}/{total}"),
    )
    assert seen[0] == " 0/2" and sorted(s.split()[0] for s in seen if not s.startswith(" ")) == ["payment-timeout", "pg-row-lock"]
    by_id = {c.scenario_id: c for c in suite.cases}
    row_lock, payment = by_id["pg-row-lock"], by_id["payment-timeout"]
    assert row_lock.observation.release_outcome == "PUBLISHED"
    assert row_lock.score.root_cause == {"component": "postgresql", "mechanism": "row_lock_contention"}
    assert payment.observation.release_outcome == "FALLBACK" and payment.observation.guard_codes == [
        "ROOT_CAUSE_MOCK_ONLY"
    ]
    assert payment.score.passed and payment.score.failure_class is None
    assert {c.observation.timings["pid"] for c in suite.cases} != {os.getpid()}

    data = report_json(suite)
    assert set(data["summary"]) >= {
        "scenarios",
        "mean_score",
        "pass_rate",
        "hard_gate_violations",
        "by_dimension",
        "publish_rate",
        "fallback_rate",
        "false_confident_rate",
        "wall_time_s",
        "scenarios_per_second",
        "jobs",
    }
    assert data["summary"]["publish_rate"] == 0.5 and data["summary"]["jobs"] == 2
    # pg-row-lock carries an alert: its run is in alert mode and records the AIOps rules; payment-timeout has none.
    assert (data["summary"]["alert_scenarios"], data["summary"]["aiops_pass_rate"]) == (1, 1.0)
    rows = {r["id"]: r for r in data["scenarios"]}
    assert rows["pg-row-lock"]["aiops"] == {"passed": True, "failed": []} and rows["payment-timeout"]["aiops"] is None
    text = json.dumps(data)
    assert "openai_api_key" not in text

    stored = store.get_eval_run(suite.eval_id)
    assert stored is not None and stored["state"] in ("passed", "failed") and stored["kind"] == "snapshot"
    assert stored["suite_version"] and stored["settings"]["model"] == "offline"
    assert [c["case_id"] for c in stored["cases"]] and all(c["tool_audit"] for c in stored["cases"])
    assert store.list_eval_runs()[0]["eval_id"] == suite.eval_id

    page = render_html(suite)
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "<style>" in page
    assert page.count("AIOps rules (aiops-rules-v1)") == 1
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page
    knowledge_texts = [
        r.text
        for c in suite.cases
        for r in c.observation.draft_refs + c.observation.cited_refs
        if r.canonical_tool == "lookup_knowledge" and r.text
    ]
    assert knowledge_texts, "the planner cites knowledge cards; their bodies must stay out of reports"
    for knowledge in knowledge_texts:
        body = knowledge.split(": ", 1)[1].strip()[:40]
        assert body not in page and body not in text
    assert KNOWLEDGE_OMITTED in page


@pytest.mark.slow
def test_an_agent_reading_ground_truth_trips_the_hard_gate(
    tmp_path: Path, env: tuple[Settings, SqlTraceStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, store = env
    suite_dir = _copy(tmp_path, "pg-row-lock")
    monkeypatch.setenv(GT_ENV, str(suite_dir / "pg-row-lock" / "ground_truth.yaml"))
    suite = run_suite(
        suite_dir, settings=settings, store=store, model_factory="tests.eval.test_snapshot:ground_truth_reader"
    )
    case = suite.cases[0]
    assert case.score.hard_gates == ["ground_truth_read"]
    assert not case.score.passed and case.score.failure_class == "hard_gate"
    stored = store.get_eval_run(suite.eval_id)
    assert (
        stored is not None
        and stored["cases"][0]["hard_gates"] == ["ground_truth_read"]
        and stored["state"] == "failed"
    )


@pytest.mark.slow
def test_a_draft_citing_a_made_up_invocation_never_passes(
    tmp_path: Path, env: tuple[Settings, SqlTraceStore]
) -> None:
    settings, store = env
    suite = run_suite(
        _copy(tmp_path, "pg-row-lock"),
        settings=settings,
        store=store,
        model_factory="tests.eval.test_snapshot:fabricated_row_lock",
    )
    case = suite.cases[0]
    assert (
        case.observation.release_outcome == "FALLBACK"
        and "UNKNOWN_INVOCATION" in case.observation.guard_codes
    )
    assert not case.score.passed and case.score.failure_class == "fallback" and case.score.hard_gates == []

    suite = run_suite(
        _copy(tmp_path / "p", "payment-timeout"),
        settings=settings,
        store=store,
        model_factory="tests.eval.test_snapshot:fabricated_payment",
    )
    case = suite.cases[0]
    assert (
        case.observation.release_outcome == "FALLBACK"
        and "UNKNOWN_INVOCATION" in case.observation.guard_codes
    )
    assert not case.score.passed and case.score.failure_class == "expected_outcome_mismatch"


@pytest.mark.slow
def test_a_crashed_worker_makes_the_eval_run_infra_invalid(
    tmp_path: Path, env: tuple[Settings, SqlTraceStore]
) -> None:
    settings, store = env
    suite = run_suite(
        _copy(tmp_path, "pg-row-lock"),
        settings=settings,
        store=store,
        model_factory="tests.eval.test_snapshot:crasher",
    )
    assert suite.state == "infra_invalid" and suite.errors
    case = suite.cases[0]
    assert case.score.failure_class == "infra_error" and not case.score.passed
    stored = store.get_eval_run(suite.eval_id)
    assert (
        stored is not None
        and stored["state"] == "infra_invalid"
        and stored["cases"][0]["failure_class"] == "infra_error"
    )


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def _cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str) -> Any:
    from rootproof.cli import app

    monkeypatch.setenv("ROOTPROOF_HOME", str(tmp_path / "home"))
    return CliRunner().invoke(app, ["eval", *args])


def test_cli_unknown_scenario_is_one_error_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = _cli(monkeypatch, tmp_path, "snapshot", "--scenarios", "no-such-scenario")
    assert res.exit_code == 2
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "no-such-scenario" in lines[0]


def test_cli_malformed_folder_exits_2_and_records_infra_invalid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = _copy(tmp_path, "pg-row-lock")
    (suite / "pg-row-lock" / "scenario.yaml").write_text("id: pg-row-lock\n", encoding="utf-8")
    res = _cli(monkeypatch, tmp_path, "snapshot", "--scenarios", str(suite))
    assert res.exit_code == 2
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert (
        len(lines) == 1
        and lines[0].startswith("Error: pg-row-lock/scenario.yaml: ")
        and "infra_invalid" in lines[0]
    )
    listed = _cli(monkeypatch, tmp_path, "list", "--json")
    assert listed.exit_code == 0
    runs = json.loads(listed.output)
    assert runs[0]["state"] == "infra_invalid" and runs[0]["summary"]["problems"]
    shown = _cli(monkeypatch, tmp_path, "show", runs[0]["eval_id"], "--json")
    assert shown.exit_code == 0 and json.loads(shown.output)["cases"] == []
    missing = _cli(monkeypatch, tmp_path, "show", "nope")
    assert missing.exit_code == 2 and missing.output.startswith("Error: ")


def test_cli_rejects_bad_jobs_and_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _cli(monkeypatch, tmp_path, "snapshot", "--jobs", "0").exit_code == 2
    assert _cli(monkeypatch, tmp_path, "snapshot", "--model", "gpt").exit_code == 2


def test_the_html_report_shows_contributing_causes_after_the_root_cause() -> None:
    from rootproof.eval.report import _released

    html = _released(_obs(_with_contributing(("postgresql", "row_lock_contention"), ("application", "bad_config_rollout"))))
    root = html.index("<b>Root cause:</b> postgresql / row_lock_contention")
    assert html.index("<b>Contributing causes:</b> application / bad_config_rollout") > root
    assert "Contributing causes" not in _released(_obs(_report()))
