"""EG-18 CITATION_ENTITY_MISMATCH: a claim agrees with the entities of the refs it cites.

The first cases are the review's findings: a published, correct report whose root-cause claim
("pid 26523 blocks pid 26616") cited the row of an unrelated session (pid 26609, idle in
transaction after an ALTER USER, blocking nothing), and rule-outs citing rows and lines about
something else.
"""

from __future__ import annotations

from typing import Any

from rootproof.guard.entities import claim_mismatches, culprit_mismatch, named, own_entities, ref_entities
from tests.guard.test_assertions import RUN, Evidence, codes, draft

CODE = "CITATION_ENTITY_MISMATCH"

BLOCKER = {
    "application_name": "stock-recount", "blocking_pids": [], "client_addr": "10.20.3.31", "datname": "orders",
    "pid": 26523, "query": "UPDATE inventory SET stock = stock WHERE sku = $1", "state": "idle in transaction",
    "wait_event": "ClientRead", "xact_age_s": 41.2,
}
WAITER = {
    "application_name": "order-service", "blocking_pids": [26523], "client_addr": "10.20.3.14", "datname": "orders",
    "pid": 26616, "query": "UPDATE inventory SET stock = stock - $1 WHERE sku = $2", "state": "active",
    "wait_event": "transactionid", "xact_age_s": 12.9,
}
BYSTANDER = {
    "application_name": "psql", "blocking_pids": [], "client_addr": "10.20.7.2", "datname": "orders",
    "pid": 26609, "query": "ALTER USER report_ro PASSWORD '***'", "state": "idle in transaction",
    "wait_event": "ClientRead", "xact_age_s": 95.0,
}


def sessions(ev: Evidence) -> str:
    return ev.add("inspect_postgres", {"kind": "activity", "rows": [BLOCKER, WAITER, BYSTANDER]}, kind="activity")


def lock_log(ev: Evidence) -> str:
    return ev.logs(
        (
            "2026-03-12T09:58:41.120Z", "WARN", "pg-orders", "postgresql.log",
            "process 26616 still waiting for ShareLock on transaction 90211 after 1000.120 ms",
        ),
        (
            "2026-03-12T09:58:41.121Z", "WARN", "pg-orders", "postgresql.log",
            "Process holding the lock: 26523. Wait queue: 26616.",
        ),
        ("2026-03-12T09:59:02.330Z", "ERROR", "order-service", "order-service.log", "POST /orders failed after 30012 ms: canceling statement due to statement timeout"),
        ("2026-03-12T09:59:03.330Z", "INFO", "order-service", "access.log", '10.20.9.7 - - "GET /api/checkout?password=*** HTTP/1.1" 200 512'),
    )


def row_cite(ev: Evidence, inv: str, index: int) -> dict[str, str]:
    text = ev.store.get(inv).evidence_refs[index].text  # type: ignore[union-attr]
    return ev.cite(inv, index, text[:120])


def rc_draft(claims: list[dict[str, Any]], culprit: str = "") -> dict[str, Any]:
    d = draft(("postgresql", "row_lock_contention"), [], extra_claims=claims)
    d["root_cause"]["claim_ids"] = [c["id"] for c in claims if c["kind"] == "root_cause"]
    d["root_cause"]["culprit"] = culprit
    return d


def test_a_root_cause_claim_citing_a_bystanders_row_is_withheld() -> None:
    ev = Evidence()
    s, q = sessions(ev), lock_log(ev)
    wait = ev.cite(q, 0, "process 26616 still waiting for ShareLock on transaction 90211")
    wrong = [
        {"id": "c1", "text": "pid 26523 blocks pid 26616", "kind": "root_cause", "citations": [row_cite(ev, s, 2), wait]},
    ]
    assert CODE in codes(ev, rc_draft(wrong, "pid 26523"))
    right = [
        {"id": "c1", "text": "pid 26523 blocks pid 26616", "kind": "root_cause", "citations": [row_cite(ev, s, 0), row_cite(ev, s, 1), wait]},
    ]
    assert CODE not in codes(ev, rc_draft(right, "pid 26523"))


