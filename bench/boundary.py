"""Boundary overhead: calls per second through the whole ToolBoundary with a no-op tool.

Prints the median overhead per call without persistence (memory sink) and with the SQLite
trace store, and the baseline cost of calling the no-op backend directly.
Run: .venv/bin/python bench/boundary.py [--calls 5000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rootproof.boundary import CircuitBreaker, InMemoryCanonicalStore, ToolBoundary, ToolCallRequest
from rootproof.run import RunBudget, RunContext, RunState, ToolScope
from rootproof.run.records import MemoryTraceSink, TraceSink
from rootproof.tools.base import BackendResult

NOW = datetime(2026, 7, 22, 17, 41, tzinfo=UTC)


class NoOp:
    """Returns one log entry, instantly."""

    def close(self) -> None:
        """Nothing to release."""

    def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
        entry = {"ts": "2026-07-22T17:40:00.000Z", "level": "INFO", "service": "api", "scope": "APPLICATION", "source": "api.log", "message": "ok"}
        return BackendResult(result={"window": {}, "total_matches": 1, "entries": [entry]}, data_source="snapshot")


def run(n: int, sink: TraceSink | None) -> list[float]:
    per: list[float] = []
    budget = RunBudget(tool_calls=n + 1, calls_per_tool=n + 1, deadline_s=3600)
    ctx = RunContext(session_id="bench", scope=ToolScope(allowed_tools=frozenset({"query_logs"})), budget=budget, clock=NOW)
    ctx.advance(RunState.RUNNING)
    ctx.progress.begin_step()
    # the tool pool a Runtime would own
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="backend") as pool:
        b = ToolBoundary(ctx, backends={"*": NoOp()}, store=InMemoryCanonicalStore(), sink=sink, breaker=CircuitBreaker(), pool=pool)
        for i in range(n):
            req = ToolCallRequest(name="query_logs", arguments={"query": f"t{i}"}, step_index=0)
            t0 = time.perf_counter()
            b.call(req)
            per.append(time.perf_counter() - t0)
    return per


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=5000)
    a = ap.parse_args()
    backend, args_model = NoOp(), None
    from rootproof.tools.base import QueryLogsArgs

    args_model = QueryLogsArgs(query="x")
    t0 = time.perf_counter()
    for _ in range(a.calls):
        backend.call("query_logs", args_model, now=NOW, run_id="r")
    direct = (time.perf_counter() - t0) / a.calls
    rows: list[tuple[str, Any]] = []
    mem = run(a.calls, MemoryTraceSink())
    none = run(a.calls, None)
    with tempfile.TemporaryDirectory() as d:
        from rootproof.store import SqlTraceStore

        store = SqlTraceStore(f"sqlite:///{Path(d) / 'bench.db'}")
        sql = run(min(a.calls, 1000), store)
        store.close()
    for name, xs in (("no sink", none), ("memory sink", mem), ("SQLite trace store", sql)):
        med = statistics.median(xs)
        rows.append((name, med))
        print(f"{name:<20} calls={len(xs):>5}  median {med * 1e6:8.1f} µs/call  p95 {sorted(xs)[int(len(xs) * 0.95)] * 1e6:8.1f} µs  {1 / statistics.mean(xs):8.0f} calls/s  overhead vs direct {(med - direct) * 1e6:8.1f} µs")
    print(f"{'direct backend call':<20} median {direct * 1e6:8.1f} µs/call")


if __name__ == "__main__":
    main()
