"""Jobs: webhook runs executed by any replica's worker.

Team service (the trace store on PostgreSQL): procrastinate, a PostgreSQL job queue. Jobs live
in the database the team already runs for the trace store, beside the runs they start, so a
job and the run it announces are never out of step with one database down and the other up;
every replica runs a worker with `worker_concurrency` slots, takes jobs as PostgreSQL notifies
it (`LISTEN/NOTIFY`, polling as a fallback), and sends heartbeats. A replica killed mid-job
stops sending them: every replica looks for jobs whose worker's heartbeat is older than
`stalled_job_timeout_s` and retries them; the retry finds its run started by a worker that is
gone, closes it as FAILED (`INTERNAL_ERROR`, "worker lost") and ends the job. A job is never
lost, and no alert is diagnosed twice.

Embedded default (SQLite): the same jobs run in-process, on a bounded thread pool.

procrastinate stays inside this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

__all__ = ["InProcessJobs", "JobQueue", "ProcrastinateJobs", "RunRequest", "libpq_dsn"]

log = logging.getLogger(__name__)

TASK_NAME = "rootproof.diagnose"
QUEUE = "rootproof"


class RunRequest(BaseModel):
    """What a job needs to run one diagnosis (JSON: it is stored in the queue)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    session_id: str
    principal: str
    question: str = ""
    scenario: str | None = None
    targets: bool = False
    alert: dict[str, Any] | None = None
    """The alert payload, redacted (secrets never reach the queue)."""
    kind: str = "webhook"
    source: str | None = None
    """alertmanager | grafana for a webhook run."""
    queued_at: float | None = None
    """When the job was queued (epoch seconds): the job's wait is measured from it."""


Executor = Callable[[RunRequest], "str | None"]
"""Runs a job; returns the final run's status (FAILED makes the job itself fail)."""
Deliverer = Callable[[str, str, int, bool], bool]
"""`(run_id, receiver, attempt, last)`: one notification attempt; False to try again later."""

NOTIFY_TASK = "rootproof.notify"
NOTIFY_ATTEMPTS = 5
"""Attempts of one notification (the first and four retries, 1, 3, 5 and 7 s apart)."""


NOTIFY_PRIORITY = 10
"""procrastinate priority of notification jobs (diagnoses have the default, 0)."""


class RunFailed(Exception):
    """A job whose run ended FAILED: the job is marked failed (never retried for it)."""


class NotDelivered(Exception):
    """A notification attempt that should be tried again."""


class JobQueue(Protocol):
    """Where webhook runs wait for a worker."""

    name: str

    async def start(self) -> None:
        """Open the queue and start this replica's worker."""

    async def defer(self, request: RunRequest) -> None:
        """Queue one run."""

    def defer_notification_sync(self, run_id: str, receiver: str) -> None:
        """Queue the notification of a run to one receiver (from a worker thread)."""

    async def counts(self) -> dict[str, int]:
        """Jobs by status (`todo`, `doing`, ...), for the `rootproof_jobs` gauge."""

    def resubmit(self, run_id: str) -> bool:
        """Queue the job of the alert whose first run is `run_id` again when it already
        finished (from a worker thread); True when it was queued."""

    async def stop_fetching(self) -> None:
        """Take no new job (shutdown, first step)."""

    async def stop(self) -> list[RunRequest]:
        """Wait for the running jobs (bounded) and close; returns the jobs that will not run
        here and are not kept by the queue (an in-process queue's waiting jobs)."""


