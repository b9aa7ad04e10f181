"""The Runtime owns every long-lived part and closes them all; live runs mount the backends of
a targets file (built once per runtime and checksum) and record its checksum."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import rootproof
from rootproof.agent.models.scripted import ScriptedModel, ScriptedStep
from rootproof.boundary.boundary import CircuitBreaker
from rootproof.boundary.store import InMemoryCanonicalStore
from rootproof.errors import BackendUnavailable, UsageError
from rootproof.harness import Harness
from rootproof.run.records import MemoryTraceSink
from rootproof.runtime import Runtime
from rootproof.settings import load_settings
from rootproof.targets import LoadedTargets, PostgresTarget, RedisTarget, TargetsFile, load_targets
from rootproof.tools.base import BackendResult, ToolBackend
from rootproof.tools.results import RowsResult

TARGETS = """\
targets:
  - {name: orders-db, kind: postgres, dsn: "postgresql://app@127.0.0.1:1/orders", password_env: ORDERS_PW}
  - {name: billing-db, kind: postgres, dsn: "postgresql://app@127.0.0.1:1/billing"}
  - {name: cache, kind: redis, url: "redis://127.0.0.1:1/0"}
"""


class TableBackend:
    """A small real backend: serves `inspect_postgres activity` / `inspect_redis clients` from a
    table it was given, or raises BackendUnavailable when it has none (a dead system)."""

    def __init__(self, target: PostgresTarget | RedisTarget, rows: list[dict[str, Any]] | None, environ: Mapping[str, str]) -> None:
        self.target = target
        self.rows = rows
        self.secret = environ.get(target.password_env or "", "")
        self.closed = 0

    def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
        if self.rows is None:
            raise BackendUnavailable(f"{self.target.name}: connection refused")
        kind = str(getattr(args, "kind", ""))
        return BackendResult(
            result=RowsResult(kind=kind, total_matches=len(self.rows), rows=list(self.rows)),
            data_source=f"live:{self.target.name}",
            details={"target": self.target.name},
        )

    def close(self) -> None:
        self.closed += 1


class Factory:
    """`live_factory`: one TableBackend per target; counts how often it built them."""

    def __init__(self, dead: frozenset[str] = frozenset()) -> None:
        self.dead = dead
        self.built: list[TableBackend] = []
        self.calls = 0
        self.environs: list[Mapping[str, str]] = []

    def __call__(self, targets: TargetsFile, environ: Mapping[str, str]) -> Sequence[tuple[str, ToolBackend]]:
        self.calls += 1
        self.environs.append(environ)
        out: list[tuple[str, ToolBackend]] = []
        for t in targets.targets:
            assert isinstance(t, PostgresTarget | RedisTarget)
            rows = None if t.name in self.dead else [{"pid": 7, "state": "idle in transaction", "datname": t.name}]
            backend = TableBackend(t, rows, environ)
            self.built.append(backend)
            out.append((f"{t.kind}:{t.name}", backend))
        return out


@pytest.fixture
def loaded(tmp_path: Path) -> LoadedTargets:
    path = tmp_path / "rootproof.targets.yaml"
    path.write_text(TARGETS, encoding="utf-8")
    return load_targets(path)


def _runtime(tmp_path: Path, factory: Factory, **parts: Any) -> Runtime:
    return Runtime.from_settings(
        load_settings(data_dir=tmp_path / "home", deadline_s=60), sink=MemoryTraceSink(), live_factory=factory, environ={"ORDERS_PW": "s3cret"}, **parts
    )


# -- lifecycle --------------------------------------------------------------------------------


def test_no_module_keeps_a_process_wide_store_breaker_or_pool() -> None:
    for name in ("_CANONICAL", "_BREAKER"):
        assert not hasattr(importlib.import_module("rootproof.harness"), name)
    assert not hasattr(importlib.import_module("rootproof.boundary.boundary"), "_BACKEND_POOL")
    shared = (ThreadPoolExecutor, CircuitBreaker, InMemoryCanonicalStore, Runtime)
    for info in pkgutil.walk_packages(rootproof.__path__, "rootproof."):
        if ".live." in info.name or ".migrations" in info.name or info.name.endswith(".__main__"):
            continue
        module = importlib.import_module(info.name)
        bad = [k for k, v in vars(module).items() if isinstance(v, shared)]
        assert bad == [], f"{info.name} holds {bad} at module level"


def test_close_closes_every_part_once(tmp_path: Path, loaded: LoadedTargets) -> None:
    factory = Factory()
    with _runtime(tmp_path, factory) as runtime:
        pool = runtime.pool
        registry = runtime.live_backends(loaded)
        assert runtime.live_backends(loaded) is registry and factory.calls == 1  # once per checksum
    assert runtime.closed and pool._shutdown  # type: ignore[attr-defined]
    assert [b.closed for b in factory.built] == [1, 1, 1]
    runtime.close()  # idempotent
    assert [b.closed for b in factory.built] == [1, 1, 1]
    with pytest.raises(RuntimeError, match="closed"):
        runtime.pool  # noqa: B018 - the property is the call under test


def test_one_model_client_per_runtime_closed_with_it(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, model="openai", openai_base_url="http://127.0.0.1:9/v1", openai_provider="vllm")
    runtime = Runtime.from_settings(settings, sink=MemoryTraceSink())
    model = runtime.model()
    assert runtime.model("openai") is model and Harness(runtime).model(None) is model
    assert runtime.model("offline") is runtime.model("offline")
    runtime.close()
    assert model._client.is_closed()  # type: ignore[attr-defined]


# -- live runs --------------------------------------------------------------------------------


def test_a_live_run_reads_its_targets_records_the_checksum_and_never_the_secret(tmp_path: Path, loaded: LoadedTargets) -> None:
    factory = Factory()
    runtime = _runtime(tmp_path, factory)
    h = Harness(runtime)
    model = ScriptedModel(
        [
            ScriptedStep(calls=[("inspect_postgres", {"kind": "activity", "target": "billing-db"}), ("inspect_redis", {"kind": "clients"})]),
            ScriptedStep(draft={"summary": "nothing to conclude", "root_cause": None, "claims": []}),
        ]
    )
    out = h.diagnose("Why do order confirmations hang?", targets=loaded, model=model)
    record = runtime.sink.runs[out.run_id]  # type: ignore[attr-defined]
    assert record.targets_checksum == loaded.checksum and loaded.checksum.startswith("sha256:")
    assert "s3cret" not in str(record) and factory.environs == [{"ORDERS_PW": "s3cret"}]
    sources = {(o.invocation.tool_name, o.invocation.data_source) for o in out.outcomes}
    assert sources == {("inspect_postgres", "live:billing-db"), ("inspect_redis", "live:cache")}
    # allowed: lookup_knowledge and the tools of mounted systems; postgres has two targets
    offered = {t.name: t for t in model.requests[0].tools}
    assert set(offered) == {"lookup_knowledge", "inspect_postgres", "inspect_redis"}
    assert offered["inspect_postgres"].parameters["properties"]["target"]["enum"] == ["orders-db", "billing-db"]
    assert "target" not in offered["inspect_redis"].parameters["properties"]
    # a second run reuses the live backends (built once per runtime and checksum)
    h.diagnose("Why do order confirmations hang?", targets=loaded, model=ScriptedModel([ScriptedStep(draft={"summary": "x", "root_cause": None, "claims": []})]))
    assert factory.calls == 1
    runtime.close()
    assert all(b.closed == 1 for b in factory.built)


def test_a_dead_live_target_pauses_only_its_own_tools(tmp_path: Path, loaded: LoadedTargets) -> None:
    h = Harness(_runtime(tmp_path, Factory(dead=frozenset({"cache"}))))
    pg = [("activity", "orders-db"), ("activity", "billing-db"), ("locks", "orders-db"), ("locks", "billing-db")]
    steps = [
        ScriptedStep(calls=[("inspect_redis", {"kind": k}), ("inspect_postgres", {"kind": kind, "target": name})])
        for k, (kind, name) in zip(("info", "clients", "slowlog", "config"), pg, strict=True)
    ]
    model = ScriptedModel([*steps, ScriptedStep(draft={"summary": "x", "root_cause": None, "claims": []})])
    out = h.diagnose("Why do order confirmations hang?", targets=loaded, model=model)
    redis = [o.invocation.refusal_code for o in out.outcomes if o.invocation.tool_name == "inspect_redis"]
    postgres = [o.invocation.refusal_code for o in out.outcomes if o.invocation.tool_name == "inspect_postgres"]
    assert redis == ["BACKEND_ERROR"] * 3 + ["CIRCUIT_OPEN"]
    assert postgres == [None] * 4
    paused = [o.invocation for o in out.outcomes if o.invocation.refusal_code == "CIRCUIT_OPEN"]
    assert len(paused) == 1 and "The redis:cache backend failed repeatedly" in str(paused[0].message)
    assert out.status == "SUCCESS"


def test_a_live_tool_call_is_a_one_step_run_with_the_checksum(tmp_path: Path, loaded: LoadedTargets) -> None:
    runtime = _runtime(tmp_path, Factory())
    outcome, ctx = Harness(runtime).tool_call("inspect_postgres", {"kind": "activity", "target": "orders-db"}, scenario=None, targets=loaded)
    assert outcome.invocation.data_source == "live:orders-db" and ctx.clock is None
    assert runtime.sink.runs[ctx.run_id].targets_checksum == loaded.checksum  # type: ignore[attr-defined]


def test_a_run_reads_a_scenario_or_targets_not_both(tmp_path: Path, loaded: LoadedTargets) -> None:
    from rootproof.scenarios.loader import load_scenario

    with pytest.raises(UsageError, match="not both"):
        Harness(_runtime(tmp_path, Factory())).diagnose("why?", scenario=load_scenario("pg-row-lock"), targets=loaded)
