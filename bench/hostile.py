"""Hostile clients against `rootproof serve`: what a client without a key, or a slow one, can
make the server hold (issue 30, point 4).

Starts `rootproof serve` on a free loopback port as a process of its own (its own data folder in
a temporary directory, one operator key, the embedded default store), with the service's limits
at their defaults unless `--header-timeout` and friends set them. Then, over raw TCP:

- big posts: `--posts` concurrent POSTs without a key, each declaring and sending `--mb` MB
  (10^6 bytes: 33 MB is under the 32 MiB alert cap, so a server that reads a body reads it
  whole), half to `/api/alerts/alertmanager`, half to `/api/chat`, each client writing until the
  server answers or closes; figures: each answer's status, the bytes each client wrote before
  that (an upper bound of what reached the server: the kernel's buffers are counted in), the
  time to the answer, and the server's resident memory (VmRSS of /proc/<pid>/status) before and
  at its peak;
- slow senders: `--slow` connections sending a byte every `--interval` seconds, half of them in
  their headers (no key), half in their body (with the operator key: the gate cannot refuse
  them); figures: when the server closed each one (or `open` at `--limit-s`);
- throughout both: `GET /healthz` on a fresh connection every 0.1 s; figures: p50/p95/max
  latency and failures;
- at the end: the tracebacks in the server's log.

It prints figures and never asserts timings; the issue's targets are printed beside them: RSS
growth under 100 MB, every slow sender closed within its deadline, `/healthz` p95 under 100 ms,
no traceback. Figures go to stdout, progress to stderr. Exit status 0 unless the server could
not start.

    .venv/bin/python bench/hostile.py [--posts 16] [--mb 33] [--slow 10] [--interval 5]
        [--limit-s 100] [--header-timeout S] [--body-timeout S] [--keepalive S]
        [--max-connections N] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _figures import pct, progress

from rootproof.service.process import ServeProcess, start_serve

CHUNK = 64 * 1024
PROBE_EVERY_S = 0.1
PROBE_TIMEOUT_S = 5.0
ANSWER_WAIT_S = 30.0
"""How long a big post waits for its answer once its body is all written."""




def rss_mb(pid: int) -> float | None:
    """The resident memory of process `pid`, MiB (VmRSS), None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def status_of(answer: bytes) -> int | None:
    """The status code of a raw HTTP answer, None when there is none."""
    parts = answer.split(b" ", 2)
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
        return int(parts[1])
    return None


@dataclass
class Watch:
    """`/healthz` probes and the server's memory, sampled until `stop` is set."""

    pid: int
    port: int
    latencies_ms: list[float] = field(default_factory=list)
    failures: int = 0
    peak_rss_mb: float = 0.0
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def probe(self) -> None:
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
                answer = await reader.read()
                writer.close()
            if status_of(answer) != 200:
                self.failures += 1
                return
        except (OSError, TimeoutError):
            self.failures += 1
            return
        self.latencies_ms.append((time.perf_counter() - t0) * 1000)

    async def run(self) -> None:
        while not self.stop.is_set():
            self.peak_rss_mb = max(self.peak_rss_mb, rss_mb(self.pid) or 0.0)
            await self.probe()
            await asyncio.sleep(PROBE_EVERY_S)

    def figures(self) -> dict[str, Any]:
        return {
            "probes": len(self.latencies_ms) + self.failures,
            "failures": self.failures,
            "p50_ms": pct(self.latencies_ms, 50),
            "p95_ms": pct(self.latencies_ms, 95),
            "max_ms": max(self.latencies_ms, default=None),
        }


@dataclass
class BigPost:
    path: str
    status: int | None = None
    sent_bytes: int = 0
    answer_s: float | None = None
    ended: str = ""


def big_post(port: int, path: str, size: int) -> BigPost:
    """A POST without a key declaring `size` bytes, its body written until the server answers
    or closes (a blocking socket: an answer already received survives a failed write, as
    with httpx), then its answer read."""
    import select
    import socket

    out = BigPost(path=path)
    head = f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
    chunk = b"x" * CHUNK
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WAIT_S) as sock:
        t0 = time.monotonic()
        try:
            sock.sendall(head.encode())
            while out.sent_bytes < size:
                if select.select([sock], [], [], 0)[0]:  # the server answered (or closed)
                    break
                n = min(CHUNK, size - out.sent_bytes)
                sock.sendall(chunk[:n])
                out.sent_bytes += n
            out.ended = "body written" if out.sent_bytes >= size else "answered early"
        except OSError as exc:
            out.ended = f"server closed ({type(exc).__name__})"
        try:
            while data := sock.recv(65536):
                if out.answer_s is None:
                    out.answer_s = time.monotonic() - t0
                answer += data
        except OSError:
            pass
    out.status = status_of(answer)
    return out


