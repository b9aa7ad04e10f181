"""Evidence tools: definitions, argument models and the backend seam.

A tool is read-only, has a pydantic argument model (its JSON schema is what a model is shown)
and is served by a backend (`snapshot`, `live`, `knowledge`, or whatever a user plugs in).

Every argument is range-checked here, so that whatever a model sends either validates or is
refused as INVALID_ARGUMENTS, and nothing reaches a backend that it could fail on: `since` is
at most `MAX_SINCE` (7 days), texts have a length cap and may not hold NUL, other control
characters than tab and newlines, or lone surrogates; a query has at most `MAX_QUERY_TERMS`
terms; metric labels are at most `MAX_LABELS` pairs of bounded text; numbers have ranges.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rootproof.tools.results import ToolResult

__all__ = [
    "RUNTIME_TOOLS",
    "TOOLS",
    "BackendResult",
    "InspectNginxArgs",
    "InspectPostgresArgs",
    "InspectRedisArgs",
    "LogScope",
    "LookupKnowledgeArgs",
    "PostgresKind",
    "QueryLogsArgs",
    "QueryMetricsArgs",
    "Scope",
    "System",
    "ToolBackend",
    "ToolDefinition",
    "parse_since",
    "window_start",
]

MAX_SINCE = timedelta(days=7)
"""The widest window a tool call may ask for."""
MAX_QUERY_TERMS = 64
"""Most terms and phrases in one query."""
MAX_LABELS = 20
"""Most label matches in one `query_metrics` call."""
_SINCE = re.compile(r"^(\d{1,12})\s*(s|m|h|d)$", re.ASCII)  # `٥m` and `５m` are no durations
_BAD_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
_TERM = re.compile(r'"[^"]*(?:"|$)|[^\s"]+')
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
LogScope = Literal["APPLICATION", "DATABASE", "CACHE", "PROXY", "SYSTEM", "CLOUD"]
"""The log family of an entry: `CLOUD` is what a cloud provider writes about a managed resource
(AWS RDS events, CloudWatch alarms' state changes, Cloud SQL operations, Azure activity log)."""
Scope = Literal["ALL", LogScope]
"""The `scope` argument of `query_logs`: one log family, or `ALL`."""
Level = Literal["DEBUG", "INFO", "WARN", "ERROR", "FATAL"]
System = Literal["logs", "metrics", "postgres", "redis", "nginx", "knowledge"]
"""The systems tools are served by (a backend is mounted per system, or per system and target)."""
LEVEL_ORDER: dict[str, int] = {"DEBUG": 10, "INFO": 20, "WARN": 30, "ERROR": 40, "FATAL": 50}


def parse_since(value: str) -> timedelta:
    """`30m`, `2h`, `90s`, `1d` → timedelta; raises ValueError otherwise (also when too large to represent)."""
    m = _SINCE.match(value.strip())
    if not m:
        raise ValueError(f"since must look like 30m, 2h, 90s or 1d (got {value[:40]!r})")
    try:
        return timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)])
    except OverflowError:
        raise ValueError(f"since may be at most 7d (got {value[:40]!r})") from None


def window_start(now: datetime, since: str) -> datetime:
    """Where a window of `since` ending at `now` starts (the earliest representable time at most)."""
    try:
        return now - parse_since(since)
    except OverflowError:  # a clock within `since` of year 1
        return datetime.min.replace(tzinfo=now.tzinfo)


def _check_text(value: str, field: str) -> None:
    if bad := _BAD_CHARS.search(value):
        raise ValueError(f"{field} holds the control character or lone surrogate {bad.group()!r}; send plain text")


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="after")
    def _plain_text(self) -> _Args:
        for name, value in self:
            if isinstance(value, str):
                _check_text(value, name)
            elif isinstance(value, dict):
                for k, v in value.items():
                    _check_text(k, f"{name} key")
                    _check_text(v, f"{name}.{k[:40]}")
        return self


class _Windowed(_Args):
    since: str = Field(
        default="30m", description="Window ending now: 30m, 2h, 1d (max 7d).", max_length=32
    )

    @field_validator("since")
    @classmethod
    def _check_since(cls, v: str) -> str:
        if parse_since(v) > MAX_SINCE:
            raise ValueError("since may be at most 7d")
        return v.strip()


class _Paged(_Windowed):
    query: str = Field(
        default="",
        description='Whitespace-separated terms and "quoted phrases", case-insensitive; an item matches '
        "if it contains any of them; empty matches everything in the window.",
        max_length=500,
    )
    limit: int = Field(default=50, ge=1, le=200, description="Items to return (1-200).")
    offset: int = Field(default=0, ge=0, le=10_000, description="Items to skip.")

    @field_validator("query")
    @classmethod
    def _check_terms(cls, v: str) -> str:
        if len(_TERM.findall(v)) > MAX_QUERY_TERMS:
            raise ValueError(f"query may hold at most {MAX_QUERY_TERMS} terms and phrases")
        return v


class QueryLogsArgs(_Paged):
    """Search application, database, cache, proxy, system and cloud-provider logs."""

    service: str | None = Field(default=None, description="Only this service.", max_length=100)
    scope: Scope = Field(default="ALL", description="Log family (CLOUD: cloud provider events).")
    level: Level | None = Field(default=None, description="Minimum level.")


