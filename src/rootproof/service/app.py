"""The FastAPI app of the team service (`rootproof serve`), built by `create_app`.

The app's `lifespan` opens one Runtime (the trace store, knowledge base, canonical store,
breakers, tool pool, model clients) and the service state around it, and closes them at
shutdown. Routes: docs/service.md.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, MutableMapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import Body, Depends, FastAPI, Header, HTTPException, Path, Query, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from rootproof.alerts import AlertPayload, parse_alert
from rootproof.errors import AlertError, StoreError, UsageError
from rootproof.run.records import EventRecord, RunRecord
from rootproof.service.auth import (
    Principal,
    Refusal,
    is_loopback,
    principal_from_headers,
    require_grant,
    service_keys,
)
from rootproof.service.browser import (
    install_browser_routes,
    login_location,
    own_origin,
    request_is_tls,
    wants_html,
)
from rootproof.service.core import ALERT_KINDS, Evidence, Service, group_hash
from rootproof.service.hub import Heartbeat, follow_events
from rootproof.service.jobs import RunRequest
from rootproof.service.jsondepth import DEPTH_LIMIT, too_deep
from rootproof.service.sessions import (
    SESSION_COOKIE,
    ProxyTrust,
    cookie_value,
    cross_site_reason,
    principal_from_session_cookie,
)
from rootproof.settings import Settings, load_settings
from rootproof.store.sql import RunFilter

__all__ = ["create_app", "app_from_environment", "is_loopback"]

CHAT_BODY_BYTES = 1 << 20
"""A chat body's cap beside its alert (a message of at most 100 000 characters is well under it)."""

_ID = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"
_MAX_SEQ = 2**53
"""The largest event sequence number a client may resume after (`after`, `Last-Event-ID`)."""

RunId = Annotated[str, Path(pattern=_ID, description="A run id.")]
SessionId = Annotated[str, Path(pattern=_ID, description="A session id.")]


class ChatRequest(BaseModel):
    """`POST /api/chat`."""

    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=100_000, description="The question (Chinese or English).")
    session_id: str | None = Field(default=None, pattern=_ID, description="Continue a session of yours.")
    alert: dict[str, Any] | None = Field(default=None, description="An alert payload as context (Alertmanager, Grafana or plain).")
    scenario: str | None = Field(default=None, max_length=255, description="A built-in scenario id to read evidence from.")


class AlertAccepted(BaseModel):
    """A webhook's answer: the run it started (or the run already diagnosing its group)."""

    run_ids: list[str]
    duplicate: bool = False


class RunView(BaseModel):
    """`GET /api/runs/{run_id}`."""

    run_id: str
    session_id: str
    kind: str | None = Field(description="chat | alertmanager | grafana (null: a run of the command line).")
    state: str
    status: Literal["SUCCESS", "CANCELLED", "TIMED_OUT", "FAILED"] | None
    release_outcome: str | None
    fallback_type: str | None
    content: dict[str, Any] | None
    executor: str | None = Field(description="The replica that executed the run (`host:pid:id`), null until one took it.")
    retry_of: str | None = Field(description="The run this one replaces (an alert run whose worker was lost).")


class RunSummary(BaseModel):
    """One run of `GET /api/runs` (no content: read the run for it)."""

    run_id: str
    session_id: str
    kind: str
    source: str | None = Field(description="A webhook's `receiver`.")
    state: str
    status: str | None
    release_outcome: str | None
    fallback_type: str | None
    language: str
    scenario_id: str | None
    executor: str | None
    retry_of: str | None
    started_at: str
    ended_at: str | None
    received_at: str | None
    delivered_at: str | None


class RunList(BaseModel):
    """`GET /api/runs`: newest first; `next_cursor` continues the listing (null at its end)."""

    runs: list[RunSummary]
    next_cursor: str | None


class CancelAnswer(BaseModel):
    """`POST /api/runs/{run_id}/cancel`."""

    run_id: str
    cancel_requested: bool
    state: str


class FieldError(BaseModel):
    """One failed check of a request's validation."""

    loc: list[str | int]
    msg: str
    type: str


class Problem(BaseModel):
    """A 4xx answer: what is wrong and which field."""

    detail: str
    field: str | None = None
    errors: list[FieldError] | None = Field(default=None, description="Request validation only: the failed checks (at most 20).")


class Readiness(BaseModel):
    """`GET /readyz` (200 ready, 503 not)."""

    ready: bool
    database: bool
    migrations: bool
    revision: str | None
    redis: bool | None = Field(description="null when no Redis is configured.")
    jobs: str


_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}


