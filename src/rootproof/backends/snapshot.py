"""The `snapshot` backend: real queries over a scenario's frozen `tool_responses.yaml`.

TimeWindows end at the run's clock (a scenario's `now`) and start `since` earlier; items outside
are excluded. Log-like data follows the documented query semantics (docs/scenario-files.md): whitespace-separated terms and
`"quoted phrases"`, case-insensitive (NFKC + casefold), an item matches if it contains any of
them, matches are ordered by the number of distinct terms matched and then newest first, and
`limit`/`offset` page the ordered matches while `total_matches` counts them all. Result shapes
fit `rootproof.tools.refs` exactly: every citable item has a path whose text `ref_text`
recomputes. A query that finds nothing returns `$.no_evidence` and no other citable item.

Cost grows with the items in the window only: an item's matching text is folded once per backend
(on the first query that reaches it) and result items are built for the returned page alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any

from pydantic import BaseModel, ValidationError

from rootproof.backends.query import TimeWindow, fold, order_matches, parse_query
from rootproof.errors import BackendError
from rootproof.scenarios.types import LogEntry, LogLine, Row, Scenario, format_timestamp
from rootproof.tools.base import (
    LEVEL_ORDER,
    TOOLS,
    BackendResult,
    InspectNginxArgs,
    InspectPostgresArgs,
    InspectRedisArgs,
    QueryLogsArgs,
    QueryMetricsArgs,
    window_start,
)
from rootproof.tools.refs import (
    NO_EVIDENCE_PATH,
    canonical_json,
    enumerate_ref_paths,
    fmt_value,
)
from rootproof.tools.results import (
    ConfigResult,
    InfoResult,
    LinesResult,
    LogItem,
    LogsResult,
    MetricsResult,
    RowsResult,
    SeriesItem,
    SettingsResult,
    StatusResult,
    Window,
    summary_of,
)

__all__ = ["SnapshotBackend", "ref_paths_with_sources"]



def _filters(args: BaseModel, names: Sequence[str]) -> str:
    parts = []
    for name in names:
        value = getattr(args, name, None)
        if value is None:
            continue
        if isinstance(value, dict):
            value = ",".join(f"{k}={v}" for k, v in sorted(value.items())) or "any"
        parts.append(f"{name}={value}")
    return ", ".join(parts)


class SnapshotBackend:
    """Serves `query_logs`, `query_metrics`, `inspect_postgres`, `inspect_redis` and
    `inspect_nginx` from a loaded scenario's frozen tool data."""

    TOOLS = ("query_logs", "query_metrics", "inspect_postgres", "inspect_redis", "inspect_nginx")
    """The tools this backend serves."""

    def __init__(self, scenario: Scenario) -> None:
        self._scenario = scenario
        self._data = scenario.responses
        self._folded: dict[str, list[str | None]] = {}  # "logs" or a lines key → folded text by index
        self._handlers: dict[str, Callable[[Any, datetime], BackendResult]] = {
            "query_logs": self._query_logs,
            "query_metrics": self._query_metrics,
            "inspect_postgres": self._inspect_postgres,
            "inspect_redis": self._inspect_redis,
            "inspect_nginx": self._inspect_nginx,
        }

    def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
        """Run one read-only call against the snapshot; raise `BackendError` on failure."""
        handler = self._handlers.get(tool)
        if handler is None:
            raise BackendError(
                f"the snapshot backend does not serve {tool!r} (it serves {', '.join(self.TOOLS)})"
            )
        model = TOOLS[tool].args_model
        if not isinstance(args, model):
            try:
                args = model.model_validate(args.model_dump())
            except ValidationError as exc:
                raise BackendError(f"{tool}: arguments are not {model.__name__}: {exc}") from exc
        if now.tzinfo is None:
            raise BackendError(f"{tool}: the run's clock must be timezone-aware (got {now.isoformat()})")
        try:
            return handler(args, now.astimezone(UTC))
        except (KeyError, TypeError, ValueError) as exc:
            raise BackendError(
                f"snapshot backend failed on {tool} for scenario {self._scenario.id!r}: {exc!r}"
            ) from exc

    def close(self) -> None:
        """Nothing to release: the scenario is in memory."""

    # -- helpers -------------------------------------------------------------------------------

    def _folded_text(self, key: str, index: int, text: Callable[[], str]) -> str:
        """The folded matching text of item `index` of `key`, folded on first use."""
        cache = self._folded.get(key)
        if cache is None:
            size = len(self._data.logs or ()) if key == "logs" else len(self._data.lines.get(key, ()))
            cache = self._folded[key] = [None] * size
        folded = cache[index]
        if folded is None:
            folded = cache[index] = fold(text())
        return folded

    @staticmethod
    def _window(since: str, now: datetime) -> TimeWindow:
        return TimeWindow(start=window_start(now, since), end=now)

    @staticmethod
    def _shown(window: TimeWindow) -> Window:
        d = window.as_dict()
        return Window(from_=d["from"], to=d["to"])

    @staticmethod
    def _no_evidence(tool: str, what: str, filters: str, where: str) -> str:
        return f"{tool} found no match for {what}" + (f" ({filters})" if filters else "") + f" {where}"

    def _paged_lines(
        self,
        tool: str,
        args: InspectPostgresArgs | InspectRedisArgs | InspectNginxArgs,
        now: datetime,
        key: str,
    ) -> BackendResult:
        section = key.split(".")[0]
        default = self._data.source_of(section)
        window = self._window(args.since, now)
        query = parse_query(args.query)
        candidates: list[tuple[int, datetime | None, LogLine]] = []
        for i, line in enumerate(self._data.lines.get(key, ())):
            if line.ts not in window:
                continue
            if query.empty:
                candidates.append((0, line.ts, line))
            elif score := query.score_folded(self._folded_text(key, i, lambda line=line: line.text)):  # type: ignore[misc]
                candidates.append((score, line.ts, line))
        ordered = order_matches(candidates)
        page = ordered[args.offset : args.offset + args.limit]
        sources = {
            f"$.lines[{i}]": line.data_source for i, line in enumerate(page) if line.data_source != default
        }
        no_evidence = None
        if not page:
            no_evidence = self._no_evidence(
                tool,
                f"query '{args.query}'",
                self._page_filters(args, len(ordered), f"kind={args.kind}")
                + (
                    "" if key in self._data.lines else f"; the snapshot holds no {key.replace('.', ' ')} data"
                ),
                f"in window {window.text()}",
            )
        result = LinesResult(
            kind=args.kind,
            window=self._shown(window),
            total_matches=len(ordered),
            lines=[line.text for line in page],
            no_evidence=no_evidence,
        )
        return BackendResult(
            result=result,
            data_source=default,
            ref_sources=sources,
            details={"kind": args.kind, "total_matches": len(ordered), "returned": len(page)},
        )

    @staticmethod
    def _page_filters(args: Any, total: int, head: str) -> str:
        text = ", ".join(p for p in (head, _filters(args, ("since",))) if p)
        if total:
            text += f"; {total} matches, none at offset {args.offset}"
        return text

    def _rows(
        self, tool: str, args: InspectPostgresArgs | InspectRedisArgs, now: datetime, key: str
    ) -> BackendResult:
        section = key.split(".")[0]
        default = self._data.source_of(section)
        query = parse_query(args.query)
        matched: list[Row] = [
            r
            for r in self._data.rows.get(key, ())
            if query.empty or query.score(canonical_json(dict(r.values)))
        ]
        page = matched[args.offset : args.offset + args.limit]
        sources = {f"$.rows[{i}]": r.data_source for i, r in enumerate(page) if r.data_source != default}
        no_evidence = None
        if not page:
            total = len(matched)
            filters = f"kind={args.kind}" + (
                f"; {total} matches, none at offset {args.offset}" if total else ""
            )
            if key not in self._data.rows:
                filters += f"; the snapshot holds no {key.replace('.', ' ')} data"
            no_evidence = self._no_evidence(
                tool, f"query '{args.query}'", filters, f"as of {format_timestamp(now)}"
            )
        # the result is a deep copy (`to_json`): the scenario's rows are never shared
        result = RowsResult(
            kind=args.kind, total_matches=len(matched), rows=[dict(r.values) for r in page], no_evidence=no_evidence
        )
        return BackendResult(
            result=result,
            data_source=default,
            ref_sources=sources,
            details={"kind": args.kind, "total_matches": len(matched), "returned": len(page)},
        )

    def _mapping(
        self,
        tool: str,
        args: InspectPostgresArgs | InspectRedisArgs | InspectNginxArgs,
        now: datetime,
        section: str,
        field: str,
        data: Mapping[str, Any] | None,
        text: Callable[[str, Any], str],
    ) -> BackendResult:
        query = parse_query(args.query)
        chosen = {k: v for k, v in (data or {}).items() if query.empty or query.score(text(k, v))}
        no_evidence = None
        if not chosen:
            filters = f"kind={args.kind}" + (
                "" if data is not None else f"; the snapshot holds no {section} {args.kind} data"
            )
            no_evidence = self._no_evidence(
                tool, f"query '{args.query}'", filters, f"as of {format_timestamp(now)}"
            )
        result = (
            StatusResult(kind=args.kind, status=chosen, no_evidence=no_evidence)
            if field == "status"
            else SettingsResult(kind=args.kind, settings=chosen, no_evidence=no_evidence)
        )
        return BackendResult(
            result=result,
            data_source=self._data.source_of(section),
            details={"kind": args.kind, "total_matches": len(chosen), "returned": len(chosen)},
        )

    # -- tools ---------------------------------------------------------------------------------

    def _query_logs(self, args: QueryLogsArgs, now: datetime) -> BackendResult:
        default = self._data.source_of("logs")
        window = self._window(args.since, now)
        query = parse_query(args.query)
        minimum = LEVEL_ORDER[args.level] if args.level else 0
        candidates: list[tuple[int, datetime | None, LogEntry]] = []
        for i, e in enumerate(self._data.logs or ()):
            if e.ts not in window or (args.service is not None and e.service != args.service):
                continue
            if (args.scope != "ALL" and e.scope != args.scope) or LEVEL_ORDER[e.level] < minimum:
                continue
            if query.empty:
                candidates.append((0, e.ts, e))
            elif score := query.score_folded(self._folded_text("logs", i, lambda e=e: _entry_text(e))):  # type: ignore[misc]
                candidates.append((score, e.ts, e))
        ordered = order_matches(candidates)
        page = ordered[args.offset : args.offset + args.limit]
        sources = {f"$.entries[{i}]": e.data_source for i, e in enumerate(page) if e.data_source != default}
        no_evidence = None
        if not page:
            filters = _filters(args, ("service", "scope", "level", "since"))
            if ordered:
                filters += f"; {len(ordered)} matches, none at offset {args.offset}"
            if self._data.logs is None:
                filters += "; the snapshot holds no logs"
            no_evidence = self._no_evidence(
                "query_logs", f"query '{args.query}'", filters, f"in window {window.text()}"
            )
        result = LogsResult(
            window=self._shown(window),
            total_matches=len(ordered),
            entries=[_entry_item(e) for e in page],
            no_evidence=no_evidence,
        )
        return BackendResult(
            result=result,
            data_source=default,
            ref_sources=sources,
            details={"total_matches": len(ordered), "returned": len(page)},
        )

    def _query_metrics(self, args: QueryMetricsArgs, now: datetime) -> BackendResult:
        default = self._data.source_of("metrics")
        window = self._window(args.since, now)
        series: list[SeriesItem] = []
        sources: dict[str, str] = {}
        for s in self._data.metrics or ():
            if not fnmatchcase(s.metric, args.metric):
                continue
            if args.labels and any(s.labels.get(k) != v for k, v in args.labels.items()):
                continue
            points = [(t, v) for t, v in s.points if t in window]
            if not points:
                continue
            if s.data_source != default:
                sources[f"$.series[{len(series)}]"] = s.data_source
            series.append(
                SeriesItem(
                    metric=s.metric,
                    labels=dict(s.labels),
                    unit=s.unit,
                    points=[[format_timestamp(t), v] for t, v in points],
                    summary=summary_of([v for _, v in points]),
                )
            )
        no_evidence = None
        if not series:
            filters = _filters(args, ("labels", "since"))
            if self._data.metrics is None:
                filters += "; the snapshot holds no metrics"
            no_evidence = self._no_evidence(
                "query_metrics", f"metric '{args.metric}'", filters, f"in window {window.text()}"
            )
        result = MetricsResult(window=self._shown(window), series=series, no_evidence=no_evidence)
        return BackendResult(
            result=result, data_source=default, ref_sources=sources, details={"series": len(series)}
        )

    def _inspect_postgres(self, args: InspectPostgresArgs, now: datetime) -> BackendResult:
        tool = "inspect_postgres"
        if args.kind == "log":
            return self._paged_lines(tool, args, now, "postgres.log")
        if args.kind == "settings":
            return self._mapping(
                tool,
                args,
                now,
                "postgres",
                "settings",
                self._data.settings.get("postgres.settings"),
                _setting_text,
            )
        return self._rows(tool, args, now, f"postgres.{args.kind}")

    def _inspect_redis(self, args: InspectRedisArgs, now: datetime) -> BackendResult:
        tool = "inspect_redis"
        if args.kind in ("log", "slowlog"):
            return self._paged_lines(tool, args, now, f"redis.{args.kind}")
        if args.kind == "clients":
            return self._rows(tool, args, now, "redis.clients")
        if args.kind == "config":
            return self._mapping(
                tool, args, now, "redis", "settings", self._data.settings.get("redis.config"), _setting_text
            )
        return self._info(args, now)

    def _info(self, args: InspectRedisArgs, now: datetime) -> BackendResult:
        query = parse_query(args.query)
        info: dict[str, dict[str, Any]] = {}
        for section, fields in (self._data.info or {}).items():
            chosen = {
                k: v
                for k, v in fields.items()
                if query.empty or query.score(f"# {section}\n{k}:{fmt_value(v)}")
            }
            if chosen:
                info[section] = chosen
        no_evidence = None
        if not info:
            filters = "kind=info" + (
                "" if self._data.info is not None else "; the snapshot holds no redis info data"
            )
            no_evidence = self._no_evidence(
                "inspect_redis", f"query '{args.query}'", filters, f"as of {format_timestamp(now)}"
            )
        count = sum(len(f) for f in info.values())
        return BackendResult(
            result=InfoResult(kind="info", info=info, no_evidence=no_evidence),
            data_source=self._data.source_of("redis"),
            details={"kind": "info", "total_matches": count, "returned": count},
        )

    def _inspect_nginx(self, args: InspectNginxArgs, now: datetime) -> BackendResult:
        tool = "inspect_nginx"
        if args.kind in ("error_log", "access_log"):
            return self._paged_lines(tool, args, now, f"nginx.{args.kind}")
        if args.kind == "status":
            return self._mapping(tool, args, now, "nginx", "status", self._data.nginx_status, _status_text)
        # The config is returned whole: a ref's line number is its index, so lines are never
        # filtered or paged (the query only decides whether anything matched).
        config = list(self._data.nginx_config or ())
        query = parse_query(args.query)
        matches = sum(1 for line in config if query.empty or query.score(line))
        no_evidence = None
        if not matches:
            filters = "kind=config" + (
                "" if self._data.nginx_config is not None else "; the snapshot holds no nginx config"
            )
            no_evidence = self._no_evidence(
                tool, f"query '{args.query}'", filters, f"as of {format_timestamp(now)}"
            )
        result = ConfigResult(kind="config", config=config if matches else [], no_evidence=no_evidence)
        return BackendResult(
            result=result,
            data_source=self._data.source_of("nginx"),
            details={"kind": "config", "total_matches": matches, "returned": len(result.config)},
        )


def _entry_item(e: LogEntry) -> LogItem:
    """A log entry as `query_logs` returns it."""
    return LogItem(
        ts=format_timestamp(e.ts), level=e.level, service=e.service, scope=e.scope, source=e.source, message=e.message
    )


def _entry_text(e: LogEntry) -> str:
    """What a query matches in a log entry: the text of its ref (`tools.refs`)."""
    return f"{format_timestamp(e.ts)} {e.level} {e.service} [{e.source}] {e.message}"


def _setting_text(name: str, value: Any) -> str:
    return f"{name} = {fmt_value(value)}"


def _status_text(name: str, value: Any) -> str:
    return f"{name}: {fmt_value(value)}"


def ref_paths_with_sources(result: BackendResult) -> dict[str, str]:
    """Every citable path of a result with its data source (helper for callers and tests)."""
    data = result.json()
    paths = enumerate_ref_paths(data)
    if "no_evidence" in data:
        paths.append(NO_EVIDENCE_PATH)
    return {p: result.ref_sources.get(p, result.data_source) for p in paths}
