"""Real services, plain words: one targets file names PostgreSQL, two Redis, nginx and the order
service's logs, the same file for every fault; each fault is diagnosed under every question of
the shipped default wording list (questions that name no component and no mechanism).

- a row lock held in PostgreSQL (an admin console's transaction left open, sessions waiting on it);
- a Redis (`sessions`) at `maxmemory` under `noeviction`, refusing writes;
- a Redis (`cache`) at `maxclients`, refusing new clients (rootproof's own connection too);
- nginx answering 504 because the order service waits on a held PostgreSQL row lock;
- nothing wrong: no root cause.

Every server is a real process on loopback (the live environment plus a private redis-server);
the diagnosis is `rootproof diagnose --targets FILE QUESTION --json` as a user runs it. The
faults run one after the other on the same environment, each cleaned up before the next; what
one leaves in the logs' window (the order service's warnings while its orders waited on a lock)
is still there for the next, as in production.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
import yaml

from rootproof.eval.questions import load_questions
from rootproof.live import LiveConfig, LiveEnvironment
from rootproof.live.bench.faults import PgRowLock, RedisMaxclients
from tests.backends._redis_server import PrivateRedis, client, private_redis
from tests.backends.pg_support import row_lock
from tests.cli_support import run_cli
from tests.services import inherited_env

from .support import fresh_root, need_binaries, remove_root

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.xdist_group("plain-words")]

QUESTIONS = load_questions("default")


@dataclass
class World:
    env: LiveEnvironment
    sessions: PrivateRedis
    targets: Path
    home: Path


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    need_binaries(("postgres", "redis", "nginx", "order_service", "load"))
    root = fresh_root()
    try:
        with LiveEnvironment(LiveConfig(root=root, components=("postgres", "redis", "nginx", "order_service", "load"))) as env, private_redis(maxclients=32) as sessions:
            doc = yaml.safe_load(env.targets_file.read_text(encoding="utf-8"))
            doc["targets"].append({"name": "sessions", "kind": "redis", "url": sessions.url, "log": str(sessions.log), "timeout_s": 3})
            targets = root / "rootproof.targets.yaml"
            targets.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
            yield World(env=env, sessions=sessions, targets=targets, home=root / "home")
            assert env.stop().residue == []
    finally:
        remove_root(root)


def _ask_all(w: World) -> list[tuple[str, dict[str, Any]]]:
    """Every default question against the one targets file: (question, --json result)."""
    out: list[tuple[str, dict[str, Any]]] = []
    env = inherited_env() | {"ROOTPROOF_HOME": str(w.home), "PYTHONPATH": os.pathsep.join(sys.path)}
    for q in QUESTIONS:
        done = run_cli(["diagnose", "--targets", str(w.targets), q, "--json"], env=env)
        assert done.returncode == 0, (q, done.stderr[-2000:])
        out.append((q, json.loads(done.stdout)))
    return out


def _root(result: dict[str, Any]) -> tuple[str, str] | None:
    rc = ((result.get("content") or {}).get("report") or {}).get("root_cause")
    return (rc["component"], rc["mechanism"]) if rc else None


def _cited(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The citations of the root-cause claims."""
    report = result["content"]["report"]
    ids = set(report["root_cause"]["claim_ids"])
    return [c for claim in report["claims"] if claim["id"] in ids for c in claim["citations"]]


def _expect(answers: list[tuple[str, dict[str, Any]]], expected: tuple[str, str]) -> None:
    wrong = [(q, r.get("release_outcome"), _root(r), (r.get("content") or {}).get("fallback")) for q, r in answers if r.get("release_outcome") != "PUBLISHED" or _root(r) != expected]
    assert not wrong, f"expected {expected} under every question; got: {wrong}"


def test_a_healthy_setup_has_no_root_cause_under_any_question(world: World) -> None:
    """First, before any fault: the background load through nginx, nothing wrong."""
    time.sleep(1.0)
    answers = _ask_all(world)
    found = [(q, r.get("release_outcome"), _root(r)) for q, r in answers if _root(r) is not None]
    assert not found, found