@dataclass
class Slow:
    where: str
    closed_after_s: float | None = None
    status: int | None = None


async def slow_sender(port: int, where: str, key: str, interval_s: float, limit_s: float) -> Slow:
    """A byte every `interval_s` in the headers or in the body, until the server closes."""
    out = Slow(where=where)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.monotonic()
    if where == "headers":
        writer.write(b"POST /api/chat HTTP/1.1\r\nHost: bench\r\nX-Slow: ")
        byte = b"a"
    else:
        writer.write(f"POST /api/alerts/alertmanager HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{".encode())
        byte = b" "
    answer = b""

    async def read_until_closed() -> None:
        nonlocal answer
        try:
            while chunk := await reader.read(65536):
                answer += chunk
        except OSError:
            pass

    reading = asyncio.create_task(read_until_closed())
    try:
        while not reading.done() and time.monotonic() - t0 < limit_s:
            await writer.drain()
            try:
                await asyncio.wait_for(asyncio.shield(reading), interval_s)
            except TimeoutError:
                writer.write(byte)
    except OSError:
        pass
    if not reading.done():
        try:
            await asyncio.wait_for(reading, 1.0)
        except TimeoutError:
            reading.cancel()
    if reading.done() and not reading.cancelled():
        out.closed_after_s = time.monotonic() - t0
    writer.close()
    out.status = status_of(answer)
    return out


async def attack(server: ServeProcess, key: str, args: argparse.Namespace) -> dict[str, Any]:
    pid = server.proc.pid
    port = int(server.url.rsplit(":", 1)[1])
    baseline = rss_mb(pid) or 0.0
    watch = Watch(pid=pid, port=port)
    watching = asyncio.create_task(watch.run())
    await asyncio.sleep(1.0)  # a few probes of the quiet server first

    size = args.mb * 1_000_000
    progress(f"big posts: {args.posts} x {args.mb} MB without a key ...")
    t0 = time.monotonic()
    paths = ["/api/alerts/alertmanager" if i % 2 == 0 else "/api/chat" for i in range(args.posts)]
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=args.posts) as pool:  # all at once (not the default pool's few)
        posts = await asyncio.gather(*(loop.run_in_executor(pool, big_post, port, p, size) for p in paths))
    posts_s = time.monotonic() - t0
    await asyncio.sleep(1.0)
    peak_posts = watch.peak_rss_mb

    progress(f"slow senders: {args.slow}, a byte every {args.interval:g} s (up to {args.limit_s:g} s) ...")
    wheres = ["headers" if i % 2 == 0 else "body" for i in range(args.slow)]
    slows = await asyncio.gather(*(slow_sender(port, w, key, args.interval, args.limit_s) for w in wheres))
    watch.stop.set()
    await watching
    after = rss_mb(pid) or 0.0
    return {
        "rss_mb": {"baseline": baseline, "peak": watch.peak_rss_mb, "peak_after_posts": peak_posts, "after": after, "growth": watch.peak_rss_mb - baseline},
        "posts": {"seconds": posts_s, "each": [asdict(p) for p in posts]},
        "slow": [asdict(s) for s in slows],
        "healthz": watch.figures(),
    }


