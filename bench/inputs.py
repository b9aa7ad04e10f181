"""Large inputs: wall time and peak RSS of `scenarios validate` and `diagnose` as input grows.

Generates, in a temporary folder, scenarios of 10k, 100k and 250k log entries (the built-in
`pg-row-lock` incident buried in realistic mixed lines of several services spread over the two
hours before `now`, plus a few hundred minute-resolution metric series) and an Alertmanager
webhook of 10 000 alerts. Each command runs as its own subprocess sharing one fresh data folder
(a first, separately shown diagnosis builds the knowledge index there); its peak RSS comes from
`os.wait4` (that child only). Timings depend on the machine's load: compare runs made together.

    .venv/bin/python bench/inputs.py [--sizes 10000,100000,250000] [--alerts 10000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

BASE = "pg-row-lock"
NOW = datetime(2026, 8, 3, 9, 52, tzinfo=UTC)
SPAN_S = 2 * 3600
SERIES = 200
SERVICES = (
    "order-service",
    "payment-api",
    "inventory-service",
    "edge-nginx",
    "postgres-orders",
    "redis-cart",
    "kafka-consumer",
)
PATHS = (
    "/api/orders",
    "/api/orders/{id}",
    "/api/orders/{id}/confirm",
    "/api/cart",
    "/api/payments",
    "/healthz",
)
AGENTS = ("Mozilla/5.0 (X11; Linux x86_64) Chrome/126.0", "okhttp/4.12.0", "kube-probe/1.29", "curl/8.5.0")


def _line(rng: random.Random, ts: datetime) -> dict[str, str]:
    """One realistic log entry of one of several services."""
    svc = rng.choice(SERVICES)
    n = rng.randrange(100_000, 999_999)
    ms = rng.choice((3, 8, 12, 25, 48, 90, 180, 631, 1200))
    path = rng.choice(PATHS).replace("{id}", f"ORD-{n}")
    level, scope, source = "INFO", "APPLICATION", f"{svc}.log"
    if svc in ("order-service", "payment-api", "inventory-service"):
        roll = rng.random()
        if roll < 0.80:
            msg = f"{rng.choice(('GET', 'POST', 'PUT'))} {path} {rng.choice((200, 200, 200, 201, 204, 404))} in {ms} ms"
        elif roll < 0.92:
            msg = f"[GC (Allocation Failure) [PSYoungGen: {n % 900_000}K->{n % 90_000}K(1048576K)] {ms / 1000:.4f} secs]"
            level, source = "DEBUG", "gc.log"
        elif roll < 0.98:
            level = "WARN"
            msg = f"Slow request {path} took {ms * 10} ms (threshold 1000 ms), correlationId={n:x}"
        else:
            level = "ERROR"
            msg = (
                f"POST {path} 502 in {ms} ms\njava.net.SocketTimeoutException: Read timed out\n"
                "\tat java.base/sun.nio.ch.NioSocketImpl.timedRead(NioSocketImpl.java:278)\n"
                "\tat okhttp3.internal.http1.Http1ExchangeCodec.readResponseHeaders(Http1ExchangeCodec.kt:180)"
            )
    elif svc == "edge-nginx":
        scope, source = "PROXY", "access.log"
        stamp = ts.strftime("%d/%b/%Y:%H:%M:%S +0000")
        msg = (
            f'10.20.{n % 256}.{n % 97} - - [{stamp}] "GET {path} HTTP/1.1" 200 {n % 9000} "-" '
            f'"{rng.choice(AGENTS)}" rt={ms / 1000:.3f} uct="0.000" uht="{ms / 1000:.3f}" urt="{ms / 1000:.3f}"'
        )
    elif svc == "postgres-orders":
        scope, source = "DATABASE", "postgresql-15-main.log"
        stamp = ts.strftime("%Y-%m-%d %H:%M:%S.") + f"{ts.microsecond // 1000:03d} UTC"
        msg = rng.choice(
            (
                f"{stamp} [{n % 30000}] LOG:  checkpoint complete: wrote {n % 5000} buffers (0.{n % 9}%); 0 WAL file(s) added",
                f"{stamp} [{n % 30000}] app@orders LOG:  duration: {ms}.{n % 1000:03d} ms  statement: SELECT * FROM orders WHERE id = {n}",
                f'{stamp} [{n % 30000}] LOG:  automatic vacuum of table "orders.public.order_events": index scans: 1',
            )
        )
    elif svc == "redis-cart":
        scope, source = "CACHE", "redis-server.log"
        msg = f"1:M {ts.strftime('%d %b %Y %H:%M:%S')}.{n % 1000:03d} * {rng.choice(('100 changes in 300 seconds. Saving...', 'Background saving started by pid ' + str(n % 9999), 'DB saved on disk'))}"
    else:
        msg = f"Committed offsets for partition orders-events-{n % 12}: offset={n}, lag={ms // 10}"
    return {
        "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "service": svc,
        "scope": scope,
        "level": level,
        "source": source,
        "message": msg,
    }


def _entry_yaml(e: dict[str, str]) -> str:
    # JSON strings are valid YAML double-quoted scalars (ASCII escapes only).
    return "- " + "\n  ".join(f"{k}: {json.dumps(v)}" for k, v in e.items()) + "\n"


def make_scenario(root: Path, entries: int, seed: int = 7) -> Path:
    """A copy of the built-in `pg-row-lock` with `entries` log entries in total and extra metrics."""
    from rootproof.scenarios.loader import scenario_folder

    rng = random.Random(seed)
    src = scenario_folder(BASE)
    sid = f"bench-{entries // 1000}k"
    dest = root / sid
    shutil.copytree(src, dest)
    scenario_file = dest / "scenario.yaml"
    scenario_file.write_text(
        scenario_file.read_text(encoding="utf-8").replace(f"id: {BASE}", f"id: {sid}"), encoding="utf-8"
    )
    responses = dest / "snapshot" / "tool_responses.yaml"
    data: dict[str, Any] = yaml.load(responses.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
    logs = data.pop("logs")
    metrics = data.pop("metrics")
    start = NOW - timedelta(seconds=SPAN_S)
    for i in range(SERIES):
        points = [
            [(start + timedelta(minutes=m)).strftime("%Y-%m-%dT%H:%M:%SZ"), round(rng.uniform(0, 100), 2)]
            for m in range(SPAN_S // 60)
        ]
        metrics.append(
            {
                "metric": f"bench_noise_{i % 20}_total",
                "labels": {"instance": f"node-{i}"},
                "unit": "count",
                "points": points,
            }
        )
    with responses.open("w", encoding="utf-8") as out:
        out.write(
            yaml.dump(
                {k: data[k] for k in ("data_source",) if k in data}, Dumper=yaml.CSafeDumper, sort_keys=False
            )
        )
        out.write("logs:\n")
        for e in logs:
            out.write(_entry_yaml({k: str(v) for k, v in e.items()}))
        offsets = sorted(rng.uniform(0, SPAN_S) for _ in range(max(0, entries - len(logs))))
        for off in offsets:
            out.write(_entry_yaml(_line(rng, start + timedelta(seconds=off))))
        rest = {k: v for k, v in data.items() if k != "data_source"}
        out.write(
            yaml.dump(
                {"metrics": metrics, **rest},
                Dumper=yaml.CSafeDumper,
                sort_keys=False,
                allow_unicode=True,
                width=1 << 20,
            )
        )
    return dest


def make_alerts(path: Path, count: int, seed: int = 11) -> Path:
    """An Alertmanager v4 webhook with `count` firing alerts (one critical, the rest warnings)."""
    rng = random.Random(seed)
    alerts = []
    for i in range(count):
        primary = i == count // 2
        labels = {
            "alertname": "OrdersApiLatencyHigh" if primary else f"NoiseAlert{i % 50}",
            "severity": "critical" if primary else rng.choice(("warning", "info")),
            "service": "order-service" if primary else rng.choice(SERVICES),
            "instance": f"10.20.{i % 256}.{i % 97}:9100",
            "team": "orders",
        }
        alerts.append(
            {
                "status": "firing",
                "labels": labels,
                "annotations": {
                    "summary": "p95 latency 30s > 2s for 5m"
                    if primary
                    else f"noise {i}: value {rng.random():.3f} above threshold",
                    "description": "x" * rng.randrange(20, 400),
                },
                "startsAt": (NOW - timedelta(minutes=12, seconds=i % 600)).isoformat().replace("+00:00", "Z"),
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": f"http://prometheus:9090/graph?g0.expr=up%7Binstance%3D%22{i}%22%7D",
                "fingerprint": f"{i:016x}",
            }
        )
    body = {
        "version": "4",
        "status": "firing",
        "receiver": "rootproof",
        "groupKey": "{}:{}",
        "groupLabels": {},
        "commonLabels": {"team": "orders"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "truncatedAlerts": 0,
        "alerts": alerts,
    }
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


@dataclass
class Measure:
    """One command's figures."""

    name: str
    seconds: float
    peak_mb: float
    rc: int
    note: str


