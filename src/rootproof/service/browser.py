"""What a browser needs of the team service: the sign-in form, logout, and `/docs` and
`/redoc` with their assets served from an installed package (no network).

`GET /login` shows the form (an API key, once) with a CSRF token that is also set as a
short-lived cookie; `POST /login` checks that the two match and that the browser says the form
came from this service (`Sec-Fetch-Site` or `Origin`), then stores a session
(`rootproof.service.sessions`) and sets its cookie. `POST /logout` deletes it. These routes are
for browsers and are not in the OpenAPI document; programs send `Authorization: Bearer KEY`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import html
import re
from datetime import timedelta
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from rootproof.errors import StoreError
from rootproof.run.records import utcnow
from rootproof.service.auth import Principal
from rootproof.service.sessions import (
    LOGIN_COOKIE,
    LOGIN_FORM_TTL_S,
    SESSION_COOKIE,
    LoginThrottle,
    ProxyTrust,
    cookie_value,
    cross_site_reason,
    new_token,
    principal_from_session_cookie,
    token_hash,
)

if TYPE_CHECKING:
    from rootproof.service.core import Service

__all__ = ["DOCS_ASSETS", "install_browser_routes", "login_location", "own_origin", "request_is_tls", "wants_html"]

DOCS_ASSETS = "/docs-assets"
"""Where Swagger UI's and ReDoc's files are served from (the `fastapi-offline` package's copy)."""
FORM_BYTES = 8192
"""The largest sign-in form body read."""
KEY_CHARS = 1024
"""The longest key a sign-in form may carry."""
_NEXT = re.compile(r"^/(?![/\\])[A-Za-z0-9._~:/?=&%+-]{0,511}$")
"""Where a sign-in may return to: a path of this server (never `//host` or another site)."""


def _assets_dir() -> Path:
    return Path(str(files("fastapi_offline").joinpath("static")))


def wants_html(request: Request) -> bool:
    """Whether the client asks for a page (a browser's navigation) rather than JSON."""
    return "text/html" in request.headers.get("accept", "").lower()


def request_is_tls(request: Request, trust: ProxyTrust) -> bool:
    """Whether the browser reached the service over TLS (directly or via a trusted proxy)."""
    peer = request.client.host if request.client else None
    return trust.is_tls(request.url.scheme, peer, request.headers)


def own_origin(request: Request, trust: ProxyTrust) -> str:
    """This service's origin as the browser sees it: the scheme and the `Host` header."""
    scheme = "https" if request_is_tls(request, trust) else "http"
    return f"{scheme}://{request.headers.get('host', '')}"


def login_location(next_path: str | None) -> str:
    """The sign-in form's URL, returning to `next_path` afterwards."""
    return "/login" + (f"?next={quote(next_path, safe='/')}" if next_path else "")


_CSS = (
    "body{font:15px/1.5 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}"
    "main{max-width:26rem;margin:12vh auto;background:#fff;padding:1.5rem 2rem;border-radius:8px;"
    "box-shadow:0 1px 4px rgba(0,0,0,.12)}h1{font-size:1.3rem;margin:0 0 1rem}"
    "label{display:block;margin:.5rem 0 .25rem}input[type=password]{width:100%;box-sizing:border-box;"
    "padding:.45rem;font:inherit}button{margin-top:1rem;padding:.45rem 1rem;font:inherit}"
    ".error{color:#a4161a;background:#fde8e8;padding:.5rem .75rem;border-radius:4px}.meta{color:#5b6275}"
)
_CSP = (
    "default-src 'none'; style-src 'sha256-"
    + base64.b64encode(hashlib.sha256(_CSS.encode("utf-8")).digest()).decode("ascii")
    + "'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_PAGE_HEADERS = {"Content-Security-Policy": _CSP, "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def render_login_page(*, csrf: str | None, next_path: str | None, error: str | None = None, signed_in: Principal | None = None, no_auth: bool = False) -> str:
    """The sign-in page: the form (with its CSRF token), an error, or who is signed in."""
    parts = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">'
             '<meta name="robots" content="noindex"><title>Sign in · rootproof</title>'
             f"<style>{_CSS}</style></head><body><main>"]
    if error:
        parts.append(f'<p class="error" role="alert" data-testid="login-error">{_e(error)}</p>')
    if no_auth:
        parts.append('<h1>rootproof</h1><p data-testid="no-auth">This server runs without API keys (<code>--no-auth</code>, loopback only): '
                     'no sign-in is needed.</p><p><a href="/docs">API documentation</a></p>')
    elif signed_in is not None:
        parts.append(f'<h1>rootproof</h1><p data-testid="signed-in">Signed in as <code>{_e(signed_in.name)}</code> ({_e(signed_in.role)}).</p>'
                     '<p><a href="/docs">API documentation</a></p>'
                     '<form method="post" action="/logout" data-testid="sign-out"><button type="submit">Sign out</button></form>')
    else:
        hidden = f'<input type="hidden" name="csrf" value="{_e(csrf or "")}">'
        if next_path:
            hidden += f'<input type="hidden" name="next" value="{_e(next_path)}">'
        parts.append('<h1>Sign in to rootproof</h1><form method="post" action="/login" data-testid="login-form">'
                     + hidden
                     + '<label for="key">API key</label><input type="password" id="key" name="key" required autocomplete="current-password" autofocus>'
                     '<button type="submit" id="sign-in">Sign in</button></form>'
                     '<p class="meta">The key is sent once; the browser then keeps a session cookie.</p>')
    parts.append("</main></body></html>\n")
    return "".join(parts)


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def _trust(request: Request) -> ProxyTrust:
    trust: ProxyTrust = request.app.state.proxy_trust
    return trust


def _cookie_options(request: Request) -> dict[str, Any]:
    return {"httponly": True, "samesite": "strict", "secure": request_is_tls(request, _trust(request))}


def _problem_page(
    request: Request, status: int, detail: str, field: str | None, *, next_path: str | None = None, headers: dict[str, str] | None = None
) -> Response:
    """A refused sign-in: the form again with the error (a browser), or a JSON problem."""
    if not wants_html(request):
        return JSONResponse({"detail": detail, "field": field}, status_code=status, headers=headers)
    csrf = new_token()
    page = render_login_page(csrf=csrf, next_path=next_path, error=detail, no_auth=_service(request).no_auth)
    resp = HTMLResponse(page, status_code=status, headers={**_PAGE_HEADERS, **(headers or {})})
    resp.set_cookie(LOGIN_COOKIE, csrf, max_age=LOGIN_FORM_TTL_S, path="/login", **_cookie_options(request))
    return resp


def _checked_next(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    if not _NEXT.match(value):
        raise ValueError("next: expected a path of this server, such as /runs/RUN_ID")
    return value


async def _session_principal(request: Request) -> Principal | None:
    service = _service(request)
    if cookie_value(request.headers, SESSION_COOKIE) is None:
        return None
    try:
        return await asyncio.to_thread(principal_from_session_cookie, request.headers, service.store, service.keyring)
    except StoreError:
        return None


def install_browser_routes(app: FastAPI, *, login_failures_per_minute: int) -> None:
    """Add `/login`, `/logout`, `/docs`, `/redoc` and the docs' assets to `app`."""
    throttle = LoginThrottle(login_failures_per_minute)
    app.mount(DOCS_ASSETS, StaticFiles(directory=_assets_dir()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title} · API",
            oauth2_redirect_url="/docs/oauth2-redirect",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url="/openapi.json",
            title=f"{app.title} · API",
            redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{DOCS_ASSETS}/favicon.png",
            with_google_fonts=False,
        )

    @app.get("/login", include_in_schema=False, response_class=HTMLResponse)
    async def login_form(request: Request) -> Response:
        service = _service(request)
        try:
            next_path = _checked_next(request.query_params.get("next"))
        except ValueError as exc:
            return _problem_page(request, 422, str(exc), "next")
        who = None if service.no_auth else await _session_principal(request)
        if who is not None and next_path:
            return RedirectResponse(next_path, status_code=303, headers={"Cache-Control": "no-store"})
        csrf = new_token()
        page = render_login_page(csrf=csrf, next_path=next_path, signed_in=who, no_auth=service.no_auth)
        resp = HTMLResponse(page, headers=_PAGE_HEADERS)
        if who is None and not service.no_auth:
            resp.set_cookie(LOGIN_COOKIE, csrf, max_age=LOGIN_FORM_TTL_S, path="/login", **_cookie_options(request))
        return resp

    @app.post("/login", include_in_schema=False, response_class=HTMLResponse)
    async def login(request: Request) -> Response:
        service = _service(request)
        trust = _trust(request)
        if service.no_auth:
            return _problem_page(request, 400, "this server runs with --no-auth: no sign-in is needed", None)
        client = trust.client(request.client.host if request.client else None, request.headers)
        wait = throttle.retry_after(client)
        if wait is not None:
            return _problem_page(request, 429, f"too many failed sign-ins from this address; try again in {wait} s", "key", headers={"Retry-After": str(wait)})
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/x-www-form-urlencoded":
            return _problem_page(request, 415, "(body): expected a form (application/x-www-form-urlencoded) with the field key", "(body)")
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > FORM_BYTES:
            return _problem_page(request, 413, f"(body): the form is larger than {FORM_BYTES} bytes", "(body)")
        raw = await request.body()
        if len(raw) > FORM_BYTES:
            return _problem_page(request, 413, f"(body): the form is larger than {FORM_BYTES} bytes", "(body)")
        try:
            pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=8, errors="strict")
        except (UnicodeDecodeError, ValueError):
            return _problem_page(request, 400, "(body): not a form of UTF-8 text with at most 8 fields", "(body)")
        form: dict[str, str] = {}
        for name, value in pairs:
            if name in form:
                return _problem_page(request, 400, f"{name[:32]}: given twice", name[:32])
            form[name] = value
        try:
            next_path = _checked_next(form.get("next"))
        except ValueError as exc:
            return _problem_page(request, 422, str(exc), "next")
        refused = cross_site_reason(request.headers, own_origin(request, trust))
        if refused is not None:
            return _problem_page(request, 403, refused[1], refused[0], next_path=next_path)
        expected = cookie_value(request.headers, LOGIN_COOKIE)
        given = form.get("csrf", "")
        if expected is None or not hmac.compare_digest(expected.encode("utf-8"), given.encode("utf-8")):
            return _problem_page(request, 403, "csrf: the sign-in form expired or was not loaded from this server; sign in again", "csrf", next_path=next_path)
        key = form.get("key", "")
        if not key.strip():
            return _problem_page(request, 422, "key: expected an API key", "key", next_path=next_path)
        if len(key) > KEY_CHARS:
            throttle.failed(client)
            return _problem_page(request, 422, f"key: longer than {KEY_CHARS} characters", "key", next_path=next_path)
        who = service.keyring.authenticate(key)
        if who is None:
            throttle.failed(client)
            return _problem_page(request, 401, "key: unknown API key", "key", next_path=next_path)
        token = new_token()
        now = utcnow()
        ttl = service.settings.session_ttl_s
        old = cookie_value(request.headers, SESSION_COOKIE)
        try:
            if old is not None:
                await asyncio.to_thread(service.store.close_web_session, token_hash(old))
            await asyncio.to_thread(service.store.open_web_session, token_hash(token), who.name, expires_at=now + timedelta(seconds=ttl), now=now)
        except StoreError:
            return _problem_page(request, 503, "the trace store is unavailable: the session could not be recorded; try again", None, next_path=next_path)
        resp = RedirectResponse(next_path or "/login", status_code=303, headers={"Cache-Control": "no-store"})
        options = _cookie_options(request)
        resp.set_cookie(SESSION_COOKIE, token, max_age=ttl, expires=ttl, path="/", **options)
        resp.delete_cookie(LOGIN_COOKIE, path="/login", **options)
        return resp

    @app.post("/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        service = _service(request)
        token = cookie_value(request.headers, SESSION_COOKIE)
        if token is not None:
            refused = cross_site_reason(request.headers, own_origin(request, _trust(request)))
            if refused is not None:
                return JSONResponse({"detail": refused[1], "field": refused[0]}, status_code=403)
            try:
                await asyncio.to_thread(service.store.close_web_session, token_hash(token))
            except StoreError:
                return JSONResponse({"detail": "the trace store is unavailable: the session could not be ended; try again", "field": None}, status_code=503)
        resp = RedirectResponse("/login", status_code=303, headers={"Cache-Control": "no-store"})
        resp.delete_cookie(SESSION_COOKIE, path="/", **_cookie_options(request))
        return resp
