"""The knowledge base: chunking, the L0 identifier index, hybrid L1 retrieval, grading, cache.

- Chunks: a card's body split at `##` headings (long sections split further at blank lines);
  a chunk's `text` is its Markdown, and what is indexed carries the card title and tags (and,
  for the keyword channel, identifiers) so every chunk has its own context: tags carry a
  card's keywords in both languages and common synonyms, which cross-language and paraphrased
  queries need.
- L0: identifiers (case-insensitive, NFKC, not glued to letters or digits) found in the query.
  They only hint: a hinted card that L1 also keeps is raised one grade and gets an extra
  fusion term; L0 never brings in a card that L1 did not keep.
- L1: `KeywordIndex` and dense cosine per chunk (the dense channel skips contrast sections,
  `CONTRAST_HEADINGS`); a card's channel score is its best chunk's;
  the card order is weighted reciprocal rank fusion (k = 60; per-channel weights calibrated
  with the thresholds) of the channel rankings, each restricted to the cards that channel
  scores above its own floor; grades come from the
  channels' own scores against calibrated thresholds (`thresholds.py`); below every floor → no
  result. One result per card (the chunk with the best fused chunk rank).
- Reranker: a seam (`Reranker`), off by default.
- Cache: one folder per card, `cache_dir/<hash of the card + code version>/`, with its chunks'
  tokens and embeddings: a changed or added card is the only one encoded again, and several
  card sets (the built-in cards with or without a user's folder) share one cache folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from hashlib import sha256
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from rootproof.kb.cards import Card, load_cards
from rootproof.kb.channels import EMBEDDING_MODEL, RRF_K, DenseIndex, FloatArray, KeywordIndex, encode
from rootproof.kb.text import TOKENIZER_VERSION, contains_identifier, normalize, tokenize
from rootproof.kb.thresholds import THRESHOLDS
from rootproof.limits import CARD_BYTES

__all__ = [
    "CHANNELS",
    "GRADES",
    "INDEX_VERSION",
    "CardScores",
    "Chunk",
    "Grade",
    "KnowledgeBase",
    "Reranker",
    "SearchHit",
    "SearchResponse",
    "Thresholds",
    "chunk_card",
]

INDEX_VERSION = "kb-index-8"
"""Bumped whenever chunking or indexing changes (part of the cache key)."""
CHANNELS = ("bm25", "dense")
"""The L1 channels."""
Grade = Literal["PRECISE", "HIGHLY_RELEVANT", "REFERENCE"]
GRADES: tuple[Grade, ...] = ("PRECISE", "HIGHLY_RELEVANT", "REFERENCE")
"""Grades, best first."""
_MAX_CHUNK = 900
"""UTF-8 bytes per chunk: three results must fit in one 4 KiB model observation."""
_HEADING = re.compile(r"^##(?!#)\s*(.*)$", re.M)
CONTRAST_HEADINGS = ("how to tell it apart", "when not to act", "如何区分", "何时不要操作")
"""Section headings (case-insensitive prefixes) whose text is about other mechanisms than the
card's: what it is not ("How to tell it apart") and when nothing is wrong ("When not to act").
The keyword channel indexes them (their error codes and names are exact evidence); the dense
channel does not match a card by them, since their meaning is another card's (a card with
only contrast sections is matched by all of them)."""


@dataclass(frozen=True, kw_only=True)
class Chunk:
    """A retrievable part of a card."""

    chunk_id: str
    """`{card_id}#{n}`, n from 1 in card order."""
    card_id: str
    title: str
    text: str
    """The chunk's Markdown (what a result shows and cites)."""
    tags: tuple[str, ...] = ()
    """The card's tags (both languages and synonyms): context for the dense channel."""
    contrast: bool = False
    """Part of a contrast section (`CONTRAST_HEADINGS`): it describes other mechanisms."""

    def dense_text(self) -> str:
        """What is embedded: the title, the card's tags, then the chunk."""
        if self.tags:
            return f"{self.title}\n{', '.join(self.tags)}\n{self.text}"
        return f"{self.title}\n{self.text}"


def _size(text: str) -> int:
    return len(text.encode())


