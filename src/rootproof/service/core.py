"""The service's long-lived state: one Runtime, the local runs, the job queue, cancellation.

Chat runs execute in the replica that received them (their stream is attached to them; a
client that disconnects cancels its run). Webhook runs are jobs: the POST answers 202 with the
run id at once, and any replica's worker executes the run. Either way, every event is in
`run_event`, so any replica can serve a run's status, trace and stream.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rootproof.alerts import AlertPayload
from rootproof.boundary.redaction import redact, redact_value
from rootproof.errors import ConfigError, UsageError
from rootproof.guard.fallback import FallbackType, SafeFallbackFactory
from rootproof.harness import Harness
from rootproof.run.records import EventRecord, RunRecord, utcnow
from rootproof.service.auth import KeyRing
from rootproof.service.cancel import CancelBus
from rootproof.service.hub import LocalRun, RunHub
from rootproof.service.jobs import InProcessJobs, JobQueue, ProcrastinateJobs, RunRequest, libpq_dsn
from rootproof.service.metrics import ServiceMetrics
from rootproof.settings import Settings
from rootproof.store.sql import SqlTraceStore

if TYPE_CHECKING:
    from rootproof.driver import RunOutcome
    from rootproof.runtime import Runtime
    from rootproof.scenarios.types import Scenario
    from rootproof.targets import LoadedTargets

__all__ = ["Service", "WORKER_LOST"]

log = logging.getLogger(__name__)

WORKER_LOST = "worker lost"
"""The error of a run whose worker stopped mid-run (its job's retry closes it)."""


@dataclass(frozen=True)
class Evidence:
    """Where a run reads evidence: a built-in scenario, or the server's targets file."""

    scenario: str | None
    targets: bool


class Service:
    """Everything a service process keeps between requests."""

    def __init__(self, settings: Settings, runtime: Runtime, *, keyring: KeyRing, no_auth: bool = False) -> None:
        self.settings = settings
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
        self.replica = f"{socket.gethostname()}:{os.getpid()}"
        self.targets: LoadedTargets | None = None
        self._scenarios: dict[str, Scenario] = {}
        self._scenario_ids: set[str] | None = None
        self._scenario_lock = threading.Lock()
        self._chat_pool = ThreadPoolExecutor(max_workers=settings.chat_concurrency, thread_name_prefix="chat")
        self.cancel_bus = CancelBus(self.hub, self.store, settings.redis_url)
        self.jobs: JobQueue
        if self.store.engine.dialect.name == "postgresql":
            self.jobs = ProcrastinateJobs(
                self.execute_job,
                dsn=libpq_dsn(settings.resolved_database_url()),
                concurrency=settings.worker_concurrency,
                stalled_after_s=settings.stalled_job_timeout_s,
                worker_name=self.replica,
            )
        else:
            self.jobs = InProcessJobs(self.execute_job, settings.worker_concurrency)

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
        await asyncio.to_thread(self._warm_up)
        await self.jobs.start()
        await self.cancel_bus.start()

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
        await self.cancel_bus.stop()
        self._chat_pool.shutdown(wait=False, cancel_futures=True)

    def _close_unstarted(self, run_id: str) -> None:
        """A queued job the server will not run (shutdown): its run ends CANCELLED, with its `done`."""
        record = self.store.get_run(run_id)
        if record is None or record.status is not None:
            return
        now = utcnow()
        record.lifecycle_state = "CANCELLED"
        record.status = "CANCELLED"
        record.release_outcome = "NONE"
        record.error = "cancelled: the server shut down before the job started"
        record.ended_at = now
        record.duration_ms = 0
        self.store.save_run(record)
        events = self.store.events(run_id)
        if not any(e.type == "done" for e in events):
            seq = events[-1].seq if events else 0
            self.store.add_event(
                EventRecord(run_id=run_id, seq=seq + 1, type="done", data={"release_outcome": "NONE", "status": "CANCELLED", "duration_ms": 0, "tokens": 0})
            )

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
        self.metrics.observe_run(kind, outcome)
        return outcome

    def start_chat(self, request: RunRequest) -> LocalRun:
        """Start a chat run on this replica's chat pool; its stream follows the returned run."""
        local = self.hub.add(LocalRun(run_id=request.run_id))

        def work() -> None:
            try:
                self._diagnose(request, local)
            except Exception:  # noqa: BLE001 - the harness ends runs itself; this is a last resort
                log.exception("chat run %s failed outside the harness", request.run_id)
                self._close_failed(request)
            finally:
                local.finish()
                self.hub.remove(request.run_id)

        self._chat_pool.submit(work)
        return local

    def accept_alert(self, payload: AlertPayload, raw: dict[str, Any], *, principal: str, evidence: Evidence, source: str) -> tuple[str, bool]:
        """Record a webhook's run before it is queued: `(run_id, duplicate)`.

        A payload whose `groupKey` was seen within `alert_dedup_window_s` gives the run that
        holds the group and `duplicate` True (nothing is queued).
        """
        import hashlib

        run_id = str(uuid.uuid4())
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
            )
        )
        return run_id, False

    def refuse_alert(self, run_id: str, reason: str) -> None:
        """The queue refused a webhook's run: close it FAILED and release its group, so the
        sender's retry (it got a 503) starts a run of its own."""
        self.store.release_alert_group(run_id)
        self._close_lost(run_id, reason)

    def execute_job(self, request: RunRequest) -> None:
        """A worker's job: run the diagnosis once; on a retry after a lost worker, close the run.

        Idempotent: a run already terminal is left alone; a run an earlier attempt started (its
        executor is recorded) is closed as FAILED / `INTERNAL_ERROR` ("worker lost"), never run
        twice; a run still waiting is run now.
        """
        record = self.store.get_run(request.run_id)
        if record is None:
            log.warning("job for unknown run %s dropped", request.run_id)
            return
        if record.status is not None:
            return
        previous = self.store.executor_of(request.run_id)
        if previous is not None:
            self._close_lost(request.run_id, f"{WORKER_LOST}: {previous} stopped during the run")
            return
        self.store.set_executor(request.run_id, self.replica)
        local = self.hub.add(LocalRun(run_id=request.run_id))
        try:
            self._diagnose(request, local)
        except Exception:  # noqa: BLE001 - as for chat runs: the run must still end terminal
            log.exception("job run %s failed outside the harness", request.run_id)
            self._close_failed(request)
        finally:
            local.finish()
            self.hub.remove(request.run_id)

    def _close_failed(self, request: RunRequest) -> None:
        """Close a run that failed outside the harness (e.g. the store refused its first write),
        never raising: the failure is logged, the run left to the orphan sweep."""
        try:
            self._close_lost(request.run_id, "the run failed outside the harness", request=request)
        except Exception:  # noqa: BLE001 - the store may still be failing
            log.exception("could not close run %s", request.run_id)

    def _close_lost(self, run_id: str, reason: str, *, request: RunRequest | None = None) -> None:
        """Close a run its executor abandoned: FAILED with the INTERNAL_ERROR fallback, and the
        `content` and `done` events its stream still lacks. A run whose record was never saved
        (it failed before its first write) gets one from `request`: else it could not be read,
        and its stream would end with no event at all."""
        record = self.store.get_run(run_id)
        if record is None and request is not None:
            from rootproof.harness import _language_of
            from rootproof.limits import clip_text

            question = clip_text(redact(request.question), self.settings.input_limits().question_chars)
            record = RunRecord(
                run_id=run_id,
                session_id=request.session_id,
                question=question,
                language=_language_of(question),
                scenario_id=request.scenario,
                principal=request.principal,
            )
        if record is None or record.status is not None:
            return
        content = SafeFallbackFactory.build(FallbackType.INTERNAL_ERROR, record.language)
        now = utcnow()
        record.lifecycle_state = "FAILED"
        record.status = "FAILED"
        record.release_outcome = "FALLBACK"
        record.fallback_type = str(FallbackType.INTERNAL_ERROR)
        record.content = content
        record.error = reason
        record.ended_at = now
        record.duration_ms = int((now - record.started_at).total_seconds() * 1000)
        self.store.save_run(record)
        events = self.store.events(run_id)
        seq = events[-1].seq if events else 0
        if not any(e.type == "done" for e in events):
            if not any(e.type in ("content", "error") for e in events):
                seq += 1
                self.store.add_event(EventRecord(run_id=run_id, seq=seq, type="content", data=content))
            self.store.add_event(
                EventRecord(
                    run_id=run_id,
                    seq=seq + 1,
                    type="done",
                    data={"release_outcome": "FALLBACK", "status": "FAILED", "duration_ms": record.duration_ms, "tokens": record.tokens},
                )
            )

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
