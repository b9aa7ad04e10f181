"""The targets file of a live run: every instance, in rootproof's format (docs/targets.md).

`<run>/targets.yaml` names one target per running system, so `rootproof diagnose --targets` and
`rootproof tool call … --targets` read the private environment like any production one:

| target | kind | what |
|---|---|---|
| `orders-db` | postgres | role `rootproof` (read-only, `pg_monitor`) over TCP, its password file, the server log |
| `cache` | redis | the ACL user `rootproof` (read commands only), its password file, the server log |
| `edge` | nginx | error and access logs (`access_format: upstream`), the config, `stub_status` |
| `order-service` | logs | the order service's jsonl logs |
| `prom` | prometheus | Prometheus scraping both exporters and the order service |

Secrets stay in `<run>/secrets/` (`password_file`). The admin port and the superuser are not in it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rootproof.live.components.nginx import status_url
from rootproof.live.components.postgres import readonly_dsn
from rootproof.live.components.redis import SECRET as REDIS_SECRET
from rootproof.live.layout import RunSpec

__all__ = ["TARGET_NAMES", "targets_document", "write_targets"]

TARGET_NAMES = {"postgres": "orders-db", "redis": "cache", "nginx": "edge", "order_service": "order-service", "prometheus": "prom"}
"""The target name of each component that has one (evidence is `data_source: live:<name>`)."""


def targets_document(spec: RunSpec) -> dict[str, Any]:
    """The targets file's content for the run's components."""
    p = spec.paths
    targets: list[dict[str, Any]] = []
    has = set(spec.components)
    if "postgres" in has:
        targets.append(
            {"name": TARGET_NAMES["postgres"], "kind": "postgres", "dsn": readonly_dsn(spec), "password_file": str(p.secret("rootproof")), "log": str(p.pg_log)}
        )
    if "redis" in has:
        targets.append(
            {
                "name": TARGET_NAMES["redis"],
                "kind": "redis",
                "url": f"redis://127.0.0.1:{spec.port('redis')}/0",
                "username": "rootproof",
                "password_file": str(p.secret(REDIS_SECRET)),
                "log": str(p.redis_log),
            }
        )
    if "nginx" in has:
        targets.append(
            {
                "name": TARGET_NAMES["nginx"],
                "kind": "nginx",
                "error_log": str(p.nginx_error_log),
                "access_log": str(p.nginx_access_log),
                "access_format": "upstream",
                "config": str(p.nginx_conf),
                "status_url": status_url(spec),
            }
        )
    if "order_service" in has:
        targets.append(
            {"name": TARGET_NAMES["order_service"], "kind": "logs", "paths": [str(p.orders_logs / "*.jsonl")], "format": "jsonl", "service": "order-service"}
        )
    if "prometheus" in has:
        targets.append({"name": TARGET_NAMES["prometheus"], "kind": "prometheus", "url": f"http://127.0.0.1:{spec.port('prometheus')}"})
    return {"targets": targets}


def write_targets(spec: RunSpec) -> Path:
    """Write `<run>/targets.yaml` and check it loads as a targets file (ConfigError if not)."""
    from rootproof.targets import load_targets

    header = (
        f"# The live environment's systems (run {spec.run_id}), written by rootproof live; docs/live-benchmark.md.\n"
        f"# Removed with its folder by `rootproof live down {spec.run_id}`. Passwords are files in {spec.paths.secrets}/.\n"
    )
    path = spec.paths.targets
    path.write_text(header + yaml.safe_dump(targets_document(spec), sort_keys=False, width=200), encoding="utf-8")
    load_targets(path)
    return path
