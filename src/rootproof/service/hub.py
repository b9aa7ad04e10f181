"""The runs this replica executes, and the event streams of any run.

A `LocalRun` is a run executing in this process: its cancellation, its events as they happen,
and the asyncio queues of the streams that follow it. Every event is persisted in `run_event`
before a listener hears it, so the log is always at least as far as any stream: a stream of a
run this replica does not execute (another replica's, or a finished one) reads the log, and a
resumed stream (`Last-Event-ID`) starts after the sequence number it names, on any replica.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from rootproof.run.context import RunCancellation
from rootproof.run.records import EventRecord
from rootproof.store.sql import SqlTraceStore

__all__ = ["Heartbeat", "LocalRun", "RunHub", "follow_events", "state_from_events"]

_PHASE_STATE = {"ROUTING": "ROUTING", "DIAGNOSIS_RUNNING": "RUNNING", "KNOWLEDGE_LOOKUP": "RUNNING", "SAFETY_VALIDATING": "VALIDATING"}


def state_from_events(types_and_phases: list[tuple[str, str | None]]) -> str:
    """The lifecycle state a non-terminal run has reached, read from its public events."""
    state = "CREATED"
    for type_, phase in types_and_phases:
        if type_ == "status" and phase in _PHASE_STATE:
            state = _PHASE_STATE[phase]
        elif type_ in ("content", "error"):
            state = "RELEASING"
    return state


@dataclass(eq=False)
class LocalRun:
    """A run executing in this replica."""

    run_id: str
    cancellation: RunCancellation = field(default_factory=RunCancellation)
    events: list[EventRecord] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)
    _subscribers: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[EventRecord | None]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def listener(self, record: EventRecord) -> None:
        """The run's event listener (called on the run's thread, after the event was persisted)."""
        with self._lock:
            self.events.append(record)
            subscribers = list(self._subscribers)
        for loop, queue in subscribers:
            loop.call_soon_threadsafe(queue.put_nowait, record)

    def finish(self) -> None:
        """The run returned: wake every stream (a `None` ends a stream that saw no `done`)."""
        with self._lock:
            self.finished.set()
            subscribers = list(self._subscribers)
        for loop, queue in subscribers:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    def subscribe(self) -> tuple[list[EventRecord], asyncio.Queue[EventRecord | None]]:
        """The events so far and a queue of the ones to come (no gap, no repeat between them)."""
        queue: asyncio.Queue[EventRecord | None] = asyncio.Queue()
        with self._lock:
            self._subscribers.append((asyncio.get_running_loop(), queue))
            backlog = list(self.events)
            if self.finished.is_set():
                queue.put_nowait(None)
        return backlog, queue

    def unsubscribe(self, queue: asyncio.Queue[EventRecord | None]) -> None:
        """Stop delivering to `queue`."""
        with self._lock:
            self._subscribers = [(lp, q) for lp, q in self._subscribers if q is not queue]

    @property
    def state(self) -> str:
        """The lifecycle state reached, from the events so far."""
        with self._lock:
            return state_from_events([(e.type, e.data.get("phase")) for e in self.events])


class RunHub:
    """The local runs by id (thread-safe)."""

    def __init__(self) -> None:
        self._runs: dict[str, LocalRun] = {}
        self._lock = threading.Lock()

    def add(self, run: LocalRun) -> LocalRun:
        """Register a run this replica is about to execute."""
        with self._lock:
            self._runs[run.run_id] = run
        return run

    def get(self, run_id: str) -> LocalRun | None:
        """The local run, or None."""
        with self._lock:
            return self._runs.get(run_id)

    def remove(self, run_id: str) -> None:
        """Forget a finished run (its log stays in the store)."""
        with self._lock:
            self._runs.pop(run_id, None)

    def ids(self) -> list[str]:
        """Ids of the runs executing here."""
        with self._lock:
            return list(self._runs)

    def cancel(self, run_id: str, reason: str) -> bool:
        """Cancel a local run; False when it does not execute here."""
        run = self.get(run_id)
        if run is None:
            return False
        run.cancellation.cancel(reason)
        return True

    def cancel_all(self, reason: str) -> list[LocalRun]:
        """Cancel every local run (shutdown); returns them."""
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.cancellation.cancel(reason)
        return runs


@dataclass(frozen=True)
class Heartbeat:
    """An idle stream's keep-alive (an SSE comment line)."""


async def follow_events(
    hub: RunHub, store: SqlTraceStore, run_id: str, after_seq: int = 0, *, heartbeat_s: float = 15.0, poll_s: float = 0.25
) -> AsyncIterator[EventRecord | Heartbeat]:
    """The events of `run_id` with `seq > after_seq`, up to and including `done` (or `error`
    when it is last), each once and in order; a `Heartbeat` after `heartbeat_s` idle seconds.

    A run executing here is followed from its queue; any other from the log, polled every
    `poll_s` seconds until its `done` (or until the store shows it terminal with no `done`:
    an orphan the sweep closed).
    """
    last = after_seq
    local = hub.get(run_id)
    if local is not None:
        backlog, queue = local.subscribe()
        try:
            for record in backlog:
                if record.seq > last:
                    last = record.seq
                    yield record
                    if record.type == "done":
                        return
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), timeout=heartbeat_s)
                except TimeoutError:
                    yield Heartbeat()
                    continue
                if item is None:
                    break  # the run returned; anything not delivered is in the log
                if item.seq <= last:
                    continue
                last = item.seq
                yield item
                if item.type == "done":
                    return
        finally:
            local.unsubscribe(queue)
    idle = 0.0
    while True:
        records = await asyncio.to_thread(store.events, run_id, last)
        for record in records:
            last = record.seq
            idle = 0.0
            yield record
            if record.type == "done":
                return
        if not records:
            run = await asyncio.to_thread(store.get_run, run_id)
            if run is None or run.status is not None:
                # Terminal with no `done` in the log after `last` (an orphan the sweep closed,
                # or the done was already delivered before `after_seq`): nothing more will come.
                tail = await asyncio.to_thread(store.events, run_id, last)
                for record in tail:
                    last = record.seq
                    yield record
                return
            await asyncio.sleep(poll_s)
            idle += poll_s
            if idle >= heartbeat_s:
                idle = 0.0
                yield Heartbeat()
