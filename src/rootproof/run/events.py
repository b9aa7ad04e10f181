"""The public event stream of a run: one ordered sequence, the same for the CLI and SSE.

Types: metadata → status → tool* → content (once) → done (once, last); `error` only when not
even a fallback could be built. Guard violations, reasoning and raw tool payloads never appear.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from rootproof.errors import StoreError
from rootproof.run.records import EventRecord, TraceSink

__all__ = ["EventStream"]

Listener = Callable[[EventRecord], None]


class EventStream:
    """Numbers events per run, persists them through the sink and fans them out to listeners."""

    def __init__(self, run_id: str, sink: TraceSink | None = None, listeners: list[Listener] | None = None) -> None:
        self.run_id = run_id
        self._sink = sink
        self._listeners = list(listeners or [])
        self._lock = threading.Lock()
        self._seq = 0
        self.events: list[EventRecord] = []

    def subscribe(self, listener: Listener) -> None:
        """Add a listener (CLI status printer, SSE queue)."""
        self._listeners.append(listener)

    def emit(self, type_: str, data: dict[str, Any]) -> EventRecord:
        """Append one event: persisted first (a failed write is tried again twice; if it still
        fails the sequence number is not used up, so the log never has a gap), then heard."""
        with self._lock:
            record = EventRecord(run_id=self.run_id, seq=self._seq + 1, type=type_, data=data)
            if self._sink is not None:
                self._persist(record)
            self._seq = record.seq
            self.events.append(record)
        for listener in self._listeners:
            listener(record)
        return record

    def _persist(self, record: EventRecord) -> None:
        assert self._sink is not None
        for delay in (0.2, 1.0, None):
            try:
                self._sink.add_event(record)
                return
            except StoreError:
                if delay is None:
                    raise
                time.sleep(delay)

    def types(self) -> list[str]:
        """Event types in order (tests, the seed story)."""
        return [e.type for e in self.events]
