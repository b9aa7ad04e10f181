"""A private Prometheus with the PostgreSQL and Redis exporters, for the live metrics tests and bench.

`start_prom_env()` starts, in a tmp folder and on free loopback ports, Debian's `prometheus`
(scrape interval 1s), `prometheus-postgres-exporter` (the shared PostgreSQL, db `test`) and
`prometheus-redis-exporter` (the shared Redis), waits (bounded) until Prometheus has scraped
both exporters a few times, and returns a `PromEnv`; `PromEnv.stop()` stops the three by
their pids and removes the folder. Nothing here touches the shared servers' configuration:
the exporters only read.

Tests use the session fixture `prometheus_env` (import it from this module); contract cases,
which run without fixtures, use `running_prom_env()`: the session's instance when one is
running, else a private one for the block. Binaries are found on PATH or at the Debian paths;
`ROOTPROOF_TEST_PG_DSN` / `ROOTPROOF_TEST_REDIS_URL`-like overrides are not needed: the
exporters use the services named in the project notes (127.0.0.1:5432, 127.0.0.1:6379).
Where the binaries are and which packages hold them, their command lines and the scrape config
come from the live environment (`rootproof.live.binaries`, `rootproof.live.components.prometheus`),
which starts the same three for the live benchmark.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rootproof.errors import MissingBinary
from rootproof.live.binaries import resolve
from rootproof.live.components.prometheus import (
    postgres_exporter_argv,
    prometheus_argv,
    prometheus_config,
    redis_exporter_argv,
)

from .procs import free_port, stop_process

__all__ = ["PromEnv", "missing_binaries", "prometheus_env", "running_prom_env", "start_prom_env"]

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test?sslmode=disable"
REDIS_ADDR = "redis://127.0.0.1:6379"
BINARIES = {
    "prometheus": "prometheus",
    "postgres_exporter": "prometheus-postgres-exporter",
    "redis_exporter": "prometheus-redis-exporter",
}
"""role → binary name (`rootproof.live.binaries.BINARIES`)."""
READY_TIMEOUT_S = 45.0
"""Longest wait for Prometheus to be ready and to have scraped both exporters `MIN_SCRAPES` times."""
MIN_SCRAPES = 3

_shared: PromEnv | None = None


def _binary(role: str) -> str | None:
    try:
        return resolve(BINARIES[role])
    except MissingBinary:
        return None


def missing_binaries() -> list[str]:
    """The commands of `BINARIES` that are not installed."""
    return [BINARIES[r] for r in BINARIES if _binary(r) is None]


@dataclass
class PromEnv:
    """A running private Prometheus and its two exporters."""

    url: str
    """`http://127.0.0.1:<port>`."""
    tmp: Path
    ports: dict[str, int]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        """Whether all three processes still run."""
        return bool(self.procs) and all(p.poll() is None for p in self.procs.values())

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector (for waiting and for test assertions)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as resp:
            doc = json.loads(resp.read())
        return list(doc["data"]["result"])

    def stop(self) -> None:
        """Stop the processes by their pids (TERM, then KILL after 5s) and remove the folder; idempotent."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)  # all at once, then wait for each
        for proc in self.procs.values():
            stop_process(proc)
        self.procs.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def log_tail(self, role: str, lines: int = 20) -> str:
        """The end of a process's log (for failure messages)."""
        path = self.tmp / f"{role}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _spawn(env: PromEnv, role: str, args: list[str], extra_env: dict[str, str] | None = None) -> None:
    log = open(env.tmp / f"{role}.log", "wb")  # noqa: SIM115 - the child owns it; closed below
    try:
        env.procs[role] = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=env.tmp,
            env={**os.environ, **(extra_env or {})},
            start_new_session=True,
        )
    finally:
        log.close()


def start_prom_env(*, scrape_interval_s: float = 1, min_scrapes: int = MIN_SCRAPES) -> PromEnv:
    """Start Prometheus and both exporters; RuntimeError (processes stopped) if not ready in time."""
    missing = missing_binaries()
    if missing:
        raise RuntimeError(f"not installed: {', '.join(missing)}")
    tmp = Path(tempfile.mkdtemp(prefix="rootproof-prom-"))
    ports = {"prometheus": free_port(), "postgres_exporter": free_port(), "redis_exporter": free_port()}
    env = PromEnv(url=f"http://127.0.0.1:{ports['prometheus']}", tmp=tmp, ports=ports)
    config = prometheus_config(
        {"postgres": [f"127.0.0.1:{ports['postgres_exporter']}"], "redis": [f"127.0.0.1:{ports['redis_exporter']}"]},
        interval_s=scrape_interval_s,
    )
    (tmp / "prometheus.yml").write_text(json.dumps(config, indent=1))  # JSON is YAML
    try:
        _spawn(
            env,
            "postgres_exporter",
            postgres_exporter_argv(str(_binary("postgres_exporter")), port=ports["postgres_exporter"]),
            {"DATA_SOURCE_NAME": PG_DSN},
        )
        _spawn(
            env,
            "redis_exporter",
            redis_exporter_argv(str(_binary("redis_exporter")), redis_addr=REDIS_ADDR, port=ports["redis_exporter"]),
        )
        _spawn(
            env,
            "prometheus",
            prometheus_argv(str(_binary("prometheus")), config=tmp / "prometheus.yml", data=tmp / "data", port=ports["prometheus"]),
        )
        _wait_ready(env, min_scrapes)
    except BaseException:
        env.stop()
        raise
    return env


def _wait_ready(env: PromEnv, min_scrapes: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    problem = "not ready"
    while time.monotonic() < deadline:
        dead = [r for r, p in env.procs.items() if p.poll() is not None]
        if dead:
            raise RuntimeError(f"{dead[0]} exited: {env.log_tail(dead[0])}")
        try:
            rows = env.query(f"count_over_time(up[1m]) >= {min_scrapes} and up == 1")
            jobs = {r["metric"].get("job") for r in rows}
            if {"postgres", "redis"} <= jobs:
                return
            problem = f"scraped enough so far: {sorted(j for j in jobs if j)}"
        except (OSError, ValueError, KeyError) as exc:
            problem = f"API not answering: {exc}"
        time.sleep(0.3)
    raise RuntimeError(f"Prometheus at {env.url} not ready in {READY_TIMEOUT_S:g}s ({problem}): {env.log_tail('prometheus')}")


def _skip_or_fail(what: str) -> None:
    from tests.services import unavailable

    unavailable(what)


def _start_or_skip() -> PromEnv:
    missing = missing_binaries()
    if missing:
        _skip_or_fail(f"Prometheus test environment: not installed: {', '.join(missing)}")
    return start_prom_env()


@contextmanager
def running_prom_env() -> Iterator[PromEnv]:
    """The session's environment if one runs, else a private one for the block (skips without binaries)."""
    if _shared is not None and _shared.alive:
        yield _shared
        return
    env = _start_or_skip()
    try:
        yield env
    finally:
        env.stop()


try:
    import pytest
except ImportError:  # bench/live.py runs without pytest too
    pass
else:

    @pytest.fixture(scope="session")
    def prometheus_env() -> Iterator[PromEnv]:
        """A private Prometheus scraping both exporters, for the whole test session."""
        global _shared
        env = _start_or_skip()
        _shared = env
        try:
            yield env
        finally:
            _shared = None
            env.stop()
