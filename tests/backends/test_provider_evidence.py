"""Evidence as cloud providers and vendors write it: provider events (`scope: CLOUD`), load
breakdowns (`wait_events`, `load_by_user`, `load_by_host`), Performance Insights top-SQL rows, and
metric series with any vendor's names, units and labels; loaded, served, cited and read by cards."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

import pytest

from rootproof.backends.live.logs import LogsBackend
from rootproof.backends.snapshot import SnapshotBackend, ref_paths_with_sources
from rootproof.kb import cards
from rootproof.kb.cards import Signal
from rootproof.kb.signals import ref_matches
from rootproof.scenarios import _schema
from rootproof.scenarios.loader import load_ground_truth, load_scenario, validate_scenario
from rootproof.targets import LogsTarget
from rootproof.tools.base import TOOLS, BackendResult, LogScope, PostgresKind, QueryLogsArgs, Scope
from rootproof.tools.refs import canonical_json, ref_text
from rootproof.tools.results import ROW_KINDS, RowsResult, result_type

FIXTURE = Path(__file__).parents[1] / "data" / "scenarios" / "rds-cpu-statement"
SCENARIO = load_scenario(FIXTURE)
BACKEND = SnapshotBackend(SCENARIO)


def _call(tool: str, **args: Any) -> BackendResult:
    return BACKEND.call(tool, TOOLS[tool].args_model.model_validate(args), now=SCENARIO.now, run_id="t")


def _texts(tool: str, out: BackendResult) -> list[str]:
    data = out.json()
    return [ref_text(tool, data, p) for p in ref_paths_with_sources(out)]


# -- the fixture -------------------------------------------------------------------------------


def test_the_provider_fixture_validates_with_the_new_labels() -> None:
    assert validate_scenario(FIXTURE) == []
    truth = load_ground_truth(FIXTURE)
    assert truth.root_cause is not None and truth.root_cause.mechanism == "cpu_saturation"
    assert set(truth.recovery.acceptable) == {"add_index", "cancel_query", "throttle_job"}


# -- logs: scope CLOUD -------------------------------------------------------------------------


def test_every_enumeration_of_log_scopes_is_the_same_and_has_cloud() -> None:
    scopes = get_args(LogScope)
    assert "CLOUD" in scopes and get_args(Scope) == ("ALL", *scopes)
    assert get_args(_schema._LogEntryModel.model_fields["scope"].annotation) == scopes
    assert get_args(LogsTarget.model_fields["scope"].annotation) == scopes
    assert get_args(get_args(Signal.model_fields["scope"].annotation)[0]) == ("ALL", *scopes)
    assert "CLOUD" in TOOLS["query_logs"].json_schema()["properties"]["scope"]["enum"]
    assert "CLOUD" in str(TOOLS["query_logs"].json_schema()["properties"]["scope"]["description"])


def test_provider_events_are_filed_under_cloud_with_the_resource_as_service() -> None:
    out = _call("query_logs", scope="CLOUD", since="1h")
    entries = out.json()["entries"]
    assert {e["scope"] for e in entries} == {"CLOUD"} and len(entries) == 3
    assert {e["source"] for e in entries} == {"aws_rds_events", "cloudwatch_alarms"}
    assert "2026-03-10T09:09:48.000Z INFO orders-prod [aws_rds_events] Finished DB Instance backup" in _texts(
        "query_logs", out
    )
    only = _call("query_logs", scope="CLOUD", service="orders-prod", since="1h").json()["entries"]
    assert [e["message"] for e in only] == ["Finished DB Instance backup", "Backing up DB instance"]
    assert all(e["scope"] != "CLOUD" for e in _call("query_logs", scope="APPLICATION").json()["entries"])


def test_a_wrong_scope_is_one_line_naming_the_file_and_the_field(tmp_path: Path) -> None:
    folder = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, folder)
    path = folder / "snapshot" / "tool_responses.yaml"
    path.write_text(
        path.read_text(encoding="utf-8").replace("scope: CLOUD", "scope: AWS", 1), encoding="utf-8"
    )
    problems = validate_scenario(folder)
    assert len(problems) == 1 and "\n" not in problems[0], problems
    assert problems[0].startswith(
        "rds-cpu-statement/snapshot/tool_responses.yaml: logs[0].scope: expected 'APPLICATION'"
    )
    assert "'CLOUD'" in problems[0] and "(line 3)" in problems[0]


def test_a_live_log_file_target_may_declare_scope_cloud(tmp_path: Path) -> None:
    events = tmp_path / "rds-events.jsonl"
    events.write_text(
        '{"time": "2026-03-10T09:31:04Z", "level": "WARN", "service": "orders-prod", '
        '"message": "Multi-AZ instance failover started."}\n',
        encoding="utf-8",
    )
    target = LogsTarget(
        kind="logs", name="rds-events", paths=[str(events)], service="orders-prod", scope="CLOUD"
    )
    backend = LogsBackend([target], environ={})
    try:
        now = datetime(2026, 3, 10, 9, 40, tzinfo=UTC)
        out = backend.call("query_logs", QueryLogsArgs(scope="CLOUD"), now=now, run_id="t").json()
        assert [(e["scope"], e["message"]) for e in out["entries"]] == [
            ("CLOUD", "Multi-AZ instance failover started.")
        ]
        assert (
            backend.call("query_logs", QueryLogsArgs(scope="DATABASE"), now=now, run_id="t").json()["entries"]
            == []
        )
    finally:
        backend.close()


# -- inspect_postgres: load breakdowns and Performance Insights rows ------------------------------


def test_the_load_kinds_are_rows_everywhere_kinds_are_listed() -> None:
    kinds = set(get_args(PostgresKind))
    assert {"wait_events", "load_by_user", "load_by_host"} <= kinds
    assert set(ROW_KINDS["inspect_postgres"]) <= kinds
    for kind in ("wait_events", "load_by_user", "load_by_host"):
        assert kind in ROW_KINDS["inspect_postgres"] and result_type("inspect_postgres", kind) is RowsResult
        assert kind in TOOLS["inspect_postgres"].description
    assert set(_schema._PostgresModel.model_fields) == kinds
    assert cards._KINDS["inspect_postgres"] == kinds
    assert cards._TABLE_KINDS["inspect_postgres"] == set(ROW_KINDS["inspect_postgres"])


@pytest.mark.parametrize(
    ("kind", "first"),
    [
        ("wait_events", {"name": "CPU", "type": "CPU", "db_load_avg": 7.4}),
        ("load_by_user", {"name": "report_reader", "db_load_avg": 6.9}),
        ("load_by_host", {"id": "10.0.2.71", "db_load_avg": 6.8}),
    ],
)
def test_load_breakdowns_are_rows_cited_as_their_canonical_json(kind: str, first: dict[str, Any]) -> None:
    out = _call("inspect_postgres", kind=kind)
    data = out.json()
    assert data["kind"] == kind and data["total_matches"] == 2 and "window" not in data
    assert data["rows"][0] == first
    assert _texts("inspect_postgres", out)[0] == canonical_json(first)
    # not windowed: a one-minute window still finds them
    assert _call("inspect_postgres", kind=kind, since="1m").json()["rows"][0] == first


def test_a_performance_insights_top_sql_row_loads_whole_and_is_citable() -> None:
    out = _call("inspect_postgres", kind="top_queries", query="customer_email")
    row = out.json()["rows"][0]
    assert row["db_load_avg"] == 6.8 and row["calls_per_sec"] == 3.8
    assert row["wait_events"][0] == {"name": "CPU", "type": "CPU", "db_load_avg": 6.5}
    text = _texts("inspect_postgres", out)[0]
    assert text.startswith(
        '{"calls_per_sec":3.8,"db_load_avg":6.8,"statement":"SELECT o.* FROM orders o WHERE lower('
    )
    assert '"wait_events":[{"db_load_avg":6.5,"name":"CPU","type":"CPU"}' in text
    assert ref_paths_with_sources(out) == {"$.rows[0]": "snapshot"}  # the row, not its nested parts


def test_cards_read_load_rows_with_where_tests() -> None:
    cpu = Signal.model_validate(
        {"tool": "inspect_postgres", "kind": "wait_events", "where": {"type": "CPU", "db_load_avg": ">5"}}
    )
    out = _call("inspect_postgres", kind="wait_events")
    hits = [
        ref_matches(cpu, "inspect_postgres", "wait_events", p, t)
        for p, t in zip(ref_paths_with_sources(out), _texts("inspect_postgres", out), strict=True)
    ]
    assert hits == [True, False]
    statement = Signal.model_validate(
        {
            "tool": "inspect_postgres",
            "kind": "top_queries",
            "where": {"db_load_avg": ">=5", "statement": "nonempty"},
        }
    )
    top = _call("inspect_postgres", kind="top_queries")
    assert ref_matches(
        statement, "inspect_postgres", "top_queries", "$.rows[0]", _texts("inspect_postgres", top)[0]
    )
    with pytest.raises(ValueError, match="a table kind .*load_by_host"):
        Signal.model_validate({"tool": "inspect_postgres", "kind": "settings", "where": {"x": 1}})
    assert (
        Signal.model_validate({"tool": "query_logs", "any": ["failover"], "scope": "CLOUD"}).scope == "CLOUD"
    )


# -- metrics: any vendor's names, units and labels ------------------------------------------------


@pytest.mark.parametrize(
    ("args", "metrics"),
    [
        ({"metric": "CPUUtilization"}, ["CPUUtilization"]),
        ({"metric": "CPU*"}, ["CPUUtilization"]),
        ({"metric": "cpuutilization"}, []),  # names are case-sensitive, as documented
        ({"metric": "db.load.avg"}, ["db.load.avg"]),
        ({"metric": "db.load.*"}, ["db.load.avg"]),
        ({"metric": "db.*.avg"}, ["db.load.avg"]),
        ({"metric": "db?load?avg"}, ["db.load.avg"]),
        ({"metric": "postgresql.conn*"}, ["postgresql.connections"]),
        (
            {"metric": "*", "labels": {"DBInstanceIdentifier": "orders-prod"}},
            ["CPUUtilization", "db.load.avg"],
        ),
        ({"metric": "*", "labels": {"dbinstanceidentifier": "orders-prod"}}, []),
        (
            {"metric": "postgresql.connections", "labels": {"db": "orders", "host": "orders-prod"}},
            ["postgresql.connections"],
        ),
    ],
)
def test_vendor_series_match_globs_and_labels(args: dict[str, Any], metrics: list[str]) -> None:
    out = _call("query_metrics", since="1h", **args)
    assert [s["metric"] for s in out.json()["series"]] == metrics


def test_vendor_series_keep_their_unit_and_labels_in_the_ref_text() -> None:
    out = _call("query_metrics", metric="CPUUtilization", since="1h")
    text = _texts("query_metrics", out)[0]
    assert text.startswith(
        'CPUUtilization{DBInstanceIdentifier="orders-prod"} first=21.4 last=98.1 min=21.4 max=98.6 '
    )
    assert " unit=Percent window=" in text
    high = Signal.model_validate(
        {
            "tool": "query_metrics",
            "metric": "CPU*",
            "trend": "high",
            "threshold": 90,
            "labels": {"DBInstanceIdentifier": "orders-prod"},
        }
    )
    assert ref_matches(high, "query_metrics", None, "$.series[0]", text)
    load = _texts("query_metrics", _call("query_metrics", metric="db.load.*", since="1h"))[0]
    rises = Signal.model_validate(
        {"tool": "query_metrics", "metric": "db.load.avg", "trend": "rises", "threshold": 5}
    )
    assert load.startswith("db.load.avg{") and ref_matches(rises, "query_metrics", None, "$.series[0]", load)
