"""Canonical invocations and the store that holds them (the whole truth of a run's tool calls).

In-process by default; a Redis store with a TTL implements the same protocol for replicas.
Keyed by invocation id across runs, so a citation of another run's invocation is recognised
as foreign.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from rootproof.tools.refs import EvidenceRef

__all__ = ["CanonicalInvocation", "CanonicalStore", "InMemoryCanonicalStore", "InvocationStatus"]


class InvocationStatus(StrEnum):
    """Status of one tool invocation."""

    READY = "READY"
    REJECTED = "REJECTED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"


@dataclass(kw_only=True)
class CanonicalInvocation:
    """Everything about one invocation: ids, arguments, scope, status, the full result, refs."""

    invocation_id: str
    run_id: str
    session_id: str
    step_index: int
    tool_name: str
    arguments: dict[str, Any] | str
    scope_key: str | None
    status: InvocationStatus
    refusal_code: str | None = None
    message: str | None = None
    evidence_status: str | None = None
    data_source: str | None = None
    result: dict[str, Any] | None = None
    evidence_refs: list[EvidenceRef] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    duration_ms: int = 0
    result_bytes: int = 0

    def ref(self, raw_path: str) -> EvidenceRef | None:
        """The recorded ref at `raw_path`, if any."""
        for r in self.evidence_refs:
            if r.raw_path == raw_path:
                return r
        return None


class CanonicalStore(Protocol):
    """Where canonical invocations live for the guards to read."""

    def put(self, inv: CanonicalInvocation) -> None:
        """Store (or replace) one invocation."""

    def get(self, invocation_id: str) -> CanonicalInvocation | None:
        """One invocation by id, whatever run it belongs to."""

    def for_run(self, run_id: str) -> list[CanonicalInvocation]:
        """Every invocation of a run, in order."""


class InMemoryCanonicalStore:
    """A bounded in-process store (oldest runs evicted past `max_invocations`)."""

    def __init__(self, max_invocations: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[str, CanonicalInvocation] = OrderedDict()
        self._max = max_invocations

    def put(self, inv: CanonicalInvocation) -> None:
        with self._lock:
            self._items[inv.invocation_id] = inv
            while len(self._items) > self._max:
                self._items.popitem(last=False)

    def get(self, invocation_id: str) -> CanonicalInvocation | None:
        with self._lock:
            return self._items.get(invocation_id)

    def for_run(self, run_id: str) -> list[CanonicalInvocation]:
        with self._lock:
            return [i for i in self._items.values() if i.run_id == run_id]
