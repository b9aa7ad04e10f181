"""The service's edges: keys and roles at start, `serve` refusing bad setups (exit 2 naming the
setting), health, readiness, metrics, knowledge search and the Grafana webhook over real HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rootproof.errors import ConfigError
from rootproof.service.app import create_app
from rootproof.service.auth import KeyRing, hash_key
from rootproof.settings import load_settings
from tests.services import inherited_env

from .support import API_KEYS, AUDITOR_KEY, OPERATOR_KEY, ThreadServer, auth, stream


def _rp(*args: str, home: Path, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    base = inherited_env()
    base |= {"ROOTPROOF_HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)} | env
    return subprocess.run([sys.executable, "-m", "rootproof.cli", *args], input=stdin, capture_output=True, text=True, env=base, timeout=120)


def test_serve_refuses_to_start_without_keys_or_off_loopback(tmp_path: Path) -> None:
    p = _rp("serve", "--port", "1", home=tmp_path)
    assert p.returncode == 2 and "ROOTPROOF_API_KEYS" in p.stderr and "Traceback" not in p.stderr
    p = _rp("serve", "--no-auth", "--host", "0.0.0.0", home=tmp_path)
    assert p.returncode == 2 and "loopback" in p.stderr
    p = _rp("serve", home=tmp_path, ROOTPROOF_API_KEYS="tiny9:operator")
    assert p.returncode == 2 and "ROOTPROOF_API_KEYS: entry 1" in p.stderr and "tiny9" not in p.stderr
    p = _rp("serve", home=tmp_path, ROOTPROOF_API_KEYS="0123456789abcdefXYZ:root")
    assert p.returncode == 2 and "unknown role" in p.stderr and "0123456789abcdefXYZ" not in p.stderr
    keys = tmp_path / "keys"
    keys.write_text("sha256:zz:operator\n")
    p = _rp("serve", home=tmp_path, ROOTPROOF_API_KEYS_FILE=str(keys))
    assert p.returncode == 2 and f"{keys} line 1" in p.stderr


def test_serve_checks_the_notifications_file_and_public_url_before_binding(tmp_path: Path) -> None:
    from rootproof.service.notify import load_receivers

    secret = "https://hooks.slack.example/services/T000/B000/s3cr3tT0ken"
    notify = tmp_path / "notify.yaml"
    notify.write_text("receivers:\n  - {name: team, kind: pager, url_env: HOOK}\n")
    p = _rp("serve", "--port", "1", home=tmp_path, ROOTPROOF_API_KEYS=API_KEYS, ROOTPROOF_NOTIFICATIONS=str(notify), HOOK=secret)
    assert p.returncode == 2 and "ROOTPROOF_NOTIFICATIONS" in p.stderr and "receivers[0].kind" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "s3cr3tT0ken" not in p.stderr + p.stdout
    # The same check (`serve` runs it before binding), in-process: a URL that is not http(s) is
    # named by its variable, never quoted; a bad ROOTPROOF_PUBLIC_URL is a settings error.
    notify.write_text("receivers:\n  - {name: team, kind: slack, url_env: HOOK}\n")
    with pytest.raises(ConfigError, match=r"receivers\[0\]\.url_env") as bad:
        load_receivers(notify, {"HOOK": "ftp:" + secret[6:]})
    assert "s3cr3tT0ken" not in str(bad.value)
    with pytest.raises(ConfigError, match="ROOTPROOF_PUBLIC_URL"):
        load_settings(data_dir=tmp_path, public_url="https://x.example/?a=1")


def test_an_undelivered_notification_becomes_a_dead_letter_without_its_url(tmp_path: Path) -> None:
    """A receiver that refuses the message (404: not worth retrying) gets one attempt; the
    dead-letter row and the metrics name the receiver, never its URL (a credential)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Refusing(BaseHTTPRequestHandler):
        def log_message(self, *_args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    secret_url = f"http://127.0.0.1:{receiver.server_address[1]}/hooks/T0/B0/s3cr3tT0ken"
    (tmp_path / "notify.yaml").write_text("receivers:\n  - {name: pager, kind: webhook, url_env: PAGER_URL}\n")
    settings = load_settings(
        data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'rootproof.db'}", api_keys=API_KEYS, notifications=tmp_path / "notify.yaml"
    )
    alert = {
        "version": "4",
        "status": "firing",
        "groupKey": "dead-letter",
        "alerts": [{"status": "firing", "labels": {"alertname": "PaymentApiLatencyHigh", "service": "payment-api"}, "startsAt": "2026-07-22T09:35:00Z"}],
    }
    app = create_app(settings, environ={"PAGER_URL": secret_url})
    try:
        with ThreadServer(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
            r = c.post("/api/alerts/alertmanager", params={"scenario": "payment-timeout"}, json=alert, headers=auth(OPERATOR_KEY))
            assert r.status_code == 202, r.text
            run_id = r.json()["run_ids"][0]
            store = app.state.service.store
            deadline = time.monotonic() + 30
            while not (letters := store.dead_letters(run_id)) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert [(x["receiver"], x["attempts"], x["last_status"]) for x in letters] == [("pager", 1, 404)]
            assert "s3cr3tT0ken" not in json.dumps(letters) and "127.0.0.1" not in json.dumps(letters)
            text = c.get("/metrics").text
            assert 'rootproof_notifications_total{receiver="pager",result="dead_letter"} 1.0' in text and "s3cr3tT0ken" not in text
            run = c.get("/api/runs", params={"kind": "alertmanager"}, headers=auth(OPERATOR_KEY)).json()["runs"][0]
            assert run["run_id"] == run_id and run["delivered_at"] is None and run["received_at"] is not None
    finally:
        receiver.shutdown()
        receiver.server_close()


def test_hashed_keys_file_authenticates_in_constant_time_comparison(tmp_path: Path) -> None:
    p = _rp("hash-key", "auditor", home=tmp_path, stdin="a-long-auditor-key-123\n")
    assert p.returncode == 0, p.stderr
    line = p.stdout.strip()
    assert line == f"{hash_key('a-long-auditor-key-123')}:auditor"
    keys = tmp_path / "keys"
    keys.write_text(f"# team keys\n{line}\n")
    ring = KeyRing.load(None, keys)
    found = ring.authenticate("a-long-auditor-key-123")
    assert found is not None and found.role == "auditor" and found.name.startswith("key:") and "a-long" not in found.name
    assert ring.authenticate("a-long-auditor-key-124") is None
    with pytest.raises(ConfigError, match="ROOTPROOF_API_KEYS"):
        create_app(load_settings(data_dir=tmp_path))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    home = tmp_path_factory.mktemp("svc-misc")
    settings = load_settings(data_dir=home, database_url=f"sqlite:///{home / 'rootproof.db'}", api_keys=API_KEYS)
    with ThreadServer(create_app(settings, environ={})) as srv:
        yield srv


def test_health_readiness_and_metrics(server: ThreadServer) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        ready = c.get("/readyz")
        assert ready.status_code == 200
        doc = ready.json()
        assert doc["ready"] and doc["database"] and doc["migrations"] and doc["redis"] is None and doc["jobs"] == "in-process"
        stream(c, "POST", "/api/chat", json={"message": "why is checkout timing out", "scenario": "pg-row-lock"}, headers=auth(OPERATOR_KEY))
        # The run is counted when its diagnosis returns, just after its `done` event went out:
        # on a loaded machine the scrape right after the stream may come first (bounded wait).
        counted = 'rootproof_runs_total{fallback_type="",kind="chat",release_outcome="PUBLISHED",status="SUCCESS"}'
        deadline = time.monotonic() + 10
        while counted not in (text := c.get("/metrics").text) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert counted in text
        assert "rootproof_tool_calls_total{" in text and 'status="READY"' in text
        assert 'rootproof_guard_verdicts_total{guard="evidence_guard",verdict="PASS"}' in text
        assert "rootproof_time_to_first_event_seconds_bucket" in text
        for family in ("rootproof_jobs", "rootproof_job_wait_seconds", "rootproof_job_retries_total", "rootproof_stalled_workers", "rootproof_alert_to_delivery_seconds"):
            assert f"# TYPE {family.removesuffix('_total')}" in text, family
        assert OPERATOR_KEY not in text


def test_knowledge_search(server: ThreadServer) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        assert c.get("/api/search/similar", params={"q": "lock wait timeout"}).status_code == 401
        r = c.get("/api/search/similar", params={"q": "Lock wait timeout exceeded; try restarting transaction"}, headers=auth(AUDITOR_KEY))
        assert r.status_code == 200
        doc = r.json()
        assert doc["evidence_status"] == "EVIDENCE_FOUND" and doc["results"] and doc["results"][0]["card_id"]
        r = c.get("/api/search/similar", params={"q": ""}, headers=auth(AUDITOR_KEY))
        assert r.status_code == 422 and r.json()["field"] == "q"


def test_grafana_webhook(server: ThreadServer) -> None:
    body = {
        "receiver": "rootproof",
        "status": "firing",
        "orgId": 1,
        "title": "[FIRING:1] CheckoutLatency",
        "state": "alerting",
        "groupKey": "{}/{}:{alertname=\"CheckoutLatency\"}",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "CheckoutLatency", "severity": "critical", "service": "checkout"},
                "annotations": {"summary": "checkout p99 above 3s"},
                "startsAt": "2026-07-22T09:35:00Z",
            }
        ],
    }
    with httpx.Client(base_url=server.url, timeout=60) as c:
        r = c.post("/api/alerts/grafana", params={"scenario": "pg-row-lock"}, json=body, headers=auth(OPERATOR_KEY))
        assert r.status_code == 202, r.text
        run_id = r.json()["run_ids"][0]
        deadline = time.monotonic() + 60
        while (doc := c.get(f"/api/runs/{run_id}", headers=auth(OPERATOR_KEY)).json())["status"] is None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert doc["status"] == "SUCCESS"
        wrong = c.post("/api/alerts/alertmanager", params={"scenario": "pg-row-lock"}, json=body, headers=auth(OPERATOR_KEY))
        assert wrong.status_code == 422 and wrong.json()["field"] == "version"
        assert c.post("/api/alerts/grafana", params={"scenario": "pg-row-lock"}, json=body, headers=auth(AUDITOR_KEY)).status_code == 403


