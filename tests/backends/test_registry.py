"""Backends are mounted per system and target; breakers are keyed by the resolved mount;
BackendQueryError fails a call without counting toward the breaker."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from rootproof.backends.registry import BackendRegistry
from rootproof.boundary.boundary import CircuitBreaker, ToolBoundary, ToolCallRequest, ToolOutcome
from rootproof.boundary.store import InMemoryCanonicalStore
from rootproof.errors import BackendError, BackendQueryError, BackendUnavailable
from rootproof.run.context import RunBudget, RunContext, ToolScope
from rootproof.run.lifecycle import RunState
from rootproof.tools.base import TOOLS, BackendResult
from rootproof.tools.results import RowsResult

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
ALL_TOOLS = frozenset(TOOLS)


class Rows:
    """A backend over fixed rows that names itself as a live target; may raise a given error."""

    def __init__(self, name: str, error: BackendError | None = None) -> None:
        self.name = name
        self.error = error
        self.calls = 0
        self.closed = 0

    def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
        self.calls += 1
        if self.error is not None:
            raise self.error
        row = {"pid": 42, "target": self.name, "tool": tool}
        return BackendResult(result=RowsResult(kind="activity", total_matches=1, rows=[row]), data_source=f"live:{self.name}")

    def close(self) -> None:
        self.closed += 1


def boundary(registry: BackendRegistry, *, clock: datetime | None = NOW, breaker: CircuitBreaker | None = None) -> ToolBoundary:
    ctx = RunContext(
        session_id="s", scope=ToolScope(allowed_tools=ALL_TOOLS), budget=RunBudget(tool_calls=50, calls_per_tool=50), clock=clock
    )
    ctx.advance(RunState.RUNNING)
    return ToolBoundary(ctx, backends=registry, store=InMemoryCanonicalStore(), breaker=breaker or CircuitBreaker())


def call(b: ToolBoundary, name: str, **args: Any) -> ToolOutcome:
    b.ctx.progress.begin_step()
    return b.call(ToolCallRequest(name=name, arguments=args, step_index=b.ctx.progress.step_index))


# -- resolution -------------------------------------------------------------------------------


def test_the_most_specific_mount_serves_and_names_the_breaker_key() -> None:
    snap, pg, logs = Rows("snap"), Rows("orders-db"), Rows("logs")
    reg = BackendRegistry({"*": snap, "postgres:orders-db": pg, "logs": logs})
    assert (reg.resolve("postgres").backend, reg.resolve("postgres").key) == (pg, "postgres:orders-db")  # type: ignore[union-attr]
    assert (reg.resolve("logs").backend, reg.resolve("logs").key) == (logs, "logs")  # type: ignore[union-attr]
    # the catch-all is keyed per system: a failing redis never pauses postgres
    assert (reg.resolve("redis").backend, reg.resolve("redis").key) == (snap, "redis")  # type: ignore[union-attr]
    assert BackendRegistry({"knowledge": snap}).resolve("postgres") is None


def test_a_named_target_resolves_to_its_own_mount() -> None:
    a, b = Rows("orders-db"), Rows("billing-db")
    reg = BackendRegistry([("postgres:orders-db", a), ("postgres:billing-db", b)])
    assert reg.resolve("postgres", "billing-db").backend is b  # type: ignore[union-attr]
    assert reg.resolve("postgres", "orders-db").key == "postgres:orders-db"  # type: ignore[union-attr]
    assert reg.resolve("postgres") is None  # two targets and none named: nothing to guess
    assert reg.targets("postgres") == ("orders-db", "billing-db")


@pytest.mark.parametrize("key", ["runtime", "postgres:", "pg:orders", ""])
def test_a_mount_key_must_name_a_system(key: str) -> None:
    with pytest.raises(ValueError, match="mount key must be"):
        BackendRegistry({key: Rows("x")})


def test_close_closes_every_mounted_backend() -> None:
    a, b = Rows("a"), Rows("b")
    BackendRegistry({"postgres:a": a, "redis:b": b}).close()
    assert (a.closed, b.closed) == (1, 1)


# -- the target argument ----------------------------------------------------------------------


def test_one_target_or_a_snapshot_leaves_every_tool_schema_unchanged() -> None:
    for reg in (BackendRegistry({"*": Rows("s")}), BackendRegistry({"postgres:orders-db": Rows("o"), "redis:cache": Rows("c")})):
        tools = reg.tools()
        assert {n: t.json_schema() for n, t in tools.items()} == {n: t.json_schema() for n, t in TOOLS.items()}
        assert all(tools[n] is TOOLS[n] for n in TOOLS)


def test_several_targets_add_a_required_target_enum_and_name_them() -> None:
    reg = BackendRegistry({"postgres:orders-db": Rows("o"), "postgres:billing-db": Rows("b")})
    tool = reg.tools()["inspect_postgres"]
    schema = tool.json_schema()
    assert "target" in schema["required"] and schema["properties"]["target"]["enum"] == ["orders-db", "billing-db"]
    assert "orders-db, billing-db" in tool.description
    assert reg.tools()["inspect_redis"] is TOOLS["inspect_redis"]


def test_the_boundary_routes_a_call_to_its_target_and_refuses_a_missing_one() -> None:
    a, b = Rows("orders-db"), Rows("billing-db")
    bd = boundary(BackendRegistry({"postgres:orders-db": a, "postgres:billing-db": b}))
    out = call(bd, "inspect_postgres", kind="activity", target="billing-db")
    assert out.invocation.status == "READY" and out.invocation.data_source == "live:billing-db"
    assert (a.calls, b.calls) == (0, 1)
    assert out.invocation.arguments == {"kind": "activity", "target": "billing-db", "query": "", "since": "30m", "limit": 50, "offset": 0}
    missing = call(bd, "inspect_postgres", kind="activity")
    assert missing.invocation.refusal_code == "INVALID_ARGUMENTS" and "target" in str(missing.invocation.message)
    other = call(bd, "inspect_postgres", kind="activity", target="orders-db")  # another target is another scope
    assert other.invocation.status == "READY" and a.calls == 1


# -- breakers per backend and target ----------------------------------------------------------


def test_a_dead_target_opens_only_its_own_breaker() -> None:
    bd = boundary(
        BackendRegistry({"redis:cache": Rows("cache", BackendUnavailable("connection refused")), "postgres:orders-db": Rows("orders-db")})
    )
    codes = [call(bd, "inspect_redis", kind="info", query=f"q{i}").invocation.refusal_code for i in range(4)]
    assert codes == ["BACKEND_ERROR"] * 3 + ["CIRCUIT_OPEN"]
    assert "redis:cache" in str(bd.outcomes[-1].invocation.message)
    assert call(bd, "inspect_postgres", kind="activity").invocation.status == "READY"


def test_with_a_snapshot_at_star_the_breaker_is_per_system() -> None:
    class Split(Rows):
        def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
            if tool == "query_logs":
                raise BackendError("logs are gone")
            return super().call(tool, args, now=now, run_id=run_id)

    breaker = CircuitBreaker()
    bd = boundary(BackendRegistry({"*": Split("snap")}), breaker=breaker)
    codes = [call(bd, "query_logs", query=f"q{i}").invocation.refusal_code for i in range(4)]
    assert codes == ["BACKEND_ERROR"] * 3 + ["CIRCUIT_OPEN"]
    assert not breaker.allows("logs") and breaker.allows("postgres")
    assert call(bd, "inspect_postgres", kind="activity").invocation.status == "READY"


# -- the error split --------------------------------------------------------------------------


def test_query_errors_fail_the_call_but_never_open_the_breaker() -> None:
    backend = Rows("orders-db", BackendQueryError("relation pg_stat_statements does not exist"))
    bd = boundary(BackendRegistry({"postgres:orders-db": backend}))
    outs = [call(bd, "inspect_postgres", kind="top_queries", query=f"q{i}") for i in range(5)]
    assert [o.invocation.refusal_code for o in outs] == ["BACKEND_ERROR"] * 5
    assert [str(o.invocation.status) for o in outs] == ["FAILED"] * 5
    assert backend.calls == 5
    msg = str(outs[0].invocation.message)
    assert msg.startswith("The query failed: relation pg_stat_statements does not exist.") and "Change the arguments" in msg


@pytest.mark.parametrize("error", [BackendUnavailable("connection refused"), BackendError("broken")], ids=["unavailable", "plain"])
def test_unavailable_and_plain_backend_errors_open_the_breaker(error: BackendError) -> None:
    backend = Rows("orders-db", error)
    bd = boundary(BackendRegistry({"postgres:orders-db": backend}))
    codes = [call(bd, "inspect_postgres", kind="activity", query=f"q{i}").invocation.refusal_code for i in range(4)]
    assert codes == ["BACKEND_ERROR"] * 3 + ["CIRCUIT_OPEN"] and backend.calls == 3


def test_timeouts_count_toward_the_breaker_of_their_target() -> None:
    import time

    class Slow(Rows):
        def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
            time.sleep(0.5)
            return super().call(tool, args, now=now, run_id=run_id)

    bd = boundary(BackendRegistry({"postgres:orders-db": Slow("orders-db"), "redis:cache": Rows("cache")}))
    bd.ctx.budget = RunBudget(tool_calls=50, calls_per_tool=50, tool_timeout_s=0.05)
    codes = [call(bd, "inspect_postgres", kind="activity", query=f"q{i}").invocation.refusal_code for i in range(4)]
    assert codes == ["TIMED_OUT"] * 3 + ["CIRCUIT_OPEN"]
    assert call(bd, "inspect_redis", kind="info").invocation.status == "READY"


# -- scope keys on the wall clock -------------------------------------------------------------


def test_a_repeated_query_is_a_duplicate_on_the_wall_clock_too() -> None:
    bd = boundary(BackendRegistry({"postgres:orders-db": Rows("orders-db")}), clock=None)
    first = call(bd, "inspect_postgres", kind="log", query="deadlock", since="30m")
    second = call(bd, "inspect_postgres", kind="log", query="DEADLOCK", since="30m")
    assert first.invocation.status == "READY"
    assert second.invocation.refusal_code == "DUPLICATE_SCOPE" and first.invocation.invocation_id in str(second.invocation.message)
    assert json.loads(first.invocation.scope_key.split(":", 1)[1])["window"][1] == bd.ctx.started_at.isoformat()  # type: ignore[union-attr]
