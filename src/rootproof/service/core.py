"""The service's long-lived state: one Runtime, the local runs, the job queue, cancellation.

Chat runs execute in the replica that received them (their stream is attached to them; a
client that disconnects cancels its run). Webhook runs are jobs: the POST answers 202 with the
run id at once, and any replica's worker executes the run. Either way, every event is in
`run_event`, so any replica can serve a run's status, trace and stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rootproof.alerts import AlertPayload
from rootproof.boundary.redaction import redact, redact_value
from rootproof.errors import ConfigError, StoreError, UsageError
from rootproof.guard.fallback import FallbackType, SafeFallbackFactory
from rootproof.harness import Harness
from rootproof.run.records import RunRecord, utcnow
from rootproof.service.auth import KeyRing
from rootproof.service.cancel import CancelBus
from rootproof.service.hub import LocalRun, RunHub
from rootproof.service.jobs import InProcessJobs, JobQueue, ProcrastinateJobs, RunRequest, libpq_dsn
from rootproof.service.metrics import ServiceMetrics
from rootproof.service.notify import Receiver, build_notification, deliver, load_receivers
from rootproof.settings import Settings
from rootproof.store.sql import SqlTraceStore

if TYPE_CHECKING:
    from rootproof.driver import RunOutcome
    from rootproof.runtime import Runtime
    from rootproof.scenarios.types import Scenario
    from rootproof.targets import LoadedTargets

__all__ = ["ALERT_KINDS", "Service", "WORKER_LOST", "group_hash"]

ALERT_KINDS = ("alertmanager", "grafana")
"""The kinds of the webhook runs (every operator reads them)."""

log = logging.getLogger(__name__)

WORKER_LOST = "worker lost"
"""The error of a run whose worker stopped mid-run (its job's retry closes it)."""
LOST = "LOST"
"""`_run_job`'s answer for a run closed for this replica while it ran (a pause)."""


def group_hash(group_key: str) -> str:
    """The stored hash of an Alertmanager `groupKey` alone (`GET /api/runs?group_key=`)."""
    return hashlib.sha256(group_key.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Evidence:
    """Where a run reads evidence: a built-in scenario, or the server's targets file."""

    scenario: str | None
    targets: bool


class Service:
    """Everything a service process keeps between requests."""

    def __init__(
        self, settings: Settings, runtime: Runtime, *, keyring: KeyRing, no_auth: bool = False, environ: Mapping[str, str] | None = None
    ) -> None:
        self.settings = settings
        self.environ = dict(environ if environ is not None else os.environ)
        """Where receiver URLs named by `url_env` are read (the process environment by default)."""
        self.runtime = runtime
        self.harness = Harness(runtime)
        self.keyring = keyring
        self.no_auth = no_auth
        sink = runtime.sink
        if not isinstance(sink, SqlTraceStore):
            raise ConfigError(f"ROOTPROOF_DATABASE_URL: the service needs the SQL trace store, got {type(sink).__name__}")
        self.store: SqlTraceStore = sink
        self.hub = RunHub()
        self.metrics = ServiceMetrics()
        self.replica = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        """This process's instance id (`host:pid:random`): its heartbeat row and its runs' `executor`."""
        self._operating: asyncio.Task[None] | None = None
        self.receivers: list[Receiver] = []
        self.targets: LoadedTargets | None = None
        self._scenarios: dict[str, Scenario] = {}
        self._scenario_ids: set[str] | None = None
        self._scenario_lock = threading.Lock()
        self._chat_pool = ThreadPoolExecutor(max_workers=settings.chat_concurrency, thread_name_prefix="chat")
        self._chat_lock = threading.Lock()
        self._chat_open = 0
        self.cancel_bus = CancelBus(self.hub, self.store, settings.redis_url)
        self.jobs: JobQueue
        if self.store.engine.dialect.name == "postgresql":
            self.jobs = ProcrastinateJobs(
                self.execute_job,
                dsn=libpq_dsn(settings.resolved_database_url()),
                concurrency=settings.worker_concurrency,
                stalled_after_s=settings.stalled_job_timeout_s,
                worker_name=self.replica,
                deliver=self._deliver_attempt,
                on_retry=self.metrics.job_retries.inc,
            )
        else:
            self.jobs = InProcessJobs(self.execute_job, settings.worker_concurrency, deliver=self._deliver_attempt)

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the targets file (when set) and the knowledge base, build the model client,
        start the job worker and the cancellation bus."""
        if self.settings.targets is not None:
            from rootproof.targets import load_targets

            try:
                self.targets = await asyncio.to_thread(load_targets, self.settings.targets)
            except ConfigError as exc:
                raise ConfigError(f"ROOTPROOF_TARGETS: {exc}") from exc
        # Warm up before the port answers ready: the knowledge base (the offline planner and
        # `lookup_knowledge` read it), the model client and the card catalogue.
        if self.settings.notifications is not None:
            self.receivers = load_receivers(self.settings.notifications, self.environ)
        await asyncio.to_thread(self._warm_up)
        await asyncio.to_thread(self.store.heartbeat, self.replica)
        await self.jobs.start()
        await self.cancel_bus.start()
        self._operating = asyncio.create_task(self._operate(), name="rootproof-heartbeat")

    def _warm_up(self) -> None:
        self.runtime.knowledge  # noqa: B018 - loads the cards and their index once
        self.runtime.model()
        self.runtime.taxonomy()
        self.scenario_ids()

    async def stop(self) -> None:
        """Stop taking jobs, cancel the runs executing here, wait for them to reach a terminal
        state (bounded), then close the queue. Jobs still waiting in an in-process queue are
        closed CANCELLED (a durable queue, procrastinate, keeps them for the next worker)."""
        await self.jobs.stop_fetching()
        runs = self.hub.cancel_all("the server is shutting down")
        deadline = time.monotonic() + 15
        for run in runs:
            await asyncio.to_thread(run.finished.wait, max(0.0, deadline - time.monotonic()))
        for request in await self.jobs.stop():
            await asyncio.to_thread(self._close_unstarted, request.run_id)
        self.hub.cancel_all("the server is shutting down")
        if self._operating is not None:
            self._operating.cancel()
            with contextlib.suppress(BaseException):
                await self._operating
        if not self.hub.ids():  # every run of this replica ended: it leaves the heartbeat table
            with contextlib.suppress(StoreError):
                await asyncio.to_thread(self.store.forget_replica, self.replica)
        await self.cancel_bus.stop()
        self._chat_pool.shutdown(wait=False, cancel_futures=True)

    # -- liveness ---------------------------------------------------------------------------
    @property
    def sweep_interval_s(self) -> float:
        """How often this replica sends its heartbeat and sweeps the runs of lost replicas."""
        return max(0.5, self.settings.replica_timeout_s / 3)

    async def _operate(self) -> None:
        """Every `sweep_interval_s`: this replica's heartbeat, the sweep of the runs of replicas
        whose heartbeat is older than `replica_timeout_s`, and the job queue's gauges. Every
        replica does it (no leader): closing a run is conditional, so two sweeps never both close it."""
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            try:
                await asyncio.to_thread(self.store.heartbeat, self.replica)
                await asyncio.to_thread(self.sweep_lost)
                stalled = await asyncio.to_thread(self.store.stalled_replicas, self.settings.replica_timeout_s)
                self.metrics.stalled_workers.set(stalled)
                for status, count in (await self.jobs.counts()).items():
                    self.metrics.jobs.labels(status).set(count)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                log.warning("heartbeat or sweep failed: %s", type(exc).__name__)

    def sweep_lost(self) -> int:
        """Close the runs whose executor's heartbeat is older than `replica_timeout_s`, as a
        lost worker's are closed (FAILED, INTERNAL_ERROR, `content` and `done`). A webhook run
        closed here is retried by its job's retry (procrastinate's stalled-job check)."""
        closed = 0
        for run_id, executor in self.store.lost_runs(self.settings.replica_timeout_s):
            if executor == self.replica:
                continue  # this replica is alive (a heartbeat write that failed once)
            if self._close_lost(run_id, f"{WORKER_LOST}: {executor} sent no heartbeat for {self.settings.replica_timeout_s:g} s") is None:
                continue
            closed += 1
            log.warning("closed run %s: its replica %s stopped sending heartbeats", run_id, executor)
            if self._kind_of(run_id) not in ALERT_KINDS:
                continue
            if self.store.attempts_of(run_id) >= self.settings.webhook_max_attempts:
                self.notify_end(run_id)  # no successor will come: this is the alert's final run
            else:
                # Its job is retried by procrastinate's stalled-job check; if that job already
                # finished (a replica that resumed after a pause finished it), queue it again.
                self.jobs.resubmit(self.store.first_of(run_id))
        return closed

    def _close_unstarted(self, run_id: str) -> None:
        """A queued job the server will not run (shutdown): its run ends CANCELLED, with its `done`."""
        closed = self.store.close_run(
            run_id, status="CANCELLED", release_outcome="NONE", fallback_type=None, content=None, error="cancelled: the server shut down before the job started"
        )
        if closed is not None:
            self.metrics.count_closed(self._kind_of(run_id), closed)

    # -- evidence -------------------------------------------------------------------------
    def scenario_ids(self) -> set[str]:
        """The built-in scenario ids a request may name."""
        with self._scenario_lock:
            if self._scenario_ids is None:
                from rootproof.scenarios.loader import list_scenarios

                self._scenario_ids = {p.name for p in list_scenarios()}
            return self._scenario_ids

    def scenario(self, ref: str) -> Scenario:
        """A built-in scenario by id, loaded once (a request never names a server folder)."""
        if ref not in self.scenario_ids():
            raise UsageError(f"unknown scenario {ref[:80]!r}: expected a built-in scenario id (`rootproof scenarios list`)")
        with self._scenario_lock:
            found = self._scenarios.get(ref)
        if found is None:
            from rootproof.scenarios.loader import load_scenario

            found = load_scenario(ref, max_file_bytes=self.settings.max_scenario_file_bytes)
            with self._scenario_lock:
                self._scenarios.setdefault(ref, found)
        return found

    def evidence(self, scenario: str | None) -> Evidence:
        """The evidence of a run: the scenario named, else the server's targets, else UsageError."""
        if scenario:
            self.scenario(scenario)
            return Evidence(scenario=scenario, targets=False)
        if self.targets is not None:
            return Evidence(scenario=None, targets=True)
        raise UsageError("no evidence for the run: name a built-in scenario id in `scenario` (this server has no targets file, ROOTPROOF_TARGETS)")

    # -- runs -----------------------------------------------------------------------------
    def _diagnose(self, request: RunRequest, local: LocalRun) -> RunOutcome:
        """Run one request to a terminal state on this thread (never raises for run failures)."""
        flagged = self.store.cancel_requested([request.run_id])
        if flagged:
            local.cancellation.cancel("cancelled through the API before it started")
        kind = request.kind
        self.metrics.running.labels(kind).inc()
        try:
            outcome = self.harness.diagnose(
                request.question,
                scenario=self.scenario(request.scenario) if request.scenario else None,
                targets=self.targets if request.targets else None,
                alert=request.alert,
                listeners=[local.listener],
                session_id=request.session_id,
                cancellation=local.cancellation,
                run_id=request.run_id,
                principal=request.principal,
            )
        finally:
            self.metrics.running.labels(kind).dec()
        if not self._closed_elsewhere(request.run_id):
            self.metrics.observe_run(self._kind_of(request.run_id, request), outcome)
        return outcome

    def _closed_elsewhere(self, run_id: str) -> bool:
        """Whether a sweep closed the run while this replica was paused (the sweeping replica
        counted it; the harness's own terminal write changed nothing)."""
        try:
            stored = self.store.get_run(run_id)
        except StoreError:
            return False
        return stored is not None and (stored.error or "").startswith(WORKER_LOST)

    def _kind_of(self, run_id: str, request: RunRequest | None = None) -> str:
        """A run's kind for metric labels: chat, alertmanager, grafana (else `other`)."""
        if request is not None and request.kind == "chat":
            return "chat"
        if request is not None and request.source:
            return request.source
        try:
            meta = self.store.run_meta(run_id) or {}
        except StoreError:
            meta = {}
        return str(meta.get("kind") or "other")

    @property
    def chat_backlog_limit(self) -> int:
        """Chat runs one replica holds at once, running or waiting for a slot: four times
        `chat_concurrency`. A client that posts and hangs up no longer cancels its run, so this
        bounds what a client can queue; beyond it `POST /api/chat` answers 503."""
        return 4 * self.settings.chat_concurrency

    def chat_backlog(self) -> int:
        """Chat runs of this replica that have not returned yet."""
        with self._chat_lock:
            return self._chat_open

    def record_chat(self, request: RunRequest) -> None:
        """Record a chat run before it starts, with this replica as its executor, so that the
        sweep of another replica closes it if this one dies before the run ends (a store
        failure is left to the run itself, which reports it)."""
        try:
            self.store.save_run(self._waiting_record(request))
            self.store.tag_run(request.run_id, kind="chat")
            self.store.claim_executor(request.run_id, self.replica)
        except StoreError:
            log.warning("could not record chat run %s before it started", request.run_id)

    def start_chat(self, request: RunRequest) -> LocalRun:
        """Start a chat run on this replica's chat pool (`record_chat` first); its stream
        follows the returned run."""
        local = self.hub.add(LocalRun(run_id=request.run_id))
        with self._chat_lock:
            self._chat_open += 1

        def work() -> None:
            try:
                self._diagnose(request, local)
            except Exception:  # noqa: BLE001 - the harness ends runs itself; this is a last resort
                log.exception("chat run %s failed outside the harness", request.run_id)
                self._close_failed(request)
            finally:
                local.finish()
                self.hub.remove(request.run_id)
                with self._chat_lock:
                    self._chat_open -= 1

        self._chat_pool.submit(work)
        return local

    def _waiting_record(self, request: RunRequest) -> RunRecord:
        """The record of a run that has not started (its question redacted and bounded)."""
        from rootproof.harness import _language_of
        from rootproof.limits import clip_text

        question = clip_text(redact(request.question), self.settings.input_limits().question_chars)
        return RunRecord(
            run_id=request.run_id,
            session_id=request.session_id,
            question=question,
            language=_language_of(question),
            scenario_id=request.scenario,
            principal=request.principal,
        )

    def accept_alert(self, payload: AlertPayload, raw: dict[str, Any], *, principal: str, evidence: Evidence, source: str) -> tuple[str, bool]:
        """Record a webhook's run before it is queued: `(run_id, duplicate)`.

        A payload whose `groupKey` was seen within `alert_dedup_window_s` gives the run that
        holds the group and `duplicate` True (nothing is queued).
        """
        run_id = str(uuid.uuid4())
        received = utcnow()
        group_key = raw.get("groupKey")
        window = self.settings.alert_dedup_window_s
        if isinstance(group_key, str) and group_key and window > 0:
            # One sender's group: another key posting the same groupKey never silences it.
            digest = hashlib.sha256(f"{source}\0{principal}\0{evidence.scenario or ''}\0{group_key}".encode()).hexdigest()
            holder = self.store.claim_alert_group(digest, run_id, window_s=window)
            if holder is not None:
                return holder, True
        limits = self.settings.input_limits()
        clean = AlertPayload.model_validate(redact_value(payload.model_dump()))
        self.store.save_run(
            RunRecord(
                run_id=run_id,
                session_id=str(uuid.uuid4()),
                question=redact(clean.question()),
                language=clean.language,
                scenario_id=evidence.scenario,
                principal=principal,
                alert=clean.trace(limits.stored_related_alerts),
                started_at=received,
            )
        )
        receiver = raw.get("receiver")
        self.store.tag_run(
            run_id,
            kind=source,
            alert_source=redact(receiver)[:128] if isinstance(receiver, str) and receiver else None,
            group_hash=group_hash(group_key) if isinstance(group_key, str) and group_key else None,
            received_at=received,
            fingerprints=[a.fingerprint for a in [clean.primary, *clean.related] if a.fingerprint],
        )
        return run_id, False

    def refuse_alert(self, run_id: str, reason: str) -> None:
        """The queue refused a webhook's run: close it FAILED and release its group, so the
        sender's retry (it got a 503) starts a run of its own."""
        self.store.release_alert_group(run_id)
        self._close_lost(run_id, reason)

    def execute_job(self, request: RunRequest) -> str | None:
        """A worker's job: run the alert's diagnosis once; returns the final run's status.

        Idempotent, and a retry (procrastinate retries the job of a worker that stopped sending
        heartbeats) follows the alert's runs to the last one:
        - a run still waiting is taken (its executor recorded) and run here;
        - a run another replica is executing is waited for while that replica's heartbeat is
          fresh (at most `replica_timeout_s` and two sweep intervals: the two liveness checks,
          procrastinate's and the heartbeat sweep, are independent); a run whose executor went
          silent is closed FAILED / `INTERNAL_ERROR` ("worker lost") unless it already is;
        - a run closed as "worker lost" gets one successor (`retry_of`, same session), run here,
          and the alert group is pointed at it, while the alert has had fewer than
          `webhook_max_attempts` runs; after that the lost run is the final one;
        - any other terminal run is left alone.
        Only the final run of an alert notifies (at least once).
        """
        for _ in range(self.settings.webhook_max_attempts + 2):
            run_id = self._last_of(request.run_id)
            record = self.store.get_run(run_id)
            if record is None:
                log.warning("job for unknown run %s dropped", run_id)
                return None
            current = request if run_id == request.run_id else request.model_copy(update={"run_id": run_id, "session_id": record.session_id})
            if record.status is None and self.store.claim_executor(run_id, self.replica):
                status = self._run_job(current)
                if status != LOST:
                    return status
                continue  # closed for this replica while it was paused: the alert goes on
            if record.status is None:
                previous = self.store.executor_of(run_id)
                if previous is not None and self._await_executor(run_id, previous):
                    record = self.store.get_run(run_id) or record
                    if record.status is None:
                        return None  # its replica is alive and still runs it
                else:
                    record = self._close_lost(run_id, f"{WORKER_LOST}: {previous} stopped during the run") or self.store.get_run(run_id)
                if record is None or record.status is None:
                    return None
            if not (record.error or "").startswith(WORKER_LOST):
                self.notify_end(run_id)  # ended (here or elsewhere): notified unless it already was
                return record.status
            if self.store.attempts_of(run_id) >= self.settings.webhook_max_attempts:
                self.notify_end(run_id)  # the alert's final run
                return record.status
            fresh = str(uuid.uuid4())
            successor = self.store.create_successor(record, fresh)
            self.store.repoint_alert_group(run_id, successor)
            if successor == fresh:
                self.metrics.job_retries.inc()
                log.warning("alert run %s was lost; its successor %s runs next", run_id, successor)
        return None

    def _last_of(self, run_id: str) -> str:
        """The last run of an alert: `run_id` followed along its successors."""
        for _ in range(self.settings.webhook_max_attempts + 2):
            successor = self.store.successor_of(run_id)
            if successor is None:
                break
            run_id = successor
        return run_id

    def _await_executor(self, run_id: str, executor: str) -> bool:
        """Wait while `executor` (another replica) still runs `run_id` with a fresh heartbeat;
        True when the run ended or its replica is still alive at the end of the wait, False as
        soon as the replica's heartbeat is stale (it is gone)."""
        deadline = time.monotonic() + self.settings.replica_timeout_s + 2 * self.sweep_interval_s
        while True:
            record = self.store.get_run(run_id)
            if record is None or record.status is not None:
                return True
            if not self.store.replica_alive(executor, self.settings.replica_timeout_s):
                return False
            if time.monotonic() >= deadline:
                return True
            time.sleep(min(1.0, self.sweep_interval_s / 2))

    def _run_job(self, request: RunRequest) -> str | None:
        """Run a taken webhook run here; notify when it ends. `LOST` when the run was closed
        for this replica meanwhile (it was paused past the heartbeat timeout): the caller goes
        on with the alert's successor, and nothing is notified for the lost run here."""
        if request.queued_at is not None:
            self.metrics.job_wait_seconds.observe(max(0.0, time.time() - request.queued_at))
        local = self.hub.add(LocalRun(run_id=request.run_id))
        try:
            self._diagnose(request, local)
        except Exception:  # noqa: BLE001 - as for chat runs: the run must still end terminal
            log.exception("job run %s failed outside the harness", request.run_id)
            self._close_failed(request)
        finally:
            local.finish()
            self.hub.remove(request.run_id)
        stored = self.store.get_run(request.run_id)
        if stored is None:
            return None
        if (stored.error or "").startswith(WORKER_LOST):
            return LOST
        self.notify_end(request.run_id)
        return stored.status

    # -- notifications ----------------------------------------------------------------------
    def notify_end(self, run_id: str) -> None:
        """An alert's final run ended: queue one notification per receiver (or, with none
        configured, count the alert's time to its `done`)."""
        try:
            record = self.store.get_run(run_id)
            meta = self.store.run_meta(run_id) or {}
        except StoreError:
            log.warning("could not read run %s to notify", run_id)
            return
        if record is None or record.status is None or meta.get("notified_at") is not None:
            return  # not ended, or its notifications are queued already
        if not self.receivers:
            received = meta.get("received_at")
            if received is not None and record.ended_at is not None and self.store.mark_notified(run_id):
                self.metrics.alert_to_delivery.observe(max(0.0, (record.ended_at - received).total_seconds()))
            return
        # Queued first, marked after: a replica that dies in between leaves the mark unset, and
        # the job's retry queues them again (at least once; the Idempotency-Key drops repeats).
        for receiver in self.receivers:
            try:
                self.jobs.defer_notification_sync(run_id, receiver.name)
            except Exception as exc:  # noqa: BLE001 - the run stays readable; the dead letter says why
                self.store.add_dead_letter(run_id, receiver.name, attempts=0, last_status=None, detail=f"could not queue the notification: {type(exc).__name__}")
        self.store.mark_notified(run_id)

    def _deliver_attempt(self, run_id: str, receiver_name: str, attempt: int, last: bool) -> bool:
        """One delivery attempt of a run's notification to one receiver; True when done (sent,
        or given up: a dead letter recorded); False to try again later."""
        receiver = next((r for r in self.receivers if r.name == receiver_name), None)
        record = self.store.get_run(run_id)
        if receiver is None or record is None:
            log.warning("notification of run %s to %s dropped: %s", run_id, receiver_name, "unknown receiver" if receiver is None else "unknown run")
            return True
        note = build_notification(record, receiver=receiver, public_url=self.settings.public_url)
        result = deliver(receiver, note)
        if result.ok:
            self.metrics.notifications.labels(receiver.name, "delivered").inc()
            if self.store.mark_delivered(run_id):
                received = (self.store.run_meta(run_id) or {}).get("received_at")
                if received is not None:
                    self.metrics.alert_to_delivery.observe(max(0.0, (utcnow() - received).total_seconds()))
            return True
        if result.retryable and not last:
            self.metrics.notifications.labels(receiver.name, "retried").inc()
            return False
        self.metrics.notifications.labels(receiver.name, "dead_letter").inc()
        self.store.add_dead_letter(run_id, receiver.name, attempts=attempt, last_status=result.status, detail=result.detail)
        log.warning("notification of run %s to %s not delivered after %d attempts (%s)", run_id, receiver.name, attempt, result.detail)
        return True

    def _close_failed(self, request: RunRequest) -> None:
        """Close a run that failed outside the harness (e.g. the store refused its first write),
        never raising: the failure is logged, the run left to the orphan sweep."""
        try:
            self._close_lost(request.run_id, "the run failed outside the harness", request=request)
        except Exception:  # noqa: BLE001 - the store may still be failing
            log.exception("could not close run %s", request.run_id)

    def _close_lost(self, run_id: str, reason: str, *, request: RunRequest | None = None) -> RunRecord | None:
        """Close a run its executor abandoned: FAILED with the INTERNAL_ERROR fallback, and the
        `content` and `done` events its stream still lacks (one transaction, only if the run is
        not terminal yet). A run whose record was never saved (it failed before its first write)
        gets one from `request`: else it could not be read, and its stream would end with no
        event at all. Returns the closed record, None when it was already terminal."""
        language = "en"
        missing = self._waiting_record(request) if request is not None else None
        existing = self.store.get_run(run_id)
        if existing is not None:
            language = existing.language
        elif missing is not None:
            language = missing.language
        closed = self.store.close_run(
            run_id,
            status="FAILED",
            release_outcome="FALLBACK",
            fallback_type=str(FallbackType.INTERNAL_ERROR),
            content=SafeFallbackFactory.build(FallbackType.INTERNAL_ERROR, language),
            error=reason,
            missing=missing,
        )
        if closed is not None:
            self.metrics.count_closed(self._kind_of(run_id, request), closed)
        return closed

    def new_chat(self, *, message: str, session_id: str | None, principal: str, evidence: Evidence, alert: dict[str, Any] | None) -> RunRequest:
        """The request of a chat run (its run id given out in the stream's first event)."""
        return RunRequest(
            run_id=str(uuid.uuid4()),
            session_id=session_id or str(uuid.uuid4()),
            principal=principal,
            question=message,
            scenario=evidence.scenario,
            targets=evidence.targets,
            alert=redact_value(alert) if alert is not None else None,
            kind="chat",
        )

    def run_state(self, record: RunRecord) -> str:
        """A run's lifecycle state: the record's when terminal, else read from its events."""
        if record.status is not None:
            return record.lifecycle_state
        local = self.hub.get(record.run_id)
        if local is not None:
            return local.state
        from rootproof.service.hub import state_from_events

        return state_from_events([(e.type, e.data.get("phase")) for e in self.store.events(record.run_id)])
