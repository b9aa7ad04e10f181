"""The service's OpenAPI document over real HTTP, and a bounded schemathesis run against the
live server: no 5xx, every status it answers documented, every documented response's shape.

Each operation is fuzzed in its own test, from `APIOperation.as_strategy` under Hypothesis
(`schemathesis.pytest.from_fixture` reads `Function._nodeid`, which pytest 9 no longer has),
in positive and negative mode. Positive cases are also drawn with a real run's ids, the seed
chat and the example webhook payloads, so that the 2xx answers and their shapes are checked too.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from rootproof.service.app import create_app
from rootproof.settings import load_settings

from .support import ADMIN_KEY, API_KEYS, ROOT, ThreadServer, auth, stream

ROUTES: dict[str, set[str]] = {
    "/api/chat": {"post"},
    "/api/runs/{run_id}/events": {"get"},
    "/api/alerts/alertmanager": {"post"},
    "/api/alerts/grafana": {"post"},
    "/api/runs": {"get"},
    "/api/runs/{run_id}": {"get"},
    "/api/runs/{run_id}/cancel": {"post"},
    "/api/diagnosis/{session_id}/trace": {"get"},
    "/api/diagnosis/{session_id}/trace/reasoning": {"get"},
    "/api/search/similar": {"get"},
    "/healthz": {"get"},
    "/readyz": {"get"},
    "/metrics": {"get"},
    "/runs/{run_id}": {"get"},
}
"""Every route of the service and its methods (the OpenAPI document must list exactly these)."""

PUBLIC = {"/healthz", "/readyz", "/metrics"}
"""The routes without an API key; they take no input either."""
CASES = [
    (method.upper(), path, mode)
    for path, methods in sorted(ROUTES.items())
    for method in sorted(methods)
    for mode in ([GenerationMode.POSITIVE] if path in PUBLIC else [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
]
"""What is fuzzed: every operation in positive mode, and in negative mode where it takes input."""
SEED_CHAT = {"message": "支付接口最近出现超时", "scenario": "payment-timeout"}
WEBHOOKS = {
    "/api/alerts/alertmanager": ("alertmanager-pg-row-lock.json", "pg-row-lock"),
    "/api/alerts/grafana": ("grafana-redis-maxclients.json", "redis-maxclients"),
}
"""A real payload (examples/alerts) and its scenario, per webhook."""


def _webhook_payload(path: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((ROOT / "examples" / "alerts" / WEBHOOKS[path][0]).read_text(encoding="utf-8"))
    return payload


HAS_VIEWER = importlib.util.find_spec("rootproof.service.viewer") is not None
"""The run page (`GET /runs/{run_id}`) renders with `rootproof.service.viewer`: until that
module is there, the page of a real run is a 500 and is not fuzzed with one."""

SCHEMATHESIS = {
    "request-timeout": 10,  # an event stream is read for at most this long in total
    "max-stream-events": 100,
    # Schema-valid is not always acceptable: a chat needs evidence (a scenario, or targets
    # configured on the server) and a webhook's body is read by the alert parser, which
    # answers 422 naming the field; the schema cannot say either.
    "checks": {"positive_data_acceptance": {"enabled": False}},
}
FUZZ = settings(  # per operation and mode
    max_examples=12,
    deadline=timedelta(seconds=20),
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as found
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


@dataclass
class Live:
    """The server under test, its OpenAPI document as served and a finished run's ids."""

    server: ThreadServer
    document: dict[str, Any]
    run_id: str
    session_id: str


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    home = tmp_path_factory.mktemp("svc-openapi")
    settings_ = load_settings(data_dir=home, database_url=f"sqlite:///{home / 'rootproof.db'}", api_keys=API_KEYS, sse_heartbeat_s=0.5)
    with ThreadServer(create_app(settings_, environ={})) as srv, httpx.Client(base_url=srv.url, timeout=120) as client:
        resp = client.get("/openapi.json")
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("application/json")
        # A real run to read (this also loads the knowledge base, before any request has a timeout).
        events = stream(client, "POST", "/api/chat", json=SEED_CHAT, headers=auth(ADMIN_KEY))
        meta = events[0].data["data"]  # type: ignore[index]
        assert events[-1].event == "done"
        yield Live(server=srv, document=resp.json(), run_id=meta["run_id"], session_id=meta["session_id"])


@pytest.fixture(scope="module")
def api_schema(live: Live) -> Any:
    config = schemathesis.Config.from_dict(SCHEMATHESIS)
    return schemathesis.openapi.from_url(live.server.url + "/openapi.json", config=config)


