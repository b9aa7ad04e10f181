"""`rootproof import opensre`: OpenSRE's synthetic RDS cases as scenario folders.

The evidence is kept as given (nothing added), the answer key reaches only `ground_truth.yaml`,
every `match` string occurs in a ref the converted snapshot yields, `base:` inheritance follows
OpenSRE's (fields merged, evidence files taken whole), and bad input is one line naming the
file and the field, exit 2. The shared cases come from `ROOTPROOF_TEST_SHARED_DATA`.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from rootproof.cli import app
from rootproof.errors import ScenarioError
from rootproof.harness import Harness
from rootproof.run.records import MemoryTraceSink
from rootproof.runtime import Runtime
from rootproof.scenarios.importers import ImportLimits, import_opensre
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import Settings
from rootproof.tools.refs import NO_EVIDENCE_PATH, canonical_json, fold_text
from tests.cli_support import run_cli
from tests.services import inherited_env

ROOT = Path(__file__).resolve().parents[2]
SHARED_CASES = (
    "000-healthy",
    "001-replication-lag",
    "003-storage-full",
    "004-cpu-saturation-bad-query",
    "005-failover",
    "009-dual-fault-connection-cpu",
    "011-cpu-storage-compositional",
    "013-storage-recovery-false-alert",
)
AGENT_VISIBLE = ("scenario.yaml", "snapshot/tool_responses.yaml")


# ---------------------------------------------------------------------------------------------
# Fixture-built cases (written here, not copied from anyone)
# ---------------------------------------------------------------------------------------------

T0 = "2026-05-04T07:00:00Z"


def _times(n: int, minute0: int = 0) -> list[str]:
    return [f"2026-05-04T07:{minute0 + i:02d}:00Z" for i in range(n)]


def _series(
    name: str, values: list[float], *, instance: str = "ledger-db", unit: str = "Percent"
) -> dict[str, Any]:
    return {
        "id": f"m_{name.lower()}_confounder",
        "label": name,
        "metric_name": name,
        "dimensions": [{"Name": "DBInstanceIdentifier", "Value": instance}],
        "stat": "Average",
        "unit": unit,
        "status_code": "Complete",
        "timestamps": _times(len(values)),
        "values": values,
    }


def _metrics(*series: dict[str, Any]) -> dict[str, Any]:
    return {
        "namespace": "AWS/RDS",
        "period": 60,
        "start_time": T0,
        "end_time": "2026-05-04T07:10:00Z",
        "metric_data_results": list(series),
    }


EVENTS = {
    "events": [
        {
            "date": "2026-05-04T07:04:10Z",
            "message": "DB instance ledger-db has 1995 connections, approaching the maximum of 2000.",
            "source_identifier": "ledger-db",
            "source_type": "db-instance",
            "event_categories": ["notification"],
        },
        {
            "date": "2026-05-04T07:06:30Z",
            "message": "DB instance ledger-db refused new connections.",
            "source_identifier": "ledger-db",
            "source_type": "db-instance",
            "event_categories": ["notification", "failure"],
        },
    ]
}
PI = {
    "db_instance_identifier": "ledger-db",
    "start_time": T0,
    "end_time": "2026-05-04T07:10:00Z",
    "db_load": {"timestamps": _times(3), "values": [1.0, 3.5, 6.0], "unit": "Average Active Sessions"},
    "top_sql": [
        {
            "statement": "SELECT * FROM ledger_entries WHERE account_id = $1",
            "db_load_avg": 4.2,
            "wait_events": [{"name": "Client:ClientRead", "type": "Client", "db_load_avg": 3.9}],
            "calls_per_sec": 2.5,
        }
    ],
    "top_wait_events": [{"name": "Client:ClientRead", "type": "Client", "db_load_avg": 3.9}],
    "top_users": [{"name": "ledger_svc", "db_load_avg": 4.1}],
    "top_hosts": [{"id": "10.9.0.4", "db_load_avg": 2.2}],
}
ALERT = {
    "title": "[test] Connections Critical On ledger-db",
    "state": "alerting",
    "alert_source": "cloudwatch",
    "commonLabels": {
        "alertname": "RDSConnectionsHigh",
        "severity": "critical",
        "service": "rds",
        "engine": "postgres",
    },
    "commonAnnotations": {
        "summary": "ledger-db is at 99% of its connection limit.",
        "error": "",
        "db_instance_identifier": "ledger-db",
        "rds_failure_mode": "connection_exhaustion",
        "scenario_difficulty": "2",
    },
}
ANSWER = {
    "root_cause_category": "resource_exhaustion",
    "required_keywords": ["connection pool leak", "ClientRead"],
    "required_evidence_sources": ["aws_performance_insights"],
    "forbidden_categories": ["cpu_saturation"],
    "model_response": (
        "ROOT_CAUSE: A connection pool leak in ledger_svc is causing the connection exhaustion on ledger-db: "
        "sessions stay open waiting on Client:ClientRead.\n"
        "ROOT_CAUSE_CATEGORY: resource_exhaustion\n\n"
        "VALIDATED_CLAIMS:\n"
        "- Performance Insights shows Client:ClientRead as the dominant wait event at 3.9 AAS for ledger_svc. [evidence: aws_performance_insights]\n"
        "- CPUUtilization stayed at 20%, ruling out CPU saturation. [evidence: aws_cloudwatch_metrics]\n\n"
        "NON_VALIDATED_CLAIMS:\n- Terminating leaked sessions would restore service.\n\n"
        "CAUSAL_CHAIN:\n- ledger_svc leaks connections.\n"
    ),
}
BASE_META = {
    "schema_version": "1.0",
    "scenario_id": "900-base",
    "engine": "postgres",
    "db_instance_identifier": "ledger-db",
    "failure_mode": "healthy",
    "severity": "info",
    "available_evidence": ["aws_cloudwatch_metrics", "aws_rds_events", "aws_performance_insights"],
}
HEALTHY_ANSWER = {
    "root_cause_category": "healthy",
    "required_keywords": ["normal"],
    "model_response": "ROOT_CAUSE: Everything is within normal bounds.\nROOT_CAUSE_CATEGORY: healthy\n",
}


def _write(folder: Path, files: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in files.items():
        path = folder / name
        if isinstance(value, str):
            path.write_text(value, encoding="utf-8")
        elif name.endswith(".json"):
            path.write_text(json.dumps(value, indent=2), encoding="utf-8")
        else:
            path.write_text(yaml.safe_dump(value, sort_keys=False), encoding="utf-8")
    return folder


def _base(root: Path) -> Path:
    cpu = _series("CPUUtilization", [20.0, 21.5, 19.0])
    storage = _series("FreeStorageSpace", [9e10, 9e10, 9e10], unit="Bytes")
    return _write(
        root / "900-base",
        {
            "scenario.yml": BASE_META,
            "alert.json": ALERT,
            "answer.yml": HEALTHY_ANSWER,
            "aws_cloudwatch_metrics.json": _metrics(cpu, storage),
            "aws_rds_events.json": {"events": []},
            "aws_performance_insights.json": PI,
        },
    )


def _case(root: Path, name: str = "901-leak", **files: Any) -> Path:
    defaults: dict[str, Any] = {
        "scenario.yml": {
            "base": "900-base",
            "scenario_id": name,
            "failure_mode": "connection_exhaustion",
            "severity": "critical",
        },
        "alert.json": ALERT,
        "answer.yml": ANSWER,
        "aws_rds_events.json": EVENTS,
        "aws_cloudwatch_metrics.json": _metrics(
            _series("DatabaseConnections", [1500.0, 1900.0, 1995.0], unit="Count"),
            _series("CPUUtilization", [20.0, 22.0, 21.0]),
        ),
    }
    defaults.update({k.replace("__", "."): v for k, v in files.items()})
    return _write(root / name, {k: v for k, v in defaults.items() if v is not None})


def _read(folder: Path, name: str) -> Any:
    return yaml.safe_load((folder / name).read_text(encoding="utf-8"))


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["import", "opensre", *args])


# ---------------------------------------------------------------------------------------------
# Ref texts of a written snapshot, recomputed here as docs/scenario-files.md "Evidence refs" says
# ---------------------------------------------------------------------------------------------


def _ts(value: Any) -> str:
    from datetime import datetime

    from rootproof.scenarios.types import format_timestamp

    return format_timestamp(datetime.fromisoformat(str(value)))


def _ref_texts(folder: Path) -> dict[str, list[str]]:
    """tool → the texts of every ref a call can yield (a series: its name, labels and unit)."""
    doc = _read(folder, "snapshot/tool_responses.yaml") or {}
    out: dict[str, list[str]] = {"query_logs": [], "query_metrics": [], "inspect_postgres": []}
    for e in doc.get("logs") or []:
        out["query_logs"].append(
            f"{_ts(e['ts'])} {e['level']} {e['service']} [{e.get('source', e['service'])}] {e['message']}"
        )
    for s in doc.get("metrics") or []:
        labels = s.get("labels") or {}
        shown = "{" + ",".join(f'{k}="{labels[k]}"' for k in sorted(labels)) + "}" if labels else ""
        out["query_metrics"].append(f"{s['metric']}{shown} first=… unit={s.get('unit', '')}")
    for rows in (doc.get("postgres") or {}).values():
        out["inspect_postgres"].extend(canonical_json(r) for r in rows)
    return out


def _alternatives(item: dict[str, Any]) -> list[dict[str, Any]]:
    return list(item["any_of"]) if "any_of" in item else [{"tool": item["tool"], "match": item["match"]}]


CALLS: dict[str, list[dict[str, Any]]] = {
    "query_logs": [{"since": "7d", "limit": 200}],
    "query_metrics": [{"metric": "*", "since": "7d"}],
    "inspect_postgres": [{"kind": k} for k in ("top_queries", "wait_events", "load_by_user", "load_by_host")],
}


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    home = tmp_path_factory.mktemp("home")
    return Harness(Runtime.from_settings(Settings(data_dir=Path(home)), sink=MemoryTraceSink()))


def _tool_refs(harness: Harness, folder: Path) -> dict[str, list[str]]:
    """tool → the text of every ref the converted snapshot yields through the tool boundary."""
    scenario = load_scenario(folder)
    out: dict[str, list[str]] = {}
    for tool, calls in CALLS.items():
        for args in calls:
            outcome, _ = harness.tool_call(tool, args, scenario=scenario)
            assert outcome.invocation.status == "READY", outcome.invocation
            out.setdefault(tool, []).extend(
                r.text for r in outcome.invocation.evidence_refs if r.raw_path != NO_EVIDENCE_PATH
            )
    return out


def _assert_matches_occur(folder: Path, harness: Harness | None = None) -> None:
    """Every alternative of every required evidence item is matched by a ref text: recomputed from
    the written snapshot, and (with `harness`) as the tools really return them."""
    sources = [_ref_texts(folder)] + ([_tool_refs(harness, folder)] if harness is not None else [])
    truth = _read(folder, "ground_truth.yaml")
    for texts in sources:
        for item in truth["required_evidence"]:
            for alt in _alternatives(item):
                hits = [
                    t for t in texts[alt["tool"]] if all(fold_text(m) in fold_text(t) for m in alt["match"])
                ]
                assert hits, (folder.name, item["id"], alt)


# ---------------------------------------------------------------------------------------------
# The shared cases
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    raw = os.environ.get("ROOTPROOF_TEST_SHARED_DATA", "")
    src = Path(raw) / "opensre-rds"
    if not raw or not src.is_dir():
        pytest.skip("ROOTPROOF_TEST_SHARED_DATA is not set or holds no opensre-rds folder")
    out = tmp_path_factory.mktemp("opensre-out")
    result = import_opensre(src, out)
    assert [c.case for c in result.cases] == list(SHARED_CASES)
    return src, out


def test_all_shared_cases_convert_into_complete_scenario_folders(
    shared_out: tuple[Path, Path], harness: Harness
) -> None:
    _, out = shared_out
    for case in SHARED_CASES:
        folder = out / f"opensre-{case}"
        for name in (
            "scenario.yaml",
            "snapshot/tool_responses.yaml",
            "ground_truth.yaml",
            "provenance.yaml",
            "LICENSE",
        ):
            assert (folder / name).is_file(), (case, name)
        scenario = _read(folder, "scenario.yaml")
        assert scenario["id"] == folder.name
        assert scenario["allowed_tools"] == [
            "lookup_knowledge",
            "query_logs",
            "query_metrics",
            "inspect_postgres",
        ]
        assert "rds_failure_mode" not in scenario["alert"]["labels"]
        provenance = _read(folder, "provenance.yaml")
        assert provenance["source"] == "derived_from_public_incident"
        assert any("Tracer-Cloud/opensre" in r and "Apache-2.0" in r for r in provenance["references"])
        _assert_matches_occur(folder, harness)


def test_every_converted_case_validates(shared_out: tuple[Path, Path], tmp_path: Path) -> None:
    _, out = shared_out
    res = CliRunner().invoke(app, ["scenarios", "validate", str(out)])
    assert res.exit_code == 0, res.output
    src = tmp_path / "cases"  # and the fixture-built ones: inheritance, old names, a left-out metric
    _base(src)
    _case(src)
    _case(src, "902-old-names", **{"aws_rds_events.json": None, "rds_events.json": EVENTS})
    import_opensre(src, tmp_path / "out")
    res = CliRunner().invoke(app, ["scenarios", "validate", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output


def test_shared_ground_truth_follows_the_answer_prose(shared_out: tuple[Path, Path]) -> None:
    _, out = shared_out

    def truth(case: str) -> dict[str, Any]:
        return dict(_read(out / f"opensre-{case}", "ground_truth.yaml"))

    for control in ("000-healthy", "013-storage-recovery-false-alert"):
        assert truth(control)["fault"] is False and truth(control)["root_cause"] is None
        assert truth(control)["recovery"]["contract"] == "none"
    leak = truth(
        "009-dual-fault-connection-cpu"
    )  # failure_mode says connection_exhaustion; the answer a leak
    assert (leak["root_cause"]["component"], leak["root_cause"]["mechanism"]) == (
        "connection_pool",
        "pool_leak",
    )
    assert "contributing_causes" not in leak  # the answer: one cause, two symptoms
    storage = truth("003-storage-full")["root_cause"]
    assert storage["mechanism"] == ["storage_full", "disk_full"]
    both = truth("011-cpu-storage-compositional")
    assert both["root_cause"]["mechanism"] == ["cpu_saturation", "slow_query"]  # a query burns the CPU
    assert [c["mechanism"] for c in both["contributing_causes"]] == [["storage_full", "disk_full"]]
    assert {a["mechanism"] for a in both["alternatives"]} == {"connection_exhaustion", "replication_lag"}
    assert truth("005-failover")["root_cause"]["mechanism"] == "failover"
    assert "expand_storage" in truth("003-storage-full")["recovery"]["acceptable"]
    assert "add_index" in truth("004-cpu-saturation-bad-query")["recovery"]["acceptable"]


def _visible(folder: Path) -> str:
    """What the agent phase may read, without the scenario id (the folder's name)."""
    scenario = _read(folder, "scenario.yaml")
    scenario.pop("id")
    return fold_text(
        json.dumps(scenario, ensure_ascii=False)
        + (folder / "snapshot/tool_responses.yaml").read_text(encoding="utf-8")
    )


def _raw_visible(case: Path) -> str:
    """The peer's evidence and alert as given (without the alert's answer-naming annotation)."""
    parts = []
    for p in sorted(case.iterdir()):
        if p.suffix == ".json" and p.name != "alert.json":
            parts.append(p.read_text(encoding="utf-8"))
    alert = json.loads((case / "alert.json").read_text(encoding="utf-8"))
    alert.get("commonAnnotations", {}).pop("rds_failure_mode", None)
    parts.append(json.dumps(alert, ensure_ascii=False))
    return fold_text("\n".join(parts))


def test_the_answer_never_reaches_agent_visible_files(shared_out: tuple[Path, Path]) -> None:
    src, out = shared_out
    base_raw = _raw_visible(src / "000-healthy")
    for case in SHARED_CASES:
        key = yaml.safe_load((src / case / "answer.yml").read_text(encoding="utf-8"))
        meta = yaml.safe_load((src / case / "scenario.yml").read_text(encoding="utf-8"))
        visible, raw = _visible(out / f"opensre-{case}"), _raw_visible(src / case) + base_raw
        mode = fold_text(meta["failure_mode"])
        assert mode not in visible or mode in raw, case  # "failover" is in RDS's own event messages
        for sentence in re.split(r"(?<=[.!?])\s+|\n", key["model_response"]):  # the reference answer's prose
            s = fold_text(sentence.strip(" -"))
            if len(s) >= 40:  # 011's alert says its first sentence itself: kept, it is the alert's
                assert s not in visible or s in raw, (case, sentence)
        words = [
            *key.get("required_keywords", []),
            *key.get("forbidden_keywords", []),
            *key.get("ruling_out_keywords", []),
        ]
        for word in words:  # a keyword the agent sees must be in the peer's own evidence: nothing added
            assert fold_text(word) not in visible or fold_text(word) in raw, (case, word)


# ---------------------------------------------------------------------------------------------
# Fixture cases
# ---------------------------------------------------------------------------------------------


def test_a_case_inherits_fields_and_the_evidence_files_it_leaves_out(
    tmp_path: Path, harness: Harness
) -> None:
    src = tmp_path / "cases"
    _base(src)
    _case(src, aws_cloudwatch_metrics__json=None, aws_rds_events__json=EVENTS)  # no metrics file of its own
    result = import_opensre(src, tmp_path / "out")
    leak = next(c for c in result.cases if c.case == "901-leak")
    assert leak.bases == ("900-base",)
    assert leak.sources["metrics"] == ["900-base/aws_cloudwatch_metrics.json"]
    assert leak.sources["events"] == ["901-leak/aws_rds_events.json"]
    assert leak.sources["pi"] == ["900-base/aws_performance_insights.json"]
    responses = _read(tmp_path / "out/opensre-901-leak", "snapshot/tool_responses.yaml")
    assert {s["metric"] for s in responses["metrics"]} == {
        "CPUUtilization",
        "FreeStorageSpace",
        "db.load.avg",
    }
    truth = _read(tmp_path / "out/opensre-901-leak", "ground_truth.yaml")
    assert truth["root_cause"]["mechanism"] == "pool_leak"  # the prose, not failure_mode
    assert truth["required_evidence"][0]["id"] == "performance-insights"
    _assert_matches_occur(tmp_path / "out/opensre-901-leak", harness)


def test_a_missing_base_is_exit_2_naming_it(tmp_path: Path) -> None:
    src = tmp_path / "cases"
    _case(src)  # its base 900-base does not exist
    res = _cli(str(src), str(tmp_path / "out"))
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("Error: 901-leak/scenario.yml: base: ")
        and "'900-base'" in lines[0]
    )
    assert not (tmp_path / "out").exists()
    # --base names where bases live
    _base(tmp_path / "elsewhere")
    assert (
        _cli(str(src / "901-leak"), str(tmp_path / "out"), "--base", str(tmp_path / "elsewhere")).exit_code
        == 0
    )


