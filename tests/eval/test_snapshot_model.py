"""`eval snapshot` with a model that costs tokens and time: rows carry `tokens` and `wall_time_s`,
the summary names the model, a scenario that reaches its deadline is a scored row (not a crash),
and a stored run is scored as the worker scores it (`observe_trace`).

The OpenAI-compatible runs go over real HTTP to the scripted server on loopback
(`tests/models/fake_openai_server.py`); the eval's workers are separate processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootproof.agent.models.base import Model
from rootproof.agent.models.scripted import ScriptedModel, ScriptedStep
from rootproof.eval.report import report_json
from rootproof.eval.scoring import score_case
from rootproof.eval.snapshot import CASE_GRACE_S, observe_trace, run_suite
from rootproof.harness import Harness
from rootproof.kb.cards import taxonomy_for
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_ground_truth, load_scenario, scenario_folder
from rootproof.settings import Settings
from rootproof.store.sql import SqlTraceStore
from tests.cli_support import run_cli
from tests.models.fake_openai_server import FakeOpenAI, completion, serve
from tests.services import inherited_env

ROOT = Path(__file__).resolve().parents[2]


def tokens_then_nothing() -> Model:
    """Three scripted steps of 100, 250 and 40 tokens, then empty turns (the worker's factory)."""
    return ScriptedModel([ScriptedStep(text="thinking", tokens=100), ScriptedStep(text="still", tokens=250), ScriptedStep(text="hm", tokens=40)])


def deaf_to_the_deadline() -> Model:
    """A model whose first step takes a minute whatever the run's deadline (the worker's factory)."""
    return ScriptedModel([ScriptedStep(sleep_s=60.0)])


@pytest.fixture()
def fake() -> Iterator[FakeOpenAI]:
    with serve() as server:
        yield server


def _suite(tmp_path: Path, *ids: str) -> Path:
    suite = tmp_path / "suite"
    for sid in ids:
        shutil.copytree(scenario_folder(sid), suite / sid)
    return suite


def _settings(tmp_path: Path, **over: object) -> Settings:
    return Settings(data_dir=tmp_path / "home", database_url=f"sqlite:///{tmp_path / 'eval.db'}", **over)  # type: ignore[arg-type]


def _eval_cli(tmp_path: Path, fake: FakeOpenAI, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`rootproof eval snapshot --model openai ...` as a user runs it, against the fake server."""
    environ = inherited_env()
    environ.update(
        ROOTPROOF_HOME=str(tmp_path / "home"),
        ROOTPROOF_OPENAI_BASE_URL=fake.base_url,
        ROOTPROOF_OPENAI_MODEL="fake-local",
        ROOTPROOF_OPENAI_PROVIDER="vllm",  # streams usage: the tokens are the server's, not estimates
        ROOTPROOF_MODEL_MAX_RETRIES="0",
        **env,
    )
    return run_cli(["eval", "snapshot", "--model", "openai", *args], env=environ, cwd=ROOT)


@pytest.mark.slow
def test_rows_carry_the_runs_tokens_and_wall_time_and_the_summary_names_the_model(tmp_path: Path) -> None:
    suite = run_suite(
        _suite(tmp_path, "pg-row-lock"),
        settings=_settings(tmp_path),
        store=SqlTraceStore(f"sqlite:///{tmp_path / 'eval.db'}"),
        model_factory="tests.eval.test_snapshot_model:tokens_then_nothing",
    )
    data = report_json(suite)
    row = data["scenarios"][0]
    # the three scripted steps, then empty turns of 10 tokens each until the loop gives up
    assert row["tokens"] >= 390 and (row["tokens"] - 390) % 10 == 0, row["tokens"]
    assert isinstance(row["wall_time_s"], float) and row["wall_time_s"] > 0
    assert data["summary"]["model"] == data["model"] == "factory:tests.eval.test_snapshot_model:tokens_then_nothing"


@pytest.mark.slow
def test_openai_rows_count_every_token_the_server_reported(tmp_path: Path, fake: FakeOpenAI) -> None:
    # Every answer is prose with usage 100 + 20: no route JSON, no tool call, no draft.
    fake.otherwise = completion(content="I am not sure.", prompt_tokens=100, completion_tokens=20)
    p = _eval_cli(tmp_path, fake, "--scenarios", str(_suite(tmp_path, "pg-row-lock")), "--json", str(tmp_path / "r.json"))
    assert p.returncode == 0, p.stderr
    data = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert data["model"] == data["summary"]["model"] == "openai:fake-local"
    (row,) = data["scenarios"]
    assert fake.requests and row["tokens"] == 120 * len(fake.requests)
    assert row["outcome"] == "FALLBACK" and row["wall_time_s"] > 0
    progress = [ln for ln in p.stderr.splitlines() if ln.startswith("[1/1] pg-row-lock ")]
    assert len(progress) == 1, p.stderr
    assert f"tokens {row['tokens']} " in progress[0] and progress[0].endswith(" tok/s") and " score " in progress[0]


@pytest.mark.slow
def test_a_scenario_past_its_case_timeout_is_a_fallback_row_and_the_eval_goes_on(tmp_path: Path, fake: FakeOpenAI) -> None:
    fake.otherwise = completion(content="late", delay_s=30.0)  # the server answers long after the deadline
    t0 = time.monotonic()
    p = _eval_cli(
        tmp_path, fake, "--scenarios", str(_suite(tmp_path, "pg-row-lock", "control-latency-blip")),
        "--json", str(tmp_path / "r.json"), ROOTPROOF_EVAL_CASE_TIMEOUT_S="3", ROOTPROOF_MODEL_TIMEOUT_S="600",
    )
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    data = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    rows = {r["id"]: r for r in data["scenarios"]}
    assert sorted(rows) == ["control-latency-blip", "pg-row-lock"] and data["state"] == "failed"
    for row in rows.values():
        assert (row["outcome"], row["fallback_type"]) == ("FALLBACK", "DEADLINE_EXCEEDED"), row
        assert row["failure_class"] == "fallback" and row["tokens"] == 0
        assert 2.5 <= row["wall_time_s"] < 3 + CASE_GRACE_S, row["wall_time_s"]
    assert elapsed < 60, "the 30 s replies must not be awaited"
    assert sum(1 for ln in p.stderr.splitlines() if "FALLBACK/DEADLINE_EXCEEDED" in ln and " tok/s" in ln) == 2, p.stderr
    stored = json.loads(
        run_cli(["eval", "show", data["eval_id"], "--json"], env={**os.environ, "ROOTPROOF_HOME": str(tmp_path / "home")}, cwd=ROOT).stdout
    )
    assert stored["model"] == "openai:fake-local" and stored["settings"]["deadline_s"] == 3.0


@pytest.mark.slow
def test_a_run_deaf_to_its_deadline_is_cancelled_by_the_worker_past_the_grace(tmp_path: Path) -> None:
    suite = run_suite(
        _suite(tmp_path, "pg-row-lock"),
        settings=_settings(tmp_path, eval_case_timeout_s=1.0),
        store=SqlTraceStore(f"sqlite:///{tmp_path / 'eval.db'}"),
        model_factory="tests.eval.test_snapshot_model:deaf_to_the_deadline",
    )
    (case,) = suite.cases
    assert case.observation.error is None and case.observation.status in ("CANCELLED", "TIMED_OUT")
    assert not case.score.passed and case.wall_time_s < 1 + CASE_GRACE_S + 5, case.wall_time_s


@pytest.mark.slow
def test_a_stored_run_scores_as_the_worker_scores_it(tmp_path: Path) -> None:
    sid = "pg-row-lock"
    settings = _settings(tmp_path)
    suite = run_suite(_suite(tmp_path, sid), settings=settings, store=SqlTraceStore(settings.resolved_database_url()))
    in_worker = suite.cases[0].score

    store = SqlTraceStore(f"sqlite:///{tmp_path / 'trace.db'}")
    h = Harness(Runtime.from_settings(settings, sink=store))
    scenario = load_scenario(sid)
    out = h.diagnose(scenario.question, scenario=scenario, alert=scenario.alert)
    trace = store.trace(out.run_id)
    assert trace is not None
    obs = observe_trace(trace, tool_call_budget=h.budget(scenario).tool_calls)
    stored = score_case(load_ground_truth(scenario_folder(sid), taxonomy_for(None)), obs)
    assert obs.release_outcome == "PUBLISHED" and obs.cited_refs and all(r.verified for r in obs.cited_refs)
    assert (stored.score, stored.passed, stored.dimensions_dict()) == (in_worker.score, in_worker.passed, in_worker.dimensions_dict())
