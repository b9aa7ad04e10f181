"""OpenTelemetry tracing (GenAI semantic conventions): spans of real offline runs, off by default, content never captured."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from rootproof.agent.models.base import TokenUsage
from rootproof.agent.models.openai_compat import OpenAICompatModel
from rootproof.agent.models.scripted import ScriptedModel, ScriptedStep
from rootproof.boundary import ToolCallRequest
from rootproof.errors import ConfigError
from rootproof.harness import Harness, RunOutcome
from rootproof.kb import KnowledgeBase
from rootproof.observability.otel import AgentSpan, ChatSpan, RunTelemetry, Telemetry, ToolSpan
from rootproof.run import RunState
from rootproof.run.records import MemoryTraceSink
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings
from tests.agent.test_loop import _valid_draft
from tests.boundary.test_boundary import FakeLogs, make
from tests.test_harness_seed_story import SEED_FALLBACK

ROOT = Path(__file__).resolve().parents[2]
SECRET = "Zq7-Otel-S3cr3t-Pw"
QUESTION = f"Order confirmations hang; the app connects with postgres://app:{SECRET}@pg-1/orders and DB_PASSWORD={SECRET}. Why, periwinkle?"


@pytest.fixture(scope="module")
def knowledge(kb_index_dir: Path) -> KnowledgeBase:
    """The built-in cards, loaded once for the module (every runtime below shares them)."""
    return KnowledgeBase.load([], cache_dir=kb_index_dir)


class Traced:
    """A harness whose runtime traces into memory."""

    def __init__(self, tmp_path: Path, knowledge: KnowledgeBase) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.sink = MemoryTraceSink()
        self.runtime = Runtime.from_settings(load_settings(data_dir=tmp_path, deadline_s=60), sink=self.sink, knowledge=knowledge, telemetry=Telemetry(provider))
        self.harness = Harness(self.runtime)

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


@pytest.fixture
def traced(tmp_path: Path, knowledge: KnowledgeBase) -> Iterator[Traced]:
    t = Traced(tmp_path, knowledge)
    with t.runtime:
        yield t


def _one_run(spans: list[ReadableSpan], out: RunOutcome) -> tuple[ReadableSpan, list[ReadableSpan], list[ReadableSpan]]:
    """The run's invoke_agent span and its chat and execute_tool children (checked to be its children)."""
    roots = [s for s in spans if s.name == "invoke_agent rootproof"]
    assert len(roots) == 1
    root = roots[0]
    assert root.parent is None and root.kind is SpanKind.INTERNAL
    assert root.context is not None
    children = [s for s in spans if s is not root]
    for s in children:
        assert s.parent is not None and s.parent.span_id == root.context.span_id, s.name
        assert s.context is not None and s.context.trace_id == root.context.trace_id
        assert s.attributes is not None and s.attributes["gen_ai.conversation.id"] == out.session_id
        assert s.attributes["rootproof.run_id"] == out.run_id
    chats = [s for s in children if s.name.startswith("chat ")]
    tools = [s for s in children if s.name.startswith("execute_tool ")]
    assert len(chats) + len(tools) == len(children)
    return root, chats, tools


def _evaluations(root: ReadableSpan) -> dict[str, dict[str, Any]]:
    events = [e for e in root.events if e.name == "gen_ai.evaluation.result"]
    assert all(e.attributes is not None for e in events)
    by_name = {str(e.attributes["gen_ai.evaluation.name"]): dict(e.attributes) for e in events if e.attributes is not None}
    assert len(by_name) == len(events)  # one event per guard
    return by_name


