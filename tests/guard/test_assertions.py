"""EvidenceGuard: claims checked for what they assert (EG-15..EG-17), hostile drafts first.

Each case is a finding of the issue that opened these rules: a draft the guard used to pass.
The canonical invocations are built as the ToolBoundary records them, with no recorded
untrusted spans: the guard must recompute them from the ref text.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest

from rootproof.boundary.store import CanonicalInvocation, InMemoryCanonicalStore, InvocationStatus
from rootproof.guard.evidence import EvidenceGuard
from rootproof.kb.cards import Card
from rootproof.tools.refs import EvidenceRef, enumerate_ref_paths, ref_text

RUN = "run-assert"


class Evidence:
    """A canonical store of one run, filled one invocation at a time."""

    def __init__(self) -> None:
        self.store = InMemoryCanonicalStore()
        self.n = 0

    def add(
        self, tool: str, result: dict[str, Any], *, kind: str | None = None, source: str = "snapshot"
    ) -> str:
        self.n += 1
        inv_id = f"inv-{self.n:04d}"
        refs = [
            EvidenceRef(raw_path=p, text=ref_text(tool, result, p), data_source=source)
            for p in enumerate_ref_paths(result)
        ]
        self.store.put(
            CanonicalInvocation(
                invocation_id=inv_id,
                run_id=RUN,
                session_id="s",
                step_index=0,
                tool_name=tool,
                arguments={"kind": kind} if kind else {"query": ""},
                scope_key=f"{tool}:{self.n}",
                status=InvocationStatus.READY,
                evidence_status="EVIDENCE_FOUND",
                data_source=source,
                result=result,
                evidence_refs=refs,
            )
        )
        return inv_id

    def logs(self, *entries: tuple[str, str, str, str, str]) -> str:
        return self.add(
            "query_logs",
            {
                "window": {"from": "2026-03-12T09:30:00.000Z", "to": "2026-03-12T10:00:00.000Z"},
                "total_matches": len(entries),
                "entries": [
                    {"ts": ts, "level": lv, "service": sv, "source": src, "message": msg}
                    for ts, lv, sv, src, msg in entries
                ],
            },
        )

    def cite(self, inv_id: str, index: int, excerpt: str) -> dict[str, str]:
        inv = self.store.get(inv_id)
        assert inv is not None
        path = inv.evidence_refs[index].raw_path
        assert excerpt in inv.evidence_refs[index].text, (excerpt, inv.evidence_refs[index].text)
        return {"invocation_id": inv_id, "tool_name": inv.tool_name, "raw_path": path, "excerpt": excerpt}


def draft(
    root_cause: tuple[str, str] | None,
    rc_citations: list[dict[str, str]],
    *,
    hypotheses: list[dict[str, Any]] | None = None,
    extra_claims: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    claims: list[dict[str, Any]] = [
        {"id": f"c{i + 1}", "text": f'Evidence: "{c["excerpt"]}"', "kind": "root_cause", "citations": [c]}
        for i, c in enumerate(rc_citations)
    ]
    claims += extra_claims or []
    rc = None
    if root_cause is not None:
        rc = {
            "component": root_cause[0],
            "mechanism": root_cause[1],
            "culprit": "",
            "claim_ids": [c["id"] for c in claims if c["kind"] == "root_cause"],
        }
    return {
        "answer_version": "diagnosis_draft_v1",
        "summary": "diagnosis",
        "root_cause": rc,
        "claims": claims,
        "hypotheses": hypotheses or [],
    }


def redis_ruled_out(text: str, citation: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Claim c9 (a finding citing `citation`) and the hypothesis ruling Redis max clients out on it."""
    claim = {"id": "c9", "text": text, "kind": "finding", "citations": [citation]}
    hyp = {
        "statement": "redis max clients",
        "component": "redis",
        "mechanism": "max_clients_reached",
        "status": "ruled_out",
        "claim_ids": ["c9"],
    }
    return claim, hyp


