"""The service over real HTTP: chat streams, the seed story's events, traces, roles, webhooks."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from rootproof.service.app import create_app
from rootproof.settings import load_settings
from tests.test_harness_seed_story import SEED_EVENTS

from .support import (
    ADMIN_KEY,
    API_KEYS,
    AUDITOR_KEY,
    OPERATOR2_KEY,
    OPERATOR_KEY,
    SlowModelServer,
    SseEvent,
    ThreadServer,
    auth,
    read_sse,
    stream,
)

SEED_QUESTION = "支付接口最近出现超时"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    home = tmp_path_factory.mktemp("svc")
    settings = load_settings(data_dir=home, database_url=f"sqlite:///{home / 'rootproof.db'}", api_keys=API_KEYS, sse_heartbeat_s=0.5)
    with ThreadServer(create_app(settings, environ={})) as srv:
        yield srv


@pytest.fixture
def client(server: ThreadServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def _wait_terminal(client: httpx.Client, run_id: str, key: str = OPERATOR_KEY, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc: dict[str, Any] = client.get(f"/api/runs/{run_id}", headers=auth(key)).json()
        if doc.get("status") is not None:
            return doc
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not reach a terminal state")


def test_chat_streams_the_seed_story_then_its_trace(client: httpx.Client) -> None:
    events = stream(client, "POST", "/api/chat", json={"message": SEED_QUESTION, "scenario": "payment-timeout"}, headers=auth(OPERATOR_KEY))
    public = [e for e in events if e.event != "tool"]
    shape = [(e.event, (e.data or {}).get("data", {}).get("phase") or (e.data or {}).get("data", {}).get("content_type") or (e.data or {}).get("data", {}).get("release_outcome")) for e in public]
    assert shape == SEED_EVENTS
    for e in events:
        assert e.data is not None and e.event == e.data["type"]
    ids = [int(e.id or 0) for e in events]
    assert ids == list(range(1, len(events) + 1))
    assert sum(1 for e in events if e.event == "tool") == 2
    meta = events[0].data["data"]  # type: ignore[index]
    content = events[-2].data["data"]  # type: ignore[index]
    assert content["fallback"]["type"] == "EVIDENCE_VALIDATION_FAILED"
    assert content["fallback"]["message"] == "当前证据无法完成真实性校验，无法确认根因"
    run = client.get(f"/api/runs/{meta['run_id']}", headers=auth(OPERATOR_KEY)).json()
    assert run["status"] == "SUCCESS" and run["release_outcome"] == "FALLBACK" and run["state"] == "COMPLETED"
    trace = client.get(f"/api/diagnosis/{meta['session_id']}/trace", params={"runId": meta["run_id"]}, headers=auth(OPERATOR_KEY))
    assert trace.status_code == 200
    doc = trace.json()
    assert doc["run"]["run_id"] == meta["run_id"]
    assert [i["tool_name"] for i in doc["invocations"]] == ["lookup_knowledge", "query_logs"] or sorted(i["tool_name"] for i in doc["invocations"]) == ["lookup_knowledge", "query_logs"]
    assert all(i["status"] == "READY" and i["evidence_status"] == "EVIDENCE_FOUND" for i in doc["invocations"])
    assert doc["guards"]["evidence_guard"]["codes"] == ["ROOT_CAUSE_MOCK_ONLY"]
    assert doc["release"]["content"] == content
    assert [e["seq"] for e in doc["events"]] == ids


def test_resume_with_last_event_id_gives_the_rest_once(client: httpx.Client) -> None:
    events = stream(client, "POST", "/api/chat", json={"message": SEED_QUESTION, "scenario": "payment-timeout"}, headers=auth(OPERATOR_KEY))
    run_id = events[0].data["data"]["run_id"]  # type: ignore[index]
    rest = stream(client, "GET", f"/api/runs/{run_id}/events", headers={**auth(OPERATOR_KEY), "Last-Event-ID": "3"})
    assert [e.id for e in rest] == [e.id for e in events[3:]]
    assert [e.data for e in rest] == [e.data for e in events[3:]]


def test_a_run_names_the_replica_that_executed_it(server: ThreadServer, client: httpx.Client) -> None:
    from fastapi import FastAPI

    app = server.server.config.app
    assert isinstance(app, FastAPI)
    replica = app.state.service.replica
    events = stream(client, "POST", "/api/chat", json={"message": SEED_QUESTION, "scenario": "payment-timeout"}, headers=auth(OPERATOR_KEY))
    run_id = events[0].data["data"]["run_id"]  # type: ignore[index]
    run = client.get(f"/api/runs/{run_id}", headers=auth(OPERATOR_KEY)).json()
    host, pid, instance = run["executor"].split(":")
    assert run["executor"] == replica and pid == str(os.getpid()) and len(instance) == 8 and host
    assert run["kind"] == "chat" and run["retry_of"] is None and run["fallback_type"] == "EVIDENCE_VALIDATION_FAILED"
    listed = client.get("/api/runs", params={"kind": "chat", "limit": 200}, headers=auth(OPERATOR_KEY)).json()["runs"]
    assert next(r for r in listed if r["run_id"] == run_id)["executor"] == replica


def test_event_streams_are_no_store(client: httpx.Client) -> None:
    """Both event streams carry exactly `Cache-Control: no-store` (the framework's `no-cache`
    would let a cache keep a run's evidence)."""
    with client.stream("POST", "/api/chat", json={"message": SEED_QUESTION, "scenario": "payment-timeout"}, headers=auth(OPERATOR_KEY)) as resp:
        assert resp.headers.get_list("cache-control") == ["no-store"]
        run_id = next(e for e in read_sse(resp.iter_lines()) if e.data is not None).data["data"]["run_id"]  # type: ignore[index]
    with client.stream("GET", f"/api/runs/{run_id}/events", headers=auth(OPERATOR_KEY)) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers.get_list("cache-control") == ["no-store"]


def test_reasoning_roles_and_sessions(client: httpx.Client) -> None:
    events = stream(client, "POST", "/api/chat", json={"message": SEED_QUESTION, "scenario": "payment-timeout"}, headers=auth(OPERATOR_KEY))
    meta = events[0].data["data"]  # type: ignore[index]
    url = f"/api/diagnosis/{meta['session_id']}/trace/reasoning"
    params = {"runId": meta["run_id"]}
    assert client.get(url, params=params).status_code == 401
    assert client.get(url, params=params, headers=auth("not-a-key-0123456789")).status_code == 401
    assert client.get(url, params=params, headers=auth(OPERATOR_KEY)).status_code == 403
    ok = client.get(url, params=params, headers=auth(AUDITOR_KEY))
    assert ok.status_code == 200
    records = ok.json()["records"]
    assert records and all(r["run_id"] == meta["run_id"] for r in records)
    assert client.get(url, params=params, headers=auth(ADMIN_KEY)).status_code == 200
    # Another session's id with this run: 404 (ownership of the run by the path session).
    other = stream(client, "POST", "/api/chat", json={"message": SEED_QUESTION, "scenario": "payment-timeout"}, headers=auth(OPERATOR_KEY))
    other_session = other[0].data["data"]["session_id"]  # type: ignore[index]
    assert client.get(f"/api/diagnosis/{other_session}/trace/reasoning", params=params, headers=auth(AUDITOR_KEY)).status_code == 404
    # Another operator: the session is not theirs.
    assert client.get(f"/api/diagnosis/{meta['session_id']}/trace", params=params, headers=auth(OPERATOR2_KEY)).status_code == 404
    assert client.get(f"/api/runs/{meta['run_id']}", headers=auth(OPERATOR2_KEY)).status_code == 404
    # The auditor reads any session's trace.
    assert client.get(f"/api/diagnosis/{meta['session_id']}/trace", params=params, headers=auth(AUDITOR_KEY)).status_code == 200
    # An auditor may not start runs.
    assert client.post("/api/chat", json={"message": "hi", "scenario": "payment-timeout"}, headers=auth(AUDITOR_KEY)).status_code == 403


def test_chat_needs_evidence_and_a_valid_body(client: httpx.Client) -> None:
    r = client.post("/api/chat", json={"message": SEED_QUESTION}, headers=auth(OPERATOR_KEY))
    assert r.status_code == 422 and r.json()["field"] == "scenario"
    r = client.post("/api/chat", json={"message": SEED_QUESTION, "scenario": "../../etc"}, headers=auth(OPERATOR_KEY))
    assert r.status_code == 422 and r.json()["field"] == "scenario"
    r = client.post("/api/chat", json={"scenario": "payment-timeout"}, headers=auth(OPERATOR_KEY))
    assert r.status_code == 422 and r.json()["field"] == "message"
    r = client.post("/api/chat", json={"message": "x", "scenario": "payment-timeout", "alert": {"alerts": []}}, headers=auth(OPERATOR_KEY))
    assert r.status_code == 422 and r.json()["field"].startswith("alert.")


def _alertmanager(group_key: str) -> dict[str, Any]:
    return {
        "version": "4",
        "status": "firing",
        "receiver": "rootproof",
        "groupKey": group_key,
        "groupLabels": {"alertname": "PaymentApiLatencyHigh"},
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "PaymentApiLatencyHigh", "severity": "critical", "service": "payment-api"},
                "annotations": {"summary": "payment API p99 latency above 2s"},
                "startsAt": "2026-07-22T09:35:00Z",
            }
        ],
    }


