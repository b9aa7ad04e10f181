"""The offline planner on evidence worded by other vendors: aliases, health evidence in
no-root-cause drafts, culprit drill-down, contributing causes, and a shared symptom beside a
discriminating signal of another cause (issue 17)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rootproof.harness import Harness
from rootproof.run.records import MemoryTraceSink
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings

PLANNER_DATA = Path(__file__).parents[1] / "data" / "planner-scenarios"


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    return Harness(
        Runtime.from_settings(load_settings(data_dir=tmp_path_factory.mktemp("h"), deadline_s=60), sink=MemoryTraceSink())
    )


def _diagnose(harness: Harness, folder: str) -> Any:
    sc = load_scenario(PLANNER_DATA / folder)
    return harness.diagnose(sc.question, scenario=sc)


def _rc(out: Any) -> str | None:
    rc = out.draft.root_cause if out.draft is not None else None
    return f"{rc.component}/{rc.mechanism}" if rc is not None else None


def _cited(out: Any) -> list[str]:
    invs = {o.invocation.invocation_id: o.invocation for o in out.outcomes}
    texts: list[str] = []
    for claim in out.draft.claims:
        for c in claim.citations:
            inv = invs[c.invocation_id]
            texts.extend(r.text for r in inv.evidence_refs if r.raw_path == c.raw_path)
    return texts


def test_a_leak_seen_through_datadog_names_cites_the_renamed_series_and_the_client(harness: Harness) -> None:
    out = _diagnose(harness, "planner-datadog-pool-leak")
    assert _rc(out) == "connection_pool/pool_leak", out.draft.limitations
    assert out.release_outcome == "PUBLISHED", out.evidence and out.evidence.codes
    assert any(t.startswith("postgresql.connections{") for t in _cited(out))
    # The culprit names the client holding the sessions, and a claim cites its row.
    assert "billing-worker" in out.draft.root_cause.culprit
    assert any('"application_name":"billing-worker"' in t for t in _cited(out))


def test_a_name_lookup_failure_under_a_pool_question_is_not_connection_exhaustion(harness: Harness) -> None:
    out = _diagnose(harness, "planner-dns-under-queuepool-question")
    assert _rc(out) == "dns/dns_resolution_failure", (out.draft.root_cause, out.draft.limitations)
    assert out.release_outcome == "PUBLISHED", out.evidence and out.evidence.codes


def test_a_control_shows_the_metric_that_rules_the_suspected_cause_out(harness: Harness) -> None:
    out = _diagnose(harness, "planner-control-cloudwatch-cpu-normal")
    assert out.release_outcome == "PUBLISHED"
    assert _rc(out) is None
    ruled = {(h.component, h.mechanism): h for h in out.draft.hypotheses if h.status == "ruled_out"}
    assert ("postgresql", "cpu_saturation") in ruled, [(h.component, h.mechanism, h.status) for h in out.draft.hypotheses]
    claims = {c.id: c for c in out.draft.claims}
    cpu = ruled[("postgresql", "cpu_saturation")]
    assert any(c.kind == "finding" for cid in cpu.claim_ids for c in [claims[cid]])
    assert any(t.startswith("CPUUtilization{") for t in _cited(out))


# -- unit level: no scenario ---------------------------------------------------------------------


def _hit(text: str, i: int, tool: str = "query_logs") -> Any:
    from rootproof.agent.models.evidence_view import Hit

    return Hit(invocation_id="i1", tool=tool, raw_path=f"$.entries[{i}]", text=text, data_source="snapshot")


def _cand(key: str, sigs: list[tuple[dict[str, Any], list[str]]], **kw: Any) -> Any:
    from rootproof.agent.models.offline import Candidate, _record
    from rootproof.kb.cards import Signal

    comp, _, mech = key.partition("/")
    c = Candidate(component=comp, mechanism=mech, rank=kw.pop("rank", 0), **kw)
    n = 0
    for spec, lines in sigs:
        sig = Signal.model_validate({"tool": "query_logs", **spec})
        c.signals.append(sig)
        hits = []
        for t in lines:
            hits.append(_hit(t, n))
            n += 1
        c.hits.append((sig, hits))
        if sig.weight >= 1:
            c.seen += sig.weight
            c.records |= {_record(h) for h in hits}
    c.own = c.seen
    return c


HIKARI = [
    "2026-01-01T00:00:01Z ERROR api [api.log] HikariPool-1 - Connection is not available, request timed out after 30000ms (total=0, active=0, idle=0, waiting=9)",
    "2026-01-01T00:01:01Z ERROR api [api.log] HikariPool-1 - Connection is not available, request timed out after 30001ms (total=0, active=0, idle=0, waiting=12)",
    "2026-01-01T00:02:01Z ERROR api [api.log] HikariPool-1 - Connection is not available, request timed out after 30000ms (total=0, active=0, idle=0, waiting=15)",
]
UNKNOWN_HOST = [
    "2026-01-01T00:00:00Z WARN api [api.log] HikariPool-1 - Failed to create/setup connection: java.net.UnknownHostException: db.internal",
]


def test_a_shared_symptom_is_never_enough_beside_a_discriminating_signal_of_another_cause() -> None:
    """HikariCP's timeouts outweigh one UnknownHostException line: connection exhaustion is still
    not confirmed while the name-resolution failure's discriminating signal is seen."""
    from rootproof.agent.models.offline import OfflinePlanner

    planner = OfflinePlanner.__new__(OfflinePlanner)
    planner._offered, planner._impact, planner._explained = set(), "errors in the window", set()
    planner._observations, planner._alerted, planner._gaps = [], False, {}
    pool = _cand(
        "connection_pool/connection_exhaustion",
        [({"any": ["Connection is not available"], "weight": 3}, HIKARI), ({"any": ["idle=0, waiting="], "weight": 2}, [])],
        distinguishes_from=["dns/dns_resolution_failure"],
    )
    pool.hits = [h for h in pool.hits if h[1]]
    dns = _cand(
        "dns/dns_resolution_failure",
        [({"any": ["UnknownHostException"], "weight": 3, "discriminating": True}, UNKNOWN_HOST)],
        rank=1,
        explains=["connection_pool/connection_exhaustion"],
    )
    _, best, _, confirmed, missing, _ = planner._verdict([pool, dns])
    assert not (confirmed and best is pool), missing
    gate, shared = planner._gate(pool, {pool.key: pool, dns.key: dns})
    assert shared and any("discriminating signal of dns dns_resolution_failure" in en for en, _ in gate)


