"""A private redis-server for tests: a free loopback port, a tmp folder, stopped by its pid.

Never the shared server on 6379: tests change settings (`CONFIG SET`) on their own instance only.
Skips when `redis-server` is missing (fails under `ROOTPROOF_REQUIRE_SERVICES=1`).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.services import unavailable

from .procs import free_port, stop_process

__all__ = ["PrivateRedis", "client", "free_port", "private_redis"]


@dataclass(frozen=True, kw_only=True)
class PrivateRedis:
    """A running private instance."""

    port: int
    folder: Path
    log: Path
    pid: int
    password: str | None

    @property
    def url(self) -> str:
        """`redis://127.0.0.1:<port>/0` (no password)."""
        return f"redis://127.0.0.1:{self.port}/0"


def client(server: PrivateRedis, name: str = "setup") -> redis.Redis:
    """A redis-py client without retries (one connection, opened now)."""
    return redis.Redis(
        host="127.0.0.1",
        port=server.port,
        password=server.password,
        client_name=name,
        single_connection_client=True,
        socket_timeout=5,
        socket_connect_timeout=5,
        retry=Retry(NoBackoff(), 0),
        retry_on_error=[],
        decode_responses=True,
        driver_info=None,
    )


@contextmanager
def private_redis(*extra: str, maxclients: int = 8, password: str | None = None) -> Iterator[PrivateRedis]:
    """Start `redis-server` on a free port in a tmp folder (`extra`: more arguments, `{folder}`
    replaced by that folder); stop it by its pid afterwards."""
    exe = shutil.which("redis-server")
    if exe is None:
        unavailable("redis-server is not installed")
    folder = Path(tempfile.mkdtemp(prefix="rootproof-redis-"))
    log = folder / "redis.log"
    conf = folder / "redis.conf"  # the password goes in a file, not on the command line
    conf.write_text(f"requirepass {password}\n" if password else "", encoding="utf-8")
    port = free_port()
    args = [exe, str(conf), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    args += ["--maxclients", str(maxclients), "--logfile", str(log), "--daemonize", "no", "--dir", str(folder)]
    args += [a.replace("{folder}", str(folder)) for a in extra]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder)
    try:
        deadline = time.monotonic() + 15
        while "Ready to accept connections" not in (log.read_text(errors="replace") if log.exists() else ""):
            if proc.poll() is not None or time.monotonic() > deadline:
                unavailable(f"redis-server did not start on port {port} (exit {proc.poll()}; log {log})")
            time.sleep(0.02)
        yield PrivateRedis(port=port, folder=folder, log=log, pid=proc.pid, password=password)
    finally:
        stop_process(proc, wait_s=10)
        shutil.rmtree(folder, ignore_errors=True)