def test_alertmanager_webhook_runs_as_a_job_with_its_aiops_evaluation(client: httpx.Client) -> None:
    body = _alertmanager("{}:{alertname=\"PaymentApiLatencyHigh\"}-job")
    r = client.post("/api/alerts/alertmanager", params={"scenario": "payment-timeout"}, json=body, headers=auth(OPERATOR_KEY))
    assert r.status_code == 202, r.text
    doc = r.json()
    assert doc["duplicate"] is False and len(doc["run_ids"]) == 1
    run_id = doc["run_ids"][0]
    again = client.post("/api/alerts/alertmanager", params={"scenario": "payment-timeout"}, json=body, headers=auth(OPERATOR_KEY))
    assert again.status_code == 202 and again.json() == {"run_ids": [run_id], "duplicate": True}
    run = _wait_terminal(client, run_id)
    assert run["status"] == "SUCCESS"
    trace = client.get(f"/api/diagnosis/{run['session_id']}/trace", params={"runId": run_id}, headers=auth(OPERATOR_KEY)).json()
    aiops = trace["guards"]["aiops_rule_evaluation"]
    assert aiops is not None and aiops["checks"] and "passed" in aiops
    assert trace["run"]["alert"]["source"] == "alertmanager"


def test_malformed_webhooks_are_422_naming_the_field(client: httpx.Client) -> None:
    body = _alertmanager("g-bad")
    del body["alerts"][0]["startsAt"]
    r = client.post("/api/alerts/alertmanager", params={"scenario": "payment-timeout"}, json=body, headers=auth(OPERATOR_KEY))
    assert r.status_code == 422 and r.json()["field"] == "alerts[0].startsAt", r.text
    r = client.post("/api/alerts/alertmanager", params={"scenario": "payment-timeout"}, content=b"{not json", headers={**auth(OPERATOR_KEY), "content-type": "application/json"})
    assert r.status_code == 422
    r = client.post("/api/alerts/alertmanager", json=_alertmanager("g-noevidence"), headers=auth(OPERATOR_KEY))
    assert r.status_code == 422 and r.json()["field"] == "scenario"
    r = client.post("/api/alerts/alertmanager", params={"scenario": "payment-timeout"}, json=_alertmanager("g"))
    assert r.status_code == 401


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    home = tmp_path_factory.mktemp("svc-slow")
    with SlowModelServer(hold_s=20) as model:
        env = model.env()
        settings = load_settings(
            data_dir=home,
            database_url=f"sqlite:///{home / 'rootproof.db'}",
            api_keys=API_KEYS,
            sse_heartbeat_s=0.3,
            model="openai",
            openai_base_url=env["ROOTPROOF_OPENAI_BASE_URL"],
            openai_provider="llamacpp",
            openai_model="slow",
            model_max_retries=0,
        )
        with ThreadServer(create_app(settings, environ={})) as srv:
            yield srv


