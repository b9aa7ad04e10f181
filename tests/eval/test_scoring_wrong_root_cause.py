"""Scoring: a published wrong root cause fails its case, and earns none of the points that depend on the diagnosis.

The drafts are scripted over built-in scenarios: their citations are the real refs the
scenario's tools return (one call each through the full tool boundary), so the evaluator
verifies them as it verifies a run's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rootproof.eval.scoring import (
    PASS_THRESHOLD,
    WRONG_ROOT_CAUSE_CAP,
    CaseObservation,
    CitedRef,
    ToolAuditEntry,
    score_case,
)
from rootproof.harness import Harness
from rootproof.run.records import MemoryTraceSink
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_ground_truth, load_scenario
from rootproof.settings import Settings


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    home = tmp_path_factory.mktemp("home")
    return Harness(Runtime.from_settings(Settings(data_dir=Path(home)), sink=MemoryTraceSink()))


def _refs(harness: Harness, sid: str, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str, str]]:
    """(invocation id, raw path, text) of every ref the calls return on the scenario's frozen data."""
    scenario = load_scenario(sid)
    out: list[tuple[str, str, str]] = []
    for name, args in calls:
        outcome, _ = harness.tool_call(name, args, scenario=scenario)
        inv = outcome.invocation
        assert inv.status == "READY", inv
        out += [(inv.invocation_id, r.raw_path, r.text) for r in inv.evidence_refs]
    return out


def _pick(refs: list[tuple[str, str, str]], *needles: str) -> tuple[str, str, str]:
    return next(r for r in refs if all(n in r[2] for n in needles))


def _observation(
    rc: tuple[str, str] | None,
    c1: tuple[str, str, str],
    c2: tuple[str, str, str],
    *,
    tool: str = "inspect_postgres",
    ruled_out: tuple[str, str] = ("connection_pool", "pool_leak"),
    recovery: list[dict[str, Any]] | None = None,
) -> CaseObservation:
    """A published report whose root cause is `rc`, claim c1 citing `c1`, claim c2 citing `c2`."""

    def citation(ref: tuple[str, str, str]) -> dict[str, Any]:
        return {"invocation_id": ref[0], "tool_name": tool, "raw_path": ref[1], "excerpt": ref[2][:60]}

    report: dict[str, Any] = {
        "answer_version": "diagnosis_draft_v1",
        "summary": "The culprit session explains the stalled requests.",
        "root_cause": {
            "component": rc[0],
            "mechanism": rc[1],
            "culprit": "pid 4242",
            "claim_ids": ["c1", "c2"],
        }
        if rc
        else None,
        "claims": [
            {"id": "c1", "text": f'"{c1[2][:60]}"', "kind": "root_cause", "citations": [citation(c1)]},
            {"id": "c2", "text": f'"{c2[2][:60]}"', "kind": "finding", "citations": [citation(c2)]},
        ],
        "hypotheses": [
            {
                "statement": "named root cause",
                "component": rc[0] if rc else "postgresql",
                "mechanism": rc[1] if rc else "slow_query",
                "status": "confirmed" if rc else "open",
                "claim_ids": ["c1", "c2"],
            },
            {
                "statement": "alternative",
                "component": ruled_out[0],
                "mechanism": ruled_out[1],
                "status": "ruled_out",
                "claim_ids": ["c1", "c2"],
            },
        ],
        "plan": [{"step": 0, "hypothesis": "named root cause", "tool": tool, "why": "look"}],
        "recovery": recovery
        if recovery is not None
        else [
            {
                "action": "terminate_blocking_session",
                "target": "pid 4242",
                "risk": "medium",
                "requires_approval": True,
                "verification": "the waiters' locks are granted and p95 latency returns under 100 ms",
            }
        ],
        "limitations": [],
        "next_steps": [],
    }
    cited = [
        CitedRef(
            claim_id=cid,
            claim_kind=kind,
            invocation_id=ref[0],
            tool_name=tool,
            raw_path=ref[1],
            excerpt=ref[2][:60],
            canonical_tool=tool,
            text=ref[2],
            data_source="snapshot",
        )
        for cid, kind, ref in (("c1", "root_cause", c1), ("c2", "finding", c2))
    ]
    audit = [
        ToolAuditEntry(invocation_id="inv-k", tool="lookup_knowledge", status="READY"),
        *(ToolAuditEntry(invocation_id=r[0], tool=tool, status="READY") for r in {c1, c2}),
    ]
    return CaseObservation(
        scenario_id="x",
        run_id="run-1",
        status="SUCCESS",
        release_outcome="PUBLISHED",
        content={"content_type": "DIAGNOSIS_REPORT", "report": report, "verified_sources": []},
        draft=report,
        tool_audit=audit,
        cited_refs=cited,
    )


