"""OpenTelemetry tracing of runs, with the GenAI semantic conventions; off by default.

`Telemetry.from_environ(environ)` reads the standard `OTEL_*` variables from the mapping it is
given (the CLI passes `os.environ`): tracing is on when `OTEL_SDK_DISABLED` is not `true` and
`OTEL_TRACES_EXPORTER` names `console` (spans as JSON on stderr, so that `--json` keeps stdout to
itself) or `otlp` (needs the `opentelemetry-exporter-otlp` package). A caller may instead hand
`Telemetry(provider)` a `TracerProvider` of its own (tests: an in-memory exporter). The `Runtime`
owns the `Telemetry`; each run gets a `RunTelemetry` (`RunContext.telemetry`), on which the driver,
the agent loop and the ToolBoundary open their spans, one context manager each:

    invoke_agent rootproof     the whole run (driver)                       INTERNAL
      chat {model}             each agent model call (agent loop)           CLIENT; INTERNAL in-process
      execute_tool {tool}      each ToolBoundary call                       INTERNAL
    gen_ai.evaluation.result   events of invoke_agent: each guard's verdict

Content capture is off, always: no prompt, message, reasoning, question, tool argument or tool
result, and no error message, enters an attribute or an event; only ids, names, counts, statuses
and codes do (docs/observability.md lists them). When tracing is off every call here is a no-op on
a stateless object and `opentelemetry` is never imported.
"""

from __future__ import annotations

import importlib
import re
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from rootproof.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from rootproof.agent.models.base import TokenUsage
    from rootproof.boundary.store import CanonicalInvocation

__all__ = ["AgentSpan", "ChatSpan", "RunTelemetry", "Telemetry", "ToolSpan", "model_identity"]

AGENT_NAME = "rootproof"
"""`gen_ai.agent.name` of every run."""
OFFLINE_PROVIDER = "rootproof.offline"
"""`gen_ai.provider.name` of the in-process planners (offline planner, knowledge answerer)."""
OTHER_TOOL = "_OTHER"
"""`gen_ai.tool.name` of a call to a tool the run does not know (its name came from the model)."""

# GenAI semantic conventions (Development status; the names of semconv 1.37 and later).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
CONVERSATION = "gen_ai.conversation.id"
AGENT = "gen_ai.agent.name"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
EVALUATION_EVENT = "gen_ai.evaluation.result"
EVALUATION_NAME = "gen_ai.evaluation.name"
EVALUATION_LABEL = "gen_ai.evaluation.score.label"
EVALUATION_SCORE = "gen_ai.evaluation.score.value"
ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"

_EXPORTERS = ("console", "otlp", "none")
_OTLP_MODULES = {
    "grpc": "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "http/protobuf": "opentelemetry.exporter.otlp.proto.http.trace_exporter",
}
_SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio")
_CALL_ID = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")
"""A tool call id kept as `gen_ai.tool.call.id` (provider ids such as `call_abc123`); others are left out."""
_FAILED = frozenset({"FAILED", "TIMED_OUT"})
"""Invocation statuses that end an `execute_tool` span in error (a refusal is the boundary's decision, not an error)."""
_RUN_ERRORS = frozenset({"FAILED", "TIMED_OUT"})
"""Run statuses that end the `invoke_agent` span in error."""


def model_identity(model: object) -> tuple[str, str, str | None]:
    """`(gen_ai.provider.name, gen_ai.request.model, base URL or None)` of an agent model.

    An OpenAI-compatible client names its provider (`openai`, `deepseek`, `vllm`, `ollama`,
    `llamacpp`; `auto`, probed, is reported as `openai`: the API it speaks) and its model; the
    offline planners are `rootproof.offline`; any other model `rootproof.<name>`.
    """
    inner = getattr(model, "inner", model)  # a CancellableModel wraps the model
    name = str(getattr(inner, "name", "") or "unknown")
    provider = getattr(inner, "provider", None)
    if isinstance(provider, str) and provider:
        base_url = getattr(inner, "base_url", None)
        return ("openai" if provider == "auto" else provider), str(getattr(inner, "model", None) or name), base_url if isinstance(base_url, str) else None
    if name.startswith("offline"):
        return OFFLINE_PROVIDER, name, None
    return f"rootproof.{name.split(':', 1)[0]}", name, None


