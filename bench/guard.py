"""Validation throughput: drafts per second, 20 citations over ~1 MB of canonical results.

Builds synthetic canonical `query_logs` invocations in an `InMemoryCanonicalStore` (about 1 MB
of results in total), a draft of 10 claims × 2 citations quoting verbatim windows of their
refs, and times `EvidenceGuard.check`, the `OfflineJudge` (SemanticGuard) and both together.
The draft's root cause (Redis max clients, two claims citing two client errors) and one
ruled-out alternative exercise the root-cause rules; the guard gets the built-in card catalogue
when it takes one.

    .venv/bin/python bench/guard.py [--repeat N]
"""

from __future__ import annotations

import argparse
import inspect
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from rootproof.boundary.store import CanonicalInvocation, InMemoryCanonicalStore, InvocationStatus
from rootproof.guard.evidence import EvidenceGuard
from rootproof.guard.semantic import OfflineJudge, SemanticGuard
from rootproof.kb.channels import encode
from rootproof.tools.refs import EvidenceRef, canonical_json, ref_text

RUN_ID = "run-bench"
SERVICES = ["order-service", "payment-service", "postgres-orders", "redis-cart", "edge-nginx"]
MESSAGES = [
    "POST /api/orders/ORD-{n}/confirm 500 in {ms} ms: canceling statement due to user request",
    "process {n} still waiting for ShareLock on transaction {ms} after 1000.152 ms",
    "HikariPool-1 - Connection is not available, request timed out after {ms}ms (total=20, active=20, idle=0, waiting={n})",
    "upstream timed out (110: Connection timed out) while reading response header from upstream, request {n} after {ms} ms",
    "redis.exceptions.ConnectionError: max number of clients reached (client {n}, {ms} ms)",
]


def build_store(
    total_bytes: int, rng: random.Random
) -> tuple[InMemoryCanonicalStore, list[CanonicalInvocation]]:
    """Canonical query_logs invocations whose results add up to about `total_bytes`."""
    store = InMemoryCanonicalStore()
    invs: list[CanonicalInvocation] = []
    now = datetime(2026, 8, 3, 9, 52, tzinfo=UTC)
    size, k = 0, 0
    while size < total_bytes:
        entries = []
        for _ in range(200):
            ts = now - timedelta(seconds=rng.randint(0, 1800))
            msg = rng.choice(MESSAGES).format(n=rng.randint(1000, 99999), ms=rng.randint(10, 60000))
            msg += "\n" + " ".join(
                f"\tat com.example.svc{j}.Handler.call(Handler.java:{rng.randint(10, 900)})" for j in range(3)
            )
            entries.append(
                {
                    "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z",
                    "level": "ERROR",
                    "service": rng.choice(SERVICES),
                    "source": "app.log",
                    "message": msg,
                }
            )
        result: dict[str, Any] = {
            "window": {"from": "2026-08-03T09:22:00.000Z", "to": "2026-08-03T09:52:00.000Z"},
            "total_matches": len(entries),
            "entries": entries,
        }
        refs = [
            EvidenceRef(
                raw_path=f"$.entries[{i}]",
                text=ref_text("query_logs", result, f"$.entries[{i}]"),
                data_source="snapshot",
            )
            for i in range(len(entries))
        ]
        raw = canonical_json(result)
        inv = CanonicalInvocation(
            invocation_id=f"inv-bench{k:04d}",
            run_id=RUN_ID,
            session_id="s",
            step_index=0,
            tool_name="query_logs",
            arguments={"query": ""},
            scope_key=f"query_logs:{k}",
            status=InvocationStatus.READY,
            evidence_status="EVIDENCE_FOUND",
            data_source="snapshot",
            result=result,
            evidence_refs=refs,
            result_bytes=len(raw.encode()),
        )
        store.put(inv)
        invs.append(inv)
        size += inv.result_bytes
        k += 1
    return store, invs