def measure(name: str, argv: list[str], home: Path) -> Measure:
    """Run `argv` as a child with its own data folder; wall time and that child's peak RSS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOTPROOF_")}
    env["ROOTPROOF_HOME"] = str(home)
    env["ROOTPROOF_DEADLINE_S"] = "3600"
    env["ROOTPROOF_TOOL_TIMEOUT_S"] = "3600"
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")
    note = ""
    if proc.returncode == 0 and text.lstrip().startswith("{"):
        doc = json.loads(text)
        content = doc.get("content") or {}
        note = f"{doc.get('release_outcome')} {content.get('content_type', '')}"
        if (doc.get("content") or {}).get("fallback"):
            note += f" {content['fallback']['type']}"
    elif proc.returncode != 0:
        note = (errors.strip().splitlines() or ["?"])[-1][:100]
    return Measure(name, seconds, usage.ru_maxrss / 1024, proc.returncode, note)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,250000", help="log entries per generated scenario")
    ap.add_argument("--alerts", type=int, default=10_000, help="alerts in the generated payload")
    ap.add_argument("--keep", type=Path, default=None, help="generate into this folder and keep it")
    a = ap.parse_args()
    cli = [sys.executable, "-m", "rootproof.cli"]
    root = a.keep or Path(tempfile.mkdtemp(prefix="rootproof-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    rows: list[Measure] = []
    try:
        # The first run in a data folder builds the knowledge index; measure it apart.
        rows.append(
            measure(
                "warm-up   (knowledge index build)",
                [*cli, "diagnose", "--scenario", BASE, "--json"],
                root / "home",
            )
        )
        for size in (int(s) for s in a.sizes.split(",") if s):
            folder = make_scenario(root, size)
            mb = (folder / "snapshot" / "tool_responses.yaml").stat().st_size / 1e6
            label = f"{size // 1000}k entries ({mb:.0f} MB)"
            rows.append(
                measure(f"validate  {label}", [*cli, "scenarios", "validate", str(folder)], root / "home")
            )
            rows.append(
                measure(
                    f"diagnose  {label}",
                    [*cli, "diagnose", "--scenario", str(folder), "--json"],
                    root / "home",
                )
            )
            print(f"{rows[-2].name:<40} done", file=sys.stderr)
        payload = make_alerts(root / "alerts.json", a.alerts)
        mb = payload.stat().st_size / 1e6
        rows.append(
            measure(
                f"diagnose  {a.alerts} alerts ({mb:.1f} MB)",
                [*cli, "diagnose", "--scenario", BASE, "--alert", str(payload), "--json"],
                root / "home",
            )
        )
    finally:
        if a.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{'command':<40} {'wall s':>8} {'peak RSS MB':>12} {'exit':>5}  outcome")
    for r in rows:
        print(f"{r.name:<40} {r.seconds:8.1f} {r.peak_mb:12.0f} {r.rc:>5}  {r.note}")


if __name__ == "__main__":
    main()