def _first_event(resp: httpx.Response) -> dict[str, Any]:
    for ev in read_sse(resp.iter_lines()):
        if ev.data is not None:
            return ev.data
    raise AssertionError("no event")


def test_a_disconnect_does_not_cancel_the_run(slow_server: ThreadServer) -> None:
    """A client that goes away (a proxy timeout) leaves its run running: it resumes the stream
    with Last-Event-ID; only the API (or the deadline, or a signal) cancels."""
    with httpx.Client(base_url=slow_server.url, timeout=30) as c:
        with c.stream("POST", "/api/chat", json={"message": "why is the order api slow", "scenario": "pg-row-lock"}, headers=auth(OPERATOR_KEY)) as resp:
            meta = _first_event(resp)
        run_id = meta["data"]["run_id"]
        time.sleep(1.5)  # the model holds the run; a cancellation would have ended it by now
        run = c.get(f"/api/runs/{run_id}", headers=auth(OPERATOR_KEY)).json()
        assert run["status"] is None and run["state"] in ("ROUTING", "RUNNING"), run
        seen: list[SseEvent] = []
        with c.stream("GET", f"/api/runs/{run_id}/events", headers={**auth(OPERATOR_KEY), "Last-Event-ID": "1"}) as resumed:
            lines = resumed.iter_lines()
            for ev in read_sse(lines):
                if ev.comment:
                    break  # a heartbeat: the run is alive and idle
                seen.append(ev)
            assert c.post(f"/api/runs/{run_id}/cancel", headers=auth(OPERATOR_KEY)).status_code == 202
            seen.extend(ev for ev in read_sse(lines) if not ev.comment)
        assert [int(e.id or 0) for e in seen] == list(range(2, 2 + len(seen)))
        assert seen[-1].event == "done" and seen[-1].data["data"]["status"] == "CANCELLED"  # type: ignore[index]
        trace = c.get(f"/api/diagnosis/{run['session_id']}/trace", params={"runId": run_id}, headers=auth(OPERATOR_KEY)).json()
        assert "through the API" in (trace["run"]["error"] or ""), trace["run"]["error"]


