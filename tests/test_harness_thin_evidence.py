"""Thin evidence is never published as "no fault found": the run's refused or failed calls decide a fallback by code.

A draft without a root cause publishes only when at least half of the run's evidence calls
returned (READY). Otherwise the run ends BUDGET_EXHAUSTED (budget refusals) or
INSUFFICIENT_EVIDENCE (timeouts, failures), and the fallback's limitations name each call.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest

from rootproof.backends.registry import BackendRegistry
from rootproof.boundary.boundary import CircuitBreaker
from rootproof.boundary.store import CanonicalInvocation, InvocationStatus
from rootproof.harness import Harness, memory_harness
from rootproof.run.records import MemoryTraceSink
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.scenarios.types import Scenario
from rootproof.settings import load_settings
from rootproof.targets import LoadedTargets


def _limitations(content: dict[str, Any] | None) -> list[str]:
    assert content is not None and content["content_type"] == "SAFE_FALLBACK", content
    return list(content["fallback"]["limitations"])


def test_one_tool_call_budget_ends_budget_exhausted_naming_each_refused_call() -> None:
    h = memory_harness(load_settings(max_tool_calls=1))
    sc = load_scenario("pg-row-lock")
    out = h.diagnose(sc.question, scenario=sc)
    assert (out.status, out.release_outcome, out.fallback_type) == ("SUCCESS", "FALLBACK", "BUDGET_EXHAUSTED")
    refused = [o.invocation for o in out.outcomes if o.invocation.refusal_code == "BUDGET_EXHAUSTED"]
    assert refused, "the budget refused no call"
    lines = _limitations(out.content)
    assert lines[0] == "Model calls, tool calls or tokens ran out"  # the fixed template first
    for inv in refused:
        assert any(
            line.startswith(f"tool call {inv.tool_name} {{")
            and "REJECTED BUDGET_EXHAUSTED" in line
            and "tool_calls limit of 1" in line
            for line in lines
        ), (inv.tool_name, lines)


class _SleepingBackend:
    """A runtime backend slower than any tool timeout of the test."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def close(self) -> None:
        """Nothing to release."""

    def call(self, tool: str, args: Any, *, now: datetime, run_id: str) -> Any:
        time.sleep(self.seconds)
        raise AssertionError("never reached: the boundary timed the call out")


class _SlowRuntimeHarness(Harness):
    def backends(self, scenario: Scenario | None, targets: LoadedTargets | None = None) -> BackendRegistry:
        out = super().backends(scenario, targets)
        out.mount("*", _SleepingBackend(1.0))
        return out


@pytest.mark.parametrize(
    ("scenario", "language", "prefix"),
    [("pg-row-lock", "en", "tool call "), ("redis-maxclients", "zh", "工具调用 ")],
)
def test_every_runtime_call_timing_out_ends_insufficient_evidence(
    scenario: str, language: str, prefix: str
) -> None:
    # its own breaker: the runtime circuit this test opens must not pause other tests' runs
    h = _SlowRuntimeHarness(
        Runtime.from_settings(load_settings(tool_timeout_s=0.05), sink=MemoryTraceSink(), breakers=CircuitBreaker())
    )
    sc = load_scenario(scenario)
    out = h.diagnose("", scenario=sc) if language == "zh" else h.diagnose(sc.question, scenario=sc)
    assert (out.status, out.release_outcome, out.fallback_type) == (
        "SUCCESS",
        "FALLBACK",
        "INSUFFICIENT_EVIDENCE",
    ), out.content
    failed = [
        o.invocation
        for o in out.outcomes
        if o.invocation.status is not InvocationStatus.READY and o.invocation.tool_name != "lookup_knowledge"
    ]
    assert any(i.status is InvocationStatus.TIMED_OUT for i in failed)
    assert not any(
        o.invocation.status is InvocationStatus.READY and o.invocation.tool_name != "lookup_knowledge"
        for o in out.outcomes
    )
    assert out.content is not None
    fb = out.content["fallback"]
    assert fb["message"].startswith(
        "多数工具调用" if language == "zh" else "Most tool calls were refused, timed out or failed"
    )
    calls = [line for line in fb["limitations"] if line.startswith(prefix)]
    assert len(calls) == len(failed)
    for line, inv in zip(calls, failed, strict=True):  # in call order, each with its code
        assert (
            line.startswith(f"{prefix}{inv.tool_name} {{") and (inv.refusal_code or str(inv.status)) in line
        ), line


def _inv(tool: str, status: InvocationStatus, code: str | None = None, i: int = 0) -> CanonicalInvocation:
    return CanonicalInvocation(
        invocation_id=f"i{i}",
        run_id="r",
        session_id="s",
        step_index=0,
        tool_name=tool,
        arguments={},
        scope_key=None,
        status=status,
        refusal_code=code,
    )


R, X, T = InvocationStatus.READY, InvocationStatus.REJECTED, InvocationStatus.TIMED_OUT


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        ([("query_logs", R, None), ("query_metrics", R, None)], None),
        (
            [("query_logs", R, None), ("query_metrics", T, "TIMED_OUT"), ("inspect_postgres", R, None)],
            None,
        ),  # one in three
        (
            [("query_logs", R, None), ("query_metrics", T, "TIMED_OUT")],
            "INSUFFICIENT_EVIDENCE",
        ),  # half
        (
            [
                ("query_logs", X, "BUDGET_EXHAUSTED"),
                ("query_metrics", X, "SCOPE_SATURATED"),
                ("inspect_postgres", T, "TIMED_OUT"),
            ],
            "BUDGET_EXHAUSTED",
        ),
        # knowledge lookups are not evidence calls; a refused duplicate's query already ran
        (
            [
                ("query_logs", R, None),
                ("lookup_knowledge", T, "TIMED_OUT"),
                ("lookup_knowledge", T, "TIMED_OUT"),
            ],
            None,
        ),
        (
            [
                ("query_logs", R, None),
                ("query_logs", X, "DUPLICATE_SCOPE"),
                ("query_logs", X, "DUPLICATE_SCOPE"),
            ],
            None,
        ),
        ([], "INSUFFICIENT_EVIDENCE"),  # a run that never looked
        ([("lookup_knowledge", R, None)], "INSUFFICIENT_EVIDENCE"),
    ],
)
def test_thin_evidence_rule(
    calls: list[tuple[str, InvocationStatus, str | None]], expected: str | None
) -> None:
    from rootproof.harness import thin_evidence

    got = thin_evidence([_inv(t, s, c, i) for i, (t, s, c) in enumerate(calls)])
    assert (str(got[0]) if got else None) == expected


def test_healthy_control_still_publishes_no_fault_found() -> None:
    h = memory_harness(load_settings())
    sc = load_scenario("control-db-healthy")
    out = h.diagnose(sc.question, scenario=sc)
    assert out.release_outcome == "PUBLISHED" and out.content is not None
    assert out.content["report"]["root_cause"] is None