def test_a_metric_the_case_leaves_out_stays_out(tmp_path: Path) -> None:
    src = tmp_path / "cases"
    _base(src)  # the base has FreeStorageSpace; the case's own metrics file does not
    _case(src)
    import_opensre(src, tmp_path / "out")
    responses = _read(tmp_path / "out/opensre-901-leak", "snapshot/tool_responses.yaml")
    assert "FreeStorageSpace" not in {s["metric"] for s in responses["metrics"]}


def test_the_older_file_names_and_split_metric_files_are_read(tmp_path: Path) -> None:
    src = tmp_path / "cases"
    old = _case(
        src,
        "902-old-names",
        **{
            "scenario.yml": {
                **BASE_META,
                "failure_mode": "connection_exhaustion",
                "available_evidence": ["rds_metrics", "rds_events", "performance_insights"],
            },
            "aws_cloudwatch_metrics.json": None,
            "aws_rds_events.json": None,
            "cloudwatch_metrics.json": _metrics(
                _series("DatabaseConnections", [1.0, 2.0, 3.0], unit="Count")
            ),
            "rds_events.json": EVENTS,
            "performance_insights.json": PI,
        },
    )
    split = _case(
        src,
        "903-split",
        **{
            "scenario.yml": {**BASE_META, "failure_mode": "connection_exhaustion"},
            "aws_cloudwatch_metrics.json": None,
        },
    )
    _write(
        split,
        {
            "aws_cloudwatch_metrics_envelope.json": {
                "namespace": "AWS/RDS",
                "period": 60,
                "start_time": T0,
                "end_time": "2026-05-04T07:10:00Z",
            }
        },
    )
    for s in (_series("CPUUtilization", [1.0, 2.0]), _series("ReadIOPS", [5.0, 6.0], unit="Count/Second")):
        _write(split, {f"aws_cloudwatch_metrics_{s['metric_name']}.json": s})
    result = {c.case: c for c in import_opensre(src, tmp_path / "out").cases}
    assert result["902-old-names"].sources == {
        "metrics": ["902-old-names/cloudwatch_metrics.json"],
        "events": ["902-old-names/rds_events.json"],
        "pi": ["902-old-names/performance_insights.json"],
    }
    assert (
        result["902-old-names"].counts["logs"] == 2
        and result["902-old-names"].counts["postgres.top_queries"] == 1
    )
    assert result["903-split"].counts["metrics"] == 2
    assert old.name == "902-old-names"