def _pieces(text: str) -> list[str]:
    """Paragraphs; a paragraph over the limit is cut at line breaks, then after sentences."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        if _size(para) <= _MAX_CHUNK:
            out.append(para)
            continue
        for line in para.split("\n"):
            if _size(line) <= _MAX_CHUNK:
                out.append(line)
                continue
            out.extend(p for p in re.split(r"(?<=[.;!?。；！？])\s*", line) if p)
    return out


def _split_long(text: str) -> list[str]:
    """Split a section into chunks of at most `_MAX_CHUNK` UTF-8 bytes where the text allows."""
    if _size(text) <= _MAX_CHUNK:
        return [text]
    parts: list[str] = []
    cur = ""
    for piece in _pieces(text):
        if cur and _size(cur) + _size(piece) + 2 > _MAX_CHUNK:
            parts.append(cur)
            cur = piece
        else:
            cur = f"{cur}\n\n{piece}" if cur else piece
    if cur:
        parts.append(cur)
    return parts


def chunk_card(card: Card) -> list[Chunk]:
    """Split a card's body into chunks at `##` headings (the part before the first is chunk 1)."""
    body = card.body
    starts = [m.start() for m in _HEADING.finditer(body)]
    bounds = [0, *starts, len(body)]
    sections = [body[a:b].strip() for a, b in zip(bounds, bounds[1:], strict=False)]
    texts: list[tuple[str, bool]] = []
    for sec in sections:
        # A leading "# Title" line alone carries nothing the title does not.
        if not sec or re.fullmatch(r"#\s*[^\n]*", sec):
            continue
        head = _HEADING.match(sec)
        contrast = head is not None and normalize(head.group(1)).strip().startswith(CONTRAST_HEADINGS)
        texts.extend((piece, contrast) for piece in _split_long(sec))
    if not texts:
        texts = [(body.strip() or card.title, False)]
    if all(c for _, c in texts):
        texts = [(t, False) for t, _ in texts]
    return [
        Chunk(
            chunk_id=f"{card.id}#{i}",
            card_id=card.id,
            title=card.title,
            text=t,
            tags=tuple(card.tags),
            contrast=c,
        )
        for i, (t, c) in enumerate(texts, start=1)
    ]


def _keyword_text(card: Card, chunk: Chunk) -> str:
    return "\n".join([card.title, " ".join(card.tags), " ".join(card.identifiers), chunk.text])


@dataclass(frozen=True, kw_only=True)
class ChannelThresholds:
    """Score thresholds of one channel, best grade first."""

    precise: float
    highly_relevant: float
    reference: float

    def grade(self, score: float | None) -> Grade | None:
        """The grade this score earns, or None below the floor."""
        if score is None:
            return None
        if score >= self.precise:
            return "PRECISE"
        if score >= self.highly_relevant:
            return "HIGHLY_RELEVANT"
        if score >= self.reference:
            return "REFERENCE"
        return None

    def as_dict(self) -> dict[str, float]:
        """JSON form."""
        return {"PRECISE": self.precise, "HIGHLY_RELEVANT": self.highly_relevant, "REFERENCE": self.reference}


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """Grade thresholds per channel, with how they were derived."""

    channels: dict[str, ChannelThresholds]
    fusion: dict[str, float] = field(default_factory=dict)
    """Per-channel RRF weight (a channel not named weighs 1.0)."""
    version: int = 0
    derivation: str = ""

    def weight(self, channel: str) -> float:
        """The RRF weight of `channel`."""
        return self.fusion.get(channel, 1.0)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Thresholds:
        """Read the `thresholds.py` / JSON form."""
        return cls(
            channels={
                name: ChannelThresholds(
                    precise=float(v["PRECISE"]),
                    highly_relevant=float(v["HIGHLY_RELEVANT"]),
                    reference=float(v["REFERENCE"]),
                )
                for name, v in data["channels"].items()
            },
            fusion={str(k): float(v) for k, v in data.get("fusion", {}).items()},
            version=int(data.get("version", 0)),
            derivation=str(data.get("derivation", "")),
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "version": self.version,
            "derivation": self.derivation,
            "channels": {k: v.as_dict() for k, v in self.channels.items()},
            "fusion": dict(self.fusion),
        }


class Reranker(Protocol):
    """Optional second stage: reorder the kept hits (off by default)."""

    def rerank(self, query: str, hits: list[SearchHit]) -> list[SearchHit]:
        """Return `hits` in a new order (same items)."""
        ...


@dataclass(kw_only=True)
class SearchHit:
    """One card found for a query (document level: its best chunk)."""

    card_id: str
    title: str
    chunk_id: str
    grade: Grade
    text: str
    score: float
    """The fused (RRF) score that orders the results."""
    channels: dict[str, dict[str, Any]]
    """Per channel: `{"rank": int | None, "score": float | None}` (card level; `l0` when hinted)."""


