"""Hybrid search over the fixture cards: English, Chinese, cross-lingual, out of domain, L0, cache."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rootproof.kb.backend import KnowledgeBackend
from rootproof.kb.channels import standard_scores
from rootproof.kb.index import KnowledgeBase, Thresholds, chunk_card
from rootproof.tools.base import LookupKnowledgeArgs
from rootproof.tools.refs import enumerate_ref_paths, ref_text

FIXTURES = Path(__file__).parent / "data" / "cards"
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


def test_fusion_priors_scale_each_channel(kb: KnowledgeBase) -> None:
    stored = kb.thresholds
    assert Thresholds.from_dict(stored.as_dict()) == stored
    assert Thresholds.from_dict({"channels": stored.as_dict()["channels"]}).weight("bm25") == 1.0
    query = "Redis max number of clients reached"
    plain = kb.search(query, 1)
    try:
        kb.thresholds = Thresholds(channels=stored.channels, fusion={"bm25": 0.5, "dense": 2.0})
        scaled = kb.search(query, 1)
    finally:
        kb.thresholds = stored
    # redis-maxclients stands out in both channels: both weigh, and the priors scale them.
    assert plain.hits[0].card_id == scaled.hits[0].card_id == "redis-maxclients"
    wp, ws = plain.fusion_weights, scaled.fusion_weights
    assert sum(wp.values()) == pytest.approx(1.0, abs=1e-3) and min(wp.values()) > 0.1
    assert ws["dense"] / ws["bm25"] == pytest.approx(4 * wp["dense"] / wp["bm25"], rel=1e-2)
    # The hit's score is the weighted sum of the card's standard scores in each channel, over
    # the channel's evidence: its scores floored at its REFERENCE threshold.
    cs = kb.card_scores(query)
    ids = sorted(kb.cards)
    raw = {ch: [cs.scores[ch].get(c, 0.0) for c in ids] for ch in ("bm25", "dense")}
    floors = {ch: kb.thresholds.channels[ch].reference for ch in raw}
    assert list(kb.evidence("bm25", raw["bm25"])) == [max(v, floors["bm25"]) for v in raw["bm25"]]
    z = {ch: standard_scores(kb.evidence(ch, raw[ch])) for ch in raw}
    i = ids.index("redis-maxclients")
    assert plain.hits[0].score == pytest.approx(sum(wp[ch] * z[ch][i] for ch in z), abs=1e-3)
    # The dense channel's chance level is measured with the probe questions on these cards:
    # none of them reaches the dense floor, so they stand out nowhere (the Gaussian level holds).
    assert kb.probes and kb.chance_levels("card") == {"dense": 0.0}


def test_below_floor_keyword_overlap_does_not_order(kb: KnowledgeBase) -> None:
    # Generic words shared with one card give the keyword channel a lone standout far below
    # its floor: it is noise and must not outvote the dense channel.
    query = "the service became slow after the deploy; what is going on?"
    cs = kb.card_scores(query)
    floor = kb.thresholds.channels["bm25"].reference
    assert 0 < max(cs.scores["bm25"].values()) < floor
    resp = kb.search(query, 5)
    assert resp.fusion_weights.get("bm25", 0.0) == 0.0


def test_single_channel_fusion_orders_by_that_channel(kb: KnowledgeBase) -> None:
    resp = kb.search("Java service latency spikes during long pauses", 10, channels=("dense",))
    assert resp.hits and resp.fusion_weights == {"dense": 1.0}
    scores = [h.channels["dense"]["score"] for h in resp.hits]
    assert scores == sorted(scores, reverse=True)


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


def test_index_cache_reused_and_rebuilt(tmp_path: Path) -> None:
    cards = tmp_path / "cards"
    shutil.copytree(FIXTURES, cards)
    cache = tmp_path / "kb-index"
    first = KnowledgeBase.load([cards], builtin=False, cache_dir=cache)
    assert not first.cache_hit and len(list(cache.iterdir())) == 1
    second = KnowledgeBase.load([cards], builtin=False, cache_dir=cache)
    assert second.cache_hit
    assert second.search("Redis max number of clients reached").hits[0].card_id == "redis-maxclients"
    card = cards / "redis-maxclients.md"
    card.write_text(card.read_text(encoding="utf-8") + "\n## More\nSet a client timeout.\n", encoding="utf-8")
    third = KnowledgeBase.load([cards], builtin=False, cache_dir=cache)
    assert not third.cache_hit and len(list(cache.iterdir())) == 2
    assert any(c.text.startswith("## More") for c in third.chunks)