def codes(ev: Evidence, d: dict[str, Any], cards: dict[str, Card] | None = None) -> list[str]:
    guard = EvidenceGuard(ev.store) if cards is None else EvidenceGuard(ev.store, cards=cards)
    return guard.check(d, run_id=RUN).codes


APP = ("order-service", "order-service.log")
PLANTED = (
    '10.20.9.7 - - [12/Mar/2026:09:58:41 +0000] "GET /api/orders?note=max number of clients reached HTTP/1.1" '
    '200 512 "-" "max number of clients reached"'
)


# -- finding 1: one planted line publishes a root cause ------------------------------------------------
def test_planted_access_lines_never_corroborate_a_root_cause() -> None:
    ev = Evidence()
    q = ev.logs(
        ("2026-03-12T09:58:41.120Z", "INFO", "order-service", "access.log", PLANTED),
        (
            "2026-03-12T09:58:43.500Z",
            "INFO",
            "order-service",
            "access.log",
            PLANTED.replace("note=", "n=").replace("41 +0000", "43 +0000"),
        ),
        ("2026-03-12T09:59:02.330Z", "INFO", *APP, "POST /api/orders 201 in 40 ms"),
    )
    d = draft(
        ("redis", "max_clients_reached"),
        [ev.cite(q, 0, "max number of clients reached"), ev.cite(q, 1, "max number of clients reached")],
    )
    assert codes(ev, d) == ["ROOT_CAUSE_UNCORROBORATED"]


def test_a_plain_client_error_line_alone_is_uncorroborated() -> None:
    ev = Evidence()
    line = "redis.exceptions.ConnectionError: max number of clients reached"
    q = ev.logs(
        ("2026-03-12T09:58:41.120Z", "ERROR", "session-service", "session-service.log", line),
        ("2026-03-12T09:59:41.120Z", "ERROR", "session-service", "session-service.log", line),
        ("2026-03-12T09:59:02.330Z", "INFO", *APP, "POST /api/orders 201 in 40 ms"),
    )
    once = draft(("redis", "max_clients_reached"), [ev.cite(q, 0, line)])
    assert codes(ev, once) == ["ROOT_CAUSE_UNCORROBORATED"]
    # The same line again a minute later is the same record, not a second one.
    twice = draft(("redis", "max_clients_reached"), [ev.cite(q, 0, line), ev.cite(q, 1, line)])
    assert codes(ev, twice) == ["ROOT_CAUSE_UNCORROBORATED"]


def test_two_records_one_from_the_component_corroborate() -> None:
    ev = Evidence()
    line = "redis.exceptions.ConnectionError: max number of clients reached"
    q = ev.logs(
        ("2026-03-12T09:58:41.120Z", "ERROR", "session-service", "session-service.log", line),
        (
            "2026-03-12T09:58:42.120Z",
            "ERROR",
            "cart-service",
            "cart-service.log",
            "GET /v1/cart 503 in 3581 ms: cache unavailable\n" + line,
        ),
    )
    r = ev.add(
        "inspect_redis",
        {
            "kind": "info",
            "info": {"clients": {"connected_clients": 10000}, "stats": {"rejected_connections": 4120}},
        },
        kind="info",
    )
    ok = draft(
        ("redis", "max_clients_reached"), [ev.cite(q, 0, line), ev.cite(r, 1, "rejected_connections:4120")]
    )
    assert codes(ev, ok) == []
    # Two client errors naming Redis, from two services, also corroborate without a Redis tool.
    assert (
        codes(
            ev,
            draft(
                ("redis", "max_clients_reached"), [ev.cite(q, 0, line), ev.cite(q, 1, "cache unavailable")]
            ),
        )
        == []
    )
    # …but two application lines that name nothing come from no source able to see Redis.
    q2 = ev.logs(
        (
            "2026-03-12T09:58:41.120Z",
            "ERROR",
            "cart-service",
            "cart-service.log",
            "GET /v1/cart 503 in 3581 ms: cache unavailable",
        ),
        (
            "2026-03-12T09:58:45.120Z",
            "ERROR",
            "checkout-api",
            "checkout-api.log",
            "cart lookup failed for session 6f1c0a: upstream cart-service 503",
        ),
    )
    weak = draft(
        ("redis", "max_clients_reached"),
        [ev.cite(q2, 0, "cache unavailable"), ev.cite(q2, 1, "cart lookup failed")],
    )
    assert codes(ev, weak) == ["ROOT_CAUSE_UNCORROBORATED"]


