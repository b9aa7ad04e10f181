"""The CLI: JSON contract, exit codes, one clear error line for bad input."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli_support import run_cli

ROOT = Path(__file__).resolve().parents[1]


def rp(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROOTPROOF_HOME": str(home)}
    env.pop("ROOTPROOF_DATABASE_URL", None)
    return run_cli(args, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rphome")


def test_tool_call_json(home: Path) -> None:
    p = rp("tool", "call", "query_logs", "--scenario", "payment-timeout", "--args", '{"query": "timeout"}', "--json", home=home)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    inv = doc["invocation"]
    assert inv["status"] == "READY" and inv["evidence_status"] == "EVIDENCE_FOUND" and inv["data_source"] == "mock"
    assert inv["evidence_refs"] and doc["observation"]["invocation_id"] == inv["invocation_id"]
    t = rp("trace", doc["run_id"], "--json", home=home)
    assert t.returncode == 0, t.stderr
    trace = json.loads(t.stdout)
    assert trace["invocations"][0]["invocation_id"] == inv["invocation_id"]
    assert (trace["run"]["status"], trace["run"]["release_outcome"]) == ("SUCCESS", "NONE")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["tool", "call", "query_log", "--scenario", "payment-timeout"], "unknown tool 'query_log'"),
        (["tool", "call", "query_logs", "--scenario", "payment-timeout", "--args", "{bad"], "--args: not valid JSON"),
        (["tool", "call", "query_logs", "--scenario", "no-such-scenario"], "no-such-scenario"),
        (["tool", "call", "query_logs", "--scenario", "/nonexistent/folder"], "/nonexistent/folder"),
        (["diagnose", "why is it slow?"], "--scenario"),
        (["diagnose", "--model", "gpt", "--scenario", "pg-row-lock"], "--model"),
        (["trace", "no-such-run"], "unknown run id"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(home: Path, args: list[str], needle: str) -> None:
    p = rp(*args, home=home)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert needle in p.stderr and "Traceback" not in p.stderr
    assert p.stderr.strip().startswith("Error:")


def test_malformed_scenario_names_file_and_field(home: Path, tmp_path: Path) -> None:
    import shutil

    src = ROOT / "src/rootproof/scenarios/builtin/pg-row-lock"
    dst = tmp_path / "pg-row-lock"
    shutil.copytree(src, dst)
    text = (dst / "scenario.yaml").read_text().replace("allowed_tools:", "allowed_toolz:")
    (dst / "scenario.yaml").write_text(text)
    p = rp("tool", "call", "query_logs", "--scenario", str(dst), home=home)
    assert p.returncode == 2 and "scenario.yaml" in p.stderr and "allowed_tool" in p.stderr and "Traceback" not in p.stderr


def test_bad_setting_is_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, "ROOTPROOF_HOME": str(tmp_path), "ROOTPROOF_DEADLINE_S": "-1"}
    p = run_cli(["tool", "call", "query_logs", "--scenario", "pg-row-lock"], env=env, cwd=ROOT)
    assert p.returncode == 2 and "ROOTPROOF_DEADLINE_S" in p.stderr


def test_diagnose_json_on_embedded_default(home: Path) -> None:
    p = rp("diagnose", "--scenario", "payment-timeout", "支付接口最近出现超时", "--json", home=home)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert {"run_id", "status", "release_outcome", "content"} <= set(doc)
    assert doc["content"]["fallback"]["type"] == "EVIDENCE_VALIDATION_FAILED"


def test_the_report_card_lists_contributing_causes_after_the_root_cause_in_the_runs_language(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rootproof.cli import _print_content

    report = {
        "summary": "Row locks, and Redis at maxclients.",
        "root_cause": {"component": "postgresql", "mechanism": "row_lock_contention", "culprit": "pid 4242"},
        "contributing_causes": [{"component": "redis", "mechanism": "max_clients_reached", "culprit": "maxclients 100"}],
        "claims": [],
        "recovery": [],
    }
    content = {"content_type": "DIAGNOSIS_REPORT", "report": report, "verified_sources": []}
    _print_content(content, "en")
    assert capsys.readouterr().out.splitlines()[1:3] == [
        "  root cause: postgresql / row_lock_contention  culprit: pid 4242",
        "  contributing cause: redis / max_clients_reached  culprit: maxclients 100",
    ]
    _print_content(content, "zh")
    assert capsys.readouterr().out.splitlines()[1:3] == [
        "  根因: postgresql / row_lock_contention  具体对象: pid 4242",
        "  促成原因: redis / max_clients_reached  具体对象: maxclients 100",
    ]
    _print_content({**content, "report": {**report, "contributing_causes": []}}, "en")
    assert "contributing" not in capsys.readouterr().out


def test_the_offline_planner_step_line_shows_no_token_figures(home: Path) -> None:
    """The offline planner reads no tokens: its steps say so, not `0 in + 0 out tokens, 0.0 tok/s`."""
    p = rp("diagnose", "--scenario", "pg-row-lock", home=home)
    assert p.returncode == 0, p.stderr
    steps = [ln for ln in p.stderr.splitlines() if "step" in ln and ("[gather]" in ln or "[draft]" in ln)]
    assert steps and all(ln.lstrip().startswith("planner step ") for ln in steps), p.stderr
    assert "tok/s" not in p.stderr and "0 in + 0 out" not in p.stderr
