"""Shared fixtures.

Database servers (trace store tests): `pg_url` and `mysql_url` create a fresh, uniquely named
database on the local PostgreSQL / MariaDB server for the test session and drop it afterwards.
They skip when the server is unreachable, or fail when `ROOTPROOF_REQUIRE_SERVICES=1`.
Servers: `ROOTPROOF_TEST_PG_URL` (default `postgresql+psycopg://postgres@127.0.0.1:5432/test`)
and `ROOTPROOF_TEST_MYSQL_URL` (default `mysql+pymysql://root@127.0.0.1:3306/test`).
`redis_url` is the local Redis server (`redis://127.0.0.1:6379/0`), checked once; its tests keep
to keys under a prefix of their own and delete them (the server is shared).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_MYSQL_URL = "mysql+pymysql://root@127.0.0.1:3306/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def _services_required() -> bool:
    return os.environ.get("ROOTPROOF_REQUIRE_SERVICES", "") == "1"


def _unavailable(what: str) -> NoReturn:
    if _services_required():
        pytest.fail(
            f"{what} (ROOTPROOF_REQUIRE_SERVICES=1: start the server or unset the variable)", pytrace=False
        )
    pytest.skip(what)


def _fresh_database(env_var: str, default: str, create: str, drop: str) -> Iterator[str]:
    """Create `rootproof_test_<random>` on the server named by `env_var`, yield its URL, drop it."""
    server = make_url(os.environ.get(env_var, default))
    shown = server.render_as_string(hide_password=True)
    name = f"rootproof_test_{secrets.token_hex(4)}"
    connect_args = {"connect_timeout": 5}
    try:
        admin = sa.create_engine(server, isolation_level="AUTOCOMMIT", connect_args=connect_args)
    except ImportError as exc:
        problem = f"no driver for {server.drivername} ({exc})"
    else:
        try:
            with admin.connect() as conn:
                conn.execute(sa.text(create.format(name=name)))
            problem = ""
        except sa.exc.SQLAlchemyError as exc:
            admin.dispose()
            reason = getattr(exc, "orig", None) or exc
            problem = f"database server {shown} ({env_var}) unreachable or refused CREATE DATABASE: {reason}"
    if problem:
        _unavailable(problem)
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(drop.format(name=name)))
        admin.dispose()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """URL of a fresh PostgreSQL database for this test session (dropped afterwards)."""
    yield from _fresh_database(
        "ROOTPROOF_TEST_PG_URL",
        DEFAULT_PG_URL,
        "CREATE DATABASE {name} ENCODING 'UTF8' TEMPLATE template0",
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)",
    )


@pytest.fixture(scope="session")
def mysql_url() -> Iterator[str]:
    """URL of a fresh MariaDB/MySQL database for this test session (dropped afterwards)."""
    yield from _fresh_database(
        "ROOTPROOF_TEST_MYSQL_URL",
        DEFAULT_MYSQL_URL,
        "CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        "DROP DATABASE IF EXISTS {name}",
    )


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of the local Redis server, once it answered PING (skips, or fails under
    `ROOTPROOF_REQUIRE_SERVICES=1`, when it does not). Shared: use keys of your own and delete them."""
    try:
        import redis
    except ImportError as exc:
        _unavailable(f"redis-py is not installed ({exc})")
    client = redis.Redis.from_url(DEFAULT_REDIS_URL, socket_connect_timeout=2, socket_timeout=5, driver_info=None)
    try:
        client.ping()
    except redis.RedisError as exc:
        _unavailable(f"Redis at {DEFAULT_REDIS_URL} unreachable: {exc}")
    finally:
        client.close()
    return DEFAULT_REDIS_URL


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of data shared outside the repository (real server logs, peer cases).

    Named by the one registered setting `ROOTPROOF_TEST_SHARED_DATA`; tests that need it skip
    when it is unset or not a folder (fail under `ROOTPROOF_REQUIRE_SERVICES=1` only if it is
    set but missing, since a clone elsewhere has no such folder).
    """
    raw = os.environ.get("ROOTPROOF_TEST_SHARED_DATA", "")
    if not raw:
        pytest.skip("ROOTPROOF_TEST_SHARED_DATA is not set (the shared data folder)")
    path = Path(raw)
    if not path.is_dir():
        if _services_required():
            pytest.fail(f"ROOTPROOF_TEST_SHARED_DATA={raw}: not a folder", pytrace=False)
        pytest.skip(f"ROOTPROOF_TEST_SHARED_DATA={raw}: not a folder")
    return path
