"""The live Redis backend: `inspect_redis` over one observer connection.

The observer connection is opened when the backend is built, so that a server that later
reaches `maxclients` (and refuses every new client) can still be read: the connection opened
before keeps answering INFO and CLIENT LIST. Opening it never raises there; a failure is kept
and the next call tries again. redis-py's own retries are off (a refused connect is tried once,
so the backend adds one rejection to the server's counters, not eleven), and every connect and
reply is bounded by the target's `timeout_s`. When a connection kept from an earlier call turns
out dead (the server restarted, or closed it as idle under `timeout`), the call opens one fresh
connection and tries once more; it never loops.

Kinds (results as the snapshot backend returns them, ref texts alike; `_redis_text` documents
the text formats):
- `info`: `INFO all` as section → field → value; the query matches `# <section>` and
  `<field>:<value>`, like the snapshot backend.
- `clients`: `CLIENT LIST` rows, without the observer's own connection; paged. A reply longer
  than the target's `max_bytes` is cut at a line boundary (`details.truncated_at_bytes`).
- `slowlog`: `SLOWLOG GET 128`, one line per entry, windowed on the entry's time; paged.
- `config`: `CONFIG GET` of `CONFIG_NAMES` (values as text, as CONFIG GET prints them). Secrets
  (`requirepass`, `masterauth`, TLS key passphrases) are never returned, whatever matched.
- `log`: the target's `log` file, its last `max_bytes` read, windowed on each line's time.

Only read commands are sent (INFO, CLIENT ID, CLIENT LIST, SLOWLOG GET/LEN, CONFIG GET, PING, and
the handshake's AUTH, SELECT and CLIENT SETNAME rootproof, skipped when the ACL denies it); nothing from data is ever sent. The
password (`password_env`/`password_file`) is given to the connection only; the URL is shown
masked, and the password is replaced by `(redacted)` in any reply or message that holds it.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol

import redis.exceptions as rex
from pydantic import BaseModel, ValidationError
from redis.backoff import NoBackoff
from redis.connection import AbstractConnection, Connection, UnixDomainSocketConnection, parse_url
from redis.retry import Retry

from rootproof.backends.live._redis_text import (
    mask_url,
    parse_client_list,
    parse_info,
    read_log_tail,
    slowlog_line,
)
from rootproof.backends.live.refusal import refusal_answer, refused_result
from rootproof.backends.live.tailfile import open_regular
from rootproof.backends.query import TimeWindow, order_matches, parse_query
from rootproof.errors import BackendError, BackendQueryError, BackendRefused, BackendUnavailable, ConfigError
from rootproof.scenarios.types import format_timestamp
from rootproof.targets import RedisTarget, TargetCheck, secret_of
from rootproof.tools.base import BackendResult, InspectRedisArgs, window_start
from rootproof.tools.refs import canonical_json, fmt_value
from rootproof.tools.results import InfoResult, LinesResult, RowsResult, SettingsResult, Window

__all__ = ["CONFIG_NAMES", "RedisBackend"]

CONFIG_NAMES: tuple[str, ...] = (
    "maxclients", "maxmemory", "maxmemory-policy", "maxmemory-samples", "maxmemory-clients",
    "timeout", "tcp-keepalive", "tcp-backlog", "save", "appendonly", "appendfsync", "databases",
    "hz", "slowlog-log-slower-than", "slowlog-max-len", "latency-monitor-threshold",
    "busy-reply-threshold", "lazyfree-lazy-eviction", "lazyfree-lazy-expire",
    "lazyfree-lazy-server-del", "lazyfree-lazy-user-del", "lazyfree-lazy-user-flush",
    "client-output-buffer-limit", "client-query-buffer-limit", "io-threads", "activedefrag",
    "notify-keyspace-events", "replica-read-only", "min-replicas-to-write",
)
"""The settings `kind=config` reads (`CONFIG GET`); names a server does not know are left out."""

_parse_url: Callable[[str], dict[str, Any]] = parse_url  # redis-py leaves it untyped


class _Connection(Protocol):
    """The part of a redis-py connection the backend uses (typed here: redis-py leaves it untyped)."""

    def connect(self) -> None: ...

    def disconnect(self, *args: Any) -> None: ...

    def send_command(self, *args: Any, **kwargs: Any) -> None: ...

    def read_response(self, *args: Any, **kwargs: Any) -> Any: ...


_SECRET_SETTING = re.compile(r"pass|auth", re.I)  # requirepass, masterauth, tls-key-file-pass, …
_SLOWLOG_ENTRIES = 128
_MIN_SCRUB = 4  # shorter passwords are not scrubbed from replies (they would hit ordinary digits)


class RedisBackend:
    """`inspect_redis` against one Redis server (`RedisTarget`), read through one observer connection."""

    system: ClassVar[str] = "redis"
    tools: ClassVar[tuple[str, ...]] = ("inspect_redis",)

    def __init__(self, target: RedisTarget, *, environ: Mapping[str, str]) -> None:
        """Resolve the password (ConfigError if its reference is broken) and open the observer connection.

        A connection failure is not raised: it is kept for `check()` and retried by the next call.
        """
        self._target = target
        self._password = secret_of(target, environ)
        self._shown = mask_url(target.url)
        try:
            kwargs = _parse_url(target.url)
        except ValueError as exc:
            raise ConfigError(f"targets: {target.name}: url: {exc}") from None
        self._conn_class: type[AbstractConnection] = kwargs.pop("connection_class", Connection)
        for unsafe in ("retry_on_timeout", "retry_on_error", "health_check_interval", "protocol"):
            kwargs.pop(unsafe, None)
        if self._password is not None:
            kwargs["password"] = self._password
        elif kwargs.get("password"):
            self._password = str(kwargs["password"])
        if target.username is not None:
            kwargs["username"] = target.username
        kwargs.update(
            socket_timeout=target.timeout_s,
            retry=Retry(NoBackoff(), 0),
            retry_on_error=[],
            client_name=None,
            driver_info=None,  # no CLIENT SETINFO: a Redis 7.0 server answers it with an error
            protocol=2,
            decode_responses=False,
        )
        if self._conn_class is not UnixDomainSocketConnection:
            kwargs["socket_connect_timeout"] = target.timeout_s
        self._kwargs = kwargs
        self._lock = threading.Lock()
        self._conn: _Connection | None = None
        self._closed = False
        self.last_error: str | None = None
        """Why the last connect failed (None once connected)."""
        try:
            with self._lock:
                self._connect()
        except BackendError:  # kept in last_error; the next call tries again
            pass

    # -- connection ----------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        if self._password and len(self._password) >= _MIN_SCRUB:
            return text.replace(self._password, "(redacted)")
        return text

    def _fail(self, exc: Exception, doing: str) -> BackendError:
        """A redis-py error as ours: unreachable, auth or timeout → BackendUnavailable; else BackendQueryError."""
        where = f"redis target {self._target.name} ({self._shown})"
        text = self._scrub(str(exc) or type(exc).__name__)
        if isinstance(exc, rex.AuthenticationError):
            return BackendUnavailable(f"{where}: authentication failed while {doing}: {text}")
        if isinstance(exc, rex.TimeoutError):
            return BackendUnavailable(f"{where}: timed out after {self._target.timeout_s:g} s while {doing}: {text}")
        if isinstance(exc, rex.ConnectionError):  # refused, reset, max clients reached, LOADING
            answer = refusal_answer(text)
            if answer is not None:  # the server said why: evidence (`call` returns it as a result)
                return BackendRefused(f"{where}: refused while {doing}: {text}", answer=answer)
            return BackendUnavailable(f"{where}: unreachable while {doing}: {text}")
        if isinstance(exc, rex.ResponseError) and str(exc).startswith("BUSY"):  # a script or module blocks the server
            return BackendUnavailable(f"{where}: busy while {doing}: {text}")
        if isinstance(exc, rex.NoPermissionError):
            return BackendQueryError(f"{where}: not permitted (ACL) while {doing}: {text}")
        return BackendQueryError(f"{where}: {doing} failed: {text}")

    def _connect(self) -> _Connection:
        if self._closed:
            raise BackendUnavailable(f"redis target {self._target.name}: the backend is closed")
        conn: _Connection = self._conn_class(**self._kwargs)
        try:
            conn.connect()
            try:  # named after the handshake, so that a user not allowed CLIENT SETNAME can still observe
                conn.send_command("CLIENT", "SETNAME", "rootproof")
                conn.read_response()
            except rex.ResponseError:
                pass
        except (rex.RedisError, OSError) as exc:
            conn.disconnect()
            err = self._fail(exc if isinstance(exc, rex.RedisError) else rex.ConnectionError(str(exc)), "connecting")
            self.last_error = str(err)
            raise err from None
        self._conn, self.last_error = conn, None
        return conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.disconnect()
            self._conn = None

    def _commands(self, *commands: tuple[str, ...]) -> list[Any]:
        """Send `commands` over the observer connection (one reconnect if a kept connection is dead)."""
        with self._lock:
            fresh = self._conn is None
            conn = self._conn or self._connect()
            for attempt in (1, 2):
                try:
                    out = []
                    for command in commands:
                        conn.send_command(*command)
                        out.append(conn.read_response())
                    return out
                except rex.ConnectionError as exc:  # includes auth errors on a reconnect
                    self._drop()
                    if fresh or attempt == 2 or isinstance(exc, rex.AuthenticationError | rex.BusyLoadingError):
                        raise self._fail(exc, " ".join(commands[-1][:2]).lower()) from None
                    conn, fresh = self._connect(), True
                except rex.TimeoutError as exc:
                    self._drop()  # a late reply would be read as the next command's
                    raise self._fail(exc, " ".join(commands[-1][:2]).lower()) from None
                except rex.RedisError as exc:
                    raise self._fail(exc, " ".join(commands[-1][:2]).lower()) from None
                except OSError as exc:
                    self._drop()
                    raise self._fail(rex.ConnectionError(str(exc)), " ".join(commands[-1][:2]).lower()) from None
            raise AssertionError("unreachable")  # pragma: no cover

    # -- the seam ------------------------------------------------------------------------------

    def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
        """Run one `inspect_redis` call; windows end at `now` (the wall clock)."""
        if tool != "inspect_redis":
            raise BackendError(f"the redis backend does not serve {tool!r} (it serves inspect_redis)")
        if not isinstance(args, InspectRedisArgs):
            try:
                args = InspectRedisArgs.model_validate(args.model_dump())
            except ValidationError as exc:
                raise BackendError(f"{tool}: arguments are not InspectRedisArgs: {exc}") from exc
        if now.tzinfo is None:
            raise BackendError(f"{tool}: the run's clock must be timezone-aware (got {now.isoformat()})")
        now = now.astimezone(UTC)
        started = time.perf_counter()
        handlers: dict[str, Callable[[InspectRedisArgs, datetime], tuple[Any, dict[str, Any]]]] = {
            "info": self._info,
            "clients": self._clients,
            "slowlog": self._slowlog,
            "config": self._config,
            "log": self._log,
        }
        try:
            result, details = handlers[args.kind](args, now)
        except BackendRefused as exc:
            # A refusal is evidence: the server's answer is the call's (citable) result.
            shape = {"info": "info", "clients": "rows", "config": "settings"}.get(args.kind, "lines")
            result = refused_result(args.kind, shape, exc.answer, now=now, since=args.since)
            details = {"refused": True}
        details = {
            "target": self._target.name,
            "kind": args.kind,
            **details,
            "elapsed_ms": round((time.perf_counter() - started) * 1000, 3),
        }
        return BackendResult(result=result, data_source=f"live:{self._target.name}", details=details)

    def check(self) -> TargetCheck:
        """Connect (PING) and list what a run would miss: CONFIG or SLOWLOG denied, log unset or
        unreadable, clients near `maxclients`. Never raises."""
        warnings: list[str] = []
        try:
            self._commands(("PING",))
        except BackendError as exc:
            return TargetCheck(name=self._target.name, kind="redis", usable=False, problem=str(exc))
        try:
            info = parse_info(self._text(self._commands(("INFO", "clients"))[0]))
            clients = info.get("clients", {})
            used, most = clients.get("connected_clients"), clients.get("maxclients")
            if isinstance(used, int) and isinstance(most, int) and most > 0 and used >= 0.9 * most:
                warnings.append(f"connected_clients {used} of maxclients {most}: the server is close to refusing new clients")
        except BackendError as exc:
            warnings.append(f"INFO failed: {exc}")
        for command, kind in ((("CONFIG", "GET", "maxclients"), "config"), (("SLOWLOG", "LEN"), "slowlog")):
            try:
                self._commands(command)
            except BackendError as exc:
                warnings.append(f"{' '.join(command[:2])} is not usable, so kind={kind} fails: {exc}")
        log = self._target.log
        if log is None:
            warnings.append("no log configured: kind=log finds nothing (Redis logs nothing for refused clients anyway)")
        else:
            try:
                with open_regular(log):
                    pass
            except BackendQueryError as exc:
                warnings.append(f"log {log} is unreadable: {exc}")
        return TargetCheck(name=self._target.name, kind="redis", usable=True, warnings=warnings)

    def close(self) -> None:
        """Close the observer connection. Idempotent."""
        with self._lock:
            self._closed = True
            self._drop()

    # -- kinds ---------------------------------------------------------------------------------

    def _text(self, reply: Any) -> str:
        raw = reply if isinstance(reply, bytes) else str(reply).encode()
        return self._scrub(raw.decode("utf-8", errors="replace"))

    def _no_evidence(self, args: InspectRedisArgs, filters: str, where: str) -> str:
        return f"inspect_redis found no match for query '{args.query}' ({filters}) {where}"

    def _info(self, args: InspectRedisArgs, now: datetime) -> tuple[InfoResult, dict[str, Any]]:
        raw = self._commands(("INFO", "all"))[0]
        query = parse_query(args.query)
        info: dict[str, dict[str, Any]] = {}
        for section, fields in parse_info(self._text(raw)).items():
            chosen = {k: v for k, v in fields.items() if query.empty or query.score(f"# {section}\n{k}:{fmt_value(v)}")}
            if chosen:
                info[section] = chosen
        count = sum(len(f) for f in info.values())
        missing = None if info else self._no_evidence(args, "kind=info", f"as of {format_timestamp(now)}")
        return InfoResult(kind="info", info=info, no_evidence=missing), {
            "bytes_read": len(raw), "total_matches": count, "returned": count,
        }

    def _clients(self, args: InspectRedisArgs, now: datetime) -> tuple[RowsResult, dict[str, Any]]:
        own, raw = self._commands(("CLIENT", "ID"), ("CLIENT", "LIST"))
        data = raw if isinstance(raw, bytes) else str(raw).encode()
        truncated = len(data) > self._target.max_bytes
        if truncated:
            data = data[: data.rfind(b"\n", 0, self._target.max_bytes) + 1]
        rows = [r for r in parse_client_list(self._text(data)) if r.get("id") != own]
        query = parse_query(args.query)
        matched = [r for r in rows if query.empty or query.score(canonical_json(r))]
        page = matched[args.offset : args.offset + args.limit]
        missing = None
        if not page:
            filters = "kind=clients" + (f"; {len(matched)} matches, none at offset {args.offset}" if matched else "")
            missing = self._no_evidence(args, filters, f"as of {format_timestamp(now)}")
        details = {"bytes_read": len(data), "rows_scanned": len(rows), "total_matches": len(matched), "returned": len(page)}
        if truncated:
            details["truncated_at_bytes"] = self._target.max_bytes
        return RowsResult(kind="clients", total_matches=len(matched), rows=page, no_evidence=missing), details

    def _lines(
        self, args: InspectRedisArgs, now: datetime, items: list[tuple[str, datetime | None]], absent: str = ""
    ) -> tuple[LinesResult, dict[str, Any]]:
        """Window, match, order and page log-like lines as the snapshot backend does."""
        window = TimeWindow(start=window_start(now, args.since), end=now)
        query = parse_query(args.query)
        candidates: list[tuple[int, datetime | None, str]] = []
        for text, ts in items:
            if ts is None or ts not in window:
                continue
            if query.empty:
                candidates.append((0, ts, text))
            elif score := query.score(text):
                candidates.append((score, ts, text))
        ordered = order_matches(candidates)
        page = ordered[args.offset : args.offset + args.limit]
        missing = None
        if not page:
            filters = f"kind={args.kind}, since={args.since}"
            if ordered:
                filters += f"; {len(ordered)} matches, none at offset {args.offset}"
            missing = self._no_evidence(args, filters + absent, f"in window {window.text()}")
        result = LinesResult(
            kind=args.kind,
            window=Window(from_=format_timestamp(window.start), to=format_timestamp(window.end)),
            total_matches=len(ordered),
            lines=page,
            no_evidence=missing,
        )
        return result, {"lines_scanned": len(items), "total_matches": len(ordered), "returned": len(page)}

    def _slowlog(self, args: InspectRedisArgs, now: datetime) -> tuple[LinesResult, dict[str, Any]]:
        raw = self._commands(("SLOWLOG", "GET", str(_SLOWLOG_ENTRIES)))[0]
        items = [slowlog_line(entry) for entry in raw if isinstance(entry, list | tuple) and len(entry) >= 3]
        items = [(self._scrub(text), ts) for text, ts in items]
        result, details = self._lines(args, now, items)
        return result, {"bytes_read": sum(len(t) for t, _ in items), **details}

    def _config(self, args: InspectRedisArgs, now: datetime) -> tuple[SettingsResult, dict[str, Any]]:
        try:
            replies = [self._commands(("CONFIG", "GET", *CONFIG_NAMES))[0]]
        except BackendQueryError as exc:
            if "wrong number of arguments" not in str(exc):
                raise
            # Redis before 7 takes one name per CONFIG GET
            replies = self._commands(*(("CONFIG", "GET", name) for name in CONFIG_NAMES))
        values: dict[str, str] = {}
        for reply in replies:
            pairs = list(reply.items()) if isinstance(reply, dict) else list(zip(reply[::2], reply[1::2], strict=True))
            for name, value in pairs:
                key = self._text(name)
                if not _SECRET_SETTING.search(key):
                    values[key] = self._text(value)
        query = parse_query(args.query)
        chosen = {k: values[k] for k in sorted(values) if query.empty or query.score(f"{k} = {values[k]}")}
        missing = None if chosen else self._no_evidence(args, "kind=config", f"as of {format_timestamp(now)}")
        return SettingsResult(kind="config", settings=dict(chosen), no_evidence=missing), {
            "bytes_read": sum(len(k) + len(v) for k, v in values.items()),
            "total_matches": len(chosen),
            "returned": len(chosen),
        }

    def _log(self, args: InspectRedisArgs, now: datetime) -> tuple[LinesResult, dict[str, Any]]:
        path = self._target.log
        if path is None:
            result, details = self._lines(args, now, [], f"; the target {self._target.name} has no log configured")
            return result, {"bytes_read": 0, **details}
        try:
            lines, read = read_log_tail(path, self._target.max_bytes)
        except (BackendQueryError, OSError) as exc:
            raise BackendQueryError(f"redis target {self._target.name}: cannot read its log ({exc})") from None
        result, details = self._lines(args, now, [(self._scrub(line.text), line.ts) for line in lines])
        return result, {"bytes_read": read, **details}
