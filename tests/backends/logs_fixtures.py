"""Application log files written by the live logs tests: jsonl, logfmt and a regex text format.

Realistic lines of an order service (Spring Boot + HikariCP, jsonl with a multi-line stack
trace as one JSON string and a torn line), a payment gateway (logfmt) and a checkout API (a
Logback-style text layout with raw stack-trace lines), timed relative to `now`.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from rootproof.targets import LogsTarget

TEXT_PATTERN = r"^(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}) (?P<level>[A-Z]+) +\[(?P<service>[^\]]+)\] (?P<message>.*)$"
STACK = (
    "org.springframework.dao.DataAccessResourceFailureException: Unable to acquire JDBC Connection\n"
    "\tat org.springframework.orm.jpa.vendor.HibernateJpaDialect.convertHibernateAccessException(HibernateJpaDialect.java:267)\n"
    "\tat com.example.orders.OrderService.create(OrderService.java:88)\n"
    "Caused by: java.sql.SQLTransientConnectionException: HikariPool-1 - Connection is not available, "
    "request timed out after 30000ms.\n"
    "\tat com.zaxxer.hikari.pool.HikariPool.createTimeoutException(HikariPool.java:696)"
)


def _iso(ts: datetime) -> str:
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_jsonl(path: Path, now: datetime) -> None:
    """order-service: startup, requests, pool warnings, an error with its stack trace, an old line."""
    records = [
        {"ts": _iso(now - timedelta(hours=2)), "level": "INFO", "service": "order-service", "msg": "old line outside the window", "order_id": 1},
        {"ts": _iso(now - timedelta(minutes=20)), "level": "info", "service": "order-service",
         "msg": "Started OrderServiceApplication in 8.412 seconds", "logger": "o.s.b.StartupInfoLogger"},
        {"ts": _iso(now - timedelta(minutes=12)), "level": "INFO", "service": "order-service",
         "msg": "POST /api/orders 201 in 84 ms", "order_id": 88121, "trace_id": "4bf92f3577b34da6"},
        {"ts": _iso(now - timedelta(minutes=9)), "level": "WARN", "service": "order-service",
         "msg": "HikariPool-1 - Connection is not available, request timed out after 30000ms.",
         "logger": "com.zaxxer.hikari.pool.HikariPool"},
        {"ts": _iso(now - timedelta(minutes=8)), "level": "ERROR", "service": "order-service",
         "msg": "Failed to create order", "order_id": 88130, "exception": STACK},
        {"timestamp": int((now - timedelta(minutes=7)).timestamp() * 1000), "severity": "warning", "service": "order-worker",
         "message": "order 88130 moved to retry queue", "attempt": 2},
    ]
    lines = [json.dumps(r) for r in records]
    lines.insert(4, '{"ts": "torn write')  # a torn line continues the record before it
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_logfmt(path: Path, now: datetime) -> None:
    """payment-gateway: a charge that timed out and its retry."""
    path.write_text(
        f'ts={_iso(now - timedelta(minutes=6))} level=info msg="charge accepted" provider=stripe duration_ms=412\n'
        f'ts={_iso(now - timedelta(minutes=5))} level=error msg="charge failed: upstream timed out" '
        f'provider=stripe duration_ms=30001 err="context deadline exceeded"\n'
        f'ts={_iso(now - timedelta(minutes=4))} lvl=warn msg="retrying charge" attempt=2 service=payment-retrier\n',
        encoding="utf-8",
    )


def write_text(path: Path, now: datetime) -> None:
    """checkout-api: a read timeout with a raw stack trace below it."""
    def t(minutes: int) -> str:
        return (now - timedelta(minutes=minutes)).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]

    path.write_text(
        f"{t(3)} INFO  [checkout-api] GET /api/cart/77 200 in 12 ms\n"
        f"{t(2)} ERROR [checkout-api] Request failed: java.net.SocketTimeoutException: Read timed out\n"
        "\tat java.base/sun.nio.ch.NioSocketImpl.timedRead(NioSocketImpl.java:288)\n"
        "\tat com.example.checkout.PaymentsClient.charge(PaymentsClient.java:54)\n",
        encoding="utf-8",
    )


def write_all(folder: Path, now: datetime) -> list[LogsTarget]:
    """Write the three files; their targets (orders-app, payments, checkout)."""
    (folder / "orders").mkdir(exist_ok=True)
    write_jsonl(folder / "orders" / "order-service.jsonl", now)
    write_logfmt(folder / "payments.log", now)
    write_text(folder / "checkout.log", now)
    return [
        LogsTarget(kind="logs", name="orders-app", paths=[str(folder / "orders" / "*.jsonl")], format="jsonl", service="order-service"),
        LogsTarget(kind="logs", name="payments", paths=[str(folder / "payments*.log")], format="logfmt", service="payment-gateway"),
        LogsTarget(kind="logs", name="checkout", paths=[str(folder / "checkout.log")], format="regex", pattern=TEXT_PATTERN, service="checkout-api"),
    ]
