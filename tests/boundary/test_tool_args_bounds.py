"""Hostile tool arguments: whatever a model sends, a call is READY or refused, never a crash.

Every tool is called through `Harness.tool_call` (what `rootproof tool call` runs: the whole
boundary, a SQLite trace store) on built-in scenarios with random and hostile arguments.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rootproof.boundary.store import InvocationStatus
from rootproof.harness import Harness
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.scenarios.types import Scenario
from rootproof.settings import load_settings
from rootproof.store import SqlTraceStore
from rootproof.tools.base import TOOLS

REFUSALS = {"INVALID_ARGUMENTS"}
SCENARIO_OF = {"inspect_redis": "redis-maxclients", "inspect_nginx": "nginx-upstream-timeout"}
HOSTILE_TEXT = [
    "",
    " ",
    "a" * 10_000,
    "\x00",
    "x\x00y",
    "\x1b[2J",
    "\ud800",
    "\udfff tail",
    '"unterminated',
    '""',
    "*",
    "[",
    "[!]]",
    "**/*" * 60,
    "é́́́́" * 50,
    "\u202e reversed",
    " ".join(f"t{i}" for i in range(200)),
    "99999999999d",
    "-1m",
    "0s",
    "7d",
    "8d",
    "1e9s",
    "604800s",
    "10081m",
    "30 m",
    "%s%s%n",
    "{}",
    "null",
]
hostile_scalar = st.one_of(
    st.sampled_from(HOSTILE_TEXT),
    st.text(max_size=60),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
hostile_value = st.recursive(
    hostile_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(HOSTILE_TEXT[:12]) | st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=8,
)


def _fields(tool: str) -> list[str]:
    return list(TOOLS[tool].args_model.model_fields)


def arguments(tool: str) -> st.SearchStrategy[dict[str, Any] | str]:
    """Arguments of `tool`: its own fields with hostile values, sometimes an unknown field, or raw JSON text."""
    fields = _fields(tool)
    values: dict[str, st.SearchStrategy[Any]] = {name: hostile_value for name in fields}
    values["kind"] = (
        st.sampled_from(
            [
                "activity",
                "locks",
                "settings",
                "log",
                "info",
                "clients",
                "slowlog",
                "config",
                "error_log",
                "access_log",
                "status",
                "nope",
            ]
        )
        | hostile_value
    )
    values["labels"] = (
        st.dictionaries(
            st.sampled_from(HOSTILE_TEXT) | st.text(max_size=20),
            st.sampled_from(HOSTILE_TEXT) | st.text(max_size=20),
            max_size=30,
        )
        | hostile_value
    )
    values["since"] = st.sampled_from(HOSTILE_TEXT[17:26]) | hostile_value
    as_dict = st.fixed_dictionaries(
        {}, optional={n: values.get(n, hostile_value) for n in fields}
    ) | st.dictionaries(st.sampled_from(fields + ["extra", "\x00"]), hostile_value, max_size=5)
    raw = st.sampled_from(
        [
            '{"since": "99999999999d"}',
            '{"query": "\\ud800"}',
            '{"query": "\\u0000"}',
            "[]",
            "1",
            "{",
            "",
            '{"limit": 1e400}',
        ]
    )
    return as_dict | raw


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    home = tmp_path_factory.mktemp("home")
    store = SqlTraceStore(f"sqlite:///{home / 'trace.db'}")
    yield Harness(Runtime.from_settings(load_settings(data_dir=home, deadline_s=60), sink=store))
    store.close()


@pytest.fixture(scope="module")
def scenarios() -> dict[str, Scenario]:
    out = {}
    for sid in {"pg-row-lock", *SCENARIO_OF.values()}:
        out[sid] = dataclasses.replace(load_scenario(sid), allowed_tools=tuple(TOOLS))
    return out


def _check(harness: Harness, scenario: Scenario, tool: str, args: dict[str, Any] | str) -> None:
    outcome, _ = harness.tool_call(tool, args, scenario=scenario)
    inv = outcome.invocation
    assert inv.status in (InvocationStatus.READY, InvocationStatus.REJECTED), (inv.status, inv.message)
    if inv.status is InvocationStatus.REJECTED:
        assert inv.refusal_code in REFUSALS, (inv.refusal_code, inv.message)
    json.dumps(outcome.observation, ensure_ascii=False).encode("utf-8")  # storable and printable


@pytest.mark.parametrize("tool", list(TOOLS))
def test_hostile_arguments_are_ready_or_refused(
    harness: Harness, scenarios: dict[str, Scenario], tool: str
) -> None:
    scenario = scenarios[SCENARIO_OF.get(tool, "pg-row-lock")]

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(args=arguments(tool))
    def run(args: dict[str, Any] | str) -> None:
        _check(harness, scenario, tool, args)

    run()


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("query_logs", {"since": "99999999999d"}),
        ("query_metrics", {"metric": "*", "since": "99999999999999d"}),
        ("inspect_postgres", {"kind": "log", "since": "9999999999m"}),
        ("query_logs", {"query": "timeout\x00"}),
        ("query_metrics", {"metric": "pg_*", "labels": {f"k{i}": "v" for i in range(50)}}),
        ("query_logs", {"query": " ".join(f"t{i}" for i in range(100))}),
    ],
)
def test_out_of_range_arguments_get_a_plain_refusal(
    harness: Harness, scenarios: dict[str, Scenario], tool: str, args: dict[str, Any]
) -> None:
    outcome, _ = harness.tool_call(tool, args, scenario=scenarios["pg-row-lock"])
    assert outcome.invocation.refusal_code == "INVALID_ARGUMENTS", outcome.invocation.message
    assert outcome.observation["message"].startswith("Invalid arguments: ")


def test_a_clock_near_year_one_does_not_overflow_the_window(
    harness: Harness, scenarios: dict[str, Scenario], tmp_path: Path
) -> None:
    from datetime import UTC, datetime

    early = dataclasses.replace(scenarios["pg-row-lock"], now=datetime(1, 1, 2, tzinfo=UTC))
    outcome, _ = harness.tool_call("query_logs", {"since": "7d"}, scenario=early)
    assert outcome.invocation.status is InvocationStatus.READY
    assert outcome.invocation.evidence_status == "NO_EVIDENCE"
