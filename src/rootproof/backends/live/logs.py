"""The live logs backend: `query_logs` over application log files (jsonl, logfmt, regex) and Loki.

Files: each logs target's globs, newest file (modification time) first, each read from its end,
at most the target's `max_bytes` per call in all (`details.per_target.<name>.truncated` and
`details.truncated` say when older lines were left unread); files last modified before the
window starts are not read. Lines become records as `logparse` describes; `source` is the file
name, `scope` the target's. Loki: `loki.LokiClient` (LogQL from the target's selector and
the call's service only: query terms are matched here, as for files, since they may match a
label or only after case folding; when Loki's line limit is reached,
`details.per_target.<name>.limit_reached` and the no-evidence text say which older part of
the window was not searched); each line is parsed as jsonl or logfmt when it looks like one,
else taken as a plain message with the stream's labels for service (`service_label`, else
`job`) and level; `source` is `loki`, scope the stream's `scope` label or APPLICATION.

A message longer than `tailfile.MAX_RECORD_CHARS` is cut, saying so.

Entries from every target are merged, then filtered (window, service, scope, minimum level,
query terms with `backends.query` semantics) and ordered (most distinct terms, newest, as read)
and paged as the snapshot backend does. `data_source` is `live:<first target>`; entries of
other targets carry theirs in `ref_sources`. A failing target is skipped and named in
`details.unavailable` / `details.errors` (and in `no_evidence`, so an empty answer is never
mistaken for an absence); only when every target fails does the call raise.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, get_args

from pydantic import BaseModel, ValidationError

from rootproof.backends.live.logparse import LineParser, Record, normalise_level
from rootproof.backends.live.loki import LOKI_LIMIT, LokiClient, LokiLine, build_logql
from rootproof.backends.live.tailfile import MAX_RECORD_CHARS, cut_record, newest_first, read_tail
from rootproof.backends.query import TextQuery, TimeWindow, fold, order_matches, parse_query
from rootproof.errors import BackendError, BackendQueryError, BackendUnavailable, ConfigError
from rootproof.scenarios.types import format_timestamp
from rootproof.targets import LogsTarget, LokiTarget, TargetCheck
from rootproof.tools.base import LEVEL_ORDER, BackendResult, LogScope, QueryLogsArgs, window_start
from rootproof.tools.results import LogItem, LogsResult, Window

__all__ = ["LogsBackend"]

_SCOPES: tuple[str, ...] = get_args(LogScope)
_LOGFMT_HINT = re.compile(r"(?:^|\s)(?:level|lvl|msg|message|ts|time)=")
_CHECK_BYTES = 64 * 1024
COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip")
"""Rotated files with these suffixes are skipped (they cannot be read from the end)."""


@dataclass(slots=True, kw_only=True)  # not frozen: one is made per line read, and frozen init costs
class _Entry:
    record: Record
    source: str
    scope: str
    target: str

    def item(self) -> LogItem:
        r = self.record
        return LogItem(ts=format_timestamp(r.ts), level=r.level, service=r.service, scope=self.scope, source=self.source, message=r.message)

    def text(self) -> str:
        """The ref text of the entry (`tools.refs`), what a query matches."""
        r = self.record
        return f"{format_timestamp(r.ts)} {r.level} {r.service} [{self.source}] {r.message}"


def _cut(r: Record) -> Record:
    """`r` with its message cut at `MAX_RECORD_CHARS` (saying so)."""
    if len(r.message) <= MAX_RECORD_CHARS:
        return r
    return Record(ts=r.ts, level=r.level, service=r.service, message=cut_record(r.message))


def _parser_of(t: LogsTarget) -> LineParser:
    pattern = None
    if t.format == "regex":
        if not t.pattern:
            raise ConfigError(f"targets: {t.name}: pattern: format regex needs a pattern with named groups (ts, message, …)")
        try:
            pattern = re.compile(t.pattern)
        except re.error as exc:
            raise ConfigError(f"targets: {t.name}: pattern: not a valid regex ({exc})") from exc
        if "ts" not in pattern.groupindex and t.fields.get("ts") not in pattern.groupindex:
            raise ConfigError(f"targets: {t.name}: pattern: needs a named group for the time (?P<ts>…)")
    return LineParser(fmt=t.format, service=t.service, fields=t.fields, pattern=pattern)


def _filters(args: QueryLogsArgs) -> str:
    parts = [f"{name}={getattr(args, name)}" for name in ("service", "scope", "level", "since") if getattr(args, name) is not None]
    return ", ".join(parts)


class LogsBackend:
    """`query_logs` over every logs and Loki target (see the module docstring)."""

    system: ClassVar[str] = "logs"
    tools: ClassVar[tuple[str, ...]] = ("query_logs",)

    def __init__(self, targets: Sequence[LogsTarget | LokiTarget], *, environ: Mapping[str, str]) -> None:
        if not targets:
            raise ConfigError("targets: the logs backend needs at least one logs or loki target")
        self._targets = list(targets)
        self._source = f"live:{self._targets[0].name}"
        self._parsers: dict[str, LineParser] = {}
        self._loki: dict[str, LokiClient] = {}
        self._loki_parsers = {
            fmt: LineParser(fmt=fmt, service="-", fields={}) for fmt in ("jsonl", "logfmt")
        }
        for t in self._targets:
            if isinstance(t, LokiTarget):
                self._loki[t.name] = LokiClient(t, environ=environ)
            else:
                self._parsers[t.name] = _parser_of(t)

    # -- seam ----------------------------------------------------------------------------------

    def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
        """Answer one `query_logs` call over every target; raises only when every target failed."""
        if tool not in self.tools:
            raise BackendError(f"the logs backend does not serve {tool!r} (it serves query_logs)")
        if not isinstance(args, QueryLogsArgs):
            try:
                args = QueryLogsArgs.model_validate(args.model_dump())
            except ValidationError as exc:
                raise BackendError(f"{tool}: arguments are not QueryLogsArgs: {exc}") from exc
        if now.tzinfo is None:
            raise BackendError(f"{tool}: the run's clock must be timezone-aware (got {now.isoformat()})")
        started = time.monotonic()
        now = now.astimezone(UTC)
        window = TimeWindow(start=window_start(now, args.since), end=now)
        query = parse_query(args.query)
        entries: list[_Entry] = []
        per_target: dict[str, dict[str, Any]] = {}
        unavailable: list[str] = []
        errors: dict[str, str] = {}
        notes: list[str] = []
        for t in self._targets:
            try:
                if isinstance(t, LokiTarget):
                    got, info = self._from_loki(t, args, window)
                    if info["limit_reached"]:
                        notes.append(
                            f"Loki's line limit ({LOKI_LIMIT}) was reached for {t.name}: lines before "
                            f"{info['searched_from']} were not searched (narrow since or name a service)"
                        )
                elif args.scope not in ("ALL", t.scope):
                    got, info = [], {"skipped": f"scope {t.scope}"}
                else:
                    got, info = self._from_files(t, window)
                    if info.get("no_files"):
                        notes.append(f"the target {t.name} matches no files ({', '.join(t.paths)})")
            except BackendUnavailable as exc:
                unavailable.append(t.name)
                errors[t.name] = str(exc)
                continue
            except BackendQueryError as exc:
                errors[t.name] = str(exc)
                continue
            entries.extend(got)
            per_target[t.name] = info
        if len(errors) == len(self._targets):
            kind = BackendUnavailable if unavailable else BackendQueryError
            raise kind("query_logs: every logs target failed: " + "; ".join(errors.values()))
        ordered = self._select(entries, args, window, query)
        page = ordered[args.offset : args.offset + args.limit]
        no_evidence = None
        if not page:
            filters = _filters(args)
            if ordered:
                filters += f"; {len(ordered)} matches, none at offset {args.offset}"
            for note in notes:
                filters += f"; {note}"
            if errors:
                filters += "; not searched: " + ", ".join(
                    f"{name} ({'unavailable' if name in unavailable else 'failed'})" for name in errors
                )
            no_evidence = f"query_logs found no match for query '{args.query}' ({filters}) in window {window.text()}"
        result = LogsResult(
            window=Window(from_=format_timestamp(window.start), to=format_timestamp(window.end)),
            total_matches=len(ordered),
            entries=[e.item() for e in page],
            no_evidence=no_evidence,
        )
        first = self._targets[0].name
        sources = {f"$.entries[{i}]": f"live:{e.target}" for i, e in enumerate(page) if e.target != first}
        details: dict[str, Any] = {
            "targets": [t.name for t in self._targets],
            "elapsed_ms": round((time.monotonic() - started) * 1000, 1),
            "bytes_read": sum(int(i.get("bytes_read", 0)) for i in per_target.values()),
            "truncated": any(bool(i.get("truncated")) for i in per_target.values()),
            "per_target": per_target,
            "total_matches": len(ordered),
            "returned": len(page),
        }
        if unavailable:
            details["unavailable"] = unavailable
        if errors:
            details["errors"] = errors
        return BackendResult(result=result, data_source=self._source, ref_sources=sources, details=details)

    def checks(self) -> list[TargetCheck]:
        """One check per target (files readable and parsable, Loki `/ready`); never raises."""
        return [self._check_loki(t) if isinstance(t, LokiTarget) else self._check_files(t) for t in self._targets]

    def check(self) -> TargetCheck:
        """All targets as one check (`name: logs`): usable when any target is; per-target problems as warnings."""
        checks = self.checks()
        warnings = [f"{c.name}: {w}" for c in checks for w in ([c.problem] if c.problem else []) + c.warnings]
        usable = any(c.usable for c in checks)
        problem = None if usable else "no logs target is usable: " + "; ".join(warnings)
        return TargetCheck(name="logs", kind="logs", usable=usable, problem=problem, warnings=warnings)

    def close(self) -> None:
        """Close the Loki clients; idempotent."""
        for client in self._loki.values():
            client.close()

    # -- sources -------------------------------------------------------------------------------

    def _from_files(self, t: LogsTarget, window: TimeWindow) -> tuple[list[_Entry], dict[str, Any]]:
        files = newest_first(t.paths)
        info: dict[str, Any] = {"files": [], "bytes_read": 0, "truncated": False, "lines": 0, "unparsed": 0}
        if not files:
            info["no_files"] = True
            return [], info
        parser = self._parsers[t.name]
        budget = t.max_bytes
        entries: list[_Entry] = []
        failed: list[BackendQueryError] = []
        read = 0
        for path, mtime in files:
            if mtime < window.start.timestamp():
                break  # this file and every older one end before the window
            if path.suffix.lower() in COMPRESSED:
                info.setdefault("compressed_skipped", []).append(path.name)
                continue
            if budget <= 0:
                info["truncated"] = True
                break
            try:
                tail = read_tail(path, budget)
            except BackendQueryError as exc:
                failed.append(exc)
                continue
            read += 1
            budget -= tail.bytes_read
            parsed = parser.parse(tail.lines)
            info["files"].append(path.name)
            info["bytes_read"] += tail.bytes_read
            info["lines"] += len(tail.lines)
            info["unparsed"] += parsed.unparsed
            name = path.name
            entries.extend([_Entry(record=_cut(r), source=name, scope=t.scope, target=t.name) for r in parsed.records])
            if tail.truncated:
                info["truncated"] = True
                break
        if failed and not read:
            raise failed[0]
        if failed:
            info["unreadable"] = [str(exc) for exc in failed]
        return entries, info

    def _from_loki(self, t: LokiTarget, args: QueryLogsArgs, window: TimeWindow) -> tuple[list[_Entry], dict[str, Any]]:
        logql = build_logql(t.selector, service_label=t.service_label, service=args.service)
        lines, size = self._loki[t.name].query_range(logql, window)
        entries = [e for e in (self._loki_entry(t, ln) for ln in lines) if e is not None]
        info: dict[str, Any] = {"logql": logql, "bytes_read": size, "lines": len(lines), "limit_reached": len(lines) >= LOKI_LIMIT}
        if info["limit_reached"]:
            oldest = min((ln.ts for ln in lines), default=window.start)
            info["searched_from"] = format_timestamp(oldest)
            info["truncated"] = True
        return entries, info

    def _loki_entry(self, t: LokiTarget, ln: LokiLine) -> _Entry | None:
        labels = ln.labels
        stripped = ln.line.strip()
        record: Record | None = None
        fields: Mapping[str, Any] | None = None
        fmt = "jsonl" if stripped.startswith("{") else "logfmt" if _LOGFMT_HINT.search(stripped) else None
        if fmt is not None:
            fields = self._loki_parsers[fmt].fields_of(stripped)
        service = labels.get(t.service_label) or labels.get("job") or t.name
        if fields is not None:
            record = self._loki_parsers[fmt or "jsonl"].record(fields, ts=ln.ts, labels=labels, service_label=t.service_label)
            if record is not None and record.service == "-":
                record = Record(ts=record.ts, level=record.level, service=service, message=record.message)
        if record is None:
            level = next((labels[k] for k in ("level", "detected_level", "severity", "lvl") if labels.get(k)), None)
            record = Record(ts=ln.ts, level=normalise_level(level), service=service, message=ln.line)
        scope = labels.get("scope", "").upper()
        return _Entry(record=_cut(record), source="loki", scope=scope if scope in _SCOPES else "APPLICATION", target=t.name)

    # -- selection -----------------------------------------------------------------------------

    @staticmethod
    def _select(entries: list[_Entry], args: QueryLogsArgs, window: TimeWindow, query: TextQuery) -> list[_Entry]:
        minimum = LEVEL_ORDER[args.level] if args.level else 0
        candidates: list[tuple[int, datetime | None, _Entry]] = []
        for e in entries:
            r = e.record
            if not window.start <= r.ts <= window.end or (args.service is not None and r.service != args.service):
                continue
            if (args.scope != "ALL" and e.scope != args.scope) or LEVEL_ORDER[r.level] < minimum:
                continue
            if query.empty:
                candidates.append((0, r.ts, e))
            elif score := query.score_folded(fold(e.text())):
                candidates.append((score, r.ts, e))
        return order_matches(candidates)

    # -- checks --------------------------------------------------------------------------------

    def _check_files(self, t: LogsTarget) -> TargetCheck:
        files = newest_first(t.paths)
        if not files:
            return TargetCheck(name=t.name, kind="logs", usable=True, warnings=[f"the globs {', '.join(t.paths)} match no file yet"])
        warnings: list[str] = []
        readable = 0
        for path, _ in [f for f in files if f[0].suffix.lower() not in COMPRESSED][:20]:
            try:
                tail = read_tail(path, _CHECK_BYTES)
            except BackendQueryError as exc:
                warnings.append(str(exc))
                continue
            if not readable and tail.lines and not self._parsers[t.name].parse(tail.lines).records:
                warnings.append(f"no line of the newest {_CHECK_BYTES // 1024} KiB of {path} is a {t.format} record with a time")
            readable += 1
        if not readable:
            return TargetCheck(name=t.name, kind="logs", usable=False, problem="; ".join(warnings), warnings=warnings)
        return TargetCheck(name=t.name, kind="logs", usable=True, warnings=warnings)

    def _check_loki(self, t: LokiTarget) -> TargetCheck:
        try:
            self._loki[t.name].ready()
        except BackendError as exc:
            return TargetCheck(name=t.name, kind="loki", usable=False, problem=str(exc))
        return TargetCheck(name=t.name, kind="loki", usable=True)

    def __repr__(self) -> str:
        return f"LogsBackend({[t.name for t in self._targets]})"