def test_a_job_is_idempotent_and_honours_a_cancellation_asked_while_it_waited(tmp_path: Path) -> None:
    from rootproof.alerts import parse_alert
    from rootproof.runtime import Runtime
    from rootproof.service.auth import KeyRing
    from rootproof.service.core import Evidence, Service
    from rootproof.service.jobs import RunRequest

    settings = load_settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'rootproof.db'}", api_keys=API_KEYS)
    raw = {
        "version": "4",
        "status": "firing",
        "groupKey": "g1",
        "alerts": [{"status": "firing", "labels": {"alertname": "OrderLatency", "severity": "critical"}, "startsAt": "2026-07-22T09:35:00Z"}],
    }
    with Runtime.from_settings(settings, environ={}) as runtime:
        service = Service(settings, runtime, keyring=KeyRing.load(API_KEYS, None))
        evidence = Evidence(scenario="pg-row-lock", targets=False)

        def accepted(group: str) -> RunRequest:
            run_id, duplicate = service.accept_alert(parse_alert(raw | {"groupKey": group}), raw | {"groupKey": group}, principal="key:x", evidence=evidence, source="alertmanager")
            assert not duplicate
            record = service.store.get_run(run_id)
            assert record is not None and record.status is None and record.lifecycle_state == "CREATED"
            return RunRequest(run_id=run_id, session_id=record.session_id, principal="key:x", scenario="pg-row-lock", alert=raw)

        # A cancellation asked for while the job waited: the run ends CANCELLED when it is taken.
        waiting = accepted("g-cancel")
        assert service.store.request_cancel(waiting.run_id)
        service.execute_job(waiting)
        run = service.store.get_run(waiting.run_id)
        assert run is not None and run.status == "CANCELLED" and run.release_outcome == "NONE"
        # Run once; a second delivery of the same job changes nothing.
        once = accepted("g-once")
        service.execute_job(once)
        first = service.store.get_run(once.run_id)
        events = service.store.events(once.run_id)
        service.execute_job(once)
        assert service.store.get_run(once.run_id) == first and service.store.events(once.run_id) == events
        assert first is not None and first.status == "SUCCESS" and [e.type for e in events][-1] == "done"
        # A run an earlier attempt started (its worker is gone): closed FAILED, never run again.
        lost = accepted("g-lost")
        service.store.set_executor(lost.run_id, "gone-host:1")
        service.execute_job(lost)
        run = service.store.get_run(lost.run_id)
        assert run is not None and run.status == "FAILED" and run.fallback_type == "INTERNAL_ERROR" and run.error and run.error.startswith("worker lost")
        assert [e.type for e in service.store.events(lost.run_id)] == ["content", "done"]
        # The same group within the window: the existing run, marked duplicate.
        again = service.accept_alert(parse_alert(raw | {"groupKey": "g-once"}), raw | {"groupKey": "g-once"}, principal="key:x", evidence=evidence, source="alertmanager")
        assert again == (once.run_id, True)


