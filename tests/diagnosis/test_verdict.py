"""The evidence-first verdict on small snapshot folders, through `rootproof diagnose` as a user
runs it: a proxy's 504s yield to the GC pauses of the upstream they point at (the symptom is
reported as explained); a scary server warning that explains nothing seen is no root cause; a
Redis refusing writes at maxmemory is found under a question that names nothing; the root
blocker of a lock queue is the culprit, cited by its own row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.cli_support import run_cli
from tests.services import inherited_env

NOW = "2026-05-05T10:30:00Z"


def _log(ts: str, service: str, level: str, message: str, source: str = "app.log", scope: str = "APPLICATION") -> dict[str, Any]:
    return {"ts": f"2026-05-05T{ts}Z", "service": service, "scope": scope, "level": level, "source": source, "message": message}


def _scenario(root: Path, name: str, question: str, tools: list[str], responses: dict[str, Any]) -> Path:
    folder = root / name
    (folder / "snapshot").mkdir(parents=True)
    scenario = {"id": name, "title": name, "language": "en", "question": question, "now": NOW, "allowed_tools": ["lookup_knowledge", *tools]}
    (folder / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False), encoding="utf-8")
    (folder / "snapshot" / "tool_responses.yaml").write_text(yaml.safe_dump({"data_source": "snapshot", **responses}, sort_keys=False), encoding="utf-8")
    return folder


def _diagnose(folder: Path, home: Path) -> dict[str, Any]:
    done = run_cli(["diagnose", "--scenario", str(folder), "--json"], env=inherited_env() | {"ROOTPROOF_HOME": str(home)})
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _root(result: dict[str, Any]) -> tuple[str, str] | None:
    rc = ((result.get("content") or {}).get("report") or {}).get("root_cause")
    return (rc["component"], rc["mechanism"]) if rc else None


def test_a_proxys_504s_yield_to_the_gc_pauses_of_its_upstream(tmp_path: Path) -> None:
    upstream = "10.0.4.7:8080"
    nginx_lines = [
        f'2026/05/05 10:{m:02d}:{s:02d} [error] 311#311: *{900 + m} upstream timed out (110: Connection timed out) while reading response header from upstream, client: 198.51.100.{m}, server: shop, request: "POST /checkout HTTP/1.1", upstream: "http://{upstream}/checkout", host: "shop.example"'
        for m, s in ((12, 4), (14, 31), (17, 9), (21, 44), (26, 2))
    ]
    logs = [_log(f"10:{m:02d}:00.000", "checkout-service", "INFO", "POST /checkout 201 in 180 ms") for m in (1, 3, 5)]
    logs += [
        _log(f"10:{m:02d}:{s:02d}.000", "checkout-service", "WARN", f"[gc] GC({4100 + m}) Pause Full (G1 Compaction Pause) 4095M->4071M(4096M) {ms}.118ms", source="gc.log")
        for m, s, ms in ((12, 1, 7391), (14, 28, 6904), (17, 5, 7702), (21, 40, 7120), (25, 58, 7433))
    ]
    logs += [_log(f"10:{m:02d}:10.000", "checkout-service", "ERROR", "POST /checkout failed: client closed the connection after 5000 ms") for m in (12, 17, 26)]
    folder = _scenario(
        tmp_path,
        "edge-504-gc",
        "Since about 10:10 many checkout requests come back with an error and the rest are very slow. Why?",
        ["query_logs", "inspect_nginx"],
        {"logs": logs, "nginx": {"error_log": nginx_lines, "access_log": [], "config": "proxy_read_timeout 5s;\n"}},
    )
    result = _diagnose(folder, tmp_path / "home")
    assert result["release_outcome"] == "PUBLISHED", result
    assert _root(result) == ("jvm", "gc_pause")
    hyps = {(h["component"], h["mechanism"]): h["status"] for h in result["content"]["report"]["hypotheses"]}
    assert hyps.get(("nginx", "upstream_timeout")) == "explained", hyps


def test_a_scary_warning_that_explains_nothing_seen_is_no_root_cause(tmp_path: Path) -> None:
    logs = [_log(f"10:{m:02d}:00.000", "orders-api", "INFO", f"GET /orders/{m} 200 in 21 ms") for m in range(1, 29, 3)]
    logs += [
        _log(f"10:{m:02d}:00.000", "orders-db", "WARN", 'WARNING:  database "orders" must be vacuumed within 1499000000 transactions', source="postgresql.log", scope="DATABASE")
        for m in (4, 14, 24)
    ]
    logs += [
        _log(f"10:{m:02d}:30.000", "orders-db", "WARN", "LOG:  automatic aggressive vacuum to prevent wraparound of table \"orders.public.events\"", source="postgresql.log", scope="DATABASE")
        for m in (5, 15, 25)
    ]
    folder = _scenario(tmp_path, "quiet-scary", "Someone pasted a scary log line in the channel. Is anything actually wrong right now?", ["query_logs"], {"logs": logs})
    result = _diagnose(folder, tmp_path / "home")
    assert _root(result) is None, result.get("content")


def test_a_redis_refusing_writes_is_found_from_its_state_under_a_plain_question(tmp_path: Path) -> None:
    info = {
        "server": {"redis_version": "7.0.15", "uptime_in_seconds": 86400},
        "clients": {"connected_clients": 12, "maxclients": 10000, "blocked_clients": 0},
        "memory": {"used_memory": 1073812480, "maxmemory": 1073741824, "maxmemory_policy": "noeviction"},
        "stats": {"evicted_keys": 0, "rejected_connections": 0, "total_error_replies": 2964},
        "errorstats": {"errorstat_OOM": "count=2964"},
    }
    logs = [_log(f"10:{m:02d}:00.000", "cart-service", "ERROR", "add to cart failed: session store write failed") for m in (12, 15, 19, 24)]
    folder = _scenario(
        tmp_path,
        "redis-full",
        "Something is wrong in production, please investigate.",
        ["query_logs", "inspect_redis"],
        {"logs": logs, "redis": {"info": info, "config": {"maxmemory": "1073741824", "maxmemory-policy": "noeviction"}}},
    )
    result = _diagnose(folder, tmp_path / "home")
    assert _root(result) == ("redis", "memory_eviction"), result.get("content")
    report = result["content"]["report"]
    assert "maxmemory 1073741824" in report["root_cause"]["culprit"]
    cited = [c["excerpt"] for claim in report["claims"] if claim["id"] in report["root_cause"]["claim_ids"] for c in claim["citations"]]
    assert "errorstat_OOM:count=2964" in cited and "maxmemory:1073741824" in cited, cited


def _shared_server(deadlock_db: str, deadlock_user: str, client: str) -> dict[str, Any]:
    """One PostgreSQL server: `orders` (orders-api's sessions) and `billing`; a deadlock storm in
    `deadlock_db` (its server log lines and `client`'s errors), orders-api's requests failing
    on pool timeouts."""
    server_log: list[str] = []
    for m, pid in ((11, 61356), (14, 61402), (17, 61488), (21, 61530), (25, 61577)):
        stamp = f"2026-05-05 10:{m:02d}:12.400 UTC [{pid}] {deadlock_user}@{deadlock_db}"
        server_log += [
            f"{stamp} LOG:  process {pid} detected deadlock while waiting for ShareLock on transaction {77120400 + m} after 1000.114 ms",
            f"{stamp} ERROR:  deadlock detected",
            f"{stamp} DETAIL:  Process {pid} waits for ShareLock on transaction {77120400 + m}; blocked by process {pid - 170}.",
        ]
    logs = [_log(f"10:{m:02d}:00.000", "orders-api", "INFO", f"GET /api/orders/{m} 200 in 35 ms") for m in range(1, 10, 2)]
    logs += [
        _log(f"10:{m:02d}:13.000", client, "ERROR", f"step failed for invoice {414600 + m}: psycopg.errors.DeadlockDetected: deadlock detected; will retry (attempt 1/5)")
        for m in (11, 14, 17, 21, 25)
    ]
    logs += [
        _log(f"10:{m:02d}:40.000", "orders-api", "ERROR", "POST /api/orders failed after 10.01s: psycopg_pool.PoolTimeout: couldn't get a connection after 10.00 sec")
        for m in (12, 16, 20, 24, 27)
    ]
    activity = [
        {"pid": 44811 + i, "datname": "orders", "usename": "orders_api", "application_name": "orders-api", "client_addr": f"10.50.3.{11 + i}", "state": "active",
         "wait_event_type": "IO", "wait_event": "DataFileRead", "xact_start": "2026-05-05T10:29:50+00:00", "query_start": "2026-05-05T10:29:50+00:00",
         "query": "SELECT id, status FROM orders WHERE customer_email = $1 ORDER BY created_at DESC LIMIT 50"}
        for i in range(4)
    ]
    activity.append(
        {"pid": 61600, "datname": deadlock_db, "usename": deadlock_user, "application_name": client, "client_addr": "10.50.9.4", "state": "idle",
         "wait_event_type": "Client", "wait_event": "ClientRead", "xact_start": None, "query_start": "2026-05-05T10:29:58+00:00", "query": "COMMIT"}
    )
    return {"logs": logs, "postgres": {"activity": activity, "log": server_log, "locks": []}}


def test_a_neighbour_databases_deadlocks_are_no_cause_of_anothers_timeouts(tmp_path: Path) -> None:
    """The deadlocks are in `billing` (billing-dunning's); orders-api, whose sessions are all on
    `orders`, times out: the deadlocks do not reach it and are not published as its root cause."""
    folder = _scenario(
        tmp_path,
        "shared-server-neighbour",
        "Since about 10:10 placing an order is very slow and sometimes fails. What is going on?",
        ["query_logs", "inspect_postgres"],
        _shared_server("billing", "billing_svc", "billing-dunning"),
    )
    result = _diagnose(folder, tmp_path / "home")
    assert _root(result) != ("postgresql", "deadlock"), result["content"]
    limitations = " ".join((result["content"].get("report") or result["content"].get("fallback") or {}).get("limitations") or [])
    assert "database billing" in limitations and "orders-api" in limitations, limitations


def test_a_deadlock_storm_in_the_services_own_database_is_its_root_cause(tmp_path: Path) -> None:
    """The same storm in orders-api's own database (`orders`, its own errors) is the cause."""
    folder = _scenario(
        tmp_path,
        "shared-server-own",
        "Since about 10:10 placing an order is very slow and sometimes fails. What is going on?",
        ["query_logs", "inspect_postgres"],
        _shared_server("orders", "orders_api", "orders-api"),
    )
    result = _diagnose(folder, tmp_path / "home")
    assert result["release_outcome"] == "PUBLISHED" and _root(result) == ("postgresql", "deadlock"), result["content"]
