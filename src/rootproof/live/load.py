"""Business traffic through nginx: the one-shot `probe()` and the background load generator.

`probe(base_url)` is one real order round trip, as a customer makes it: `POST /orders` then
`GET /orders/{id}` through nginx; it answers a `ProbeResult` (ok, latency, the status and error
of the step that failed). The live benchmark's baseline, observe and verify phases use it.

`python -m rootproof.live.load --base-url URL --rate R --stats FILE` is the environment's ambient
noise: one worker sending `R` requests a second (at most 20; each a new order or a read of a
recent one, SKUs drawn at random), each bounded by a timeout, until SIGTERM or `--duration`. It
counts what it sent and writes `LoadStats` as JSON to `--stats` about every second (atomically)
and once more on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

__all__ = ["LoadStats", "ProbeResult", "main", "probe", "read_stats"]

MAX_RATE = 20.0
"""Requests per second the generator never exceeds."""
SKUS = 20


@dataclass(frozen=True, kw_only=True)
class ProbeResult:
    """One business round trip's outcome."""

    ok: bool
    latency_ms: float
    """Wall time of the whole round trip (both requests, or up to the one that failed)."""
    status: int | None
    """The HTTP status of the failed step (None when it got no answer), or of the read when ok."""
    step: str
    """The step that failed (`POST /orders`, `GET /orders/{id}`), or `done`."""
    error: str | None = None
    order_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON object."""
        return asdict(self)


def _order_body(rng: random.Random) -> dict[str, Any]:
    return {"sku": f"SKU-{rng.randint(1, SKUS):04d}", "qty": rng.randint(1, 3), "customer": "probe"}


def probe(base_url: str, *, timeout_s: float = 10.0, sku: str | None = None) -> ProbeResult:
    """One order round trip through `base_url` (nginx): POST an order, read it back."""
    rng = random.Random()
    body = _order_body(rng) | ({"sku": sku} if sku else {})
    started = time.perf_counter()

    def result(ok: bool, step: str, status: int | None, error: str | None = None, order_id: int | None = None) -> ProbeResult:
        return ProbeResult(ok=ok, latency_ms=round((time.perf_counter() - started) * 1000, 1), status=status, step=step, error=error, order_id=order_id)

    with httpx.Client(base_url=base_url, timeout=timeout_s, trust_env=False) as client:
        try:
            created = client.post("/orders", json=body)
        except httpx.HTTPError as exc:
            return result(False, "POST /orders", None, f"{type(exc).__name__}: {exc}")
        if created.status_code != 201:
            return result(False, "POST /orders", created.status_code, created.text[:300])
        try:
            order_id = int(created.json()["id"])
        except (ValueError, KeyError, TypeError):
            return result(False, "POST /orders", created.status_code, "the answer names no order id")
        try:
            read = client.get(f"/orders/{order_id}")
        except httpx.HTTPError as exc:
            return result(False, "GET /orders/{id}", None, f"{type(exc).__name__}: {exc}", order_id)
        if read.status_code != 200 or read.json().get("id") != order_id:
            return result(False, "GET /orders/{id}", read.status_code, read.text[:300], order_id)
        return result(True, "done", read.status_code, None, order_id)


@dataclass(kw_only=True)
class LoadStats:
    """What the load generator has sent so far (`stats.json`)."""

    sent: int = 0
    ok: int = 0
    failed: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    """Answers by HTTP status (`"201"`, `"504"`), and `"error"` for requests without an answer."""
    last_error: str | None = None
    started_at: float = 0.0
    """Unix time the generator started."""
    updated_at: float = 0.0
    """Unix time of this snapshot."""
    rate_per_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """A JSON object."""
        return asdict(self)


def read_stats(path: Path) -> LoadStats | None:
    """The generator's last snapshot, None when it has written none (yet)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return LoadStats(**data)
    except (OSError, ValueError, TypeError):
        return None


def _write(path: Path, stats: LoadStats) -> None:
    stats.updated_at = time.time()
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(stats.as_dict()) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class _Stop(BaseException):  # not an Exception: no library handler may swallow it
    pass


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise _Stop  # interrupts a request in flight: the generator stops at once


def run(base_url: str, *, rate: float, stats_path: Path, duration_s: float | None = None, timeout_s: float = 5.0, seed: int | None = None) -> LoadStats:
    """Send the load until SIGTERM/SIGINT or `duration_s`; return the final counts."""
    rate = min(max(rate, 0.0), MAX_RATE)
    rng = random.Random(seed)
    stats = LoadStats(started_at=time.time(), rate_per_s=rate)
    counts: Counter[str] = Counter()
    recent: list[int] = []
    interval = 1.0 / rate if rate > 0 else 1.0
    end = None if duration_s is None else time.monotonic() + duration_s
    next_at = time.monotonic()
    last_write = 0.0
    _write(stats_path, stats)
    try:
        with httpx.Client(base_url=base_url, timeout=timeout_s, trust_env=False, headers={"User-Agent": "rootproof-load/1"}) as client:
            while end is None or time.monotonic() < end:
                now = time.monotonic()
                if now - last_write >= 1.0:
                    stats.by_status = dict(counts)
                    _write(stats_path, stats)
                    last_write = now
                if rate <= 0 or now < next_at:
                    time.sleep(min(0.2, max(0.0, next_at - now)) if rate > 0 else 0.2)
                    continue
                next_at = max(next_at + interval, now)
                read = bool(recent) and rng.random() < 0.4
                stats.sent += 1
                try:
                    if read:
                        resp = client.get(f"/orders/{rng.choice(recent)}")
                        good = resp.status_code == 200
                    else:
                        resp = client.post("/orders", json=_order_body(rng) | {"customer": "load"})
                        good = resp.status_code == 201
                        if good:
                            recent.append(int(resp.json()["id"]))
                            del recent[:-50]
                    counts[str(resp.status_code)] += 1
                    if not good:
                        stats.last_error = f"HTTP {resp.status_code}: {resp.text[:200]}"
                except httpx.HTTPError as exc:
                    good = False
                    counts["error"] += 1
                    stats.last_error = f"{type(exc).__name__}: {exc}"[:300]
                stats.ok += int(good)
                stats.failed += int(not good)
    except _Stop:
        pass
    finally:
        stats.by_status = dict(counts)
        with contextlib.suppress(OSError):
            _write(stats_path, stats)
    return stats


def main(argv: list[str] | None = None) -> int:
    """The load generator's command line."""
    parser = argparse.ArgumentParser(prog="python -m rootproof.live.load", description="Background order traffic through nginx.")
    parser.add_argument("--base-url", required=True, help="nginx's URL (http://127.0.0.1:PORT)")
    parser.add_argument("--rate", type=float, default=2.0, help=f"requests per second (0 to {MAX_RATE:g})")
    parser.add_argument("--stats", type=Path, required=True, help="where to write the counts (JSON)")
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: until SIGTERM)")
    parser.add_argument("--seed", type=int, default=None)
    ns = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    run(ns.base_url, rate=ns.rate, stats_path=ns.stats, duration_s=ns.duration, seed=ns.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
