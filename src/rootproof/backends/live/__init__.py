"""Live backends: read-only views of the user's PostgreSQL, Redis, nginx, log files, Loki and
Prometheus, returning the snapshot backend's result shapes with `data_source: live:<target>`.

`open_live_backends` builds one backend per target (one `logs` backend over every logs and
Loki target) and names the mount each is reached by: `<system>:<target>` (`postgres:orders-db`),
or `logs` for the log search. Drivers are imported only by the module of their system.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from rootproof.targets import LogsTarget, LokiTarget, TargetsFile
from rootproof.tools.base import ToolBackend

__all__ = ["BACKEND_CLASSES", "SYSTEM_OF_KIND", "open_live_backends"]

SYSTEM_OF_KIND: dict[str, str] = {
    "postgres": "postgres",
    "redis": "redis",
    "nginx": "nginx",
    "logs": "logs",
    "loki": "logs",
    "prometheus": "metrics",
}
"""The backend system a target kind serves (`logs` and `loki` both serve `query_logs`)."""

BACKEND_CLASSES: dict[str, tuple[str, str]] = {
    "postgres": ("rootproof.backends.live.postgres", "PostgresBackend"),
    "redis": ("rootproof.backends.live.redis", "RedisBackend"),
    "nginx": ("rootproof.backends.live.nginx", "NginxBackend"),
    "logs": ("rootproof.backends.live.logs", "LogsBackend"),
    "metrics": ("rootproof.backends.live.prometheus", "PrometheusBackend"),
}
"""system → (module, class), imported on first use so a missing driver only affects its system."""


def _backend_class(system: str) -> Any:
    module, name = BACKEND_CLASSES[system]
    return getattr(importlib.import_module(module), name)


def open_live_backends(targets: TargetsFile, environ: Mapping[str, str]) -> list[tuple[str, ToolBackend]]:
    """One backend per target (`<system>:<name>`), plus one `logs` backend over the logs and Loki targets."""
    out: list[tuple[str, ToolBackend]] = []
    logs: list[LogsTarget | LokiTarget] = []
    try:
        for t in targets.targets:
            system = SYSTEM_OF_KIND[t.kind]
            if isinstance(t, LogsTarget | LokiTarget):
                logs.append(t)
                continue
            out.append((f"{system}:{t.name}", _backend_class(system)(t, environ=environ)))
        if logs:
            out.append(("logs", _backend_class("logs")(logs, environ=environ)))
    except BaseException:
        for _, backend in out:
            backend.close()
        raise
    return out