def test_the_culprit_is_cited_by_its_own_row_not_by_a_waiter_naming_it() -> None:
    ev = Evidence()
    s, q = sessions(ev), lock_log(ev)
    holder = ev.cite(q, 1, "Process holding the lock: 26523")
    waiter_only = [{"id": "c1", "text": "Root cause evidence", "kind": "root_cause", "citations": [row_cite(ev, s, 1), holder]}]
    found = ev_check(ev, rc_draft(waiter_only, "pid 26523 (application stock-recount) blocks 1 session(s)"))
    assert [v["detail"] for v in found] == ["the culprit is pid 26523 but the cited rows are of pid 26616"]
    own = [{"id": "c1", "text": "Root cause evidence", "kind": "root_cause", "citations": [row_cite(ev, s, 1), row_cite(ev, s, 0), holder]}]
    assert CODE not in codes(ev, rc_draft(own, "pid 26523 (application stock-recount) blocks 1 session(s)"))
    # With no session rows cited, a line that names the culprit is its record.
    lines = [{"id": "c1", "text": "Root cause evidence", "kind": "root_cause", "citations": [holder, ev.cite(q, 0, "still waiting for ShareLock")]}]
    assert CODE not in codes(ev, rc_draft(lines, "pid 26523"))


def ev_check(ev: Evidence, d: dict[str, Any]) -> list[dict[str, Any]]:
    from rootproof.guard.evidence import EvidenceGuard

    result = EvidenceGuard(ev.store).check(d, run_id=RUN).as_dict()
    return [v for v in result["violations"] if v["code"] == CODE]


def test_rule_outs_citing_something_else_are_withheld() -> None:
    ev = Evidence()
    s, q = sessions(ev), lock_log(ev)
    base = [{"id": "c1", "text": "Root cause evidence", "kind": "root_cause", "citations": [row_cite(ev, s, 0), row_cite(ev, s, 1), ev.cite(q, 1, "Process holding the lock: 26523")]}]
    hyp = {"statement": "pool", "component": "connection_pool", "mechanism": "connection_exhaustion", "status": "ruled_out", "claim_ids": ["c2"]}
    # "Connection exhaustion ruled out" naming the blocker, citing the bystander's row.
    bad = rc_draft([*base, {"id": "c2", "text": "connection exhaustion ruled out: only pid 26523 holds a transaction open", "kind": "finding", "citations": [row_cite(ev, s, 2)]}], "pid 26523")
    bad["hypotheses"] = [hyp]
    assert CODE in codes(ev, bad)
    # A quote of the blocker's row moved to the bystander's row (the quote is no longer its ref's).
    moved = ev.cite(s, 2, ev.store.get(s).evidence_refs[2].text[:100])  # type: ignore[union-attr]
    quoted = rc_draft([*base, {"id": "c2", "text": f'ruled out: "{ev.store.get(s).evidence_refs[0].text[:150]}"', "kind": "finding", "citations": [moved]}], "pid 26523")  # type: ignore[union-attr]
    quoted["hypotheses"] = [hyp]
    assert CODE in codes(ev, quoted)
    # A finding about 10.20.3.14's session citing an access line of another client.
    line = ev.cite(q, 3, "GET /api/checkout?password=***")
    stray = rc_draft([*base, {"id": "c2", "text": "the session from 10.20.3.14 waits on the lock", "kind": "finding", "citations": [line]}], "pid 26523")
    assert CODE in codes(ev, stray)
    good = rc_draft([*base, {"id": "c2", "text": "the session from 10.20.3.14 waits on the lock", "kind": "finding", "citations": [row_cite(ev, s, 1)]}], "pid 26523")
    assert CODE not in codes(ev, good)


