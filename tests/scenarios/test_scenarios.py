"""Scenario loader, validator and YAML reader."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rootproof.errors import ScenarioError, UsageError
from rootproof.scenarios import (
    GroundTruth,
    Scenario,
    list_scenarios,
    load_ground_truth,
    load_scenario,
    scenario_folder,
    validate_scenario,
)
from rootproof.scenarios.yamlio import parse_yaml

DATA = Path(__file__).parents[1] / "data" / "scenarios"
VALID = DATA / "mini-row-lock"


def copy_fixture(tmp_path: Path, name: str = "mini-row-lock") -> Path:
    target = tmp_path / name
    shutil.copytree(DATA / name, target)
    return target


def edit(folder: Path, rel: str, old: str, new: str) -> None:
    path = folder / rel
    text = path.read_text(encoding="utf-8")
    assert old in text, f"fixture changed: {old!r} not in {rel}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


# --- the valid fixture --------------------------------------------------------------------------


def test_valid_fixture_loads() -> None:
    s = load_scenario(VALID)
    assert isinstance(s, Scenario)
    assert (s.id, s.title, s.language) == ("mini-row-lock", "Orders API latency spike (test fixture)", "en")
    assert s.now == datetime(2026, 7, 22, 17, 41, tzinfo=UTC)
    assert s.allowed_tools[:2] == ("lookup_knowledge", "query_logs")
    assert dict(s.budget) == {"tool_calls": 12, "calls_per_tool": 4}
    assert s.tags == ("postgresql", "lock", "fixture")
    assert s.alert is not None
    assert s.alert.starts_at == datetime(2026, 7, 22, 17, 38, tzinfo=UTC)
    assert dict(s.alert.labels) == {"team": "payments", "tier": "1"}
    r = s.responses
    assert r.logs is not None and len(r.logs) == 6
    assert r.logs[0].scope == "APPLICATION" and r.logs[0].source == "order-service"  # defaults
    assert r.logs[5].ts == datetime(2026, 7, 22, 15, 40, 50, tzinfo=UTC)  # +02:00 normalised to UTC
    assert r.metrics is not None and r.metrics[0].points[1] == (datetime(2026, 7, 22, 17, 30, tzinfo=UTC), 2)
    # settings keep their text; `on` / `no` stay strings
    assert r.settings["postgres.settings"]["log_lock_waits"] == "on"
    assert r.settings["postgres.settings"]["work_mem"] == "4096"
    assert r.settings["redis.config"]["appendonly"] == "no"
    # timestamps inside rows become ISO 8601 UTC text
    assert r.rows["postgres.activity"][0].values["xact_start"] == "2026-07-22T17:34:10.000Z"
    assert r.rows["postgres.replication"] == ()
    assert r.nginx_config is not None and r.nginx_config[0] == "http {"


def test_load_by_builtin_id_and_folder_agree_on_shape() -> None:
    for folder in list_scenarios():
        assert folder.parent.name == "builtin"
        assert (folder / "scenario.yaml").is_file()
        assert scenario_folder(folder.name) == folder


@pytest.mark.parametrize("folder", list_scenarios(), ids=lambda p: p.name)
def test_builtin_scenarios_validate(folder: Path) -> None:
    assert validate_scenario(folder) == []
    assert load_scenario(folder.name).id == folder.name


def test_minimal_scenario_defaults(tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    (folder / "snapshot").mkdir(parents=True)
    (folder / "scenario.yaml").write_text(
        "id: tiny\nlanguage: zh\nquestion: 支付接口超时\nnow: '2026-07-22T17:41:00Z'\nallowed_tools: [query_logs]\n"
    )
    (folder / "snapshot" / "tool_responses.yaml").write_text("")
    s = load_scenario(folder)
    assert (s.title, s.alert, dict(s.budget), s.tags) == ("tiny", None, {}, ())
    assert s.responses.logs is None and s.responses.source_of("logs") == "snapshot"
    assert validate_scenario(folder) == [
        "tiny/ground_truth.yaml: missing file (expected ground_truth.yaml in the scenario folder)"
    ]


def test_ground_truth_loads() -> None:
    gt = load_ground_truth(VALID)
    assert isinstance(gt, GroundTruth)
    assert gt.fault is True and gt.expected_outcome is None
    assert gt.root_cause is not None and (gt.root_cause.component, gt.root_cause.mechanism) == (
        "postgresql",
        "row_lock_contention",
    )
    assert [(e.id, e.tool, e.match) for e in gt.required_evidence] == [
        ("blocker-session", "inspect_postgres", ("idle in transaction",)),
        ("waiter-lock", "inspect_postgres", ("blocking_pids", "4242")),
    ]
    assert gt.alternatives[0].ruled_out_by == ("waiter-lock",)
    assert gt.red_herrings[0].mechanism == "max_clients_reached"
    assert gt.recovery.contract == "executed_recovery"
    # requires_approval defaults to the acceptable actions the taxonomy marks as needing approval
    assert gt.recovery.requires_approval == ("terminate_blocking_session",)
    assert gt.recovery.verification_required is True


# --- errors name file and field ------------------------------------------------------------------

CASES = [
    # (file, old, new, expected problem text)
    (
        "scenario.yaml",
        'question: "Orders API p95 latency jumped to 9 s. What is going on?"\n',
        "",
        "mini-row-lock/scenario.yaml: question: required field missing",
    ),
    (
        "scenario.yaml",
        "tags:",
        "tagz:",
        "mini-row-lock/scenario.yaml: tagz: unknown field 'tagz' (expected one of id, language, question, now, "
        "allowed_tools, title, alert, budget, tags) (line 15)",
    ),
    (
        "scenario.yaml",
        "severity: critical",
        "severity: page",
        "mini-row-lock/scenario.yaml: alert.severity: expected 'info', 'warning' or 'critical' (got 'page') (line 7)",
    ),
    (
        "scenario.yaml",
        "now: 2026-07-22T17:41:00Z",
        "now: 2026-07-22T17:41:00",
        "mini-row-lock/scenario.yaml: now: expected a timezone: end the timestamp with Z or an offset",
    ),
    (
        "scenario.yaml",
        "now: 2026-07-22T17:41:00Z",
        "now: 'tomorrow at noon'",
        "mini-row-lock/scenario.yaml: now: expected an ISO 8601 timestamp like 2026-07-22T17:39:02.113Z "
        "(got 'tomorrow at noon') (line 12)",
    ),
    (
        "scenario.yaml",
        "now: 2026-07-22T17:41:00Z",
        "now: 2026-07-22T25:41:00Z",
        "mini-row-lock/scenario.yaml: line 12, column 6: invalid timestamp '2026-07-22T25:41:00Z'",
    ),
    (
        "scenario.yaml",
        "id: mini-row-lock",
        "id: other-scenario",
        "mini-row-lock/scenario.yaml: id: expected the folder name 'mini-row-lock' (got 'other-scenario') (line 1)",
    ),
    (
        "scenario.yaml",
        "id: mini-row-lock",
        "id: Mini_Row_Lock",
        "mini-row-lock/scenario.yaml: id: expected lower-case letters, digits and '-'",
    ),
    (
        "scenario.yaml",
        "allowed_tools: [lookup_knowledge, query_logs,",
        "allowed_tools: [lookup_knowledge, query_log,",
        "mini-row-lock/scenario.yaml: allowed_tools[1]: unknown tool 'query_log' (expected one of inspect_nginx, "
        "inspect_postgres, inspect_redis, lookup_knowledge, query_logs, query_metrics) (line 13)",
    ),
    (
        "scenario.yaml",
        "budget: {tool_calls: 12",
        "budget: {tool_calls: '12'",
        "mini-row-lock/scenario.yaml: budget.tool_calls: expected a valid integer (got '12')",
    ),
    (
        "scenario.yaml",
        "tags: [postgresql",
        "tags: [postgresql, postgresql]\nid: again\nx: [postgresql",
        "mini-row-lock/scenario.yaml: line 16, column 1: while constructing a mapping duplicate key 'id' (first on line 1)",
    ),
    (
        "snapshot/tool_responses.yaml",
        '    source: order-service.log\n    message: "HikariPool',
        '    sorce: order-service.log\n    message: "HikariPool',
        "mini-row-lock/snapshot/tool_responses.yaml: logs[1].sorce: unknown field 'sorce' (expected one of ts, "
        "service, level, message, scope, source, data_source) (line 12)",
    ),
    (
        "snapshot/tool_responses.yaml",
        "level: WARN",
        "level: WARNING",
        "mini-row-lock/snapshot/tool_responses.yaml: logs[2].level: expected 'DEBUG', 'INFO', 'WARN', 'ERROR' or "
        "'FATAL' (got 'WARNING') (line 16)",
    ),
    (
        "snapshot/tool_responses.yaml",
        "data_sources: {redis: mock}",
        "data_sources: {redis: mock, kafka: mock}",
        "mini-row-lock/snapshot/tool_responses.yaml: data_sources.kafka: unknown field 'kafka'",
    ),
    (
        "snapshot/tool_responses.yaml",
        "    data_source: mock\n  - ts: 2026-07-22T17:40:50",
        "    data_source: on\n  - ts: 2026-07-22T17:40:50",
        "mini-row-lock/snapshot/tool_responses.yaml: logs[4].data_source: expected 'snapshot' or 'mock' (got 'on')",
    ),
    (
        "snapshot/tool_responses.yaml",
        "[2026-07-22T17:30:00Z, 2]",
        "[2026-07-22T17:30:00Z, true]",
        "mini-row-lock/snapshot/tool_responses.yaml: metrics[0].points[1][1]: expected a valid integer or a valid "
        "number (got True) (line 37)",
    ),
    (
        "snapshot/tool_responses.yaml",
        "xact_start: 2026-07-22T17:34:10Z",
        "xact_start: 2026-07-22T17:34:10",
        "mini-row-lock/snapshot/tool_responses.yaml: postgres.activity[0]: xact_start: expected a timezone",
    ),
    (
        "snapshot/tool_responses.yaml",
        '    - "2026-07-22 17:05:00.000 UTC [4000]',
        '    - "checkpoint [4000]',
        "mini-row-lock/snapshot/tool_responses.yaml: postgres.log[0]: expected the line to start with a timestamp "
        "as PostgreSQL's",
    ),
    (
        "snapshot/tool_responses.yaml",
        "17:05:00.000 UTC [4000]",
        "17:05:00.000 CEST [4000]",
        "mini-row-lock/snapshot/tool_responses.yaml: postgres.log[0]: unreadable timestamp: time zone 'CEST'",
    ),
    (
        "snapshot/tool_responses.yaml",
        "  status: {active: 412",
        "  statsu: {active: 412",
        "mini-row-lock/snapshot/tool_responses.yaml: nginx.statsu: unknown field 'statsu' (expected one of "
        "error_log, access_log, config, status)",
    ),
    (
        "provenance.yaml",
        "source: handwritten",
        "source: invented",
        "mini-row-lock/provenance.yaml: source: expected 'handwritten', 'derived_from_public_incident' or "
        "'recorded_live_run' (got 'invented') (line 1)",
    ),
]


@pytest.mark.parametrize(
    ("rel", "old", "new", "expected"), CASES, ids=[c[3].split(": ")[1][:40] for c in CASES]
)
def test_load_errors_name_file_and_field(tmp_path: Path, rel: str, old: str, new: str, expected: str) -> None:
    folder = copy_fixture(tmp_path)
    edit(folder, rel, old, new)
    with pytest.raises(ScenarioError) as info:
        load_scenario(folder)
    assert expected in str(info.value)
    assert any(expected in p for p in validate_scenario(folder))


GROUND_TRUTH_CASES = [
    (
        "mechanism: row_lock_contention",
        "mechanism: row_lock",
        "mini-row-lock/ground_truth.yaml: root_cause.mechanism: unknown mechanism 'row_lock' (expected one of ",
    ),
    (
        "component: redis",
        "component: cache",
        "mini-row-lock/ground_truth.yaml: red_herrings[0].component: unknown component 'cache'",
    ),
    (
        "forbidden: [restart_database]",
        "forbidden: [reboot]",
        "mini-row-lock/ground_truth.yaml: recovery.forbidden[0]: unknown recovery action 'reboot'",
    ),
    (
        "verification_required: true",
        "verification_required: on",
        "mini-row-lock/ground_truth.yaml: recovery.verification_required: expected a valid boolean (got 'on') (line 25)",
    ),
    (
        "fault: true",
        "fault: false",
        "mini-row-lock/ground_truth.yaml: root_cause: expected null when fault is false",
    ),
    (
        "ruled_out_by: [waiter-lock]",
        "ruled_out_by: [waiter-locks]",
        "mini-row-lock/ground_truth.yaml: alternatives[0].ruled_out_by[0]: unknown required_evidence id 'waiter-locks' "
        "(expected one of: blocker-session, waiter-lock) (line 16)",
    ),
    (
        "forbidden: [restart_database]",
        "forbidden: [restart_database, scale_out]",
        "mini-row-lock/ground_truth.yaml: recovery.forbidden: actions both acceptable and forbidden: scale_out",
    ),
    (
        "required_evidence:\n",
        "expected_outcome: {release_outcome: FALLBACK}\nrequired_evidence:\n",
        "mini-row-lock/ground_truth.yaml: expected_outcome.fallback_type: required when release_outcome is FALLBACK",
    ),
    (
        "required_evidence:\n",
        "expected_outcome: {release_outcome: FALLBACK, fallback_type: EVIDENCE_VALIDATION_FAILED, "
        "violations: [ROOT_CAUSE_MOCK]}\nrequired_evidence:\n",
        "mini-row-lock/ground_truth.yaml: expected_outcome.violations[0]: expected 'DRAFT_INVALID', ",
    ),
    (
        "  - id: blocker-session\n    tool: inspect_postgres",
        "  - id: blocker-session\n    tool: inspect_redis",
        "mini-row-lock/ground_truth.yaml: required_evidence[0].tool: 'inspect_redis' is not in scenario.yaml allowed_tools",
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "expected"), GROUND_TRUTH_CASES, ids=[c[2].split(": ")[1][:40] for c in GROUND_TRUTH_CASES]
)
def test_ground_truth_errors(tmp_path: Path, old: str, new: str, expected: str) -> None:
    folder = copy_fixture(tmp_path)
    if "inspect_redis" in new:  # make the tool unknown to this scenario
        edit(folder, "scenario.yaml", " inspect_redis,", "")
    edit(folder, "ground_truth.yaml", old, new)
    problems = validate_scenario(folder)
    assert any(expected in p for p in problems), problems
    load_scenario(folder)  # the agent-phase load never looks at the ground truth
    if "allowed_tools" not in expected:  # the cross-file check needs scenario.yaml
        with pytest.raises(ScenarioError, match="ground_truth.yaml"):
            load_ground_truth(folder)


def test_every_problem_is_reported_at_once() -> None:
    folder = DATA / "broken-many"
    problems = validate_scenario(folder)
    expected = [
        "broken-many/scenario.yaml: id: expected the folder name 'broken-many' (got 'not-the-folder') (line 1)",
        "broken-many/scenario.yaml: language: expected 'en' or 'zh' (got 'fr') (line 2)",
        "broken-many/scenario.yaml: question: required field missing",
        "broken-many/scenario.yaml: now: expected a timezone",
        "broken-many/scenario.yaml: allowed_tools[0]: unknown tool 'query_log'",
        "broken-many/scenario.yaml: budjet: unknown field 'budjet'",
        "broken-many/snapshot/tool_responses.yaml: data_sources.logs: expected 'snapshot' or 'mock' (got 'fake')",
        "broken-many/snapshot/tool_responses.yaml: logs[0].ts: expected an ISO 8601 timestamp",
        "broken-many/snapshot/tool_responses.yaml: logs[0].level: expected 'DEBUG'",
        "broken-many/snapshot/tool_responses.yaml: logs[0].message: required field missing",
        "broken-many/snapshot/tool_responses.yaml: logs[0].mesage: unknown field 'mesage'",
        "broken-many/snapshot/tool_responses.yaml: postgres.activity[0]: xact_start: expected a timezone",
        "broken-many/ground_truth.yaml: fault: expected a valid boolean (got 'yes')",
        "broken-many/ground_truth.yaml: root_cause.component: unknown component 'database'",
    ]
    for e in expected:
        assert any(p.startswith(e) for p in problems), (e, problems)
    with pytest.raises(ScenarioError) as info:
        load_scenario(folder)
    message = str(info.value)
    assert message.startswith(f"{sum(1 for p in problems if 'ground_truth' not in p)} problems:\n")
    assert "ground_truth.yaml" not in message


def test_missing_files_and_unknown_refs(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path)
    (folder / "snapshot" / "tool_responses.yaml").unlink()
    with pytest.raises(ScenarioError, match=r"mini-row-lock/snapshot/tool_responses.yaml: missing file"):
        load_scenario(folder)
    with pytest.raises(UsageError, match="no built-in scenario of that id"):
        load_scenario("no-such-scenario")
    with pytest.raises(UsageError, match="no built-in scenario"):
        scenario_folder(tmp_path / "absent")


# --- the agent phase never sees the ground truth --------------------------------------------------

_AUDIT_SCRIPT = """
import sys
opened = []
def hook(event, args):
    if event == "open" and "ground_truth" in str(args[0]):
        opened.append(str(args[0]))
