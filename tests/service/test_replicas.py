"""Two replicas on one PostgreSQL and one Redis, as `rootproof serve` processes over real HTTP:
cancel a run on the other replica, resume a stream from the other replica, and kill the
replica whose worker runs a job mid-run (the job is retried, the run ends terminal)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.services import DEFAULT_PG_URL, fresh_database

from .support import (
    OPERATOR_KEY,
    ProcessServer,
    SlowModelServer,
    auth,
    read_sse,
    redis_or_skip,
    serve_process,
    service_env,
    stream,
)

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    yield from fresh_database(
        "ROOTPROOF_TEST_PG_URL", DEFAULT_PG_URL, "CREATE DATABASE {name} ENCODING 'UTF8' TEMPLATE template0", "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )


@pytest.fixture(scope="module")
def model() -> Iterator[SlowModelServer]:
    with SlowModelServer(hold_s=25) as server:
        yield server


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, database: str, model: SlowModelServer) -> Iterator[list[ProcessServer]]:
    redis_url = redis_or_skip("redis://127.0.0.1:6379/0")
    started: list[ProcessServer] = []
    try:
        for name in ("a", "b"):
            home = tmp_path_factory.mktemp(f"replica-{name}")
            env = service_env(
                home,
                ROOTPROOF_DATABASE_URL=database,
                ROOTPROOF_REDIS_URL=redis_url,
                ROOTPROOF_STALLED_JOB_TIMEOUT_S="3",
                ROOTPROOF_SSE_HEARTBEAT_S="1",
                ROOTPROOF_WORKER_CONCURRENCY="2",
                **model.env(),
            )
            started.append(serve_process(env, home / "serve.log"))
        yield started
    finally:
        for server in started:
            server.stop()


def _run(client: httpx.Client, url: str, run_id: str) -> dict[str, Any]:
    r = client.get(f"{url}/api/runs/{run_id}", headers=auth(OPERATOR_KEY))
    assert r.status_code == 200, r.text
    return r.json()


def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_cancel_and_resume_across_replicas(replicas: list[ProcessServer]) -> None:
    a, b = replicas
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
        full = stream(c, "GET", f"{b.url}/api/runs/{run_id}/events", headers=auth(OPERATOR_KEY))
        assert [e.id for e in full] == [str(i) for i in range(1, len(full) + 1)] and [e.data for e in full] == [e.data for e in seen_a]


def _alert(group: str) -> dict[str, Any]:
    return {
        "version": "4",
        "status": "firing",
        "groupKey": group,
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "OrderApiLatencyHigh", "severity": "critical", "service": "order-api"},
                "annotations": {"summary": "order API p99 above 2s"},
                "startsAt": "2026-07-22T09:35:00Z",
            }
        ],
    }


def test_a_worker_killed_mid_job_leaves_its_run_terminal(replicas: list[ProcessServer], database: str) -> None:
    a, b = replicas
    engine = sa.create_engine(database)
    try:
        with httpx.Client(timeout=60) as c:
            r = c.post(f"{a.url}/api/alerts/alertmanager", params={"scenario": "pg-row-lock"}, json=_alert(f"kill-{os.getpid()}"), headers=auth(OPERATOR_KEY))
            assert r.status_code == 202, r.text
            run_id = r.json()["run_ids"][0]

            def executor() -> str | None:
                with engine.connect() as conn:
                    return conn.execute(sa.text("SELECT executor FROM diagnosis_run WHERE run_id = :r"), {"r": run_id}).scalar()

            owner = _wait(executor, 30, "a worker to take the job")
            victim, survivor = (a, b) if owner.endswith(f":{a.proc.pid}") else (b, a)
            assert owner.endswith(f":{victim.proc.pid}")
            _wait(lambda: _run(c, survivor.url, run_id)["state"] in ("ROUTING", "RUNNING"), 20, "the run to start")
            victim.kill()
            t0 = time.monotonic()
            final = _wait(lambda: (d := _run(c, survivor.url, run_id))["status"] is not None and d, 60, "the run to be closed")
            closed_s = time.monotonic() - t0
            assert final["status"] == "FAILED" and final["release_outcome"] == "FALLBACK" and final["state"] == "FAILED"
            assert final["content"]["fallback"]["type"] == "INTERNAL_ERROR"
            events = stream(c, "GET", f"{survivor.url}/api/runs/{run_id}/events", headers=auth(OPERATOR_KEY))
            assert [e.event for e in events][-2:] == ["content", "done"] and events[-1].data["data"]["status"] == "FAILED"
            assert [int(e.id or 0) for e in events] == list(range(1, len(events) + 1))
            with engine.connect() as conn:
                error = conn.execute(sa.text("SELECT error FROM diagnosis_run WHERE run_id = :r"), {"r": run_id}).scalar()
                jobs = conn.execute(sa.text("SELECT status, attempts FROM procrastinate_jobs WHERE args->'request'->>'run_id' = :r"), {"r": run_id}).all()
            assert error.startswith("worker lost")
            assert len(jobs) == 1 and str(jobs[0][0]) == "succeeded", jobs
            print(f"killed {victim.url}; the run was closed {closed_s:.1f} s later by {survivor.url}; job {jobs[0]}")
            # The surviving replica still takes new jobs.
            r = c.post(f"{survivor.url}/api/alerts/alertmanager", params={"scenario": "payment-timeout"}, json=_alert(f"after-{os.getpid()}"), headers=auth(OPERATOR_KEY))
            assert r.status_code == 202
    finally:
        engine.dispose()
