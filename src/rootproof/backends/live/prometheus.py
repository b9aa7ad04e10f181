"""The live `metrics` backend: `query_metrics` over a Prometheus server's HTTP API.

One call is one `GET {url}/api/v1/query_range` of a selector built from the arguments, never
from free PromQL: a plain metric name becomes `name{labels}`, a glob (`pg_locks_*`,
`*connections*`) becomes `{__name__=~"^<regex>$", labels}` where `*` is `.*`, `?` is `.` and
every other regex metacharacter is escaped; label matches are exact, their values escaped as
PromQL string literals, and label names must be Prometheus label names.

A glob may match every series of a production Prometheus, so before its range query the call
asks for an instant `count(<selector>)` at `now` (one number back, one sample read per series)
and refuses with `BackendQueryError` ("N series match …; narrow the metric name or add labels")
when more than `MAX_GLOB_SERIES` (200) match; a refused glob never reaches `query_range`.

The window ends at the call's `now` and starts `since` earlier. The step is the smallest of
`STEPS` (at least `MIN_STEP_S`, 5 s: no scrape interval is shorter in practice) that keeps each
series at or under `MAX_POINTS` (120) points. At most `MAX_SERIES` (50) series are returned,
sorted by name and labels (SeriesItems are built for those only); when more matched, the
result's `total_matches` counts them all (absent otherwise, as in snapshot results), so the model
sees that series were left out, and `details` counts them. The body is streamed and the call
fails once it passes `target.max_bytes`; `target.timeout_s` bounds the connect, each read and
the whole call (and is passed to Prometheus as the query's `timeout`).

Results have the snapshot backend's shape and ref texts (`MetricsResult`), series converted by
`_prom_series`: each series' `metric` is `__name__`, `labels` the other labels (sorted), `unit`
inferred from the name's suffix (`unit_of`), `points` `[ts, value]` (values int when integral,
NaN/Inf dropped) and a summary.

Errors: connection refused, timeouts, HTTP 5xx, 401/403, redirects and answers that are not the
Prometheus API are `BackendUnavailable`; HTTP 400/422 (a query Prometheus refuses: its own error
text is kept), an invalid label name and an answer over `max_bytes` are `BackendQueryError`.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, ValidationError

from rootproof.backends.live._http import request_error, status_error, url_error
from rootproof.backends.live._prom_series import kept_series, number, unit_of
from rootproof.backends.query import TimeWindow
from rootproof.errors import BackendError, BackendQueryError, BackendUnavailable
from rootproof.scenarios.types import format_timestamp
from rootproof.targets import PrometheusTarget, TargetCheck, secret_of
from rootproof.tools.base import BackendResult, QueryMetricsArgs, window_start
from rootproof.tools.results import MetricsResult, Window

__all__ = [
    "MAX_GLOB_SERIES",
    "MAX_POINTS",
    "MAX_SERIES",
    "MIN_STEP_S",
    "PrometheusBackend",
    "choose_step",
    "is_glob",
    "selector_of",
    "unit_of",
]

MAX_POINTS = 120
"""Most points one series returns (the step grows with the window to keep under it)."""
MAX_SERIES = 50
"""Most series one call returns; the others are counted in `total_matches` and `details.series_dropped`."""
MAX_GLOB_SERIES = 200
"""Most series a glob may match (instant `count` at `now`) before its range query is refused."""
MIN_STEP_S = 5
"""The smallest step, seconds: finer than any usual scrape interval buys nothing."""
STEPS = (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
"""Steps a call may use, seconds (round values, so that points line up across calls)."""
MAX_ERROR_CHARS = 500
"""Most characters of a Prometheus error text kept in a message."""

_METRIC_NAME = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def _promql_string(value: str) -> str:
    """`value` as a double-quoted PromQL string literal."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'