def _problems(*codes: int, json_only: bool = False) -> dict[int | str, dict[str, Any]]:
    """A route's `responses=`: each status answered with a `Problem`. `json_only` for routes
    whose own media type is an event stream or HTML: their problems are still JSON."""
    if json_only:
        return {code: {"content": {"application/json": {"schema": dict(_PROBLEM_REF)}}} for code in codes}
    return {code: {"model": Problem} for code in codes}


def _problem(status: int, detail: str, field: str | None = None) -> HTTPException:
    return HTTPException(status_code=status, detail={"detail": detail, "field": field})


def create_app(
    settings: Settings | None = None,
    *,
    runtime: Any = None,
    environ: Mapping[str, str] | None = None,
    no_auth: bool = False,
) -> FastAPI:
    """The service app. `runtime` (a `Runtime`) is used as given (tests); else one is built
    from `settings` when the app starts. Without API keys and without `no_auth` this raises
    ConfigError naming `ROOTPROOF_API_KEYS`."""
    settings = settings or load_settings()
    keyring = service_keys(settings, no_auth=no_auth)
    env = dict(environ if environ is not None else os.environ)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The default executor carries every store read of the API (`asyncio.to_thread`); jobs
        # and chat runs have pools of their own, so they never starve it.
        from concurrent.futures import ThreadPoolExecutor

        from rootproof.runtime import Runtime

        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=64, thread_name_prefix="api"))
        own = runtime is None
        rt = runtime if runtime is not None else Runtime.from_settings(settings, environ=env)
        service = Service(settings, rt, keyring=keyring, no_auth=no_auth, environ=env)
        try:
            await service.start()
            app.state.service = service
            yield
        finally:
            await service.stop()
            if own:
                rt.close()

    app = FastAPI(
        title="rootproof",
        version=_version(),
        summary="Diagnose production incidents; publish only what the evidence proves.",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc: rootproof.service.browser, their assets from a package
        redoc_url=None,
    )
    app.state.proxy_trust = ProxyTrust(settings.trusted_proxy_networks())
    from rootproof.service.limits import BodyLimit, KeyGate, NoStore

    # Outermost first: NoStore, then the key gate (401/403 from the headers alone, before any
    # byte of a body is read), then the body caps and the body deadline, then the routes.
    alert_cap = (settings.max_alert_bytes, "ROOTPROOF_MAX_ALERT_BYTES")
    app.add_middleware(
        BodyLimit,  # type: ignore[arg-type]
        caps={"/api/alerts/": alert_cap, "/api/chat": (settings.max_alert_bytes + CHAT_BODY_BYTES, "ROOTPROOF_MAX_ALERT_BYTES plus 1 MiB")},
        default=(CHAT_BODY_BYTES, "the 1 MiB request cap"),
        timeout_s=settings.service_body_timeout_s,
    )
    app.add_middleware(KeyGate, who=_gate_who, need=_key_need(app))  # type: ignore[arg-type]
    app.add_middleware(NoStore)  # type: ignore[arg-type]

    @app.exception_handler(StarletteHTTPException)  # also the framework's own (404 no route, 405, 400 unreadable body)
    async def _http_problem(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # A 400 of FastAPI's own is a request body it could not read (not UTF-8, say, or JSON
        # nested deeper than the decoder goes: then the field where it nests too deep is named).
        body = exc.detail if isinstance(exc.detail, dict) else {"detail": str(exc.detail), "field": "(body)" if exc.status_code == 400 else None}
        if exc.status_code == 400 and not isinstance(exc.detail, dict):
            deep = too_deep((await request.body()).decode("utf-8", "replace"))
            if deep is not None:
                body = {"detail": f"{deep}: nested more than {DEPTH_LIMIT} levels deep", "field": deep}
        return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_problem(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header")]
        field = ".".join(loc) or None
        if first.get("type") == "json_invalid":  # its loc is the offset of the error, not a field
            field = "(body)"
        detail = f"{field}: {first.get('msg')}" if field else str(first.get("msg"))
        safe = [{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in errors[:20]]
        return JSONResponse({"detail": detail, "field": field, "errors": safe}, status_code=422)

    @app.exception_handler(_SignInFirst)
    async def _sign_in_first(request: Request, exc: _SignInFirst) -> RedirectResponse:
        resp = RedirectResponse(login_location(exc.next_path), status_code=303, headers={"Cache-Control": "no-store"})
        if cookie_value(request.headers, SESSION_COOKIE) is not None:  # a stale one: forget it
            secure = request_is_tls(request, request.app.state.proxy_trust)
            resp.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict", secure=secure)
        return resp

    install_browser_routes(app, login_failures_per_minute=settings.login_failures_per_minute)
    _routes(app)
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rootproof")
    except PackageNotFoundError:
        return "0"


def app_from_environment() -> FastAPI:
    """The factory `rootproof serve --workers N` hands uvicorn (settings from the environment;
    `ROOTPROOF_SERVE_NO_AUTH=1` is how `serve --no-auth` reaches each worker)."""
    return create_app(load_settings(), no_auth=os.environ.get("ROOTPROOF_SERVE_NO_AUTH") == "1")


# -- routes ---------------------------------------------------------------------------------------


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


_BEARER = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer KEY` (ROOTPROOF_API_KEYS).")
"""The API key scheme, declared so that the OpenAPI document and /docs know it (stateless)."""


def _refused(exc: Refusal) -> HTTPException:
    return HTTPException(exc.status, {"detail": exc.detail, "field": exc.field}, headers=exc.headers or None)


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def _principal(
    request: Request,
    service: Annotated[Service, Depends(_service)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
) -> Principal:
    """Who sent a request (`_who`, the key gate's decision too), as the routes' dependency."""
    del credentials  # declared for the OpenAPI document; the decision is `_who`'s
    try:
        return await _who(service, request)
    except Refusal as exc:
        raise _refused(exc) from None


async def _who(service: Service, request: Request) -> Principal:
    """Who sent a request, from its headers alone, before any byte of its body is read (the key
    gate and the routes both ask this): the key of `Authorization: Bearer` (programs,
    `auth.principal_from_headers`), else a browser's session cookie
    (`rootproof.service.sessions`), which a state-changing request may only carry from this
    service's own pages (CSRF). A `Refusal` (401, 403, or 503 when the store cannot say)."""
    headers = request.headers
    if service.no_auth or "authorization" in headers or cookie_value(headers, SESSION_COOKIE) is None:
        return principal_from_headers(service.keyring, headers, no_auth=service.no_auth)
    try:
        who = await asyncio.to_thread(principal_from_session_cookie, headers, service.store, service.keyring)
    except StoreError:
        raise Refusal(503, "the trace store is unavailable: the browser session cannot be checked", None) from None
    if who is None:
        raise Refusal(401, "the browser session expired or was signed out: sign in again at /login", "Cookie")
    if request.method not in _SAFE_METHODS:
        refused = cross_site_reason(headers, own_origin(request, request.app.state.proxy_trust))
        if refused is not None:
            raise Refusal(403, refused[1], refused[0])
    return who


class _SignInFirst(Exception):
    """A browser asked for a page without a valid sign-in: it is sent to the form."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


async def _page_principal(
    request: Request,
    service: Annotated[Service, Depends(_service)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
) -> Principal:
    """`_principal` for a page: a browser (`Accept: text/html`, no `Authorization`) that is not
    signed in is redirected to `/login` (and back afterwards); a program still gets the 401."""
    try:
        return await _principal(request, service, credentials)
    except HTTPException as exc:
        if exc.status_code == 401 and credentials is None and wants_html(request):
            raise _SignInFirst(request.url.path) from None
        raise


ServiceDep = Annotated[Service, Depends(_service)]
Who = Annotated[Principal, Depends(_principal)]
PageWho = Annotated[Principal, Depends(_page_principal)]


def _need(who: Principal, grant: str) -> None:
    try:
        require_grant(who, grant)
    except Refusal as exc:
        raise _refused(exc) from None


async def _asker(who: Who) -> Principal:
    """A key whose role may ask (operator, admin)."""
    _need(who, "ask")
    return who


async def _auditor(who: Who) -> Principal:
    """A key whose role may audit (auditor, admin)."""
    _need(who, "audit")
    return who


Asker = Annotated[Principal, Depends(_asker)]
Auditor = Annotated[Principal, Depends(_auditor)]
"""A route's grant is declared once, in its signature (`Who`, `Asker` or `Auditor`): the routes
check it as a dependency, and the key gate reads it from the same signature (`_key_need`)."""


def _route_need(dependant: Dependant) -> tuple[bool, str | None]:
    """Whether a route needs a key, and the grant its role must hold (None: any key)."""
    calls: list[Any] = []
    stack = [dependant]
    while stack:
        item = stack.pop()
        calls.append(item.call)
        stack.extend(item.dependencies)
    grant = "ask" if any(c is _asker for c in calls) else "audit" if any(c is _auditor for c in calls) else None
    return grant is not None or any(c is _principal for c in calls), grant


async def _gate_who(scope: MutableMapping[str, Any]) -> Principal:
    """`_who` for the key gate, from the request's scope (its headers; no body is read)."""
    request = Request(scope)
    return await _who(_service(request), request)


def _key_need(app: FastAPI) -> Callable[[MutableMapping[str, Any]], tuple[bool, str | None]]:
    """For the key gate: what a request needs, from its method and path alone. A path under
    `/api/` or `/runs/` that no route serves needs a key too (a client without one learns
    nothing of the routes, and sends no body)."""
    table: list[tuple[APIRoute, tuple[bool, str | None]]] = []

    def need(scope: MutableMapping[str, Any]) -> tuple[bool, str | None]:
        if not table:  # the routes, once (they are all added before the first request)
            table.extend((r, _route_need(r.dependant)) for r in app.router.routes if isinstance(r, APIRoute))
        for route, found in table:
            if route.matches(scope)[0] is Match.FULL:
                return found
        return str(scope.get("path", "")).startswith(("/api/", "/runs/")), None

    return need


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _write_cursor(started_at: datetime, run_id: str) -> str:
    """An opaque cursor: where the previous page ended (its last run's start and id)."""
    raw = json.dumps([started_at.isoformat(), run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _read_cursor(cursor: str) -> tuple[datetime, str]:
    """The position a cursor names; 422 naming `cursor` when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, run_id = json.loads(raw)
        when = datetime.fromisoformat(at).astimezone(UTC)
        if not isinstance(run_id, str) or len(run_id) > 64:
            raise ValueError(cursor)
        return when, run_id
    except (ValueError, TypeError, OverflowError, UnicodeDecodeError, binascii.Error):
        raise _problem(422, "cursor: not a cursor of this listing (use next_cursor as given)", "cursor") from None


def _evidence(service: Service, scenario: str | None) -> Evidence:
    try:
        return service.evidence(scenario)
    except UsageError as exc:
        raise _problem(422, str(exc), "scenario") from None


def _nul_field(value: Any) -> str | None:
    """The first field of a JSON value whose text or name holds a NUL character (PostgreSQL
    cannot store one: the request is refused up front), as a path (`alerts[0].labels.x`)."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str) and "\x00" in item:
            return path or "(body)"
        children: list[tuple[str, Any]] = []
        if isinstance(item, dict):
            for key, sub in item.items():
                name = f"{path}.{key}" if path else str(key)
                if "\x00" in str(key):
                    return name.replace("\x00", "\\x00")
                children.append((name, sub))
        elif isinstance(item, list):
            children = [(f"{path}[{i}]", sub) for i, sub in enumerate(item)]
        stack.extend(reversed(children))
    return None


def _refuse_nul(data: Any) -> None:
    """422 naming the first field of `data` that holds a NUL character."""
    field = _nul_field(data)
    if field is not None:
        raise _problem(422, f"{field}: contains a NUL character (U+0000), which cannot be stored", field)


def _alert_of(service: Service, data: Any, field_prefix: str) -> AlertPayload:
    try:
        return parse_alert(data, limits=service.settings.input_limits())
    except AlertError as exc:
        field = f"{field_prefix}.{exc.field}" if field_prefix else exc.field
        raise _problem(422, f"{field}: {exc.problem}", field) from None


async def _prepared_chat(service: ServiceDep, who: Asker, body: ChatRequest) -> RunRequest:
    _refuse_nul(body.model_dump(exclude_none=True))
    found = _evidence(service, body.scenario)
    if body.alert is not None:
        _alert_of(service, body.alert, "alert")
    if body.session_id is not None:
        # Claimed atomically: a session belongs to the key that opened it, admins included.
        owner = await asyncio.to_thread(service.store.claim_session, body.session_id, who.name)
        if owner != who.name:
            raise _problem(404, "no such session", "session_id")
    if service.chat_backlog() >= service.chat_backlog_limit:
        raise HTTPException(
            503,
            {"detail": f"this replica holds {service.chat_backlog_limit} chat runs (4 x ROOTPROOF_CHAT_CONCURRENCY); retry later", "field": None},
            headers={"Retry-After": "5"},
        )
    return service.new_chat(message=body.message, session_id=body.session_id, principal=who.name, evidence=found, alert=body.alert)


def _routes(app: FastAPI) -> None:

    async def owned_session(service: Service, who: Principal, session_id: str) -> None:
        """404 unless the session is the caller's (auditors and admins read every session)."""
        owner = await asyncio.to_thread(service.store.session_owner, session_id)
        if owner is None or (owner != who.name and not who.may("audit")):
            raise _problem(404, "no such session", "session_id")

    async def visible_run(service: Service, who: Principal, run_id: str) -> RunRecord:
        """A run the caller may read: its own session's, any alert run (operators and admins
        read them all), or any run for auditors and admins; else 404."""
        record = await asyncio.to_thread(service.store.get_run, run_id)
        if record is None:
            raise _problem(404, "no such run", "run_id")
        if not who.may("audit"):
            owner = await asyncio.to_thread(service.store.session_owner, record.session_id)
            if owner != who.name and not await is_alert_run(service, run_id):
                raise _problem(404, "no such run", "run_id")
        return record

    async def is_alert_run(service: Service, run_id: str) -> bool:
        meta = await asyncio.to_thread(service.store.run_meta, run_id)
        return bool(meta and meta.get("kind") in ALERT_KINDS)

    def sse(item: EventRecord | Heartbeat) -> ServerSentEvent:
        if isinstance(item, Heartbeat):
            return ServerSentEvent(comment="heartbeat")
        return ServerSentEvent(
            event=item.type, id=str(item.seq), data={"type": item.type, "run_id": item.run_id, "seq": item.seq, "data": item.data}
        )

    @app.post(
        "/api/chat",
        response_class=EventSourceResponse,
        tags=["runs"],
        responses=_problems(400, 401, 403, 404, 413, 422, 503, json_only=True),
    )
    async def chat(service: ServiceDep, request: Annotated[RunRequest, Depends(_prepared_chat)]) -> AsyncIterator[ServerSentEvent]:
        """Ask a question; the run's events stream back (metadata, status, tool, content, done).

        A client that disconnects does not cancel its run: it goes on to its end (or its
        deadline), and the stream resumes with `GET /api/runs/{run_id}/events` and
        `Last-Event-ID`, on any replica. Cancel with `POST /api/runs/{run_id}/cancel`."""
        t0 = asyncio.get_running_loop().time()
        await asyncio.to_thread(service.record_chat, request)
        service.start_chat(request)  # before following: the stream reads the run from this replica
        done = False
        first = True
        try:
            async for item in follow_events(service.hub, service.store, request.run_id, 0, heartbeat_s=service.settings.sse_heartbeat_s):
                if first and not isinstance(item, Heartbeat):
                    service.metrics.first_event_seconds.observe(asyncio.get_running_loop().time() - t0)
                    first = False
                if isinstance(item, EventRecord) and item.type == "done":
                    done = True
                yield sse(item)
            if not done:  # the run could not even be closed (its store failing): say so, with its id
                yield ServerSentEvent(
                    event="error", data={"type": "error", "run_id": request.run_id, "data": {"code": "STREAM_ERROR", "message": "the run ended without a done event"}}
                )
        except Exception as exc:  # noqa: BLE001 - after the stream started, errors are events
            yield ServerSentEvent(event="error", data={"type": "error", "run_id": request.run_id, "data": {"code": "STREAM_ERROR", "message": type(exc).__name__}})

    async def events_after(
        service: ServiceDep,
        who: Who,
        run_id: RunId,
        last_event_id: Annotated[str | None, Header(description="Resume after this sequence number (an event's `id`).")] = None,
        after: Annotated[int | None, Query(ge=0, le=_MAX_SEQ, description="Resume after this sequence number (as Last-Event-ID).")] = None,
    ) -> int:
        """Where a stream starts: checked before it starts, so that a 404 or 422 is an answer
        of its own and not an empty stream."""
        await visible_run(service, who, run_id)
        start = after or 0
        if last_event_id:
            try:
                start = int(last_event_id)
            except ValueError:
                start = -1
            if not 0 <= start <= _MAX_SEQ:  # as `after`: a negative id is refused, never "from the start"
                raise _problem(422, "Last-Event-ID: expected the sequence number of an event", "Last-Event-ID")
        return start

    @app.get(
        "/api/runs/{run_id}/events",
        response_class=EventSourceResponse,
        tags=["runs"],
        responses=_problems(401, 404, 422, json_only=True),
    )
    async def run_events(
        service: ServiceDep, run_id: RunId, start: int = Depends(events_after)  # a default: `events_after` is local (no string annotation)
    ) -> AsyncIterator[ServerSentEvent]:
        """A run's events from the log, after `Last-Event-ID` (or `after`), then live to `done`;
        any replica serves any run."""
        try:
            async for item in follow_events(service.hub, service.store, run_id, start, heartbeat_s=service.settings.sse_heartbeat_s):
                yield sse(item)
        except Exception as exc:  # noqa: BLE001 - after the stream started, errors are events
            yield ServerSentEvent(event="error", data={"type": "error", "run_id": run_id, "data": {"code": "STREAM_ERROR", "message": type(exc).__name__}})

    async def webhook(service: Service, who: Principal, request: Request, source: Literal["alertmanager", "grafana"], scenario: str | None) -> AlertAccepted:
        cap = service.settings.max_alert_bytes
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > cap:
            service.metrics.webhooks.labels(source, "too_large").inc()
            raise _problem(413, f"the payload is larger than {cap} bytes (ROOTPROOF_MAX_ALERT_BYTES)", "(body)")
        raw = await request.body()
        if len(raw) > cap:
            raise _problem(413, f"the payload is larger than {cap} bytes (ROOTPROOF_MAX_ALERT_BYTES)", "(body)")
        try:
            data = json.loads(raw)
        except RecursionError:
            service.metrics.webhooks.labels(source, "malformed").inc()
            deep = too_deep(raw.decode("utf-8", "replace")) or "(body)"
            raise _problem(422, f"{deep}: nested more than {DEPTH_LIMIT} levels deep", deep) from None
        except (ValueError, UnicodeDecodeError):
            service.metrics.webhooks.labels(source, "malformed").inc()
            raise _problem(422, "(body): not JSON", "(body)") from None
        try:
            payload = _alert_of(service, data, "")
            _refuse_nul(data)
            if payload.source != source:
                expected = "version \"4\"" if source == "alertmanager" else "title and state"
                raise _problem(422, f"version: not a {source} webhook (expected {expected}); post it to /api/alerts/{payload.source}", "version")
        except HTTPException:
            service.metrics.webhooks.labels(source, "malformed").inc()
            raise
        found = _evidence(service, scenario)
        run_id, duplicate = await asyncio.to_thread(
            service.accept_alert, payload, data, principal=who.name, evidence=found, source=source
        )
        if not duplicate:
            from rootproof.boundary.redaction import redact_value

            record = await asyncio.to_thread(service.store.get_run, run_id)
            assert record is not None
            try:
                await service.jobs.defer(
                    RunRequest(
                        run_id=run_id,
                        session_id=record.session_id,
                        principal=who.name,
                        scenario=found.scenario,
                        targets=found.targets,
                        alert=redact_value(data),
                        kind="webhook",
                        source=source,
                        queued_at=time.time(),
                    )
                )
            except Exception as exc:  # noqa: BLE001 - the sender retries a 503; the claim is released
                await asyncio.to_thread(service.refuse_alert, run_id, f"the job queue refused the run: {type(exc).__name__}")
                service.metrics.webhooks.labels(source, "queue_unavailable").inc()
                raise _problem(503, "the job queue is unavailable; the alert was not queued (retry later)", None) from None
        service.metrics.webhooks.labels(source, "duplicate" if duplicate else "accepted").inc()
        return AlertAccepted(run_ids=[run_id], duplicate=duplicate)

    hook_responses = _problems(400, 401, 403, 413, 422, 503)

    @app.post("/api/alerts/alertmanager", status_code=202, tags=["alerts"], responses=hook_responses)
    async def alertmanager(
        service: ServiceDep,
        who: Asker,
        request: Request,
        payload: Annotated[dict[str, Any], Body(description="An Alertmanager v4 webhook payload.")],
        scenario: Annotated[str | None, Query(max_length=255, description="A built-in scenario id (demos, evaluation).")] = None,
    ) -> AlertAccepted:
        """Alertmanager's webhook receiver: one run per payload, run as a job (`202`)."""
        del payload  # validated from the raw body (the exact bytes, with the size cap)
        return await webhook(service, who, request, "alertmanager", scenario)

    @app.post("/api/alerts/grafana", status_code=202, tags=["alerts"], responses=hook_responses)
    async def grafana(
        service: ServiceDep,
        who: Asker,
        request: Request,
        payload: Annotated[dict[str, Any], Body(description="A Grafana alerting webhook payload.")],
        scenario: Annotated[str | None, Query(max_length=255, description="A built-in scenario id (demos, evaluation).")] = None,
    ) -> AlertAccepted:
        """Grafana's webhook receiver: one run per payload, run as a job (`202`)."""
        del payload
        return await webhook(service, who, request, "grafana", scenario)

    @app.get("/api/runs", tags=["runs"], responses=_problems(401, 422))
    async def list_runs(
        service: ServiceDep,
        who: Who,
        kind: Annotated[Literal["chat", "alertmanager", "grafana"] | None, Query(description="The kind of run.")] = None,
        source: Annotated[str | None, Query(max_length=128, description="A webhook's `receiver`.")] = None,
        group_key: Annotated[str | None, Query(max_length=8192, description="An Alertmanager `groupKey` (its hash is looked up).")] = None,
        fingerprint: Annotated[str | None, Query(max_length=128, description="The fingerprint of one of the run's alerts.")] = None,
        status: Annotated[Literal["SUCCESS", "CANCELLED", "TIMED_OUT", "FAILED"] | None, Query()] = None,
        release_outcome: Annotated[Literal["PUBLISHED", "FALLBACK", "NONE"] | None, Query()] = None,
        fallback_type: Annotated[str | None, Query(max_length=64, pattern=r"^[A-Z_]+$")] = None,
        since: Annotated[AwareDatetime | None, Query(description="Runs started at or after this instant (RFC 3339).")] = None,
        until: Annotated[AwareDatetime | None, Query(description="Runs started before this instant (RFC 3339).")] = None,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
        cursor: Annotated[str | None, Query(max_length=512, description="`next_cursor` of the previous page.")] = None,
    ) -> RunList:
        """The service's runs, newest first: an operator sees its own chat runs and every alert
        run; auditors and admins see every run. `next_cursor` pages on (null at the end)."""
        after = _read_cursor(cursor) if cursor else None
        for name, value in (("since", since), ("until", until)):
            try:
                if value is not None:
                    value.astimezone(UTC)
            except OverflowError:
                raise _problem(422, f"{name}: out of range", name) from None
        where = RunFilter(
            kinds=(kind,) if kind else None,
            owner=None if who.may("audit") else who.name,
            alert_source=source,
            group_hash=group_hash(group_key) if group_key is not None else None,
            fingerprint=fingerprint,
            status=status,
            release_outcome=release_outcome,
            fallback_type=fallback_type,
            since=since,
            until=until,
        )
        rows = await asyncio.to_thread(service.store.list_service_runs, where, limit=limit + 1, after=after)
        more = len(rows) > limit
        rows = rows[:limit]
        runs = [
            RunSummary(
                run_id=r["run_id"],
                session_id=r["session_id"],
                kind=r["kind"],
                source=r["alert_source"],
                state=r["lifecycle_state"],
                status=r["status"],
                release_outcome=r["release_outcome"],
                fallback_type=r["fallback_type"],
                language=r["language"],
                scenario_id=r["scenario_id"],
                executor=r["executor"],
                retry_of=r["retry_of"],
                started_at=r["started_at"].isoformat(),
                ended_at=_iso(r["ended_at"]),
                received_at=_iso(r["received_at"]),
                delivered_at=_iso(r["delivered_at"]),
            )
            for r in rows
        ]
        next_cursor = _write_cursor(rows[-1]["started_at"], rows[-1]["run_id"]) if more and rows else None
        return RunList(runs=runs, next_cursor=next_cursor)

    @app.get("/api/runs/{run_id}", tags=["runs"], responses=_problems(401, 404, 422))
    async def get_run(service: ServiceDep, who: Who, run_id: RunId) -> RunView:
        """A run's lifecycle state, terminal status (null until terminal), outcome and content."""
        record = await visible_run(service, who, run_id)
        state = await asyncio.to_thread(service.run_state, record)
        meta = await asyncio.to_thread(service.store.run_meta, run_id) or {}
        return RunView(
            run_id=record.run_id,
            session_id=record.session_id,
            kind=meta.get("kind"),
            state=state,
            status=record.status,  # type: ignore[arg-type]
            release_outcome=record.release_outcome,
            fallback_type=record.fallback_type,
            content=record.content,
            executor=meta.get("executor"),
            retry_of=meta.get("retry_of"),
        )

    @app.post(
        "/api/runs/{run_id}/cancel",
        status_code=202,
        tags=["runs"],
        responses=_problems(400, 401, 403, 404, 409, 413, 422),
    )
    async def cancel_run(service: ServiceDep, who: Asker, run_id: RunId) -> CancelAnswer:
        """Cancel a run wherever it executes (any replica)."""
        record = await visible_run(service, who, run_id)
        if not who.may("audit"):  # an operator reads every alert run but cancels only its own
            owner = await asyncio.to_thread(service.store.session_owner, record.session_id)
            if owner != who.name:
                raise _problem(403, "only the key that started the run, or an admin key, may cancel it", "run_id")
        if record.status is not None:
            raise _problem(409, f"the run already ended ({record.status})", "run_id")
        requested = await service.cancel_bus.request(run_id)
        fresh = await asyncio.to_thread(service.store.get_run, run_id)
        record = fresh if fresh is not None else record
        return CancelAnswer(run_id=run_id, cancel_requested=requested, state=await asyncio.to_thread(service.run_state, record))

    async def run_in_session(service: Service, who: Principal, session_id: str, run_id: str) -> RunRecord:
        if not (who.may("ask") and await is_alert_run(service, run_id)):  # alert runs: every operator
            await owned_session(service, who, session_id)
        record = await asyncio.to_thread(service.store.get_run, run_id)
        if record is None or record.session_id != session_id:
            raise _problem(404, "no such run in this session", "runId")
        return record

    trace_responses = _problems(401, 403, 404, 422)

    @app.get("/api/diagnosis/{session_id}/trace", tags=["trace"], responses=trace_responses)
    async def trace(
        service: ServiceDep, who: Who, session_id: SessionId, run_id: Annotated[str, Query(alias="runId", pattern=_ID)]
    ) -> dict[str, Any]:
        """A run's trace: the run, its steps, its invocations (metadata and evidence refs), the
        guards' results and what was released. Reasoning texts are not here (`/trace/reasoning`)."""
        await run_in_session(service, who, session_id, run_id)
        doc = await asyncio.to_thread(service.store.trace, run_id)
        if doc is None:
            raise _problem(404, "no such run in this session", "runId")
        run = doc["run"]
        evaluation = run.get("self_evaluation") or {}
        return {
            "run": run,
            "steps": doc["steps"],
            "invocations": doc["invocations"],
            "guards": {
                "rule_set_version": evaluation.get("rule_set_version"),
                "evidence_guard": evaluation.get("evidence_guard"),
                "semantic_guard": evaluation.get("semantic_guard"),
                "aiops_rule_evaluation": evaluation.get("aiops_rule_evaluation"),
            },
            "release": {
                "status": run.get("status"),
                "release_outcome": run.get("release_outcome"),
                "fallback_type": run.get("fallback_type"),
                "content": run.get("content"),
            },
            "reasoning": doc["reasoning"],
            "events": doc["events"],
        }

    @app.get("/api/diagnosis/{session_id}/trace/reasoning", tags=["trace"], responses=trace_responses)
    async def reasoning(
        service: ServiceDep, who: Auditor, session_id: SessionId, run_id: Annotated[str, Query(alias="runId", pattern=_ID)]
    ) -> dict[str, Any]:
        """The reasoning audit of a run, by step (auditor or admin role only)."""
        await run_in_session(service, who, session_id, run_id)
        records = await asyncio.to_thread(service.store.reasoning, run_id)
        return {"session_id": session_id, "run_id": run_id, "records": records}

    @app.get("/api/search/similar", tags=["knowledge"], responses=_problems(401, 422))
    async def similar(
        service: ServiceDep,
        who: Who,
        q: Annotated[str, Query(min_length=1, max_length=2000, description="What to look up.")],
        top_k: Annotated[int, Query(ge=1, le=10)] = 5,
    ) -> dict[str, Any]:
        """Knowledge search, as `lookup_knowledge` does (without run de-duplication)."""
        del who
        if not q.strip():
            raise _problem(422, "q: expected a non-empty query", "q")
        from dataclasses import asdict

        # The knowledge base loads on first use (seconds): in the worker thread, not the event loop.
        resp = await asyncio.to_thread(lambda: service.runtime.knowledge.search(q, top_k))
        return {
            "query": q,
            "layer": resp.layer,
            "results": [asdict(h) for h in resp.hits],
            "evidence_status": "EVIDENCE_FOUND" if resp.hits else "NO_EVIDENCE",
        }

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """The process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], response_model=Readiness, responses={503: {"model": Readiness, "description": "Not ready"}})
    async def readyz(service: ServiceDep) -> JSONResponse:
        """Ready: the database answers, its migrations are current, Redis answers (when configured)."""
        db = await asyncio.to_thread(service.store.readiness)
        redis_ok = await service.cancel_bus.ping()
        ready = bool(db["database"] and db["migrations"] and redis_ok is not False)
        body = Readiness(ready=ready, database=db["database"], migrations=db["migrations"], revision=db["revision"], redis=redis_ok, jobs=service.jobs.name)
        return JSONResponse(body.model_dump(), status_code=200 if ready else 503)

    @app.get("/metrics", tags=["ops"], response_class=Response, responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format"}})
    async def metrics(service: ServiceDep) -> Response:
        """Prometheus metrics of this process."""
        from rootproof.service.metrics import CONTENT_TYPE

        return Response(service.metrics.render(), media_type=CONTENT_TYPE)

    @app.get(
        "/runs/{run_id}",
        response_class=HTMLResponse,
        tags=["trace"],
        responses={303: {"description": "A browser (`Accept: text/html`) not signed in: to `/login`, and back afterwards."}, **_problems(401, 404, 422, json_only=True)},
    )
    async def viewer(service: ServiceDep, who: PageWho, run_id: RunId, request: Request) -> HTMLResponse:
        """One self-contained page: the run's question, route, timeline, claims and citations,
        guard verdicts and what the user received; reasoning only for auditors. A browser signs
        in at `/login` (a session cookie); programs send the key."""
        await visible_run(service, who, run_id)
        doc = await asyncio.to_thread(service.store.trace, run_id)
        if doc is None:
            raise _problem(404, "no such run", "run_id")
        texts = await asyncio.to_thread(service.store.reasoning, run_id) if who.may("audit") else None
        from rootproof.service.viewer import render_run_page

        by_cookie = not service.no_auth and "authorization" not in request.headers and cookie_value(request.headers, SESSION_COOKIE) is not None
        return HTMLResponse(render_run_page(doc, reasoning=texts, signed_in_as=f"{who.name} ({who.role})" if by_cookie else None))