def test_the_conversion_keeps_the_evidence_as_given(tmp_path: Path) -> None:
    src = tmp_path / "cases"
    _base(src)
    _case(src)
    import_opensre(src, tmp_path / "out")
    folder = tmp_path / "out/opensre-901-leak"
    responses = _read(folder, "snapshot/tool_responses.yaml")
    assert responses["logs"][1] == {
        "ts": "2026-05-04T07:06:30.000Z",
        "service": "ledger-db",
        "level": "ERROR",  # failure → ERROR
        "scope": "CLOUD",
        "source": "aws_rds_events",
        "message": "DB instance ledger-db refused new connections.",
    }
    assert responses["logs"][0]["level"] == "INFO"  # notification → INFO
    conn = responses["metrics"][0]
    assert conn["metric"] == "DatabaseConnections" and conn["unit"] == "Count"
    assert conn["labels"] == {"DBInstanceIdentifier": "ledger-db", "stat": "Average"}
    assert conn["points"][2] == ["2026-05-04T07:02:00.000Z", 1995.0]
    assert "confounder" not in (folder / "snapshot/tool_responses.yaml").read_text()  # series ids are dropped
    assert responses["postgres"]["top_queries"] == PI["top_sql"]
    assert responses["postgres"]["wait_events"] == PI["top_wait_events"]
    assert responses["postgres"]["load_by_user"] == PI["top_users"]
    assert responses["postgres"]["load_by_host"] == PI["top_hosts"]
    scenario = _read(folder, "scenario.yaml")
    assert scenario["question"] == ALERT["title"]
    assert (
        scenario["now"] == "2026-05-04T07:10:00.000Z"
        and scenario["alert"]["starts_at"] == "2026-05-04T07:00:00.000Z"
    )
    assert scenario["alert"]["labels"] == {"engine": "postgres", "db_instance_identifier": "ledger-db"}
    assert "connection_exhaustion" not in (folder / "scenario.yaml").read_text()