# -- finding 2: one line counted twice flips a diagnosis ----------------------------------------------
def test_one_gc_line_cited_twice_or_once_never_beats_the_oom_lines() -> None:
    ev = Evidence()
    pause = "[2026-01-08T10:49:05.240+0000][info][gc] GC(1846) Pause Full (G1 Compaction Pause) 4095M->3986M(4096M) 3120.456ms"
    oom = "Terminating due to java.lang.OutOfMemoryError: Java heap space"
    q = ev.logs(
        ("2026-01-08T10:49:05.240Z", "INFO", "search-api", "gc.log", pause),
        ("2026-01-08T10:49:06.100Z", "FATAL", "search-api", "search-api.log", oom),
        (
            "2026-01-08T10:50:06.100Z",
            "FATAL",
            "search-api",
            "search-api.log",
            oom.replace("Terminating", "Terminating (2)"),
        ),
    )
    twice = draft(
        ("jvm", "gc_pause"),
        [ev.cite(q, 0, "Pause Full (G1 Compaction Pause)"), ev.cite(q, 0, "GC(1846) Pause Full")],
    )
    assert codes(ev, twice) == ["ROOT_CAUSE_UNCORROBORATED"]
    once = draft(("jvm", "gc_pause"), [ev.cite(q, 0, "Pause Full (G1 Compaction Pause)")])
    assert codes(ev, once) == ["ROOT_CAUSE_UNCORROBORATED"]


# -- finding 3: rule-outs without a test --------------------------------------------------------------
def _row_lock_evidence(ev: Evidence) -> tuple[str, str]:
    pg = ev.add(
        "inspect_postgres",
        {
            "kind": "log",
            "lines": [
                "2026-08-03 09:38:02.517 UTC [5120] app@orders LOG:  process 5120 still waiting for ShareLock on transaction 81234 after 1000.123 ms",
                "2026-08-03 09:44:40.066 UTC [5188] app@orders LOG:  process 5188 still waiting for ShareLock on transaction 81234 after 1000.097 ms",
            ],
        },
        kind="log",
    )
    q = ev.logs(("2026-08-03T09:45:00.000Z", "ERROR", *APP, "POST /api/orders/ORD-1/confirm 500 in 30011 ms"))
    return pg, q


def test_a_rule_out_from_a_source_that_cannot_see_the_component_is_untested() -> None:
    ev = Evidence()
    pg, q = _row_lock_evidence(ev)
    rc = [
        ev.cite(pg, 0, "still waiting for ShareLock on transaction 81234"),
        ev.cite(pg, 1, "process 5188 still waiting for ShareLock"),
    ]
    rule_out = {
        "id": "c9",
        "text": "redis max clients reached ruled out: the evidence points to postgresql row lock contention",
        "kind": "finding",
        "citations": [ev.cite(pg, 0, "still waiting for ShareLock")],
    }

    def with_status(status: str) -> dict[str, Any]:
        return draft(
            ("postgresql", "row_lock_contention"),
            rc,
            extra_claims=[rule_out],
            hypotheses=[
                {
                    "statement": "row lock",
                    "component": "postgresql",
                    "mechanism": "row_lock_contention",
                    "status": "confirmed",
                    "claim_ids": ["c1", "c2"],
                },
                {
                    "statement": rule_out["text"],
                    "component": "redis",
                    "mechanism": "max_clients_reached",
                    "status": status,
                    "claim_ids": ["c9"],
                },
            ],
        )

    assert codes(ev, with_status("ruled_out")) == ["RULED_OUT_UNTESTED"]
    assert codes(ev, with_status("open")) == []


