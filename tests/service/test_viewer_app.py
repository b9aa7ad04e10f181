"""The trace viewer served by the app (`GET /runs/{run_id}`), in headless Chromium: the seed
story's run and a published run, started over real HTTP; reasoning only for auditors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rootproof.service.app import create_app
from rootproof.settings import load_settings

from .support import API_KEYS, AUDITOR_KEY, OPERATOR_KEY, ThreadServer, auth, stream
from .test_viewer import _browse, _chromium, _Page


def _run(client: httpx.Client, scenario: str, message: str, headers: dict[str, str]) -> str:
    events = stream(client, "POST", "/api/chat", json={"message": message, "scenario": scenario}, headers=headers)
    assert events[-1].event == "done"
    return str(events[0].data["data"]["run_id"])  # type: ignore[index]


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    """A `--no-auth` server (loopback only; every request is admin), as a browser reaches it."""
    home = tmp_path_factory.mktemp("svc-viewer")
    settings = load_settings(data_dir=home, database_url=f"sqlite:///{home / 'rootproof.db'}")
    with ThreadServer(create_app(settings, environ={}, no_auth=True)) as srv:
        yield srv


def test_chromium_renders_the_seed_story_and_a_published_run_from_the_app(open_server: ThreadServer, tmp_path: Path) -> None:
    chromium = _chromium()
    with httpx.Client(base_url=open_server.url, timeout=60) as c:
        seed = _run(c, "payment-timeout", "支付接口最近出现超时", {})
        published = _run(c, "pg-row-lock", "why do order confirmations time out?", {})
        for name, run_id in (("seed", seed), ("published", published)):
            assert c.get(f"/runs/{run_id}").headers["content-type"].startswith("text/html")
            shot = tmp_path / f"app-{name}.png"
            dom = _Page(_browse(chromium, tmp_path / "profile", f"{open_server.url}/runs/{run_id}", "--dump-dom", f"--screenshot={shot}", "--window-size=1280,2000"))
            assert dom.title == f"rootproof run {run_id}"
            assert ("html", {"lang": "en", "data-viewer-script": "ran"}) in dom.elements
            assert dom.by("tool-call") and dom.by("model-step") and dom.by("received")
            assert dom.by("guard-verdict", data_guard="evidence")
            assert dom.by("reasoning-step") or dom.by("reasoning-hidden")
            if name == "seed":
                assert "支付接口最近出现超时" in dom.text("question")[0]
                assert dom.by("citation", data_state="withheld")
                assert "EVIDENCE_VALIDATION_FAILED" in " ".join(dom.text("received"))
            else:
                assert dom.by("claim", data_state="published") and dom.by("semantic-verdict")
            assert shot.stat().st_size > 20_000
            print(f"screenshot {name}: {shot}")


def test_the_page_needs_a_key_and_shows_reasoning_only_to_auditors(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'rootproof.db'}", api_keys=API_KEYS)
    with ThreadServer(create_app(settings, environ={})) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        run_id = _run(c, "payment-timeout", "支付接口最近出现超时", auth(OPERATOR_KEY))
        assert c.get(f"/runs/{run_id}").status_code == 401
        operator = _Page(c.get(f"/runs/{run_id}", headers=auth(OPERATOR_KEY)).text)
        auditor = _Page(c.get(f"/runs/{run_id}", headers=auth(AUDITOR_KEY)).text)
        assert operator.by("reasoning-hidden") and not operator.by("reasoning-step")
        assert auditor.by("reasoning-step") and not auditor.by("reasoning-hidden")
        assert c.get("/runs/no-such-run", headers=auth(AUDITOR_KEY)).status_code == 404


def test_a_server_without_keys_needs_no_sign_in(open_server: ThreadServer) -> None:
    with httpx.Client(base_url=open_server.url, timeout=30) as c:
        page = c.get("/login", headers={"Accept": "text/html"})
        assert page.status_code == 200 and 'data-testid="no-auth"' in page.text and 'name="key"' not in page.text
        assert "rootproof_login" not in " ".join(page.headers.get_list("set-cookie"))
        refused = c.post("/login", data={"key": "anything-at-all-1234"}, headers={"Origin": open_server.url})
        assert refused.status_code == 400 and "--no-auth" in refused.json()["detail"]
        assert "rootproof_session" not in " ".join(refused.headers.get_list("set-cookie"))
