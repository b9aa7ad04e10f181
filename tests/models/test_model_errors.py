# ruff: noqa: F811 - the `fake_openai` fixture is imported, then named by the tests
"""Model errors are surfaced, over real HTTP: the status and the provider's message reach the trace
and the fallback (secrets removed); a 4xx other than 408/409/429 is not retried; a slow model
that runs into the deadline ends DEADLINE_EXCEEDED; no base URL or no key is a named setting error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rootproof.agent.models.openai_compat import OpenAICompatModel
from rootproof.errors import ConfigError, ModelUnavailable
from rootproof.harness import Harness
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings
from rootproof.store import SqlTraceStore
from tests.cli_support import run_cli

from .fake_openai_server import FakeOpenAI, completion, error, fake_openai, unauthorized  # noqa: F401
from .test_openai_compat import request

SHOWN_KEY = "sk-proj-abcdefghijklmnopqrstuvwx"


def _harness(tmp_path: Path, **settings: object) -> tuple[Harness, SqlTraceStore]:
    store = SqlTraceStore(f"sqlite:///{tmp_path / 'trace.db'}")
    return Harness(Runtime.from_settings(load_settings(data_dir=tmp_path / "home", **settings), sink=store)), store  # type: ignore[arg-type]


def test_a_rejected_key_is_named_in_the_fallback_and_the_trace_without_the_key(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    h, store = _harness(tmp_path, deadline_s=30)
    model = OpenAICompatModel(
        base_url=fake_openai.base_url, api_key=SHOWN_KEY, model="gpt", provider="openai", backoff_s=0.01
    )
    fake_openai.otherwise = unauthorized(SHOWN_KEY)
    sc = load_scenario("pg-row-lock")
    out = h.diagnose(sc.question, scenario=sc, model=model)
    assert (out.status, out.release_outcome, out.fallback_type) == ("FAILED", "FALLBACK", "MODEL_UNAVAILABLE")
    # the router's two calls and one agent call: a 401 is never retried
    assert len(fake_openai.requests) == 3
    assert out.content is not None
    rejected = [
        x
        for x in out.content["fallback"]["limitations"]
        if x.startswith("The model server rejected the API key")
    ]
    assert len(rejected) == 1 and "HTTP 401: Incorrect API key provided" in rejected[0], out.content
    trace = store.trace(out.run_id)
    assert trace is not None
    assert "HTTP 401: Incorrect API key provided" in (trace["run"]["error"] or "")
    assert len(trace["steps"]) == 1  # the agent's one step, recorded with the error
    assert (
        trace["steps"][0]["model_output"].startswith("model error:")
        and "HTTP 401" in trace["steps"][0]["model_output"]
    )
    everything = json.dumps(trace, ensure_ascii=False) + json.dumps(out.content, ensure_ascii=False)
    assert SHOWN_KEY not in everything


def test_a_chinese_run_names_the_rejected_key_in_chinese(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    h, _ = _harness(tmp_path, deadline_s=30)
    model = OpenAICompatModel(
        base_url=fake_openai.base_url, api_key="k", model="gpt", provider="vllm", backoff_s=0.01
    )
    fake_openai.otherwise = unauthorized()
    sc = load_scenario("redis-maxclients")
    out = h.diagnose("", scenario=sc, model=model)
    assert out.content is not None and out.content["fallback"]["type"] == "MODEL_UNAVAILABLE"
    assert any(
        x.startswith("模型服务拒绝了 API 密钥（") and "HTTP 401" in x
        for x in out.content["fallback"]["limitations"]
    )


@pytest.mark.parametrize(
    ("status", "attempts"),
    [(400, 1), (401, 1), (403, 1), (404, 1), (422, 1), (408, 3), (409, 3), (429, 3), (503, 3)],
)
def test_only_408_409_429_and_5xx_are_retried(fake_openai: FakeOpenAI, status: int, attempts: int) -> None:
    model = OpenAICompatModel(
        base_url=fake_openai.base_url, api_key="k", model="m", provider="vllm", max_retries=2, backoff_s=0.01
    )
    try:
        fake_openai.otherwise = error(status, f"provider says {status}")
        with pytest.raises(ModelUnavailable, match=f"HTTP {status}: provider says {status}") as info:
            model.step(request())
    finally:
        model.close()
    assert info.value.status == status
    assert len(fake_openai.requests) == attempts


def test_a_slow_model_that_hits_the_deadline_ends_deadline_exceeded(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    h, store = _harness(tmp_path, deadline_s=1.5)
    model = OpenAICompatModel(
        base_url=fake_openai.base_url, api_key="k", model="gpt", provider="vllm", backoff_s=0.01
    )
    fake_openai.script([completion(content='{"route": "DIAGNOSIS"}')])  # the router answers at once
    fake_openai.otherwise = completion(content="too late", delay_s=5)
    sc = load_scenario("pg-row-lock")
    out = h.diagnose(sc.question, scenario=sc, model=model)
    assert (out.status, out.release_outcome, out.fallback_type) == (
        "TIMED_OUT",
        "FALLBACK",
        "DEADLINE_EXCEEDED",
    )
    run = store.get_run(out.run_id)
    assert run is not None and (run.status, run.fallback_type) == ("TIMED_OUT", "DEADLINE_EXCEEDED")


def test_openai_needs_a_base_url_and_keyed_providers_a_key(tmp_path: Path) -> None:
    h = Harness(Runtime.from_settings(load_settings(data_dir=tmp_path, model="openai")))
    with pytest.raises(ConfigError, match="^ROOTPROOF_OPENAI_BASE_URL: not set"):
        h.model(None)
    for provider in ("openai", "deepseek"):
        h = Harness(Runtime.from_settings(
            load_settings(
                data_dir=tmp_path,
                model="openai",
                openai_base_url="http://127.0.0.1:9/v1",
                openai_provider=provider,
            )
        ))
        with pytest.raises(
            ConfigError, match=f"^ROOTPROOF_OPENAI_API_KEY: not set; the {provider} provider needs an API key"
        ):
            h.model(None)
    # a local server needs no key
    h = Harness(Runtime.from_settings(
        load_settings(
            data_dir=tmp_path, model="openai", openai_base_url="http://127.0.0.1:9/v1", openai_provider="vllm"
        )
    ))
    assert h.model(None).name == "openai:gpt-4o-mini"


def _cli(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ROOTPROOF_") and k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")
    }
    base |= {"ROOTPROOF_HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join(sys.path)}
    return run_cli(args, env=base | env)


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"ROOTPROOF_MODEL": "openai"}, "ROOTPROOF_OPENAI_BASE_URL"),
        (
            {"ROOTPROOF_MODEL": "openai", "ROOTPROOF_OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
            "ROOTPROOF_OPENAI_API_KEY",
        ),
        (
            {
                "ROOTPROOF_MODEL": "openai",
                "ROOTPROOF_OPENAI_BASE_URL": "https://api.deepseek.com/v1",
                "ROOTPROOF_OPENAI_PROVIDER": "deepseek",
            },
            "ROOTPROOF_OPENAI_API_KEY",
        ),
    ],
)
def test_cli_model_settings_missing_exit_2_naming_the_variable(
    env: dict[str, str], variable: str, tmp_path: Path
) -> None:
    # OPENAI_* of the environment are never read: only rootproof's own settings count
    done = _cli(
        ["diagnose", "--scenario", "pg-row-lock"],
        env | {"OPENAI_API_KEY": "sk-env", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
        tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        done.stderr.strip().splitlines()[0]
    ] and done.stderr.startswith(f"Error: {variable}: not set")
    assert "Traceback" not in done.stderr