def test_a_rule_out_from_an_observing_source_passes_and_no_evidence_is_no_test() -> None:
    ev = Evidence()
    pg, _ = _row_lock_evidence(ev)
    rc = [
        ev.cite(pg, 0, "still waiting for ShareLock on transaction 81234"),
        ev.cite(pg, 1, "process 5188 still waiting"),
    ]
    m = ev.add(
        "query_metrics",
        {
            "window": {"from": "a", "to": "b"},
            "series": [
                {
                    "metric": "redis_connected_clients",
                    "labels": {},
                    "unit": "",
                    "points": [],
                    "summary": {"first": 40, "last": 41, "min": 40, "max": 41, "delta": 1, "mean": 40.5},
                }
            ],
        },
    )
    claim, hyp = redis_ruled_out("Redis clients stayed flat", ev.cite(m, 0, "redis_connected_clients first=40"))
    assert (
        codes(ev, draft(("postgresql", "row_lock_contention"), rc, extra_claims=[claim], hypotheses=[hyp]))
        == []
    )
    # Without a root cause the rule-out is still checked.
    assert codes(
        ev,
        draft(
            None,
            [],
            extra_claims=[{**claim, "citations": [ev.cite(pg, 0, "still waiting for ShareLock")]}],
            hypotheses=[hyp],
        ),
    ) == ["RULED_OUT_UNTESTED"]


def test_every_violation_is_reported_together() -> None:
    ev = Evidence()
    pg, _ = _row_lock_evidence(ev)
    claim, hyp = redis_ruled_out("no redis", ev.cite(pg, 0, "still waiting for ShareLock"))
    d = draft(
        ("postgresql", "row_lock_contention"),
        [ev.cite(pg, 0, "still waiting for ShareLock")],
        extra_claims=[claim],
        hypotheses=[hyp],
    )
    assert codes(ev, d) == ["ROOT_CAUSE_UNCORROBORATED", "RULED_OUT_UNTESTED"]


def test_mock_root_cause_keeps_its_single_code() -> None:
    ev = Evidence()
    q = ev.add(
        "query_logs",
        {
            "entries": [
                {
                    "ts": "2026-03-12T09:58:41.120Z",
                    "level": "ERROR",
                    "service": "payment-service",
                    "source": "p.log",
                    "message": "HikariPool-1 - Connection is not available",
                }
            ]
        },
        source="mock",
    )
    claim, hyp = redis_ruled_out("x", ev.cite(q, 0, "HikariPool-1 - Connection"))
    d = draft(
        ("connection_pool", "connection_exhaustion"),
        [ev.cite(q, 0, "Connection is not available")],
        extra_claims=[claim],
        hypotheses=[hyp],
    )
    assert codes(ev, d) == ["ROOT_CAUSE_MOCK_ONLY"]


# -- finding 4: a shared symptom decided the root cause -----------------------------------------------
SHARED = "Connection is not available, request timed out after"


def _card(cid: str, comp: str, mech: str, signals: list[dict[str, Any]], alternatives: list[str]) -> Card:
    return Card.model_validate(
        {
            "id": cid,
            "title": cid,
            "domain": "connection_pool" if comp == "connection_pool" else "dns",
            "body": "text",
            "hypotheses": [
                {"component": comp, "mechanism": mech, "signals": signals, "distinguishes_from": alternatives}
            ],
        }
    )


@functools.cache
def cards() -> dict[str, Card]:
    """Two small cards telling pool exhaustion and DNS failure apart (shared symptom: the pool timeout)."""
    return {
        "pool": _card(
            "pool",
            "connection_pool",
            "connection_exhaustion",
            [
                {"tool": "query_logs", "any": [SHARED], "weight": 3},
                {
                    "tool": "query_metrics",
                    "metric": "hikaricp_connections_pending",
                    "trend": "rises",
                    "weight": 3,
                    "discriminating": True,
                },
            ],
            ["dns/dns_resolution_failure"],
        ),
        "dns": _card(
            "dns",
            "dns",
            "dns_resolution_failure",
            [
                {
                    "tool": "query_logs",
                    "any": ["UnknownHostException", "Temporary failure in name resolution"],
                    "weight": 3,
                    "discriminating": True,
                },
                {"tool": "query_logs", "any": [SHARED], "weight": 1},
            ],
            ["connection_pool/connection_exhaustion"],
        ),
    }


