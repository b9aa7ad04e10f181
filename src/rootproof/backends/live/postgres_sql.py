"""What the PostgreSQL backend reads: its SELECT statements, the settings subset, and how values
become plain JSON.

Every statement is a parameterised SELECT with a LIMIT, over the statistics views and
functions (pg_stat_activity, pg_locks, pg_blocking_pids, pg_settings, pg_stat_database,
pg_stat_replication / pg_stat_wal_receiver, pg_stat_statements). Column names are
PostgreSQL's own; the few derived columns end in `_s` (seconds) or `_bytes`, and the load
breakdowns (`LOAD_BY`) use Performance Insights' names (`name`, `type`, `id`, `db_load_avg`)
so that one card reads a provider's rows and ours. Written for PostgreSQL 14 and later
(`pg_locks.waitstart`, `pg_stat_activity.query_id`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import math
from decimal import Decimal
from typing import Any
from uuid import UUID

from rootproof.scenarios.types import format_timestamp

__all__ = [
    "ACTIVITY",
    "CHECK_SQL",
    "DATABASE_STATS",
    "LOAD_BY",
    "LOCKS",
    "LOG_SQL",
    "MAX_QUERY_CHARS",
    "MAX_ROWS",
    "OWN_SETTINGS",
    "REPLICATION_PRIMARY",
    "REPLICATION_STANDBY",
    "SESSION_SQL",
    "SETTINGS",
    "SETTINGS_SQL",
    "STATEMENT_TIMEOUT_BOOT",
    "STATEMENT_TIMEOUT_DB",
    "STATEMENT_TIMEOUT_FILE",
    "TOP_QUERIES",
    "check_warnings",
    "plain",
    "plain_row",
]

MAX_ROWS = 1000
"""Most rows one statement returns (the query's terms then filter these)."""
MAX_QUERY_CHARS = 4000
"""Query texts are cut to this many characters."""

SETTINGS: tuple[str, ...] = (
    "server_version",
    "max_connections",
    "superuser_reserved_connections",
    "shared_buffers",
    "work_mem",
    "maintenance_work_mem",
    "effective_cache_size",
    "random_page_cost",
    "statement_timeout",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
    "idle_session_timeout",
    "deadlock_timeout",
    "log_lock_waits",
    "log_min_duration_statement",
    "log_statement",
    "log_temp_files",
    "log_recovery_conflict_waits",
    "temp_file_limit",
    "max_locks_per_transaction",
    "max_wal_size",
    "min_wal_size",
    "checkpoint_timeout",
    "wal_level",
    "synchronous_commit",
    "synchronous_standby_names",
    "max_wal_senders",
    "max_replication_slots",
    "hot_standby",
    "hot_standby_feedback",
    "max_standby_streaming_delay",
    "max_standby_archive_delay",
    "archive_mode",
    "autovacuum",
    "autovacuum_max_workers",
    "autovacuum_naptime",
    "track_activity_query_size",
    "shared_preload_libraries",
    "logging_collector",
    "log_destination",
    "log_line_prefix",
    "log_timezone",
    "auto_explain.log_min_duration",
    "pg_stat_statements.max",
    "pg_stat_statements.track",
)
"""The settings `kind=settings` reads, in this order, values as `SHOW` prints them (with units).
Never settings that can hold secrets (primary_conninfo, archive_command, restore_command)."""

SESSION_SQL = """
SELECT current_setting('transaction_read_only') AS ro, current_setting('default_transaction_read_only') AS dro,
       (SELECT setting FROM pg_settings WHERE name = 'statement_timeout') AS st,
       (SELECT reset_val FROM pg_settings WHERE name = 'statement_timeout') AS st0, current_setting('log_timezone') AS tz
"""
"""Run first in every transaction, after `SET LOCAL statement_timeout`: the transaction must be
read-only (`ro`) with the timeout in ms (`st`); `dro` and `st0` (the session's own value) show
whether the startup options took effect (a pooler may drop them)."""

LOG_SQL = """
SELECT pg_current_logfile() AS f, current_setting('data_directory') AS d, current_setting('log_directory') AS ld
"""
"""The server's current log file and where its log files live (`log_directory` may be relative)."""

CHECK_SQL = """
SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements') AS ext,
       current_setting('shared_preload_libraries') AS spl, current_database() AS db,
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS su,
       pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER') AS stats, current_user AS me
"""
"""`targets check`: pg_stat_statements installed and preloaded, and may this role see other sessions."""

SETTINGS_SQL = """
SELECT s.name, current_setting(s.name) AS value
FROM pg_settings s
WHERE s.name = ANY(%(names)s)
ORDER BY array_position(%(names)s, s.name::text)
LIMIT %(cap)s
"""

OWN_SETTINGS = ("statement_timeout",)
"""Settings rootproof's session sets for itself: `kind=settings` shows the database's or
server's value instead (`STATEMENT_TIMEOUT_*`), never the session's own."""

STATEMENT_TIMEOUT_DB = """
SELECT substring(c FROM position('=' IN c) + 1) AS value
FROM pg_db_role_setting s, unnest(s.setconfig) AS c
WHERE s.setrole = 0 AND s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND split_part(c, '=', 1) = 'statement_timeout'
LIMIT 1
"""
STATEMENT_TIMEOUT_FILE = """
SELECT setting AS value FROM pg_file_settings
WHERE name = 'statement_timeout' AND applied ORDER BY seqno DESC LIMIT 1
"""
STATEMENT_TIMEOUT_BOOT = "SELECT boot_val AS value FROM pg_settings WHERE name = 'statement_timeout' LIMIT 1"

_AGE = "round(EXTRACT(EPOCH FROM (clock_timestamp() - {col}))::numeric, 3)"

AUXILIARY = (
    "checkpointer",
    "background writer",
    "walwriter",
    "autovacuum launcher",
    "logical replication launcher",
    "archiver",
    "startup",
    "walreceiver",
    "walsummarizer",
    "io worker",
)
"""The server's own processes (`backend_type`), left out of `kind=activity`: they run no client's
statement, hold no row lock and use no connection slot, and their five rows on an idle server
took half of what the agent reads of one call (autovacuum workers, walsenders and parallel
workers stay: they do)."""

ACTIVITY = f"""
SELECT a.pid, a.usename, a.datname, a.application_name, host(a.client_addr) AS client_addr,
       a.state, a.wait_event_type, a.wait_event, a.backend_type,
       left(a.query, %(qmax)s) AS query,
       a.xact_start, a.query_start, a.state_change, a.backend_start,
       {_AGE.format(col="a.xact_start")} AS xact_age_s,
       {_AGE.format(col="a.query_start")} AS query_age_s,
       {_AGE.format(col="a.state_change")} AS state_age_s,
       {_AGE.format(col="a.backend_start")} AS backend_age_s
FROM pg_stat_activity a
WHERE a.pid <> pg_backend_pid()
  AND a.backend_type NOT IN ({", ".join(f"'{t}'" for t in AUXILIARY)})
  AND (%(db)s::text IS NULL OR a.datname = %(db)s)
ORDER BY (a.backend_type = 'client backend') DESC,
         CASE a.state WHEN 'idle in transaction' THEN 0 WHEN 'idle in transaction (aborted)' THEN 0
                      WHEN 'active' THEN 1 WHEN 'idle' THEN 2 ELSE 3 END,
         a.xact_start NULLS LAST, a.backend_start, a.pid
LIMIT %(cap)s
"""
"""Every session of the target's database (`db`; NULL: of every database) but rootproof's own
and the server's auxiliary processes: client backends first, open transactions first."""

_SAME_OBJECT = " AND ".join(
    f"g.{c} IS NOT DISTINCT FROM w.{c}"
    for c in ("locktype", "database", "relation", "page", "tuple", "virtualxid", "transactionid", "classid", "objid", "objsubid")
)

LOCKS = f"""
WITH waiting AS (
    SELECT l.*, pg_blocking_pids(l.pid) AS blocking_pids
    FROM pg_locks l
    WHERE NOT l.granted AND l.pid IS NOT NULL AND l.pid <> pg_backend_pid()
      AND (%(db)s::text IS NULL OR EXISTS (SELECT 1 FROM pg_stat_activity s WHERE s.pid = l.pid AND s.datname = %(db)s))
    ORDER BY l.waitstart NULLS LAST, l.pid
    LIMIT %(cap)s
), held AS (
    SELECT g.*, pg_blocking_pids(g.pid) AS blocking_pids
    FROM pg_locks g
    WHERE g.granted AND EXISTS (SELECT 1 FROM waiting w WHERE g.pid = ANY (w.blocking_pids) AND {_SAME_OBJECT})
), picked AS (
    SELECT 0 AS k, * FROM waiting UNION ALL SELECT 1 AS k, * FROM held
)
SELECT r.locktype, r.database::text AS database, r.relation::text AS relation,
       CASE WHEN r.relation IS NOT NULL
             AND r.database = (SELECT oid FROM pg_database WHERE datname = current_database())
            THEN r.relation::regclass::text END AS relname,
       r.page, r.tuple, r.virtualxid, r.transactionid::text AS transactionid,
       r.classid::text AS classid, r.objid::text AS objid, r.objsubid,
       r.virtualtransaction, r.pid, r.mode, r.granted, r.fastpath, r.waitstart, r.blocking_pids,
       a.usename, a.datname, a.application_name, host(a.client_addr) AS client_addr, a.state,
       a.wait_event_type, a.wait_event, left(a.query, %(qmax)s) AS query,
       a.xact_start, a.state_change, {_AGE.format(col="a.xact_start")} AS xact_age_s
FROM picked r LEFT JOIN pg_stat_activity a ON a.pid = r.pid
ORDER BY r.k, r.waitstart NULLS LAST, r.pid, r.locktype, r.mode
LIMIT %(cap)s
"""
"""Locks waited on by sessions of the target's database (`db`; NULL: of every database), with
`pg_blocking_pids`, then the granted locks of their blockers on the same lock object, each with
its session's user, state and query."""

DATABASE_STATS = """
SELECT d.datname, d.numbackends, b.datconnlimit, d.xact_commit, d.xact_rollback,
       d.blks_read, d.blks_hit, d.tup_returned, d.tup_fetched, d.tup_inserted, d.tup_updated,
       d.tup_deleted, d.conflicts, d.temp_files, d.temp_bytes, d.deadlocks, d.stats_reset
FROM pg_stat_database d JOIN pg_database b ON b.oid = d.datid
WHERE NOT b.datistemplate AND b.datallowconn
ORDER BY d.numbackends DESC, d.datname
LIMIT %(cap)s
"""

REPLICATION_PRIMARY = """
SELECT r.pid, r.usesysid, r.usename, r.application_name, host(r.client_addr) AS client_addr,
       r.state, r.sent_lsn::text AS sent_lsn, r.write_lsn::text AS write_lsn,
       r.flush_lsn::text AS flush_lsn, r.replay_lsn::text AS replay_lsn,
       r.write_lag, r.flush_lag, r.replay_lag, r.sync_state, r.sync_priority,
       r.backend_start, r.reply_time,
       pg_wal_lsn_diff(pg_current_wal_lsn(), r.sent_lsn) AS sent_lag_bytes,
       pg_wal_lsn_diff(pg_current_wal_lsn(), r.replay_lsn) AS replay_lag_bytes
FROM pg_stat_replication r
ORDER BY r.application_name, r.pid
LIMIT %(cap)s
"""
"""On a primary: one row per standby; `*_lag` in seconds, `*_lag_bytes` behind the current WAL."""

REPLICATION_STANDBY = """
SELECT w.pid, 'standby' AS server_role, w.status AS state, w.sender_host, w.sender_port,
       w.slot_name, w.written_lsn::text AS write_lsn, w.flushed_lsn::text AS flush_lsn,
       pg_last_wal_replay_lsn()::text AS replay_lsn, w.latest_end_lsn::text AS latest_end_lsn,
       w.last_msg_send_time, w.last_msg_receipt_time, w.latest_end_time,
       pg_last_xact_replay_timestamp() AS last_replay_timestamp,
       EXTRACT(EPOCH FROM (clock_timestamp() - pg_last_xact_replay_timestamp())) AS replay_lag,
       pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()) AS replay_lag_bytes
FROM (SELECT 1) AS one LEFT JOIN pg_stat_wal_receiver w ON true
LIMIT %(cap)s
"""
"""On a standby: its WAL receiver; `replay_lag` is the age of the last replayed transaction
(it grows while the primary is idle too)."""

TOP_QUERIES = """
SELECT s.queryid::text AS queryid, left(s.query, %(qmax)s) AS query, s.calls,
       round(s.total_exec_time::numeric, 3) AS total_exec_time,
       round(s.mean_exec_time::numeric, 3) AS mean_exec_time,
       round(s.max_exec_time::numeric, 3) AS max_exec_time,
       s.rows, s.shared_blks_hit, s.shared_blks_read, s.shared_blks_dirtied, s.shared_blks_written,
       s.temp_blks_read, s.temp_blks_written, r.rolname AS usename, d.datname,
       (SELECT a.wait_event_type || ':' || a.wait_event FROM pg_stat_activity a
         WHERE a.query_id = s.queryid AND a.state = 'active' AND a.wait_event IS NOT NULL
         LIMIT 1) AS wait_event
FROM {schema}.pg_stat_statements s
LEFT JOIN pg_roles r ON r.oid = s.userid
LEFT JOIN pg_database d ON d.oid = s.dbid
ORDER BY s.total_exec_time DESC
LIMIT %(cap)s
"""
"""pg_stat_statements by total time; `wait_event` is what a session running it now waits on."""


_LOADED = """
FROM pg_stat_activity a
WHERE a.pid <> pg_backend_pid() AND a.state IS NOT NULL AND a.state <> 'idle'
"""
# Sessions that make up the load now: every non-idle session but rootproof's own, server-wide
# (`state` is NULL for background processes without a session, and for other users' sessions
# when the role may not see them).

LOAD_BY: dict[str, str] = {
    "wait_events": f"""
SELECT CASE WHEN a.wait_event IS NULL THEN 'CPU' ELSE a.wait_event_type || ':' || a.wait_event END AS name,
       CASE WHEN a.wait_event IS NULL THEN 'CPU' ELSE a.wait_event_type END AS type,
       count(*) AS db_load_avg
{_LOADED}
GROUP BY 1, 2
ORDER BY db_load_avg DESC, name
LIMIT %(cap)s
""",
    "load_by_user": f"""
SELECT coalesce(a.usename::text, a.backend_type) AS name, count(*) AS db_load_avg
{_LOADED}
GROUP BY 1
ORDER BY db_load_avg DESC, name
LIMIT %(cap)s
""",
    "load_by_host": f"""
SELECT coalesce(host(a.client_addr), CASE WHEN a.client_port = -1 THEN 'local' ELSE a.backend_type END) AS id,
       count(*) AS db_load_avg
{_LOADED}
GROUP BY 1
ORDER BY db_load_avg DESC, id
LIMIT %(cap)s
""",
}
"""Database load now, as Performance Insights breaks it down: the number of non-idle sessions
(active, idle in transaction, …) at the moment of the call, by `wait_event_type:wait_event`
(`CPU` for a session waiting on nothing), by user (a background worker by its backend_type) and
by client host (`local` for a Unix socket). `db_load_avg` is an instant sample, not an average
over time; most load first."""


def plain(value: Any) -> Any:
    """A driver value as plain JSON: timestamps as ISO UTC ms Z, intervals in seconds, numbers."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() and abs(value) < 2**63 else float(value)
    if isinstance(value, dt.datetime):
        return format_timestamp(value if value.tzinfo else value.replace(tzinfo=dt.UTC))
    if isinstance(value, dt.timedelta):
        return round(value.total_seconds(), 6)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address | ipaddress.IPv4Network | ipaddress.IPv6Network | UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


def plain_row(row: dict[str, Any]) -> dict[str, Any]:
    """A result row with every value made plain (`plain`)."""
    return {str(k): plain(v) for k, v in row.items()}


def check_warnings(row: dict[str, Any]) -> list[str]:
    """`targets check` warnings from a `CHECK_SQL` row: pg_stat_statements, and the role's view of other sessions."""
    warnings: list[str] = []
    if not row.get("ext"):
        warnings.append(f"pg_stat_statements is not installed in database {row.get('db')}: kind=top_queries finds nothing")
    elif "pg_stat_statements" not in str(row.get("spl") or ""):
        warnings.append("pg_stat_statements is not in shared_preload_libraries: kind=top_queries finds nothing")
    if not row.get("su") and not row.get("stats"):
        warnings.append(
            f"role {row.get('me')} is neither superuser nor a member of pg_read_all_stats: other sessions' queries are hidden"
        )
    return warnings
