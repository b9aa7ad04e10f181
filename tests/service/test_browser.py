"""A browser opens the viewer: headless Chromium (Debian's `chromium`, driven over the DevTools
protocol by `tests/service/cdp.py`) against a real `rootproof serve`. It signs in through the
form, opens a run and sees it; another operator's run is not found; an auditor sees the
reasoning; after signing out the page is refused; `/docs` renders Swagger UI with every fetch
that is not to loopback failing. Without chromium it skips (fails under
ROOTPROOF_REQUIRE_SERVICES=1). Plain-HTTP checks of the same: test_sessions.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from rootproof.service.process import ServeProcess

from .cdp import Browser, Context, Tab, launch
from .support import AUDITOR_KEY, OPERATOR2_KEY, OPERATOR_KEY, auth, serve_process, service_env, stream
from .test_viewer import _chromium

pytestmark = pytest.mark.xdist_group("browser")  # one server (and browser) for the module, on one worker


@dataclass
class World:
    server: ServeProcess
    browser: Browser
    run_id: str


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    chromium = _chromium()
    home = tmp_path_factory.mktemp("svc-browser")
    server = serve_process(service_env(home), home / "serve.log")
    try:
        with launch(chromium, home / "profile") as browser, httpx.Client(base_url=server.url, timeout=60) as c:
            events = stream(c, "POST", "/api/chat", json={"message": "支付接口最近出现超时", "scenario": "payment-timeout"}, headers=auth(OPERATOR_KEY))
            assert events[-1].event == "done"
            yield World(server=server, browser=browser, run_id=str(events[0].data["data"]["run_id"]))  # type: ignore[index]
    finally:
        server.stop()


def sign_in(world: World, key: str) -> tuple[Context, Tab]:
    """A fresh browser context opens the run's page, is sent to the form, types the key and
    submits it; it ends on the run's page (or what the server answers there)."""
    ctx = world.browser.context()
    tab = ctx.tab()
    tab.goto(f"{world.server.url}/runs/{world.run_id}")
    assert tab.evaluate("location.pathname + location.search") == f"/login?next=/runs/{world.run_id}"
    assert tab.evaluate("!!document.querySelector('[data-testid=login-form]')")
    tab.type_into("#key", key)
    tab.click("#sign-in")
    assert tab.evaluate("location.pathname") == f"/runs/{world.run_id}"
    return ctx, tab


def test_an_operator_signs_in_through_the_form_sees_the_run_and_signs_out(world: World) -> None:
    ctx, tab = sign_in(world, OPERATOR_KEY)
    assert tab.evaluate("document.body.dataset.runId") == world.run_id
    assert tab.evaluate("document.documentElement.dataset.viewerScript") == "ran"  # the page's own script ran
    assert tab.evaluate("document.querySelectorAll('[data-testid=tool-call]').length") > 0
    assert tab.evaluate("!!document.querySelector('[data-testid=reasoning-hidden]')")
    assert not tab.evaluate("!!document.querySelector('[data-testid=reasoning-step]')")
    assert "支付接口最近出现超时" in tab.evaluate("document.querySelector('[data-testid=question]').innerText")
    # The session cookie: HttpOnly (no script sees it), SameSite=Strict, with an expiry.
    session = [c for c in ctx.cookies() if c["name"] == "rootproof_session"]
    assert len(session) == 1 and session[0]["httpOnly"] and session[0]["sameSite"] == "Strict"
    assert 3000 < session[0]["expires"] - time.time() <= 28_800 + 60 and not session[0]["secure"]
    assert "rootproof_session" not in tab.evaluate("document.cookie")
    # Sign out from the page's own button: back at the form, and the run's page is refused.
    tab.click("[data-testid=sign-out] button")
    assert tab.evaluate("location.pathname") == "/login"
    assert not [c for c in ctx.cookies() if c["name"] == "rootproof_session"]
    tab.goto(f"{world.server.url}/runs/{world.run_id}")
    assert tab.evaluate("location.pathname + location.search") == f"/login?next=/runs/{world.run_id}"
    assert not tab.evaluate("!!document.body.dataset.runId")


def test_the_same_cookie_is_refused_after_sign_out(world: World) -> None:
    """A copy of the cookie taken before signing out (another tab, a stolen one) no longer works."""
    ctx, tab = sign_in(world, OPERATOR_KEY)
    token = next(c["value"] for c in ctx.cookies() if c["name"] == "rootproof_session")
    tab.click("[data-testid=sign-out] button")
    other = world.browser.context()
    other.browser.send(
        "Storage.setCookies",
        {"browserContextId": other.id, "cookies": [{"name": "rootproof_session", "value": token, "url": world.server.url, "httpOnly": True, "sameSite": "Strict"}]},
    )
    stale = other.tab()
    stale.goto(f"{world.server.url}/runs/{world.run_id}")
    assert stale.evaluate("location.pathname") == "/login"


def test_another_operators_run_is_not_found(world: World) -> None:
    _ctx, tab = sign_in(world, OPERATOR2_KEY)
    body = json.loads(tab.evaluate("document.body.innerText"))
    assert body == {"detail": "no such run", "field": "run_id"}
    assert not tab.evaluate("!!document.body.dataset.runId")


def test_an_auditor_sees_the_reasoning(world: World) -> None:
    _ctx, tab = sign_in(world, AUDITOR_KEY)
    assert tab.evaluate("document.body.dataset.runId") == world.run_id
    assert tab.evaluate("document.querySelectorAll('[data-testid=reasoning-step]').length") > 0
    assert not tab.evaluate("!!document.querySelector('[data-testid=reasoning-hidden]')")


def test_docs_render_swagger_ui_with_no_network(world: World) -> None:
    tab = world.browser.context().tab()
    # The browser has no network beyond loopback: a CDN fetch fails (the old /docs was blank).
    outside = "fetch('https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css').then(() => 'loaded', () => 'failed')"
    tab.goto(f"{world.server.url}/login")
    assert tab.evaluate(outside) == "failed"
    tab.goto(f"{world.server.url}/docs")
    tab.wait_for("document.querySelectorAll('.swagger-ui .opblock').length > 5", what="Swagger UI's operations")
    assert "rootproof" in tab.evaluate("document.querySelector('.swagger-ui .info .title').innerText")
    paths = tab.evaluate("[...document.querySelectorAll('.opblock-summary-path')].map(e => e.innerText.replace(/\\u200b/g, ''))")
    assert "/api/chat" in paths and "/runs/{run_id}" in paths
    requested = list(tab.requests())
    assert any(u.endswith("/docs-assets/swagger-ui-bundle.js") for u in requested)
    assert [u for u in requested if not u.startswith((world.server.url, "data:"))] == []
