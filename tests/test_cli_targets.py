"""`--targets FILE` on `diagnose` and `tool call`: usage errors exit 2 with one line; the
ROOTPROOF_TARGETS default; a live run against a dead PostgreSQL ends recorded, that backend paused."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from tests.test_cli_exits import rp

BAD = "targets:\n  - {name: orders-db, kind: postgres}\n"


def _one_error_line(p: subprocess.CompletedProcess[str], needle: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens there


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    path = tmp_path / "bad.targets.yaml"
    path.write_text(BAD, encoding="utf-8")
    return path


def test_targets_and_scenario_together_is_a_usage_error(tmp_path: Path, bad: Path) -> None:
    p = rp("diagnose", "why is checkout slow?", "--targets", str(bad), "--scenario", "pg-row-lock", home=tmp_path)
    _one_error_line(p, "--targets and --scenario exclude each other")
    p = rp("tool", "call", "inspect_postgres", "--targets", str(bad), "--scenario", "pg-row-lock", "--args", '{"kind": "locks"}', home=tmp_path)
    _one_error_line(p, "--targets and --scenario exclude each other")


def test_a_malformed_targets_file_is_one_error_line_naming_file_and_field(tmp_path: Path, bad: Path) -> None:
    p = rp("diagnose", "why is checkout slow?", "--targets", str(bad), home=tmp_path)
    _one_error_line(p, f"Error: {bad}: targets[0] (orders-db).dsn: ")


def test_rootproof_targets_is_the_default_unless_a_scenario_is_given(tmp_path: Path, bad: Path) -> None:
    p = rp("tool", "call", "inspect_postgres", "--args", '{"kind": "locks"}', home=tmp_path, ROOTPROOF_TARGETS=str(bad))
    _one_error_line(p, f"{bad}: targets[0] (orders-db).dsn")
    p = rp("tool", "call", "inspect_postgres", "--scenario", "pg-row-lock", "--args", '{"kind": "locks"}', "--json", home=tmp_path, ROOTPROOF_TARGETS=str(bad))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["invocation"]["data_source"] == "snapshot"


def test_a_bad_file_from_rootproof_targets_names_the_variable(tmp_path: Path, bad: Path) -> None:
    p = rp("diagnose", "why is checkout slow?", home=tmp_path, ROOTPROOF_TARGETS=str(tmp_path / "missing.yaml"))
    _one_error_line(p, f"Error: ROOTPROOF_TARGETS: {tmp_path / 'missing.yaml'}: cannot be read")
    p = rp("diagnose", "why is checkout slow?", "--targets", str(tmp_path / "missing.yaml"), home=tmp_path)
    _one_error_line(p, f"Error: {tmp_path / 'missing.yaml'}: cannot be read")  # a path the user typed needs no variable


def _dead_postgres(tmp_path: Path) -> Path:
    targets = tmp_path / "rootproof.targets.yaml"
    targets.write_text(
        f'targets:\n  - {{name: orders-db, kind: postgres, dsn: "postgresql://app@127.0.0.1:{_closed_port()}/orders", timeout_s: 1}}\n',
        encoding="utf-8",
    )
    return targets


def test_a_dead_postgres_pauses_its_breaker_after_three_failures(tmp_path: Path) -> None:
    pytest.importorskip("rootproof.backends.live.postgres")
    from rootproof.agent.models.scripted import ScriptedModel, ScriptedStep
    from rootproof.harness import memory_harness
    from rootproof.settings import load_settings
    from rootproof.targets import load_targets

    loaded = load_targets(_dead_postgres(tmp_path))
    h = memory_harness(load_settings(data_dir=tmp_path / "home", deadline_s=60))
    sink = h.sink
    # Built before the run: a cold index is built inside the first lookup's tool timeout, which a
    # loaded machine can exceed (this test is about the postgres breaker, not the index build).
    assert h.runtime.knowledge is not None
    kinds = ("activity", "locks", "settings", "database_stats")
    steps = [ScriptedStep(calls=[("inspect_postgres", {"kind": k}), ("lookup_knowledge", {"query": f"postgres {k}"})]) for k in kinds]
    model = ScriptedModel([*steps, ScriptedStep(draft={"summary": "x", "root_cause": None, "claims": []})])
    try:
        out = h.diagnose("Why do order confirmations time out?", targets=loaded, model=model)
    finally:
        h.runtime.close()
    postgres = [o.invocation for o in out.outcomes if o.invocation.tool_name == "inspect_postgres"]
    assert [i.refusal_code for i in postgres] == ["BACKEND_ERROR"] * 3 + ["CIRCUIT_OPEN"]
    assert "orders-db" in str(postgres[0].message) and "The postgres:orders-db backend failed repeatedly" in str(postgres[3].message)
    assert all(o.invocation.status == "READY" for o in out.outcomes if o.invocation.tool_name == "lookup_knowledge")
    assert sink.runs[out.run_id].targets_checksum == loaded.checksum  # type: ignore[attr-defined]


def test_diagnose_against_a_dead_postgres_is_recorded_with_only_that_backend_failing(tmp_path: Path) -> None:
    pytest.importorskip("rootproof.backends.live.postgres")
    targets = _dead_postgres(tmp_path)
    p = rp("diagnose", "Why do order confirmations time out?", "--targets", str(targets), "--json", home=tmp_path)
    assert p.returncode == 0, p.stderr
    run_id = json.loads(p.stdout)["run_id"]
    t = rp("trace", run_id, "--json", home=tmp_path)
    assert t.returncode == 0, t.stderr
    trace = json.loads(t.stdout)
    assert trace["run"]["status"] == "SUCCESS" and trace["run"]["targets_checksum"].startswith("sha256:")
    postgres = [i for i in trace["invocations"] if i["tool_name"] == "inspect_postgres"]
    codes = [i["refusal_code"] for i in postgres]
    assert "BACKEND_ERROR" in codes and set(codes) <= {"BACKEND_ERROR", "CIRCUIT_OPEN", "SCOPE_SATURATED"}, codes  # never READY
    assert all(i["status"] == "FAILED" for i in postgres if i["refusal_code"] == "BACKEND_ERROR")
    others = [i for i in trace["invocations"] if i["tool_name"] != "inspect_postgres"]
    assert all(i["refusal_code"] not in ("BACKEND_ERROR", "CIRCUIT_OPEN") for i in others)
    assert {i["tool_name"] for i in trace["invocations"]} <= {"inspect_postgres", "lookup_knowledge"}