def report(fig: dict[str, Any], log: str, args: argparse.Namespace) -> None:
    rss = fig["rss_mb"]
    print(f"server RSS, MiB: baseline {rss['baseline']:.0f}, peak {rss['peak']:.0f} (after the big posts {rss['peak_after_posts']:.0f}), at the end {rss['after']:.0f}; growth {rss['growth']:.0f} (target < 100)")
    posts = fig["posts"]["each"]
    statuses: dict[str, int] = {}
    for p in posts:
        statuses[str(p["status"])] = statuses.get(str(p["status"]), 0) + 1
    sent = [p["sent_bytes"] / 1e6 for p in posts]
    answers = [p["answer_s"] for p in posts if p["answer_s"] is not None]
    print(
        f"big posts: {len(posts)} x {args.mb} MB without a key, all done in {fig['posts']['seconds']:.2f} s: statuses {statuses}; "
        f"MB each client wrote before the answer or the close (kernel buffers included): "
        f"max {max(sent):.1f}, median {pct(sent, 50):.1f}; answer after {fmt_s(pct(answers, 50))} median, {fmt_s(max(answers, default=None))} max"
    )
    for where in ("headers", "body"):
        group = [s for s in fig["slow"] if s["where"] == where]
        closed = [s["closed_after_s"] for s in group if s["closed_after_s"] is not None]
        codes = sorted({str(s["status"]) for s in group})
        deadline = args.header_timeout if where == "headers" else args.body_timeout
        print(
            f"slow senders in the {where}: {len(closed)}/{len(group)} closed by the server, after {fmt_s(min(closed, default=None))} to "
            f"{fmt_s(max(closed, default=None))} (answers {', '.join(codes)}); {len(group) - len(closed)} still open at {args.limit_s:g} s"
            + (f"; deadline {deadline:g} s" if deadline else "")
        )
    h = fig["healthz"]
    print(f"/healthz throughout: {h['probes']} probes, {h['failures']} failed; p50 {fmt_ms(h['p50_ms'])}, p95 {fmt_ms(h['p95_ms'])} (target < 100 ms), max {fmt_ms(h['max_ms'])}")
    tracebacks = log.count("Traceback")
    print(f"server log: {tracebacks} traceback(s), {len(log.splitlines())} line(s)")


def fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} s"


def fmt_ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--posts", type=int, default=16, help="concurrent big POSTs without a key (default 16)")
    ap.add_argument("--mb", type=int, default=33, help="MB (10^6 bytes) each big POST declares and sends (default 33: under the 32 MiB alert cap)")
    ap.add_argument("--slow", type=int, default=10, help="slow senders, half in headers, half in body (default 10)")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between two bytes of a slow sender (default 5)")
    ap.add_argument("--limit-s", type=float, default=100.0, help="how long a slow sender keeps trying (default 100)")
    ap.add_argument("--header-timeout", type=float, default=None, help="ROOTPROOF_SERVICE_HEADER_TIMEOUT_S of the server (default: its default)")
    ap.add_argument("--body-timeout", type=float, default=None, help="ROOTPROOF_SERVICE_BODY_TIMEOUT_S of the server")
    ap.add_argument("--keepalive", type=int, default=None, help="ROOTPROOF_SERVICE_KEEPALIVE_S of the server")
    ap.add_argument("--max-connections", type=int, default=None, help="ROOTPROOF_SERVICE_MAX_CONNECTIONS of the server")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    for name in ("posts", "mb", "slow"):
        if not 1 <= getattr(args, name) <= 1000:
            ap.error(f"--{name}: expected 1 to 1000")
    if not 0 < args.interval <= 60 or not 0 < args.limit_s <= 600:
        ap.error("--interval: expected 0 to 60 s; --limit-s: 0 to 600 s")

    home = Path(tempfile.mkdtemp(prefix="rootproof-hostile-"))
    key = "bench-" + secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOTPROOF_")}
    env.update({"ROOTPROOF_HOME": str(home), "ROOTPROOF_API_KEYS": f"{key}:operator", "PYTHONUNBUFFERED": "1"})
    for flag, variable in (("header_timeout", "HEADER_TIMEOUT_S"), ("body_timeout", "BODY_TIMEOUT_S"), ("keepalive", "KEEPALIVE_S"), ("max_connections", "MAX_CONNECTIONS")):
        if getattr(args, flag) is not None:
            env[f"ROOTPROOF_SERVICE_{variable}"] = str(getattr(args, flag))
    if args.header_timeout is None:  # the defaults, for the report (an older server has none)
        args.header_timeout = 10.0
    if args.body_timeout is None:
        args.body_timeout = 30.0
    progress(f"starting rootproof serve (data folder {home}) ...")
    try:
        server = start_serve(env, home / "serve.log")
    except RuntimeError as exc:
        shutil.rmtree(home, ignore_errors=True)
        raise SystemExit(str(exc)) from None
    try:
        fig = asyncio.run(attack(server, key, args))
    finally:
        server.stop()
    log = server.log.read_text(errors="replace")
    shutil.rmtree(home, ignore_errors=True)
    report(fig, log, args)
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, **fig, "tracebacks": log.count("Traceback")}, indent=2))


if __name__ == "__main__":
    main()
