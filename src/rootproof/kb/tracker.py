"""RetrievedDocTracker: cards already returned in a run are not returned again in that run."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

__all__ = ["RetrievedDocTracker"]


class RetrievedDocTracker:
    """Per run id, the knowledge cards already returned (thread-safe, bounded to recent runs).

    A run is one model conversation: each new run starts fresh and may get the same cards
    again (so it can cite them); only repeats within one run are de-duplicated.
    """

    def __init__(self, max_runs: int = 4096) -> None:
        """Remember at most `max_runs` runs (the least recently used are forgotten)."""
        self._max_runs = max_runs
        self._runs: OrderedDict[str, set[str]] = OrderedDict()
        self._lock = threading.Lock()

    def seen(self, run_id: str) -> frozenset[str]:
        """Card ids already returned in this run."""
        with self._lock:
            cards = self._runs.get(run_id)
            if cards is None:
                return frozenset()
            self._runs.move_to_end(run_id)
            return frozenset(cards)

    def record(self, run_id: str, card_ids: Iterable[str]) -> None:
        """Remember that these cards were returned in this run."""
        with self._lock:
            cards = self._runs.setdefault(run_id, set())
            cards.update(card_ids)
            self._runs.move_to_end(run_id)
            while len(self._runs) > self._max_runs:
                self._runs.popitem(last=False)

    def forget(self, run_id: str) -> None:
        """Drop a finished run."""
        with self._lock:
            self._runs.pop(run_id, None)
