"""Live tool calls: the whole ToolBoundary against the local services, beside the bare driver.

For each live call (PostgreSQL activity/locks/settings, Redis info/clients, an nginx error log,
`query_logs` over a JSONL file, `query_metrics` through Prometheus) it prints the median and p95
wall time over N runs of `ToolBoundary.call` on a fresh one-step RunContext (validation, scope,
budget, breaker, the backend's call, redaction, refs, observation, a memory trace sink), and of
the backend's `call` alone, and of the same query run directly with the driver (a psycopg
cursor, redis-py, reading the file, an httpx GET); the ratio of the boundary's median to the
driver's is what the boundary and the backend's shaping cost together.

It starts what it needs: a private Prometheus with the PostgreSQL and Redis exporters
(tests/backends/prom_env.py), a private nginx writing its error log to a tmp folder, and a JSONL
log file; PostgreSQL (127.0.0.1:5432, db test) and Redis (127.0.0.1:6379) are the shared
servers, only read. A backend whose module is not there (written on another branch), or whose
service is down, is printed as `skipped: <why>`. Everything started is stopped by its pid.

Run: PYTHONPATH=src .venv/bin/python bench/live.py [--runs 50] [--json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rootproof.boundary import CircuitBreaker, InMemoryCanonicalStore, ToolBoundary, ToolCallRequest
from rootproof.run import RunBudget, RunContext, RunState, ToolScope
from rootproof.run.records import MemoryTraceSink
from rootproof.targets import LogsTarget, NginxTarget, PostgresTarget, PrometheusTarget, RedisTarget
from rootproof.tools.base import TOOLS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for the tests package
from tests.backends import prom_env  # noqa: E402  (the tests' Prometheus starter, reused)
from tests.backends.procs import free_port, stop_process  # noqa: E402

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/0"
NGINX = "/usr/sbin/nginx"


@dataclass(kw_only=True)
class Case:
    """One live call: its tool call, the backend serving it, and the same query done directly."""

    name: str
    tool: str
    args: dict[str, Any]
    backend: Callable[[], Any]
    """Builds the backend (raises ModuleNotFoundError when its module is missing)."""
    direct: Callable[[], Any]
    skipped: str | None = None


def _backend_class(module: str, name: str) -> Any:
    return getattr(importlib.import_module(f"rootproof.backends.live.{module}"), name)


def _boundary_call(backend: Any, tool: str, args: dict[str, Any]) -> tuple[float, str | None]:
    """One call through a fresh boundary on a one-step run; (seconds, failure message or None)."""
    ctx = RunContext(session_id="bench-live", scope=ToolScope(allowed_tools=frozenset({tool}), backend="live"), budget=RunBudget())
    ctx.advance(RunState.RUNNING)
    ctx.progress.begin_step()
    boundary = ToolBoundary(ctx, backends={"*": backend}, store=InMemoryCanonicalStore(), sink=MemoryTraceSink(), breaker=CircuitBreaker())
    req = ToolCallRequest(name=tool, arguments=args, step_index=0)
    t0 = time.perf_counter()
    out = boundary.call(req)
    elapsed = time.perf_counter() - t0
    inv = out.invocation
    if inv.status != "READY":  # a StrEnum
        return elapsed, f"{inv.status}: {inv.message}"
    return elapsed, None


def _stats(xs: list[float]) -> dict[str, float]:
    ordered = sorted(xs)
    return {"median_ms": round(statistics.median(ordered) * 1000, 3), "p95_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000, 3)}


def measure(case: Case, runs: int, warmup: int = 3) -> dict[str, Any]:
    """Boundary and direct timings of one case (or why it was skipped)."""
    row: dict[str, Any] = {"call": case.name, "tool": case.tool, "args": case.args}
    if case.skipped:
        return {**row, "skipped": case.skipped}
    try:
        backend = case.backend()
    except ModuleNotFoundError as exc:
        return {**row, "skipped": f"module {exc.name} is not on this branch"}
    except Exception as exc:
        return {**row, "skipped": f"backend could not be built: {type(exc).__name__}: {exc}"}
    try:
        through: list[float] = []
        for i in range(warmup + runs):
            elapsed, failure = _boundary_call(backend, case.tool, case.args)
            if failure:
                return {**row, "skipped": f"the call failed: {failure[:300]}"}
            if i >= warmup:
                through.append(elapsed)
        bare: list[float] = []
        model = TOOLS[case.tool].args_model.model_validate(case.args)
        for i in range(warmup + runs):
            t0 = time.perf_counter()
            backend.call(case.tool, model, now=datetime.now(UTC), run_id="bench")
            if i >= warmup:
                bare.append(time.perf_counter() - t0)
        direct: list[float] = []
        for i in range(warmup + runs):
            t0 = time.perf_counter()
            case.direct()
            if i >= warmup:
                direct.append(time.perf_counter() - t0)
    except Exception as exc:
        return {**row, "skipped": f"{type(exc).__name__}: {str(exc)[:300]}"}
    finally:
        backend.close()
    b, k, d = _stats(through), _stats(bare), _stats(direct)
    return {**row, "boundary": b, "backend": k, "direct": d, "ratio": round(b["median_ms"] / d["median_ms"], 2) if d["median_ms"] else None}


# -- what the cases need -------------------------------------------------------------------------


@contextmanager
def private_nginx() -> Iterator[Path | str]:
    """A private nginx proxying to a dead upstream (so its error log fills); yields the log path, or why not."""
    if not os.access(NGINX, os.X_OK):
        yield f"{NGINX} is not installed"
        return
    tmp = Path(tempfile.mkdtemp(prefix="rootproof-bench-nginx-"))
    port, dead = free_port(), free_port()
    temp_paths = "".join(f"    {k}_temp_path {tmp}/{k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (tmp / "nginx.conf").write_text(
        f"worker_processes 1;\npid {tmp}/nginx.pid;\nerror_log {tmp}/error.log info;\nevents {{ worker_connections 64; }}\n"
        f"http {{\n    access_log {tmp}/access.log;\n{temp_paths}"
        f"    upstream app {{ server 127.0.0.1:{dead}; }}\n"
        f"    server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://app; }} }}\n}}\n"
    )
    log = open(tmp / "nginx.out", "wb")  # noqa: SIM115
    proc = subprocess.Popen([NGINX, "-p", str(tmp), "-e", str(tmp / "error.log"), "-c", str(tmp / "nginx.conf"), "-g", "daemon off;"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    try:
        import httpx

        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                if proc.poll() is not None:
                    break
                time.sleep(0.05)
        if proc.poll() is not None:
            yield f"nginx exited: {(tmp / 'nginx.out').read_text(errors='replace')[-300:]}"
            return
        for i in range(200):  # 502s: `connect() failed (111: Connection refused) while connecting to upstream`
            httpx.get(f"http://127.0.0.1:{port}/orders/{i}", timeout=2)
        yield tmp / "error.log"
    finally:
        stop_process(proc)
        shutil.rmtree(tmp, ignore_errors=True)


def write_jsonl(path: Path, lines: int = 2000) -> None:
    """Application log records over the last 20 minutes, some of them timeouts."""
    now = datetime.now(UTC)
    with path.open("w") as f:
        for i in range(lines):
            ts = (now - timedelta(seconds=1200 * (lines - i) / lines)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            level, msg = ("ERROR", f"upstream timeout after 30000 ms calling payments (order {i})") if i % 25 == 0 else ("INFO", f"order {i} confirmed in 12 ms")
            f.write(json.dumps({"ts": ts, "level": level, "service": "order-service", "message": msg}) + "\n")


def _read_matching(path: Path, term: str, parse: bool) -> list[Any]:
    out = []
    with path.open("rb") as f:
        for raw in f.read().splitlines():
            text = raw.decode("utf-8", "replace")
            if term in text.casefold():
                out.append(json.loads(text) if parse else text)
    return out[-50:]


def cases(stack: ExitStack) -> list[Case]:
    """Every case, with what it needs started on `stack`."""
    out: list[Case] = []
    try:
        import psycopg

        conn = stack.enter_context(psycopg.connect(PG_DSN, autocommit=True, connect_timeout=5))

        def sql(q: str) -> Callable[[], Any]:
            return lambda: conn.execute(q).fetchall()

        pg_skip = None
    except Exception as exc:  # driver missing or server down
        pg_skip = f"PostgreSQL at {PG_DSN}: {type(exc).__name__}: {exc}"

        def sql(q: str) -> Callable[[], Any]:
            return lambda: None

    pg = PostgresTarget(kind="postgres", name="pg", dsn=PG_DSN)
    for kind, q in (
        ("activity", "SELECT * FROM pg_stat_activity"),
        ("locks", "SELECT l.*, pg_blocking_pids(l.pid) FROM pg_locks l"),
        ("settings", "SELECT name, setting, unit FROM pg_settings"),
    ):
        out.append(Case(name=f"postgres {kind}", tool="inspect_postgres", args={"kind": kind}, backend=lambda: _backend_class("postgres", "PostgresBackend")(pg, environ={}), direct=sql(q), skipped=pg_skip))
    try:
        import redis

        client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
        client.ping()
        stack.callback(client.close)
        redis_skip = None
    except Exception as exc:
        client, redis_skip = None, f"Redis at {REDIS_URL}: {type(exc).__name__}: {exc}"
    rt = RedisTarget(kind="redis", name="cache", url=REDIS_URL)
    out.append(Case(name="redis info", tool="inspect_redis", args={"kind": "info"}, backend=lambda: _backend_class("redis", "RedisBackend")(rt, environ={}), direct=lambda: client.info() if client else None, skipped=redis_skip))
    out.append(Case(name="redis clients", tool="inspect_redis", args={"kind": "clients"}, backend=lambda: _backend_class("redis", "RedisBackend")(rt, environ={}), direct=lambda: client.client_list() if client else None, skipped=redis_skip))
    error_log = stack.enter_context(private_nginx())
    if isinstance(error_log, Path):
        nt = NginxTarget(kind="nginx", name="edge", error_log=error_log)
        out.append(Case(name="nginx error_log", tool="inspect_nginx", args={"kind": "error_log", "query": "upstream"}, backend=lambda: _backend_class("nginx", "NginxBackend")(nt, environ={}), direct=lambda: _read_matching(error_log, "upstream", parse=False)))
    else:
        out.append(Case(name="nginx error_log", tool="inspect_nginx", args={"kind": "error_log"}, backend=lambda: None, direct=lambda: None, skipped=error_log))
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rootproof-bench-logs-")))
    write_jsonl(tmp / "app.jsonl")
    lt = LogsTarget(kind="logs", name="app", paths=[str(tmp / "app.jsonl")], format="jsonl", service="order-service")
    out.append(Case(name="query_logs jsonl (2000 lines)", tool="query_logs", args={"query": "timeout"}, backend=lambda: _backend_class("logs", "LogsBackend")([lt], environ={}), direct=lambda: _read_matching(tmp / "app.jsonl", "timeout", parse=True)))
    out.extend(_prometheus_cases(stack))
    return out


def _prometheus_cases(stack: ExitStack) -> list[Case]:
    missing = prom_env.missing_binaries()
    if missing:
        return [Case(name="query_metrics", tool="query_metrics", args={}, backend=lambda: None, direct=lambda: None, skipped=f"not installed: {', '.join(missing)}")]
    try:
        env = prom_env.start_prom_env()
    except RuntimeError as exc:
        return [Case(name="query_metrics", tool="query_metrics", args={}, backend=lambda: None, direct=lambda: None, skipped=str(exc)[:300])]
    stack.callback(env.stop)
    import httpx

    from rootproof.backends.live.prometheus import choose_step, selector_of

    http = stack.enter_context(httpx.Client(timeout=5))
    pt = PrometheusTarget(kind="prometheus", name="prom", url=env.url)
    out = []
    for name, args in (
        ("query_metrics pg_up", {"metric": "pg_up", "since": "30m"}),
        ("query_metrics pg_stat_database_* (glob)", {"metric": "pg_stat_database_*", "labels": {"datname": "test"}, "since": "30m"}),
    ):
        promql = selector_of(args["metric"], args.get("labels"))  # type: ignore[arg-type]
        step = choose_step(timedelta(minutes=30))

        def direct(promql: str = promql, step: int = step) -> Any:
            now = time.time()
            resp = http.get(f"{env.url}/api/v1/query_range", params={"query": promql, "start": now - 1800, "end": now, "step": f"{step}s"})
            resp.raise_for_status()
            return resp.json()

        out.append(Case(name=name, tool="query_metrics", args=args, backend=lambda: _backend_class("prometheus", "PrometheusBackend")(pt, environ={}), direct=direct))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    a = ap.parse_args()
    with ExitStack() as stack:
        rows = [measure(c, a.runs) for c in cases(stack)]
    if a.json:
        print(json.dumps({"runs": a.runs, "results": rows}, indent=2))
        return
    print(f"live tool calls, {a.runs} runs each (median / p95, ms); ratio = boundary median / direct median")
    print("boundary: ToolBoundary.call; backend: the backend's call alone; direct: the bare driver")
    print(f"{'call':<42} {'boundary':>17} {'backend':>17} {'direct':>17} {'ratio':>7}")
    for r in rows:
        if "skipped" in r:
            print(f"{r['call']:<42} skipped: {r['skipped']}")
            continue
        cells = " ".join(f"{r[k]['median_ms']:>8.2f} /{r[k]['p95_ms']:>7.2f}" for k in ("boundary", "backend", "direct"))
        print(f"{r['call']:<42} {cells} {r['ratio']:>6.1f}x")


if __name__ == "__main__":
    main()
