"""The ToolBoundary: the agent decides what to look at; the boundary decides whether it may."""

from rootproof.boundary.boundary import CircuitBreaker, RefusalCode, ToolBoundary, ToolCallRequest
from rootproof.boundary.store import (
    CanonicalInvocation,
    CanonicalStore,
    InMemoryCanonicalStore,
    InvocationStatus,
)

__all__ = [
    "CanonicalInvocation",
    "CanonicalStore",
    "CircuitBreaker",
    "InMemoryCanonicalStore",
    "InvocationStatus",
    "RefusalCode",
    "ToolBoundary",
    "ToolCallRequest",
]