@pytest.mark.parametrize(
    ("name", "content", "where"),
    [
        ("alert.json", "{", "901-leak/alert.json: not valid JSON"),
        (
            "aws_rds_events.json",
            '{"events": [{"date": "yesterday"}]}',
            "901-leak/aws_rds_events.json: events[0].date: expected an ISO 8601 time",
        ),
        (
            "aws_cloudwatch_metrics.json",
            '{"metric_data_results": [{"metric_name": "X", "timestamps": ["2026-05-04T07:00:00Z"], "values": [NaN]}]}',
            "901-leak/aws_cloudwatch_metrics.json: not usable JSON",
        ),
        (
            "aws_cloudwatch_metrics.json",
            '{"metric_data_results": [{"metric_name": "X", "timestamps": ["2026-05-04T07:00:00Z"], "values": []}]}',
            "metric_data_results[0]: 1 timestamps but 0 values",
        ),
        ("answer.yml", "root_cause_category: [a\n", "901-leak/answer.yml: not valid YAML"),
        ("answer.yml", "required_keywords: []\n", "901-leak/answer.yml: root_cause_category: expected text"),
    ],
)
def test_bad_input_is_one_line_naming_file_and_field(
    tmp_path: Path, name: str, content: str, where: str
) -> None:
    src = tmp_path / "cases"
    _base(src)
    _case(src, **{name: content})
    res = _cli(str(src), str(tmp_path / "out"))
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and where in lines[0], res.stderr
    assert "Traceback" not in res.output and not (tmp_path / "out").exists()