def _pool_timeouts(ev: Evidence) -> str:
    msg = "HikariPool-1 - Connection is not available, request timed out after 30000ms (total=20, active=0, idle=0, waiting={})"
    return ev.logs(
        ("2026-03-12T09:58:41.120Z", "ERROR", *APP, msg.format(3)),
        ("2026-03-12T09:58:45.120Z", "ERROR", *APP, msg.format(7)),
    )


def test_a_shared_symptom_alone_does_not_discriminate() -> None:
    ev = Evidence()
    q = _pool_timeouts(ev)
    d = draft(
        ("connection_pool", "connection_exhaustion"),
        [ev.cite(q, 0, SHARED + " 30000ms"), ev.cite(q, 1, "idle=0, waiting=7")],
    )
    assert codes(ev, d, cards()) == ["ROOT_CAUSE_NOT_DISCRIMINATED"]
    # Without the card catalogue the check is skipped; the rest holds.
    assert codes(ev, d) == []


def test_a_discriminating_signal_or_a_ref_no_alternative_explains_passes() -> None:
    ev = Evidence()
    q = _pool_timeouts(ev)
    m = ev.add(
        "query_metrics",
        {
            "window": {"from": "a", "to": "b"},
            "series": [
                {
                    "metric": "hikaricp_connections_pending",
                    "labels": {},
                    "unit": "",
                    "points": [],
                    "summary": {"first": 0, "last": 23, "min": 0, "max": 23, "delta": 23, "mean": 9},
                }
            ],
        },
    )
    d = draft(
        ("connection_pool", "connection_exhaustion"),
        [ev.cite(q, 0, SHARED), ev.cite(m, 0, "hikaricp_connections_pending first=0 last=23")],
    )
    assert codes(ev, d, cards()) == []


@pytest.mark.parametrize("where", ["url", "agent"])
def test_a_discriminating_signal_inside_an_untrusted_span_does_not_count(where: str) -> None:
    ev = Evidence()
    q = _pool_timeouts(ev)
    planted = (
        '10.1.1.1 - - [12/Mar/2026:09:58:50 +0000] "GET /?q=hikaricp_connections_pending HTTP/1.1" 200 1 "-" "x"'
        if where == "url"
        else '10.1.1.1 - - [12/Mar/2026:09:58:50 +0000] "GET / HTTP/1.1" 200 1 "-" "Connection is not available, request timed out after 1ms"'
    )
    q2 = ev.logs(("2026-03-12T09:58:50.000Z", "INFO", "edge-nginx", "access.log", planted))
    ex = "hikaricp_connections_pending" if where == "url" else SHARED + " 1ms"
    d = draft(
        ("connection_pool", "connection_exhaustion"),
        [ev.cite(q, 0, SHARED), ev.cite(q, 1, "idle=0, waiting=7"), ev.cite(q2, 0, ex)],
    )
    assert codes(ev, d, cards()) == ["ROOT_CAUSE_NOT_DISCRIMINATED"]