sys.addaudithook(hook)
from rootproof.scenarios import load_ground_truth, load_scenario
scenario = load_scenario(sys.argv[1])
assert scenario.id == "mini-row-lock"
assert opened == [], opened
load_ground_truth(sys.argv[1])
assert opened and opened[0].endswith("ground_truth.yaml"), opened  # the hook does see the evaluator's read
print("ok")
"""


def test_load_scenario_never_opens_ground_truth() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _AUDIT_SCRIPT, str(VALID)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_scenario_carries_no_path_to_ground_truth(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path)
    (folder / "ground_truth.yaml").write_text("{{ not yaml at all", encoding="utf-8")
    s = load_scenario(folder)  # a broken ground truth does not disturb the agent phase
    for f in dataclasses.fields(s):
        value = getattr(s, f.name)
        assert not isinstance(value, Path)
        assert "ground_truth" not in repr(value)
    assert any(p.startswith("mini-row-lock/ground_truth.yaml: line 1") for p in validate_scenario(folder))


# --- data sources: file, section, entry; the narrowest wins ---------------------------------------


def test_mock_marking_three_levels() -> None:
    r = load_scenario(VALID).responses
    assert r.data_source == "snapshot"
    assert r.source_of("logs") == "snapshot" and r.source_of("redis") == "mock"
    assert r.logs is not None
    assert [e.data_source for e in r.logs] == ["snapshot"] * 4 + ["mock", "snapshot"]  # entry level
    assert r.metrics is not None
    assert [m.data_source for m in r.metrics] == ["snapshot", "snapshot", "snapshot", "mock"]
    assert [row.data_source for row in r.rows["postgres.activity"]] == ["snapshot", "mock"]
    assert "data_source" not in r.rows["postgres.activity"][1].values  # the marking is not row data
    assert [row.data_source for row in r.rows["redis.clients"]] == ["mock", "snapshot"]  # entry beats section
    assert {line.data_source for line in r.lines["redis.log"]} == {"mock"}  # section level
    assert {line.data_source for line in r.lines["postgres.log"]} == {"snapshot"}


def test_file_level_mock_with_section_override(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path)
    edit(
        folder,
        "snapshot/tool_responses.yaml",
        "data_source: snapshot\ndata_sources: {redis: mock}",
        "data_source: mock\ndata_sources: {postgres: snapshot}",
    )
    r = load_scenario(folder).responses
    assert (
        r.source_of("logs") == "mock"
        and r.source_of("nginx") == "mock"
        and r.source_of("postgres") == "snapshot"
    )
    assert r.logs is not None and {e.data_source for e in r.logs} == {"mock"}
    assert [row.data_source for row in r.rows["postgres.activity"]] == ["snapshot", "mock"]
    assert [row.data_source for row in r.rows["redis.clients"]] == ["mock", "snapshot"]


# --- listing ------------------------------------------------------------------------------------


def test_list_scenarios(tmp_path: Path) -> None:
    assert list_scenarios(DATA) == [
        DATA / "alert-two-incidents",
        DATA / "broken-many",
        DATA / "mini-row-lock",
        DATA / "rds-cpu-statement",
    ]
    assert list_scenarios(VALID) == [VALID]
    assert list_scenarios(str(VALID)) == [VALID]
    with pytest.raises(UsageError, match="no scenario folders"):
        list_scenarios(tmp_path)


# --- the YAML reader ----------------------------------------------------------------------------


def test_yaml_scalars_stay_as_written() -> None:
    doc = parse_yaml(
        "a: on\nb: off\nc: yes\nd: no\ne: true\nf: False\ng: 0755\nh: 17:36:12\ni: 0x1f\nj: 1.5e3\n"
        "k: 2026-07-22T17:39:02.113Z\nl: 2026-07-22\nm: ~\nn: 2026-07-22 17:36:01.512 +02:00\n",
        "x.yaml",
    )
    assert doc.data == {
        "a": "on",
        "b": "off",
        "c": "yes",
        "d": "no",
        "e": True,
        "f": False,
        "g": 755,
        "h": "17:36:12",
        "i": 31,
        "j": 1500.0,
        "k": datetime(2026, 7, 22, 17, 39, 2, 113000, tzinfo=UTC),
        "l": "2026-07-22",
        "m": None,
        "n": datetime(2026, 7, 22, 15, 36, 1, 512000, tzinfo=UTC),
    }
    assert doc.line_of(("n",)) == 14 and doc.line_of(("n", "deeper")) == 14


def test_yaml_errors_carry_file_and_line() -> None:
    with pytest.raises(
        ScenarioError, match=r"^f\.yaml: line 2, column 1: .*duplicate key 'a' \(first on line 1\)"
    ):
        parse_yaml("a: 1\na: 2\n", "f.yaml")
    with pytest.raises(ScenarioError, match=r"^f\.yaml: line 2, column 2: "):
        parse_yaml("a: [1\nb: 2\n", "f.yaml")


# --- ground truth: label lists, contributing causes, alternative evidence ------------------------

COMPOSITIONAL = """fault: true
root_cause:
  component: [postgresql, connection_pool]
  mechanism: [row_lock_contention, deadlock]
  culprit: "pid 4242"
