"""Calibrated grade thresholds of the knowledge base (written by `rootproof eval retrieval --save-thresholds`).

Each channel's own score is graded: `bm25` is the keyword score divided by the query's score
bound (sum of query-term weight x idf), in [0, 1); `dense` is the cosine similarity. A result
is kept when at least one channel reaches its REFERENCE floor; its grade is the best grade any
channel gives (an L0 identifier hint raises a kept result by one grade). `fusion` holds the
per-channel weights of the reciprocal rank fusion that orders the kept results.
"""

from __future__ import annotations

from typing import Any

THRESHOLDS: dict[str, Any] = {
    "version": 4,
    "derivation": "calibrated 2026-12-02 on the calibration split (38 queries: 33 answerable, 5 ood) over 39 cards; floor halfway between the highest ood score and the 10th percentile of relevant-card scores (>= ood max + 0.02), HIGHLY_RELEVANT = median, PRECISE = 75th percentile of relevant-card scores; keyword RRF weight from [0.5, 0.75, 1.0, 1.5, 2.0] by calibration mrr (ties to 1.0)",
    "channels": {
        "bm25": {"PRECISE": 0.6904, "HIGHLY_RELEVANT": 0.5998, "REFERENCE": 0.3801},
        "dense": {"PRECISE": 0.5591, "HIGHLY_RELEVANT": 0.4342, "REFERENCE": 0.2267},
    },
    "fusion": {"bm25": 1.0, "dense": 1.0},
}
