"""Browser sign-in over plain HTTP, against a real `rootproof serve`: the session cookie's
attributes (HttpOnly, SameSite=Strict, Max-Age and Expires, Secure only over TLS a trusted proxy
vouches for), CSRF refusals (the sign-in form's token, Sec-Fetch-Site and Origin on every
cookie-authenticated state change), logout on every replica, login throttling, hostile forms,
and no key or token in a page, the store or the log. The same flows in Chromium:
test_browser.py."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from rootproof.errors import ConfigError
from rootproof.service.auth import KeyRing
from rootproof.service.process import ServeProcess
from rootproof.service.sessions import LoginThrottle, ProxyTrust, principal_from_session_cookie, token_hash
from rootproof.settings import load_settings, proxy_networks
from rootproof.store import SqlTraceStore

from .support import AUDITOR_KEY, OPERATOR2_KEY, OPERATOR_KEY, ROOT, auth, serve_process, service_env, stream

HTML = {"Accept": "text/html,application/xhtml+xml"}
TRUSTED_PEER = "127.0.0.2"
"""The address the server is told is a proxy; the tests connect from it to speak as one."""
FAILURES_PER_MINUTE = 4
WRONG_KEY = "wrong-key-Zq8PLm3vX6c2tB9n"


pytestmark = pytest.mark.xdist_group("sessions")  # one server for the module, on one worker


@dataclass
class Server:
    proc: ServeProcess
    home: Path
    run_id: str

    @property
    def url(self) -> str:
        return self.proc.url


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("svc-sessions")
    env = service_env(
        home,
        ROOTPROOF_TRUSTED_PROXIES=f"{TRUSTED_PEER},10.0.0.0/8",
        ROOTPROOF_LOGIN_FAILURES_PER_MINUTE=str(FAILURES_PER_MINUTE),
        ROOTPROOF_SESSION_TTL_S="3600",
    )
    proc = serve_process(env, home / "serve.log")
    try:
        with httpx.Client(base_url=proc.url, timeout=60) as c:
            events = stream(c, "POST", "/api/chat", json={"message": "支付接口最近出现超时", "scenario": "payment-timeout"}, headers=auth(OPERATOR_KEY))
            assert events[-1].event == "done"
            yield Server(proc=proc, home=home, run_id=str(events[0].data["data"]["run_id"]))  # type: ignore[index]
    finally:
        proc.stop()


def attributes(set_cookie: str) -> tuple[str, str, dict[str, str]]:
    """`name, value, {attribute (lower case): value}` of one Set-Cookie header."""
    first, *rest = [p.strip() for p in set_cookie.split(";")]
    name, _, value = first.partition("=")
    attrs = {}
    for part in rest:
        key, _, val = part.partition("=")
        attrs[key.strip().lower()] = val.strip()
    return name, value, attrs


def cookie_of(resp: httpx.Response, name: str) -> tuple[str, dict[str, str]]:
    found = [attributes(h) for h in resp.headers.get_list("set-cookie")]
    matching = [(value, attrs) for n, value, attrs in found if n == name]
    assert len(matching) == 1, resp.headers.get_list("set-cookie")
    return matching[0]


def login_form(c: httpx.Client, next_path: str | None = None, headers: dict[str, str] | None = None) -> tuple[str, str]:
    """GET /login: (the form's CSRF token, the login cookie's value); asserts they match."""
    resp = c.get("/login", params={"next": next_path} if next_path else None, headers={**HTML, **(headers or {})})
    assert resp.status_code == 200, resp.text
    found = re.search(r'name="csrf" value="([^"]+)"', resp.text)
    assert found is not None, resp.text
    value, _attrs = cookie_of(resp, "rootproof_login")
    assert value == found.group(1)
    return found.group(1), value


def sign_in(c: httpx.Client, origin: str, key: str, next_path: str | None = None) -> httpx.Response:
    """The form, then its POST as a browser sends it (same origin); the response (a 303)."""
    csrf, _ = login_form(c, next_path)
    form = {"csrf": csrf, "key": key} | ({"next": next_path} if next_path else {})
    return c.post("/login", data=form, headers={**HTML, "Origin": origin, "Sec-Fetch-Site": "same-origin"})


def session_token(resp: httpx.Response) -> str:
    value, _ = cookie_of(resp, "rootproof_session")
    return value


def test_sign_in_sets_a_strict_http_only_cookie_with_an_expiry_and_opens_the_page(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        resp = c.get(f"/runs/{server.run_id}", headers=HTML)
        assert resp.status_code == 303 and resp.headers["location"] == f"/login?next=/runs/{server.run_id}"
        program = c.get(f"/runs/{server.run_id}", headers={"Accept": "application/json"})
        assert program.status_code == 401 and program.json()["field"] == "Authorization"
        wrong_key = c.get(f"/runs/{server.run_id}", headers={**HTML, **auth(WRONG_KEY)})  # a key was sent: its answer
        assert wrong_key.status_code == 401 and wrong_key.json()["detail"] == "unknown API key"

        csrf, _ = login_form(c, f"/runs/{server.run_id}")
        _value, login_attrs = cookie_of(c.get("/login", headers=HTML), "rootproof_login")
        assert {"httponly", "samesite", "max-age", "path"} <= set(login_attrs) and "secure" not in login_attrs
        assert login_attrs["samesite"].lower() == "strict" and login_attrs["path"] == "/login"

        resp = sign_in(c, server.url, OPERATOR_KEY, f"/runs/{server.run_id}")
        assert resp.status_code == 303 and resp.headers["location"] == f"/runs/{server.run_id}", resp.text
        token, attrs = cookie_of(resp, "rootproof_session")
        assert len(token) >= 40
        assert attrs["samesite"].lower() == "strict" and "httponly" in attrs and attrs["path"] == "/"
        assert attrs["max-age"] == "3600" and attrs["expires"].endswith("GMT")
        assert "secure" not in attrs  # plain HTTP, no trusted proxy
        assert cookie_of(resp, "rootproof_login")[1]["max-age"] == "0"  # the form's token is spent

        page = c.get(f"/runs/{server.run_id}", headers=HTML)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert f'data-run-id="{server.run_id}"' in page.text and 'data-testid="sign-out"' in page.text
        assert "form-action 'self'" in page.text
        assert 'data-testid="reasoning-hidden"' in page.text  # an operator
        assert c.get(f"/api/runs/{server.run_id}").json()["run_id"] == server.run_id  # the API reads it too
        signed = c.get("/login", headers=HTML)
        assert "key:" in signed.text and "(operator)" in signed.text and 'name="csrf"' not in signed.text
        with httpx.Client(base_url=server.url, timeout=30) as bearer:  # programs keep their header
            assert 'data-testid="sign-out"' not in bearer.get(f"/runs/{server.run_id}", headers=auth(OPERATOR_KEY)).text

    # Only the token's SHA-256 is stored: neither the token nor the key is in the database.
    db = server.home / "rootproof.db"
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT token_hash, principal FROM web_session").fetchall()
    assert (hashlib.sha256(token.encode()).hexdigest(), rows[0][1]) in rows and rows[0][1].startswith("key:")
    stored = b"".join(p.read_bytes() for p in server.home.glob("rootproof.db*"))
    assert token.encode() not in stored and OPERATOR_KEY.encode() not in stored


def test_another_operators_run_is_not_found_and_an_auditor_sees_the_reasoning(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as other, httpx.Client(base_url=server.url, timeout=30) as auditor:
        assert sign_in(other, server.url, OPERATOR2_KEY).status_code == 303
        resp = other.get(f"/runs/{server.run_id}", headers=HTML)
        assert resp.status_code == 404 and resp.json() == {"detail": "no such run", "field": "run_id"}
        assert sign_in(auditor, server.url, AUDITOR_KEY).status_code == 303
        page = auditor.get(f"/runs/{server.run_id}", headers=HTML)
        assert page.status_code == 200 and 'data-testid="reasoning-step"' in page.text


def test_the_cookie_is_secure_only_behind_a_trusted_proxy_that_says_tls(server: Server) -> None:
    forwarded = {"X-Forwarded-Proto": "https"}
    with httpx.Client(base_url=server.url, timeout=30) as direct:  # 127.0.0.1: not a trusted proxy
        resp = direct.get("/login", headers={**HTML, **forwarded})
        assert "secure" not in cookie_of(resp, "rootproof_login")[1]
    proxy = httpx.HTTPTransport(local_address=TRUSTED_PEER)
    with httpx.Client(base_url=server.url, timeout=30, transport=proxy) as c:
        resp = c.get("/login", headers={**HTML, **forwarded})
        csrf, attrs = cookie_of(resp, "rootproof_login")
        assert "secure" in attrs
        assert "secure" not in cookie_of(c.get("/login", headers={**HTML, "X-Forwarded-Proto": "http"}), "rootproof_login")[1]
        host = server.url.removeprefix("http://")
        # Behind the TLS proxy the browser's origin is https://host: an http:// Origin is another origin.
        post = {"csrf": csrf, "key": OPERATOR_KEY}
        cookies = {"Cookie": f"rootproof_login={csrf}"}
        wrong = c.post("/login", data=post, headers={**forwarded, **cookies, "Origin": f"http://{host}"})
        assert wrong.status_code == 403 and wrong.json()["field"] == "Origin"
        resp = c.post("/login", data=post, headers={**forwarded, **cookies, "Origin": f"https://{host}"})
        assert resp.status_code == 303, resp.text
        token, attrs = cookie_of(resp, "rootproof_session")
        assert "secure" in attrs and "httponly" in attrs and attrs["samesite"].lower() == "strict"


def test_cookie_requests_that_change_state_must_come_from_the_service_itself(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert sign_in(c, server.url, OPERATOR_KEY).status_code == 303
        cancel = f"/api/runs/{server.run_id}/cancel"
        chat = {"message": "why is checkout slow", "scenario": "pg-row-lock"}
        for headers, field in (
            ({"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, "Sec-Fetch-Site"),
            ({"Sec-Fetch-Site": "same-site"}, "Sec-Fetch-Site"),
            ({"Origin": "https://evil.example"}, "Origin"),
            ({"Origin": "null"}, "Origin"),
            ({}, "Origin"),
        ):
            for resp in (c.post(cancel, headers=headers), c.post("/api/chat", json=chat, headers=headers)):
                assert resp.status_code == 403, (headers, resp.text)
                assert resp.json()["field"] == field
        # From its own pages: the request goes through (the run already ended: 409).
        assert c.post(cancel, headers={"Sec-Fetch-Site": "same-origin"}).status_code == 409
        assert c.post(cancel, headers={"Origin": server.url}).status_code == 409
        # A program's key needs no such header: CSRF rides on cookies only.
        with httpx.Client(base_url=server.url, timeout=30) as program:
            assert program.post(cancel, headers=auth(OPERATOR_KEY)).status_code == 409
        # Logout is a state change too: refused cross-site, and the session goes on.
        assert c.post("/logout", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
        assert c.get(f"/api/runs/{server.run_id}").status_code == 200


def test_the_sign_in_form_refuses_login_csrf(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        csrf, _ = login_form(c)
        same = {"Origin": server.url}
        no_cookie = httpx.post(f"{server.url}/login", data={"csrf": csrf, "key": OPERATOR_KEY}, headers=same)
        assert no_cookie.status_code == 403 and no_cookie.json()["field"] == "csrf"
        forged = c.post("/login", data={"csrf": "A" * 43, "key": OPERATOR_KEY}, headers=same)
        assert forged.status_code == 403 and forged.json()["field"] == "csrf"
        missing = c.post("/login", data={"key": OPERATOR_KEY}, headers=same)
        assert missing.status_code == 403 and missing.json()["field"] == "csrf"
        cross = c.post("/login", data={"csrf": csrf, "key": OPERATOR_KEY}, headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
        assert cross.status_code == 403 and cross.json()["field"] == "Sec-Fetch-Site"
        for resp in (no_cookie, forged, missing, cross):
            assert "rootproof_session" not in " ".join(resp.headers.get_list("set-cookie"))
        page = c.post("/login", data={"csrf": "forged", "key": OPERATOR_KEY}, headers={**HTML, **same})
        assert page.status_code == 403 and 'data-testid="login-error"' in page.text and "csrf" in page.text
        # The page shows the form again with a fresh token (and its cookie): that one signs in.
        fresh = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert fresh is not None and fresh.group(1) != csrf
        assert c.post("/login", data={"csrf": csrf, "key": OPERATOR_KEY}, headers=same).status_code == 403
        assert c.post("/login", data={"csrf": fresh.group(1), "key": OPERATOR_KEY}, headers=same).status_code == 303


def test_a_wrong_key_is_refused_without_echoing_it(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30, transport=httpx.HTTPTransport(local_address=TRUSTED_PEER)) as c:
        client = {"X-Forwarded-For": "198.51.100.23"}  # its own address: the throttle's count is its own
        csrf, _ = login_form(c)
        for headers in ({"Accept": "application/json"}, HTML):  # JSON first: the page renews the form
            resp = c.post("/login", data={"csrf": csrf, "key": WRONG_KEY}, headers={**headers, **client, "Origin": server.url})
            assert resp.status_code == 401
            assert WRONG_KEY not in resp.text and WRONG_KEY not in str(resp.headers)
            if headers is HTML:
                assert "key: unknown API key" in resp.text and 'name="key"' in resp.text and "value=\"wrong" not in resp.text
            else:
                assert resp.json() == {"detail": "key: unknown API key", "field": "key"}
    assert WRONG_KEY not in server.proc.log_tail(1_000_000)


def test_failed_sign_ins_are_throttled_per_client_address(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30, transport=httpx.HTTPTransport(local_address=TRUSTED_PEER)) as c:
        csrf, _ = login_form(c)

        def attempt(client: str, key: str) -> httpx.Response:
            # The nearest address that is not a proxy is the client's (10.0.0.0/8 is trusted too).
            return c.post("/login", data={"csrf": csrf, "key": key}, headers={"X-Forwarded-For": f"{client}, 10.1.2.3", "Origin": server.url})

        for _ in range(FAILURES_PER_MINUTE):
            assert attempt("203.0.113.7", WRONG_KEY).status_code == 401
        blocked = attempt("203.0.113.7", OPERATOR_KEY)  # even the right key waits
        assert blocked.status_code == 429 and blocked.json()["field"] == "key"
        assert 1 <= int(blocked.headers["retry-after"]) <= 61
        assert attempt("203.0.113.8", OPERATOR_KEY).status_code == 303  # another client is not


@pytest.mark.parametrize(
    ("body", "content_type", "status", "field"),
    [
        ("csrf=x&key=y&next=//evil.example/", "application/x-www-form-urlencoded", 422, "next"),
        ("csrf=x&key=y&next=https://evil.example/", "application/x-www-form-urlencoded", 422, "next"),
        ('{"key": "y"}', "application/json", 415, "(body)"),
        ("key=a&key=b", "application/x-www-form-urlencoded", 400, "key"),
        ("key=%ff%fe", "application/x-www-form-urlencoded", 400, "(body)"),
        ("&".join(f"f{i}=1" for i in range(20)), "application/x-www-form-urlencoded", 400, "(body)"),
        ("key=" + "k" * 9000, "application/x-www-form-urlencoded", 413, "(body)"),
    ],
    ids=["next-other-host", "next-absolute", "json", "duplicate", "bad-utf8", "many-fields", "too-large"],
)
def test_hostile_forms_are_a_4xx_naming_the_field(server: Server, body: str, content_type: str, status: int, field: str) -> None:
    resp = httpx.post(f"{server.url}/login", content=body.encode(), headers={"Content-Type": content_type, "Origin": server.url}, timeout=30)
    assert resp.status_code == status, resp.text
    assert resp.json()["field"] == field
    bad_next = httpx.get(f"{server.url}/login", params={"next": "//evil.example"}, timeout=30)
    assert bad_next.status_code == 422 and bad_next.json()["field"] == "next"


def test_logout_ends_the_session_on_every_replica(server: Server, tmp_path: Path) -> None:
    other = serve_process(service_env(tmp_path, ROOTPROOF_DATABASE_URL=f"sqlite:///{server.home / 'rootproof.db'}"), tmp_path / "serve.log")
    try:
        with httpx.Client(base_url=server.url, timeout=30) as a:
            token = session_token(sign_in(a, server.url, OPERATOR_KEY))
            cookie = {"Cookie": f"rootproof_session={token}"}
            assert httpx.get(f"{other.url}/runs/{server.run_id}", headers={**HTML, **cookie}, timeout=30).status_code == 200
            out = a.post("/logout", headers={"Origin": server.url})
            assert out.status_code == 303 and out.headers["location"] == "/login"
            assert cookie_of(out, "rootproof_session")[1]["max-age"] == "0"
        for url in (server.url, other.url):
            page = httpx.get(f"{url}/runs/{server.run_id}", headers={**HTML, **cookie}, timeout=30)
            assert page.status_code == 303 and page.headers["location"].startswith("/login?next=")
            api = httpx.get(f"{url}/api/runs/{server.run_id}", headers=cookie, timeout=30)
            assert api.status_code == 401 and api.json()["field"] == "Cookie"
    finally:
        other.stop()
    assert token not in other.log_tail(1_000_000) and token not in server.proc.log_tail(1_000_000)


def test_docs_and_redoc_load_their_assets_from_this_server(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for page, asset in (("/docs", "/docs-assets/swagger-ui-bundle.js"), ("/redoc", "/docs-assets/redoc.standalone.js")):
            html = c.get(page).text
            assert asset in html
            assert not re.findall(r"""(?:src|href)=["']?(?:https?:)?//""", html), html  # nothing from another host
            resp = c.get(asset)
            assert resp.status_code == 200 and "javascript" in resp.headers["content-type"] and len(resp.content) > 100_000
        assert c.get("/docs-assets/swagger-ui.css").status_code == 200