class QueryMetricsArgs(_Windowed):
    """Read metric series with a window summary (first, last, min, max, delta, mean)."""

    metric: str = Field(description="Metric name or glob (`pg_locks_*`).", min_length=1, max_length=200)
    labels: dict[str, Annotated[str, Field(max_length=200)]] | None = Field(
        default=None, description="Exact label matches (at most 20).", max_length=MAX_LABELS
    )

    @field_validator("labels")
    @classmethod
    def _check_label_names(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for key in v or {}:
            if not 1 <= len(key) <= 100:
                raise ValueError(f"label names have 1 to 100 characters (got {len(key)})")
        return v


PostgresKind = Literal[
    "activity",
    "locks",
    "settings",
    "database_stats",
    "replication",
    "top_queries",
    "log",
    "wait_events",
    "load_by_user",
    "load_by_host",
]
"""The kinds of `inspect_postgres` (which are rows: `tools.results.ROW_KINDS`)."""


class InspectPostgresArgs(_Paged):
    """Inspect PostgreSQL: sessions, locks, settings, statistics, replication, top queries,
    database load by wait event, user and client host, server log."""

    kind: PostgresKind


class InspectRedisArgs(_Paged):
    """Inspect Redis: INFO, CLIENT LIST, SLOWLOG, CONFIG, server log."""

    kind: Literal["info", "clients", "slowlog", "config", "log"]


class InspectNginxArgs(_Paged):
    """Inspect nginx: error log, access log, configuration, stub_status."""

    kind: Literal["error_log", "access_log", "config", "status"]


class LookupKnowledgeArgs(_Args):
    """Search the troubleshooting knowledge base (generic knowledge, never evidence of this incident)."""

    query: str = Field(description="What to look up: symptoms, error messages, codes.", min_length=1, max_length=1000)
    top_k: int = Field(default=5, ge=1, le=10, description="Results to return (1-10).")


@dataclass(frozen=True, kw_only=True)
class ToolDefinition:
    """A read-only evidence tool."""

    name: str
    description: str
    args_model: type[BaseModel]
    backend: System
    """The real system that serves it: backends are mounted and breakers keyed per system (and target)."""
    read_only: bool = True
    paged_kinds: frozenset[str] = frozenset()
    sequential: bool = False
    """Its calls in one step run one after another, in the order asked: its backend keeps
    per-run state that each call reads and writes (lookup_knowledge's de-duplication of cards)."""

    def json_schema(self) -> dict[str, Any]:
        """The argument schema a model is shown."""
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        return schema


TOOLS: dict[str, ToolDefinition] = {
    t.name: t
    for t in (
        ToolDefinition(
            name="lookup_knowledge",
            description="Search troubleshooting knowledge cards: what to check, never proof of this incident.",
            args_model=LookupKnowledgeArgs,
            backend="knowledge",
            sequential=True,
        ),
        ToolDefinition(
            name="query_logs",
            description="Search logs (application, database, cache, proxy, system, cloud) in a window ending now.",
            args_model=QueryLogsArgs,
            backend="logs",
        ),
        ToolDefinition(
            name="query_metrics",
            description="Read metric series matching a name or glob, with first/last/min/max/delta/mean over the window.",
            args_model=QueryMetricsArgs,
            backend="metrics",
        ),
        ToolDefinition(
            name="inspect_postgres",
            description="Inspect PostgreSQL: activity (pg_stat_activity), locks (with blocking_pids), "
            "top_queries (pg_stat_statements), wait_events, load_by_user, load_by_host, settings, stats, replication, log.",
            args_model=InspectPostgresArgs,
            backend="postgres",
        ),
        ToolDefinition(
            name="inspect_redis",
            description="Inspect Redis: info (INFO sections), clients (CLIENT LIST), slowlog, config, log.",
            args_model=InspectRedisArgs,
            backend="redis",
        ),
        ToolDefinition(
            name="inspect_nginx",
            description="Inspect nginx: error_log, access_log, config, status (stub_status).",
            args_model=InspectNginxArgs,
            backend="nginx",
        ),
    )
}
RUNTIME_TOOLS: frozenset[str] = frozenset(n for n, t in TOOLS.items() if t.backend != "knowledge")
"""The evidence tools: every tool served by a runtime system (not the knowledge base)."""


@dataclass(kw_only=True)
class BackendResult:
    """What a backend returns: the canonical result and where each part came from."""

    result: ToolResult | dict[str, Any]
    """The whole result: a typed shape of `tools.results` (every backend of the package
    returns one); plain JSON data is accepted too (test doubles, user backends)."""
    data_source: str
    """Default data source of every ref."""
    ref_sources: dict[str, str] = field(default_factory=dict)
    """Per-path data source where it differs from the default (`$.entries[2]` → `mock`)."""
    details: dict[str, Any] = field(default_factory=dict)
    """Backend details for the invocation record (retrieval layer, match counts, channel ranks)."""
    evidence_status: str | None = None
    """Set by a backend that knows better (DEDUPLICATED); else derived from the refs."""

    def json(self) -> dict[str, Any]:
        """The canonical result as plain JSON data."""
        return self.result if isinstance(self.result, dict) else self.result.to_json()


class ToolBackend(Protocol):
    """The backend seam: one call method, and `close()` for what it holds open."""

    def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
        """Run one read-only call; raise `BackendError` on failure (`BackendUnavailable` when its
        system cannot be reached, `BackendQueryError` when only this query failed)."""
        ...

    def close(self) -> None:
        """Release connections, clients and files; idempotent."""
        ...