class InProcessJobs:
    """The embedded default: jobs on a bounded thread pool of this process (not durable: a job
    still waiting when the process stops is handed back by `stop` and its run closed)."""

    name = "in-process"

    def __init__(self, execute: Executor, concurrency: int, *, deliver: Deliverer | None = None) -> None:
        self._execute = execute
        self._deliver = deliver
        self._pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="job")
        self._notify_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="notify")
        self._stopped = threading.Event()
        self._running = 0
        self._pending: set[asyncio.Future[None]] = set()
        self._waiting: dict[str, RunRequest] = {}
        self._lock = threading.Lock()
        self._closing = False

    async def start(self) -> None:
        """Nothing to open."""

    async def defer(self, request: RunRequest) -> None:
        if self._closing:
            raise RuntimeError("the job queue is shutting down")
        with self._lock:
            self._waiting[request.run_id] = request
        future = asyncio.get_running_loop().run_in_executor(self._pool, self._run, request)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)

    def _run(self, request: RunRequest) -> None:
        with self._lock:
            if self._closing or self._waiting.pop(request.run_id, None) is None:
                return  # handed back by stop()
            self._running += 1
        try:
            self._execute(request)
        except Exception:  # noqa: BLE001 - a job's failure is recorded on its run
            log.exception("job for run %s failed", request.run_id)
        finally:
            with self._lock:
                self._running -= 1

    def defer_notification_sync(self, run_id: str, receiver: str) -> None:
        if self._deliver is None or self._closing:
            raise RuntimeError("no notification queue")
        self._notify_pool.submit(self._notify, run_id, receiver)

    def _notify(self, run_id: str, receiver: str) -> None:
        assert self._deliver is not None
        for attempt in range(1, NOTIFY_ATTEMPTS + 1):
            try:
                if self._deliver(run_id, receiver, attempt, attempt == NOTIFY_ATTEMPTS):
                    return
            except Exception:  # noqa: BLE001 - logged; the next attempt tries again
                log.exception("notification of run %s to %s failed", run_id, receiver)
            if self._stopped.wait(1 + 2 * (attempt - 1)):
                return  # shutting down: the process does not wait for a receiver's next attempt

    async def counts(self) -> dict[str, int]:
        with self._lock:
            return {"todo": len(self._waiting), "doing": self._running}

    def resubmit(self, run_id: str) -> bool:
        """Nothing to do: one process, whose own runs are never swept."""
        return False

    async def stop_fetching(self) -> None:
        with self._lock:
            self._closing = True
        self._stopped.set()

    async def stop(self) -> list[RunRequest]:
        self._stopped.set()
        with self._lock:
            self._closing = True
            unstarted, self._waiting = list(self._waiting.values()), {}
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=15)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._notify_pool.shutdown(wait=False, cancel_futures=True)
        return unstarted