def test_a_bad_trusted_proxy_stops_serve_with_exit_2_naming_the_variable(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("rootproof")
    env = service_env(tmp_path, ROOTPROOF_TRUSTED_PROXIES="10.0.0.1,proxy.internal")
    proc = subprocess.run([str(exe), "serve", "--port", "1"], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert "ROOTPROOF_TRUSTED_PROXIES: entry 2 (proxy.internal) is not an IP address or network" in proc.stderr


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("ROOTPROOF_TRUSTED_PROXIES", "10.0.0.300", "ROOTPROOF_TRUSTED_PROXIES: entry 1 (10.0.0.300) is not an IP address or network"),
        ("ROOTPROOF_TRUSTED_PROXIES", "10.0.0.0/33", "ROOTPROOF_TRUSTED_PROXIES: entry 1 (10.0.0.0/33)"),
        ("ROOTPROOF_SESSION_TTL_S", "10", "ROOTPROOF_SESSION_TTL_S: Input should be greater than or equal to 300"),
        ("ROOTPROOF_SESSION_TTL_S", "8h", "ROOTPROOF_SESSION_TTL_S: Input should be a valid integer"),
        ("ROOTPROOF_LOGIN_FAILURES_PER_MINUTE", "-1", "ROOTPROOF_LOGIN_FAILURES_PER_MINUTE: Input should be greater than or equal to 0"),
    ],
)
def test_bad_settings_name_their_variable(monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert expected in str(err.value)


def test_good_settings_parse() -> None:
    settings = load_settings(trusted_proxies=" 10.0.0.5 , 10.0.0.0/8,,::1 ")
    assert [str(n) for n in settings.trusted_proxy_networks()] == ["10.0.0.5/32", "10.0.0.0/8", "::1/128"]
    assert load_settings().trusted_proxy_networks() == () and load_settings().session_ttl_s == 28_800


# -- the pieces, without a server: a real store and key ring -----------------------------------


def test_a_session_resolves_to_its_keys_current_role_until_it_expires_or_the_key_goes(tmp_path: Path) -> None:
    now = datetime(2026, 12, 6, 4, 0, tzinfo=UTC)
    ring = KeyRing.load(f"{OPERATOR_KEY}:operator", None)
    who = ring.authenticate(OPERATOR_KEY)
    assert who is not None
    with SqlTraceStore(f"sqlite:///{tmp_path / 'rootproof.db'}") as store:
        store.open_web_session(token_hash("tok-1"), who.name, expires_at=now + timedelta(hours=1), now=now)
        headers = {"cookie": "theme=dark; rootproof_session=tok-1; other=x"}
        assert principal_from_session_cookie(headers, store, ring, now=now) == who
        promoted = KeyRing.load(f"{OPERATOR_KEY}:admin", None)  # the key's role changed: the session's did too
        found = principal_from_session_cookie(headers, store, promoted, now=now)
        assert found is not None and found.role == "admin"
        assert principal_from_session_cookie(headers, store, KeyRing.load(f"{AUDITOR_KEY}:auditor", None), now=now) is None
        assert principal_from_session_cookie(headers, store, ring, now=now + timedelta(hours=1)) is None
        for cookie in ("rootproof_session=", "rootproof_session=tok-2", "rootproof_session=" + "x" * 200, "rootproof_sessionx=tok-1", ""):
            assert principal_from_session_cookie({"cookie": cookie}, store, ring, now=now) is None, cookie
        assert principal_from_session_cookie({}, store, ring, now=now) is None


def test_proxy_trust_believes_forwarded_headers_from_its_proxies_only() -> None:
    trust = ProxyTrust(proxy_networks("10.0.0.0/8, 192.0.2.1,::1"))
    tls = {"x-forwarded-proto": "https", "x-forwarded-for": "198.51.100.4, 10.9.9.9"}
    assert trust.is_tls("http", "10.1.1.1", tls) and trust.is_tls("http", "::1", tls)
    assert not trust.is_tls("http", "203.0.113.1", tls) and not trust.is_tls("http", None, tls)
    assert trust.is_tls("https", "203.0.113.1", {})  # this server's own TLS
    assert not trust.is_tls("http", "10.1.1.1", {"x-forwarded-proto": "https, http"})  # the nearest proxy's word counts
    assert trust.client("10.1.1.1", tls) == "198.51.100.4"
    assert trust.client("203.0.113.1", tls) == "203.0.113.1"
    assert trust.client("10.1.1.1", {"x-forwarded-for": "not-an-ip, 10.2.2.2"}) == "10.1.1.1"
    assert not ProxyTrust().trusts("127.0.0.1")


def test_the_throttle_forgets_failures_after_a_minute() -> None:
    throttle = LoginThrottle(2, max_clients=2)
    throttle.failed("a", now=100.0)
    assert throttle.retry_after("a", now=100.5) is None
    throttle.failed("a", now=101.0)
    assert throttle.retry_after("a", now=101.0) == 60
    assert throttle.retry_after("a", now=159.5) == 1
    assert throttle.retry_after("a", now=160.1) is None  # the first failure is a minute old
    throttle.failed("b", now=100.0)
    throttle.failed("c", now=100.0)  # a third address: the oldest one is forgotten
    assert len(throttle._failures) == 2
    assert LoginThrottle(0).retry_after("a") is None
