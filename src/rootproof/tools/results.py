"""Typed result shapes every backend returns and `tools.refs` reads.

One shape per kind of result; a backend builds one of these and the boundary turns it into
the canonical result with `to_json()` (plain JSON data; optional parts left out when unset).
`tools.refs` computes ref paths and texts over that JSON, so a backend that builds these
models cannot disagree with the refs about key names.

| shape            | tools · kinds                                                            | citable |
|------------------|--------------------------------------------------------------------------|---------|
| `LogsResult`     | query_logs                                                               | `$.entries[i]` |
| `MetricsResult`  | query_metrics                                                            | `$.series[i]` |
| `RowsResult`     | inspect_postgres activity·locks·database_stats·replication·top_queries·wait_events·load_by_user·load_by_host, inspect_redis clients | `$.rows[i]` |
| `SettingsResult` | inspect_postgres settings, inspect_redis config                          | `$.settings.{name}` |
| `InfoResult`     | inspect_redis info                                                       | `$.info.{section}.{field}` |
| `LinesResult`    | inspect_postgres log, inspect_redis log·slowlog, inspect_nginx error_log·access_log | `$.lines[i]` |
| `ConfigResult`   | inspect_nginx config                                                     | `$.config[i]` |
| `StatusResult`   | inspect_nginx status                                                     | `$.status.{field}` |
| `KnowledgeResult`| lookup_knowledge                                                         | `$.results[i]` |

Every shape may carry `no_evidence`: what was asked, where and over which window, when
nothing matched (the single ref `$.no_evidence`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = [
    "ROW_KINDS",
    "ConfigResult",
    "InfoResult",
    "KnowledgeResult",
    "LinesResult",
    "LogItem",
    "LogsResult",
    "MetricsResult",
    "RowsResult",
    "SeriesItem",
    "SettingsResult",
    "StatusResult",
    "Summary",
    "ToolResult",
    "Window",
    "result_type",
    "summary_of",
]

Scalar = str | int | float | bool | None


_ATOMS = frozenset({str, int, float, bool, type(None)})
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _plain(obj: Any) -> Any:
    """What `dataclasses.asdict` makes of a value (the same containers and copies), without
    its generic dispatch on every leaf: text, numbers, lists and dicts of them are most results."""
    kind = type(obj)
    if kind in _ATOMS:
        return obj  # deepcopy of an immutable scalar is the scalar itself
    if kind is list:
        return [_plain(v) for v in obj]
    if kind is dict:
        return {_plain(k): _plain(v) for k, v in obj.items()}
    names = _FIELD_NAMES.get(kind)
    if names is None and hasattr(kind, "__dataclass_fields__"):
        names = _FIELD_NAMES[kind] = tuple(f.name for f in fields(obj))
    if names is not None:
        return {name: _plain(getattr(obj, name)) for name in names}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return kind(*[_plain(v) for v in obj])
    if isinstance(obj, list | tuple):
        return kind(_plain(v) for v in obj)
    if isinstance(obj, dict):
        return kind((_plain(k), _plain(v)) for k, v in obj.items())
    return copy.deepcopy(obj)


def _json(obj: Any) -> dict[str, Any]:
    data: dict[str, Any] = _plain(obj)
    for key in ("no_evidence", "refused", "deduplicated", "total_matches"):  # total_matches: optional only in MetricsResult
        if key in data and data[key] is None:
            del data[key]
    return data


@dataclass(frozen=True, kw_only=True)
class Window:
    """A window as results print it: ISO 8601 UTC with milliseconds (`format_timestamp`)."""

    from_: str
    to: str

    def as_json(self) -> dict[str, str]:
        """`{"from": …, "to": …}`."""
        return {"from": self.from_, "to": self.to}


class _Shape:
    """What every result shape shares: its canonical JSON (a window as `{"from", "to"}`)."""

    def to_json(self) -> dict[str, Any]:
        """The canonical result."""
        out = _json(self)
        window = getattr(self, "window", None)
        if isinstance(window, Window):
            out["window"] = window.as_json()
        return out


@dataclass(frozen=True, kw_only=True)
class LogItem:
    """One log entry: ref text `{ts} {level} {service} [{source}] {message}`."""

    ts: str
    """ISO 8601 UTC with milliseconds (`scenarios.types.format_timestamp`)."""
    level: str
    """DEBUG | INFO | WARN | ERROR | FATAL."""
    service: str
    scope: str
    """APPLICATION | DATABASE | CACHE | PROXY | SYSTEM | CLOUD (`tools.base.LogScope`)."""
    source: str
    """Where the entry was read (a file name, `loki`, the logger)."""
    message: str
    """The message whole, newlines kept."""


@dataclass(frozen=True, kw_only=True)
class LogsResult(_Shape):
    """`query_logs`."""

    window: Window
    total_matches: int
    entries: list[LogItem] = field(default_factory=list)
    no_evidence: str | None = None


@dataclass(frozen=True, kw_only=True)
class Summary:
    """A series' window summary."""

    first: int | float
    last: int | float
    min: int | float
    max: int | float
    delta: int | float
    mean: int | float


def _tidy(value: float) -> float:
    """A derived float without binary noise (12 significant digits), so ref texts stay readable."""
    return float(f"{value:.12g}")