def test_malformed_json_through_the_real_entry_point(tmp_path: Path) -> None:
    src = tmp_path / "cases"
    _base(src)
    _case(src, **{"aws_performance_insights.json": '{"top_sql": [1, 2'})
    env = inherited_env()
    env |= {"ROOTPROOF_HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join(sys.path)}
    p = run_cli(["import", "opensre", str(src), str(tmp_path / "out")], env=env, cwd=ROOT)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()]
    assert p.stderr.startswith("Error: 901-leak/aws_performance_insights.json: not valid JSON")


def test_files_above_the_cap_are_refused_unread(tmp_path: Path) -> None:
    src = tmp_path / "cases"
    _base(src)
    _case(src, **{"aws_rds_events.json": json.dumps({"events": [EVENTS["events"][0]] * 200})})
    with pytest.raises(
        ScenarioError, match=r"aws_rds_events.json: \d+ bytes, more than the cap of 8192 bytes"
    ):
        import_opensre(src, tmp_path / "out", limits=ImportLimits(file_bytes=8192))
    with pytest.raises(ScenarioError, match=r"events: 200 events, more than the cap of 10"):
        import_opensre(src, tmp_path / "out", limits=ImportLimits(events=10))


def test_json_output_and_force(tmp_path: Path) -> None:
    src = tmp_path / "cases"
    _base(src)
    _case(src)
    first = _cli(str(src), str(tmp_path / "out"), "--json")
    assert first.exit_code == 0, first.output
    doc = json.loads(first.stdout)
    assert doc["converted"] == 2 and [c["id"] for c in doc["cases"]] == [
        "opensre-900-base",
        "opensre-901-leak",
    ]
    assert "opensre-901-leak/ground_truth.yaml" in doc["cases"][1]["files"]
    assert any("rds_failure_mode" in w for w in doc["warnings"])
    again = _cli(str(src), str(tmp_path / "out"))
    assert again.exit_code == 2 and "give --force" in again.stderr
    assert _cli(str(src), str(tmp_path / "out"), "--force").exit_code == 0


