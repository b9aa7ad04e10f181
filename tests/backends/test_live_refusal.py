"""A refusal is evidence: a server that refuses rootproof's own connection because a limit ran
out (a private redis-server at `maxclients`, a PostgreSQL role at its `CONNECTION LIMIT`) gives
the call a citable result, `refused` at `$.refused`, through the ToolBoundary as through the
backend; any other connection failure stays a failed call."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
import redis
from psycopg import sql
from psycopg.conninfo import make_conninfo

from rootproof.backends.live.postgres import PostgresBackend
from rootproof.backends.live.redis import RedisBackend
from rootproof.backends.live.refusal import refusal_answer
from rootproof.errors import BackendUnavailable
from rootproof.targets import PostgresTarget, RedisTarget
from rootproof.tools.base import InspectPostgresArgs, InspectRedisArgs
from rootproof.tools.refs import REFUSED_PATH, enumerate_ref_paths, ref_items, ref_text

from ._redis_server import client, private_redis
from .pg_support import SERVER, private_database

MAXCLIENTS = 3


def _redis(url: str) -> RedisBackend:
    return RedisBackend(RedisTarget.model_validate({"name": "cache", "kind": "redis", "url": url, "timeout_s": 2}), environ={})


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("max number of clients reached", "max number of clients reached"),
        (
            'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  sorry, too many clients already',
            "FATAL: sorry, too many clients already",
        ),
        ('FATAL:  too many connections for role "app"', 'FATAL: too many connections for role "app"'),
        ("(1040, 'Too many connections')", "(1040, 'Too many connections')"),
        ("Connection refused", None),
        ("FATAL:  password authentication failed for user \"app\"", None),
    ],
)
def test_only_a_limit_is_a_refusal(text: str, answer: str | None) -> None:
    assert refusal_answer(text) == answer


def test_a_refused_result_is_one_citable_ref_whose_text_recomputes() -> None:
    result: dict[str, Any] = {"kind": "info", "info": {}, "refused": "max number of clients reached"}
    assert enumerate_ref_paths(result) == [REFUSED_PATH]
    assert ref_items("inspect_redis", result) == [(REFUSED_PATH, "refused: max number of clients reached")]
    assert ref_text("inspect_redis", result, REFUSED_PATH) == "refused: max number of clients reached"


def test_redis_at_maxclients_answers_a_new_backend_with_its_refusal() -> None:
    with private_redis(maxclients=MAXCLIENTS) as server:
        held: list[redis.Redis] = []
        try:
            while True:
                try:
                    c = client(server, f"hold-{len(held)}")
                except redis.ConnectionError:
                    break
                try:
                    c.ping()
                except redis.ConnectionError:
                    c.close()
                    break
                held.append(c)
            assert len(held) == MAXCLIENTS
            backend = _redis(server.url)
            try:
                now = datetime.now(UTC)
                for kind, shape in (("info", "info"), ("clients", "rows"), ("config", "settings"), ("slowlog", "lines")):
                    out = backend.call("inspect_redis", InspectRedisArgs(kind=kind), now=now, run_id="t")  # type: ignore[arg-type]
                    doc = out.json()
                    assert doc["refused"] == "max number of clients reached" and "no_evidence" not in doc, doc
                    assert doc["kind"] == kind and not doc.get(shape) and out.details["refused"] is True
                    assert ref_items("inspect_redis", doc)[0] == (REFUSED_PATH, "refused: max number of clients reached")
            finally:
                backend.close()
        finally:
            for c in held:
                c.close()


def test_redis_that_is_down_is_still_a_failed_call() -> None:
    backend = _redis("redis://127.0.0.1:1/0")
    try:
        with pytest.raises(BackendUnavailable, match="unreachable"):
            backend.call("inspect_redis", InspectRedisArgs(kind="info"), now=datetime.now(UTC), run_id="t")
    finally:
        backend.close()


@pytest.fixture
def limited_role() -> Iterator[tuple[str, str]]:
    """(role, conninfo) of a login role with CONNECTION LIMIT 1 on a private database."""
    role = f"rp_limit_{secrets.token_hex(3)}"
    with private_database() as dsn:
        with psycopg.connect(SERVER, autocommit=True, connect_timeout=5) as admin:
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT 1").format(sql.Identifier(role)))
        try:
            yield role, make_conninfo(dsn, user=role)
        finally:
            with psycopg.connect(SERVER, autocommit=True, connect_timeout=5) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
                )
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_postgres_role_at_its_connection_limit_answers_with_its_refusal(limited_role: tuple[str, str]) -> None:
    role, dsn = limited_role
    with psycopg.connect(dsn, connect_timeout=5):  # the role's one connection, held
        backend = PostgresBackend(PostgresTarget(name="orders-db", kind="postgres", dsn=dsn, timeout_s=5), environ={})
        try:
            now = datetime.now(UTC)
            for kind, shape in (("activity", "rows"), ("settings", "settings"), ("locks", "rows")):
                doc = backend.call("inspect_postgres", InspectPostgresArgs(kind=kind), now=now, run_id="t").json()  # type: ignore[arg-type]
                assert doc["refused"] == f'FATAL: too many connections for role "{role}"', doc
                assert doc["kind"] == kind and not doc.get(shape) and "no_evidence" not in doc
        finally:
            backend.close()
