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
    from rootproof.live.env import ComponentStatus, LiveEnvironment, PreflightReport, RunStatus
    from rootproof.live.layout import COMPONENTS, ComponentName, LiveConfig
    from rootproof.live.load import LoadStats, ProbeResult
    from rootproof.live.runs import CleanedRun, RunInfo, StopReport, list_runs, stop_run

_HOME = {
    "COMPONENTS": "layout",
    "CleanedRun": "runs",
    "ComponentName": "layout",
    "ComponentStatus": "env",
    "LiveConfig": "layout",
    "LiveEnvironment": "env",
    "LoadStats": "load",
    "PreflightReport": "env",
    "ProbeResult": "load",
    "RunInfo": "runs",
    "RunStatus": "env",
    "StopReport": "runs",
    "list_runs": "runs",
    "stop_run": "runs",
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
