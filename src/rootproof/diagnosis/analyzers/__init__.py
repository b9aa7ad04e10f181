"""The analyzers, by tool: each reads one call's whole result and returns findings."""

from __future__ import annotations

from rootproof.diagnosis.analyzers.logs import log_errors
from rootproof.diagnosis.analyzers.metrics import series_changes
from rootproof.diagnosis.analyzers.nginx import nginx_errors, upstream_times
from rootproof.diagnosis.analyzers.postgres import blocking_tree, long_statements, replication_lag, sessions
from rootproof.diagnosis.analyzers.postgres_log import lock_log
from rootproof.diagnosis.analyzers.redis import redis_info
from rootproof.diagnosis.analyzers.refusal import refusal
from rootproof.diagnosis.findings import Analyzer

__all__ = ["ANALYZERS"]

ANALYZERS: dict[str, tuple[Analyzer, ...]] = {
    "inspect_redis": (refusal, redis_info),
    "inspect_postgres": (refusal, blocking_tree, sessions, long_statements, replication_lag, lock_log),
    "inspect_nginx": (nginx_errors, upstream_times),
    "query_metrics": (series_changes,),
    "query_logs": (log_errors,),
}
"""Tool name → its analyzers, in the order their findings are listed."""
