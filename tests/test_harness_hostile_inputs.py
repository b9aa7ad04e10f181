"""Hostile inputs found by trying to break the promises on secrets, bounds, model errors and exits:
secret shapes outside the corpus, settings and URLs that crashed instead of naming the problem,
alert files and `--args` that crashed the JSON parser, and model answers (deep, huge numbers,
lone surrogates) that ended a run INTERNAL_ERROR.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rootproof.agent.models.scripted import ScriptedModel, ScriptedStep
from rootproof.alerts import load_alert_file
from rootproof.boundary.safety import redact, redact_value
from rootproof.errors import AlertError, ConfigError
from rootproof.harness import Harness
from rootproof.run.records import MemoryTraceSink
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings
from tests.models.fake_openai_server import Reply, completion, serve
from tests.test_cli_exits import _one_error_line as _exit_2
from tests.test_cli_exits import rp

ROOT = Path(__file__).resolve().parents[1]
PG_ROW_LOCK = ROOT / "src" / "rootproof" / "scenarios" / "builtin" / "pg-row-lock"
DEEP = "[" * 50_000 + "]" * 50_000
HUGE = "9" * 5000


# -- secrets outside the corpus ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("config dump SECRET_KEY_BASE=9f8e7d6c5b4a39281706f5e4d3c2b1a0deadbeefcafe01", "9f8e7d6c5b4a3928"),
        ("connect Data Source=db;Initial Catalog=x;User ID=sa;Pwd=MssqlPwQa2;", "MssqlPwQa2"),
        ("Driver={ODBC Driver 18};Server=db;Uid=sa;PWD=OdbcPwQa3;", "OdbcPwQa3"),
        (
            '10.0.0.1 - - [03/Aug/2026:09:46:00 +0000] "GET /login?user=bob&pwd=HunterQa77 HTTP/1.1" 500 12',
            "HunterQa77",
        ),
    ],
)
def test_secret_shapes_outside_the_corpus_are_masked(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out and "***" in out, out


def test_working_folder_variables_stay() -> None:
    for text in ("PWD=/srv/app", "OLDPWD=~/src", "pwd: /home/app", "PWD=C:\\Users\\app"):
        assert redact(text) == text
    assert redact_value({"PWD": "/srv/app", "pwd": "hunter2x", "SECRET_KEY_BASE": "deadbeef01"}) == {
        "PWD": "/srv/app",
        "pwd": "***",
        "SECRET_KEY_BASE": "***",
    }


# -- settings and store URLs: exit 2 naming them, no piece of the password -----------------------


def test_config_whose_rootproof_key_is_not_a_table(tmp_path: Path) -> None:
    cfg = tmp_path / "rp.toml"
    cfg.write_text("rootproof = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="key rootproof: expected a table"):
        load_settings(cfg)
    _exit_2(
        rp("diagnose", "--scenario", "pg-row-lock", home=tmp_path, ROOTPROOF_CONFIG=str(cfg)),
        "rp.toml key rootproof",
    )


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("postgresql+psycopg://u:p@ss:Secr3tPw@127.0.0.1:1/x", "port that is not a number"),
        ("postgresql+psycopg://app:Secr3tPw@127.0.0.1:abc/x", "port that is not a number"),
        ("postgresql+psycopg://app:p@ssSecr3tPw@127.0.0.1:1/x", "'@' in its host part"),
    ],
)
def test_database_url_with_unescaped_password(tmp_path: Path, url: str, needle: str) -> None:
    for cmd in (("trace", "some-run"), ("diagnose", "--scenario", "pg-row-lock")):
        p = rp(*cmd, home=tmp_path, ROOTPROOF_DATABASE_URL=url)
        _exit_2(p, "ROOTPROOF_DATABASE_URL: trace store URL has ")
        assert needle in p.stderr and "Secr3tPw" not in p.stderr and "ssSecr3t" not in p.stderr


# -- alert files and --args that broke the JSON parser ------------------------------------------


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ('{"alerts": [{"labels": {"x": ' + DEEP + "}}]}", "(file): nested deeper than 16 levels"),
        (DEEP, "(file): nested deeper than 16 levels"),
        (
            '{"version": "4", "truncatedAlerts": ' + HUGE + ', "alerts": []}',
            "(file): a number of more than 4300 digits",
        ),
        (
            '{"name": "X", "severity": "critical", "starts_at": "2026-08-03T09:40:00Z", "summary": "\\ud800 p95"}',
            "summary: holds a lone surrogate",
        ),
        (
            '{"name": "X", "labels": {"\\udfff": "v"}, "starts_at": "2026-08-03T09:40:00Z"}',
            "a key holds a lone surrogate",
        ),
    ],
    ids=["deep-labels", "deep-payload", "huge-number", "surrogate-value", "surrogate-key"],
)
def test_hostile_alert_file_is_refused_naming_it(tmp_path: Path, raw: str, needle: str) -> None:
    path = tmp_path / "hook.json"
    path.write_text(raw, encoding="utf-8")
    with pytest.raises(AlertError) as err:
        load_alert_file(path)
    assert needle in str(err.value)


def test_hostile_alert_file_on_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "hook.json"
    path.write_text('{"alerts": [{"labels": {"x": ' + DEEP + "}}]}", encoding="utf-8")
    _exit_2(
        rp("diagnose", "--scenario", "pg-row-lock", "--alert", str(path), "--json", home=tmp_path),
        "nested deeper",
    )


def test_tool_call_args_with_a_huge_number(tmp_path: Path) -> None:
    p = rp(
        "tool",
        "call",
        "query_logs",
        "--scenario",
        "pg-row-lock",
        "--args",
        '{"limit": ' + HUGE + "}",
        home=tmp_path,
    )
    _exit_2(p, "--args: not usable JSON")
    assert p.stdout == ""


# -- model answers that ended a run INTERNAL_ERROR ------------------------------------------------


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    return Harness(Runtime.from_settings(
        load_settings(data_dir=tmp_path_factory.mktemp("home"), deadline_s=120), sink=MemoryTraceSink()
    ))


@pytest.mark.parametrize(
    "steps",
    [
        [ScriptedStep(calls=[("query_logs", '{"query": ' + DEEP + "}")])],
        [ScriptedStep(calls=[("query_logs", '{"query": "lock", "limit": ' + HUGE + "}")])],
        [ScriptedStep(calls=[("query_logs", {"query": "\ud800 lock"})])],
        [ScriptedStep(calls=[("query_logs\udfff", {"query": "lock"})])],
        [ScriptedStep(reasoning="\ud800 thinking", calls=[("query_logs", {"query": "lock"})])],
        [ScriptedStep(text="\ud800", draft='{"summary": "x"}')],
        [ScriptedStep(draft='{"summary": ' + DEEP + "}")],
        [ScriptedStep(draft='{"summary": ' + HUGE + "}")],
    ],
    ids=[
        "deep-args",
        "huge-number-args",
        "surrogate-args",
        "surrogate-name",
        "surrogate-reasoning",
        "surrogate-text",
        "deep-draft",
        "huge-number-draft",
    ],
)
def test_hostile_model_answers_are_no_internal_error(harness: Harness, steps: list[ScriptedStep]) -> None:
    sc = load_scenario(PG_ROW_LOCK)
    out = harness.diagnose(sc.question, scenario=sc, model=ScriptedModel(steps))
    assert out.status == "SUCCESS", (out.status, out.fallback_type, out.content)
    assert out.fallback_type != "INTERNAL_ERROR"


def _raw_json(text: str) -> Reply:
    return Reply(body=text, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(
    "reply",
    [
        _raw_json('{"id": "x", "choices": ' + DEEP + "}"),
        _raw_json(
            '{"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [{"index": 0,'
            ' "finish_reason": "stop", "message": {"role": "assistant", "content": "\\ud800 hi"}}]}'
        ),
        completion(tool_calls=[{"id": "c1", "name": "query_logs", "arguments": '{"query": "\\ud800 lock"}'}]),
        completion(
            tool_calls=[{"id": "c1", "name": "submit_draft", "arguments": '{"summary": ' + DEEP + "}"}]
        ),
    ],
    ids=["deep-body", "surrogate-content", "surrogate-arguments", "deep-draft-arguments"],
)
def test_hostile_model_server_answers_are_no_internal_error(tmp_path: Path, reply: Reply) -> None:
    sc = load_scenario(PG_ROW_LOCK)
    with serve() as fake:
        fake.otherwise = reply
        settings = load_settings(
            data_dir=tmp_path,
            deadline_s=120,
            max_model_calls=2,
            model="openai",
            openai_base_url=fake.base_url,
            openai_provider="vllm",
        )
        out = Harness(Runtime.from_settings(settings, sink=MemoryTraceSink())).diagnose(sc.question, scenario=sc)
    assert out.status == "SUCCESS", (out.status, out.fallback_type, out.content)
    assert out.fallback_type != "INTERNAL_ERROR"
    doc: dict[str, Any] = json.loads(json.dumps(out.content))
    assert doc["content_type"] == "SAFE_FALLBACK"


# -- "no fault found" from a model that never looked ---------------------------------------------


def test_no_fault_found_without_any_evidence_call_is_not_published(harness: Harness) -> None:
    sc = load_scenario(PG_ROW_LOCK)
    draft = {"summary": "Everything is fine, no fault", "root_cause": None, "claims": []}
    out = harness.diagnose(sc.question, scenario=sc, model=ScriptedModel([ScriptedStep(draft=draft)]))
    assert out.release_outcome == "FALLBACK" and out.fallback_type == "INSUFFICIENT_EVIDENCE"
    assert out.content is not None
    assert any("No evidence tool" in line for line in out.content["fallback"]["limitations"])


# -- a --json FILE that cannot be written ---------------------------------------------------------


@pytest.mark.parametrize(
    "cmd",
    [("eval", "guard"), ("eval", "snapshot", "--scenarios", "pg-row-lock"), ("eval", "retrieval")],
    ids=["guard", "snapshot", "retrieval"],
)
def test_eval_json_file_that_is_a_folder(tmp_path: Path, cmd: tuple[str, ...]) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    p = rp(*cmd, "--json", str(folder), home=tmp_path)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert p.stderr.strip().splitlines()[-1] == f"Error: {folder}: Is a directory", p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "internal failure" not in p.stderr


@pytest.mark.parametrize("since", ["٥m", "５m", "1٠m"])
def test_since_with_non_ascii_digits_is_refused(since: str) -> None:
    from pydantic import ValidationError

    from rootproof.tools.base import QueryLogsArgs

    with pytest.raises(ValidationError, match="since must look like 30m"):
        QueryLogsArgs.model_validate({"query": "lock", "since": since})
