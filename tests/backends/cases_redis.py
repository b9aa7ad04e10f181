"""The live Redis backend's contract case: a private redis-server with an idle client, slow
commands in its SLOWLOG (`slowlog-log-slower-than 0` on that instance only) and its log file."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from rootproof.backends.live.redis import RedisBackend
from rootproof.targets import RedisTarget

from ._redis_server import client, private_redis
from .contract import ContractCase


@contextmanager
def case() -> Iterator[list[ContractCase]]:
    """One live case: every `inspect_redis` kind finds evidence, and a miss of each finds nothing."""
    with private_redis() as server:
        setup = client(server)
        idle = client(server, "contract-idle")
        backend = RedisBackend(
            RedisTarget(name="cache", kind="redis", url=server.url, log=server.log, timeout_s=5), environ={}
        )
        try:
            setup.config_set("slowlog-log-slower-than", 0)
            setup.set("contract:key", "value with spaces")
            setup.get("contract:key")
            idle.ping()
            yield [
                ContractCase(
                    name="live:redis",
                    backend=backend,
                    calls=[
                        ("inspect_redis", {"kind": "info"}),
                        ("inspect_redis", {"kind": "info", "query": "clients rejected_connections"}),
                        ("inspect_redis", {"kind": "clients"}),
                        ("inspect_redis", {"kind": "clients", "query": "contract-idle", "limit": 1}),
                        ("inspect_redis", {"kind": "slowlog"}),
                        ("inspect_redis", {"kind": "slowlog", "query": "SET contract:key", "limit": 2}),
                        ("inspect_redis", {"kind": "config"}),
                        ("inspect_redis", {"kind": "config", "query": "maxclients"}),
                        ("inspect_redis", {"kind": "log", "query": '"Ready to accept connections"', "since": "1h"}),
                        ("inspect_redis", {"kind": "log", "limit": 2}),
                    ],
                    empty_calls=[
                        ("inspect_redis", {"kind": "info", "query": "no-such-field-anywhere"}),
                        ("inspect_redis", {"kind": "clients", "query": "no-such-client-anywhere"}),
                        ("inspect_redis", {"kind": "clients", "offset": 500}),
                        ("inspect_redis", {"kind": "slowlog", "query": "no-such-command-anywhere"}),
                        ("inspect_redis", {"kind": "config", "query": "requirepass"}),
                        ("inspect_redis", {"kind": "log", "query": "no-such-line-anywhere"}),
                    ],
                    data_sources=frozenset({"live:cache"}),
                    now=lambda: datetime.now(UTC),
                )
            ]
        finally:
            backend.close()
            idle.close()
            setup.close()
