"""The live nginx backend's contract case: a private nginx in front of a slow upstream.

Real requests through nginx time out on `proxy_read_timeout 1s`, so its own error log holds
`upstream timed out` lines and its access log (`log_format upstream`) 504 lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import httpx

from rootproof.backends.live.nginx import NginxBackend
from rootproof.targets import NginxTarget

from .contract import ContractCase
from .nginx_server import nginx_with_slow_upstream, slow_requests


@contextmanager
def case() -> Iterator[list[ContractCase]]:
    """One case: error_log, access_log, config and status of a running nginx."""
    with nginx_with_slow_upstream() as server:
        assert slow_requests(server, 2) == [504, 504]
        assert httpx.get(f"{server.base}/api/orders/1", timeout=5).status_code == 200
        target = NginxTarget(
            kind="nginx",
            name="edge",
            error_log=server.error_log,
            access_log=server.access_log,
            access_format="upstream",
            config=server.config,
            status_url=server.status_url,
        )
        backend = NginxBackend(target, environ={})
        try:
            yield [
                ContractCase(
                    name="live:nginx",
                    backend=backend,
                    calls=[
                        ("inspect_nginx", {"kind": "error_log", "query": "upstream timed out"}),
                        ("inspect_nginx", {"kind": "access_log", "query": "504"}),
                        ("inspect_nginx", {"kind": "config"}),
                        ("inspect_nginx", {"kind": "status"}),
                    ],
                    empty_calls=[
                        ("inspect_nginx", {"kind": "error_log", "query": "no-such-term-anywhere"}),
                        ("inspect_nginx", {"kind": "status", "query": "no-such-field"}),
                    ],
                    data_sources=frozenset({"live:edge"}),
                    now=lambda: datetime.now(UTC),
                )
            ]
        finally:
            backend.close()