def _check_run(traced: Traced, out: RunOutcome, *, provider: str, model: str) -> tuple[ReadableSpan, list[ReadableSpan], list[ReadableSpan]]:
    """The attributes every run's spans carry, against the run's own trace."""
    root, chats, tools = _one_run(traced.spans(), out)
    attrs = dict(root.attributes or {})
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["gen_ai.agent.name"] == "rootproof"
    assert attrs["gen_ai.conversation.id"] == out.session_id
    assert (attrs["gen_ai.provider.name"], attrs["gen_ai.request.model"]) == (provider, model)
    assert attrs["rootproof.run_id"] == out.run_id
    assert (attrs["rootproof.status"], attrs["rootproof.release_outcome"]) == (out.status, out.release_outcome)
    assert attrs.get("rootproof.fallback_type") == out.fallback_type
    assert attrs["rootproof.tokens"] == out.tokens
    steps = [s for s in traced.sink.steps if s.run_id == out.run_id]
    assert len(chats) == len(steps) > 0
    for chat, step in zip(sorted(chats, key=lambda s: int((s.attributes or {})["rootproof.step_index"])), steps, strict=True):
        a = dict(chat.attributes or {})
        assert chat.name == f"chat {model}"
        assert a["gen_ai.operation.name"] == "chat"
        assert (a["gen_ai.provider.name"], a["gen_ai.request.model"]) == (provider, model)
        assert (a["rootproof.step_index"], a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (step.step_index, step.input_tokens, step.output_tokens)
    assert attrs["gen_ai.usage.input_tokens"] == sum(s.input_tokens for s in steps)
    assert attrs["gen_ai.usage.output_tokens"] == sum(s.output_tokens for s in steps)
    # one execute_tool span per ToolBoundary call, in the order the boundary recorded them
    assert len(tools) == len(out.outcomes) > 0
    by_invocation = {str((s.attributes or {})["rootproof.invocation_id"]): s for s in tools}
    for o in out.outcomes:
        inv = o.invocation
        span = by_invocation[inv.invocation_id]
        a = dict(span.attributes or {})
        assert span.name == f"execute_tool {inv.tool_name}" and span.kind is SpanKind.INTERNAL
        assert a["gen_ai.operation.name"] == "execute_tool"
        assert (a["gen_ai.tool.name"], a["gen_ai.tool.call.id"], a["gen_ai.tool.type"]) == (inv.tool_name, o.call_id, "function")
        assert a["rootproof.tool.status"] == str(inv.status)
        assert a.get("rootproof.evidence_status") == inv.evidence_status
        assert a.get("rootproof.data_source") == inv.data_source
        assert a.get("rootproof.tool.refusal_code") == inv.refusal_code
    return root, chats, tools


# -- real offline runs --------------------------------------------------------------------------
def test_the_seed_story_is_one_invoke_agent_span_with_chat_and_tool_children(traced: Traced) -> None:
    out = traced.harness.diagnose("支付接口最近出现超时", scenario=load_scenario("payment-timeout"))
    assert (out.status, out.release_outcome, out.content) == ("SUCCESS", "FALLBACK", SEED_FALLBACK)  # tracing changes nothing
    root, _, tools = _check_run(traced, out, provider="rootproof.offline", model="offline-planner-v1")
    assert root.status.status_code is StatusCode.UNSET
    assert dict(root.attributes or {})["rootproof.fallback_type"] == "EVIDENCE_VALIDATION_FAILED"
    logs = next(s for s in tools if s.name == "execute_tool query_logs")
    assert dict(logs.attributes or {})["rootproof.data_source"] == "mock"
    assert dict(logs.attributes or {})["rootproof.evidence_status"] == "EVIDENCE_FOUND"
    evaluations = _evaluations(root)
    assert set(evaluations) == {"evidence_guard"}  # the evidence guard failed: the semantic guard never ran
    assert evaluations["evidence_guard"]["gen_ai.evaluation.score.label"] == "FAIL"
    assert list(evaluations["evidence_guard"]["rootproof.evaluation.codes"]) == ["ROOT_CAUSE_MOCK_ONLY"]


def test_a_published_scenario_has_both_guards_verdicts(traced: Traced) -> None:
    sc = load_scenario("pg-row-lock")
    out = traced.harness.diagnose(sc.question, scenario=sc)
    assert (out.status, out.release_outcome) == ("SUCCESS", "PUBLISHED")
    root, _, tools = _check_run(traced, out, provider="rootproof.offline", model="offline-planner-v1")
    assert {s.name for s in tools} >= {"execute_tool query_logs", "execute_tool inspect_postgres", "execute_tool lookup_knowledge"}
    assert all(s.status.status_code is StatusCode.UNSET for s in traced.spans())
    evaluations = _evaluations(root)
    assert evaluations["evidence_guard"]["gen_ai.evaluation.score.label"] == "PASS"
    assert list(evaluations["evidence_guard"]["rootproof.evaluation.codes"]) == []
    assert evaluations["semantic_guard"]["gen_ai.evaluation.score.label"] == "SUPPORTED"
    assert evaluations["semantic_guard"]["gen_ai.evaluation.score.value"] == 1.0


def test_events_and_outcome_are_the_same_with_tracing_off(traced: Traced, tmp_path: Path, knowledge: KnowledgeBase) -> None:
    sc = load_scenario("pg-row-lock")
    on = traced.harness.diagnose(sc.question, scenario=sc)
    with Runtime.from_settings(load_settings(data_dir=tmp_path / "off", deadline_s=60), sink=MemoryTraceSink(), knowledge=knowledge) as runtime:
        off = Harness(runtime).diagnose(sc.question, scenario=sc)

    def shape(out: RunOutcome) -> str:
        """The run's public events and content, its own ids and timings left out."""
        events = [(e["type"], {k: v for k, v in e["data"].items() if k not in ("run_id", "session_id", "duration_ms")}) for e in out.events]
        return re.sub(r"inv-[0-9a-f]{12}", "inv-*", json.dumps([events, out.status, out.release_outcome, out.content], ensure_ascii=False))

    assert shape(on) == shape(off)


# -- content capture off --------------------------------------------------------------------------
def _values(spans: list[ReadableSpan]) -> list[str]:
    """Every name and every attribute or event value of `spans`, as text."""
    out: list[str] = []
    for s in spans:
        out.append(s.name)
        for attrs in [s.attributes or {}] + [e.attributes or {} for e in s.events]:
            for key, value in attrs.items():
                out.append(key)
                if isinstance(value, tuple | list):
                    out.extend(str(v) for v in value)
                else:
                    out.append(str(value))
        out.extend(e.name for e in s.events)
        out.append(s.status.description or "")
    return out


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _assert_no_content(spans: list[ReadableSpan], out: RunOutcome, question: str, extra: list[str]) -> None:
    values = _values(spans)
    blob = "\n".join(values)
    for text in [question, SECRET, *extra]:
        assert text not in blob, text
    for word in question.replace(",", " ").replace(".", " ").split():
        if len(word) >= 6:
            assert word not in blob, word
    for o in out.outcomes:
        inv = o.invocation
        for ref in inv.evidence_refs:  # tool results never: neither whole nor a ref's text
            assert ref.text[:40] not in blob, ref.text
        assert json.dumps(inv.arguments, ensure_ascii=False) not in blob
        for arg in _strings(inv.arguments):  # tool arguments never (a tool's name may be one of them)
            assert len(arg) < 4 or arg not in values, arg
        assert (inv.message or "") == "" or inv.message not in blob
    if out.draft is not None:  # nor the draft's text
        for text in [out.draft.summary] + [c.text for c in out.draft.claims]:
            assert text not in blob, text


def test_content_is_never_captured(traced: Traced) -> None:
    sc = load_scenario("pg-row-lock")
    out = traced.harness.diagnose(QUESTION, scenario=sc)
    assert out.release_outcome == "PUBLISHED" and len(out.outcomes) > 3, (out.fallback_type, out.evidence and out.evidence.codes, out.draft and out.draft.root_cause, getattr(out, "semantic", None))
    _assert_no_content(traced.spans(), out, QUESTION, ["periwinkle"])
    traced.exporter.clear()
    # a model's reasoning, text, query and an invented tool name (its name is the model's output) stay out too
    model = ScriptedModel(
        [
            ScriptedStep(calls=[("query_logs", {"query": "ShareLock periwinkle"}), (f"leak_{SECRET}", {"q": SECRET})], reasoning="pondering lanterns", text="lanterns everywhere"),
            ScriptedStep(draft=_valid_draft),
        ]
    )
    out = traced.harness.diagnose(QUESTION, scenario=sc, model=model)
    spans = traced.spans()
    _, _, tools = _one_run(spans, out)
    assert sorted(s.name for s in tools) == ["execute_tool _OTHER", "execute_tool query_logs"]
    other = next(s for s in tools if s.name == "execute_tool _OTHER")
    assert dict(other.attributes or {})["rootproof.tool.refusal_code"] == "TOOL_NOT_ALLOWED"
    _assert_no_content(spans, out, QUESTION, ["periwinkle", "ShareLock periwinkle", "pondering", "lanterns", f"leak_{SECRET}"])


# -- errors ---------------------------------------------------------------------------------------
def test_a_model_failure_ends_chat_and_run_spans_in_error(traced: Traced) -> None:
    sc = load_scenario("pg-row-lock")
    model = ScriptedModel([ScriptedStep(calls=[("query_logs", {})]), ScriptedStep(fail="unavailable")])
    out = traced.harness.diagnose(sc.question, scenario=sc, model=model)
    assert (out.status, out.fallback_type) == ("FAILED", "MODEL_UNAVAILABLE")
    root, chats, _ = _one_run(traced.spans(), out)
    assert dict(root.attributes or {})["gen_ai.provider.name"] == "rootproof.scripted"
    assert root.status.status_code is StatusCode.ERROR and dict(root.attributes or {})["error.type"] == "MODEL_UNAVAILABLE"
    first, failed = sorted(chats, key=lambda s: int((s.attributes or {})["rootproof.step_index"]))
    assert first.status.status_code is StatusCode.UNSET and dict(first.attributes or {})["gen_ai.usage.input_tokens"] == 50
    assert failed.status.status_code is StatusCode.ERROR
    assert dict(failed.attributes or {})["error.type"] == "ModelUnavailable"
    assert "gen_ai.usage.input_tokens" not in dict(failed.attributes or {})
    assert not failed.status.description and not failed.events  # no message: it may quote the server
    assert not _evaluations(root)  # no draft, no guard ran


def test_a_failed_tool_call_is_an_error_span_a_refusal_is_not_and_parallel_calls_each_get_one() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    boundary, ctx, _, _ = make(FakeLogs(fail=True))
    ctx.telemetry = Telemetry(provider).run(run_id=ctx.run_id, session_id=ctx.session_id)
    calls = [("query_logs", {"query": "a"}, "c1"), ("query_logs", {"query": "b"}, "c2"), ("query_metrics", {}, "c3")]
    outs = boundary.call_many([ToolCallRequest(name=n, arguments=a, call_id=c) for n, a, c in calls])
    assert [str(o.invocation.status) for o in outs] == ["FAILED", "FAILED", "REJECTED"]
    spans = {dict(s.attributes or {})["gen_ai.tool.call.id"]: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"c1", "c2", "c3"}
    for call in ("c1", "c2"):
        span = spans[call]
        assert span.status.status_code is StatusCode.ERROR and not span.status.description
        assert dict(span.attributes or {})["error.type"] == "BACKEND_ERROR"
        assert span.parent is None  # no run span here: a root of its own
    refused = dict(spans["c3"].attributes or {})
    assert spans["c3"].status.status_code is StatusCode.UNSET and "error.type" not in refused
    assert (refused["gen_ai.tool.name"], refused["rootproof.tool.status"], refused["rootproof.tool.refusal_code"]) == ("query_metrics", "REJECTED", "INVALID_ARGUMENTS")


def test_a_tool_call_command_is_one_execute_tool_span(traced: Traced) -> None:
    outcome, ctx = traced.harness.tool_call("query_logs", {"query": "ShareLock"}, scenario=load_scenario("pg-row-lock"))
    assert ctx.lifecycle.state is RunState.COMPLETED
    (span,) = traced.spans()
    a = dict(span.attributes or {})
    assert (span.name, a["gen_ai.tool.call.id"], a["rootproof.tool.status"]) == ("execute_tool query_logs", "cli", "READY")
    assert a["rootproof.invocation_id"] == outcome.invocation.invocation_id


# -- off by default, configuration ------------------------------------------------------------------
def test_tracing_is_off_by_default_and_costs_nothing(tmp_path: Path) -> None:
    with Runtime.from_settings(load_settings(data_dir=tmp_path), sink=MemoryTraceSink()) as runtime:
        assert runtime.telemetry.enabled is False
        run = runtime.telemetry.run(run_id="r", session_id="s")
        assert type(run) is RunTelemetry and run.enabled is False
        with run.invoke_agent(object()) as agent, run.chat(object(), step_index=0, mode="gather") as chat, run.execute_tool("query_logs", "c") as tool:
            assert (type(agent), type(chat), type(tool)) == (AgentSpan, ChatSpan, ToolSpan)
    for environ in ({}, {"OTEL_TRACES_EXPORTER": ""}, {"OTEL_TRACES_EXPORTER": "none"}, {"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "TRUE"}):
        assert Telemetry.from_environ(environ).enabled is False, environ
    # without OTEL_TRACES_EXPORTER, a run (the CLI's runtime, os.environ) never imports opentelemetry
    code = (
        "import os, sys, tempfile\n"
        "from rootproof.agent.models.scripted import ScriptedModel, ScriptedStep\n"
        "from rootproof.harness import Harness\n"
        "from rootproof.run.records import MemoryTraceSink\n"
        "from rootproof.runtime import Runtime\n"
        "from rootproof.scenarios.loader import load_scenario\n"
        "from rootproof.settings import load_settings\n"
        "sc = load_scenario('pg-row-lock')\n"
        "with Runtime.from_settings(load_settings(data_dir=tempfile.mkdtemp()), sink=MemoryTraceSink(), environ=os.environ) as rt:\n"
        "    out = Harness(rt).diagnose(sc.question, scenario=sc, model=ScriptedModel([ScriptedStep(calls=[('query_logs', {})]), ScriptedStep(fail='unavailable')]))\n"
        "assert len(out.outcomes) == 1, out\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {"PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_console_exporter_writes_spans_to_stderr_only(capsys: pytest.CaptureFixture[str]) -> None:
    telemetry = Telemetry.from_environ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "diag-team"})
    assert telemetry.enabled
    run = telemetry.run(run_id="r1", session_id="s1")
    with run.invoke_agent(object()), run.chat(object(), step_index=0, mode="gather"):
        pass
    telemetry.close()
    assert not telemetry.enabled and telemetry.run(run_id="r2", session_id="s2").enabled is False
    captured = capsys.readouterr()
    assert captured.out == ""
    decoder, spans, text = json.JSONDecoder(), [], captured.err.strip()
    while text:
        span, end = decoder.raw_decode(text)
        spans.append(span)
        text = text[end:].strip()
    assert [s["name"] for s in spans] == ["chat unknown", "invoke_agent rootproof"]
    assert {s["resource"]["attributes"]["service.name"] for s in spans} == {"diag-team"}
    assert spans[0]["parent_id"] == spans[1]["context"]["span_id"]
    default = Telemetry.from_environ({"OTEL_TRACES_EXPORTER": "console", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod%2C1"})
    resource = default._provider.resource.attributes  # the provider it built
    assert (resource["service.name"], resource["deployment.environment"]) == ("rootproof", "prod,1")
    default.close()


@pytest.mark.skipif(importlib.util.find_spec("opentelemetry.exporter") is not None, reason="an OTLP exporter package is installed")
def test_otlp_without_the_exporter_package_says_which_package(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^OTEL_TRACES_EXPORTER: otlp needs the opentelemetry-exporter-otlp package"):
        Telemetry.from_environ({"OTEL_TRACES_EXPORTER": "otlp"})
    with pytest.raises(ConfigError, match="opentelemetry-exporter-otlp"):
        Runtime.from_settings(load_settings(data_dir=tmp_path), environ={"OTEL_TRACES_EXPORTER": "console,otlp"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"PYTHONPATH": str(ROOT / "src"), "ROOTPROOF_HOME": str(tmp_path), "OTEL_TRACES_EXPORTER": "otlp"}
    done = subprocess.run([sys.executable, "-m", "rootproof.cli", "diagnose", "--scenario", "pg-row-lock", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().startswith("Error: OTEL_TRACES_EXPORTER: otlp needs the opentelemetry-exporter-otlp package")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("environ", "variable"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "json"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_TRACES_SAMPLER": "jaeger_remote"}, "OTEL_TRACES_SAMPLER"),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG"),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_RESOURCE_ATTRIBUTES": "team"}, "OTEL_RESOURCE_ATTRIBUTES"),
    ],
)
def test_a_bad_otel_value_names_its_variable(environ: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{variable}: "):
        Telemetry.from_environ(environ)


def test_sampler_off_records_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    telemetry = Telemetry.from_environ({"OTEL_TRACES_EXPORTER": "console", "OTEL_TRACES_SAMPLER": "always_off"})
    run = telemetry.run(run_id="r", session_id="s")
    with run.invoke_agent(object()), run.execute_tool("query_logs", "c1"):
        pass
    telemetry.close()
    assert capsys.readouterr().err == ""


def test_the_runtime_closes_its_own_tracing_but_not_a_callers_provider(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with Runtime.from_settings(load_settings(data_dir=tmp_path), sink=MemoryTraceSink(), telemetry=Telemetry(provider)) as runtime:
        assert runtime.telemetry.enabled
    assert not runtime.telemetry.enabled
    with provider.get_tracer("t").start_as_current_span("after"):
        pass
    assert [s.name for s in exporter.get_finished_spans()] == ["after"]  # still the caller's to shut down
    provider.shutdown()


def test_a_model_servers_chat_span_is_a_client_span_naming_its_provider_and_host_only() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    run = Telemetry(provider).run(run_id="r", session_id="s")
    deepseek = OpenAICompatModel(base_url=f"https://bob:{SECRET}@api.deepseek.com/v1", api_key=SECRET, model="deepseek-chat", provider="deepseek")
    local = OpenAICompatModel(base_url="http://127.0.0.1:8765/v1", api_key=None, model="qwen", provider="llamacpp")
    with run.invoke_agent(deepseek):
        with run.chat(deepseek, step_index=0, mode="gather") as chat:
            chat.usage(TokenUsage(input_tokens=7, output_tokens=3, estimated=True))
        with run.chat(local, step_index=1, mode="draft"):
            pass
    deepseek.close()
    local.close()
    first, second, root = exporter.get_finished_spans()
    assert (first.name, first.kind, second.name) == ("chat deepseek-chat", SpanKind.CLIENT, "chat qwen")
    a = dict(first.attributes or {})
    assert (a["gen_ai.provider.name"], a["server.address"], a["server.port"]) == ("deepseek", "api.deepseek.com", 443)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"], a["rootproof.usage.estimated"]) == (7, 3, True)
    b = dict(second.attributes or {})
    assert (b["gen_ai.provider.name"], b["server.address"], b["server.port"], b["rootproof.model.mode"]) == ("llamacpp", "127.0.0.1", 8765, "draft")
    r = dict(root.attributes or {})
    assert (r["gen_ai.provider.name"], r["gen_ai.request.model"], r["gen_ai.usage.input_tokens"], r["gen_ai.usage.output_tokens"]) == ("deepseek", "deepseek-chat", 7, 3)
    assert all(SECRET not in v and "bob" not in v for v in _values([first, second, root]))