def summary_of(values: Sequence[int | float]) -> Summary:
    """first, last, min, max, delta and mean of a non-empty series (derived floats tidied)."""
    first, last = values[0], values[-1]
    delta = last - first
    return Summary(
        first=first,
        last=last,
        min=min(values),
        max=max(values),
        delta=delta if isinstance(delta, int) else _tidy(delta),
        mean=_tidy(math.fsum(values) / len(values)),
    )


@dataclass(frozen=True, kw_only=True)
class SeriesItem:
    """One series: ref text `{metric}{labels} first=… last=… min=… max=… delta=… mean=… unit=… window=…`."""

    metric: str
    labels: dict[str, str]
    unit: str
    points: list[list[Any]]
    """`[ts, value]` pairs, oldest first."""
    summary: Summary


@dataclass(frozen=True, kw_only=True)
class MetricsResult(_Shape):
    """`query_metrics`."""

    window: Window
    series: list[SeriesItem] = field(default_factory=list)
    total_matches: int | None = None
    """How many series matched when more than `series` lists (a live backend's cut at 50); absent otherwise."""
    no_evidence: str | None = None


@dataclass(frozen=True, kw_only=True)
class RowsResult(_Shape):
    """Rows in the system's own column names (PostgreSQL views, CLIENT LIST fields)."""

    kind: str
    total_matches: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    no_evidence: str | None = None
    refused: str | None = None
    """The server refused rootproof's own connection and said why (its words): citable at `$.refused`."""


@dataclass(frozen=True, kw_only=True)
class LinesResult(_Shape):
    """Raw log-like lines (server logs, SLOWLOG entries, nginx logs), best match first."""

    kind: str
    window: Window
    total_matches: int
    lines: list[str] = field(default_factory=list)
    no_evidence: str | None = None
    refused: str | None = None
    """The server refused rootproof's own connection and said why (its words): citable at `$.refused`."""


@dataclass(frozen=True, kw_only=True)
class SettingsResult(_Shape):
    """`name → value` (PostgreSQL settings, Redis CONFIG)."""

    kind: str
    settings: dict[str, Scalar] = field(default_factory=dict)
    no_evidence: str | None = None
    refused: str | None = None
    """The server refused rootproof's own connection and said why (its words): citable at `$.refused`."""


@dataclass(frozen=True, kw_only=True)
class InfoResult(_Shape):
    """Redis INFO: `section → field → value`."""

    kind: str
    info: dict[str, dict[str, Scalar]] = field(default_factory=dict)
    no_evidence: str | None = None
    refused: str | None = None
    """The server refused rootproof's own connection and said why (its words): citable at `$.refused`."""


@dataclass(frozen=True, kw_only=True)
class ConfigResult(_Shape):
    """A configuration text, line by line (line number = index + 1), returned whole."""

    kind: str
    config: list[str] = field(default_factory=list)
    no_evidence: str | None = None


@dataclass(frozen=True, kw_only=True)
class StatusResult(_Shape):
    """nginx stub_status fields (`active_connections`, `accepts`, …)."""

    kind: str
    status: dict[str, Scalar] = field(default_factory=dict)
    no_evidence: str | None = None


@dataclass(frozen=True, kw_only=True)
class KnowledgeResult(_Shape):
    """`lookup_knowledge`."""

    query: str
    results: list[dict[str, Any]] = field(default_factory=list)
    no_evidence: str | None = None
    deduplicated: str | None = None


ToolResult = (
    LogsResult
    | MetricsResult
    | RowsResult
    | LinesResult
    | SettingsResult
    | InfoResult
    | ConfigResult
    | StatusResult
    | KnowledgeResult
)

ROW_KINDS: dict[str, tuple[str, ...]] = {
    "inspect_postgres": (
        "activity",
        "locks",
        "database_stats",
        "replication",
        "top_queries",
        "wait_events",
        "load_by_user",
        "load_by_host",
    ),
    "inspect_redis": ("clients",),
}
"""The kinds whose result is `RowsResult` (table rows, cited `$.rows[i]`), per tool. None is
windowed; rows are free-form mappings in the system's (or the provider's) own column names."""

_BY_KIND: dict[tuple[str, str | None], type] = {
    ("query_logs", None): LogsResult,
    ("query_metrics", None): MetricsResult,
    ("lookup_knowledge", None): KnowledgeResult,
    **{(tool, k): RowsResult for tool, kinds in ROW_KINDS.items() for k in kinds},
    ("inspect_postgres", "settings"): SettingsResult,
    ("inspect_postgres", "log"): LinesResult,
    ("inspect_redis", "info"): InfoResult,
    ("inspect_redis", "config"): SettingsResult,
    ("inspect_redis", "slowlog"): LinesResult,
    ("inspect_redis", "log"): LinesResult,
    ("inspect_nginx", "error_log"): LinesResult,
    ("inspect_nginx", "access_log"): LinesResult,
    ("inspect_nginx", "config"): ConfigResult,
    ("inspect_nginx", "status"): StatusResult,
}


def result_type(tool: str, kind: str | None = None) -> type:
    """The result shape of a tool (and kind, for the `inspect_*` tools); KeyError if unknown."""
    return _BY_KIND[(tool, kind)]