def build_draft(invs: list[CanonicalInvocation], rng: random.Random, citations: int = 20) -> dict[str, Any]:
    """A draft of citations/2 claims, each quoting the first line of two refs' messages."""
    claims = []
    for c in range(citations // 2):
        cits, quotes = [], []
        for _ in range(2):
            inv = rng.choice(invs)
            ref = rng.choice(inv.evidence_refs)
            ex = ref.text.split("] ", 1)[1].split("\n", 1)[0]
            cits.append(
                {
                    "invocation_id": inv.invocation_id,
                    "tool_name": "query_logs",
                    "raw_path": ref.raw_path,
                    "excerpt": ex,
                }
            )
            quotes.append(f'"{ex}"')
        claims.append(
            {
                "id": f"c{c + 1}",
                "text": "Logs show " + " and ".join(quotes),
                "kind": "finding",
                "citations": cits,
            }
        )
    draft: dict[str, Any] = {
        "answer_version": "diagnosis_draft_v1",
        "summary": "bench",
        "root_cause": None,
        "claims": claims,
    }
    redis = [(i, r) for i in invs for r in i.evidence_refs if "max number of clients reached" in r.text][:2]
    pg = next((i, r) for i in invs for r in i.evidence_refs if " postgres-orders " in r.text)
    for k, (inv, ref) in enumerate(redis):
        ex = ref.text.split("] ", 1)[1].split("\n", 1)[0]
        cit = {
            "invocation_id": inv.invocation_id,
            "tool_name": "query_logs",
            "raw_path": ref.raw_path,
            "excerpt": ex,
        }
        claims[k] = {"id": f"c{k + 1}", "text": f'Logs show "{ex}"', "kind": "root_cause", "citations": [cit]}
    inv, ref = pg
    ex = ref.text.split("] ", 1)[1].split("\n", 1)[0]
    cit = {
        "invocation_id": inv.invocation_id,
        "tool_name": "query_logs",
        "raw_path": ref.raw_path,
        "excerpt": ex,
    }
    claims[2] = {"id": "c3", "text": f'Logs show "{ex}"', "kind": "finding", "citations": [cit]}
    draft["root_cause"] = {
        "component": "redis",
        "mechanism": "max_clients_reached",
        "culprit": "",
        "claim_ids": ["c1", "c2"],
    }
    draft["hypotheses"] = [
        {
            "statement": "redis max clients",
            "component": "redis",
            "mechanism": "max_clients_reached",
            "status": "confirmed",
            "claim_ids": ["c1", "c2"],
        },
        {
            "statement": "row locks",
            "component": "postgresql",
            "mechanism": "row_lock_contention",
            "status": "ruled_out",
            "claim_ids": ["c3"],
        },
    ]
    return draft


def main() -> None:
    """Print drafts per second for the EvidenceGuard, the offline judge and both."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--mb", type=float, default=1.0)
    args = ap.parse_args()
    rng = random.Random(0)
    store, invs = build_store(int(args.mb * 1_000_000), rng)
    total = sum(i.result_bytes for i in invs)
    draft = build_draft(invs, rng)
    if "cards" in inspect.signature(EvidenceGuard).parameters:
        from rootproof.kb.cards import load_cards

        guard = EvidenceGuard(store, cards=load_cards())  # type: ignore[call-arg,unused-ignore]
    else:  # the guard before the card catalogue existed (for before/after figures)
        guard = EvidenceGuard(store)
    judge = SemanticGuard(OfflineJudge(embed=encode))
    first = guard.check(draft, run_id=RUN_ID)
    assert first.passed and first.snapshot is not None and first.draft is not None, first.codes
    assert judge.check(first.draft, first.snapshot).supported
    n = args.repeat

    t0 = time.perf_counter()
    for _ in range(n):
        ev = guard.check(draft, run_id=RUN_ID)
    t_ev = (time.perf_counter() - t0) / n
    assert ev.snapshot is not None and ev.draft is not None
    t0 = time.perf_counter()
    for _ in range(n):
        judge.check(ev.draft, ev.snapshot)
    t_sem = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(n):
        r = guard.check(draft, run_id=RUN_ID)
        assert r.snapshot is not None and r.draft is not None
        judge.check(r.draft, r.snapshot)
    t_both = (time.perf_counter() - t0) / n

    print(
        f"canonical results: {len(invs)} invocations, {sum(len(i.evidence_refs) for i in invs)} refs, {total / 1e6:.2f} MB"
    )
    print(
        f"draft: {len(draft['claims'])} claims, {sum(len(c['citations']) for c in draft['claims'])} citations; {n} repetitions"
    )
    for name, t in (("EvidenceGuard.check", t_ev), ("SemanticGuard(OfflineJudge)", t_sem), ("both", t_both)):
        print(f"{name:30s} {t * 1000:8.3f} ms/draft  {1 / t:10.1f} drafts/s")


if __name__ == "__main__":
    main()