def test_cancel_through_the_api_and_heartbeats(slow_server: ThreadServer) -> None:
    with httpx.Client(base_url=slow_server.url, timeout=30) as c:
        seen: list[SseEvent] = []
        with c.stream("POST", "/api/chat", json={"message": "why is the order api slow", "scenario": "pg-row-lock"}, headers=auth(OPERATOR_KEY)) as resp:
            lines = resp.iter_lines()
            for ev in read_sse(lines):
                seen.append(ev)
                if sum(1 for e in seen if e.comment) >= 2:
                    break
            run_id = next(e.data for e in seen if e.data is not None)["data"]["run_id"]
            assert c.post(f"/api/runs/{run_id}/cancel", headers=auth(OPERATOR2_KEY)).status_code == 404
            r = c.post(f"/api/runs/{run_id}/cancel", headers=auth(OPERATOR_KEY))
            assert r.status_code == 202 and r.json()["cancel_requested"] is True
            rest = [ev for ev in read_sse(lines) if not ev.comment]
        assert rest[-1].event == "done" and rest[-1].data["data"]["status"] == "CANCELLED"  # type: ignore[index]
        assert c.post(f"/api/runs/{run_id}/cancel", headers=auth(OPERATOR_KEY)).status_code == 409


def test_a_run_that_failed_before_its_first_write_still_ends_terminal(server: ThreadServer, client: httpx.Client) -> None:
    """A chat run whose harness raised before its record was saved (under load: the store's
    first write refused) is closed from its request: a FAILED run, readable, with the
    INTERNAL_ERROR fallback and a `done` in its stream (not a stream that ends empty)."""
    from fastapi import FastAPI

    from rootproof.service.core import Evidence, Service

    app = server.server.config.app
    assert isinstance(app, FastAPI)
    service: Service = app.state.service
    who = service.keyring.authenticate(OPERATOR_KEY)
    assert who is not None
    request = service.new_chat(message=SEED_QUESTION, session_id=None, principal=who.name, evidence=Evidence(scenario="payment-timeout", targets=False), alert=None)
    assert client.get(f"/api/runs/{request.run_id}", headers=auth(OPERATOR_KEY)).status_code == 404
    service._close_failed(request)
    run = client.get(f"/api/runs/{request.run_id}", headers=auth(OPERATOR_KEY)).json()
    assert run["status"] == "FAILED" and run["state"] == "FAILED" and run["release_outcome"] == "FALLBACK"
    assert run["session_id"] == request.session_id and run["content"]["fallback"]["type"] == "INTERNAL_ERROR"
    assert run["content"]["fallback"]["message"] == "系统内部错误，未能完成诊断"  # the question's language
    events = stream(client, "GET", f"/api/runs/{request.run_id}/events", headers=auth(OPERATOR_KEY))
    assert [(e.id, e.event) for e in events] == [("1", "content"), ("2", "done")]
    assert events[-1].data["data"]["status"] == "FAILED"  # type: ignore[index]
    trace = client.get(f"/api/diagnosis/{request.session_id}/trace", params={"runId": request.run_id}, headers=auth(OPERATOR_KEY)).json()
    assert trace["run"]["error"] == "the run failed outside the harness" and trace["run"]["question"] == SEED_QUESTION