def test_bodies_are_capped_before_parsing(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'rootproof.db'}", api_keys=API_KEYS, max_alert_bytes=4096)
    with ThreadServer(create_app(settings, environ={})) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        # A declared length above the cap: 413 at once, nothing read (a request without a key is
        # refused before, from its headers: tests/service/test_hostile.py).
        import socket

        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
            head = f"POST /api/alerts/alertmanager HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPERATOR_KEY}\r\nContent-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n"
            sock.sendall(head.encode() + b"{}")
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
            answer = received.decode("utf-8", "replace")
        assert answer.startswith("HTTP/1.1 413") and '"field": "(body)"' in answer and "ROOTPROOF_MAX_ALERT_BYTES" in answer
        assert time.monotonic() - t0 < 5

        def chunks() -> Iterator[bytes]:
            for _ in range(64):
                yield b"x" * 1024

        # Chunked, no length: counted as it arrives and refused past the cap.
        r = c.post("/api/alerts/alertmanager", content=chunks(), headers={**auth(OPERATOR_KEY), "content-type": "application/json"})
        assert r.status_code == 413
        r = c.post("/api/chat", content=chunks(), headers={**auth(OPERATOR_KEY), "content-type": "application/json"})
        assert r.status_code in (413, 422)  # 64 KiB is under the chat cap: parsed and refused as bad JSON
        # Nested lists deep enough to hit the recursion limit of a JSON parser: 4xx, never 500.
        deep = b'{"version": "4", "status": "firing", "alerts": [{"x": ' + b"[" * 950 + b"]" * 950 + b"}]}"
        r = c.post("/api/alerts/alertmanager", params={"scenario": "pg-row-lock"}, content=deep, headers={**auth(OPERATOR_KEY), "content-type": "application/json"})
        assert 400 <= r.status_code < 500, r.text
        assert r.headers.get("cache-control") == "no-store" or r.status_code == 413
        # Beyond the decoder (1 900 levels within this server's 4 KiB alert cap, 20 000 in a chat
        # body): the problem names the field that nests, not the body.
        deeper = b'{"version": "4", "status": "firing", "alerts": [{"labels": ' + b"[" * 1_900 + b"]" * 1_900 + b"}]}"
        r = c.post("/api/alerts/alertmanager", params={"scenario": "pg-row-lock"}, content=deeper, headers={**auth(OPERATOR_KEY), "content-type": "application/json"})
        assert r.status_code == 400 and r.json()["field"] == "alerts[0].labels[0]" and "nested more than" in r.json()["detail"], r.text
        chat = b'{"message": "why", "alert": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
        r = c.post("/api/chat", content=chat, headers={**auth(OPERATOR_KEY), "content-type": "application/json"})
        assert r.status_code == 400 and r.json()["field"] == "alert[0][0][0]", r.text


