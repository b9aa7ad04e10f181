"""A refusal is evidence: a server that refuses rootproof's own connection because a limit ran
out (a private redis-server at `maxclients`, a PostgreSQL role at its `CONNECTION LIMIT`) gives
the call a citable result, `refused` at `$.refused`, through the ToolBoundary as through the
backend; any other connection failure stays a failed call."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
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
from rootproof.eval.questions import load_questions
from rootproof.targets import PostgresTarget, RedisTarget
from rootproof.tools.base import InspectPostgresArgs, InspectRedisArgs
from rootproof.tools.refs import REFUSED_PATH, enumerate_ref_paths, ref_items, ref_text
from tests.cli_support import run_cli
from tests.services import inherited_env

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


def _session_log(path: Path, now: datetime) -> Path:
    """The session service's log: a login that worked, then Redis refusing its new connections."""
    lines = [
        {"ts": (now - timedelta(minutes=9)).isoformat(), "level": "INFO", "service": "session-service", "message": "POST /login 200 12ms user=u-1830"},
    ]
    for i in range(6):
        lines.append(
            {
                "ts": (now - timedelta(minutes=5 - i * 0.5)).isoformat(),
                "level": "ERROR",
                "service": "session-service",
                "message": f"POST /login 500 user=u-{2000 + i}: redis.exceptions.ConnectionError: max number of clients reached",
            }
        )
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


# Every default question is asked of a Redis at maxclients in tests/live/test_plain_words.py (the
# live environment's order service in front of it); here, a Redis alone behind one session log.
@pytest.mark.parametrize(
    "question",
    ["Login sessions keep failing since a few minutes. What is going on?", "用户登录一直失败，帮忙看下怎么回事", load_questions("default")[0], load_questions("default")[-1]],
)
def test_a_redis_refusing_every_new_client_is_diagnosed_from_its_refusal(tmp_path: Path, question: str) -> None:
    with private_redis(maxclients=MAXCLIENTS) as server:
        held: list[redis.Redis] = []
        try:
            while len(held) < MAXCLIENTS:
                c = client(server, f"hold-{len(held)}")
                c.ping()
                held.append(c)
            log = _session_log(tmp_path / "session.jsonl", datetime.now(UTC))
            targets = tmp_path / "rootproof.targets.yaml"
            targets.write_text(
                "targets:\n"
                f"  - {{name: cache, kind: redis, url: {json.dumps(server.url)}, timeout_s: 2}}\n"
                f"  - {{name: sessions, kind: logs, paths: [{json.dumps(str(log))}], format: jsonl, service: session-service}}\n",
                encoding="utf-8",
            )
            home = tmp_path / "home"
            out = run_cli(["diagnose", "--targets", str(targets), question, "--json"], env=inherited_env() | {"ROOTPROOF_HOME": str(home)})
            assert out.returncode == 0, out.stderr
            result = json.loads(out.stdout)
            trace_out = run_cli(["trace", result["run_id"], "--json"], env=inherited_env() | {"ROOTPROOF_HOME": str(home)})
            trace = json.loads(trace_out.stdout)
        finally:
            for c in held:
                c.close()
    assert result["release_outcome"] == "PUBLISHED", (result, out.stderr)
    report = result["content"]["report"]
    assert (report["root_cause"]["component"], report["root_cause"]["mechanism"]) == ("redis", "max_clients_reached")
    invocations = {i["invocation_id"]: i for i in trace["invocations"]}
    cited = [c for claim in report["claims"] if claim["id"] in report["root_cause"]["claim_ids"] for c in claim["citations"]]
    refusals = [c for c in cited if invocations[c["invocation_id"]]["tool_name"] == "inspect_redis" and c["raw_path"] == REFUSED_PATH]
    assert refusals and "max number of clients reached" in refusals[0]["excerpt"], cited
