"""Prometheus metrics of one service process (`GET /metrics`), on a registry of its own.

prometheus-client stays inside this module. Each process (each uvicorn worker, each replica)
counts its own runs; Prometheus adds them up across the targets it scrapes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

if TYPE_CHECKING:
    from rootproof.driver import RunOutcome
    from rootproof.run.records import RunRecord

__all__ = ["CONTENT_TYPE", "ServiceMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class ServiceMetrics:
    """Runs by outcome, tool calls by status, guard verdicts, latencies."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.runs = Counter(
            "rootproof_runs",
            "Runs that reached a terminal state, counted by the replica that closed them",
            ["kind", "status", "release_outcome", "fallback_type"],
            registry=r,
        )
        self.tool_calls = Counter("rootproof_tool_calls", "Tool calls through the ToolBoundary", ["tool", "status"], registry=r)
        self.guard_verdicts = Counter("rootproof_guard_verdicts", "Guard verdicts on drafts", ["guard", "verdict"], registry=r)
        self.run_seconds = Histogram("rootproof_run_duration_seconds", "Run duration", ["kind"], buckets=_SECONDS, registry=r)
        self.first_event_seconds = Histogram(
            "rootproof_time_to_first_event_seconds", "From a chat request to its first event", buckets=_SECONDS, registry=r
        )
        self.running = Gauge("rootproof_runs_in_progress", "Runs executing in this process", ["kind"], registry=r)
        self.webhooks = Counter("rootproof_alert_webhooks", "Alert webhook posts", ["source", "result"], registry=r)
        self.jobs = Gauge("rootproof_jobs", "Jobs in the queue by status (the whole queue, as this replica last read it)", ["status"], registry=r)
        self.job_wait_seconds = Histogram("rootproof_job_wait_seconds", "From a job queued to a worker taking it", buckets=_SECONDS, registry=r)
        self.job_retries = Counter("rootproof_job_retries", "Jobs retried after their worker was lost, and alert runs retried", registry=r)
        self.stalled_workers = Gauge("rootproof_stalled_workers", "Replicas whose heartbeat is older than ROOTPROOF_REPLICA_TIMEOUT_S", registry=r)
        self.alert_to_delivery = Histogram(
            "rootproof_alert_to_delivery_seconds",
            "From an alert webhook received to the first 2xx of a receiver (with no receiver: to the run's done)",
            buckets=_SECONDS,
            registry=r,
        )
        self.notifications = Counter("rootproof_notifications", "Notification attempts by receiver name and result", ["receiver", "result"], registry=r)

    def count_closed(self, kind: str, record: RunRecord) -> None:
        """Count a run closed outside the harness (worker lost, swept, shut down before it ran)."""
        self.runs.labels(kind, record.status or "", record.release_outcome or "", record.fallback_type or "").inc()

    def observe_run(self, kind: str, outcome: RunOutcome) -> None:
        """Count a finished run, its tool calls and its guard verdicts."""
        self.runs.labels(kind, outcome.status, outcome.release_outcome, outcome.fallback_type or "").inc()
        self.run_seconds.labels(kind).observe(outcome.duration_ms / 1000)
        for call in outcome.outcomes:
            self.tool_calls.labels(call.invocation.tool_name, str(call.invocation.status)).inc()
        if outcome.evidence is not None:
            self.guard_verdicts.labels("evidence_guard", "PASS" if outcome.evidence.passed else "FAIL").inc()
        if outcome.semantic is not None:
            verdict = "UNAVAILABLE" if not outcome.semantic.available else ("SUPPORTED" if outcome.semantic.supported else "UNSUPPORTED")
            self.guard_verdicts.labels("semantic_guard", verdict).inc()

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