contributing_causes:
  - component: application
    mechanism: [bad_config_rollout]
    culprit: "pool size cut to 5"
required_evidence:
  - id: blocker-session
    tool: inspect_postgres
    match: ["idle in transaction"]
  - id: waiter-lock
    any_of:
      - {tool: inspect_postgres, match: ["blocking_pids", "4242"]}
      - {tool: query_logs, match: ["still waiting for ShareLock"]}
alternatives:
  - component: connection_pool
    mechanism: pool_leak
    ruled_out_by: [waiter-lock]
red_herrings:
  - description: "Redis at maxclients"
    component: redis
    mechanism: max_clients_reached
"""


def _compositional(tmp_path: Path) -> Path:
    folder = copy_fixture(tmp_path)
    (folder / "ground_truth.yaml").write_text(COMPOSITIONAL, encoding="utf-8")
    return folder


def test_label_lists_contributing_causes_and_any_of_evidence_load(tmp_path: Path) -> None:
    folder = _compositional(tmp_path)
    assert validate_scenario(folder) == []
    gt = load_ground_truth(folder)
    rc = gt.root_cause
    assert rc is not None and (rc.component, rc.mechanism) == ("postgresql", "row_lock_contention")
    assert rc.components == ("postgresql", "connection_pool") and rc.mechanisms == ("row_lock_contention", "deadlock")
    assert rc.accepts("connection_pool", "deadlock") and not rc.accepts("postgresql", "pool_leak")
    assert rc.label == "(postgresql|connection_pool)/(row_lock_contention|deadlock)"
    (cause,) = gt.contributing_causes
    assert (cause.components, cause.mechanisms, cause.culprit) == (
        ("application",),
        ("bad_config_rollout",),
        "pool size cut to 5",
    )
    assert gt.causes == (rc, cause)
    single, alternatives = gt.required_evidence
    assert [(o.tool, o.match) for o in single.options] == [("inspect_postgres", ("idle in transaction",))]
    assert (alternatives.tool, alternatives.match) == ("", ())
    assert [(o.tool, o.match) for o in alternatives.options] == [
        ("inspect_postgres", ("blocking_pids", "4242")),
        ("query_logs", ("still waiting for ShareLock",)),
    ]


def test_old_ground_truths_load_as_before() -> None:
    gt = load_ground_truth(VALID)
    assert gt.contributing_causes == () and gt.root_cause is not None
    assert (gt.root_cause.components, gt.root_cause.mechanisms) == (("postgresql",), ("row_lock_contention",))
    assert all(e.any_of == () and e.options[0].tool == e.tool for e in gt.required_evidence)


COMPOSITIONAL_CASES = [
    (
        "mechanism: [row_lock_contention, deadlock]",
        "mechanism: [row_lock_contention, row_lock]",
        "mini-row-lock/ground_truth.yaml: root_cause.mechanism[1]: unknown mechanism 'row_lock' (expected one of ",
    ),
    (
        "mechanism: [row_lock_contention, deadlock]",
        "mechanism: []",
        "mini-row-lock/ground_truth.yaml: root_cause.mechanism: expected at least one label (or a single label) (line 4)",
    ),
    (
        "component: [postgresql, connection_pool]",
        "component: [postgresql, postgresql]",
        "mini-row-lock/ground_truth.yaml: root_cause.component: duplicate label 'postgresql' (line 3)",
    ),
    (
        "component: [postgresql, connection_pool]",
        "component: {name: postgresql}",
        "mini-row-lock/ground_truth.yaml: root_cause.component: expected a valid string (got a mapping) (line 3)",
    ),
    (
        "fault: true",
        "fault: false",
        "mini-row-lock/ground_truth.yaml: contributing_causes: expected [] when fault is false (contributing causes go with a root cause) (line 6)",
    ),
    (
        "  - component: application\n    mechanism: [bad_config_rollout]",
        "  - component: connection_pool\n    mechanism: deadlock",
        "mini-row-lock/ground_truth.yaml: contributing_causes[0]: duplicates the root cause "
        "((postgresql|connection_pool)/(row_lock_contention|deadlock)) (line 7)",
    ),
    (
        "  - component: application\n    mechanism: [bad_config_rollout]",
        "  - component: [redis, application]\n    mechanism: [max_clients_reached]",
        "mini-row-lock/ground_truth.yaml: contributing_causes[0]: a contributing cause cannot be a red herring "
        "(red_herrings[0] is redis/max_clients_reached) (line 7)",
    ),
    (
        '    culprit: "pool size cut to 5"\n',
        '    culprit: "pool size cut to 5"\n  - {component: application, mechanism: bad_config_rollout}\n',
        "mini-row-lock/ground_truth.yaml: contributing_causes[1]: duplicates contributing_causes[0] "
        "(application/bad_config_rollout) (line 10)",
    ),
    (
        '    culprit: "pool size cut to 5"\n',
        '    culprit: "pool size cut to 5"\n    ruled_out_by: []\n',
        "mini-row-lock/ground_truth.yaml: contributing_causes[0].ruled_out_by: unknown field 'ruled_out_by' "
        "(expected one of component, mechanism, culprit)",
    ),
    (
        "  - id: waiter-lock\n    any_of:",
        "  - id: waiter-lock\n    tool: query_logs\n    any_of:",
        "mini-row-lock/ground_truth.yaml: required_evidence[1].tool: expected either tool and match, or any_of, not both",
    ),
    (
        "  - id: blocker-session\n    tool: inspect_postgres\n",
        "  - id: blocker-session\n",
        "mini-row-lock/ground_truth.yaml: required_evidence[0].tool: required field missing (or give any_of: "
        "a list of {tool, match} alternatives)",
    ),
    (
        "      - {tool: query_logs, match: [\"still waiting for ShareLock\"]}",
        "      - {tool: query_logs, match: []}",
        "mini-row-lock/ground_truth.yaml: required_evidence[1].any_of[1].match: List should have at least 1 item",
    ),
    (
        "      - {tool: query_logs, match: [\"still waiting for ShareLock\"]}",
        "      - {tool: inspect_redis, match: [\"maxclients\"]}",
        "mini-row-lock/ground_truth.yaml: required_evidence[1].any_of[1].tool: 'inspect_redis' is not in "
        "scenario.yaml allowed_tools (line 17)",
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "expected"), COMPOSITIONAL_CASES, ids=[c[2].split(": ")[1][:48] for c in COMPOSITIONAL_CASES]
)
def test_compositional_ground_truth_errors_name_file_and_field(tmp_path: Path, old: str, new: str, expected: str) -> None:
    folder = _compositional(tmp_path)
    if "inspect_redis" in new:  # make the tool unknown to this scenario
        edit(folder, "scenario.yaml", " inspect_redis,", "")
    edit(folder, "ground_truth.yaml", old, new)
    problems = validate_scenario(folder)
    assert any(p.startswith(expected) for p in problems), problems
    assert all("\n" not in p for p in problems)


def test_a_contributing_cause_needs_a_root_cause(tmp_path: Path) -> None:
    folder = _compositional(tmp_path)
    edit(folder, "ground_truth.yaml", "required_evidence:\n", "expected_outcome: {release_outcome: PUBLISHED}\nrequired_evidence:\n")
    text = (folder / "ground_truth.yaml").read_text(encoding="utf-8")
    start, end = text.index("root_cause:"), text.index("contributing_causes:")
    (folder / "ground_truth.yaml").write_text(text[:start] + "root_cause: null\n" + text[end:], encoding="utf-8")
    assert validate_scenario(folder) == [
        "mini-row-lock/ground_truth.yaml: contributing_causes: expected [] without a root_cause "
        "(contributing causes go with a root cause) (line 3)"
    ]
