"""RunContext: lifecycle, budget, cancellation, progress, settings."""

from __future__ import annotations

import threading
import time

import pytest

from rootproof.errors import BudgetExhausted, ConfigError, DeadlineExceeded, IllegalTransition, RunCancelled
from rootproof.run import RunBudget, RunCancellation, RunContext, RunLifecycle, RunState, ToolScope
from rootproof.settings import load_settings

S = RunState


def ctx(**kw: object) -> RunContext:
    return RunContext(session_id="s", scope=ToolScope(allowed_tools=frozenset({"query_logs"})), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "path",
    [
        [S.ROUTING, S.RUNNING, S.VALIDATING, S.RELEASING, S.COMPLETED],
        [S.ROUTING, S.RELEASING, S.COMPLETED],
        [S.RUNNING, S.COMPLETED],
        [S.ROUTING, S.RUNNING, S.RELEASING, S.TIMED_OUT],
        [S.ROUTING, S.CANCELLED],
        [S.ROUTING, S.RUNNING, S.FAILED],
    ],
)
def test_legal_paths(path: list[RunState]) -> None:
    lc = RunLifecycle()
    for s in path:
        lc.advance(s)
    assert lc.terminal
    assert lc.history == [S.CREATED, *path]


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ([], S.VALIDATING),
        ([], S.COMPLETED),
        ([S.ROUTING], S.VALIDATING),
        ([S.ROUTING, S.RUNNING], S.ROUTING),
        ([S.ROUTING, S.RUNNING, S.VALIDATING], S.COMPLETED),
        ([S.RUNNING, S.COMPLETED], S.RELEASING),
        ([S.ROUTING, S.CANCELLED], S.RUNNING),
        ([S.ROUTING, S.RELEASING], S.RUNNING),
        ([S.ROUTING, S.RELEASING, S.COMPLETED], S.FAILED),
    ],
)
def test_illegal_transitions_raise(path: list[RunState], bad: RunState) -> None:
    lc = RunLifecycle()
    for s in path:
        lc.advance(s)
    with pytest.raises(IllegalTransition, match=f"{lc.state} -> {bad}"):
        lc.advance(bad)


def test_model_budget_message_names_limit_and_value() -> None:
    c = ctx(budget=RunBudget(model_calls=2))
    c.usage.take_model_call(c.budget)
    c.usage.take_model_call(c.budget)
    with pytest.raises(BudgetExhausted, match=r"model_calls limit of 2 reached \(model_calls=2\)"):
        c.usage.take_model_call(c.budget)


def test_token_budget() -> None:
    c = ctx(budget=RunBudget(tokens=1000))
    c.usage.add_tokens(1000)
    with pytest.raises(BudgetExhausted, match="tokens limit of 1000"):
        c.usage.take_model_call(c.budget)
    assert c.usage.try_take_tool_call("query_logs", c.budget) == "tokens limit of 1000 reached (tokens=1000)"


def test_deadline_makes_run_inactive() -> None:
    c = ctx(budget=RunBudget(deadline_s=0.05))
    assert c.active
    time.sleep(0.08)
    assert not c.active
    with pytest.raises(DeadlineExceeded):
        c.ensure_active()


def test_cancellation_is_thread_safe_and_fires_callbacks_once() -> None:
    cancel = RunCancellation()
    fired: list[int] = []
    cancel.on_cancel(lambda: fired.append(1))
    threads = [threading.Thread(target=cancel.cancel, args=("user",)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cancel.cancelled and fired == [1] and cancel.reason == "user"
    late: list[int] = []
    cancel.on_cancel(lambda: late.append(1))
    assert late == [1]
    c = ctx(cancellation=cancel)
    with pytest.raises(RunCancelled):
        c.ensure_active()


def test_progress_stalls_after_two_steps_without_evidence() -> None:
    c = ctx()
    for _ in range(2):
        c.progress.begin_step()
        c.progress.end_step(had_calls=True)
    assert c.progress.stalled
    c.progress.begin_step()
    c.progress.record_evidence()
    c.progress.end_step(had_calls=True)
    assert not c.progress.stalled


def test_settings_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOTPROOF_MAX_TOOL_CALLS", "lots")
    with pytest.raises(ConfigError, match="ROOTPROOF_MAX_TOOL_CALLS"):
        load_settings()


def test_settings_unknown_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOTPROOF_MAX_TOOLCALLS", "3")
    with pytest.raises(ConfigError, match="ROOTPROOF_MAX_TOOLCALLS: unknown setting"):
        load_settings()


def test_settings_file_and_env(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    p = Path(str(tmp_path)) / "rp.toml"
    p.write_text('[rootproof]\nmax_tool_calls = 7\ndeadline_s = 30\n')
    monkeypatch.setenv("ROOTPROOF_DEADLINE_S", "45")
    s = load_settings(p)
    assert s.max_tool_calls == 7 and s.deadline_s == 45
    p.write_text("[rootproof]\nmax_tool_calls = 0\n")
    with pytest.raises(ConfigError, match=r"rp.toml key max_tool_calls"):
        load_settings(p)
