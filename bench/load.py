"""Service load: concurrent chat streams and a webhook burst against `rootproof serve`.

Starts `--replicas` (default 1) `rootproof serve` processes, each on a free loopback port (each
with its own data folder in a temporary directory; all with the same API keys), on the
embedded default (SQLite, the offline planner, in-process jobs) unless `--database-url` names
another trace store (PostgreSQL: the webhook runs then go through procrastinate, and any
replica's worker takes them) and `--redis-url` a Redis. More than one replica needs both a
PostgreSQL `--database-url` and a `--redis-url` (else exit 2): the replicas share them.
`--fresh-database` creates a database `rootproof_bench_<hex>` on the server of `--database-url`
(its own database name is only used to connect), runs on it, and drops it at the end (kept with
`--keep`); without it, `--database-url` must name a database of the bench's own (empty, or used
only by earlier runs of the bench: runs started before this one are left out of the checks).

By default the bench also starts a notification receiver on loopback (a ThreadingHTTPServer
answering 200 and recording each POST's `run_id` and arrival time) and starts the replicas with
`ROOTPROOF_NOTIFICATIONS` naming a receivers file it writes (one `webhook` receiver `bench`,
its URL in the variable `RP_BENCH_HOOK_URL`: the service refuses unknown `ROOTPROOF_*`
variables); `--no-notify` leaves notifications off.

Then, over real HTTP with one httpx AsyncClient, the requests spread over the replicas
round-robin (run i to replica i mod N; its checks read from replica i+1 mod N, so with several
replicas every run is read back through another replica than the one it was sent to):

- warm-up: one chat run per replica (not counted);
- chat phases: N concurrent `POST /api/chat` streams (N = each of `--n`), the built-in scenarios
  cycled, each with its own question; figures: wall seconds, runs/s, p50/p95 time to the first
  event and to `done`;
- a webhook burst: `--burst` Alertmanager webhooks at once (`POST /api/alerts/alertmanager`,
  each a distinct `groupKey`), then `GET /api/runs/{id}` polled until terminal; figures: the
  202 latency and the time from the POST to the terminal state.

After each phase (not timed) it checks: every run reached a terminal state; no event lost or
duplicated (the live ids are 1..n, end with `done`, and `GET /api/runs/{id}/events`, replayed
whole and resumed with `Last-Event-ID` in the middle, gives the same ids and data); no run cited
another run's invocation (every `invocation_id` in the published content, the guards' verified
sources and the run's tool events is one of the run's own invocations in its trace); no HTTP
error.

After all phases (not timed): the bench lists the store's runs (`GET /api/runs` with an admin
key, every page) until every run is terminal and, with notifications, every alert run has its
`delivered_at` (at most `SETTLE_TIMEOUT_S`); then it scrapes `GET /metrics` of every replica and
sums `rootproof_runs_total` over the replicas by (status, release_outcome, fallback_type), to
compare with the store's terminal runs grouped the same way (scraped again for up to
`METRICS_SETTLE_S` while they differ: a run is counted just after its terminal write). A
difference is a failed check. Figures: alert received -> delivered p50/p95, from the alert
runs' `received_at` and `delivered_at`, and as the receiver saw it (a POST's arrival minus the
run's `received_at`). The last line is the verdict; the exit status is 1 when a check failed.

Figures go to stdout, progress to stderr.

    .venv/bin/python bench/load.py [--n 10,50,200] [--burst 100] [--replicas N] [--database-url URL]
        [--fresh-database] [--redis-url URL] [--no-notify] [--chat-concurrency K]
        [--worker-concurrency K] [--json FILE]

Two replicas on a fresh PostgreSQL database and Redis:

    .venv/bin/python bench/load.py --n 10 --burst 20 --replicas 2 --fresh-database \
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres --redis-url redis://127.0.0.1:6379/0
    .venv/bin/python bench/load.py --n 10 --burst 20 --replicas 2 \
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/DB --redis-url redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from _figures import pct, progress

from rootproof.service.process import ServeProcess, start_serve

TERMINAL_TIMEOUT_S = 900.0
"""How long a run may take to reach a terminal state before the bench calls it lost."""
CHECK_CONCURRENCY = 16
"""Requests the (untimed) checks send at once."""
KEEPALIVE_EXPIRY_S = 2.0
"""The client's idle-connection expiry (uvicorn closes idle connections after 5 s)."""
MAX_SHOWN = 20
"""Failures printed (all are counted, and all go to --json)."""
SETTLE_TIMEOUT_S = 120.0
"""How long, after the phases, every run may take to be terminal and every alert run delivered."""
METRICS_SETTLE_S = 5.0
"""How long /metrics is scraped again while its run counts differ from the store's."""
HOOK_VARIABLE = "RP_BENCH_HOOK_URL"
"""The variable holding the receiver's URL (not ROOTPROOF_*: the service refuses unknown ones)."""
ALERT_KINDS = ("alertmanager", "grafana")
RunKey = tuple[str, str, str]
"""(status, release_outcome, fallback_type), "" for a null."""
Sample = tuple[str, dict[str, str], float]
"""A Prometheus sample: name, labels, value."""


def fmt(x: float | None, width: int = 7) -> str:
    return f"{'-':>{width}}" if x is None else f"{x:{width}.2f}"