# -- the no-op side (tracing off): stateless, nothing imported --------------------------------
class AgentSpan:
    """The run's `invoke_agent` span (this base: tracing off, does nothing)."""

    def ended(self, *, status: str, release_outcome: str, fallback_type: str | None, tokens: int) -> None:
        """Record how the run ended (status, release outcome, fallback type, tokens of every model call)."""


class ChatSpan:
    """One agent model call's `chat` span (this base: tracing off, does nothing)."""

    def usage(self, usage: TokenUsage) -> None:
        """Record the call's tokens (`gen_ai.usage.*`)."""


class ToolSpan:
    """One ToolBoundary call's `execute_tool` span (this base: tracing off, does nothing)."""

    def outcome(self, inv: CanonicalInvocation) -> None:
        """Record the call's outcome (status, evidence status, data source; never its result) and end the span."""


_NO_AGENT, _NO_CHAT, _NO_TOOL = AgentSpan(), ChatSpan(), ToolSpan()


class RunTelemetry:
    """One run's spans. This base is what a run gets while tracing is off: every method does
    nothing (a stateless object; `opentelemetry` is not imported)."""

    enabled = False

    def invoke_agent(self, model: object) -> AbstractContextManager[AgentSpan]:
        """The run's `invoke_agent rootproof` span, current while the run goes (the driver)."""
        return nullcontext(_NO_AGENT)

    def chat(self, model: object, *, step_index: int, mode: str) -> AbstractContextManager[ChatSpan]:
        """A `chat {model}` span around one agent model call (the agent loop)."""
        return nullcontext(_NO_CHAT)

    def execute_tool(self, name: str, call_id: str) -> AbstractContextManager[ToolSpan]:
        """An `execute_tool {tool}` span around one ToolBoundary call; `ToolSpan.outcome` ends it."""
        return nullcontext(_NO_TOOL)

    def evaluation(self, name: str, label: str, *, codes: Sequence[str] = (), score: float | None = None, error: str | None = None) -> None:
        """A `gen_ai.evaluation.result` event on the run's span: a guard's verdict and its codes."""


