"""Two replicas on one fresh PostgreSQL database and one Redis, as `rootproof serve` processes
over real HTTP, with a model server on loopback that holds every model call until the test lets
it answer: cancel and resume across replicas, a stream dropped and resumed on the other replica,
an alert run delivered to loopback receivers and found by another operator, a replica paused
past its heartbeat timeout, and a replica killed with every webhook job on it.

Serial: the timing bounds (heartbeat timeout, sweep interval) need a machine that is not busy
with the rest of the suite."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.services import DEFAULT_PG_URL, fresh_database

from .support import (
    ADMIN_KEY,
    AUDITOR_KEY,
    OPERATOR2_KEY,
    OPERATOR_KEY,
    ProcessServer,
    SlowModelServer,
    SseEvent,
    auth,
    read_sse,
    redis_or_skip,
    serve_process,
    service_env,
    stream,
)

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.serial]

REPLICA_TIMEOUT_S = 2.0
SWEEP_INTERVAL_S = REPLICA_TIMEOUT_S / 3
PLANTED = "<!channel> pay <https://evil.example/x|here> & <@U0123>"


class Receivers:
    """Two notification receivers on loopback (a generic webhook and a Slack incoming webhook):
    they record what they get; the webhook answers 500 to the first request of each run."""

    def __init__(self) -> None:
        self.got: dict[str, list[tuple[dict[str, str], dict[str, Any]]]] = {"hook": [], "slack": []}
        self.failed_once: set[str] = set()
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                name = self.path.strip("/")
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                key = self.headers.get("Idempotency-Key") or ""
                with outer.lock:
                    fail = name == "hook" and key not in outer.failed_once
                    if fail:
                        outer.failed_once.add(key)
                    else:
                        outer.got.setdefault(name, []).append((dict(self.headers), body))
                self.send_response(500 if fail else 200)
                self.send_header("content-length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    yield from fresh_database(
        "ROOTPROOF_TEST_PG_URL", DEFAULT_PG_URL, "CREATE DATABASE {name} ENCODING 'UTF8' TEMPLATE template0", "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )


@pytest.fixture(scope="module")
def model() -> Iterator[SlowModelServer]:
    with SlowModelServer(hold_s=60, answer=True) as server:
        yield server


@pytest.fixture(scope="module")
def receivers() -> Iterator[Receivers]:
    found = Receivers()
    yield found
    found.close()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, database: str, model: SlowModelServer, receivers: Receivers) -> Iterator[list[ProcessServer]]:
    redis_url = redis_or_skip("redis://127.0.0.1:6379/0")
    config = tmp_path_factory.mktemp("notify")
    (config / "slack.url").write_text(f"{receivers.url}/slack\n")
    (config / "notify.yaml").write_text(
        "receivers:\n  - {name: hook, kind: webhook, url_env: TEST_HOOK_URL}\n  - {name: team-slack, kind: slack, url_file: slack.url}\n"
    )
    started: list[ProcessServer] = []

    def start(name: str) -> ProcessServer:
        home = tmp_path_factory.mktemp(f"replica-{name}")
        env = service_env(
            home,
            ROOTPROOF_DATABASE_URL=database,
            ROOTPROOF_REDIS_URL=redis_url,
            ROOTPROOF_STALLED_JOB_TIMEOUT_S="2",
            ROOTPROOF_REPLICA_TIMEOUT_S=str(REPLICA_TIMEOUT_S),
            ROOTPROOF_SSE_HEARTBEAT_S="1",
            ROOTPROOF_WORKER_CONCURRENCY="4",
            ROOTPROOF_NOTIFICATIONS=str(config / "notify.yaml"),
            ROOTPROOF_PUBLIC_URL="https://rootproof.example.com",
            TEST_HOOK_URL=f"{receivers.url}/hook",
            **model.env(),
        )
        server = serve_process(env, home / "serve.log")
        started.append(server)
        return server

    try:
        # Started together: both apply the migrations and procrastinate's schema at once (each
        # under a lock), as replicas of a deployment do.
        with ThreadPoolExecutor(max_workers=2) as pool:
            replicas = list(pool.map(start, ("a", "b")))
        yield replicas
    finally:
        model.release()
        for server in started:
            if server.proc.poll() is None:
                os.kill(server.proc.pid, signal.SIGCONT)
            server.stop()


def _run(client: httpx.Client, url: str, run_id: str, key: str = OPERATOR_KEY) -> dict[str, Any]:
    r = client.get(f"{url}/api/runs/{run_id}", headers=auth(key))
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return doc


def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _alert(group: str, summary: str = "order API p99 above 2s") -> dict[str, Any]:
    return {
        "version": "4",
        "status": "firing",
        "receiver": "team-orders",
        "groupKey": group,
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "OrderApiLatencyHigh", "severity": "critical", "service": "order-api"},
                "annotations": {"summary": summary},
                "startsAt": "2026-07-22T09:35:00Z",
                "fingerprint": f"fp-{group}"[:60],
            }
        ],
    }


def _events(client: httpx.Client, url: str, run_id: str) -> list[SseEvent]:
    return stream(client, "GET", f"{url}/api/runs/{run_id}/events", headers=auth(OPERATOR_KEY))


def _start_chat(client: httpx.Client, url: str, events: int) -> tuple[str, list[SseEvent]]:
    """A chat run on `url`, its stream read for `events` events and then dropped."""
    seen: list[SseEvent] = []
    with client.stream("POST", f"{url}/api/chat", json={"message": "why is the order API slow", "scenario": "pg-row-lock"}, headers=auth(OPERATOR_KEY)) as resp:
        assert resp.status_code == 200
        for ev in read_sse(resp.iter_lines()):
            if not ev.comment:
                seen.append(ev)
            if len(seen) == events:
                break
    assert seen[0].data is not None
    return seen[0].data["data"]["run_id"], seen


def test_cancel_and_resume_across_replicas(replicas: list[ProcessServer], model: SlowModelServer) -> None:
    a, b = replicas
    model.hold()
    with httpx.Client(timeout=60) as c:
        body = {"message": "why is the order API slow", "scenario": "pg-row-lock"}
        seen_a: list[Any] = []
        with c.stream("POST", f"{a.url}/api/chat", json=body, headers=auth(OPERATOR_KEY)) as resp:
            assert resp.status_code == 200
            lines = resp.iter_lines()
            for ev in read_sse(lines):
                if ev.comment:
                    continue
                seen_a.append(ev)
                if len(seen_a) == 2:
                    break
            run_id = seen_a[0].data["data"]["run_id"]
            # Replica B serves the running run's state and its stream from the log.
            state = _run(c, b.url, run_id)
            assert state["status"] is None and state["state"] in ("ROUTING", "RUNNING")
            assert state["executor"].split(":")[1] == str(a.proc.pid) and state["kind"] == "chat" and state["retry_of"] is None
            seen_b: list[Any] = []
            with c.stream("GET", f"{b.url}/api/runs/{run_id}/events", headers={**auth(OPERATOR_KEY), "Last-Event-ID": "2"}) as resume:
                assert resume.status_code == 200
                # Cancel through B: the run executes on A.
                r = c.post(f"{b.url}/api/runs/{run_id}/cancel", headers=auth(OPERATOR_KEY))
                assert r.status_code == 202 and r.json()["cancel_requested"] is True
                t0 = time.monotonic()
                for ev in read_sse(lines):
                    if not ev.comment:
                        seen_a.append(ev)
                cancel_s = time.monotonic() - t0
                for ev in read_sse(resume.iter_lines()):
                    if not ev.comment:
                        seen_b.append(ev)
        assert seen_a[-1].event == "done" and seen_a[-1].data["data"]["status"] == "CANCELLED"
        assert cancel_s < 5, f"the cancellation took {cancel_s:.1f} s to reach the other replica"
        assert [e.id for e in seen_b] == [e.id for e in seen_a[2:]]
        assert [e.data for e in seen_b] == [e.data for e in seen_a[2:]]
        final = _run(c, b.url, run_id)
        assert final["status"] == "CANCELLED" and final["state"] == "CANCELLED" and final["release_outcome"] == "NONE"
        # A finished run's stream resumes on either replica from any point, each event once.
        full = _events(c, b.url, run_id)
        assert [e.id for e in full] == [str(i) for i in range(1, len(full) + 1)] and [e.data for e in full] == [e.data for e in seen_a]


def test_a_dropped_stream_resumes_on_the_other_replica(replicas: list[ProcessServer], model: SlowModelServer) -> None:
    """The client drops its stream after the first `status` event while the model is held (a
    proxy timeout): the run goes on; the client reconnects to the other replica with
    Last-Event-ID and receives every remaining event exactly once."""
    a, b = replicas
    model.hold()
    with httpx.Client(timeout=60) as c:
        run_id, first = _start_chat(c, a.url, 2)
        assert [e.event for e in first] == ["metadata", "status"]
        time.sleep(1.0)
        assert _run(c, b.url, run_id)["status"] is None  # not cancelled by the disconnect
        rest: list[SseEvent] = []
        with c.stream("GET", f"{b.url}/api/runs/{run_id}/events", headers={**auth(OPERATOR_KEY), "Last-Event-ID": first[-1].id or ""}) as resumed:
            assert resumed.status_code == 200
            model.release()
            rest = [ev for ev in read_sse(resumed.iter_lines()) if not ev.comment]
        everything = _events(c, a.url, run_id)
        assert [e.id for e in first + rest] == [e.id for e in everything] == [str(i) for i in range(1, len(everything) + 1)]
        assert [e.data for e in first + rest] == [e.data for e in everything]
        final = _run(c, b.url, run_id)
        assert rest[-1].event == "done" and final["status"] == "SUCCESS" and final["status"] != "CANCELLED"


def test_an_alert_run_is_delivered_and_found_by_every_operator(replicas: list[ProcessServer], model: SlowModelServer, receivers: Receivers) -> None:
    a, b = replicas
    model.release()
    group = f'{{}}:{{alertname="OrderApiLatencyHigh", pid="{os.getpid()}"}}'
    with httpx.Client(timeout=60) as c:
        r = c.post(f"{a.url}/api/alerts/alertmanager", params={"scenario": "pg-row-lock"}, json=_alert(group, PLANTED), headers=auth(OPERATOR_KEY))
        assert r.status_code == 202, r.text
        run_id = r.json()["run_ids"][0]
        final = _wait(lambda: (d := _run(c, b.url, run_id))["status"] is not None and d, 60, "the alert run to end")
        assert final["kind"] == "alertmanager" and final["executor"] is not None
        # Both receivers got it (the webhook after its first answer, a 500, was retried).
        hook = _wait(lambda: [x for x in receivers.got["hook"] if x[1].get("run_id") == run_id], 30, "the webhook receiver")
        slack = _wait(lambda: receivers.got["slack"][-1:] if receivers.got["slack"] else None, 30, "the Slack receiver")
        headers, body = hook[0]
        assert len(hook) == 1 and headers.get("Idempotency-Key")
        assert body["content"] == final["content"] and body["status"] == final["status"]
        assert body["link"] == f"https://rootproof.example.com/runs/{run_id}"
        slack_text = json.dumps(slack[0][1], ensure_ascii=False)
        assert "<!channel>" not in slack_text and "&lt;!channel&gt;" in slack_text and "<https://evil.example" not in slack_text
        for text in (json.dumps(body), slack_text):
            assert "reasoning" not in text and "violations" not in text and OPERATOR_KEY not in text
        # Another operator finds it by its group key and reads it; never its reasoning.
        listed = c.get(f"{b.url}/api/runs", params={"group_key": group}, headers=auth(OPERATOR2_KEY))
        assert listed.status_code == 200, listed.text
        runs = listed.json()["runs"]
        assert [x["run_id"] for x in runs] == [run_id] and runs[0]["source"] == "team-orders" and runs[0]["executor"] == final["executor"]
        by_print = c.get(f"{b.url}/api/runs", params={"fingerprint": f"fp-{group}"[:60], "kind": "alertmanager"}, headers=auth(OPERATOR2_KEY)).json()
        assert [x["run_id"] for x in by_print["runs"]] == [run_id]
        seen = _run(c, b.url, run_id, OPERATOR2_KEY)
        assert seen["content"] == final["content"]
        session = seen["session_id"]
        trace = c.get(f"{b.url}/api/diagnosis/{session}/trace", params={"runId": run_id}, headers=auth(OPERATOR2_KEY))
        assert trace.status_code == 200
        assert c.get(f"{b.url}/api/diagnosis/{session}/trace/reasoning", params={"runId": run_id}, headers=auth(OPERATOR2_KEY)).status_code == 403
        assert c.get(f"{b.url}/api/diagnosis/{session}/trace/reasoning", params={"runId": run_id}, headers=auth(AUDITOR_KEY)).status_code == 200
        assert c.get(f"{b.url}/runs/{run_id}", headers=auth(OPERATOR2_KEY)).status_code == 200
        # Nobody else continues its session; cancel stays with its key and admins.
        chat = c.post(f"{b.url}/api/chat", json={"message": "and now?", "session_id": session, "scenario": "pg-row-lock"}, headers=auth(OPERATOR2_KEY))
        assert chat.status_code == 404
        r = c.post(f"{b.url}/api/alerts/alertmanager", params={"scenario": "pg-row-lock"}, json=_alert(group + "-2"), headers=auth(OPERATOR_KEY))
        other = r.json()["run_ids"][0]
        assert c.post(f"{b.url}/api/runs/{other}/cancel", headers=auth(OPERATOR2_KEY)).status_code in (403, 409)
        # A chat run stays private to its key.
        chat_run, _ = _start_chat(c, a.url, 1)
        assert c.get(f"{b.url}/api/runs/{chat_run}", headers=auth(OPERATOR2_KEY)).status_code == 404
        mine = c.get(f"{b.url}/api/runs", params={"kind": "chat", "limit": 200}, headers=auth(OPERATOR2_KEY)).json()["runs"]
        assert chat_run not in [x["run_id"] for x in mine]
        everyone = c.get(f"{b.url}/api/runs", params={"kind": "chat", "limit": 1}, headers=auth(ADMIN_KEY)).json()
        assert everyone["runs"] and everyone["next_cursor"]
        page2 = c.get(f"{b.url}/api/runs", params={"kind": "chat", "limit": 1, "cursor": everyone["next_cursor"]}, headers=auth(ADMIN_KEY)).json()
        assert page2["runs"] and page2["runs"][0]["run_id"] != everyone["runs"][0]["run_id"]
        bad = c.get(f"{b.url}/api/runs", params={"cursor": "nonsense"}, headers=auth(ADMIN_KEY))
        assert bad.status_code == 422 and bad.json()["field"] == "cursor"
        naive = c.get(f"{b.url}/api/runs", params={"since": "2026-12-06T10:00:00"}, headers=auth(ADMIN_KEY))
        assert naive.status_code == 422 and naive.json()["field"] == "since"


def test_a_paused_replica_never_overwrites_what_the_sweep_closed(
    replicas: list[ProcessServer], model: SlowModelServer, database: str, receivers: Receivers
) -> None:
    """A runs a chat run and an alert job; A is paused (SIGSTOP) past the heartbeat timeout: B's
    sweep closes both runs and B runs the alert's successor. When A resumes, its writes change
    nothing (the swept record and its `done` stay last), it gives the alert no second successor
    and never notifies for the lost run."""
    a, b = replicas
    model.hold()
    engine = sa.create_engine(database)
    try:
        with httpx.Client(timeout=60) as c:
            os.kill(b.proc.pid, signal.SIGSTOP)  # so that A's worker takes the alert's job
            try:
                r = c.post(f"{a.url}/api/alerts/alertmanager", params={"scenario": "pg-row-lock"}, json=_alert(f"pause-{os.getpid()}"), headers=auth(OPERATOR_KEY))
                assert r.status_code == 202, r.text
                alert_run = r.json()["run_ids"][0]
                _wait(lambda: (_run(c, a.url, alert_run)["executor"] or "").split(":")[1:2] == [str(a.proc.pid)], 30, "A to take the alert's job")
            finally:
                os.kill(b.proc.pid, signal.SIGCONT)
            run_id, _ = _start_chat(c, a.url, 2)
            os.kill(a.proc.pid, signal.SIGSTOP)
            try:
                t0 = time.monotonic()
                swept = _wait(lambda: (d := _run(c, b.url, run_id))["status"] is not None and d, 30, "the sweep to close the paused replica's run")
                closed_s = time.monotonic() - t0
                successor = _wait(lambda: _run(c, b.url, alert_run)["status"] and _successor(engine, alert_run), 30, "B to retry the alert")
            finally:
                os.kill(a.proc.pid, signal.SIGCONT)
            assert swept["status"] == "FAILED" and swept["content"]["fallback"]["type"] == "INTERNAL_ERROR"
            assert closed_s <= REPLICA_TIMEOUT_S + SWEEP_INTERVAL_S + 2, closed_s
            model.release()  # the resumed replica's runs go on, and their writes change nothing
            _wait(lambda: 'rootproof_runs_in_progress{kind="chat"} 0.0' in c.get(f"{a.url}/metrics").text, 30, "the paused replica's chat run to return")
            final = _wait(lambda: (d := _run(c, b.url, successor))["status"] is not None and d, 60, "the alert's successor to end")
            assert final["status"] == "SUCCESS" and final["retry_of"] == alert_run
            _wait(lambda: successor in {x[1].get("run_id") for x in receivers.got["hook"]}, 30, "the successor's notification")
            time.sleep(2 * SWEEP_INTERVAL_S)
            events = _events(c, b.url, run_id)
            assert [e.event for e in events][-2:] == ["content", "done"] and events[-1].data["data"]["status"] == "FAILED"  # type: ignore[index]
            assert [int(e.id or 0) for e in events] == list(range(1, len(events) + 1))
            again = _run(c, b.url, run_id)
            assert again["status"] == "FAILED" and again["content"] == swept["content"]
            lost = _events(c, b.url, alert_run)
            assert lost[-1].event == "done" and lost[-1].data["data"]["status"] == "FAILED"  # type: ignore[index]
            with engine.connect() as conn:
                error = conn.execute(sa.text("SELECT error FROM diagnosis_run WHERE run_id = :r"), {"r": run_id}).scalar()
                successors = conn.execute(sa.text("SELECT count(*) FROM diagnosis_run WHERE retry_of IN (:r, :s)"), {"r": alert_run, "s": successor}).scalar()
            assert str(error).startswith("worker lost") and "heartbeat" in str(error)
            assert successors == 1
            assert alert_run not in {x[1].get("run_id") for x in receivers.got["hook"]}
            print(f"paused {a.url}; its run was closed {closed_s:.1f} s later by {b.url}")
    finally:
        engine.dispose()


def _successor(engine: sa.Engine, run_id: str) -> str | None:
    with engine.connect() as conn:
        found = conn.execute(sa.text("SELECT run_id FROM diagnosis_run WHERE retry_of = :r"), {"r": run_id}).scalar()
    return str(found) if found else None


def test_a_killed_replica_loses_no_alert(replicas: list[ProcessServer], model: SlowModelServer, database: str, receivers: Receivers) -> None:
    """Every webhook job runs on A (B is paused while they are taken); A is killed. Each lost
    run gets exactly one successor, run by B to SUCCESS; the re-sent alert answers with the
    successor; a follower (on B) of A's chat run gets its INTERNAL_ERROR content and FAILED done."""
    a, b = replicas
    model.hold()
    groups = [f"kill-{os.getpid()}-{i}" for i in range(4)]
    engine = sa.create_engine(database)
    try:
        with httpx.Client(timeout=60) as c:
            chat_run, _ = _start_chat(c, a.url, 2)
            os.kill(b.proc.pid, signal.SIGSTOP)
            try:
                lost: list[str] = []
                for group in groups:
                    r = c.post(f"{a.url}/api/alerts/alertmanager", params={"scenario": "pg-row-lock"}, json=_alert(group), headers=auth(OPERATOR_KEY))
                    assert r.status_code == 202, r.text
                    lost.append(r.json()["run_ids"][0])

                def executors() -> list[str] | None:
                    with engine.connect() as conn:
                        rows = conn.execute(sa.text("SELECT executor FROM diagnosis_run WHERE run_id = ANY(:r)"), {"r": lost}).scalars().all()
                    return list(rows) if len(rows) == len(lost) and all(rows) else None

                owners = _wait(executors, 30, "A's worker to take every job")
                assert {o.split(":")[1] for o in owners} == {str(a.proc.pid)}
            finally:
                os.kill(b.proc.pid, signal.SIGCONT)
            follower: list[SseEvent] = []
            with c.stream("GET", f"{b.url}/api/runs/{chat_run}/events", headers={**auth(OPERATOR_KEY), "Last-Event-ID": "2"}) as follow:
                assert follow.status_code == 200
                a.kill()
                t0 = time.monotonic()
                model.release()
                for ev in read_sse(follow.iter_lines()):
                    if not ev.comment:
                        follower.append(ev)
                follow_s = time.monotonic() - t0
            assert [e.event for e in follower][-2:] == ["content", "done"], [e.event for e in follower]
            assert follower[-2].data["data"]["fallback"]["type"] == "INTERNAL_ERROR" and follower[-1].data["data"]["status"] == "FAILED"  # type: ignore[index]
            assert [int(e.id or 0) for e in follower] == list(range(3, 3 + len(follower)))
            assert follow_s <= REPLICA_TIMEOUT_S + SWEEP_INTERVAL_S + 2, f"the follower waited {follow_s:.1f} s"

            def successors() -> list[dict[str, Any]] | None:
                with engine.connect() as conn:
                    rows = conn.execute(
                        sa.text("SELECT run_id, retry_of, executor, status FROM diagnosis_run WHERE retry_of = ANY(:r)"), {"r": lost}
                    ).mappings().all()
                done = [dict(r) for r in rows if r["status"] is not None]
                return done if len(done) == len(lost) else None

            found = _wait(successors, 60, "a successor of every lost run to end")
            recovered_s = time.monotonic() - t0
            assert sorted(r["retry_of"] for r in found) == sorted(lost)
            assert all(r["status"] == "SUCCESS" and r["executor"].split(":")[1] == str(b.proc.pid) for r in found), found
            for run_id in lost:
                old = _run(c, b.url, run_id)
                assert old["status"] == "FAILED" and old["content"]["fallback"]["type"] == "INTERNAL_ERROR"
            by_lost = {r["retry_of"]: r["run_id"] for r in found}
            for group, run_id in zip(groups, lost, strict=True):
                again = c.post(f"{b.url}/api/alerts/alertmanager", params={"scenario": "pg-row-lock"}, json=_alert(group), headers=auth(OPERATOR_KEY))
                assert again.status_code == 202 and again.json() == {"run_ids": [by_lost[run_id]], "duplicate": True}
                view = _run(c, b.url, by_lost[run_id])
                assert view["retry_of"] == run_id and view["session_id"] == _run(c, b.url, run_id)["session_id"]
            # Only the final run of each alert notified.
            _wait(lambda: {x[1].get("run_id") for x in receivers.got["hook"]} >= set(by_lost.values()), 30, "the successors' notifications")
            assert not {x[1].get("run_id") for x in receivers.got["hook"]} & set(lost)
            with engine.connect() as conn:
                jobs = conn.execute(
                    sa.text("SELECT status::text FROM procrastinate_jobs WHERE task_name = 'rootproof.diagnose' AND args->'request'->>'run_id' = ANY(:r)"), {"r": lost}
                ).scalars().all()
            assert sorted(jobs) == ["succeeded"] * len(lost), jobs
            print(f"killed {a.url}: the follower got done {follow_s:.1f} s later; every lost run's successor ended {recovered_s:.1f} s after the kill")
    finally:
        engine.dispose()
