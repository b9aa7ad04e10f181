"""The live benchmark's private environment: real PostgreSQL, Redis, nginx, Prometheus with its
exporters, an order service and background load on loopback, started and stopped by their pids.

`LiveEnvironment` (`rootproof.live.env`) is the API; `rootproof live up|status|down` the command
line (`rootproof.live.cli`); docs/live-benchmark.md the guide. Importing this package loads
neither the order service's web stack (FastAPI, SQLAlchemy, redis-py) nor a database driver.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rootproof.live.env import (
        CleanedRun,
        ComponentStatus,
        LiveEnvironment,
        PreflightReport,
        RunInfo,
        RunStatus,
        StopReport,
        list_runs,
        stop_run,
    )
    from rootproof.live.layout import COMPONENTS, ComponentName, LiveConfig
    from rootproof.live.load import LoadStats, ProbeResult

_HOME = {
    "COMPONENTS": "layout",
    "CleanedRun": "env",
    "ComponentName": "layout",
    "ComponentStatus": "env",
    "LiveConfig": "layout",
    "LiveEnvironment": "env",
    "LoadStats": "load",
    "PreflightReport": "env",
    "ProbeResult": "load",
    "RunInfo": "env",
    "RunStatus": "env",
    "StopReport": "env",
    "list_runs": "env",
    "stop_run": "env",
}
"""Where each exported name lives: loaded on first use, so `rootproof --help` (which mounts
`rootproof.live.cli`) does not import the environment."""


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(f"rootproof.live.{_HOME[name]}"), name)
    raise AttributeError(f"module 'rootproof.live' has no attribute {name!r}")


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
    "stop_run",
]
