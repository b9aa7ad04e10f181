"""The run lifecycle: an explicit state machine; an illegal transition raises."""

from __future__ import annotations

import threading
from enum import StrEnum

from rootproof.errors import IllegalTransition

__all__ = ["RunLifecycle", "RunState", "TERMINAL_STATES"]


class RunState(StrEnum):
    """States of a run (docs/runs.md)."""

    CREATED = "CREATED"
    ROUTING = "ROUTING"
    RUNNING = "RUNNING"
    VALIDATING = "VALIDATING"
    RELEASING = "RELEASING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"
    FAILED = "FAILED"


TERMINAL_STATES = frozenset({RunState.COMPLETED, RunState.CANCELLED, RunState.TIMED_OUT, RunState.FAILED})

_S = RunState
_EDGES: dict[RunState, frozenset[RunState]] = {
    _S.CREATED: frozenset({_S.ROUTING, _S.RUNNING}),
    _S.ROUTING: frozenset({_S.RUNNING, _S.RELEASING}),
    _S.RUNNING: frozenset({_S.VALIDATING, _S.RELEASING, _S.COMPLETED}),
    _S.VALIDATING: frozenset({_S.RELEASING}),
    _S.RELEASING: frozenset({_S.COMPLETED, _S.TIMED_OUT, _S.FAILED}),
}
# Any non-terminal state may also go to RELEASING (fallback), CANCELLED or FAILED.
for _state in list(_EDGES):
    _EDGES[_state] = _EDGES[_state] | {_S.CANCELLED, _S.FAILED} | ({_S.RELEASING} if _state is not _S.RELEASING else frozenset())


class RunLifecycle:
    """Thread-safe state holder; `advance` raises `IllegalTransition` on an edge not in the table."""

    def __init__(self) -> None:
        self._state = RunState.CREATED
        self._lock = threading.Lock()
        self.history: list[RunState] = [RunState.CREATED]

    @property
    def state(self) -> RunState:
        """The current state."""
        return self._state

    @property
    def terminal(self) -> bool:
        """True once the run reached a terminal state (which is final)."""
        return self._state in TERMINAL_STATES

    def can(self, target: RunState) -> bool:
        """Whether `target` is reachable in one step from the current state."""
        return target in _EDGES.get(self._state, frozenset())

    def advance(self, target: RunState) -> None:
        """Move to `target` or raise `IllegalTransition` naming both states."""
        with self._lock:
            if target not in _EDGES.get(self._state, frozenset()):
                raise IllegalTransition(f"illegal run transition {self._state} -> {target}")
            self._state = target
            self.history.append(target)