# -- the recording side (tracing on) ---------------------------------------------------------
def _failed(span: Span, error_type: str) -> None:
    """Mark `span` failed: `error.type` and status ERROR, no message (an error message may quote content)."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute(ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR))


class _AgentSpan(AgentSpan):
    def __init__(self, span: Span) -> None:
        self._span = span

    def ended(self, *, status: str, release_outcome: str, fallback_type: str | None, tokens: int) -> None:
        span = self._span
        if status:
            span.set_attribute("rootproof.status", status)
        if release_outcome:
            span.set_attribute("rootproof.release_outcome", release_outcome)
        if fallback_type:
            span.set_attribute("rootproof.fallback_type", fallback_type)
        span.set_attribute("rootproof.tokens", tokens)
        if status in _RUN_ERRORS:
            _failed(span, fallback_type or status)


class _ChatSpan(ChatSpan):
    def __init__(self, span: Span, run: _RunSpans) -> None:
        self._span = span
        self._run = run

    def usage(self, usage: TokenUsage) -> None:
        self._span.set_attribute(INPUT_TOKENS, usage.input_tokens)
        self._span.set_attribute(OUTPUT_TOKENS, usage.output_tokens)
        if usage.estimated:
            self._span.set_attribute("rootproof.usage.estimated", True)
        self._run.count(usage)


class _ToolSpan(ToolSpan):
    def __init__(self, span: Span) -> None:
        self._span = span
        self.done = False

    def outcome(self, inv: CanonicalInvocation) -> None:
        if self.done:
            return
        span, status = self._span, str(inv.status)
        span.set_attribute("rootproof.invocation_id", inv.invocation_id)
        span.set_attribute("rootproof.tool.status", status)
        if inv.refusal_code:
            span.set_attribute("rootproof.tool.refusal_code", inv.refusal_code)
        if inv.evidence_status:
            span.set_attribute("rootproof.evidence_status", inv.evidence_status)
        if inv.data_source:
            span.set_attribute("rootproof.data_source", inv.data_source)
        span.set_attribute("rootproof.evidence_count", len(inv.evidence_refs))
        if status in _FAILED:
            _failed(span, inv.refusal_code or status)
        self.end()

    def failed(self, error_type: str) -> None:
        _failed(self._span, error_type)

    def end(self) -> None:
        if not self.done:
            self.done = True
            self._span.end()


class _RunSpans(RunTelemetry):
    """One run's spans on a tracer: children hang off the run's `invoke_agent` span explicitly
    (model steps and tool calls run on other threads, where the current span is not theirs)."""

    enabled = True

    def __init__(self, tracer: Tracer, *, run_id: str, session_id: str) -> None:
        self._tracer = tracer
        self._run_id = run_id
        self._session_id = session_id
        self._root: Span | None = None
        self._lock = threading.Lock()
        self._input_tokens = 0
        self._output_tokens = 0
        self._calls = 0

    def _common(self) -> dict[str, Any]:
        return {CONVERSATION: self._session_id, "rootproof.run_id": self._run_id}

    def _parent(self) -> Any:
        from opentelemetry import trace

        return trace.set_span_in_context(self._root) if self._root is not None else None

    def count(self, usage: TokenUsage) -> None:
        """Add one chat call's tokens to the run's totals."""
        with self._lock:
            self._input_tokens += usage.input_tokens
            self._output_tokens += usage.output_tokens
            self._calls += 1

    def _start(self, name: str, attributes: dict[str, Any], *, client: bool = False) -> Span:
        """A child of the run's span (a root when there is none: `rootproof tool call`)."""
        from opentelemetry.trace import SpanKind

        kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
        return self._tracer.start_span(name, context=self._parent(), kind=kind, attributes=attributes, record_exception=False, set_status_on_exception=False)

    @contextmanager
    def invoke_agent(self, model: object) -> Iterator[AgentSpan]:
        from opentelemetry.trace import SpanKind, use_span

        provider, request_model, _ = model_identity(model)
        attributes = {OPERATION: "invoke_agent", AGENT: AGENT_NAME, PROVIDER: provider, REQUEST_MODEL: request_model, **self._common()}
        span = self._tracer.start_span(f"invoke_agent {AGENT_NAME}", kind=SpanKind.INTERNAL, attributes=attributes, record_exception=False, set_status_on_exception=False)
        self._root = span
        try:
            with use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                yield _AgentSpan(span)
        except BaseException as exc:
            _failed(span, type(exc).__qualname__)
            raise
        finally:
            with self._lock:
                if self._calls:
                    span.set_attribute(INPUT_TOKENS, self._input_tokens)
                    span.set_attribute(OUTPUT_TOKENS, self._output_tokens)
            self._root = None
            span.end()

    @contextmanager
    def chat(self, model: object, *, step_index: int, mode: str) -> Iterator[ChatSpan]:
        provider, request_model, base_url = model_identity(model)
        attributes = {OPERATION: "chat", PROVIDER: provider, REQUEST_MODEL: request_model, **self._common(), "rootproof.step_index": step_index, "rootproof.model.mode": mode}
        if base_url:
            where = urlsplit(base_url)
            if where.hostname:
                attributes[SERVER_ADDRESS] = where.hostname
                try:
                    attributes[SERVER_PORT] = where.port or (443 if where.scheme == "https" else 80)
                except ValueError:
                    pass
        span = self._start(f"chat {request_model}", attributes, client=base_url is not None)
        try:
            yield _ChatSpan(span, self)
        except BaseException as exc:
            _failed(span, type(exc).__qualname__)
            raise
        finally:
            span.end()

    @contextmanager
    def execute_tool(self, name: str, call_id: str) -> Iterator[ToolSpan]:
        attributes = {OPERATION: "execute_tool", TOOL_NAME: name, TOOL_TYPE: "function", **self._common()}
        if _CALL_ID.fullmatch(call_id):
            attributes[TOOL_CALL_ID] = call_id
        handle = _ToolSpan(self._start(f"execute_tool {name}", attributes))
        try:
            yield handle
        except BaseException as exc:
            if not handle.done:
                handle.failed(type(exc).__qualname__)
            raise
        finally:
            handle.end()

    def evaluation(self, name: str, label: str, *, codes: Sequence[str] = (), score: float | None = None, error: str | None = None) -> None:
        root = self._root
        if root is None:
            return
        attributes: dict[str, Any] = {EVALUATION_NAME: name, EVALUATION_LABEL: label, "rootproof.evaluation.codes": [str(c) for c in codes]}
        if score is not None:
            attributes[EVALUATION_SCORE] = float(score)
        if error:
            attributes[ERROR_TYPE] = error
        root.add_event(EVALUATION_EVENT, attributes=attributes)