def test_two_causes_on_independent_evidence_are_root_cause_and_contributing_cause() -> None:
    from rootproof.agent.models.offline import OfflinePlanner

    planner = OfflinePlanner.__new__(OfflinePlanner)
    planner._offered, planner._impact, planner._explained = set(), "errors in the window", set()
    planner._observations, planner._alerted, planner._gaps = [], False, {}
    storage = _cand(
        "postgresql/storage_full",
        [
            ({"any": ["storage-full"], "weight": 3, "discriminating": True}, ["2026-01-01T00:00:00Z ERROR db-1 [aws_rds_events] DB instance is in storage-full state"]),
            ({"any": ["No space left"], "weight": 2}, ["2026-01-01T00:00:05Z ERROR postgres [postgresql.log] could not extend file: No space left on device"]),
        ],
    )
    cpu = _cand(
        "postgresql/cpu_saturation",
        [
            ({"any": ["CPU"], "weight": 2, "discriminating": True}, ["2026-01-01T00:00:09Z WARN db-1 [aws_rds_events] CPU above 90%"]),
            ({"any": ["Seq Scan"], "weight": 2}, ["2026-01-01T00:00:10Z LOG postgres [postgresql.log] Seq Scan on events"]),
        ],
        rank=1,
    )
    _, best, _, confirmed, _, contributing = planner._verdict([storage, cpu])
    assert confirmed and best is storage and contributing == [cpu]
    # Sharing one record, they compete instead: the margin decides, and neither wins by it.
    cpu.records |= storage.records
    _, _, _, confirmed, missing, contributing = planner._verdict([storage, cpu])
    assert not confirmed and contributing == [] and "leads the runner-up" in missing[0][0]
    # Named as alternatives of each other, they compete too.
    cpu.records -= storage.records
    cpu.distinguishes_from = ["postgresql/storage_full"]
    assert planner._verdict([storage, cpu])[5] == []


def test_evidence_against_a_hypothesis_counts_against_it() -> None:
    from rootproof.agent.models.evidence_view import Observation
    from rootproof.agent.models.offline import Candidate, OfflinePlanner
    from rootproof.kb.cards import Signal

    low = Signal.model_validate({"tool": "query_logs", "any": ["free storage space is low"], "weight": 3, "discriminating": True})
    grown = Signal.model_validate({"tool": "query_logs", "any": ["autoscaling completed"], "weight": 3, "rules_out": True})
    refs = [
        {"raw_path": "$.entries[0]", "text": "2026-01-01T00:00:00Z WARN db-1 [aws_rds_events] DB instance db-1 free storage space is low", "data_source": "snapshot"},
        {"raw_path": "$.entries[1]", "text": "2026-01-01T00:03:00Z INFO db-1 [aws_rds_events] Storage autoscaling completed for DB instance db-1", "data_source": "snapshot"},
    ]
    obs = Observation(tool="query_logs", args={}, invocation_id="i1", status="READY", refs=refs)
    c = Candidate(component="postgresql", mechanism="storage_full", rank=0, signals=[low, grown])
    OfflinePlanner._score([c], [obs])
    assert c.seen == 0 and [s for s, _ in c.against] == [grown]


def test_a_metric_signal_is_answered_by_the_broad_look_under_any_alias_and_asks_only_this_vocabulary() -> None:
    from rootproof.agent.models.evidence_view import Observation, evaluate_signal, uncovered_metric_names
    from rootproof.kb.cards import Signal

    sig = Signal.model_validate(
        {
            "tool": "query_metrics",
            "metric": "pg_replication_lag*",
            "trend": "rises",
            "weight": 3,
            "aliases": {"pg_replication_lag*": [{"name": "ReplicaLag", "threshold": 300}, "postgresql.replication_delay"]},
        }
    )
    series = 'ReplicaLag{DBInstanceIdentifier="db-1"} first=1.2 last=1140 min=1.2 max=1140 delta=1138.8 mean=500 unit=Seconds window=a..b'
    broad = Observation(tool="query_metrics", args={"metric": "*"}, invocation_id="m1", status="READY", refs=[{"raw_path": "$.series[0]", "text": series}], omitted=3)
    observable, hits = evaluate_signal(sig, [broad])
    assert observable and [h.raw_path for h in hits] == ["$.series[0]"]
    # Nothing matched and the look was cut short: ask under the names spelled like the series seen.
    other = 'WriteIOPS{DBInstanceIdentifier="db-1"} first=1 last=2 min=1 max=2 delta=1 mean=1.5 unit=Count/Second window=a..b'
    broad.refs = [{"raw_path": "$.series[0]", "text": other}]
    assert uncovered_metric_names(sig, [broad]) == ["ReplicaLag"]