def test_sessions_are_claimed_once_and_groups_are_per_sender(server: ThreadServer) -> None:
    import uuid

    from .support import ADMIN_KEY, OPERATOR2_KEY

    session = f"s-{uuid.uuid4()}"
    body = {"message": "why is checkout slow", "scenario": "pg-row-lock", "session_id": session}
    with httpx.Client(base_url=server.url, timeout=60) as c:
        events = stream(c, "POST", "/api/chat", json=body, headers=auth(OPERATOR_KEY))
        assert events[0].data["data"]["session_id"] == session  # type: ignore[index]
        assert c.post("/api/chat", json=body, headers=auth(OPERATOR2_KEY)).status_code == 404
        assert c.post("/api/chat", json=body, headers=auth(ADMIN_KEY)).status_code == 404
        again = stream(c, "POST", "/api/chat", json=body, headers=auth(OPERATOR_KEY))
        assert again[0].data["data"]["session_id"] == session  # type: ignore[index]
        assert c.get(f"/api/runs/{again[0].data['data']['run_id']}", headers=auth(OPERATOR_KEY)).headers["cache-control"] == "no-store"  # type: ignore[index]
        hook = {
            "version": "4",
            "status": "firing",
            "groupKey": f"shared-{session}",
            "alerts": [{"status": "firing", "labels": {"alertname": "X", "severity": "warning"}, "startsAt": "2026-07-22T09:35:00Z"}],
        }
        first = c.post("/api/alerts/alertmanager", params={"scenario": "pg-row-lock"}, json=hook, headers=auth(OPERATOR2_KEY)).json()
        mine = c.post("/api/alerts/alertmanager", params={"scenario": "pg-row-lock"}, json=hook, headers=auth(OPERATOR_KEY)).json()
        assert first["duplicate"] is False and mine["duplicate"] is False and first["run_ids"] != mine["run_ids"]


def test_a_key_given_two_roles_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="configured twice"):
        KeyRing.load(f"{OPERATOR_KEY}:operator,{OPERATOR_KEY}:auditor", None)


def test_a_client_gone_mid_body_ends_quietly(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A client that sends half a body and goes away: no traceback in the server's log (uvicorn
    writes its log to stderr, not through the root logger)."""
    import socket

    settings = load_settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'rootproof.db'}", api_keys=API_KEYS)
    with ThreadServer(create_app(settings, environ={})) as srv:
        for path in ("/api/chat", "/api/alerts/alertmanager", "/api/runs"):
            with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
                head = f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPERATOR_KEY}\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
                sock.sendall(head.encode() + b'{"message": "why is che')
            time.sleep(0.3)
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.get("/healthz").status_code == 200  # still serving
    err = capfd.readouterr().err
    assert "Traceback" not in err and "No response returned" not in err, err[-3000:]
