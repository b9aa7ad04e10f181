"""Runs: identity, limits, lifecycle, events."""

from rootproof.run.context import (
    BudgetUsage,
    ProgressTracker,
    RunBudget,
    RunCancellation,
    RunContext,
    ToolScope,
)
from rootproof.run.lifecycle import TERMINAL_STATES, RunLifecycle, RunState

__all__ = [
    "TERMINAL_STATES",
    "BudgetUsage",
    "ProgressTracker",
    "RunBudget",
    "RunCancellation",
    "RunContext",
    "RunLifecycle",
    "RunState",
    "ToolScope",
]
