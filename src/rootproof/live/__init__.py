"""The live benchmark's private environment: real PostgreSQL, Redis, nginx, Prometheus with its
exporters, an order service and background load on loopback, started and stopped by their pids.

`LiveEnvironment` (`rootproof.live.env`) is the API; `rootproof live up|status|down` the command
line (`rootproof.live.cli`); docs/live-benchmark.md the guide. Importing this package loads
neither the order service's web stack (FastAPI, SQLAlchemy, redis-py) nor a database driver.
"""

from __future__ import annotations

from rootproof.live.env import (
    CleanedRun,
    ComponentStatus,
    LiveEnvironment,
    PreflightReport,
    RunInfo,
    RunStatus,
    StopReport,
    list_runs,
)
from rootproof.live.layout import COMPONENTS, ComponentName, LiveConfig
from rootproof.live.load import LoadStats, ProbeResult

__all__ = [
    "COMPONENTS",
    "CleanedRun",
    "ComponentName",
    "ComponentStatus",
    "LiveConfig",
    "LiveEnvironment",
    "LoadStats",
    "PreflightReport",
    "ProbeResult",
    "RunInfo",
    "RunStatus",
    "StopReport",
    "list_runs",
]
