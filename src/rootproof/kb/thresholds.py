"""Calibrated grade thresholds of the knowledge base (written by `rootproof eval retrieval --save-thresholds`).

Each channel's own score is graded: `bm25` is the keyword score divided by the query's score
bound (sum of query-term weight x idf), in [0, 1); `dense` is the cosine similarity. A result
is kept when at least one channel reaches its REFERENCE floor; its grade is the best grade any
channel gives (an L0 identifier hint raises a kept result by one grade).
"""

from __future__ import annotations

from typing import Any

THRESHOLDS: dict[str, Any] = {
    "version": 0,
    "derivation": "placeholder before calibration on labelled queries",
    "channels": {
        "bm25": {"PRECISE": 0.5, "HIGHLY_RELEVANT": 0.35, "REFERENCE": 0.2},
        "dense": {"PRECISE": 0.6, "HIGHLY_RELEVANT": 0.45, "REFERENCE": 0.35},
    },
}