def test_a_redis_refusing_writes_at_maxmemory_is_found_under_every_question(world: World) -> None:
    c = client(world.sessions)
    c.config_set("maxmemory", "3mb")
    c.config_set("maxmemory-policy", "noeviction")
    refused = 0
    try:
        for i in range(50_000):
            try:
                c.set(f"session:{i}", "x" * 512)
            except redis.exceptions.OutOfMemoryError:
                refused += 1
                if refused >= 200:
                    break
        assert refused >= 200
        answers = _ask_all(world)
    finally:
        # Left as it was found: no data, no limit, counters reset.
        c.flushall()
        c.config_set("maxmemory", "0")
        c.config_resetstat()
        c.close()
    _expect(answers, ("redis", "memory_eviction"))
    for q, r in answers:
        cited = _cited(r)
        assert any(c["excerpt"].startswith("errorstat_OOM:count=") for c in cited), (q, [c["excerpt"][:80] for c in cited])
        assert any(c["excerpt"].startswith("maxmemory:3145728") for c in cited), (q, [c["excerpt"][:80] for c in cited])
        assert "maxmemory 3145728" in r["content"]["report"]["root_cause"]["culprit"]


def test_a_held_row_lock_is_found_under_every_question(world: World) -> None:
    dsn = world.env.superuser_dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS merchant_balances (merchant_id int PRIMARY KEY, pending_cents bigint NOT NULL)")
        conn.execute("INSERT INTO merchant_balances VALUES (4471, 0), (4472, 0) ON CONFLICT DO NOTHING")
    with row_lock(dsn, waiters=2) as lock:
        time.sleep(1.5)  # the server log's "still waiting" lines (log_lock_waits, deadlock_timeout 1 s)
        answers = _ask_all(world)
    _expect(answers, ("postgresql", "row_lock_contention"))
    for q, r in answers:
        # The blocker's own record: a row whose subject (pid) is the holder, not a waiter's row.
        own = [c for c in _cited(r) if f'"pid":{lock.holder_pid},' in c["excerpt"] and '"blocking_pids":[' + str(lock.holder_pid) not in c["excerpt"]]
        assert own, (q, [c["excerpt"][:200] for c in _cited(r)])
        assert f"pid {lock.holder_pid}" in r["content"]["report"]["root_cause"]["culprit"], (q, r["content"]["report"]["root_cause"])


def test_nginx_504s_behind_a_held_row_lock_are_traced_to_the_lock_under_every_question(world: World) -> None:
    fault = PgRowLock(world.env)
    stop = threading.Event()

    def shop(sku: str) -> None:
        # Customers keep ordering the locked SKUs: each order waits on the lock (504 at nginx).
        while not stop.is_set():
            world.env.probe(timeout_s=10.0, sku=sku)

    shoppers = [threading.Thread(target=shop, args=(sku,), daemon=True) for sku in PgRowLock.skus]
    try:
        fault.inject()
        assert fault.confirm().ok  # an order of a locked SKU through nginx: 504, and a waiter blocked by the batch
        for t in shoppers:
            t.start()
        time.sleep(1.0)
        answers = _ask_all(world)
    finally:
        stop.set()
        assert all(c.ok for c in fault.cleanup())
        for t in shoppers:
            t.join(timeout=15)
    _expect(answers, ("postgresql", "row_lock_contention"))
    blocker = fault.facts["blocker_pid"]
    for q, r in answers:
        report = r["content"]["report"]
        assert f"pid {blocker}" in report["root_cause"]["culprit"], (q, report["root_cause"])
        # The chain names nginx: its 504s are explained by the lock.
        chain = [c for c in report["claims"] if "nginx" in c["text"] and c["kind"] != "root_cause"]
        assert chain and any(cit["tool_name"] == "inspect_nginx" for c in chain for cit in c["citations"]), (q, [c["text"][:120] for c in report["claims"]])




def test_a_redis_refusing_clients_at_maxclients_is_found_under_every_question(world: World) -> None:
    fault = RedisMaxclients(world.env)
    try:
        fault.inject()
        assert fault.confirm().ok
        answers = _ask_all(world)
    finally:
        assert all(c.ok for c in fault.cleanup())
    _expect(answers, ("redis", "max_clients_reached"))
    for q, r in answers:
        excerpts = " ".join(c["excerpt"] for c in _cited(r))
        assert "max number of clients reached" in excerpts, (q, excerpts[:1000])
        assert f"maxclients {fault.facts['maxclients']}" in r["content"]["report"]["root_cause"]["culprit"] or "max number of clients reached" in r["content"]["report"]["root_cause"]["culprit"]
