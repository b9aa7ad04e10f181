"""The live nginx backend: `inspect_nginx` over a server's error log, access log, config and stub_status.

- `error_log`, `access_log`: the files named by the target, read from their end (at most
  `max_bytes` per call), one raw line per `lines[]` item (cut at `tailfile.MAX_RECORD_CHARS`,
  saying so), windowed on each line's own time:
  `2026/12/01 12:00:00 [error] …` (the server's local time, which is this machine's when the
  file is local) and `[01/Dec/2026:12:00:00 +0000]` (`$time_local`, or an ISO 8601
  `$time_iso8601` anywhere in the line). A line without a time of its own continues the line
  before it and takes its time; one with no line before it in the part read is dropped
  (`details.unparsed`). Access lines that carry a time but do not fit `access_format` are kept
  and counted (`details.format_mismatch`): a changed `log_format` must not hide evidence.
- `config`: the file's lines whole, as the snapshot returns them (line number = index + 1), the
  first `max_bytes` at most; `include` directives are not followed (their arguments are listed
  in `details.includes`), so a ref's line number is always a line of the named file.
- `status`: `GET status_url` (stub_status) → active, accepts, handled, requests, reading,
  writing, waiting — the field names the snapshot scenarios use. HTTP failures are mapped as
  `_http` describes (a page that is not stub_status's is `BackendUnavailable`).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, ValidationError

from rootproof.backends.live._http import get_bounded, make_client, not_api
from rootproof.backends.live.tailfile import cut_record, read_head, read_tail
from rootproof.backends.query import TimeWindow, order_matches, parse_query
from rootproof.errors import BackendError, BackendQueryError
from rootproof.scenarios.types import format_timestamp
from rootproof.targets import NginxTarget, TargetCheck
from rootproof.tools.base import BackendResult, InspectNginxArgs, window_start
from rootproof.tools.refs import fmt_value
from rootproof.tools.results import ConfigResult, LinesResult, StatusResult, Window

__all__ = ["NginxBackend", "access_line_fits", "line_time", "parse_stub_status"]

_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_ERROR_TS = re.compile(r"^(\d{4})/(\d{2})/(\d{2}) (\d{2}):(\d{2}):(\d{2}) \[")
_ACCESS_TS = re.compile(r"\[(\d{2})/([A-Z][a-z]{2})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})\]")
_ISO_TS = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:Z|[+-]\d{2}:?\d{2})")
_Q = r'"(?:[^"\\]|\\.)*"'
_COMBINED = rf"^\S+ \S+ \S+ \[[^\]]+\] {_Q} \d{{3}} (?:\d+|-) {_Q} {_Q}"
_MULTI = r"\S+(?:(?:, | : )\S+)*"
ACCESS_FORMATS: dict[str, re.Pattern[str]] = {
    "combined": re.compile(_COMBINED + r"$"),
    "upstream": re.compile(_COMBINED + rf" {_MULTI} {_MULTI}$"),
}
"""What a line of each `access_format` looks like (`upstream` = combined + `$upstream_response_time $upstream_status`)."""
_STATUS = (
    (re.compile(r"Active connections:\s*(\d+)"), ("active",)),
    (re.compile(r"server accepts handled requests\s+(\d+)\s+(\d+)\s+(\d+)"), ("accepts", "handled", "requests")),
    (re.compile(r"Reading:\s*(\d+)\s+Writing:\s*(\d+)\s+Waiting:\s*(\d+)"), ("reading", "writing", "waiting")),
)
_INCLUDE = re.compile(r"^\s*include\s+([^;#]+);")


def line_time(kind: str, text: str, cache: dict[tuple[int, str], datetime | None] | None = None) -> datetime | None:
    """The time nginx wrote on an error_log or access_log line (UTC); None if it carries none.

    `cache`: the times already converted in this call, by the text of the time (a log's lines
    share their seconds; a local-time conversion costs more than the rest of the line)."""
    if kind == "error_log":
        m = _ERROR_TS.match(text)
        branch = 0
    elif m := _ACCESS_TS.search(text):
        branch = 1
    else:
        m = _ISO_TS.search(text)
        branch = 2
    if m is None:
        return None
    if cache is None:
        return _convert(branch, m)
    key = (branch, m.group(0))
    if key not in cache:
        cache[key] = _convert(branch, m)
    return cache[key]


def _convert(branch: int, m: re.Match[str]) -> datetime | None:
    try:
        if branch == 0:
            y, mo, d, h, mi, s = (int(g) for g in m.groups())
            return datetime(y, mo, d, h, mi, s).astimezone().astimezone(UTC)  # local time, as nginx writes it
        if branch == 1:
            day, mon, year, hh, mm, ss, sign, oh, om = m.groups()
            offset = timedelta(hours=int(oh), minutes=int(om))
            tz = timezone(-offset if sign == "-" else offset)
            return datetime(int(year), _MONTHS[mon], int(day), int(hh), int(mm), int(ss), tzinfo=tz).astimezone(UTC)
        return datetime.fromisoformat(m.group(0)).astimezone(UTC)
    except (KeyError, ValueError, OverflowError):
        return None


def access_line_fits(access_format: str, line: str) -> bool:
    """Whether an access log line has the shape of `access_format`."""
    return bool(ACCESS_FORMATS[access_format].match(line))


def parse_stub_status(text: str) -> dict[str, int]:
    """stub_status' page → `{active, accepts, handled, requests, reading, writing, waiting}`; ValueError if it is not one."""
    out: dict[str, int] = {}
    for pattern, names in _STATUS:
        m = pattern.search(text)
        if m is None:
            raise ValueError(f"not a stub_status page (no match for {pattern.pattern!r})")
        out.update(zip(names, (int(g) for g in m.groups()), strict=True))
    return out


