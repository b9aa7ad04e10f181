"""Calibrated grade thresholds of the knowledge base (written by `rootproof eval retrieval --save-thresholds`).

Each channel's own score is graded: `bm25` is the keyword score divided by the query's score
bound (sum of query-term weight x idf), in [0, 1); `dense` is the cosine similarity. A result
is kept when at least one channel reaches its REFERENCE floor; its grade is the best grade any
channel gives (an L0 identifier hint raises a kept result by one grade).
"""

from __future__ import annotations

from typing import Any

THRESHOLDS: dict[str, Any] = {
    "version": 1,
    "derivation": "calibrated 2026-11-30 on the calibration split (38 queries: 33 answerable, 5 ood) over 33 cards; floor halfway between the highest ood score and the 10th percentile of relevant-card scores (>= ood max + 0.02), HIGHLY_RELEVANT = median, PRECISE = 75th percentile of relevant-card scores",
    "channels": {
        "bm25": {"PRECISE": 0.679, "HIGHLY_RELEVANT": 0.5996, "REFERENCE": 0.4306},
        "dense": {"PRECISE": 0.5628, "HIGHLY_RELEVANT": 0.4335, "REFERENCE": 0.2199},
    },
}