def shown_url(url: str) -> str:
    """A database URL without its password."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads: show its scheme only
        return url.split(":", 1)[0] + "://***"


# -- the server -----------------------------------------------------------------------------


def serve(env: dict[str, str], home: Path) -> ServeProcess:
    """Start `rootproof serve` on a free loopback port and wait for `/readyz`."""
    try:
        return start_serve(env, home / "serve.log")
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None


def service_env(home: Path, keys: str, args: argparse.Namespace, hook: str | None) -> dict[str, str]:
    """A replica's environment: this one without ROOTPROOF_* settings, plus the bench's (its
    own data folder; the keys, store, Redis and receiver every replica shares)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOTPROOF_") and k != HOOK_VARIABLE}
    env.update(
        {
            "ROOTPROOF_HOME": str(home),
            "ROOTPROOF_API_KEYS": keys,
            "ROOTPROOF_CHAT_CONCURRENCY": str(args.chat_concurrency),
            "ROOTPROOF_WORKER_CONCURRENCY": str(args.worker_concurrency),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if args.database_url:
        env["ROOTPROOF_DATABASE_URL"] = args.database_url
    if args.redis_url:
        env["ROOTPROOF_REDIS_URL"] = args.redis_url
    if hook is not None:
        env["ROOTPROOF_NOTIFICATIONS"] = str(home.parent / "notify.yaml")
        env[HOOK_VARIABLE] = hook
    return env


def write_receivers(folder: Path) -> Path:
    """The notifications file every replica reads: one webhook receiver, its URL in HOOK_VARIABLE."""
    path = folder / "notify.yaml"
    path.write_text(
        f"receivers:\n  - name: bench\n    kind: webhook\n    url_env: {HOOK_VARIABLE}\n", encoding="utf-8"
    )
    return path


def start_replicas(
    n: int, keys: str, args: argparse.Namespace, home: Path, hook: str | None
) -> list[ServeProcess]:
    """N replicas, one after another (the first migrates a fresh store); all stopped if one fails."""
    started: list[ServeProcess] = []
    try:
        for i in range(n):
            folder = home / f"replica-{i + 1}"
            folder.mkdir()
            progress(f"starting rootproof serve, replica {i + 1} of {n} (data folder {folder})")
            started.append(serve(service_env(folder, keys, args, hook), folder))
    except BaseException:
        stop_replicas(started)
        raise
    return started


def stop_replicas(replicas: list[ServeProcess]) -> None:
    """SIGTERM to every replica at once, then wait for each."""
    threads = [threading.Thread(target=r.stop, name=f"stop-{i}") for i, r in enumerate(replicas)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# -- the database ----------------------------------------------------------------------------


def create_database(url: str) -> tuple[str, str]:
    """A new database `rootproof_bench_<hex>` on the PostgreSQL server of `url` (reached through
    its `postgres` database): (its URL, its name)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    base = make_url(url)
    name = f"rootproof_bench_{secrets.token_hex(6)}"
    engine = create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE template0'))
    finally:
        engine.dispose()
    return base.set(database=name).render_as_string(hide_password=False), name


def drop_database(url: str, name: str) -> None:
    """Drop the database `create_database` made (its connections closed by force)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    engine = create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        engine.dispose()


# -- the notification receiver ----------------------------------------------------------------


@dataclass
class Hook:
    """One POST the receiver got."""

    run_id: str | None
    at: float
    """Its arrival (epoch seconds)."""
    idempotency_key: str | None


class HookReceiver:
    """The notification receiver: a ThreadingHTTPServer on loopback that answers every POST 200
    and records its `run_id` and arrival time."""

    def __init__(self) -> None:
        self.hooks: list[Hook] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                at = time.time()
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    doc = json.loads(body)
                except ValueError:
                    doc = None
                run_id = doc.get("run_id") if isinstance(doc, dict) else None
                receiver.record(
                    Hook(run_id if isinstance(run_id, str) else None, at, self.headers.get("Idempotency-Key"))
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, name="hook-receiver", daemon=True)
        self._thread.start()

    def record(self, hook: Hook) -> None:
        with self._lock:
            self.hooks.append(hook)

    def seen(self) -> list[Hook]:
        with self._lock:
            return list(self.hooks)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- HTTP -----------------------------------------------------------------------------------


@dataclass
class Sse:
    """One server-sent event as the client read it."""

    id: str | None
    event: str | None
    data: Any


async def read_sse(lines: AsyncIterator[str]) -> AsyncIterator[Sse]:
    """The events of a stream (comment lines, the heartbeats, are skipped)."""
    event: str | None = None
    ident: str | None = None
    data: list[str] = []
    async for line in lines:
        if line == "":
            if event is not None or data:
                yield Sse(id=ident, event=event, data=json.loads("\n".join(data)) if data else None)
            event, ident, data = None, None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "id":
            ident = value
        elif name == "data":
            data.append(value)


class HttpTally:
    """Every answer's status code, and the requests that failed without one."""

    def __init__(self) -> None:
        self.codes: Counter[int] = Counter()
        self.transport: Counter[str] = Counter()

    def saw(self, code: int) -> None:
        self.codes[code] += 1

    def failed(self, what: str, exc: BaseException) -> None:
        self.transport[f"{what}: {type(exc).__name__}"] += 1

    def errors(self, expected: Iterable[int] = (200, 202)) -> dict[str, int]:
        ok = set(expected)
        out = {str(c): n for c, n in sorted(self.codes.items()) if c not in ok}
        out.update(self.transport)
        return out


@dataclass
class Run:
    """One run the bench started, and what it saw of it."""

    kind: str
    scenario: str
    index: int
    replica: int = 0
    """The replica the run was sent to (its checks read from the next one)."""
    run_id: str | None = None
    session_id: str | None = None
    live: list[Sse] = field(default_factory=list)
    t_first: float | None = None
    t_done: float | None = None
    t_accepted: float | None = None
    t_terminal: float | None = None
    """When the bench's poll saw the run terminal (seconds from the phase's start)."""
    posted_at: float | None = None
    """When the POST was sent (epoch seconds)."""
    ended_at: float | None = None
    """The run's `ended_at` in its trace (epoch seconds)."""
    status: str | None = None
    release_outcome: str | None = None
    error: str | None = None


class Bench:
    """The client side: one AsyncClient, the replicas' URLs, the tally, the failures."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        urls: list[str],
        key: str,
        admin_key: str,
        scenarios: list[tuple[str, str]],
        poll_s: float,
    ) -> None:
        self.client = client
        self.urls = urls
        self.headers = {"Authorization": f"Bearer {key}"}
        self.admin_headers = {"Authorization": f"Bearer {admin_key}"}
        self.scenarios = scenarios
        self.poll_s = poll_s
        self.tally = HttpTally()
        self.failures: list[str] = []
        self.checks: Counter[str] = Counter()
        self.seen_invocations: dict[str, str] = {}
        """Every invocation id seen in a trace, and its run (no two runs share one)."""
        self._sem = asyncio.Semaphore(CHECK_CONCURRENCY)

    def fail(self, check: str, message: str) -> None:
        self.checks[check + "_failed"] += 1
        self.failures.append(f"{check}: {message}")

    def at(self, replica: int) -> str:
        """The base URL of replica `replica` (round-robin)."""
        return self.urls[replica % len(self.urls)]

    async def get(
        self, path: str, replica: int = 0, *, admin: bool = False, **kwargs: Any
    ) -> httpx.Response | None:
        try:
            resp = await self.client.get(
                self.at(replica) + path, headers=self.admin_headers if admin else self.headers, **kwargs
            )
        except httpx.HTTPError as exc:
            self.tally.failed("GET " + path.rsplit("/", 1)[0] + "/…", exc)
            return None
        self.tally.saw(resp.status_code)
        return resp

    async def events(self, run_id: str, replica: int, last_event_id: int | None = None) -> list[Sse] | None:
        headers = dict(self.headers)
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        try:
            async with self.client.stream(
                "GET", f"{self.at(replica)}/api/runs/{run_id}/events", headers=headers
            ) as resp:
                self.tally.saw(resp.status_code)
                if resp.status_code != 200:
                    await resp.aread()
                    return None
                return [ev async for ev in read_sse(resp.aiter_lines())]
        except httpx.HTTPError as exc:
            self.tally.failed("GET /api/runs/…/events", exc)
            return None

    # -- chat ---------------------------------------------------------------------------
    async def chat(self, run: Run, question: str, t0: float) -> None:
        body = {"message": question, "scenario": run.scenario}
        try:
            async with self.client.stream(
                "POST", self.at(run.replica) + "/api/chat", json=body, headers=self.headers
            ) as resp:
                self.tally.saw(resp.status_code)
                if resp.status_code != 200:
                    run.error = f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}"
                    return
                async for ev in read_sse(resp.aiter_lines()):
                    now = time.perf_counter() - t0
                    if run.t_first is None:
                        run.t_first = now
                    run.live.append(ev)
                    data = ev.data if isinstance(ev.data, dict) else {}
                    if run.run_id is None and isinstance(data.get("run_id"), str):
                        run.run_id = data["run_id"]  # every event names its run (the first is `metadata`)
                    if ev.event == "metadata":
                        run.session_id = (data.get("data") or {}).get("session_id")
                    if ev.event == "done":
                        run.t_done = now
        except httpx.HTTPError as exc:
            self.tally.failed("POST /api/chat", exc)
            run.error = f"{type(exc).__name__}: {exc}"

    async def chat_phase(self, n: int, phase: int) -> tuple[list[Run], float]:
        picked = [self.scenarios[(phase + i) % len(self.scenarios)] for i in range(n)]
        runs = [Run(kind="chat", scenario=sid, index=i, replica=i) for i, (sid, _) in enumerate(picked)]
        t0 = time.perf_counter()
        await asyncio.gather(
            *(self.chat(run, question, t0) for run, (_, question) in zip(runs, picked, strict=True))
        )
        return runs, time.perf_counter() - t0

    # -- webhooks -----------------------------------------------------------------------
    async def webhook(self, run: Run, t0: float) -> None:
        group = f'{{}}:{{alertname="LoadBench"}}:{uuid.uuid4()}'
        body = {
            "version": "4",
            "status": "firing",
            "receiver": "rootproof",
            "groupKey": group,
            "groupLabels": {"alertname": "LoadBench"},
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": "LoadBench", "severity": "critical", "service": run.scenario},
                    "annotations": {"summary": f"load bench alert {run.index} ({run.scenario})"},
                    "startsAt": "2026-07-22T09:35:00Z",
                }
            ],
        }
        run.posted_at = time.time()
        try:
            resp = await self.client.post(
                self.at(run.replica) + "/api/alerts/alertmanager",
                params={"scenario": run.scenario},
                json=body,
                headers=self.headers,
            )
        except httpx.HTTPError as exc:
            self.tally.failed("POST /api/alerts/alertmanager", exc)
            run.error = f"{type(exc).__name__}: {exc}"
            return
        run.t_accepted = time.perf_counter() - t0
        self.tally.saw(resp.status_code)
        if resp.status_code != 202:
            run.error = f"HTTP {resp.status_code}: {resp.text[:200]}"
            return
        doc = resp.json()
        if doc.get("duplicate") or len(doc.get("run_ids") or []) != 1:
            run.error = f"unexpected answer to a fresh groupKey: {doc}"
            return
        run.run_id = doc["run_ids"][0]
        await self.until_terminal(run, t0)

    async def until_terminal(self, run: Run, t0: float) -> None:
        """Poll `GET /api/runs/{id}` until the run's status is set (or the bench gives up)."""
        deadline = time.perf_counter() + TERMINAL_TIMEOUT_S
        while time.perf_counter() < deadline:
            resp = await self.get(f"/api/runs/{run.run_id}", run.replica + 1)
            if resp is not None and resp.status_code == 200:
                doc = resp.json()
                if doc.get("status") is not None:
                    run.t_terminal = time.perf_counter() - t0
                    run.status, run.release_outcome = doc["status"], doc.get("release_outcome")
                    run.session_id = doc.get("session_id")
                    return
            await asyncio.sleep(self.poll_s)

    async def webhook_phase(self, n: int) -> tuple[list[Run], float]:
        """The burst; returns the runs and the phase's start (epoch seconds)."""
        runs = [
            Run(kind="webhook", scenario=self.scenarios[i % len(self.scenarios)][0], index=i, replica=i)
            for i in range(n)
        ]
        started = time.time()
        t0 = time.perf_counter()
        await asyncio.gather(*(self.webhook(r, t0) for r in runs))
        return runs, started

    # -- checks -------------------------------------------------------------------------
    async def check(self, runs: list[Run], phase: str) -> None:
        async def one(run: Run) -> None:
            async with self._sem:
                await self.check_run(run, phase)

        await asyncio.gather(*(one(r) for r in runs))

    async def check_run(self, run: Run, phase: str) -> None:
        where = f"{phase} run #{run.index} ({run.scenario}, {run.run_id}, sent to replica {run.replica % len(self.urls) + 1})"
        reader = run.replica + 1
        if run.error is not None or run.run_id is None:
            self.fail("started", f"{where}: {run.error or 'no run id in the stream'}")
            return
        if run.status is None:
            await self.until_terminal(run, time.perf_counter())
        if run.status is None:
            self.fail("terminal", f"{where}: no terminal state after {TERMINAL_TIMEOUT_S:.0f} s")
            return
        self.checks["terminal"] += 1
        if run.status != "SUCCESS":
            record = await self.get(
                f"/api/diagnosis/{run.session_id}/trace", reader, params={"runId": run.run_id}
            )
            error = (
                (record.json().get("run") or {}).get("error")
                if record is not None and record.status_code == 200
                else None
            )
            self.fail("succeeded", f"{where}: ended {run.status}: {error}")
        replay = await self.events(run.run_id, reader)
        if replay is None:
            self.fail("events", f"{where}: GET /events failed")
            return
        reference = run.live if run.kind == "chat" else replay
        problem = stream_problem(reference, run.run_id)
        if problem is None and run.kind == "chat" and key_of(replay) != key_of(run.live):
            problem = f"the replay differs from the live stream (live ids {ids_of(run.live)}, replay ids {ids_of(replay)})"
        if problem is None:
            k = len(reference) // 2
            resumed = await self.events(run.run_id, reader, last_event_id=k)
            if resumed is None:
                problem = f"GET /events with Last-Event-ID: {k} failed"
            elif key_of(resumed) != key_of(reference[k:]):
                problem = f"resumed after {k}: ids {ids_of(resumed)}, expected {ids_of(reference[k:])}"
        if problem is not None:
            self.fail("events", f"{where}: {problem}")
        else:
            self.checks["events"] += 1
        await self.check_citations(run, where, reference)

    async def check_citations(self, run: Run, where: str, stream: list[Sse]) -> None:
        resp = await self.get(
            f"/api/diagnosis/{run.session_id}/trace", run.replica + 1, params={"runId": run.run_id}
        )
        if resp is None or resp.status_code != 200:
            self.fail(
                "citations",
                f"{where}: trace not readable ({resp.status_code if resp is not None else 'no answer'})",
            )
            return
        doc = resp.json()
        own = {i.get("invocation_id") for i in doc.get("invocations", [])}
        foreign_rows = [
            i.get("invocation_id") for i in doc.get("invocations", []) if i.get("run_id") != run.run_id
        ]
        cited = set(invocation_ids(doc.get("release", {}).get("content")))
        cited |= set(invocation_ids(doc.get("guards")))
        cited |= set(invocation_ids([ev.data for ev in stream if ev.event == "tool"]))
        foreign = sorted(cited - own)
        if foreign or foreign_rows:
            self.fail(
                "citations",
                f"{where}: cites invocations not its own {foreign[:5]}; foreign rows in its trace {foreign_rows[:5]}",
            )
        else:
            self.checks["citations"] += 1
        self.checks["cited_invocations"] += len(cited)
        ended = (doc.get("run") or {}).get("ended_at")
        if ended:
            run.ended_at = epoch(ended)
        for inv in own:
            if inv in self.seen_invocations and self.seen_invocations[inv] != run.run_id:
                self.fail(
                    "citations", f"{where}: invocation {inv} also belongs to run {self.seen_invocations[inv]}"
                )
            self.seen_invocations[inv] = run.run_id or ""

    # -- after the phases: the store, the deliveries, the metrics ---------------------------
    async def list_runs(self, since: str) -> list[dict[str, Any]] | None:
        """Every run of the store started at or after `since` (`GET /api/runs` as an admin,
        page after page), or None when a page could not be read."""
        runs: list[dict[str, Any]] = []
        cursor: str | None = None
        for page in range(10_000):
            params: dict[str, Any] = {"limit": 200, "since": since}
            if cursor:
                params["cursor"] = cursor
            resp = await self.get("/api/runs", page, admin=True, params=params)
            if resp is None or resp.status_code != 200:
                return None
            doc = resp.json()
            runs.extend(doc["runs"])
            cursor = doc.get("next_cursor")
            if not cursor:
                break
        return runs

    async def settle(self, since: str, notify: bool) -> list[dict[str, Any]]:
        """The store's runs once every one is terminal and (with `notify`) every final alert run
        delivered, or as they are after SETTLE_TIMEOUT_S (each one left counted as a failure)."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            runs = await self.list_runs(since)
            open_runs = [r["run_id"] for r in runs or [] if r["status"] is None]
            undelivered = (
                [r["run_id"] for r in final_alert_runs(runs or []) if r["delivered_at"] is None]
                if notify
                else []
            )
            if runs is not None and not open_runs and not undelivered:
                return runs
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.5)
        if runs is None:
            self.fail("settle", "GET /api/runs failed")
            return []
        if open_runs:
            self.fail(
                "settle",
                f"{len(open_runs)} run(s) not terminal {SETTLE_TIMEOUT_S:.0f} s after the phases: {open_runs[:5]}",
            )
        if undelivered:
            self.fail(
                "delivered",
                f"{len(undelivered)} alert run(s) without delivered_at {SETTLE_TIMEOUT_S:.0f} s after the phases: {undelivered[:5]}",
            )
        return runs

    async def scrape(self) -> list[list[Sample]] | None:
        """The samples of every replica's /metrics that the bench reads (by sample name and
        labels), or None when one could not be read."""
        out = []
        for i in range(len(self.urls)):
            resp = await self.get("/metrics", i)
            if resp is None or resp.status_code != 200:
                self.fail(
                    "metrics",
                    f"GET /metrics of replica {i + 1} failed ({resp.status_code if resp is not None else 'no answer'})",
                )
                return None
            out.append(metric_samples(resp.text))
        return out

    async def metrics_check(self, store: Counter[RunKey]) -> tuple[list[Counter[RunKey]], list[list[Sample]]]:
        """Every replica's `rootproof_runs_total` by key (scraped again for up to METRICS_SETTLE_S
        while their sum differs from `store`), and every replica's samples."""
        deadline = time.monotonic() + METRICS_SETTLE_S
        while True:
            scraped = await self.scrape()
            if scraped is None:
                return [], []
            per_replica = [runs_total(samples) for samples in scraped]
            if sum(per_replica, Counter()) == store or time.monotonic() >= deadline:
                return per_replica, scraped
            await asyncio.sleep(0.5)


def epoch(value: str) -> float:
    """An RFC 3339 instant as epoch seconds (a naive one read as UTC)."""
    when = datetime.fromisoformat(value)
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


def final_alert_runs(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The alert runs no other run replaces (`retry_of`): the ones that notify."""
    replaced = {r["retry_of"] for r in runs if r.get("retry_of")}
    return [r for r in runs if r["kind"] in ALERT_KINDS and r["run_id"] not in replaced]


def run_key(status: str | None, release_outcome: str | None, fallback_type: str | None) -> RunKey:
    return (status or "", release_outcome or "", fallback_type or "")


def store_counts(runs: list[dict[str, Any]]) -> Counter[RunKey]:
    """The store's terminal runs by (status, release_outcome, fallback_type)."""
    return Counter(
        run_key(r["status"], r["release_outcome"], r["fallback_type"])
        for r in runs
        if r["status"] is not None
    )


def metric_samples(text: str) -> list[Sample]:
    """The samples of one /metrics answer the bench reads: `rootproof_runs_total` and the
    `rootproof_alert_to_delivery_seconds` histogram's."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "rootproof_runs_total"
        or sample.name.startswith("rootproof_alert_to_delivery_seconds")
    ]


def runs_total(samples: list[Sample]) -> Counter[RunKey]:
    """`rootproof_runs_total` of one replica by (status, release_outcome, fallback_type), summed over `kind`."""
    out: Counter[RunKey] = Counter()
    for name, labels, value in samples:
        if name == "rootproof_runs_total" and value:
            out[
                run_key(labels.get("status"), labels.get("release_outcome"), labels.get("fallback_type"))
            ] += round(value)
    return out


def sample_sum(replicas: list[list[Sample]], name: str) -> float:
    """A sample without labels (a histogram's `_count`, `_sum`) summed over the replicas."""
    return sum(value for samples in replicas for n, _, value in samples if n == name)


def ids_of(events: list[Sse]) -> list[str | None]:
    return [e.id for e in events]


def key_of(events: list[Sse]) -> list[tuple[str | None, str | None, str]]:
    return [(e.id, e.event, json.dumps(e.data, sort_keys=True, ensure_ascii=False)) for e in events]


def stream_problem(events: list[Sse], run_id: str) -> str | None:
    """What is wrong with a run's whole stream, or None: ids 1..n, each event's data naming the
    run, its type and seq, one `done` and last."""
    errors = [e for e in events if e.event == "error"]
    if errors:
        return f"an error event after {len(events) - len(errors)} events ({[e.event for e in events if e.event != 'error'][-2:]}...): {str(errors[0].data)[:300]}"
    ids = ids_of(events)
    if ids != [str(i) for i in range(1, len(events) + 1)]:
        return f"ids not 1..{len(events)}: {ids}"
    for e in events:
        d = e.data if isinstance(e.data, dict) else {}
        if d.get("run_id") != run_id or d.get("type") != e.event or str(d.get("seq")) != e.id:
            return f"event {e.id} ({e.event}) does not name this run, its type and seq: {str(e.data)[:200]}"
    types = [e.event for e in events]
    if types.count("done") != 1 or types[-1] != "done":
        return f"expected one `done`, last; got {types}"
    return None


def invocation_ids(value: Any) -> Iterable[str]:
    """Every string under an `invocation_id` key anywhere in `value`."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "invocation_id" and isinstance(v, str):
                yield v
            else:
                yield from invocation_ids(v)
    elif isinstance(value, list):
        for v in value:
            yield from invocation_ids(v)


# -- figures --------------------------------------------------------------------------------


def chat_figures(n: int, runs: list[Run], wall: float) -> dict[str, Any]:
    first = [r.t_first for r in runs if r.t_first is not None]
    done = [r.t_done for r in runs if r.t_done is not None]
    return {
        "phase": f"chat N={n}",
        "kind": "chat",
        "runs": n,
        "completed": len(done),
        "wall_s": round(wall, 3),
        "runs_per_s": round(len(done) / wall, 3) if wall else None,
        "first_event_p50_s": pct(first, 50),
        "first_event_p95_s": pct(first, 95),
        "done_p50_s": pct(done, 50),
        "done_p95_s": pct(done, 95),
        "statuses": dict(Counter(f"{r.status}/{r.release_outcome}" for r in runs)),
    }


def webhook_figures(n: int, runs: list[Run], started: float) -> dict[str, Any]:
    """Wall: the burst's start to the last run's `ended_at`; terminal: each run's POST to its
    `ended_at` (one clock: the server runs on this host); seen: to the poll that saw it."""
    accepted = [r.t_accepted for r in runs if r.t_accepted is not None and r.run_id is not None]
    terminal = [r.ended_at - r.posted_at for r in runs if r.ended_at is not None and r.posted_at is not None]
    seen = [r.t_terminal for r in runs if r.t_terminal is not None]
    ends = [r.ended_at for r in runs if r.ended_at is not None]
    wall = max(ends) - started if ends else max(seen, default=0.0)
    return {
        "phase": f"webhooks {n}",
        "kind": "webhook",
        "runs": n,
        "completed": len(seen),
        "wall_s": round(wall, 3),
        "runs_per_s": round(len(seen) / wall, 3) if wall else None,
        "accepted_p50_s": pct(accepted, 50),
        "accepted_p95_s": pct(accepted, 95),
        "terminal_p50_s": pct(terminal, 50),
        "terminal_p95_s": pct(terminal, 95),
        "terminal_seen_p50_s": pct(seen, 50),
        "terminal_seen_p95_s": pct(seen, 95),
        "statuses": dict(Counter(f"{r.status}/{r.release_outcome}" for r in runs)),
    }


def print_phase(fig: dict[str, Any]) -> None:
    if fig["kind"] == "chat":
        latency = (
            f"first event p50 {fmt(fig['first_event_p50_s'])} s  p95 {fmt(fig['first_event_p95_s'])} s   "
            f"done p50 {fmt(fig['done_p50_s'])} s  p95 {fmt(fig['done_p95_s'])} s"
        )
    else:
        latency = (
            f"202 p50 {fmt(fig['accepted_p50_s'])} s  p95 {fmt(fig['accepted_p95_s'])} s   "
            f"terminal p50 {fmt(fig['terminal_p50_s'])} s  p95 {fmt(fig['terminal_p95_s'])} s"
        )
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(fig["statuses"].items()))
    print(
        f"{fig['phase']:<14} runs {fig['runs']:>4}  wall {fig['wall_s']:7.2f} s  {fig['runs_per_s'] or 0:6.2f} runs/s   {latency}   [{statuses}]",
        flush=True,
    )


def delivery_figures(
    runs: list[dict[str, Any]], hooks: list[Hook] | None, histogram_count: float
) -> dict[str, Any]:
    """Alert received -> delivered: from the store (`delivered_at` - `received_at` of the final
    alert runs) and at the receiver (a run's first POST - its `received_at`)."""
    alerts = final_alert_runs(runs)
    received = {r["run_id"]: epoch(r["received_at"]) for r in alerts if r.get("received_at")}
    stored = [
        epoch(r["delivered_at"]) - received[r["run_id"]]
        for r in alerts
        if r.get("delivered_at") and r["run_id"] in received
    ]
    first: dict[str, float] = {}
    for hook in hooks or []:
        if hook.run_id is not None:
            first[hook.run_id] = min(first.get(hook.run_id, hook.at), hook.at)
    at_receiver = [first[i] - t for i, t in received.items() if i in first]
    return {
        "notify": hooks is not None,
        "alert_runs": len(alerts),
        "delivered": len(stored),
        "received_to_delivered_p50_s": pct(stored, 50),
        "received_to_delivered_p95_s": pct(stored, 95),
        "receiver_p50_s": pct(at_receiver, 50),
        "receiver_p95_s": pct(at_receiver, 95),
        "receiver_posts": len(hooks or []),
        "receiver_runs": len(first),
        "receiver_repeats": len(hooks or []) - len(first),
        "receiver_unknown_run_ids": sorted(
            {h.run_id or "(none)" for h in hooks or []} - {r["run_id"] for r in alerts}
        ),
        "receiver_missing_run_ids": sorted(set(received) - set(first)) if hooks is not None else [],
        "alert_to_delivery_histogram_count": round(histogram_count),
    }


def print_delivery(fig: dict[str, Any]) -> None:
    stored = (
        f"p50 {fmt(fig['received_to_delivered_p50_s'])} s  p95 {fmt(fig['received_to_delivered_p95_s'])} s"
    )
    if not fig["notify"]:
        print(
            f"delivery       notifications off (--no-notify): {fig['alert_runs']} alert runs, {fig['delivered']} with delivered_at",
            flush=True,
        )
        return
    print(
        f"delivery       alert received -> delivered  {stored}  (store: delivered_at - received_at, {fig['delivered']} of {fig['alert_runs']} alert runs)   "
        f"at the receiver p50 {fmt(fig['receiver_p50_s'])} s  p95 {fmt(fig['receiver_p95_s'])} s  "
        f"(POST arrival - received_at; {fig['receiver_posts']} POSTs for {fig['receiver_runs']} runs, {fig['receiver_repeats']} repeated; "
        f"rootproof_alert_to_delivery_seconds count {fig['alert_to_delivery_histogram_count']})",
        flush=True,
    )


def print_runs_total(
    per_replica: list[Counter[RunKey]], metrics: Counter[RunKey], store: Counter[RunKey]
) -> None:
    """rootproof_runs_total (each replica's, their sum) beside the store's terminal runs."""
    keys = sorted(set(metrics) | set(store))
    heads = [f"replica {i + 1}" for i in range(len(per_replica))]
    print(
        "runs by (status, release_outcome, fallback_type): rootproof_runs_total of each replica and their sum (metrics), the store's terminal runs (store)",
        flush=True,
    )
    print(
        f"  {'status':<10} {'release_outcome':<16} {'fallback_type':<30} "
        + " ".join(f"{h:>10}" for h in [*heads, "metrics", "store"]),
        flush=True,
    )
    for key in [*keys, None]:
        label = ("total", "", "") if key is None else (key[0] or "-", key[1] or "-", key[2] or "-")
        cells = [sum(c.values()) if key is None else c.get(key, 0) for c in [*per_replica, metrics, store]]
        mark = "" if key is None or metrics.get(key, 0) == store.get(key, 0) else "   <- differs"
        print(
            f"  {label[0]:<10} {label[1]:<16} {label[2]:<30} " + " ".join(f"{n:>10}" for n in cells) + mark,
            flush=True,
        )


def by_key(counts: Counter[RunKey]) -> dict[str, int]:
    """A count by (status, release_outcome, fallback_type) for --json: `status/outcome/fallback`."""
    return {"/".join(k): n for k, n in sorted(counts.items())}


# -- main -----------------------------------------------------------------------------------


def count_tracebacks(log: str) -> int:
    """Tracebacks in a log, a chained exception counted once."""
    count, previous = 0, ""
    for line in log.splitlines():
        if line.startswith("Traceback (most recent call last)") and not previous.startswith(
            ("The above exception", "During handling")
        ):
            count += 1
        if line.strip():
            previous = line
    return count


def scenario_questions() -> list[tuple[str, str]]:
    """(id, question) of every built-in scenario."""
    from rootproof.scenarios.loader import list_scenarios, load_scenario

    return [(p.name, load_scenario(p.name).question) for p in list_scenarios()]


def counts(text: str) -> list[int] | None:
    """Comma-separated whole numbers of at least 1, or None."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        return None
    return values if values and all(v >= 1 for v in values) else None


async def bench(
    args: argparse.Namespace,
    urls: list[str],
    keys: tuple[str, str],
    scenarios: list[tuple[str, str]],
    sizes: list[int],
    since: str,
    receiver: HookReceiver | None,
) -> dict[str, Any]:
    biggest = max([*sizes, args.burst])
    # Idle connections expire well before uvicorn's 5 s keep-alive timeout: with both at 5 s a
    # request can go out on a connection the server is closing (a ReadError, not the service's).
    limits = httpx.Limits(
        max_connections=biggest + CHECK_CONCURRENCY + 16,
        max_keepalive_connections=biggest + CHECK_CONCURRENCY + 16,
        keepalive_expiry=KEEPALIVE_EXPIRY_S,
    )
    timeout = httpx.Timeout(connect=60, read=TERMINAL_TIMEOUT_S, write=60, pool=TERMINAL_TIMEOUT_S)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        b = Bench(client, urls, keys[0], keys[1], scenarios, args.poll)
        progress(f"warm-up: one chat run per replica (not counted), {len(urls)} in all")
        warm = [Run(kind="chat", scenario=scenarios[0][0], index=0, replica=i) for i in range(len(urls))]
        t0 = time.perf_counter()
        await asyncio.gather(*(b.chat(w, scenarios[0][1], t0) for w in warm))
        warm_s = time.perf_counter() - t0
        print(
            f"warm-up        {len(warm)} chat run(s), one per replica, in {warm_s:.2f} s (not counted)",
            flush=True,
        )
        phases = []
        for p, n in enumerate(sizes):
            progress(f"chat N={n}: {n} concurrent streams over {len(urls)} replica(s)")
            runs, wall = await b.chat_phase(n, p)
            progress(f"chat N={n}: checking {n} runs")
            await b.check(runs, f"chat N={n}")
            fig = chat_figures(n, runs, wall)
            print_phase(fig)
            phases.append(fig)
        if args.burst:
            progress(f"webhooks: a burst of {args.burst} over {len(urls)} replica(s)")
            runs, started = await b.webhook_phase(args.burst)
            progress(f"webhooks: checking {args.burst} runs")
            await b.check(runs, f"webhooks {args.burst}")
            fig = webhook_figures(args.burst, runs, started)
            print_phase(fig)
            phases.append(fig)
        notify = receiver is not None
        progress(
            "after the phases: every run terminal"
            + (", every alert run delivered" if notify else "")
            + f" (at most {SETTLE_TIMEOUT_S:.0f} s)"
        )
        stored = await b.settle(since, notify)
        store = store_counts(stored)
        progress(f"scraping /metrics of {len(urls)} replica(s)")
        per_replica, scraped = await b.metrics_check(store)
    metrics: Counter[RunKey] = sum(per_replica, Counter())
    equal = bool(scraped) and metrics == store
    print_runs_total(per_replica, metrics, store)
    print(
        f"metrics: rootproof_runs_total over {len(urls)} replica(s) equals the store's terminal runs by (status, release_outcome, fallback_type): {'yes' if equal else 'no'}",
        flush=True,
    )
    if scraped and not equal:
        differ = {
            "/".join(k): [metrics.get(k, 0), store.get(k, 0)]
            for k in sorted(set(metrics) | set(store))
            if metrics.get(k, 0) != store.get(k, 0)
        }
        b.fail(
            "metrics",
            f"rootproof_runs_total over {len(urls)} replica(s) differs from the store's terminal runs ([metrics, store] by status/outcome/fallback): {differ}",
        )
    delivery = delivery_figures(
        stored,
        receiver.seen() if receiver is not None else None,
        sample_sum(scraped, "rootproof_alert_to_delivery_seconds_count"),
    )
    print_delivery(delivery)
    for run_id in delivery["receiver_missing_run_ids"]:
        b.fail("notified", f"alert run {run_id}: no POST reached the receiver")
    for run_id in delivery["receiver_unknown_run_ids"]:
        b.fail("notified", f"the receiver got a POST for {run_id}, not a final alert run of the store")
    return {
        "warmup_s": round(warm_s, 3),
        "phases": phases,
        "delivery": delivery,
        "runs_total": {
            "replicas": [by_key(c) for c in per_replica],
            "metrics": by_key(metrics),
            "store": by_key(store),
            "equal": equal,
        },
        "store_runs": len(stored),
        "checks": dict(b.checks),
        "http": {"codes": {str(c): n for c, n in sorted(b.tally.codes.items())}, "errors": b.tally.errors()},
        "failures": b.failures,
        "metrics_ok": bool(scraped),
    }


def cli_baseline(k: int, scenarios: list[tuple[str, str]], home: Path) -> dict[str, Any]:
    """What a user would otherwise run: `rootproof diagnose --scenario ID --json`, one process per
    question, `k` of them one after another (the same cycled scenarios, a data folder of its own)."""
    exe = Path(sys.executable).with_name("rootproof")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "rootproof.cli"]
    env = {k_: v for k_, v in os.environ.items() if not k_.startswith("ROOTPROOF_")} | {
        "ROOTPROOF_HOME": str(home)
    }
    subprocess.run(
        [*cmd, "diagnose", "--scenario", scenarios[0][0], "--json"], env=env, capture_output=True, check=False
    )  # warm-up: the index cache
    t0 = time.perf_counter()
    failed = 0
    for i in range(k):
        sid, question = scenarios[i % len(scenarios)]
        p = subprocess.run(
            [*cmd, "diagnose", "--scenario", sid, "--json", "--", question],
            env=env,
            capture_output=True,
            check=False,
        )
        failed += p.returncode != 0
    wall = time.perf_counter() - t0
    return {
        "runs": k,
        "wall_s": round(wall, 3),
        "runs_per_s": round(k / wall, 3) if wall else None,
        "failed": failed,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--n",
        default="10,50,200",
        help="Concurrent chat streams per phase, comma-separated (default 10,50,200).",
    )
    ap.add_argument(
        "--burst", type=int, default=100, help="Alertmanager webhooks posted at once (default 100; 0 skips)."
    )
    ap.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="`rootproof serve` processes on one trace store (default 1; more need a PostgreSQL --database-url and --redis-url).",
    )
    ap.add_argument(
        "--database-url",
        default=None,
        help="The trace store (e.g. postgresql+psycopg://...); default the embedded SQLite.",
    )
    ap.add_argument(
        "--fresh-database",
        action="store_true",
        help="Create a database rootproof_bench_<hex> on the PostgreSQL server of --database-url, run on it, drop it at the end (kept with --keep).",
    )
    ap.add_argument(
        "--redis-url", default=None, help="A Redis for the service (canonical store, cancellation)."
    )
    ap.add_argument(
        "--no-notify",
        action="store_true",
        help="No notification receiver (by default one on loopback gets every alert run's notification).",
    )
    from rootproof.settings import Settings

    chat_default = Settings.model_fields["chat_concurrency"].default
    worker_default = Settings.model_fields["worker_concurrency"].default
    ap.add_argument(
        "--chat-concurrency",
        type=int,
        default=chat_default,
        help=f"ROOTPROOF_CHAT_CONCURRENCY of the server (default {chat_default}, the service's).",
    )
    ap.add_argument(
        "--worker-concurrency",
        type=int,
        default=worker_default,
        help=f"ROOTPROOF_WORKER_CONCURRENCY of the server (default {worker_default}, the service's).",
    )
    ap.add_argument(
        "--poll",
        type=float,
        default=0.5,
        help="Seconds between GET /api/runs/{id} polls of a webhook run (default 0.5).",
    )
    ap.add_argument(
        "--json", type=Path, default=None, help="Write the figures to this file as one JSON document."
    )
    ap.add_argument(
        "--baseline",
        type=int,
        default=10,
        help="CLI runs (`rootproof diagnose`, one process each) to compare with (default 10; 0 skips).",
    )
    ap.add_argument(
        "--keep",
        action="store_true",
        help="Keep the replicas' data folders and logs (kept anyway when a check fails) and the --fresh-database.",
    )
    args = ap.parse_args()
    sizes = counts(args.n)
    if sizes is None:
        ap.error(f"--n: expected comma-separated whole numbers of at least 1, got {args.n!r}")
    if args.burst < 0:
        ap.error("--burst: expected a whole number of at least 0")
    if not 1 <= args.chat_concurrency <= 1024:
        ap.error("--chat-concurrency: expected 1..1024")
    if not 0 <= args.worker_concurrency <= 256:
        ap.error("--worker-concurrency: expected 0..256")
    if args.burst and args.worker_concurrency == 0:
        ap.error(
            "--worker-concurrency: 0 takes no jobs, so the webhook burst would never end (use --burst 0)"
        )
    if args.poll <= 0:
        ap.error("--poll: expected a positive number of seconds")
    if args.baseline < 0:
        ap.error("--baseline: expected a whole number of at least 0")
    if not 1 <= args.replicas <= 16:
        ap.error("--replicas: expected 1..16")
    postgres = bool(args.database_url) and args.database_url.startswith("postgresql")
    if args.replicas > 1 and not (postgres and args.redis_url):
        print(
            f"Error: --replicas {args.replicas} needs a PostgreSQL --database-url (postgresql+psycopg://...) and a --redis-url: the replicas share "
            "one trace store, its job queue and Redis",
            file=sys.stderr,
        )
        return 2
    if args.fresh_database and not postgres:
        print(
            "Error: --fresh-database needs a PostgreSQL --database-url (postgresql+psycopg://...): the server it creates the database on",
            file=sys.stderr,
        )
        return 2

    scenarios = scenario_questions()
    key = "bench-" + secrets.token_urlsafe(24)
    admin_key = "bench-admin-" + secrets.token_urlsafe(24)
    since = datetime.now(UTC).isoformat()  # every run of the bench starts after this
    fresh: tuple[str, str] | None = None  # (the server's URL, the database's name)
    if args.fresh_database:
        server_url = args.database_url
        try:
            args.database_url, name = create_database(server_url)
        except Exception as exc:  # noqa: BLE001 - one line naming the option
            print(
                f"Error: --fresh-database: cannot create a database on {shown_url(server_url)}: {type(exc).__name__}: {str(exc).splitlines()[0]}",
                file=sys.stderr,
            )
            return 2
        fresh = (server_url, name)
    home = Path(tempfile.mkdtemp(prefix="rootproof-load-"))
    store = shown_url(args.database_url) if args.database_url else "SQLite (embedded)"
    if fresh is not None:
        store += " (created for this run" + (", kept)" if args.keep else ", dropped at the end)")
    jobs = "procrastinate" if postgres else "in-process"
    print("rootproof service load benchmark", flush=True)
    redis = shown_url(args.redis_url) if args.redis_url else "none"
    print(f"store {store}; jobs {jobs}; redis {redis}; model offline; {os.cpu_count()} cores", flush=True)
    receiver = None if args.no_notify else HookReceiver()
    print(
        f"{args.replicas} replica(s) of rootproof serve, requests round-robin; notifications "
        + (
            "off (--no-notify)"
            if receiver is None
            else "to a loopback receiver (one webhook receiver, answers 200)"
        ),
        flush=True,
    )
    print(
        f"ROOTPROOF_CHAT_CONCURRENCY={args.chat_concurrency} ROOTPROOF_WORKER_CONCURRENCY={args.worker_concurrency} (each replica); "
        f"{len(scenarios)} built-in scenarios cycled (each with its own question); webhook runs polled every {args.poll:g} s",
        flush=True,
    )
    servers: list[ServeProcess] = []
    try:
        if receiver is not None:
            write_receivers(home)
        servers = start_replicas(
            args.replicas,
            f"{key}:operator,{admin_key}:admin",
            args,
            home,
            receiver.url if receiver is not None else None,
        )
        try:
            result = asyncio.run(
                bench(args, [s.url for s in servers], (key, admin_key), scenarios, sizes, since, receiver)
            )
        finally:
            stop_replicas(servers)
    finally:
        if receiver is not None:
            receiver.close()
        if fresh is not None and not args.keep:
            try:
                drop_database(*fresh)
            except Exception as exc:  # noqa: BLE001 - reported, the figures still count
                progress(f"could not drop the database {fresh[1]}: {type(exc).__name__}: {exc}")
    if args.baseline:
        progress(
            f"baseline: {args.baseline} runs of `rootproof diagnose --scenario ID --json`, one process each"
        )
        base = cli_baseline(args.baseline, scenarios, home / "cli")
        best = max(
            (p for p in result["phases"] if p.get("kind") == "chat"),
            key=lambda p: p.get("runs_per_s") or 0,
            default=None,
        )
        ratio = round(best["runs_per_s"] / base["runs_per_s"], 2) if best and base["runs_per_s"] else None
        base["service_best_chat_runs_per_s"] = best["runs_per_s"] if best else None
        base["ratio"] = ratio
        result["baseline_cli"] = base
        failed_note = f"  ({base['failed']} failed)" if base["failed"] else ""
        print(
            f"baseline       {base['runs']} CLI runs (one process each, sequential) {base['wall_s']:.2f} s  {base['runs_per_s']} runs/s"
            f"{failed_note}; the service's best chat phase {base['service_best_chat_runs_per_s']} runs/s = {ratio}x",
            flush=True,
        )
        if base["failed"]:
            result["failures"].append(f"baseline: {base['failed']} CLI run(s) failed")
    failures: list[str] = result["failures"]
    errors = result["http"]["errors"]
    server_5xx = sum(n for c, n in errors.items() if c.isdigit() and int(c) >= 500)
    if errors:
        failures.append(f"http: non-2xx answers or failed requests {errors}")
    for i, server in enumerate(servers):
        tracebacks = count_tracebacks(server.log_tail(2_000_000))
        if tracebacks:
            failures.append(f"server: {tracebacks} traceback(s) in the log of replica {i + 1} ({server.log})")
    checks = result["checks"]
    total = sum(p["runs"] for p in result["phases"])
    print(
        f"checks         terminal {checks.get('terminal', 0)}/{total}  events {checks.get('events', 0)}/{total}  "
        f"citations {checks.get('citations', 0)}/{total} ({checks.get('cited_invocations', 0)} invocation ids cited)  "
        f"HTTP answers {sum(int(n) for n in result['http']['codes'].values())} (5xx {server_5xx}, other errors {len(errors) and sum(errors.values()) - server_5xx})  "
        f"store runs {result['store_runs']}  runs_total equal {'yes' if result['runs_total']['equal'] else 'no'}"
        + (
            f"  delivered {result['delivery']['delivered']}/{result['delivery']['alert_runs']}"
            if result["delivery"]["notify"]
            else ""
        ),
        flush=True,
    )
    for line in failures[:MAX_SHOWN]:
        print(f"  FAILED {line}", flush=True)
    if len(failures) > MAX_SHOWN:
        print(f"  ... and {len(failures) - MAX_SHOWN} more (all in --json)", flush=True)
    ok = not failures
    if ok:
        delivered = ", every alert run delivered" if result["delivery"]["notify"] else ""
        verdict = (
            f"verdict: PASS ({total} runs: every run terminal, no event lost or duplicated, no foreign citation, no HTTP error{delivered}, "
            f"rootproof_runs_total over {args.replicas} replica(s) equals the store)"
        )
    else:
        verdict = f"verdict: FAIL ({len(failures)} failure(s))"
    doc = {
        "store": store,
        "jobs": jobs,
        "redis": redis if args.redis_url else None,
        "replicas": args.replicas,
        "notify": receiver is not None,
        "chat_concurrency": args.chat_concurrency,
        "worker_concurrency": args.worker_concurrency,
        "cores": os.cpu_count(),
        "scenarios": len(scenarios),
        **result,
        "failures": failures,
        "verdict": "PASS" if ok else "FAIL",
    }
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        progress(f"figures written to {args.json}")
    if ok and not args.keep:
        shutil.rmtree(home, ignore_errors=True)
    else:
        progress(f"the replicas' data folders and logs are kept in {home}")
    print(verdict, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