class Telemetry:
    """A process's tracing: a tracer on a `TracerProvider`, or nothing (off, the default).

    `Telemetry()` is off; `Telemetry(provider)` traces on the caller's provider (the caller
    shuts it down); `Telemetry.from_environ(environ)` builds its own from the `OTEL_*` variables
    and shuts it down in `close()`. Never a process-wide global: the global tracer provider of
    `opentelemetry.trace` is neither read nor set.
    """

    def __init__(self, provider: TracerProvider | None = None, *, owned: bool = False) -> None:
        self._provider = provider
        self._owned = owned and provider is not None
        self._closed = False
        self._tracer: Tracer | None = None
        if provider is not None:
            from rootproof import __version__

            self._tracer = provider.get_tracer("rootproof", __version__)

    @property
    def enabled(self) -> bool:
        """True when runs are traced."""
        return self._tracer is not None and not self._closed

    def run(self, *, run_id: str, session_id: str) -> RunTelemetry:
        """The spans of one run (a do-nothing `RunTelemetry` when tracing is off)."""
        if self._tracer is None or self._closed:
            return RunTelemetry()
        return _RunSpans(self._tracer, run_id=run_id, session_id=session_id)

    def close(self) -> None:
        """Flush and shut down a provider built from the environment; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owned and self._provider is not None:
            shutdown = getattr(self._provider, "shutdown", None)
            if callable(shutdown):
                shutdown()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Telemetry:
        """Tracing as the `OTEL_*` variables of `environ` configure it (docs/observability.md).

        On when `OTEL_SDK_DISABLED` is not `true` and `OTEL_TRACES_EXPORTER` names `console`
        or `otlp` (comma-separated; unset, empty or `none`: off). `OTEL_SERVICE_NAME` (default
        `rootproof`), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and `_ARG` are read from
        `environ` too. A value it cannot use is a `ConfigError` naming the variable.
        """
        if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return cls()
        names = _exporter_names(environ.get("OTEL_TRACES_EXPORTER", ""))
        if not names:
            return cls()
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
            from opentelemetry.sdk.trace.export import (
                BatchSpanProcessor,
                ConsoleSpanExporter,
                SimpleSpanProcessor,
            )
            from opentelemetry.sdk.version import __version__ as sdk_version
        except ImportError:
            raise ConfigError(
                f"OTEL_TRACES_EXPORTER: {','.join(names)} needs the opentelemetry-sdk package, which is not installed "
                "(pip install opentelemetry-sdk, or rootproof's service extra); unset OTEL_TRACES_EXPORTER to run without tracing"
            ) from None
        exporters: list[tuple[str, SpanExporter]] = []
        for name in names:
            exporters.append((name, ConsoleSpanExporter(out=sys.stderr) if name == "console" else _otlp_exporter(environ)))
        from rootproof import __version__

        given = _resource_attributes(environ.get("OTEL_RESOURCE_ATTRIBUTES", ""))
        service = environ.get("OTEL_SERVICE_NAME", "").strip() or given.get("service.name") or AGENT_NAME
        sdk = {"telemetry.sdk.language": "python", "telemetry.sdk.name": "opentelemetry", "telemetry.sdk.version": sdk_version}
        resource = Resource({**sdk, "service.version": __version__, **given, "service.name": service})
        provider = SdkTracerProvider(resource=resource, sampler=_sampler(environ))
        for name, exporter in exporters:
            # The console gets each span at once (a CLI run is short); OTLP gets batches.
            provider.add_span_processor(SimpleSpanProcessor(exporter) if name == "console" else BatchSpanProcessor(exporter))
        return cls(provider, owned=True)


def _exporter_names(value: str) -> list[str]:
    names: list[str] = []
    for raw in value.split(","):
        name = raw.strip().lower()
        if not name:
            continue
        if name not in _EXPORTERS:
            raise ConfigError(f"OTEL_TRACES_EXPORTER: unsupported exporter {raw.strip()!r} (expected console, otlp or none)")
        if name != "none" and name not in names:
            names.append(name)
    return names


def _otlp_exporter(environ: Mapping[str, str]) -> SpanExporter:
    """The OTLP span exporter of the configured protocol (grpc by default, as the Python SDK's);
    it reads its own `OTEL_EXPORTER_OTLP_*` variables (endpoint, headers, timeout)."""
    variable = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" if environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "").strip() else "OTEL_EXPORTER_OTLP_PROTOCOL"
    protocol = environ.get(variable, "").strip() or "grpc"
    module_name = _OTLP_MODULES.get(protocol)
    if module_name is None:
        raise ConfigError(f"{variable}: unsupported OTLP protocol {protocol!r} (expected grpc or http/protobuf)")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise ConfigError(
            "OTEL_TRACES_EXPORTER: otlp needs the opentelemetry-exporter-otlp package, which is not installed "
            "(pip install opentelemetry-exporter-otlp); OTEL_TRACES_EXPORTER=console prints the spans on stderr without it"
        ) from None
    exporter: SpanExporter = module.OTLPSpanExporter()
    return exporter


def _resource_attributes(value: str) -> dict[str, str]:
    """`OTEL_RESOURCE_ATTRIBUTES`: `key=value` pairs, comma-separated, values percent-encoded."""
    out: dict[str, str] = {}
    for pair in value.split(","):
        if not pair.strip():
            continue
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"OTEL_RESOURCE_ATTRIBUTES: {pair.strip()!r} is not key=value")
        out[key.strip()] = unquote(raw.strip())
    return out


def _sampler(environ: Mapping[str, str]) -> Any:
    """`OTEL_TRACES_SAMPLER` (default parentbased_always_on) and its `OTEL_TRACES_SAMPLER_ARG`."""
    from opentelemetry.sdk.trace import sampling

    name = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower() or "parentbased_always_on"
    if name not in _SAMPLERS:
        raise ConfigError(f"OTEL_TRACES_SAMPLER: unsupported sampler {name!r} (expected {', '.join(_SAMPLERS)})")
    if name.endswith("always_on"):
        return sampling.ParentBased(sampling.ALWAYS_ON) if name.startswith("parentbased") else sampling.ALWAYS_ON
    if name.endswith("always_off"):
        return sampling.ParentBased(sampling.ALWAYS_OFF) if name.startswith("parentbased") else sampling.ALWAYS_OFF
    arg = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip() or "1.0"
    try:
        ratio = float(arg)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG: {arg!r} is not a ratio between 0 and 1")
    ratio_sampler = sampling.TraceIdRatioBased(ratio)
    return sampling.ParentBased(ratio_sampler) if name.startswith("parentbased") else ratio_sampler