@dataclass(kw_only=True)
class SearchResponse:
    """What a search found and how."""

    hits: list[SearchHit]
    layer: str
    """`L0+L1` when identifiers hinted, else `L1`."""
    l0_match_count: int
    """Identifiers of the query found in the L0 index."""
    l1_match_count: int
    """Cards L1 kept above the floor (before `top_k` and exclusions)."""
    l0_hint_cards: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class CardScores:
    """Raw per-card channel scores and ranks for one query (calibration and evaluation)."""

    scores: dict[str, dict[str, float]]
    """channel → card id → score (best chunk)."""
    ranks: dict[str, dict[str, int]]
    """channel → card id → rank from 1 (cards with a positive keyword score; every card for dense)."""
    best_chunk: dict[str, dict[str, int]]
    """channel → card id → index of its best chunk."""
    chunk_scores: dict[str, FloatArray]
    """channel → score per chunk."""


QUERY_VECTORS_KEPT = 4096
"""Query embeddings kept on disk per index cache folder (2 KiB each); past that none is added."""
_VECTOR_DIM = 512
_VECTOR_BYTES = _VECTOR_DIM * 4


def _query_folder(cache_dir: Path) -> Path:
    return cache_dir / ("queries-" + sha256(EMBEDDING_MODEL.encode()).hexdigest()[:12])


@lru_cache(maxsize=512)
def _query_vector(query: str, folder: Path | None = None) -> FloatArray:
    """The query's embedding: remembered in the process, and in `folder` (the index cache's) across
    processes, so a process whose queries were all seen before never loads the sentence encoder
    (about a second of CPU). A file is named by the SHA-256 of the query, never by its text, and
    holds the 512 little-endian float32 values alone (`np.load` would parse a header with `ast`,
    which CPython 3.11 does not allow in two threads at once)."""
    path = folder / (sha256(query.encode("utf-8", "surrogatepass")).hexdigest() + ".f32") if folder is not None else None
    if path is not None:
        try:
            raw = path.read_bytes()
        except OSError:
            raw = b""
        if len(raw) == _VECTOR_BYTES:
            kept = np.frombuffer(raw, dtype="<f4").astype(np.float32)
            if bool(np.isfinite(kept).all()):
                return kept
    vec: FloatArray = np.asarray(encode([query])[0], dtype=np.float32)
    if folder is not None and path is not None and vec.shape == (_VECTOR_DIM,):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if sum(1 for _ in zip(os.scandir(folder), range(QUERY_VECTORS_KEPT), strict=False)) < QUERY_VECTORS_KEPT:
                fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
                try:
                    with os.fdopen(fd, "wb") as fh:
                        fh.write(vec.astype("<f4").tobytes())
                    os.replace(tmp, path)
                except OSError:
                    Path(tmp).unlink(missing_ok=True)
                    raise
        except OSError:
            pass  # a failure only costs the cache
    return vec


def _card_key(card: Card) -> str:
    h = sha256()
    h.update(f"{INDEX_VERSION}|{TOKENIZER_VERSION}|{EMBEDDING_MODEL}".encode())
    dump = card.model_dump(mode="json", exclude={"path"})
    h.update(json.dumps(dump, sort_keys=True, ensure_ascii=False).encode())
    return h.hexdigest()[:32]