def test_a_quote_is_its_own_refs_and_aggregates_stand() -> None:
    """A claim quoting one record and citing several of the same kind (two OOM kills, lock waits
    of two sessions) names nothing of its own: what it quotes is what its ref shows."""
    ev = Evidence()
    q = ev.logs(
        ("2026-03-12T09:58:41.120Z", "ERROR", "kernel", "kern.log", "Memory cgroup out of memory: Killed process 4306 (gunicorn) total-vm:1612844kB"),
        ("2026-03-12T09:58:51.120Z", "ERROR", "kernel", "kern.log", "Memory cgroup out of memory: Killed process 3887 (gunicorn) total-vm:1612844kB"),
    )
    one = ev.cite(q, 0, "Killed process 4306 (gunicorn)")
    two = ev.cite(q, 1, "Killed process 3887 (gunicorn)")
    text = 'OOM kills: "Memory cgroup out of memory: Killed process 4306 (gunicorn)"'
    d = draft(None, [], extra_claims=[{"id": "c1", "text": text, "kind": "finding", "citations": [one, two]}])
    assert CODE not in codes(ev, d)
    # … but the same words as the claim's own, about a process no ref names, are not.
    d2 = draft(None, [], extra_claims=[{"id": "c1", "text": "the kernel killed process 5120", "kind": "finding", "citations": [one, two]}])
    assert CODE in codes(ev, d2)


def test_entity_reading() -> None:
    assert named('pid 21328 (application x, database "orders") blocks process 21364') >= {("pid", "21328"), ("pid", "21364"), ("database", "orders")}
    assert named("进程 5301 正在等待事务 81234 持有的锁") == {("pid", "5301"), ("xid", "81234")}
    assert named('记录显示：“request: "POST /v1/charges”') == {("route", "POST /v1/charges")}
    # A number that ends a quote may be cut short; a quoted value is whole.
    assert named('Evidence: "{"pid":21"') == frozenset()
    assert named('"transactionid":"790"') == {("xid", "790")}
    # Free words are no entity: "the database is slow" names no database.
    assert named("the database is slow and the process keeps waiting") == frozenset()
    row = ref_entities("inspect_postgres", "$.rows[1]", '{"blocking_pids":[26523],"pid":26616}')
    assert row.subject == ("pid", "26616") and ("pid", "26523") in row.mentions
    client = ref_entities("inspect_redis", "$.rows[0]", "id=7 addr=10.0.0.5:51234 name=worker")
    assert client.subject == ("client", "7")
    assert ref_entities("query_logs", "$.entries[0]", "process 26616 still waiting").subject is None
    assert own_entities('see "process 26616 still waiting for ShareLock"', ["LOG: process 26616 still waiting for ShareLock on"]) == frozenset()
    assert claim_mismatches("no entities here", [(0, "query_logs", "$.entries[0]", "process 1 exited")]) == []
    assert culprit_mismatch("", [("query_logs", "$.entries[0]", "x")]) is None


def test_a_cause_and_the_symptoms_it_explains_stay_on_the_culprits_chain() -> None:
    """The bystander's row (idle in transaction: a row-lock signal too) cited by a root-cause
    claim, or by a symptom the root cause is said to explain, is withheld; the waiter's and the
    blocker's rows stand."""
    ev = Evidence()
    s, q = sessions(ev), lock_log(ev)
    wait = ev.cite(q, 0, "process 26616 still waiting for ShareLock on transaction 90211")
    chain = [row_cite(ev, s, 0), row_cite(ev, s, 1), wait]
    with_bystander = [{"id": "c1", "text": "Root cause evidence", "kind": "root_cause", "citations": [*chain, row_cite(ev, s, 2)]}]
    found = ev_check(ev, rc_draft(with_bystander, "pid 26523 blocks 1 session(s)"))
    assert len(found) == 1 and "pid 26609" in found[0]["detail"], found
    base = [{"id": "c1", "text": "Root cause evidence", "kind": "root_cause", "citations": chain}]
    explained = rc_draft([*base, {"id": "c2", "text": "connection pool leak is a consequence of the row lock", "kind": "finding", "citations": [row_cite(ev, s, 2)]}], "pid 26523")
    explained["hypotheses"] = [{"statement": "pool leak", "component": "connection_pool", "mechanism": "pool_leak", "status": "explained", "claim_ids": ["c2"]}]
    found = ev_check(ev, explained)
    assert [(v["claim_id"], v["citation_index"]) for v in found] == [("c2", 0)], found
    explained["claims"][1]["citations"] = [row_cite(ev, s, 1)]
    assert ev_check(ev, explained) == []
