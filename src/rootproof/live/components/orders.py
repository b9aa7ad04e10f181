"""The order service (`rootproof.live.order_service`) and the load generator (`rootproof.live.load`)
as components: each is `python -m …` in its own session, on the interpreter running rootproof."""

from __future__ import annotations

import os
import time
from pathlib import Path

import rootproof
from rootproof.live.components.base import Component, Health, Started, http_health, spawn_process
from rootproof.live.components.postgres import app_dsn
from rootproof.live.layout import RunSpec

__all__ = ["LoadComponent", "OrderServiceComponent", "admin_url", "nginx_url", "python_env"]


def python_env() -> dict[str, str]:
    """This process's environment with rootproof's source folder first on PYTHONPATH (so the
    child imports the same rootproof however this one was started)."""
    src = str(Path(rootproof.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([src, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


def admin_url(spec: RunSpec) -> str:
    """The order service's admin app (fault switch, pool state)."""
    return f"http://127.0.0.1:{spec.port('order_admin')}"


def nginx_url(spec: RunSpec) -> str:
    """nginx, the environment's front door."""
    return f"http://127.0.0.1:{spec.port('nginx')}"


class OrderServiceComponent(Component):
    """The order service: the public app nginx proxies to, and its admin app."""

    name = "order_service"

    def config_file(self, spec: RunSpec) -> Path:
        """The service's `config.json`."""
        return spec.paths.orders / "config.json"

    def log_file(self, spec: RunSpec) -> Path:
        return spec.paths.orders / "stdout.log"

    def prepare(self, spec: RunSpec) -> None:
        from rootproof.live.order_service import ServiceConfig

        spec.paths.orders_logs.mkdir(parents=True, exist_ok=True)
        config = ServiceConfig(
            port=spec.port("order_service"),
            admin_port=spec.port("order_admin"),
            db_url=app_dsn(spec),
            db_password_file=spec.paths.secret("orders_app"),
            redis_url=f"redis://127.0.0.1:{spec.port('redis')}/0",
            log_file=spec.paths.orders_log,
            pool_size=spec.config.pool_size,
            pool_timeout_s=spec.config.pool_timeout_s,
            leak_detection_s=spec.config.leak_detection_s,
        )
        self.config_file(spec).write_text(config.model_dump_json(indent=1) + "\n", encoding="utf-8")

    def spawn(self, spec: RunSpec) -> Started:
        argv = [spec.python, "-m", "rootproof.live.order_service", "--config", str(self.config_file(spec))]
        return spawn_process(self.name, argv, cwd=spec.paths.orders, log=self.log_file(spec), env=python_env())

    def health(self, spec: RunSpec) -> Health:
        public = http_health(f"http://127.0.0.1:{spec.port('order_service')}/healthz", timeout_s=5.0)
        if not public.ok:
            return public
        admin = http_health(f"{admin_url(spec)}/healthz")
        return admin if not admin.ok else Health(ok=True, detail=f"{public.detail}; admin: 200")


class LoadComponent(Component):
    """The background load through nginx."""

    name = "load"

    def log_file(self, spec: RunSpec) -> Path:
        return spec.paths.load / "stdout.log"

    def spawn(self, spec: RunSpec) -> Started:
        spec.paths.load.mkdir(parents=True, exist_ok=True)
        argv = [spec.python, "-m", "rootproof.live.load", "--base-url", nginx_url(spec)]
        argv += ["--rate", f"{spec.config.load_rate_per_s:g}", "--stats", str(spec.paths.load_stats)]
        return spawn_process(self.name, argv, cwd=spec.paths.load, log=self.log_file(spec), env=python_env())

    def health(self, spec: RunSpec) -> Health:
        from rootproof.live.load import read_stats

        stats = read_stats(spec.paths.load_stats)
        if stats is None:
            return Health(ok=False, detail="no counts written yet")
        age = time.time() - stats.updated_at
        if age > 10:  # it writes every second between requests, each bounded by 5 s
            return Health(ok=False, detail=f"counts last written {age:.0f} s ago")
        return Health(ok=True, detail=f"sent {stats.sent}: {stats.ok} ok, {stats.failed} failed")
