"""Retrieval speed bench: keyword, dense and hybrid query latency at 10k / 100k / 1M chunks.

Synthetic chunks are drawn from a Zipf-distributed vocabulary (already tokenised: the bench
measures search, not tokenisation). Dense latency counts encoding a real-language query with
the model plus the exact numpy search; the chunk vectors are random unit vectors of the model's
dimension (512) at every size (search cost does not depend on their values; embedding 1M
chunks would take hours on 2 cores), and the model's batch throughput is measured once on 500
real chunks (said in the output). The same run measures rank-bm25's BM25Okapi on
the same corpus at 10k and 100k (it is pure Python; at 1M it is skipped as too slow).

    .venv/bin/python bench/retrieval.py [--sizes 10000,100000,1000000] [--queries 50]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from rootproof.kb.channels import DenseIndex, KeywordIndex, encode, rrf_fuse, top_k

DIM = 512
# Real-language queries for the encoder (synthetic `w123` tokens cost it far more than text does).
QUERY_TEXTS = [
    "PostgreSQL process still waiting for ShareLock on transaction",
    "Redis ERR max number of clients reached",
    "nginx upstream timed out while reading response header",
    "HikariPool connection is not available, request timed out",
    "数据库连接池耗尽，获取连接超时",
    "JVM full GC pause makes the API time out",
    "disk full, no space left on device",
    "证书过期导致 HTTPS 握手失败",
]
VOCAB = 20_000
DOC_LEN = 40
RANK_BM25_UP_TO = 100_000


def make_corpus(n: int, rng: np.random.Generator) -> tuple[list[str], list[list[str]]]:
    vocab = [f"w{i}" for i in range(VOCAB)]
    ranks = np.arange(1, VOCAB + 1)
    p = 1.0 / ranks**1.07
    p /= p.sum()
    ids = rng.choice(VOCAB, size=(n, DOC_LEN), p=p)
    return vocab, [[vocab[i] for i in row] for row in ids]


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs), q))


def fmt(xs: list[float]) -> str:
    return f"p50 {pct(xs, 50):8.2f} ms  p95 {pct(xs, 95):8.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=50)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    _, sample = make_corpus(500, rng)
    t0 = time.perf_counter()
    encode([" ".join(d) for d in sample])
    dt = time.perf_counter() - t0
    print(
        f"model throughput: 500 synthetic chunks of {DOC_LEN} words embedded in {dt:.1f} s ({500 / dt:.0f}/s)"
    )
    for n in (int(s) for s in args.sizes.split(",")):
        print(f"\n== {n:,} chunks ==", flush=True)
        t0 = time.perf_counter()
        vocab, docs = make_corpus(n, rng)
        print(f"corpus generated in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        kw = KeywordIndex(docs)
        print(f"keyword index (bm25s + feedback stats) built in {time.perf_counter() - t0:.1f} s")
        queries = [
            [vocab[int(i)] for i in rng.integers(50, 5000, size=rng.integers(2, 7))]
            for _ in range(args.queries)
        ]
        t0 = time.perf_counter()
        vecs = rng.standard_normal((n, DIM), dtype=np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        note = "random unit vectors, dim 512; query encoded by the real model"
        dense = DenseIndex(vecs)
        print(f"dense vectors ({note}) ready in {time.perf_counter() - t0:.1f} s")
        kw_ms, kw_nofb_ms, de_ms, hy_ms = [], [], [], []
        encode(["warm up the encoder"])
        for qi, q in enumerate(queries):
            t = time.perf_counter()
            kw.search(q, feedback=False)
            kw_nofb_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            h = kw.search(q)
            k_ids = top_k(h.scores, 100)
            kw_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            qv = encode([QUERY_TEXTS[qi % len(QUERY_TEXTS)]])[0]
            d_ids = top_k(dense.scores(qv), 100)
            de_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            h = kw.search(q)
            k2 = top_k(h.scores, 100)
            d2 = top_k(dense.scores(encode([QUERY_TEXTS[qi % len(QUERY_TEXTS)]])[0]), 100)
            fused = rrf_fuse({"k": k2.tolist(), "d": d2.tolist()})
            sorted(fused.items(), key=lambda kv: -kv[1])[:10]
            hy_ms.append((time.perf_counter() - t) * 1000)
            del k_ids, d_ids
        print(f"keyword (BM25, no feedback)    {fmt(kw_nofb_ms)}")
        print(f"keyword (BM25 + Bo1, as used)  {fmt(kw_ms)}")
        print(f"dense (encode + exact numpy)   {fmt(de_ms)}")
        print(f"hybrid (both + RRF)            {fmt(hy_ms)}")
        if n <= RANK_BM25_UP_TO:
            from rank_bm25 import BM25Okapi

            t0 = time.perf_counter()
            okapi = BM25Okapi(docs, k1=1.2, b=0.75)
            print(f"rank-bm25 BM25Okapi index built in {time.perf_counter() - t0:.1f} s")
            rb_ms = []
            for q in queries[: max(10, args.queries // 5)]:
                t = time.perf_counter()
                s = okapi.get_scores(q)
                np.argsort(-s)[:100]
                rb_ms.append((time.perf_counter() - t) * 1000)
            print(f"rank-bm25 BM25Okapi            {fmt(rb_ms)}")
            print(
                f"ratio rank-bm25 / ours (p50): {statistics.median(rb_ms) / statistics.median(kw_nofb_ms):.0f}x "
                f"vs BM25 without feedback, {statistics.median(rb_ms) / statistics.median(kw_ms):.0f}x vs BM25 + Bo1"
            )
        else:
            print(
                "rank-bm25: skipped at this size (pure Python, minutes per query batch); measured at 10k and 100k"
            )
        del kw, dense, vecs, docs


if __name__ == "__main__":
    main()
