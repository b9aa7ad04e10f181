"""The procrastinate job queue on a fresh PostgreSQL database: a job's status says what became
of its run (a run that ended FAILED fails its job, which procrastinate never retries for it),
and a notification that was not delivered is retried until it is."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from rootproof.service.jobs import ProcrastinateJobs, RunRequest, libpq_dsn
from tests.services import DEFAULT_PG_URL, fresh_database

pytestmark = [pytest.mark.services]


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    yield from fresh_database(
        "ROOTPROOF_TEST_PG_URL", DEFAULT_PG_URL, "CREATE DATABASE {name} ENCODING 'UTF8' TEMPLATE template0", "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )


def _request(run_id: str) -> RunRequest:
    return RunRequest(run_id=run_id, session_id=f"s-{run_id}", principal="key:test", scenario="pg-row-lock", kind="webhook", source="alertmanager")


def test_a_failed_run_fails_its_job_and_notifications_are_retried(database: str) -> None:
    ran: list[str] = []
    attempts: list[tuple[str, int, bool]] = []
    lock = threading.Lock()

    def execute(request: RunRequest) -> str | None:
        with lock:
            ran.append(request.run_id)
        return {"run-failed": "FAILED", "run-ok": "SUCCESS", "run-timed-out": "TIMED_OUT"}[request.run_id]

    def deliver(run_id: str, receiver: str, attempt: int, last: bool) -> bool:
        with lock:
            attempts.append((receiver, attempt, last))
        return attempt >= 2  # the first attempt fails (a receiver answering 500)

    engine = sa.create_engine(database)

    def jobs_by_task() -> dict[str, list[tuple[str, int]]]:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT task_name, status::text, attempts, args FROM procrastinate_jobs ORDER BY id")).all()
        found: dict[str, list[tuple[str, int]]] = {}
        for task, status, tries, args in rows:
            key = args.get("request", {}).get("run_id") or f"{task}:{args.get('receiver')}"
            found.setdefault(key, []).append((status, tries))
        return found

    async def scenario() -> dict[str, list[tuple[str, int]]]:
        queue = ProcrastinateJobs(execute, dsn=libpq_dsn(database), concurrency=2, stalled_after_s=30, worker_name="test", deliver=deliver)
        await queue.start()
        try:
            for run_id in ("run-failed", "run-ok", "run-timed-out"):
                await queue.defer(_request(run_id))
            await asyncio.to_thread(queue.defer_notification_sync, "run-ok", "hook")
            for _ in range(200):
                found = await asyncio.to_thread(jobs_by_task)
                if len(found) == 4 and all(v[-1][0] in ("succeeded", "failed") for v in found.values()):
                    break
                await asyncio.sleep(0.1)
            counts = await queue.counts()
            assert counts["succeeded"] == 3 and counts["failed"] == 1 and counts["todo"] == 0, counts
            return found
        finally:
            await queue.stop()

    try:
        found = asyncio.run(scenario())
    finally:
        engine.dispose()
    assert found["run-failed"] == [("failed", 1)]  # failed after its one attempt: never retried for its run's failure
    assert found["run-ok"] == [("succeeded", 1)] and found["run-timed-out"] == [("succeeded", 1)]
    assert found["rootproof.notify:hook"] == [("succeeded", 2)]  # one retry
    assert sorted(ran) == ["run-failed", "run-ok", "run-timed-out"]
    assert attempts == [("hook", 1, False), ("hook", 2, False)]