def masked_url(url: str) -> str:
    """`url` without a user or password, for messages."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    except ValueError:
        return "(unparsable URL)"


class NginxBackend:
    """`inspect_nginx` on one nginx target (see the module docstring)."""

    system: ClassVar[str] = "nginx"
    tools: ClassVar[tuple[str, ...]] = ("inspect_nginx",)

    def __init__(self, target: NginxTarget, *, environ: Mapping[str, str]) -> None:
        self._target = target
        self._source = f"live:{target.name}"
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()  # calls may run in parallel threads; one client is shared

    # -- seam ----------------------------------------------------------------------------------

    def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
        """Answer one `inspect_nginx` call; BackendUnavailable / BackendQueryError on failure."""
        if tool not in self.tools:
            raise BackendError(f"the nginx backend does not serve {tool!r} (it serves inspect_nginx)")
        if not isinstance(args, InspectNginxArgs):
            try:
                args = InspectNginxArgs.model_validate(args.model_dump())
            except ValidationError as exc:
                raise BackendError(f"{tool}: arguments are not InspectNginxArgs: {exc}") from exc
        if now.tzinfo is None:
            raise BackendError(f"{tool}: the run's clock must be timezone-aware (got {now.isoformat()})")
        now = now.astimezone(UTC)
        started = time.monotonic()
        if args.kind in ("error_log", "access_log"):
            out = self._lines(args, now)
        elif args.kind == "config":
            out = self._config(args, now)
        else:
            out = self._status(args, now)
        out.details["elapsed_ms"] = round((time.monotonic() - started) * 1000, 1)
        return out

    def check(self) -> TargetCheck:
        """Which of the target's sources are usable; never raises."""
        t = self._target
        warnings: list[str] = []
        usable = 0
        for kind, path in (("error_log", t.error_log), ("access_log", t.access_log), ("config", t.config)):
            if path is None:
                continue
            try:
                tail = read_tail(path, 64 * 1024) if kind != "config" else read_head(path, 4096)
            except BackendQueryError as exc:
                warnings.append(f"{kind}: {exc}")
                continue
            usable += 1
            if kind == "access_log" and tail.lines and not access_line_fits(t.access_format, tail.lines[-1]):
                warnings.append(f"access_log: the newest line of {path} is not in the {t.access_format} format")
        if t.status_url is not None:
            try:
                self._fetch_status()
                usable += 1
            except BackendError as exc:
                warnings.append(f"status: {exc}")
            except Exception as exc:  # check() never raises
                warnings.append(f"status: {type(exc).__name__}")
        if not (t.error_log or t.access_log or t.config or t.status_url):
            return TargetCheck(name=t.name, kind="nginx", usable=False, problem="no error_log, access_log, config or status_url is configured")
        if not usable:
            return TargetCheck(name=t.name, kind="nginx", usable=False, problem="; ".join(warnings), warnings=warnings)
        return TargetCheck(name=t.name, kind="nginx", usable=True, warnings=warnings)

    def close(self) -> None:
        """Close the HTTP client; idempotent."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # -- kinds ---------------------------------------------------------------------------------

    def _no_evidence(self, args: InspectNginxArgs, filters: str, where: str) -> str:
        return f"inspect_nginx found no match for query '{args.query}' ({filters}) {where}"

    def _lines(self, args: InspectNginxArgs, now: datetime) -> BackendResult:
        t = self._target
        window = TimeWindow(start=window_start(now, args.since), end=now)
        path = t.error_log if args.kind == "error_log" else t.access_log
        details: dict[str, Any] = {"target": t.name, "kind": args.kind, "bytes_read": 0}
        candidates: list[tuple[int, datetime | None, str]] = []
        if path is not None:
            tail = read_tail(path, t.max_bytes)
            details.update(path=str(path), bytes_read=tail.bytes_read, truncated=tail.truncated, lines_scanned=len(tail.lines))
            query = parse_query(args.query)
            last: datetime | None = None
            unparsed = mismatch = 0
            times: dict[tuple[int, str], datetime | None] = {}
            for line in tail.lines:
                ts = line_time(args.kind, line, times)
                if ts is None:
                    if last is None:
                        unparsed += 1
                        continue
                    ts = last
                elif args.kind == "access_log" and not access_line_fits(t.access_format, line):
                    mismatch += 1
                last = ts
                if not window.start <= ts <= window.end:
                    continue
                line = cut_record(line)
                score = 0 if query.empty else query.score(line)
                if query.empty or score:
                    candidates.append((score, ts, line))
            details.update(unparsed=unparsed, format_mismatch=mismatch)
        ordered = order_matches(candidates)
        page = ordered[args.offset : args.offset + args.limit]
        details.update(total_matches=len(ordered), returned=len(page))
        no_evidence = None
        if not page:
            filters = f"kind={args.kind}, since={args.since}"
            if ordered:
                filters += f"; {len(ordered)} matches, none at offset {args.offset}"
            if path is None:
                filters += f"; the target {t.name} has no {args.kind} configured"
            no_evidence = self._no_evidence(args, filters, f"in window {window.text()}")
        result = LinesResult(
            kind=args.kind,
            window=Window(from_=format_timestamp(window.start), to=format_timestamp(window.end)),
            total_matches=len(ordered),
            lines=page,
            no_evidence=no_evidence,
        )
        return BackendResult(result=result, data_source=self._source, details=details)

    def _config(self, args: InspectNginxArgs, now: datetime) -> BackendResult:
        t = self._target
        details: dict[str, Any] = {"target": t.name, "kind": "config", "bytes_read": 0}
        lines: list[str] = []
        if t.config is not None:
            head = read_head(t.config, t.max_bytes)
            lines = [cut_record(line) for line in head.lines]
            includes = [m.group(1).strip() for line in lines if (m := _INCLUDE.match(line))]
            details.update(path=str(t.config), bytes_read=head.bytes_read, truncated=head.truncated, includes=includes)
        query = parse_query(args.query)
        matches = sum(1 for line in lines if query.empty or query.score(line))
        no_evidence = None
        if not matches:
            filters = "kind=config" + ("" if t.config is not None else f"; the target {t.name} has no config configured")
            no_evidence = self._no_evidence(args, filters, f"as of {format_timestamp(now)}")
        result = ConfigResult(kind="config", config=lines if matches else [], no_evidence=no_evidence)
        details.update(total_matches=matches, returned=len(result.config))
        return BackendResult(result=result, data_source=self._source, details=details)

    def _status(self, args: InspectNginxArgs, now: datetime) -> BackendResult:
        t = self._target
        details: dict[str, Any] = {"target": t.name, "kind": "status", "bytes_read": 0}
        fields: dict[str, int] = {}
        if t.status_url is not None:
            fields, size = self._fetch_status()
            details.update(url=masked_url(t.status_url), bytes_read=size)
        query = parse_query(args.query)
        chosen: dict[str, str | int | float | bool | None] = {
            k: v for k, v in fields.items() if query.empty or query.score(f"{k}: {fmt_value(v)}")
        }
        no_evidence = None
        if not chosen:
            filters = "kind=status" + ("" if t.status_url is not None else f"; the target {t.name} has no status_url configured")
            no_evidence = self._no_evidence(args, filters, f"as of {format_timestamp(now)}")
        details.update(total_matches=len(chosen), returned=len(chosen))
        return BackendResult(result=StatusResult(kind="status", status=chosen, no_evidence=no_evidence), data_source=self._source, details=details)

    def _fetch_status(self) -> tuple[dict[str, int], int]:
        t = self._target
        assert t.status_url is not None
        where = f"nginx status {masked_url(t.status_url)}"
        with self._lock:
            if self._client is None:
                self._client = make_client(timeout_s=t.timeout_s)
            client = self._client
        try:
            path = urlsplit(t.status_url).path or "/"
        except ValueError:
            path = "/"
        body = get_bounded(client, t.status_url, where=where, path=path, max_bytes=t.max_bytes, timeout_s=t.timeout_s)
        try:
            return parse_stub_status(body.decode("utf-8", errors="replace")), len(body)
        except ValueError:
            raise not_api(where, path, "a stub_status page") from None
