"""Shared fixtures.

Every test starts from a known environment (`_environment`, autouse; `_session_environment`
does the same for module and session fixtures): no `ROOTPROOF_*` setting of the calling shell
except `ROOTPROOF_TEST_*` and `ROOTPROOF_REQUIRE_SERVICES`, `ROOTPROOF_HOME` a fresh folder, and
`ROOTPROOF_KB_INDEX_DIR` the knowledge-base index cache kept in pytest's cache folder
(`kb_index_dir`): a card is encoded once, then read by every worker and later run until it
changes; a test that must see a cold build gives `KnowledgeBase.load` a cache folder of its own.
`runtime` is a Runtime on a fresh data folder, closed after the test; `make_runtime` builds
more (closed after the test too).

Database servers (trace store tests): `pg_url` and `mysql_url` create a fresh, uniquely named
database on the local PostgreSQL / MariaDB server for the test session and drop it afterwards.
They skip when the server is unreachable, or fail when `ROOTPROOF_REQUIRE_SERVICES=1`.
Servers: `ROOTPROOF_TEST_PG_URL` (default `postgresql+psycopg://postgres@127.0.0.1:5432/test`)
and `ROOTPROOF_TEST_MYSQL_URL` (default `mysql+pymysql://root@127.0.0.1:3306/test`).
`redis_url` is the local Redis server (`redis://127.0.0.1:6379/0`), checked once; its tests keep
to keys under a prefix of their own and delete them (the server is shared).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.services import (
    DEFAULT_MYSQL_URL,
    DEFAULT_PG_URL,
    DEFAULT_REDIS_URL,
    fresh_database,
    services_required,
    unavailable,
)

if TYPE_CHECKING:
    from rootproof.runtime import Runtime
    from rootproof.settings import Settings

KEPT_VARIABLES = ("ROOTPROOF_TEST_", "ROOTPROOF_REQUIRE_SERVICES")


@pytest.fixture(scope="session")
def kb_index_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The knowledge-base index cache shared by every test of this run, every xdist worker and
    the runs after it: pytest's cache folder (`.pytest_cache/d/kb-index`, else a folder beside
    the workers' temporary folders). Entries are named by card content and index version and
    written atomically, so a changed card is the only one encoded again, and workers that build
    the same card at once do no harm."""
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        folder = Path(cache.mkdir("kb-index"))
    else:
        base = tmp_path_factory.getbasetemp()
        folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "kb-index"
        folder.mkdir(exist_ok=True)
    # Built once, before any test needs it: the first worker here encodes the built-in cards
    # while the others wait on the lock, then read them (an encode inside a test, on a loaded
    # machine, can outlast a tool call's timeout).
    from rootproof.kb.index import KnowledgeBase

    with (folder.parent / "kb-index.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        KnowledgeBase.load([], cache_dir=folder)
    return folder


def _clean_environment(setenv: Callable[[str, str], None], delenv: Callable[[str], None], home: Path, kb_index_dir: Path) -> None:
    for name in list(os.environ):
        if name.startswith("ROOTPROOF_") and not name.startswith(KEPT_VARIABLES):
            delenv(name)
    setenv("ROOTPROOF_HOME", str(home))
    setenv("ROOTPROOF_KB_INDEX_DIR", str(kb_index_dir))


@pytest.fixture(scope="session", autouse=True)
def _session_environment(tmp_path_factory: pytest.TempPathFactory, kb_index_dir: Path) -> Iterator[None]:
    """The same clean environment for the whole session, so that module and session fixtures
    (set up before any function fixture) also read the shared index and a home of their own."""
    with pytest.MonkeyPatch.context() as mp:
        _clean_environment(mp.setenv, mp.delenv, tmp_path_factory.mktemp("session-home"), kb_index_dir)
        yield


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory, kb_index_dir: Path) -> None:
    """No `ROOTPROOF_*` setting leaks in from the shell; a fresh `ROOTPROOF_HOME`; the shared index."""
    _clean_environment(monkeypatch.setenv, monkeypatch.delenv, tmp_path_factory.mktemp("home"), kb_index_dir)


@pytest.fixture
def make_runtime() -> Iterator[Callable[..., Runtime]]:
    """`make_runtime(settings=None, **parts)`: `Runtime.from_settings`, every one closed after the test."""
    from rootproof.runtime import Runtime
    from rootproof.settings import load_settings

    built: list[Runtime] = []

    def make(settings: Settings | None = None, /, **parts: Any) -> Runtime:
        runtime = Runtime.from_settings(settings if settings is not None else load_settings(), **parts)
        built.append(runtime)
        return runtime

    yield make
    for runtime in reversed(built):
        runtime.close()


@pytest.fixture
def runtime(make_runtime: Callable[..., Runtime], tmp_path: Path) -> Runtime:
    """A Runtime on a fresh data folder (`tmp_path / "home"`), closed after the test."""
    from rootproof.settings import load_settings

    return make_runtime(load_settings(data_dir=tmp_path / "home"))


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """URL of a fresh PostgreSQL database for this test session (dropped afterwards)."""
    yield from fresh_database(
        "ROOTPROOF_TEST_PG_URL",
        DEFAULT_PG_URL,
        "CREATE DATABASE {name} ENCODING 'UTF8' TEMPLATE template0",
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)",
    )


@pytest.fixture(scope="session")
def mysql_url() -> Iterator[str]:
    """URL of a fresh MariaDB/MySQL database for this test session (dropped afterwards)."""
    yield from fresh_database(
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
        unavailable(f"redis-py is not installed ({exc})")
    client = redis.Redis.from_url(DEFAULT_REDIS_URL, socket_connect_timeout=2, socket_timeout=5, driver_info=None)
    try:
        client.ping()
    except redis.RedisError as exc:
        unavailable(f"Redis at {DEFAULT_REDIS_URL} unreachable: {exc}")
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
        if services_required():
            pytest.fail(f"ROOTPROOF_TEST_SHARED_DATA={raw}: not a folder", pytrace=False)
        pytest.skip(f"ROOTPROOF_TEST_SHARED_DATA={raw}: not a folder")
    return path
