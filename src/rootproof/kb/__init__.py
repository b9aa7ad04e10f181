"""The knowledge base: cards, hybrid retrieval (L0 identifiers + BM25 + dense, RRF) and `lookup_knowledge`."""

from __future__ import annotations

from rootproof.kb.backend import KnowledgeBackend
from rootproof.kb.cards import Card, Hypothesis, Signal, load_cards, parse_card
from rootproof.kb.index import KnowledgeBase, SearchHit, SearchResponse
from rootproof.kb.tracker import RetrievedDocTracker

__all__ = [
    "Card",
    "Hypothesis",
    "KnowledgeBackend",
    "KnowledgeBase",
    "RetrievedDocTracker",
    "SearchHit",
    "SearchResponse",
    "Signal",
    "load_cards",
    "parse_card",
]