class KnowledgeBase:
    """Cards, their chunks and both L1 channels, ready to search."""

    def __init__(
        self,
        cards: dict[str, Card],
        chunks: list[Chunk],
        chunk_tokens: list[list[str]],
        embeddings: FloatArray,
        *,
        thresholds: Thresholds | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        """Assemble from parts; use `KnowledgeBase.load` instead."""
        self.cards = cards
        self.chunks = chunks
        self.thresholds = thresholds or Thresholds.from_dict(THRESHOLDS)
        self.reranker = reranker
        self.cache_hit = False
        """True when `load` read every card's index from the cache (encoded nothing)."""
        self.cards_encoded = 0
        """Cards whose chunks `load` encoded (not found in the cache)."""
        self.load_seconds = 0.0
        self.query_folder: Path | None = None
        """Where query embeddings are kept across processes (`load`'s cache folder), if anywhere."""
        self._keyword = KeywordIndex(chunk_tokens)
        self._dense = DenseIndex(embeddings)
        self._card_ids = sorted({c.card_id for c in chunks})
        self._card_pos = {cid: i for i, cid in enumerate(self._card_ids)}
        self._chunk_card = np.array([self._card_pos[c.card_id] for c in chunks], dtype=np.int64)
        self._contrast = np.array([c.contrast for c in chunks], dtype=bool)
        self._identifiers: list[tuple[str, str]] = sorted(
            {(normalize(i).strip(), c.id) for c in cards.values() for i in c.identifiers if i.strip()}
        )

    @classmethod
    def load(
        cls,
        extra_dirs: Sequence[Path] = (),
        *,
        cache_dir: Path | None = None,
        progress: Callable[[int, int], None] | None = None,
        builtin: bool = True,
        max_card_bytes: int = CARD_BYTES,
    ) -> KnowledgeBase:
        """Load the built-in cards and `extra_dirs`, reading or building the index.

        `cache_dir` is the index cache folder (the CLI uses `settings.resolved_kb_index_dir()`);
        None builds in memory. `progress(done, total)` reports embedding progress.
        """
        t0 = time.perf_counter()
        cards = load_cards(extra_dirs, builtin=builtin, max_bytes=max_card_bytes)
        per_card = {cid: chunk_card(cards[cid]) for cid in sorted(cards)}
        chunks = [ch for cid in sorted(cards) for ch in per_card[cid]]
        tokens: dict[str, list[list[str]]] = {}
        vectors: dict[str, FloatArray] = {}
        missing: list[str] = []
        for cid, card_chunks in per_card.items():
            cached = _read_cache(cache_dir / _card_key(cards[cid]), card_chunks) if cache_dir is not None else None
            if cached is None:
                missing.append(cid)
            else:
                tokens[cid], vectors[cid] = cached
        fresh = [ch for cid in missing for ch in per_card[cid]]
        if fresh:
            emb = encode([ch.dense_text() for ch in fresh], progress=progress)
            start = 0
            for cid in missing:
                n = len(per_card[cid])
                tokens[cid] = [tokenize(_keyword_text(cards[cid], ch)) for ch in per_card[cid]]
                vectors[cid] = emb[start : start + n]
                start += n
                if cache_dir is not None:
                    _write_cache(cache_dir, _card_key(cards[cid]), per_card[cid], tokens[cid], vectors[cid])
        all_tokens = [t for cid in per_card for t in tokens[cid]]
        parts = [vectors[cid] for cid in per_card if len(per_card[cid])]
        embeddings = np.vstack(parts) if parts else np.zeros((0, _VECTOR_DIM), dtype=np.float32)
        kb = cls(cards, chunks, all_tokens, embeddings)
        kb.query_folder = _query_folder(cache_dir) if cache_dir is not None else None
        kb.cache_hit = not missing
        kb.cards_encoded = len(missing)
        if kb.cache_hit and progress is not None:
            progress(len(chunks), len(chunks))
        kb.load_seconds = time.perf_counter() - t0
        return kb

    def identifier_hints(self, query: str) -> tuple[list[str], int]:
        """L0: cards whose identifiers occur in the query (most matched first) and the match count."""
        q = normalize(query)
        per_card: dict[str, int] = {}
        count = 0
        for ident, cid in self._identifiers:
            if contains_identifier(q, ident):
                per_card[cid] = per_card.get(cid, 0) + len(ident)
                count += 1
        return sorted(per_card, key=lambda c: (-per_card[c], c)), count

    def identifiers_in(self, text: str) -> list[str]:
        """The L0 identifiers (normalised, longest first) that occur in `text`: what of a text the
        identifier index would recognise if it were a lookup's query."""
        t = normalize(text)
        found = {ident for ident, _ in self._identifiers if contains_identifier(t, ident)}
        return sorted(found, key=lambda i: (-len(i), i))

    def card_scores(self, query: str, channels: Sequence[str] = CHANNELS) -> CardScores:
        """Every card's best-chunk score and rank in each channel (no floors)."""
        out = CardScores(scores={}, ranks={}, best_chunk={}, chunk_scores={})
        for ch in channels:
            if ch == "bm25":
                hits = self._keyword.search(tokenize(query))
                per_chunk = (hits.scores / hits.bound).astype(np.float32)
                positive_only = True
            elif ch == "dense":
                per_chunk = self._dense.scores(_query_vector(query, self.query_folder))
                per_chunk[self._contrast] = -1.0
                positive_only = False
            else:
                raise ValueError(f"unknown channel {ch!r} (expected bm25 or dense)")
            best: dict[str, int] = {}
            for i, cpos in enumerate(self._chunk_card):
                cid = self._card_ids[int(cpos)]
                j = best.get(cid)
                if j is None or per_chunk[i] > per_chunk[j]:
                    best[cid] = i
            scores = {cid: float(per_chunk[i]) for cid, i in best.items()}
            order = sorted(
                (c for c in scores if not positive_only or scores[c] > 0), key=lambda c: (-scores[c], c)
            )
            out.scores[ch] = scores
            out.ranks[ch] = {c: r for r, c in enumerate(order, start=1)}
            out.best_chunk[ch] = best
            out.chunk_scores[ch] = per_chunk
        return out

    def _best_chunk(self, card_id: str, cs: CardScores) -> Chunk:
        idx = [i for i, c in enumerate(self.chunks) if c.card_id == card_id]
        fused = dict.fromkeys(idx, 0.0)
        for arr in cs.chunk_scores.values():
            order = sorted(idx, key=lambda i: (-float(arr[i]), i))
            for r, i in enumerate(order, start=1):
                fused[i] += 1.0 / (RRF_K + r)
        return self.chunks[max(idx, key=lambda i: (fused[i], -i))]

    def search(
        self,
        query: str,
        top_k: int = 5,
        *,
        channels: Sequence[str] = CHANNELS,
        exclude_cards: Collection[str] = (),
    ) -> SearchResponse:
        """Hybrid search: L0 hints, L1 channels fused by RRF, graded, one hit per card."""
        hints, l0_count = self.identifier_hints(query)
        cs = self.card_scores(query, channels)
        kept: dict[str, Grade] = {}
        for cid in self._card_ids:
            best: Grade | None = None
            for ch in channels:
                g = self.thresholds.channels[ch].grade(cs.scores[ch].get(cid))
                if g is not None and (best is None or GRADES.index(g) < GRADES.index(best)):
                    best = g
            if best is not None:
                if cid in hints:
                    best = GRADES[max(0, GRADES.index(best) - 1)]
                kept[cid] = best
        # A channel votes only for the cards it scores above its own floor: below it, its
        # ranks are noise (e.g. keyword overlap of generic words across languages).
        fused: dict[str, float] = {}
        for ch in channels:
            floor = self.thresholds.channels[ch].reference
            weight = self.thresholds.weight(ch)
            voted = [
                c for c, _ in sorted(cs.ranks[ch].items(), key=lambda kv: kv[1]) if cs.scores[ch][c] >= floor
            ]
            for r, cid in enumerate(voted, start=1):
                fused[cid] = fused.get(cid, 0.0) + weight / (RRF_K + r)
        for r, cid in enumerate(hints, start=1):
            if cid in fused:
                fused[cid] += 1.0 / (RRF_K + r)
        ordered = sorted(kept, key=lambda c: (-fused.get(c, 0.0), c))
        l1_count = len(ordered)
        ordered = [c for c in ordered if c not in exclude_cards][:top_k]
        hits: list[SearchHit] = []
        for cid in ordered:
            chunk = self._best_chunk(cid, cs)
            chans: dict[str, dict[str, Any]] = {
                ch: {"rank": cs.ranks[ch].get(cid), "score": round(cs.scores[ch][cid], 4)} for ch in channels
            }
            if cid in hints:
                chans["l0"] = {"rank": hints.index(cid) + 1, "score": None}
            hits.append(
                SearchHit(
                    card_id=cid,
                    title=self.cards[cid].title,
                    chunk_id=chunk.chunk_id,
                    grade=kept[cid],
                    text=chunk.text,
                    score=round(fused.get(cid, 0.0), 6),
                    channels=chans,
                )
            )
        if self.reranker is not None and hits:
            hits = self.reranker.rerank(query, hits)
        return SearchResponse(
            hits=hits,
            layer="L0+L1" if hints else "L1",
            l0_match_count=l0_count,
            l1_match_count=l1_count,
            l0_hint_cards=hints,
        )


def _read_cache(folder: Path, chunks: list[Chunk]) -> tuple[list[list[str]], FloatArray] | None:
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        raw = (folder / "embeddings.f32").read_bytes()
    except (OSError, ValueError):
        return None
    # The rows alone, little-endian float32 (no `np.load`: see `_query_vector`).
    if not isinstance(meta, dict) or meta.get("chunk_ids") != [c.chunk_id for c in chunks] or len(raw) != len(chunks) * _VECTOR_BYTES:
        return None
    emb = np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(len(chunks), _VECTOR_DIM)
    if not bool(np.isfinite(emb).all()):
        return None
    return [list(t) for t in meta["tokens"]], emb


def _write_cache(
    cache_dir: Path, key: str, chunks: list[Chunk], tokens: list[list[str]], emb: FloatArray
) -> None:
    """Write atomically (a temp folder renamed into place); a failure only costs the cache."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache_dir))
        (tmp / "meta.json").write_text(
            json.dumps(
                {"key": key, "chunk_ids": [c.chunk_id for c in chunks], "tokens": tokens}, ensure_ascii=False
            ),
            encoding="utf-8",
        )
        (tmp / "embeddings.f32").write_bytes(np.asarray(emb, dtype="<f4").tobytes())
        target = cache_dir / key
        try:
            os.replace(tmp, target)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)  # another process wrote the same key first
    except OSError:
        return