def _glob_regex(glob: str) -> str:
    """An anchored RE2 regex matching exactly what the glob (`*`, `?`) matches."""
    if set(glob) == {"*"}:
        return "^.+$"  # Prometheus refuses a selector whose every matcher matches the empty string
    out = []
    for ch in glob:
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch.isascii() and not ch.isalnum() and ch not in "_:":
            out.append("\\" + ch)  # RE2 reads any escaped ASCII punctuation as itself
        else:
            out.append(ch)
    return "^" + "".join(out) + "$"


def is_glob(metric: str) -> bool:
    """Whether a `metric` argument is a glob (`*`, `?`): a regex `__name__` matcher, counted first."""
    return "*" in metric or "?" in metric


def selector_of(metric: str, labels: Mapping[str, str] | None) -> str:
    """The PromQL selector of a `query_metrics` call; BackendQueryError for an invalid label name."""
    matchers = []
    for name in sorted(labels or {}):
        if not _LABEL_NAME.match(name):
            raise BackendQueryError(
                f"query_metrics: {name[:100]!r} is not a Prometheus label name (letters, digits and _, not starting with a digit)"
            )
        matchers.append(f"{name}={_promql_string((labels or {})[name])}")
    if is_glob(metric):
        return "{" + ", ".join([f"__name__=~{_promql_string(_glob_regex(metric))}", *matchers]) + "}"
    if not _METRIC_NAME.match(metric):
        return "{" + ", ".join([f"__name__={_promql_string(metric)}", *matchers]) + "}"
    return metric + ("{" + ", ".join(matchers) + "}" if matchers else "")


def choose_step(window: timedelta) -> int:
    """The step (seconds) for a window: the smallest of `STEPS` giving at most `MAX_POINTS` points."""
    seconds = window.total_seconds()
    for step in STEPS:
        if step >= MIN_STEP_S and seconds / step + 1 <= MAX_POINTS:
            return step
    return max(STEPS[-1], math.ceil(seconds / (MAX_POINTS - 1)))


def _unix(ts: datetime) -> str:
    """Unix seconds with milliseconds, exact (`1785000000.123`)."""
    ms = (ts - _EPOCH) // _MS
    return f"{ms // 1000}.{ms % 1000:03d}"