@pytest.fixture(scope="module")
def row_lock(harness: Harness) -> tuple[tuple[str, str, str], tuple[str, str, str]]:
    refs = _refs(
        harness,
        "pg-row-lock",
        [("inspect_postgres", {"kind": "activity"}), ("inspect_postgres", {"kind": "locks"})],
    )
    return _pick(refs, '"pid":4242', "idle in transaction"), _pick(
        refs, '"blocking_pids":[4242]', '"granted":false'
    )


def test_the_right_root_cause_over_the_same_citations_passes_with_every_point(
    row_lock: tuple[tuple[str, str, str], tuple[str, str, str]],
) -> None:
    truth = load_ground_truth("pg-row-lock")
    s = score_case(truth, _observation(("postgresql", "row_lock_contention"), *row_lock))
    assert s.passed and not s.false_confident
    assert s.dimensions["recovery"].score == 15 and s.dimensions["process"].score == 15
    assert s.alternatives_ruled_out == ["connection_pool/pool_leak"]


def test_a_wrong_mechanism_published_fails_below_the_pass_mark_without_diagnosis_points(
    row_lock: tuple[tuple[str, str, str], tuple[str, str, str]],
) -> None:
    truth = load_ground_truth("pg-row-lock")
    s = score_case(truth, _observation(("postgresql", "slow_query"), *row_lock))
    assert not s.passed and s.false_confident and s.failure_class == "wrong_root_cause"
    assert s.score <= WRONG_ROOT_CAUSE_CAP < PASS_THRESHOLD
    assert s.dimensions["recovery"].score == 0 and "wrong diagnosis" in s.dimensions["recovery"].reasons[0]
    # the differentiation point (3) is withheld; plan, knowledge, runtime tool and two hypotheses stay
    assert s.dimensions["process"].score == 12
    assert any("differentiation earns nothing" in r for r in s.dimensions["process"].reasons)
    # required evidence cited still counts (14); the ruled-out alternative does not (6)
    assert s.dimensions["evidence"].score == 14
    assert any("alternatives ruled out earn nothing" in r for r in s.dimensions["evidence"].reasons)


def test_a_wrong_component_published_fails_the_same_way(
    row_lock: tuple[tuple[str, str, str], tuple[str, str, str]],
) -> None:
    truth = load_ground_truth("pg-row-lock")
    s = score_case(truth, _observation(("redis", "max_clients_reached"), *row_lock))
    assert not s.passed and s.false_confident and s.score <= WRONG_ROOT_CAUSE_CAP
    assert s.dimensions["recovery"].score == 0 and s.dimensions["root_cause"].score == 0


def test_a_red_herring_published_fails_without_recovery_points(harness: Harness) -> None:
    refs = _refs(
        harness,
        "rh-row-lock-high-cpu",
        [("inspect_postgres", {"kind": "activity"}), ("inspect_postgres", {"kind": "locks"})],
    )
    blocker = _pick(refs, "backfill-carrier-codes", "idle in transaction")
    waiter = _pick(refs, '"blocking_pids":[6655]', '"granted":false')
    truth = load_ground_truth("rh-row-lock-high-cpu")
    s = score_case(
        truth,
        _observation(("host", "cpu_saturation"), blocker, waiter, ruled_out=("postgresql", "slow_query")),
    )
    assert not s.passed and s.false_confident and s.score <= WRONG_ROOT_CAUSE_CAP
    assert s.dimensions["recovery"].score == 0
    assert any("red herring" in r for r in s.failure_reasons)


def test_any_root_cause_on_a_no_fault_control_fails_without_recovery_points(harness: Harness) -> None:
    refs = _refs(
        harness,
        "control-db-healthy",
        [("inspect_postgres", {"kind": "activity"}), ("inspect_postgres", {"kind": "locks"})],
    )
    truth = load_ground_truth("control-db-healthy")
    s = score_case(truth, _observation(("postgresql", "row_lock_contention"), refs[0], refs[1], recovery=[]))
    assert not s.passed and s.false_confident and s.score <= WRONG_ROOT_CAUSE_CAP
    assert s.dimensions["recovery"].score == 0 and s.failure_class == "wrong_root_cause"
    clean = score_case(truth, _observation(None, refs[0], refs[1], recovery=[]))
    assert clean.passed and clean.dimensions["recovery"].score == 15 and not clean.false_confident