def test_a_base_chain_that_loops_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "cases"
    _case(src, "910-a", **{"scenario.yml": {"base": "911-b", "failure_mode": "healthy"}})
    _case(src, "911-b", **{"scenario.yml": {"base": "910-a", "failure_mode": "healthy"}})
    with pytest.raises(ScenarioError, match="inherits from itself"):
        import_opensre(src, tmp_path / "out")
    _case(src, "912-c", **{"scenario.yml": {"base": "../etc"}})
    with pytest.raises(ScenarioError, match="expected the name of a sibling case folder"):
        import_opensre(src / "912-c", tmp_path / "out")


@pytest.mark.parametrize(
    ("statement", "roots", "also", "dismissed"),
    [
        (
            "The cluster hit replication lag because a nightly batch wrote WAL faster than replay.",
            ["replication_lag"],
            [],
            [],
        ),
        (
            "The server hit connection exhaustion because leaked connections piled up.",
            ["pool_leak"],
            ["connection_exhaustion"],
            [],
        ),
        (
            "A connection leak is causing both connection exhaustion and CPU saturation.",
            ["pool_leak"],
            [],
            [],
        ),
        ("CPU saturation caused by a checkpoint storm.", ["checkpoint_storm"], ["cpu_saturation"], []),
        (
            "Replication lag from a bulk load. The failover two hours earlier is a historical event, not the root cause.",
            ["replication_lag"],
            [],
            ["failover"],
        ),
        (
            "Two independent faults: (1) CPU saturation from a report query. (2) Storage exhaustion from an import job.",
            ["cpu_saturation", "storage_full"],
            [],
            [],
        ),
    ],
)
def test_the_root_cause_statement_is_read_by_the_rules(
    statement: str, roots: list[str], also: list[str], dismissed: list[str]
) -> None:
    from rootproof.scenarios.importers._opensre_prose import read_root_cause

    reading = read_root_cause(statement, single_cause=False)
    assert [f.root for f in reading.findings] == roots
    assert list(reading.findings[0].also) == also
    assert sorted({m for m, _ in reading.dismissed}) == dismissed