def _shown(url: str) -> str:
    """A URL fit for messages: the password (if any) masked."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _filters(args: QueryMetricsArgs) -> str:
    """The no-evidence filter text, as the snapshot backend writes it."""
    parts = []
    if args.labels is not None:
        parts.append("labels=" + (",".join(f"{k}={v}" for k, v in sorted(args.labels.items())) or "any"))
    parts.append(f"since={args.since}")
    return ", ".join(parts)


class PrometheusBackend:
    """`query_metrics` against one Prometheus target (HTTP API, bearer auth from the target's secret)."""

    system: ClassVar[str] = "metrics"
    tools: ClassVar[tuple[str, ...]] = ("query_metrics",)

    def __init__(self, target: PrometheusTarget, *, environ: Mapping[str, str]) -> None:
        """Resolve the secret (ConfigError if its reference is broken) and build the HTTP client; no I/O."""
        self.target = target
        self._base = target.url.rstrip("/")
        self._shown = _shown(self._base)
        token = secret_of(target, environ)
        headers = {"Accept": "application/json", "User-Agent": "rootproof"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(
            timeout=httpx.Timeout(target.timeout_s), headers=headers, follow_redirects=False, trust_env=False
        )
        self._closed = False

    # -- seam ----------------------------------------------------------------------------------

    def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
        """Answer one `query_metrics` call over the window ending at `now`."""
        if tool != "query_metrics":
            raise BackendError(f"the metrics backend does not serve {tool!r} (it serves query_metrics)")
        if not isinstance(args, QueryMetricsArgs):
            try:
                args = QueryMetricsArgs.model_validate(args.model_dump())
            except ValidationError as exc:
                raise BackendError(f"{tool}: arguments are not QueryMetricsArgs: {exc}") from exc
        if now.tzinfo is None:
            raise BackendError(f"{tool}: the run's clock must be timezone-aware (got {now.isoformat()})")
        now = now.astimezone(UTC)
        window = TimeWindow(start=window_start(now, args.since), end=now)
        promql = selector_of(args.metric, args.labels)
        step = choose_step(window.end - window.start)
        started = time.monotonic()
        counted = self._count_glob(args, promql, now) if is_glob(args.metric) else None
        data, bytes_read, warnings = self._get(
            "/api/v1/query_range",
            {
                "query": promql,
                "start": _unix(window.start),
                "end": _unix(window.end),
                "step": f"{step}s",
                "timeout": f"{self.target.timeout_s:g}",  # seconds; Prometheus reads a float
            },
        )
        raw = data.get("result") if isinstance(data, dict) else None
        if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(raw, list):
            raise BackendUnavailable(f"{self._where()}: query_range did not answer a matrix")
        kept, total = kept_series(raw, MAX_SERIES)
        shown = Window(from_=format_timestamp(window.start), to=format_timestamp(window.end))
        result = MetricsResult(window=shown, series=kept, total_matches=total if total > len(kept) else None)
        if not kept:
            result = MetricsResult(
                window=result.window,
                no_evidence=f"query_metrics found no match for metric '{args.metric}' ({_filters(args)}"
                + (f"; {len(raw)} series matched with no finite value" if raw else "")
                + f") in window {window.text()}",
            )
        return BackendResult(
            result=result,
            data_source=f"live:{self.target.name}",
            details={
                "target": self.target.name,
                "elapsed_ms": round((time.monotonic() - started) * 1000, 1),
                "bytes_read": bytes_read,
                "query": promql,
                "step": f"{step}s",
                "series": len(kept),
                "series_total": total,
                "series_dropped": total - len(kept),
                "series_empty": len(raw) - total,
                **({"series_counted": counted} if counted is not None else {}),
                "points": sum(len(s.points) for s in kept),
                **({"warnings": warnings} if warnings else {}),
            },
        )

    def check(self) -> TargetCheck:
        """Ready (`/-/ready`, else `/api/v1/status/buildinfo`) and scraping (`/api/v1/targets`); never raises."""
        name, kind = self.target.name, self.target.kind
        try:
            try:
                self._get_text("/-/ready")
            except BackendError:
                self._get("/api/v1/status/buildinfo", {})
        except BackendError as exc:
            return TargetCheck(name=name, kind=kind, usable=False, problem=str(exc))
        except Exception as exc:  # never raises
            return TargetCheck(name=name, kind=kind, usable=False, problem=f"{self._where()}: {type(exc).__name__}")
        warnings: list[str] = []
        try:
            data, _, _ = self._get("/api/v1/targets", {"state": "active"})
            active = data.get("activeTargets") if isinstance(data, dict) else None
            if not isinstance(active, list):
                warnings.append("/api/v1/targets did not list active targets")
            else:
                up = [t for t in active if isinstance(t, dict) and t.get("health") == "up"]
                if not active:
                    warnings.append("Prometheus has no active scrape targets: query_metrics will find little")
                elif not up:
                    warnings.append(f"no scrape target is up ({len(active)} active): query_metrics will find little")
                elif len(up) < len(active):
                    down = [str(t.get("scrapeUrl", "?"))[:200] for t in active if t not in up][:5]
                    warnings.append(f"{len(active) - len(up)} of {len(active)} scrape targets are down: {', '.join(down)}")
        except BackendError as exc:
            warnings.append(f"cannot list scrape targets: {exc}")
        except Exception as exc:  # never raises: whatever else went wrong is a warning
            warnings.append(f"cannot list scrape targets: {type(exc).__name__}")
        return TargetCheck(name=name, kind=kind, usable=True, warnings=warnings)

    def close(self) -> None:
        """Close the HTTP client; idempotent."""
        if not self._closed:
            self._closed = True
            self._client.close()

    # -- HTTP ----------------------------------------------------------------------------------

    def _where(self) -> str:
        return f"Prometheus {self.target.name} ({self._shown})"

    def _read(self, path: str, params: Mapping[str, str]) -> tuple[int, bytes]:
        """Status and body of one GET, the body bounded by max_bytes and the call by timeout_s."""
        if self._closed:
            raise BackendError(f"{self._where()}: the backend is closed")
        if (bad := url_error(self._base + path, where=self._where())) is not None:
            raise bad
        limit, deadline = self.target.max_bytes, time.monotonic() + self.target.timeout_s
        chunks: list[bytes] = []
        size = 0
        try:
            with self._client.stream("GET", self._base + path, params=params) as resp:
                length = resp.headers.get("content-length", "")
                if length.isdigit() and int(length) > limit:
                    raise BackendQueryError(f"{self._where()}: the answer has {length} bytes, more than max_bytes={limit}; narrow the metric or add labels")
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > limit:
                        raise BackendQueryError(f"{self._where()}: the answer passed max_bytes={limit} bytes; narrow the metric or add labels")
                    if time.monotonic() > deadline:
                        raise BackendUnavailable(f"{self._where()}: no complete answer within {self.target.timeout_s:g}s")
                    chunks.append(chunk)
                return resp.status_code, b"".join(chunks)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # mapped as every live HTTP backend maps it (_http)
            raise request_error(exc, where=self._where(), timeout_s=self.target.timeout_s) from None

    def _get_text(self, path: str) -> str:
        status, body = self._read(path, {})
        if (error := status_error(status, body, where=self._where(), path=path)) is not None:
            raise error
        return body.decode("utf-8", "replace")

    def _get(self, path: str, params: Mapping[str, str]) -> tuple[Any, int, list[str]]:
        """The `data` of a Prometheus API answer, the bytes read and its warnings (partial data, …); errors mapped."""
        status, body = self._read(path, params)
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if (error := status_error(status, body, where=self._where(), path=path)) is not None:
            raise error
        if not isinstance(doc, dict) or doc.get("status") != "success" or "data" not in doc:
            raise BackendUnavailable(f"{self._where()}: GET {path} did not answer the Prometheus API (status=success, data)")
        warnings = doc.get("warnings")
        shown = [_brief(str(w))[:200] for w in warnings[:5]] if isinstance(warnings, list) else []
        return doc["data"], len(body), shown

    def _count_glob(self, args: QueryMetricsArgs, promql: str, now: datetime) -> int:
        """How many series a glob's selector matches at `now` (instant `count`); BackendQueryError over `MAX_GLOB_SERIES`."""
        data, _, _ = self._get(
            "/api/v1/query",
            {"query": f"count({promql})", "time": _unix(now), "timeout": f"{self.target.timeout_s:g}"},
        )
        raw = data.get("result") if isinstance(data, dict) else None
        if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(raw, list):
            raise BackendUnavailable(f"{self._where()}: count({promql}) did not answer a vector")
        value = raw[0].get("value") if raw and isinstance(raw[0], dict) else None
        count = number(value[1]) if isinstance(value, list) and len(value) == 2 else 0
        matched = int(count) if count is not None else 0
        limit = MAX_GLOB_SERIES
        if matched > limit:
            raise BackendQueryError(
                f"{self._where()}: {matched} series match metric '{args.metric}' ({_filters(args)}), more than the "
                f"{limit} one query_metrics call may read; narrow the metric name (a longer prefix or suffix than "
                f"'{args.metric}') or add labels (job, instance, …) and ask again"
            )
        return matched


def _brief(text: str) -> str:
    """An error text cut to `MAX_ERROR_CHARS`, on one line."""
    one = " ".join(text.split())
    return one if len(one) <= MAX_ERROR_CHARS else one[: MAX_ERROR_CHARS - 1] + "…"

