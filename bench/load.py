"""Service load: concurrent chat streams and a webhook burst against `rootproof serve`.

Starts `rootproof serve` on a free loopback port as a process of its own (its own data folder
in a temporary directory, its own API key), on the embedded default (SQLite, the offline
planner, in-process jobs) unless `--database-url` names another trace store (PostgreSQL: the
webhook runs then go through procrastinate) and `--redis-url` a Redis. Then, over real HTTP
with one httpx AsyncClient:

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
error. The last line is the verdict; the exit status is 1 when a check failed.

Figures go to stdout, progress to stderr.

    .venv/bin/python bench/load.py [--n 10,50,200] [--burst 100] [--database-url URL]
        [--redis-url URL] [--chat-concurrency K] [--worker-concurrency K] [--json FILE]
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
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
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


def service_env(home: Path, key: str, args: argparse.Namespace) -> dict[str, str]:
    """The server's environment: this one without ROOTPROOF_* settings, plus the bench's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOTPROOF_")}
    env.update(
        {
            "ROOTPROOF_HOME": str(home),
            "ROOTPROOF_API_KEYS": f"{key}:operator",
            "ROOTPROOF_CHAT_CONCURRENCY": str(args.chat_concurrency),
            "ROOTPROOF_WORKER_CONCURRENCY": str(args.worker_concurrency),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if args.database_url:
        env["ROOTPROOF_DATABASE_URL"] = args.database_url
    if args.redis_url:
        env["ROOTPROOF_REDIS_URL"] = args.redis_url
    return env


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
    """The client side: one AsyncClient, the tally, the failures."""

    def __init__(self, client: httpx.AsyncClient, key: str, scenarios: list[tuple[str, str]], poll_s: float) -> None:
        self.client = client
        self.headers = {"Authorization": f"Bearer {key}"}
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

    async def get(self, url: str, **kwargs: Any) -> httpx.Response | None:
        try:
            resp = await self.client.get(url, headers=self.headers, **kwargs)
        except httpx.HTTPError as exc:
            self.tally.failed("GET " + url.rsplit("/", 1)[0] + "/…", exc)
            return None
        self.tally.saw(resp.status_code)
        return resp

    async def events(self, run_id: str, last_event_id: int | None = None) -> list[Sse] | None:
        headers = dict(self.headers)
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        try:
            async with self.client.stream("GET", f"/api/runs/{run_id}/events", headers=headers) as resp:
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
            async with self.client.stream("POST", "/api/chat", json=body, headers=self.headers) as resp:
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
        runs = [Run(kind="chat", scenario=sid, index=i) for i, (sid, _) in enumerate(picked)]
        t0 = time.perf_counter()
        await asyncio.gather(*(self.chat(run, question, t0) for run, (_, question) in zip(runs, picked, strict=True)))
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
            resp = await self.client.post("/api/alerts/alertmanager", params={"scenario": run.scenario}, json=body, headers=self.headers)
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
            resp = await self.get(f"/api/runs/{run.run_id}")
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
        runs = [Run(kind="webhook", scenario=self.scenarios[i % len(self.scenarios)][0], index=i) for i in range(n)]
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
        where = f"{phase} run #{run.index} ({run.scenario}, {run.run_id})"
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
            record = await self.get(f"/api/diagnosis/{run.session_id}/trace", params={"runId": run.run_id})
            error = (record.json().get("run") or {}).get("error") if record is not None and record.status_code == 200 else None
            self.fail("succeeded", f"{where}: ended {run.status}: {error}")
        replay = await self.events(run.run_id)
        if replay is None:
            self.fail("events", f"{where}: GET /events failed")
            return
        reference = run.live if run.kind == "chat" else replay
        problem = stream_problem(reference, run.run_id)
        if problem is None and run.kind == "chat" and key_of(replay) != key_of(run.live):
            problem = f"the replay differs from the live stream (live ids {ids_of(run.live)}, replay ids {ids_of(replay)})"
        if problem is None:
            k = len(reference) // 2
            resumed = await self.events(run.run_id, last_event_id=k)
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
        resp = await self.get(f"/api/diagnosis/{run.session_id}/trace", params={"runId": run.run_id})
        if resp is None or resp.status_code != 200:
            self.fail("citations", f"{where}: trace not readable ({resp.status_code if resp is not None else 'no answer'})")
            return
        doc = resp.json()
        own = {i.get("invocation_id") for i in doc.get("invocations", [])}
        foreign_rows = [i.get("invocation_id") for i in doc.get("invocations", []) if i.get("run_id") != run.run_id]
        cited = set(invocation_ids(doc.get("release", {}).get("content")))
        cited |= set(invocation_ids(doc.get("guards")))
        cited |= set(invocation_ids([ev.data for ev in stream if ev.event == "tool"]))
        foreign = sorted(cited - own)
        if foreign or foreign_rows:
            self.fail("citations", f"{where}: cites invocations not its own {foreign[:5]}; foreign rows in its trace {foreign_rows[:5]}")
        else:
            self.checks["citations"] += 1
        self.checks["cited_invocations"] += len(cited)
        ended = (doc.get("run") or {}).get("ended_at")
        if ended:
            from datetime import datetime

            run.ended_at = datetime.fromisoformat(ended).timestamp()
        for inv in own:
            if inv in self.seen_invocations and self.seen_invocations[inv] != run.run_id:
                self.fail("citations", f"{where}: invocation {inv} also belongs to run {self.seen_invocations[inv]}")
            self.seen_invocations[inv] = run.run_id or ""


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


# -- main -----------------------------------------------------------------------------------


def count_tracebacks(log: str) -> int:
    """Tracebacks in a log, a chained exception counted once."""
    count, previous = 0, ""
    for line in log.splitlines():
        if line.startswith("Traceback (most recent call last)") and not previous.startswith(("The above exception", "During handling")):
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


async def bench(args: argparse.Namespace, server: ServeProcess, key: str, scenarios: list[tuple[str, str]], sizes: list[int]) -> dict[str, Any]:
    biggest = max([*sizes, args.burst])
    # Idle connections expire well before uvicorn's 5 s keep-alive timeout: with both at 5 s a
    # request can go out on a connection the server is closing (a ReadError, not the service's).
    limits = httpx.Limits(
        max_connections=biggest + CHECK_CONCURRENCY + 16, max_keepalive_connections=biggest + CHECK_CONCURRENCY + 16, keepalive_expiry=KEEPALIVE_EXPIRY_S
    )
    timeout = httpx.Timeout(connect=60, read=TERMINAL_TIMEOUT_S, write=60, pool=TERMINAL_TIMEOUT_S)
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=timeout) as client:
        b = Bench(client, key, scenarios, args.poll)
        progress("warm-up: one chat run (not counted)")
        warm = Run(kind="chat", scenario=scenarios[0][0], index=0)
        t0 = time.perf_counter()
        await b.chat(warm, scenarios[0][1], t0)
        warm_s = time.perf_counter() - t0
        print(f"warm-up        1 chat run in {warm_s:.2f} s (not counted)", flush=True)
        phases = []
        for p, n in enumerate(sizes):
            progress(f"chat N={n}: {n} concurrent streams")
            runs, wall = await b.chat_phase(n, p)
            progress(f"chat N={n}: checking {n} runs")
            await b.check(runs, f"chat N={n}")
            fig = chat_figures(n, runs, wall)
            print_phase(fig)
            phases.append(fig)
        if args.burst:
            progress(f"webhooks: a burst of {args.burst}")
            runs, started = await b.webhook_phase(args.burst)
            progress(f"webhooks: checking {args.burst} runs")
            await b.check(runs, f"webhooks {args.burst}")
            fig = webhook_figures(args.burst, runs, started)
            print_phase(fig)
            phases.append(fig)
        metrics = await b.get("/metrics")
    return {
        "warmup_s": round(warm_s, 3),
        "phases": phases,
        "checks": dict(b.checks),
        "http": {"codes": {str(c): n for c, n in sorted(b.tally.codes.items())}, "errors": b.tally.errors()},
        "failures": b.failures,
        "metrics_ok": metrics is not None and metrics.status_code == 200,
    }


def cli_baseline(k: int, scenarios: list[tuple[str, str]], home: Path) -> dict[str, Any]:
    """What a user would otherwise run: `rootproof diagnose --scenario ID --json`, one process per
    question, `k` of them one after another (the same cycled scenarios, a data folder of its own)."""
    exe = Path(sys.executable).with_name("rootproof")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "rootproof.cli"]
    env = {k_: v for k_, v in os.environ.items() if not k_.startswith("ROOTPROOF_")} | {"ROOTPROOF_HOME": str(home)}
    subprocess.run([*cmd, "diagnose", "--scenario", scenarios[0][0], "--json"], env=env, capture_output=True, check=False)  # warm-up: the index cache
    t0 = time.perf_counter()
    failed = 0
    for i in range(k):
        sid, question = scenarios[i % len(scenarios)]
        p = subprocess.run([*cmd, "diagnose", "--scenario", sid, "--json", "--", question], env=env, capture_output=True, check=False)
        failed += p.returncode != 0
    wall = time.perf_counter() - t0
    return {"runs": k, "wall_s": round(wall, 3), "runs_per_s": round(k / wall, 3) if wall else None, "failed": failed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="10,50,200", help="Concurrent chat streams per phase, comma-separated (default 10,50,200).")
    ap.add_argument("--burst", type=int, default=100, help="Alertmanager webhooks posted at once (default 100; 0 skips).")
    ap.add_argument("--database-url", default=None, help="The trace store (e.g. postgresql+psycopg://...); default the embedded SQLite.")
    ap.add_argument("--redis-url", default=None, help="A Redis for the service (canonical store, cancellation).")
    from rootproof.settings import Settings

    chat_default = Settings.model_fields["chat_concurrency"].default
    worker_default = Settings.model_fields["worker_concurrency"].default
    ap.add_argument("--chat-concurrency", type=int, default=chat_default, help=f"ROOTPROOF_CHAT_CONCURRENCY of the server (default {chat_default}, the service's).")
    ap.add_argument("--worker-concurrency", type=int, default=worker_default, help=f"ROOTPROOF_WORKER_CONCURRENCY of the server (default {worker_default}, the service's).")
    ap.add_argument("--poll", type=float, default=0.5, help="Seconds between GET /api/runs/{id} polls of a webhook run (default 0.5).")
    ap.add_argument("--json", type=Path, default=None, help="Write the figures to this file as one JSON document.")
    ap.add_argument("--baseline", type=int, default=10, help="CLI runs (`rootproof diagnose`, one process each) to compare with (default 10; 0 skips).")
    ap.add_argument("--keep", action="store_true", help="Keep the server's data folder and log (kept anyway when a check fails).")
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
        ap.error("--worker-concurrency: 0 takes no jobs, so the webhook burst would never end (use --burst 0)")
    if args.poll <= 0:
        ap.error("--poll: expected a positive number of seconds")
    if args.baseline < 0:
        ap.error("--baseline: expected a whole number of at least 0")

    scenarios = scenario_questions()
    key = "bench-" + secrets.token_urlsafe(24)
    home = Path(tempfile.mkdtemp(prefix="rootproof-load-"))
    store = shown_url(args.database_url) if args.database_url else "SQLite (embedded)"
    jobs = "procrastinate" if args.database_url and args.database_url.startswith("postgresql") else "in-process"
    print("rootproof service load benchmark", flush=True)
    redis = shown_url(args.redis_url) if args.redis_url else "none"
    print(f"store {store}; jobs {jobs}; redis {redis}; model offline; {os.cpu_count()} cores", flush=True)
    print(
        f"ROOTPROOF_CHAT_CONCURRENCY={args.chat_concurrency} ROOTPROOF_WORKER_CONCURRENCY={args.worker_concurrency}; "
        f"{len(scenarios)} built-in scenarios cycled (each with its own question); webhook runs polled every {args.poll:g} s",
        flush=True,
    )
    progress(f"starting rootproof serve (data folder {home})")
    server = serve(service_env(home, key, args), home)
    try:
        result = asyncio.run(bench(args, server, key, scenarios, sizes))
    finally:
        server.stop()
    if args.baseline:
        progress(f"baseline: {args.baseline} runs of `rootproof diagnose --scenario ID --json`, one process each")
        base = cli_baseline(args.baseline, scenarios, home / "cli")
        best = max((p for p in result["phases"] if p.get("kind") == "chat"), key=lambda p: p.get("runs_per_s") or 0, default=None)
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
    tracebacks = count_tracebacks(server.log_tail(2_000_000))
    if tracebacks:
        failures.append(f"server: {tracebacks} traceback(s) in its log ({server.log})")
    checks = result["checks"]
    total = sum(p["runs"] for p in result["phases"])
    print(
        f"checks         terminal {checks.get('terminal', 0)}/{total}  events {checks.get('events', 0)}/{total}  "
        f"citations {checks.get('citations', 0)}/{total} ({checks.get('cited_invocations', 0)} invocation ids cited)  "
        f"HTTP answers {sum(int(n) for n in result['http']['codes'].values())} (5xx {server_5xx}, other errors {len(errors) and sum(errors.values()) - server_5xx})",
        flush=True,
    )
    for line in failures[:MAX_SHOWN]:
        print(f"  FAILED {line}", flush=True)
    if len(failures) > MAX_SHOWN:
        print(f"  ... and {len(failures) - MAX_SHOWN} more (all in --json)", flush=True)
    ok = not failures
    if ok:
        verdict = f"verdict: PASS ({total} runs: every run terminal, no event lost or duplicated, no foreign citation, no HTTP error)"
    else:
        verdict = f"verdict: FAIL ({len(failures)} failure(s))"
    doc = {
        "store": store,
        "jobs": jobs,
        "redis": redis if args.redis_url else None,
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
        progress(f"the server's data folder and log are kept in {home}")
    print(verdict, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
