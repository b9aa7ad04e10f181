"""The trace store on SQLite, PostgreSQL and MariaDB: migrations, round trips, orphan sweep, errors."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from rootproof.errors import StoreError
from rootproof.run.records import (
    EvalCaseRecord,
    EvalRunRecord,
    EventRecord,
    InvocationRecord,
    ReasoningAuditRecord,
    RunRecord,
    StepRecord,
    TraceSink,
)
from rootproof.store import SqlTraceStore, upgrade
from rootproof.store import models as m
from rootproof.store.sql import SQLITE_BUSY_TIMEOUT_MS

TABLES = {
    "chat_session",
    "alert_group",
    "run_alert_fingerprint",
    "service_replica",
    "notification_dead_letter",
    "diagnosis_run",
    "agent_step",
    "tool_invocation",
    "agent_reasoning_audit",
    "run_event",
    "eval_run",
    "eval_case_result",
    "web_session",
}
CJK_REASONING = ("数据库连接池耗尽导致支付接口超时，需要核对慢查询与锁等待。" * 1200)[:32_000]
# Characters outside the Basic Multilingual Plane need 4 bytes in UTF-8 (utf8mb4 on MariaDB).
ASTRAL = "𠀋𩸽🔒"


def _t(seconds: float = 0) -> datetime:
    """A fixed aware instant with microseconds, offset by `seconds`."""
    return datetime(2026, 11, 30, 8, 0, 0, 123456, tzinfo=UTC) + timedelta(seconds=seconds)


def _empty_database(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        meta = sa.MetaData()
        meta.reflect(engine)
        meta.drop_all(engine)
    finally:
        engine.dispose()


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgresql", marks=pytest.mark.services),
        pytest.param("mariadb", marks=pytest.mark.services),
    ]
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each backend (server databases are emptied before each test)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'rootproof.db'}"
    url: str = request.getfixturevalue("pg_url" if request.param == "postgresql" else "mysql_url")
    _empty_database(url)
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[SqlTraceStore]:
    with SqlTraceStore(store_url) as s:
        yield s


def _run(**overrides: Any) -> RunRecord:
    values: dict[str, Any] = {
        "run_id": str(uuid.uuid4()),
        "session_id": "sess-" + uuid.uuid4().hex[:8],
        "question": "支付接口最近出现超时 " + ASTRAL,
        "language": "zh",
        "started_at": _t(),
        "deadline_at": _t(120),
    }
    return RunRecord(**(values | overrides))


# -- schema ----------------------------------------------------------------------------------


def test_migrations_apply_from_empty_and_match_models(store_url: str) -> None:
    engine = sa.create_engine(store_url)
    try:
        assert sa.inspect(engine).get_table_names() == []
        upgrade(store_url)
        upgrade(store_url)  # already at head: a no-op
        assert set(sa.inspect(engine).get_table_names()) == TABLES | {m.VERSION_TABLE}
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": m.VERSION_TABLE})
            assert context.get_current_revision() == "0006"
            diff = compare_metadata(context, m.Base.metadata)
        assert diff == []
    finally:
        engine.dispose()


def _old_run_at(store_url: str, revision: str, question: str, tokens: int) -> sa.Engine:
    """A store migrated to `revision` only, holding session `s-old` and run `r-old`."""
    from alembic import command
    from alembic.config import Config

    from rootproof.store.sql import SCRIPT_LOCATION

    engine = sa.create_engine(store_url)
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO chat_session (session_id, owner, created_at) VALUES ('s-old', 'cli', :t)"), {"t": _t()})
        conn.execute(
            sa.text(
                "INSERT INTO diagnosis_run (run_id, session_id, question, language, principal, lifecycle_state, tokens, started_at) "
                "VALUES ('r-old', 's-old', :q, 'zh', 'cli', 'COMPLETED', :n, :t)"
            ),
            {"t": _t(), "q": question, "n": tokens},
        )
    return engine


def test_upgrade_from_0001_keeps_runs_and_adds_the_alert_column(store_url: str) -> None:
    engine = _old_run_at(store_url, "0001", "支付接口超时", 7)
    try:
        with SqlTraceStore(store_url) as store:  # upgrades to head on open
            data = store.trace("r-old")
            assert data is not None
            assert data["run"]["question"] == "支付接口超时" and data["run"]["tokens"] == 7
            assert data["run"]["alert"] is None
    finally:
        engine.dispose()


def test_upgrade_from_0002_keeps_runs_and_adds_the_targets_checksum(store_url: str) -> None:
    engine = _old_run_at(store_url, "0002", "why", 3)
    try:
        assert "targets_checksum" not in {c["name"] for c in sa.inspect(engine).get_columns("diagnosis_run")}
        with SqlTraceStore(store_url) as store:  # upgrades to head on open
            data = store.trace("r-old")
            assert data is not None and data["run"]["targets_checksum"] is None and data["run"]["tokens"] == 3
            store.save_run(_run(run_id="r-live", session_id="s-old", targets_checksum="sha256:" + "ab" * 32))
            live = store.trace("r-live")
            assert live is not None and live["run"]["targets_checksum"] == "sha256:" + "ab" * 32
    finally:
        engine.dispose()


def test_reasoning_audit_table_is_exactly_seed_004(store_url: str) -> None:
    upgrade(store_url)
    engine = sa.create_engine(store_url)
    try:
        insp = sa.inspect(engine)
        cols = {c["name"]: c for c in insp.get_columns("agent_reasoning_audit")}
        assert list(cols) == [
            "id",
            "session_id",
            "run_id",
            "step_index",
            "agent_name",
            "reasoning_available",
            "reasoning_content",
            "assistant_text",
            "content_source",
            "content_bytes",
            "created_at",
        ]
        nullable = {name for name, c in cols.items() if c["nullable"]}
        assert nullable == {"reasoning_content", "assistant_text", "content_source"}
        for name in ("session_id", "run_id", "agent_name", "content_source"):
            assert getattr(cols[name]["type"], "length", None) == 64
        dialect = engine.dialect.name
        id_type = str(cols["id"]["type"]).upper()
        assert id_type == "INTEGER" if dialect == "sqlite" else id_type.startswith("BIGINT")
        if dialect in ("mysql", "mariadb"):
            assert str(cols["reasoning_content"]["type"]).upper().startswith("LONGTEXT")
            assert str(cols["assistant_text"]["type"]).upper().startswith("LONGTEXT")
        assert cols["created_at"]["default"] is not None
        indexes = {i["name"]: i["column_names"] for i in insp.get_indexes("agent_reasoning_audit")}
        assert indexes == {
            "idx_reasoning_run_step": ["run_id", "step_index"],
            "idx_reasoning_session_created": ["session_id", "created_at"],
        }
        run_indexes = {tuple(i["column_names"]) for i in insp.get_indexes("diagnosis_run")}
        assert {("session_id",), ("started_at",), ("status",)} <= run_indexes
        uniques = {tuple(u["column_names"]) for u in insp.get_unique_constraints("run_event")}
        assert ("run_id", "seq") in uniques
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("record", "model"),
    [
        (RunRecord, m.DiagnosisRun),
        (StepRecord, m.AgentStep),
        (InvocationRecord, m.ToolInvocation),
        (ReasoningAuditRecord, m.AgentReasoningAudit),
        (EventRecord, m.RunEvent),
        (EvalRunRecord, m.EvalRun),
        (EvalCaseRecord, m.EvalCaseResult),
    ],
)
def test_every_record_field_has_a_column(record: type[Any], model: type[m.Base]) -> None:
    columns = set(model.__table__.columns.keys())
    assert {f.name for f in dataclasses.fields(record)} <= columns


@pytest.mark.parametrize("name", ["save_run", "add_step", "add_invocation", "add_reasoning", "add_event"])
def test_store_implements_trace_sink(name: str) -> None:
    expected = inspect.signature(getattr(TraceSink, name))
    assert inspect.signature(getattr(SqlTraceStore, name)) == expected


# -- runs and traces -------------------------------------------------------------------------


def test_run_round_trips_and_upserts(store: SqlTraceStore) -> None:
    run = _run(
        route="DIAGNOSIS",
        model="offline",
        scenario_id="payment-timeout",
        principal="operator",
        lifecycle_state="RUNNING",
        conclusion={"component": "payment-db", "mechanism": "连接池耗尽", "culprit": None},
        content={
            "content_type": "SAFE_FALLBACK",
            "fallback": {"message": "当前证据无法完成真实性校验" + ASTRAL},
        },
        prompt_audit={"version": "prompts-v1", "prompts": [{"name": "diagnosis_agent"}]},
        self_evaluation={"evidence_guard": {"passed": False, "codes": ["ROOT_CAUSE_MOCK_ONLY"]}},
        budget_usage={"model_calls": 2, "tool_calls": 2},
        tokens=1234,
    )
    store.save_run(run)
    assert store.get_run(run.run_id) == run

    finished = dataclasses.replace(
        run,
        lifecycle_state="COMPLETED",
        status="SUCCESS",
        release_outcome="FALLBACK",
        fallback_type="EVIDENCE_VALIDATION_FAILED",
        ended_at=_t(3.5),
        duration_ms=3500,
        conclusion=None,
    )
    store.save_run(finished)
    got = store.get_run(run.run_id)
    assert got == finished
    assert got is not None and got.started_at.tzinfo is not None and got.ended_at == _t(3.5)

    with store.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(m.DiagnosisRun)) == 1
        owner = conn.scalar(sa.select(m.ChatSession.owner).where(m.ChatSession.session_id == run.session_id))
        assert owner == "operator"
        # JSON None is SQL NULL, so it can be queried.
        null_ids = conn.scalars(sa.select(m.DiagnosisRun.run_id).where(m.DiagnosisRun.conclusion.is_(None)))
        assert list(null_ids) == [run.run_id]


def test_list_runs_newest_first(store: SqlTraceStore) -> None:
    runs = [_run(started_at=_t(i), session_id="one-session") for i in range(5)]
    for r in runs:
        store.save_run(r)
    assert [r.run_id for r in store.list_runs(limit=3)] == [runs[4].run_id, runs[3].run_id, runs[2].run_id]
    assert len(store.list_runs()) == 5


def _populate(store: SqlTraceStore, run: RunRecord) -> None:
    store.save_run(run)
    for i in range(2):
        store.add_step(
            StepRecord(
                run_id=run.run_id,
                session_id=run.session_id,
                step_index=i,
                model_input=f"step {i} input 输入摘要",
                model_output=f"step {i} output 输出摘要",
                has_text=i == 1,
                has_tool_call=i == 0,
                duration_ms=100 + i,
                input_tokens=300,
                output_tokens=40,
                created_at=_t(i),
            )
        )
    store.add_invocation(
        InvocationRecord(
            invocation_id="inv-" + run.run_id[:8],
            run_id=run.run_id,
            session_id=run.session_id,
            step_index=0,
            tool_name="query_logs",
            input_params={"service": "payment", "query": "超时"},
            scope_key="payment-timeout/logs",
            status="READY",
            evidence_status="EVIDENCE_FOUND",
            data_source="mock",
            evidence_refs=[{"raw_path": "$.lines[0]", "text": "timeout after 3000 ms 支付"}],
            output_preview="2 lines",
            retrieval_details={"evidence_status": "EVIDENCE_FOUND"},
            duration_ms=12,
            result_bytes=345,
            success=True,
            created_at=_t(0.5),
        )
    )
    store.add_reasoning(
        ReasoningAuditRecord.build(
            run_id=run.run_id,
            session_id=run.session_id,
            step_index=0,
            reasoning=CJK_REASONING + "overflow beyond the cap",
            assistant_text="SECRET-ASSISTANT-TEXT 我先查日志",
            tool_call_plan='query_logs({"service": "payment"})',
        )
    )
    store.add_reasoning(
        ReasoningAuditRecord.build(
            run_id=run.run_id, session_id=run.session_id, step_index=1, reasoning=None, assistant_text=None
        )
    )
    for seq, kind in enumerate(["metadata", "status", "content", "done"], start=1):
        store.add_event(EventRecord(run_id=run.run_id, seq=seq, type=kind, data={"seq": seq, "说明": kind}))


def test_trace_round_trips_and_hides_reasoning_text(store: SqlTraceStore) -> None:
    run = _run()
    _populate(store, run)

    trace = store.trace(run.run_id)
    assert trace is not None
    dumped = json.dumps(trace, ensure_ascii=False)  # JSON-able as it is
    assert "SECRET-ASSISTANT-TEXT" not in dumped
    assert CJK_REASONING[:40] not in dumped
    assert trace["run"]["run_id"] == run.run_id
    assert trace["run"]["started_at"] == _t().isoformat()
    assert [s["step_index"] for s in trace["steps"]] == [0, 1]
    assert trace["steps"][0]["model_input"] == "step 0 input 输入摘要"
    assert trace["steps"][1]["created_at"] == _t(1).isoformat()
    (inv,) = trace["invocations"]
    assert inv["data_source"] == "mock"
    assert inv["evidence_refs"] == [{"raw_path": "$.lines[0]", "text": "timeout after 3000 ms 支付"}]
    assert inv["input_params"] == {"service": "payment", "query": "超时"}
    assert trace["reasoning"] == [
        {
            "step_index": 0,
            "reasoning_available": True,
            "content_source": "PROVIDER_REASONING+ASSISTANT_TEXT",
            "content_bytes": len(CJK_REASONING.encode())
            + len(
                'SECRET-ASSISTANT-TEXT 我先查日志\ntool_calls: query_logs({"service": "payment"})'.encode()
            ),
        },
        {"step_index": 1, "reasoning_available": False, "content_source": "NONE", "content_bytes": 0},
    ]
    assert [e["type"] for e in trace["events"]] == ["metadata", "status", "content", "done"]
    assert trace["events"][2]["data"] == {"seq": 3, "说明": "content"}


def test_reasoning_accessor_returns_exact_long_cjk_text(store: SqlTraceStore) -> None:
    run = _run()
    _populate(store, run)
    rows = store.reasoning(run.run_id)
    assert [r["step_index"] for r in rows] == [0, 1]
    first, second = rows
    assert len(CJK_REASONING) == 32_000 and len(CJK_REASONING.encode()) > 65_535
    assert first["reasoning_content"] == CJK_REASONING
    assert first["assistant_text"].startswith("SECRET-ASSISTANT-TEXT")
    assert first["agent_name"] == "diagnosis_agent"
    assert isinstance(first["id"], int)
    assert second["reasoning_content"] is None and second["assistant_text"] is None
    assert second["reasoning_available"] is False


def test_events_ordered_by_seq_and_resumable(store: SqlTraceStore) -> None:
    run = _run()
    store.save_run(run)
    for seq in (3, 1, 2):
        store.add_event(EventRecord(run_id=run.run_id, seq=seq, type="status", data={"phase": f"P{seq}"}))
    events = store.events(run.run_id)
    assert [e.seq for e in events] == [1, 2, 3]
    assert events[0].data == {"phase": "P1"} and events[0].created_at.tzinfo is not None
    assert [e.seq for e in store.events(run.run_id, after_seq=1)] == [2, 3]
    assert store.events(run.run_id, after_seq=3) == []
    with pytest.raises(StoreError, match=re.escape(f"refused to add event 2 of run {run.run_id}")):
        store.add_event(EventRecord(run_id=run.run_id, seq=2, type="status", data={}))


def test_duplicate_invocation_id_is_refused(store: SqlTraceStore) -> None:
    run = _run()
    store.save_run(run)
    inv = InvocationRecord(
        invocation_id="inv-dup",
        run_id=run.run_id,
        session_id=run.session_id,
        step_index=0,
        tool_name="query_logs",
        input_params={},
        scope_key=None,
        status="READY",
    )
    store.add_invocation(inv)
    with pytest.raises(StoreError, match="refused to add invocation inv-dup"):
        store.add_invocation(inv)


def test_unknown_run(store: SqlTraceStore) -> None:
    assert store.get_run("nope") is None
    assert store.trace("nope") is None
    assert store.events("nope") == []
    assert store.reasoning("nope") == []


def test_web_sessions_expire_close_and_are_swept(store: SqlTraceStore) -> None:
    """Browser sign-ins: found until they expire or are closed; opening one deletes the expired."""
    a, b, c = (f"{n:064x}" for n in (1, 2, 3))
    store.open_web_session(a, "key:aaaaaaaaaaaa", expires_at=_t(60), now=_t())
    store.open_web_session(b, "key:bbbbbbbbbbbb", expires_at=_t(3600), now=_t())
    assert store.web_session(a, now=_t(59)) == "key:aaaaaaaaaaaa"
    assert store.web_session(a, now=_t(60)) is None  # expired at its instant
    assert store.web_session("f" * 64, now=_t()) is None
    assert store.close_web_session(b) and not store.close_web_session(b)
    assert store.web_session(b, now=_t()) is None
    store.open_web_session(c, "key:cccccccccccc", expires_at=_t(7200), now=_t(61))  # sweeps a
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(m.WebSession.token_hash, m.WebSession.principal)).all()
    assert [tuple(r) for r in rows] == [(c, "key:cccccccccccc")]
    with pytest.raises(StoreError, match="refused to record a browser sign-in"):
        store.open_web_session(c, "key:dddddddddddd", expires_at=_t(7200), now=_t(61))


def test_naive_datetime_is_refused(store: SqlTraceStore) -> None:
    with pytest.raises(StoreError, match=r"RunRecord\.started_at is a naive datetime"):
        store.save_run(_run(started_at=datetime(2026, 1, 1)))


def test_concurrent_writers(store: SqlTraceStore) -> None:
    run = _run()
    store.save_run(run)
    errors: list[BaseException] = []

    def write(worker: int) -> None:
        try:
            for i in range(20):
                seq = worker * 100 + i + 1
                store.add_event(EventRecord(run_id=run.run_id, seq=seq, type="tool", data={"w": worker}))
                store.add_step(StepRecord(run_id=run.run_id, session_id=run.session_id, step_index=seq))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.events(run.run_id)) == 120
    trace = store.trace(run.run_id)
    assert trace is not None and len(trace["steps"]) == 120


# -- orphan sweep ----------------------------------------------------------------------------


def test_sweep_marks_only_expired_non_terminal_runs(store: SqlTraceStore) -> None:
    now = _t(1000)
    expired = _run(lifecycle_state="RUNNING", deadline_at=now - timedelta(seconds=10))
    in_grace = _run(lifecycle_state="RELEASING", deadline_at=now - timedelta(seconds=0.5))
    live = _run(lifecycle_state="RUNNING", deadline_at=now + timedelta(seconds=60))
    no_deadline = _run(deadline_at=None)
    finished = _run(
        lifecycle_state="COMPLETED",
        status="SUCCESS",
        release_outcome="PUBLISHED",
        deadline_at=now - timedelta(seconds=10),
        ended_at=now - timedelta(seconds=20),
    )
    for r in (expired, in_grace, live, no_deadline, finished):
        store.save_run(r)

    assert store.sweep_orphans(now=now, grace_s=1.0) == 1
    swept = store.get_run(expired.run_id)
    assert swept is not None
    assert (swept.status, swept.release_outcome, swept.fallback_type, swept.error) == (
        "FAILED",
        "NONE",
        "INTERNAL_ERROR",
        "orphaned",
    )
    assert swept.lifecycle_state == "FAILED" and swept.ended_at == now
    for r in (in_grace, live, no_deadline, finished):
        assert store.get_run(r.run_id) == r
    assert store.sweep_orphans(now=now, grace_s=1.0) == 0
    # Once the grace has passed too, the releasing run is an orphan as well.
    assert store.sweep_orphans(now=now + timedelta(seconds=1), grace_s=1.0) == 1


def test_opening_the_store_sweeps_orphans(store_url: str) -> None:
    orphan = _run(deadline_at=datetime.now(UTC) - timedelta(minutes=5))
    live = _run(deadline_at=datetime.now(UTC) + timedelta(minutes=5))
    with SqlTraceStore(store_url) as first:
        first.save_run(orphan)
        first.save_run(live)
    with SqlTraceStore(store_url) as second:
        got = second.get_run(orphan.run_id)
        assert got is not None and got.status == "FAILED" and got.error == "orphaned"
        assert second.get_run(live.run_id) == live


# -- evaluation ------------------------------------------------------------------------------


def test_eval_run_and_cases_round_trip(store: SqlTraceStore) -> None:
    created = EvalRunRecord(
        eval_id="ev-" + uuid.uuid4().hex[:8],
        kind="snapshot",
        git_sha="7ae9707a3b",
        suite_version="snapshot-v1",
        model="offline",
        settings={"max_tool_calls": 12, "judge": "offline"},
        started_at=_t(),
    )
    store.save_eval_run(created)
    got = store.get_eval_run(created.eval_id)
    assert got is not None and got["state"] == "created" and got["cases"] == []

    cases = [
        EvalCaseRecord(
            eval_id=created.eval_id,
            case_id="payment-timeout",
            run_id="run-1",
            passed=True,
            score=87.5,
            outcome="FALLBACK",
            dimensions={"root_cause": 30.0, "evidence": 25.5},
            hard_gates=[],
            tool_audit=[{"tool": "query_logs", "calls": 1}],
            duration_ms=812,
        ),
        EvalCaseRecord(
            eval_id=created.eval_id,
            case_id="redis-storm",
            run_id=None,
            passed=False,
            score=0.1 + 0.2,
            failure_class="HARD_GATE",
            hard_gates=["READ_GROUND_TRUTH"],
        ),
    ]
    for c in cases:
        store.add_eval_case(c)
    passed = dataclasses.replace(
        created, state="passed", summary={"score": 43.8, "publish_rate": 0.5, "说明": "完成"}, ended_at=_t(60)
    )
    store.save_eval_run(passed)

    got = store.get_eval_run(created.eval_id)
    assert got is not None
    assert got == {
        k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in dataclasses.asdict(passed).items()
    } | {"cases": [dataclasses.asdict(c) for c in cases]}
    assert got["cases"][1]["score"] == 0.1 + 0.2  # a double, not a float4

    older = EvalRunRecord(eval_id="ev-old-" + uuid.uuid4().hex[:4], kind="retrieval", started_at=_t(-60))
    store.save_eval_run(older)
    listed = store.list_eval_runs()
    assert [e["eval_id"] for e in listed] == [created.eval_id, older.eval_id]
    assert "cases" not in listed[0]
    assert store.list_eval_runs(limit=1)[0]["eval_id"] == created.eval_id
    assert store.get_eval_run("missing") is None


# -- opening and errors ----------------------------------------------------------------------


def test_sqlite_store_creates_folder_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "trace.db"
    with SqlTraceStore(f"sqlite:///{path}") as s:
        assert path.exists()
        with s.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == SQLITE_BUSY_TIMEOUT_MS == 30_000


def test_in_memory_sqlite_is_shared_across_threads() -> None:
    with SqlTraceStore("sqlite://") as s:
        run = _run()
        thread = threading.Thread(target=s.save_run, args=(run,))
        thread.start()
        thread.join()
        assert s.get_run(run.run_id) == run


def test_upgrade_false_needs_a_current_schema(store_url: str) -> None:
    with pytest.raises(StoreError, match=r"revision none \(empty database\).*run `rootproof db upgrade`"):
        SqlTraceStore(store_url, upgrade=False)
    upgrade(store_url)
    with SqlTraceStore(store_url, upgrade=False) as s:
        assert s.list_runs() == []


def test_failed_migration_raises_store_error(store_url: str) -> None:
    engine = sa.create_engine(store_url)
    with engine.begin() as conn:  # a foreign table in the way, as in a shared database
        conn.execute(sa.text("CREATE TABLE chat_session (x INTEGER)"))
    engine.dispose()
    try:
        with pytest.raises(StoreError, match=re.escape("cannot upgrade the trace store schema at")):
            SqlTraceStore(store_url)
    finally:  # a server database is the whole session's: leave no foreign table in it
        _empty_database(store_url)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url", "trace store URL is not a SQLAlchemy URL"),
        ("nosuchdb://host/db", "unknown database dialect 'nosuchdb'"),
        (
            "postgresql+psycopg://u:s3cret@127.0.0.1:1/db",
            "cannot open the trace store at postgresql+psycopg://u:***@",
        ),
        ("mysql+pymysql://u:s3cret@127.0.0.1:1/db", "cannot open the trace store at mysql+pymysql://u:***@"),
        ("sqlite:////proc/rootproof-no/such.db", "cannot create the folder of the trace store"),
    ],
)
def test_bad_url_raises_store_error(url: str, message: str) -> None:
    with pytest.raises(StoreError, match=re.escape(message)) as info:
        SqlTraceStore(url)
    assert "s3cret" not in str(info.value)


def test_stores_opened_at_once_on_an_empty_database_all_reach_head(store_url: str) -> None:
    """Several processes (serve --workers N) creating the schema together: each waits for the
    other's migration rather than failing."""
    code = "import sys\nfrom rootproof.store import SqlTraceStore\nwith SqlTraceStore(sys.argv[1]) as s:\n    print(len(s.list_runs()))\n"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, store_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [(p.returncode, out.strip()) for p, (out, _) in zip(procs, outs, strict=True)] == [(0, "0")] * 3, outs