def libpq_dsn(sqlalchemy_url: str) -> str:
    """A libpq connection string from the trace store's SQLAlchemy URL (`postgresql+psycopg://…`)."""
    from sqlalchemy.engine import make_url

    url = make_url(sqlalchemy_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


class ProcrastinateJobs:
    """procrastinate on the trace store's PostgreSQL database."""

    name = "procrastinate"

    def __init__(
        self,
        execute: Executor,
        *,
        dsn: str,
        concurrency: int,
        stalled_after_s: float,
        worker_name: str,
        deliver: Deliverer | None = None,
        on_retry: Callable[[], None] | None = None,
    ) -> None:
        import procrastinate

        self._procrastinate = procrastinate
        self._execute = execute
        self._deliver = deliver
        self._on_retry = on_retry
        self._loop: asyncio.AbstractEventLoop | None = None
        self._concurrency = concurrency
        self._stalled_after_s = stalled_after_s
        self._worker_name = worker_name
        self._dsn = dsn
        self.app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=1, max_size=max(4, concurrency + 2)))

        # The runs execute on a pool of their own (procrastinate would run a sync task on the
        # event loop's default executor, which the API's store reads need).
        self._pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="job")

        async def diagnose(request: dict[str, Any]) -> None:
            run = RunRequest.model_validate(request)
            status = await asyncio.get_running_loop().run_in_executor(self._pool, self._execute, run)
            if status == "FAILED":  # the job's status says what became of its run
                raise RunFailed(f"run {run.run_id} ended FAILED")

        self._task = self.app.task(name=TASK_NAME, queue=QUEUE)(diagnose)

        async def notify(context: Any, run_id: str, receiver: str) -> None:
            if self._deliver is None:
                return
            attempt = int(context.job.attempts) + 1
            done = await asyncio.get_running_loop().run_in_executor(self._pool, self._deliver, run_id, receiver, attempt, attempt >= NOTIFY_ATTEMPTS)
            if not done:
                raise NotDelivered(f"notification of run {run_id} to {receiver}: attempt {attempt} failed")

        retry = procrastinate.RetryStrategy(max_attempts=NOTIFY_ATTEMPTS - 1, wait=1, linear_wait=2, retry_exceptions={NotDelivered})
        # Before any waiting diagnosis (procrastinate takes higher priorities first): on a burst of
        # alerts, a run's notification does not wait for every run queued before it.
        self._notify_task = self.app.task(name=NOTIFY_TASK, queue=QUEUE, pass_context=True, retry=retry, priority=NOTIFY_PRIORITY)(notify)
        self._tasks: list[asyncio.Task[Any]] = []

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.app.open_async()
        await self._ensure_schema()
        if self._concurrency > 0:
            self._tasks.append(
                asyncio.create_task(
                    self.app.run_worker_async(
                        queues=[QUEUE],
                        name=self._worker_name,
                        concurrency=self._concurrency,
                        install_signal_handlers=False,
                        update_heartbeat_interval=max(0.5, self._stalled_after_s / 4),
                        stalled_worker_timeout=self._stalled_after_s,
                        shutdown_graceful_timeout=15,
                        fetch_job_polling_interval=1.0,
                    ),
                    name="rootproof-worker",
                )
            )
            self._tasks.append(asyncio.create_task(self._retry_stalled(), name="rootproof-stalled-jobs"))

    async def _ensure_schema(self) -> None:
        """Apply procrastinate's schema once; a transaction-scoped advisory lock orders replicas
        starting together (one connection of its own, so the lock is never left in a pool)."""
        import psycopg

        async with await psycopg.AsyncConnection.connect(self._dsn) as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(7402519)")
            cur = await conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL")
            row = await cur.fetchone()
            if not (row and row[0]):
                from procrastinate.schema import SchemaManager

                await conn.execute(SchemaManager.get_schema())

    async def _retry_stalled(self) -> None:
        """Retry the jobs of workers that stopped sending heartbeats (a replica killed mid-job)."""
        manager = self.app.job_manager
        while True:
            await asyncio.sleep(max(1.0, self._stalled_after_s / 2))
            try:
                stalled = await manager.get_stalled_jobs(queue=QUEUE, seconds_since_heartbeat=self._stalled_after_s)
                for job in stalled:
                    with contextlib.suppress(Exception):  # another replica may have retried it first
                        await manager.retry_job(job)
                        log.warning("retried job %s of a stalled worker", job.id)
                        if self._on_retry is not None:
                            self._on_retry()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                log.warning("looking for stalled jobs failed: %s", type(exc).__name__)

    async def defer(self, request: RunRequest) -> None:
        await self._task.defer_async(request=request.model_dump(mode="json"))

    def defer_notification_sync(self, run_id: str, receiver: str) -> None:
        """Queued on the event loop that opened the queue (its connection pool lives there)."""
        if self._loop is None:
            raise RuntimeError("the job queue is not open")
        coro = self._notify_task.defer_async(run_id=run_id, receiver=receiver)
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def resubmit(self, run_id: str) -> bool:
        """Queue a finished job of the alert again (a `queueing_lock` per run, so several
        sweeping replicas queue it once); a job still waiting or running is left to run."""
        if self._loop is None:
            return False

        async def again() -> bool:
            rows = await self.app.connector.execute_query_all_async(
                "SELECT status::text AS status, args FROM procrastinate_jobs WHERE task_name = %(task)s AND args->'request'->>'run_id' = %(run)s ORDER BY id",
                task=TASK_NAME,
                run=run_id,
            )
            if not rows or any(str(r["status"]) in ("todo", "doing") for r in rows):
                return False
            request = rows[-1]["args"]["request"]
            with contextlib.suppress(self._procrastinate.exceptions.AlreadyEnqueued):
                await self._task.configure(queueing_lock=f"retry:{run_id}").defer_async(request=request)
                return True
            return False

        try:
            return asyncio.run_coroutine_threadsafe(again(), self._loop).result(timeout=30)
        except Exception as exc:  # noqa: BLE001 - procrastinate's stalled check still retries a running job
            log.warning("could not queue the job of run %s again: %s", run_id, type(exc).__name__)
            return False

    async def counts(self) -> dict[str, int]:
        rows = await self.app.connector.execute_query_all_async(
            "SELECT status::text AS status, count(*) AS n FROM procrastinate_jobs WHERE queue_name = %(queue)s GROUP BY status", queue=QUEUE
        )
        found = {str(r["status"]): int(r["n"]) for r in rows}
        return {status: found.get(status, 0) for status in ("todo", "doing", "succeeded", "failed", "cancelled", "aborted")} | found

    async def stop_fetching(self) -> None:
        """Ask the worker to stop (it takes no new job and waits for the running ones)."""
        for task in self._tasks:
            task.cancel()

    async def stop(self) -> list[RunRequest]:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, timeout=20)
        await self.app.close_async()
        self._pool.shutdown(wait=False, cancel_futures=True)
        return []  # waiting jobs stay in PostgreSQL for the next worker