def test_the_doc_lists_every_rule_the_importer_applies() -> None:
    from rootproof.scenarios.importers import _opensre_evidence as ev
    from rootproof.scenarios.importers import _opensre_rules as rules

    doc = (ROOT / "docs" / "importing.md").read_text(encoding="utf-8")
    for rule in rules.MECHANISMS:
        row = next(line for line in doc.splitlines() if line.startswith(f"| `{rule.mechanism}` |"))
        assert all(f"`{p}`" in row for p in rule.phrases), rule.mechanism
        assert all(f"`{a}`" in row for a in (*rule.acceptable, *rule.forbidden)), rule.mechanism
    for action, phrases in rules.ACTIONS:
        row = next(line for line in doc.splitlines() if line.startswith(f"| `{action}` |"))
        assert all(f"`{p}`" in row for p in phrases), action
    for category, _ in ev.LEVELS:
        assert f"`{category}`" in doc, category
    for marker in (
        *rules.DISMISS_SENTENCE,
        *rules.DISMISS_AFTER,
        *rules.FORWARD,
        *rules.REVERSE,
        *rules.COMPOSITIONAL,
        *rules.SINGLE_CAUSE,
    ):
        assert f"`{marker.strip()}`" in doc, marker
    for word in rules.RULING_OUT_WORDS:
        assert f"`{word}`" in doc, word
    for rule in rules.MECHANISMS:
        for extra, phrases in rule.also_if:
            assert f"`{extra}`" in doc and all(f"`{p}`" in doc for p in phrases), rule.mechanism
