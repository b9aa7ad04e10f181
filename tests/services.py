"""Local services the tests use: where they are, and what a missing one means.

PostgreSQL (`ROOTPROOF_TEST_PG_URL`), MariaDB (`ROOTPROOF_TEST_MYSQL_URL`) and Redis on
localhost. A missing service skips its tests, or fails them under `ROOTPROOF_REQUIRE_SERVICES=1`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from typing import NoReturn

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_MYSQL_URL = "mysql+pymysql://root@127.0.0.1:3306/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def services_required() -> bool:
    return os.environ.get("ROOTPROOF_REQUIRE_SERVICES", "") == "1"


def unavailable(what: str) -> NoReturn:
    if services_required():
        pytest.fail(
            f"{what} (ROOTPROOF_REQUIRE_SERVICES=1: start the server or unset the variable)", pytrace=False
        )
    pytest.skip(what)


def fresh_database(env_var: str, default: str, create: str, drop: str) -> Iterator[str]:
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
        unavailable(problem)
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(drop.format(name=name)))
        admin.dispose()


SHARED_VARIABLES = ("ROOTPROOF_KB_INDEX_DIR",)
"""`ROOTPROOF_*` variables a subprocess keeps from the test's environment (the run's index cache)."""


def inherited_env() -> dict[str, str]:
    """The environment for a `rootproof` subprocess: this process's, without its `ROOTPROOF_*`
    settings except `SHARED_VARIABLES` (so the subprocess reads the test run's index cache)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ROOTPROOF_") or k in SHARED_VARIABLES}