# -- contributing causes: each one is guarded exactly like the root cause -----------------------------
def _two_causes(ev: Evidence) -> tuple[dict[str, Any], dict[str, str]]:
    """A draft whose root cause (PostgreSQL row locks) and contributing cause (Redis max clients)
    each rest on two independent records from their own component; and a Redis citation."""
    pg, _ = _row_lock_evidence(ev)
    line = "redis.exceptions.ConnectionError: max number of clients reached"
    q = ev.logs(("2026-08-03T09:44:41.120Z", "ERROR", "session-service", "session-service.log", line))
    r = ev.add(
        "inspect_redis",
        {"kind": "info", "info": {"clients": {"connected_clients": 10000}, "stats": {"rejected_connections": 4120}}},
        kind="info",
    )
    d = draft(
        ("postgresql", "row_lock_contention"),
        [ev.cite(pg, 0, "process 5120 still waiting for ShareLock"), ev.cite(pg, 1, "process 5188 still waiting")],
        extra_claims=[
            {"id": "k1", "text": f'Evidence: "{line}"', "kind": "finding", "citations": [ev.cite(q, 0, line)]},
            {
                "id": "k2",
                "text": 'Evidence: "rejected_connections:4120"',
                "kind": "finding",
                "citations": [ev.cite(r, 1, "rejected_connections:4120")],
            },
        ],
    )
    d["contributing_causes"] = [
        {"component": "redis", "mechanism": "max_clients_reached", "culprit": "", "claim_ids": ["k1", "k2"]}
    ]
    return d, ev.cite(q, 0, line)


def _result(ev: Evidence, d: dict[str, Any]) -> Any:
    return EvidenceGuard(ev.store).check(d, run_id=RUN)


def test_a_contributing_cause_proven_like_a_root_cause_passes() -> None:
    ev = Evidence()
    d, _ = _two_causes(ev)
    assert codes(ev, d) == []


def test_a_contributing_cause_on_one_record_is_uncorroborated_and_named() -> None:
    ev = Evidence()
    d, _ = _two_causes(ev)
    d["contributing_causes"][0]["claim_ids"] = ["k1"]  # the client error alone
    out = _result(ev, d)
    assert out.codes == ["ROOT_CAUSE_UNCORROBORATED"] and not out.passed
    assert out.violations[0].detail.startswith("contributing_causes[0] (redis/max_clients_reached): 1 independent")


def test_a_contributing_cause_without_runtime_support_is_knowledge_only() -> None:
    ev = Evidence()
    d, _ = _two_causes(ev)
    k = ev.add(
        "lookup_knowledge",
        {"results": [{"card_id": "redis-maxclients", "title": "Redis", "text": "Redis refuses clients beyond maxclients."}]},
        source="knowledge",
    )
    d["claims"].append(
        {"id": "k3", "text": "card", "kind": "finding", "citations": [ev.cite(k, 0, "Redis refuses clients beyond")]}
    )
    d["contributing_causes"][0]["claim_ids"] = ["k3"]
    out = _result(ev, d)
    assert out.codes == ["ROOT_CAUSE_KNOWLEDGE_ONLY"]
    assert out.violations[0].detail == "no runtime citation backs contributing_causes[0] (redis/max_clients_reached)"
    # No claim at all is no support either: claims of kind root_cause back the root cause only.
    d["contributing_causes"][0]["claim_ids"] = []
    assert codes(ev, d) == ["ROOT_CAUSE_KNOWLEDGE_ONLY"]


def test_a_contributing_cause_on_mock_or_injected_evidence_is_refused() -> None:
    ev = Evidence()
    d, _ = _two_causes(ev)
    line = "redis.exceptions.ConnectionError: max number of clients reached"
    for source, flag, code in (("mock", False, "ROOT_CAUSE_MOCK_ONLY"), ("snapshot", True, "ROOT_CAUSE_INJECTED")):
        m = ev.logs(("2026-08-03T09:44:50.000Z", "ERROR", "cart-service", "cart-service.log", line))
        inv = ev.store.get(m)
        assert inv is not None
        inv.evidence_refs = [dataclasses.replace(x, data_source=source, instruction_like=flag) for x in inv.evidence_refs]
        d["claims"] = [c for c in d["claims"] if c["id"] != "k9"] + [
            {"id": "k9", "text": "x", "kind": "finding", "citations": [ev.cite(m, 0, line)]}
        ]
        d["contributing_causes"][0]["claim_ids"] = ["k9"]
        assert codes(ev, d) == [code], source


