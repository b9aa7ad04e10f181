"""The order service: a small real HTTP app behind the live environment's nginx.

`python -m rootproof.live.order_service --config <run>/orders/config.json` serves two apps in
one process (uvicorn):

- the **public app** on `port` (what nginx proxies to): `GET /healthz` (a `SELECT 1` through
  the pool and a Redis `PING`: 200, or 503 naming what failed), `POST /orders` (`{"sku":
  "SKU-0003", "qty": 1}`: one transaction that takes the stock from `inventory` and inserts the
  order and its item, then caches the order in Redis), `GET /orders/{id}` (Redis, else the
  database, then cached) and `GET /metrics` (Prometheus text: requests, latency, pool gauges);
- the **admin app** on `admin_port`, never proxied and not in the targets file: the fault
  switch the live benchmark's injector controls (below) and the pool's state.

Its database access goes through a real bounded SQLAlchemy `QueuePool` (`pool_size`, no
overflow, `pool_timeout_s`) to the run's PostgreSQL as `orders_app` (application_name
`order-service`, a statement timeout); its cache is redis-py without retries: the request path
opens a connection per cache call and closes it after (so when Redis refuses new clients every
cache call fails, is logged and swallowed), the health check's `PING` keeps one long-lived
connection (client name `order-service`). It logs one JSON
object per line to `log_file` (`ts`, `level`, `service`, `message`, then fields: `method`,
`route`, `status`, `duration_ms`, `request_id`, `error`, `exception`), the way such apps log:
a failed checkout is `QueuePool limit of size 5 overflow 0 reached, connection timed out,
timeout 3.00 (…)` with its traceback; a connection checked out longer than
`leak_detection_s` gets one `Connection leak detection triggered …` warning (as HikariCP's
leak detection does).

Fault switches (admin app only; later fault scenarios use them, nothing public can reach them):

- `delay_s` (`PUT /faults {"delay_s": 5}`): each public `/orders` request first waits that
  long, as behind a slow dependency, without holding a pooled connection. Above nginx's
  `proxy_read_timeout` it yields real upstream timeouts and 504s.
- `leak` (`PUT /faults {"leak": true}`): `POST /orders` takes the code path with the bug: its
  connection is checked out by hand, used for a last `SELECT` (opening a transaction) and
  never returned, so each order leaks one connection left `idle in transaction`; after
  `pool_size` orders every request waits `pool_timeout_s` and fails. Restarting the service
  (the recovery) gives the connections back; so does `POST /faults/reset`, which also turns
  every switch off.
- `GET /faults` shows the switches and how many connections the leak holds; `GET /pool` the
  pool's size, checked-out and overflow counts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import json
import logging
import signal
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from redis.backoff import NoBackoff
from redis.retry import Retry
from sqlalchemy import event
from sqlalchemy.pool import QueuePool

__all__ = ["OrderIn", "OrderService", "ServiceConfig", "main"]

SERVICE = "order-service"


class ServiceConfig(BaseModel):
    """`config.json`: what the environment tells the service (no secret: the password is a file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(ge=1, le=65535)
    """The public app's port (nginx's upstream)."""
    admin_port: int = Field(ge=1, le=65535)
    """The admin app's port (fault switch, pool state)."""
    db_url: str
    """SQLAlchemy URL without password (`postgresql+psycopg://orders_app@127.0.0.1:5432/orders`)."""
    db_password_file: Path
    redis_url: str
    log_file: Path
    pool_size: int = Field(default=5, ge=1, le=100)
    pool_timeout_s: float = Field(default=3.0, gt=0, le=60)
    statement_timeout_ms: int = Field(default=8000, ge=100)
    leak_detection_s: float = Field(default=5.0, gt=0)
    cache_ttl_s: int = Field(default=300, ge=1)


class OrderIn(BaseModel):
    """`POST /orders`'s body."""

    model_config = ConfigDict(extra="forbid")

    sku: str = Field(pattern=r"^SKU-\d{4}$")
    qty: int = Field(default=1, ge=1, le=10)
    customer: str = Field(default="web", min_length=1, max_length=64)


class FaultsIn(BaseModel):
    """`PUT /faults`'s body: the switches to change."""

    model_config = ConfigDict(extra="forbid")

    leak: bool | None = None
    delay_s: float | None = Field(default=None, ge=0, le=120)


class _JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "service": SERVICE,
            "message": record.getMessage(),
        }
        doc.update(getattr(record, "fields", {}))
        if record.exc_info:
            doc["exception"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return json.dumps(doc, ensure_ascii=False, default=str)


def _logger(path: Path) -> logging.Logger:
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(_JsonLines())
    log = logging.getLogger("rootproof.live.order_service")
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    for name in ("uvicorn", "uvicorn.error"):  # server errors go to the same file
        other = logging.getLogger(name)
        other.handlers[:] = [handler]
        other.setLevel(logging.WARNING)
        other.propagate = False
    return log


_route: contextvars.ContextVar[str] = contextvars.ContextVar("route", default="-")


@dataclass
class _Checkout:
    since: float
    route: str
    connection: str
    reported: bool = False


@dataclass
class _State:
    """What the service keeps in memory: switches, leaked connections, checkouts, counters."""

    leak: bool = False
    delay_s: float = 0.0
    leaked: list[sa.Connection] = field(default_factory=list)
    checkouts: dict[int, _Checkout] = field(default_factory=dict)
    requests: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    duration_sum: defaultdict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    duration_count: Counter[tuple[str, str]] = field(default_factory=Counter)
    pool_timeouts: int = 0
    cache_errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _OrderError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class OrderService:
    """The service's parts: engine (QueuePool), Redis client, state, logger, and both apps."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.log = _logger(config.log_file)
        self.state = _State()
        password = config.db_password_file.read_text(encoding="utf-8").splitlines()[0]
        self.engine = sa.create_engine(
            config.db_url,
            poolclass=QueuePool,
            pool_size=config.pool_size,
            max_overflow=0,
            pool_timeout=config.pool_timeout_s,
            connect_args={
                "password": password,
                "application_name": SERVICE,
                "connect_timeout": 3,
                "options": f"-c statement_timeout={config.statement_timeout_ms}",
            },
        )
        event.listen(self.engine, "checkout", self._on_checkout)
        event.listen(self.engine, "checkin", self._on_checkin)
        self._cache_options: dict[str, Any] = {
            "socket_timeout": 1.0,
            "socket_connect_timeout": 1.0,
            "retry": Retry(NoBackoff(), 0),
            "retry_on_error": [],
            "client_name": SERVICE,
            "driver_info": None,
            "decode_responses": True,
        }
        self.cache = redis.Redis.from_url(config.redis_url, **self._cache_options)
        """The long-lived client of the health check's PING (one pooled connection, kept open)."""
        self._stop = threading.Event()
        self._detector = threading.Thread(target=self._detect_leaks, name="leak-detection", daemon=True)

    # -- pool bookkeeping -------------------------------------------------------------------

    def _on_checkout(self, dbapi_conn: Any, record: Any, proxy: Any) -> None:
        with self.state.lock:
            self.state.checkouts[id(record)] = _Checkout(since=time.monotonic(), route=_route.get(), connection=f"{type(dbapi_conn).__module__}.{type(dbapi_conn).__name__}@{id(dbapi_conn):x}")

    def _on_checkin(self, dbapi_conn: Any, record: Any) -> None:
        with self.state.lock:
            self.state.checkouts.pop(id(record), None)

    def _detect_leaks(self) -> None:
        threshold = self.config.leak_detection_s
        while not self._stop.wait(1.0):
            now = time.monotonic()
            with self.state.lock:
                due = [c for c in self.state.checkouts.values() if not c.reported and now - c.since > threshold]
                for c in due:
                    c.reported = True
                out = len(self.state.checkouts)
            for c in due:
                self.log.warning(
                    f"Connection leak detection triggered for {c.connection}, checked out by {c.route} {now - c.since:.1f} s ago "
                    f"(leak detection threshold {threshold:g} s); it has not been returned to the pool",
                    extra={"fields": {"route": c.route, "pool_size": self.config.pool_size, "pool_checked_out": out}},
                )

    def pool_status(self) -> dict[str, Any]:
        """The pool's counters (QueuePool's own) and its bounds."""
        pool = self.engine.pool
        assert isinstance(pool, QueuePool)
        return {
            "size": pool.size(),
            "checked_out": pool.checkedout(),
            "checked_in": pool.checkedin(),
            "overflow": max(0, pool.overflow()),
            "max_overflow": 0,
            "timeout_s": self.config.pool_timeout_s,
        }

    # -- the business ---------------------------------------------------------------------

    def _delay(self) -> None:
        delay = self.state.delay_s
        if delay > 0:
            time.sleep(delay)

    def _place(self, conn: sa.Connection, order: OrderIn) -> dict[str, Any]:
        row = conn.execute(
            sa.text("UPDATE inventory SET stock = stock - :qty, updated_at = now() WHERE sku = :sku AND stock >= :qty RETURNING price_cents"),
            {"sku": order.sku, "qty": order.qty},
        ).first()
        if row is None:
            exists = conn.execute(sa.text("SELECT 1 FROM inventory WHERE sku = :sku"), {"sku": order.sku}).first()
            raise _OrderError(409 if exists else 404, f"{order.sku}: out of stock" if exists else f"{order.sku}: unknown SKU")
        total = int(row.price_cents) * order.qty
        order_id = conn.execute(
            sa.text("INSERT INTO orders (customer, total_cents) VALUES (:customer, :total) RETURNING id"),
            {"customer": order.customer, "total": total},
        ).scalar_one()
        conn.execute(
            sa.text("INSERT INTO order_items (order_id, sku, qty, price_cents) VALUES (:id, :sku, :qty, :price)"),
            {"id": order_id, "sku": order.sku, "qty": order.qty, "price": int(row.price_cents)},
        )
        return {"id": int(order_id), "sku": order.sku, "qty": order.qty, "total_cents": total, "status": "confirmed"}

    def create_order(self, order: OrderIn) -> dict[str, Any]:
        """Take the stock and insert the order in one transaction; cache it."""
        self._delay()
        if self.state.leak:
            placed = self._create_order_leaking(order)
        else:
            with self.engine.begin() as conn:
                placed = self._place(conn, order)
        self._cache_set(placed)
        return placed

    def _create_order_leaking(self, order: OrderIn) -> dict[str, Any]:
        # The bug the pool-leak fault switches on: a hand-managed connection whose close() is
        # missing. It stays checked out (and idle in transaction after the receipt SELECT).
        conn = self.engine.connect()
        try:
            with conn.begin():
                placed = self._place(conn, order)
            conn.execute(sa.text("SELECT id, status, created_at FROM orders WHERE id = :id"), {"id": placed["id"]})
        except BaseException:
            conn.close()
            raise
        with self.state.lock:
            self.state.leaked.append(conn)
        return placed

    def get_order(self, order_id: int) -> dict[str, Any]:
        """The order from the cache, else from the database (then cached)."""
        self._delay()
        cached = self._cache_get(order_id)
        if cached is not None:
            return cached
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.text(
                    "SELECT o.id, i.sku, i.qty, o.total_cents, o.status FROM orders o "
                    "JOIN order_items i ON i.order_id = o.id WHERE o.id = :id"
                ),
                {"id": order_id},
            ).first()
        if row is None:
            raise _OrderError(404, f"order {order_id} not found")
        found = {"id": int(row.id), "sku": row.sku, "qty": int(row.qty), "total_cents": int(row.total_cents), "status": row.status}
        self._cache_set(found)
        return found

    @contextlib.contextmanager
    def _request_cache(self) -> Iterator[redis.Redis]:
        """A cache client of its own for one cache call, closed after it: the request path
        connects per call (as apps without a shared client do), so a Redis that refuses new
        clients fails every cache call at once."""
        client = redis.Redis.from_url(self.config.redis_url, **self._cache_options)
        try:
            yield client
        finally:
            client.close()

    def _cache_get(self, order_id: int) -> dict[str, Any] | None:
        try:
            with self._request_cache() as cache:
                raw = cache.get(f"order:{order_id}")
        except redis.RedisError as exc:
            self._cache_failed("GET", exc)
            return None
        return json.loads(raw) if isinstance(raw, str) else None

    def _cache_set(self, order: dict[str, Any]) -> None:
        try:
            with self._request_cache() as cache:
                cache.set(f"order:{order['id']}", json.dumps(order), ex=self.config.cache_ttl_s)
        except redis.RedisError as exc:
            self._cache_failed("SET", exc)

    def _cache_failed(self, command: str, exc: redis.RedisError) -> None:
        with self.state.lock:
            self.state.cache_errors += 1
        self.log.error(
            f"cache {command} failed: {type(exc).__name__}: {exc}",
            extra={"fields": {"route": _route.get(), "error": f"redis.exceptions.{type(exc).__name__}"}},
        )

    def health(self) -> tuple[int, dict[str, str]]:
        """(status, checks): `SELECT 1` through the pool and a Redis `PING`."""
        checks: dict[str, str] = {}
        try:
            with self.engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            checks["database"] = "ok"
        except sa.exc.SQLAlchemyError as exc:
            checks["database"] = str(exc).splitlines()[0][:300]
        try:
            self.cache.ping()
            checks["cache"] = "ok"
        except redis.RedisError as exc:
            checks["cache"] = f"{type(exc).__name__}: {exc}"[:300]
        ok = all(v == "ok" for v in checks.values())
        return (200 if ok else 503), {"status": "ok" if ok else "degraded", **checks}

    # -- HTTP ---------------------------------------------------------------------------

    def _failed(self, what: str, exc: Exception) -> JSONResponse:
        """Log a failed request the way the app does (message, error class, traceback); 503."""
        if isinstance(exc, sa.exc.TimeoutError):
            with self.state.lock:
                self.state.pool_timeouts += 1
            text = str(exc)
        elif isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None:
            text = str(exc.orig).strip().splitlines()[0]
        else:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        error = f"{type(exc).__module__}.{type(exc).__name__}"
        self.log.error(f"{what} failed: {text}", exc_info=exc, extra={"fields": {"route": _route.get(), "error": error}})
        return JSONResponse({"error": text[:500]}, status_code=503)

    def public_app(self) -> FastAPI:
        """The app nginx proxies to."""
        app = FastAPI(title="order-service", docs_url=None, redoc_url=None, openapi_url=None)
        app.middleware("http")(self._observe)

        @app.get("/healthz")
        def healthz() -> JSONResponse:
            code, body = self.health()
            return JSONResponse(body, status_code=code)

        @app.post("/orders", status_code=201, response_model=None)
        def create(order: OrderIn) -> dict[str, Any] | JSONResponse:
            try:
                return self.create_order(order)
            except _OrderError as exc:
                return JSONResponse({"error": str(exc)}, status_code=exc.status)
            except (sa.exc.SQLAlchemyError, OSError) as exc:
                return self._failed("POST /orders", exc)

        @app.get("/orders/{order_id}", response_model=None)
        def read(order_id: int) -> dict[str, Any] | JSONResponse:
            try:
                return self.get_order(order_id)
            except _OrderError as exc:
                return JSONResponse({"error": str(exc)}, status_code=exc.status)
            except (sa.exc.SQLAlchemyError, OSError) as exc:
                return self._failed(f"GET /orders/{order_id}", exc)

        @app.get("/metrics")
        def metrics() -> PlainTextResponse:
            return PlainTextResponse(self.metrics_text(), media_type="text/plain; version=0.0.4")

        return app

    async def _observe(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        route = request.url.path
        if route.startswith("/orders/"):
            route = "/orders/{id}"
        token = _route.set(f"{request.method} {route}")
        started = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            _route.reset(token)
            seconds = time.perf_counter() - started
            if route not in ("/metrics", "/healthz"):
                with self.state.lock:
                    self.state.requests[(request.method, route, status)] += 1
                    self.state.duration_sum[(request.method, route)] += seconds
                    self.state.duration_count[(request.method, route)] += 1
                fields: dict[str, Any] = {"method": request.method, "route": route, "status": status, "duration_ms": round(seconds * 1000, 1)}
                if request.headers.get("x-request-id"):
                    fields["request_id"] = request.headers["x-request-id"]
                self.log.info(f"{request.method} {request.url.path} {status} {seconds * 1000:.1f} ms", extra={"fields": fields})

    def metrics_text(self) -> str:
        """The Prometheus text exposition of the service's counters and pool gauges."""
        pool = self.pool_status()
        with self.state.lock:
            requests = dict(self.state.requests)
            sums, counts = dict(self.state.duration_sum), dict(self.state.duration_count)
            timeouts, cache_errors = self.state.pool_timeouts, self.state.cache_errors
        lines = ["# TYPE order_service_http_requests_total counter"]
        for (method, route, status), n in sorted(requests.items()):
            lines.append(f'order_service_http_requests_total{{method="{method}",route="{route}",status="{status}"}} {n}')
        lines.append("# TYPE order_service_http_request_duration_seconds summary")
        for (method, route), n in sorted(counts.items()):
            labels = f'method="{method}",route="{route}"'
            lines.append(f"order_service_http_request_duration_seconds_sum{{{labels}}} {sums[(method, route)]:.6f}")
            lines.append(f"order_service_http_request_duration_seconds_count{{{labels}}} {n}")
        for name, value, kind in (
            ("order_service_db_pool_size", pool["size"], "gauge"),
            ("order_service_db_pool_checked_out", pool["checked_out"], "gauge"),
            ("order_service_db_pool_overflow", pool["overflow"], "gauge"),
            ("order_service_db_pool_timeouts_total", timeouts, "counter"),
            ("order_service_cache_errors_total", cache_errors, "counter"),
        ):
            lines += [f"# TYPE {name} {kind}", f"{name} {value}"]
        return "\n".join(lines) + "\n"

    def admin_app(self) -> FastAPI:
        """The fault switch and pool state (a separate loopback port; see the module docstring)."""
        app = FastAPI(title="order-service admin", docs_url=None, redoc_url=None, openapi_url=None)

        @app.get("/healthz")
        def healthz() -> dict[str, str]:
            return {"status": "ok"}

        @app.get("/faults")
        def faults() -> dict[str, Any]:
            return self.faults()

        # Never logged: the service's log is evidence the diagnosis reads, and a switch turned on
        # there would hand it the answer.
        @app.put("/faults")
        def set_faults(body: FaultsIn) -> dict[str, Any]:
            with self.state.lock:
                if body.leak is not None:
                    self.state.leak = body.leak
                if body.delay_s is not None:
                    self.state.delay_s = body.delay_s
            return self.faults()

        @app.post("/faults/reset")
        def reset() -> dict[str, Any]:
            with self.state.lock:
                self.state.leak, self.state.delay_s = False, 0.0
                leaked, self.state.leaked = self.state.leaked, []
            for conn in leaked:
                with contextlib.suppress(sa.exc.SQLAlchemyError):
                    conn.close()
            return self.faults()

        @app.get("/pool")
        def pool() -> dict[str, Any]:
            return self.pool_status()

        return app

    def faults(self) -> dict[str, Any]:
        """The switches and what the leak holds."""
        with self.state.lock:
            return {"leak": self.state.leak, "delay_s": self.state.delay_s, "leaked_connections": len(self.state.leaked)}

    def start(self) -> None:
        """Start the leak detector."""
        self._detector.start()

    def close(self) -> None:
        """Stop the detector, return every connection and close the pool and the cache client."""
        self._stop.set()
        with self.state.lock:
            leaked, self.state.leaked = self.state.leaked, []
        for conn in leaked:
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                conn.close()
        self.engine.dispose()
        with contextlib.suppress(redis.RedisError):
            self.cache.close()


class _Server(uvicorn.Server):
    """A uvicorn server whose signals are handled by `main` (two servers share one process)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _serve(service: OrderService) -> None:
    cfg = service.config
    servers = [
        _Server(uvicorn.Config(app, host=cfg.host, port=port, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=2))
        for app, port in ((service.public_app(), cfg.port), (service.admin_app(), cfg.admin_port))
    ]
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for s in servers:
            s.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    await asyncio.gather(*(s.serve() for s in servers))
    if not all(s.started for s in servers):
        raise SystemExit(3)


def main(argv: list[str] | None = None) -> int:
    """Run the service until SIGTERM/SIGINT; exit 3 when a port could not be bound."""
    parser = argparse.ArgumentParser(prog="python -m rootproof.live.order_service", description="The live environment's order service.")
    parser.add_argument("--config", type=Path, required=True, help="config.json (ServiceConfig)")
    ns = parser.parse_args(argv)
    config = ServiceConfig.model_validate_json(ns.config.read_text(encoding="utf-8"))
    service = OrderService(config)
    service.start()
    service.log.info("order service starting", extra={"fields": {"port": config.port, "pool_size": config.pool_size, "pool_timeout_s": config.pool_timeout_s}})
    try:
        asyncio.run(_serve(service))
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        service.log.info("order service stopped")
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
