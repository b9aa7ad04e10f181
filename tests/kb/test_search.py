"""Hybrid search over the fixture cards: English, Chinese, cross-lingual, out of domain, L0, cache."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from rootproof.kb import index
from rootproof.kb.backend import KnowledgeBackend
from rootproof.kb.index import KnowledgeBase, Thresholds, chunk_card
from rootproof.tools.base import LookupKnowledgeArgs
from rootproof.tools.refs import enumerate_ref_paths, ref_text

FIXTURES = Path(__file__).parents[1] / "data" / "cards"
NOW = datetime(2026, 7, 22, 17, 41, tzinfo=UTC)


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    return KnowledgeBase.load([FIXTURES], builtin=False)


@pytest.mark.parametrize(
    ("query", "card"),
    [
        ("PostgreSQL process still waiting for ShareLock on transaction", "pg-lock-contention"),
        ("Redis clients get ERR max number of clients reached", "redis-maxclients"),
        ("504 Gateway Timeout from nginx, upstream timed out", "nginx-upstream-timeout"),
        ("证书过期，HTTPS 握手失败", "tls-cert-expired"),
        ("接口响应时间飙升，GC 日志出现 Pause Full", "jvm-gc-pause"),
        ("数据库行锁等待，更新语句卡住", "pg-lock-contention"),  # zh query → en card
        ("TLS certificate has expired and handshakes fail", "tls-cert-expired"),  # en query → zh card
        ("Java service latency spikes during long garbage collection pauses", "jvm-gc-pause"),
    ],
)
def test_ranks_the_right_card_first(kb: KnowledgeBase, query: str, card: str) -> None:
    resp = kb.search(query)
    assert resp.hits, query
    assert resp.hits[0].card_id == card
    hit = resp.hits[0]
    assert hit.chunk_id.startswith(card + "#") and hit.text
    assert set(hit.channels) >= {"bm25", "dense"}
    assert all(set(v) == {"rank", "score"} for v in hit.channels.values())


@pytest.mark.parametrize("query", ["how do I bake bread", "what is the capital of France", "今天天气怎么样"])
def test_out_of_domain_gets_no_evidence(kb: KnowledgeBase, query: str) -> None:
    resp = kb.search(query)
    assert resp.hits == [] and resp.l1_match_count == 0


def test_l0_hints_but_never_bypasses(kb: KnowledgeBase) -> None:
    resp = kb.search("error 55P03 still waiting for ShareLock")
    assert resp.layer == "L0+L1" and resp.l0_hint_cards == ["pg-lock-contention"]
    assert resp.hits[0].card_id == "pg-lock-contention" and "l0" in resp.hits[0].channels
    # An identifier alone with nothing else L1 can use does not conjure a result.
    bare = kb.search("maxclients")
    assert bare.l0_hint_cards == ["redis-maxclients"]
    assert all(h.card_id == "redis-maxclients" for h in bare.hits)
    # Identifiers must not match inside other words.
    assert kb.identifier_hints("the pg_locks_waitingness")[0] == []


def test_single_channel_ablation(kb: KnowledgeBase) -> None:
    resp = kb.search("Redis max number of clients reached", channels=("bm25",))
    assert resp.hits[0].card_id == "redis-maxclients" and set(resp.hits[0].channels) == {"bm25", "l0"}


def test_chunks_carry_ids_and_sections(kb: KnowledgeBase) -> None:
    chunks = chunk_card(kb.cards["pg-lock-contention"])
    assert [c.chunk_id for c in chunks] == [f"pg-lock-contention#{i}" for i in range(1, 5)]
    assert chunks[0].text.startswith("## Symptoms")
    assert chunks[0].dense_text().startswith("PostgreSQL row lock contention")
    card = kb.cards["pg-lock-contention"]
    # The dense text carries the card's tags (cross-language keywords, synonyms).
    assert card.tags and all(t in chunks[0].dense_text().split("\n")[1] for t in card.tags)


def test_fusion_weights_scale_each_channel(kb: KnowledgeBase) -> None:
    stored = kb.thresholds
    assert Thresholds.from_dict(stored.as_dict()) == stored
    assert Thresholds.from_dict({"channels": stored.as_dict()["channels"]}).weight("bm25") == 1.0
    query = "Redis max number of clients reached"
    try:
        # redis-maxclients is first in both channels and the first L0 hint (which weighs 1).
        kb.thresholds = Thresholds(channels=stored.channels, fusion={"bm25": 0.5, "dense": 2.0})
        top = kb.search(query, 1).hits[0]
        assert top.card_id == "redis-maxclients"
        assert (
            top.channels["bm25"]["rank"] == top.channels["dense"]["rank"] == top.channels["l0"]["rank"] == 1
        )
        assert top.score == pytest.approx((0.5 + 2.0 + 1.0) / 61, abs=1e-6)
    finally:
        kb.thresholds = stored
    assert kb.search(query, 1).hits[0].score == pytest.approx(3.0 / 61, abs=1e-6)


def test_backend_result_refs_and_tracker(kb: KnowledgeBase) -> None:
    backend = KnowledgeBackend(kb)
    args = LookupKnowledgeArgs(query="PostgreSQL still waiting for ShareLock", top_k=1)
    first = backend.call("lookup_knowledge", args, now=NOW, run_id="run-1")
    assert first.data_source == "knowledge" and first.evidence_status is None
    res = first.json()
    assert res["query"] == args.query and res["results"][0]["card_id"] == "pg-lock-contention"
    assert enumerate_ref_paths(res) == ["$.results[0]"]
    item = res["results"][0]
    assert (
        ref_text("lookup_knowledge", res, "$.results[0]")
        == f"[{item['card_id']}] {item['title']}: {item['text']}"
    )
    assert first.details["layer"] == "L0+L1" and first.details["relevance_level"] == item["grade"]
    # Same run, same question: each call returns only cards not returned before in this run,
    # until every card above the floor has been returned: then DEDUPLICATED.
    returned = ["pg-lock-contention"]
    for _ in range(len(kb.cards)):
        again = backend.call("lookup_knowledge", args, now=NOW, run_id="run-1")
        if again.evidence_status == "DEDUPLICATED":
            break
        new = [r["card_id"] for r in again.json()["results"]]
        assert new and not set(new) & set(returned)
        returned += new
    assert again.evidence_status == "DEDUPLICATED"
    assert again.json()["results"] == [] and "already returned" in again.json()["deduplicated"]
    assert "no_evidence" not in again.json()
    # A new run gets the card again.
    fresh = backend.call("lookup_knowledge", args, now=NOW, run_id="run-2")
    assert fresh.evidence_status is None and fresh.json()["results"][0]["card_id"] == "pg-lock-contention"


def test_backend_no_evidence(kb: KnowledgeBase) -> None:
    out = KnowledgeBackend(kb).call(
        "lookup_knowledge", LookupKnowledgeArgs(query="how do I bake bread"), now=NOW, run_id="r"
    )
    assert out.json()["results"] == [] and out.evidence_status is None
    assert out.json()["no_evidence"] == (
        "lookup_knowledge found no card above the relevance floor for query 'how do I bake bread'"
    )
    assert out.details["relevance_level"] == "NO_EVIDENCE"


def test_index_cache_reused_and_rebuilt_cold(tmp_path: Path) -> None:
    """The one cold build of this file: every card encoded, then none, then only the changed one."""
    cards = tmp_path / "cards"
    shutil.copytree(FIXTURES, cards)
    cache = tmp_path / "kb-index"
    first = KnowledgeBase.load([cards], builtin=False, cache_dir=cache)
    n = len(first.cards)
    assert not first.cache_hit and first.cards_encoded == n and len(list(cache.iterdir())) == n
    second = KnowledgeBase.load([cards], builtin=False, cache_dir=cache)
    assert second.cache_hit and second.cards_encoded == 0
    assert second.search("Redis max number of clients reached").hits[0].card_id == "redis-maxclients"
    assert np.array_equal(second._dense.vectors, first._dense.vectors)
    card = cards / "redis-maxclients.md"
    card.write_text(card.read_text(encoding="utf-8") + "\n## More\nSet a client timeout.\n", encoding="utf-8")
    third = KnowledgeBase.load([cards], builtin=False, cache_dir=cache)
    cards_kept = [f for f in cache.iterdir() if not f.name.startswith("queries-")]
    assert not third.cache_hit and third.cards_encoded == 1 and len(cards_kept) == n + 1
    assert any(c.text.startswith("## More") for c in third.chunks)
    assert third.search("Redis max number of clients reached").hits[0].card_id == "redis-maxclients"


def test_a_query_embedding_is_kept_on_disk_and_a_later_process_needs_no_encoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "kb-index"
    query = "Redis refuses clients: password is Kiwi-Secret-77"
    first = KnowledgeBase.load([FIXTURES], builtin=False, cache_dir=cache)
    want = first.card_scores(query).scores["dense"]
    (folder,) = [f for f in cache.iterdir() if f.name.startswith("queries-")]
    (kept,) = list(folder.iterdir())
    assert kept.suffix == ".f32" and kept.stat().st_size == 2048 and "Kiwi" not in kept.name
    # A new process: nothing remembered in memory, and no encoder to load.
    index._query_vector.cache_clear()
    monkeypatch.setattr(index, "encode", lambda *_a, **_k: pytest.fail("the encoder was loaded"))
    second = KnowledgeBase.load([FIXTURES], builtin=False, cache_dir=cache)
    assert second.card_scores(query).scores["dense"] == want
    # A damaged file is not trusted: the query is encoded again and the file rewritten.
    index._query_vector.cache_clear()
    kept.write_bytes(b"not an array")
    monkeypatch.undo()
    third = KnowledgeBase.load([FIXTURES], builtin=False, cache_dir=cache)
    assert third.card_scores(query).scores["dense"] == pytest.approx(want)
    assert kept.stat().st_size == 2048 and np.isfinite(np.frombuffer(kept.read_bytes(), dtype="<f4")).all()


CONTRAST_CARD = """---
id: redis-maxclients
title: Redis refuses connections at maxclients
domain: redis
tags: [connections, clients]
---
# Redis maxclients