def test_openapi_lists_every_route_and_docs_are_served(live: Live) -> None:
    paths = live.document["paths"]
    assert {path: set(ops) for path, ops in paths.items()} == ROUTES
    schemes = live.document["components"]["securitySchemes"]
    assert schemes == {"HTTPBearer": {"type": "http", "scheme": "bearer", "description": schemes["HTTPBearer"]["description"]}}
    for path, ops in paths.items():
        for method, op in ops.items():
            public = path in PUBLIC
            assert (op.get("security") is None) == public, (method, path)
            assert public != bool(op.get("parameters") or op.get("requestBody")), (method, path)
            if not public:
                assert "401" in op["responses"], (method, path)
            for status, answer in op["responses"].items():
                if status.startswith("4"):
                    # Problems are JSON, also on the event-stream and HTML routes.
                    assert list(answer["content"]) == ["application/json"], (method, path, status)
    with httpx.Client(base_url=live.server.url, timeout=30) as client:
        docs = client.get("/docs")
        assert docs.status_code == 200 and docs.headers["content-type"].startswith("text/html")
        assert "/openapi.json" in docs.text and "swagger" in docs.text.lower()


def test_streams_answer_their_problems_before_streaming(live: Live) -> None:
    with httpx.Client(base_url=live.server.url, timeout=30, headers=auth(ADMIN_KEY)) as client:
        unknown = client.get("/api/runs/no-such-run/events")
        assert unknown.status_code == 404 and unknown.json()["field"] == "run_id"
        url = f"/api/runs/{live.run_id}/events"
        bad = client.get(url, headers={"Last-Event-ID": "twelve"})
        assert bad.status_code == 422 and bad.json()["field"] == "Last-Event-ID"
        huge = client.get(url, headers={"Last-Event-ID": str(2**64)})
        assert huge.status_code == 422 and huge.json()["field"] == "Last-Event-ID"
        # A negative id is refused as `after=-1` is, never read as "from the start".
        negative = client.get(url, headers={"Last-Event-ID": "-5"})
        assert negative.status_code == 422 and negative.json()["field"] == "Last-Event-ID"
        assert client.get(url, params={"after": -1}).status_code == 422
        huge = client.get(url, params={"after": 2**64})
        assert huge.status_code == 422 and huge.json()["field"] == "after"


def test_bad_input_is_a_problem_naming_the_field(live: Live) -> None:
    with httpx.Client(base_url=live.server.url, timeout=30, headers=auth(ADMIN_KEY)) as client:
        odd = client.get("/api/runs/a%20b")
        assert odd.status_code == 422 and odd.json()["field"] == "run_id"
        odd = client.get("/api/diagnosis/x/trace", params={"runId": "a\x00b"})
        assert odd.status_code == 422 and odd.json()["field"] == "runId"
        json_body = {"content-type": "application/json"}
        for body, status in ((b"{not json", 422), (b'{"message": "\xff"}', 400)):
            for url in ("/api/chat", "/api/alerts/alertmanager"):
                r = client.post(url, content=body, headers=json_body)
                assert r.status_code == status and r.json()["field"] == "(body)", (url, body, r.text)
        # NUL characters: PostgreSQL cannot store them, so they are refused on every store.
        r = client.post("/api/chat", json={**SEED_CHAT, "message": "pay\x00ment"})
        assert r.status_code == 422 and r.json()["field"] == "message"
        payload = _webhook_payload("/api/alerts/alertmanager")
        payload["alerts"][0]["labels"]["pod"] = "db\x00-0"
        r = client.post("/api/alerts/alertmanager", params={"scenario": WEBHOOKS["/api/alerts/alertmanager"][1]}, json=payload)
        assert r.status_code == 422 and r.json()["field"] == "alerts[0].labels.pod", r.text
        r = client.post("/api/chat", json={**SEED_CHAT, "alert": payload})
        assert r.status_code == 422 and r.json()["field"] == "alert.alerts[0].labels.pod", r.text


def _strategy(operation: Any, mode: GenerationMode, live: Live) -> Any:
    """The cases of `operation` in `mode`; positive ones also with real ids and bodies."""
    drawn = operation.as_strategy(mode)
    if not mode.is_positive:
        return drawn
    path = operation.path
    if path == "/api/chat":
        return st.one_of(drawn, operation.as_strategy(mode, body=dict(SEED_CHAT)))
    if path in WEBHOOKS:
        return st.one_of(drawn, operation.as_strategy(mode, body=_webhook_payload(path), query={"scenario": WEBHOOKS[path][1]}))
    if "{run_id}" in path and (HAS_VIEWER or path != "/runs/{run_id}"):
        return st.one_of(drawn, operation.as_strategy(mode, path_parameters={"run_id": live.run_id}))
    if "{session_id}" in path:
        known = operation.as_strategy(mode, path_parameters={"session_id": live.session_id}, query={"runId": live.run_id})
        return st.one_of(drawn, known)
    return drawn


@pytest.mark.parametrize(("method", "path", "mode"), CASES, ids=[f"{m} {p} {mode}" for m, p, mode in CASES])
def test_the_service_conforms_to_its_openapi_document(api_schema: Any, live: Live, method: str, path: str, mode: GenerationMode) -> None:
    operation = api_schema[path][method]

    @FUZZ
    @given(case=_strategy(operation, mode, live))
    def fuzz(case: schemathesis.Case[Any]) -> None:
        # The key as the caller's own header: the auth checks then send the case without it too.
        case.call_and_validate(headers=auth(ADMIN_KEY))

    fuzz()
