"""Prometheus (Debian's `prometheus`) scraping prometheus-postgres-exporter, prometheus-redis-exporter
and the order service's `/metrics`, so `query_metrics` reads real series.

The command lines and the scrape config are built by the public functions here, which the tests'
private Prometheus (tests/backends/prom_env.py) uses too. The PostgreSQL exporter connects as
the `exporter` role (`pg_monitor`) with `DATA_SOURCE_URI`/`DATA_SOURCE_USER`/`DATA_SOURCE_PASS_FILE`
(the password stays in its file); the Redis exporter as Redis' default user.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rootproof.live.components.base import Component, Health, Started, http_health, spawn_process
from rootproof.live.layout import RunSpec

__all__ = [
    "PostgresExporterComponent",
    "PrometheusComponent",
    "RedisExporterComponent",
    "postgres_exporter_argv",
    "prometheus_argv",
    "prometheus_config",
    "redis_exporter_argv",
    "scrape_health",
]


def prometheus_config(jobs: Mapping[str, Sequence[str]], *, interval_s: float) -> dict[str, Any]:
    """A scrape config: one static job per entry (`job name → ["127.0.0.1:port", …]`), scraped
    (and evaluated) every `interval_s` seconds."""
    every = f"{interval_s:g}s"
    return {
        "global": {"scrape_interval": every, "evaluation_interval": every, "scrape_timeout": every},
        "scrape_configs": [{"job_name": name, "static_configs": [{"targets": list(addrs)}]} for name, addrs in jobs.items()],
    }


def prometheus_argv(binary: str, *, config: Path, data: Path, port: int) -> list[str]:
    """Prometheus on 127.0.0.1:`port` with its TSDB in `data`."""
    return [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1d",
        "--log.level=warn",
    ]


def postgres_exporter_argv(binary: str, *, port: int) -> list[str]:
    """prometheus-postgres-exporter on 127.0.0.1:`port` (the server comes from `DATA_SOURCE_*`)."""
    return [binary, f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]


def redis_exporter_argv(binary: str, *, redis_addr: str, port: int) -> list[str]:
    """prometheus-redis-exporter for `redis_addr` (`redis://127.0.0.1:6379`) on 127.0.0.1:`port`."""
    return [binary, f"--redis.addr={redis_addr}", f"--web.listen-address=127.0.0.1:{port}"]


def scrape_health(url: str, jobs: Sequence[str], *, timeout_s: float = 2.0) -> Health:
    """Whether Prometheus at `url` has scraped every job of `jobs` successfully (`up == 1`)."""
    import httpx

    try:
        resp = httpx.get(f"{url}/api/v1/query", params={"query": "up"}, timeout=timeout_s, trust_env=False)
        rows = resp.json()["data"]["result"] if resp.status_code == 200 else []
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        return Health(ok=False, detail=f"GET {url}/api/v1/query: {type(exc).__name__}: {exc}"[:300])
    up = {r["metric"].get("job") for r in rows if r.get("value", [0, "0"])[1] == "1"}
    missing = [j for j in jobs if j not in up]
    if missing:
        return Health(ok=False, detail=f"not scraped (up) yet: {', '.join(missing)}")
    return Health(ok=True, detail=f"scraping {', '.join(jobs)}: up")


class PostgresExporterComponent(Component):
    """prometheus-postgres-exporter for the run's PostgreSQL (database `orders`)."""

    name = "postgres_exporter"
    binaries = ("prometheus-postgres-exporter",)

    def log_file(self, spec: RunSpec) -> Path:
        return spec.paths.prometheus / "postgres_exporter.log"

    def spawn(self, spec: RunSpec) -> Started:
        spec.paths.prometheus.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DATA_SOURCE_")}
        env |= {
            "DATA_SOURCE_URI": f"127.0.0.1:{spec.port('postgres')}/orders?sslmode=disable&application_name=postgres_exporter",
            "DATA_SOURCE_USER": "exporter",
            "DATA_SOURCE_PASS_FILE": str(spec.paths.secret("exporter")),
        }
        argv = postgres_exporter_argv(spec.binaries["prometheus-postgres-exporter"], port=spec.port("postgres_exporter"))
        return spawn_process(self.name, argv, cwd=spec.paths.prometheus, log=self.log_file(spec), env=env)

    def health(self, spec: RunSpec) -> Health:
        return http_health(f"http://127.0.0.1:{spec.port('postgres_exporter')}/metrics", expect="\npg_up 1")


class RedisExporterComponent(Component):
    """prometheus-redis-exporter for the run's Redis."""

    name = "redis_exporter"
    binaries = ("prometheus-redis-exporter",)

    def log_file(self, spec: RunSpec) -> Path:
        return spec.paths.prometheus / "redis_exporter.log"

    def spawn(self, spec: RunSpec) -> Started:
        spec.paths.prometheus.mkdir(parents=True, exist_ok=True)
        argv = redis_exporter_argv(
            spec.binaries["prometheus-redis-exporter"], redis_addr=f"redis://127.0.0.1:{spec.port('redis')}", port=spec.port("redis_exporter")
        )
        return spawn_process(self.name, argv, cwd=spec.paths.prometheus, log=self.log_file(spec))

    def health(self, spec: RunSpec) -> Health:
        return http_health(f"http://127.0.0.1:{spec.port('redis_exporter')}/metrics", expect="\nredis_up 1")


def _jobs(spec: RunSpec) -> dict[str, list[str]]:
    jobs = {
        "postgres": [f"127.0.0.1:{spec.port('postgres_exporter')}"],
        "redis": [f"127.0.0.1:{spec.port('redis_exporter')}"],
        "order-service": [f"127.0.0.1:{spec.port('order_service')}"],
    }
    return jobs


class PrometheusComponent(Component):
    """Prometheus with its TSDB in `<run>/prometheus/data`; ready once every job was scraped up."""

    name = "prometheus"
    binaries = ("prometheus",)
    spawn_early = True  # its TSDB start takes seconds; its targets may come up after it

    def url(self, spec: RunSpec) -> str:
        """Its base URL."""
        return f"http://127.0.0.1:{spec.port('prometheus')}"

    def log_file(self, spec: RunSpec) -> Path:
        return spec.paths.prometheus / "prometheus.log"

    def prepare(self, spec: RunSpec) -> None:
        spec.paths.prometheus.mkdir(parents=True, exist_ok=True)
        config = prometheus_config(_jobs(spec), interval_s=spec.config.scrape_interval_s)
        (spec.paths.prometheus / "prometheus.yml").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")  # JSON is YAML

    def spawn(self, spec: RunSpec) -> Started:
        p = spec.paths.prometheus
        argv = prometheus_argv(spec.binaries["prometheus"], config=p / "prometheus.yml", data=p / "data", port=spec.port("prometheus"))
        return spawn_process(self.name, argv, cwd=p, log=self.log_file(spec))

    def health(self, spec: RunSpec) -> Health:
        ready = http_health(f"{self.url(spec)}/-/ready")
        if not ready.ok:
            return ready
        return scrape_health(self.url(spec), list(_jobs(spec)))