## Symptoms
Clients fail with `ERR max number of clients reached`; INFO shows `rejected_connections` growing.

## How to tell it apart
- **PostgreSQL deadlock**: two transactions each wait for a row lock the other holds and the
  server aborts one of them with "deadlock detected"; that is a database lock cycle, not Redis.
"""


def test_contrast_sections_are_not_matched_by_the_dense_channel(tmp_path: Path) -> None:
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "redis-maxclients.md").write_text(CONTRAST_CARD, encoding="utf-8")
    kb = KnowledgeBase.load([cards], builtin=False, cache_dir=tmp_path / "cache")
    flags = {c.text.split("\n", 1)[0]: c.contrast for c in kb.chunks}
    assert flags == {"## Symptoms": False, "## How to tell it apart": True}
    query = "two transactions wait for each other's row locks and one is aborted with deadlock detected"
    cs = kb.card_scores(query)
    # The dense channel scores the card by its own section, never by the one about deadlocks.
    dense_best = kb.chunks[cs.best_chunk["dense"]["redis-maxclients"]]
    assert not dense_best.contrast
    assert cs.scores["dense"]["redis-maxclients"] == pytest.approx(float(cs.chunk_scores["dense"][0]))


def test_a_card_of_contrast_sections_only_is_still_matched(tmp_path: Path) -> None:
    cards = tmp_path / "cards"
    cards.mkdir()
    only = CONTRAST_CARD.replace(
        "## Symptoms\nClients fail with `ERR max number of clients reached`; INFO shows `rejected_connections` growing.\n\n",
        "",
    )
    (cards / "redis-maxclients.md").write_text(only, encoding="utf-8")
    kb = KnowledgeBase.load([cards], builtin=False, cache_dir=tmp_path / "cache")
    assert [c.contrast for c in kb.chunks] == [False]