def test_a_contributing_cause_naming_an_unknown_claim_is_refused() -> None:
    ev = Evidence()
    d, _ = _two_causes(ev)
    d["contributing_causes"][0]["claim_ids"].append("k7")
    out = _result(ev, d)
    assert out.codes == ["CLAIM_REF_UNKNOWN"]
    assert (out.violations[0].claim_id, out.violations[0].detail) == ("k7", "contributing_causes[0]")


def test_a_contributing_cause_is_checked_for_a_discriminating_signal() -> None:
    ev = Evidence()
    d, _ = _two_causes(ev)
    q = _pool_timeouts(ev)
    d["claims"] += [
        {"id": "p1", "text": "x", "kind": "finding", "citations": [ev.cite(q, 0, SHARED + " 30000ms")]},
        {"id": "p2", "text": "y", "kind": "finding", "citations": [ev.cite(q, 1, "idle=0, waiting=7")]},
    ]
    d["contributing_causes"] = [
        {"component": "connection_pool", "mechanism": "connection_exhaustion", "culprit": "", "claim_ids": ["p1", "p2"]}
    ]
    assert codes(ev, d, cards()) == ["ROOT_CAUSE_NOT_DISCRIMINATED"]
    assert codes(ev, d) == []


def test_a_withheld_contributing_cause_withholds_the_whole_draft() -> None:
    """Release: a draft whose contributing cause fails ends in the same fallback as a failed root cause."""
    from rootproof.guard.release import release_draft
    from rootproof.guard.semantic import OfflineJudge, SemanticGuard

    ev = Evidence()
    d, _ = _two_causes(ev)
    semantic = SemanticGuard(OfflineJudge())
    ok = release_draft(d, run_id=RUN, store=ev.store, semantic=semantic, language="en")
    assert ok.release_outcome == "PUBLISHED", (ok.evidence.violations, ok.semantic)
    assert ok.content["report"]["contributing_causes"][0]["mechanism"] == "max_clients_reached"
    d["contributing_causes"][0]["claim_ids"] = ["k1"]
    bad = release_draft(d, run_id=RUN, store=ev.store, semantic=semantic, language="en")
    assert (bad.release_outcome, bad.fallback_type) == ("FALLBACK", "EVIDENCE_VALIDATION_FAILED")
    assert "report" not in bad.content


def test_a_claim_may_name_the_mechanism_of_a_contributing_cause() -> None:
    """SemanticGuard: the draft's own causes are what it investigates (no CAUSE_INVENTED)."""
    from rootproof.agent.draft import parse_draft
    from rootproof.guard.evidence import VerifiedCitation, VerifiedEvidenceSnapshot
    from rootproof.guard.semantic import OfflineJudge, SemanticGuard

    line = "redis.exceptions.ConnectionError: max number of clients reached"
    claim = {
        "id": "k1",
        "text": f'Redis max clients reached: "{line}"',
        "kind": "finding",
        "citations": [{"invocation_id": "inv-1", "tool_name": "query_logs", "raw_path": "$.entries[0]", "excerpt": line}],
    }
    cited = VerifiedCitation(
        claim_id="k1", invocation_id="inv-1", tool_name="query_logs", raw_path="$.entries[0]",
        excerpt=line, ref_text=line, data_source="snapshot",
    )  # fmt: skip
    snapshot = VerifiedEvidenceSnapshot(citations=[cited], verified_sources=[])
    rc = {"component": "postgresql", "mechanism": "row_lock_contention", "culprit": "", "claim_ids": []}
    guard = SemanticGuard(OfflineJudge())
    for contributing, verdict in (
        ([{"component": "redis", "mechanism": "max_clients_reached", "claim_ids": ["k1"]}], "SUPPORTED"),
        ([], "UNSUPPORTED"),
    ):
        d, problem = parse_draft({"summary": "s", "root_cause": rc, "contributing_causes": contributing, "claims": [claim]})
        assert d is not None, problem
        (v,) = guard.check(d, snapshot).verdicts
        assert v.verdict == verdict, v
        assert (v.code == "CAUSE_INVENTED") == (verdict == "UNSUPPORTED")
