"""Identical inputs give identical runs, whatever ran before in the process or how threads are timed."""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from rootproof.boundary import CircuitBreaker, InMemoryCanonicalStore, ToolBoundary, ToolCallRequest
from rootproof.harness import memory_harness
from rootproof.kb.tracker import RetrievedDocTracker
from rootproof.run import RunBudget, RunContext, RunState, ToolScope
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings
from rootproof.tools.base import BackendResult, LookupKnowledgeArgs

NOW = datetime(2026, 7, 22, 17, 41, tzinfo=UTC)


class OneCardKnowledge:
    """A knowledge backend with one card, de-duplicated per run; lookups of `slow` take a while."""

    def __init__(self, slow: str) -> None:
        self.slow = slow
        self.tracker = RetrievedDocTracker()
        self.order: list[str] = []
        self.lock = threading.Lock()

    def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
        assert isinstance(args, LookupKnowledgeArgs)
        if args.query == self.slow:
            time.sleep(0.3)
        with self.lock:
            self.order.append(args.query)
        fresh = "card-1" not in self.tracker.seen(run_id)
        results = (
            [{"card_id": "card-1", "title": "Card 1", "text": "[card-1] what to check"}] if fresh else []
        )
        self.tracker.record(run_id, (r["card_id"] for r in results))
        result: dict[str, Any] = {"query": args.query, "results": results}
        if not fresh:
            result["deduplicated"] = "only cards already returned in this run"
        return BackendResult(
            result=result,
            data_source="knowledge",
            evidence_status=None if fresh else "DEDUPLICATED",
        )


def test_lookups_in_one_step_run_in_the_order_asked() -> None:
    """Two lookups of one step share the run's de-duplication: the first asked gets the card,
    even when its search is the slower one (before, the faster call took it)."""
    ctx = RunContext(
        session_id="s",
        scope=ToolScope(allowed_tools=frozenset({"lookup_knowledge"})),
        budget=RunBudget(),
        clock=NOW,
    )
    ctx.advance(RunState.RUNNING)
    ctx.progress.begin_step()
    kb = OneCardKnowledge(slow="first question")
    b = ToolBoundary(
        ctx, backends={"knowledge": kb}, store=InMemoryCanonicalStore(), breaker=CircuitBreaker()
    )
    reqs = [
        ToolCallRequest(name="lookup_knowledge", arguments={"query": q}, step_index=0)
        for q in ("first question", "second question")
    ]
    first, second = b.call_many(reqs)
    assert kb.order == ["first question", "second question"]
    assert first.invocation.evidence_status == "EVIDENCE_FOUND"
    assert second.invocation.evidence_status == "DEDUPLICATED"


def _run(store: InMemoryCanonicalStore, scenario: str) -> tuple[list[tuple[int, str, str]], str]:
    """(the tool calls made, in order, with their arguments; the draft with invocation ids
    replaced by the call they name)."""
    h = memory_harness(load_settings(), canonical=store)
    sc = load_scenario(scenario)
    out = h.diagnose(sc.question, scenario=sc)
    invs = store.for_run(out.run_id)
    calls = [
        (i.step_index, i.tool_name, json.dumps(i.arguments, sort_keys=True, ensure_ascii=False)) for i in invs
    ]
    names = {i.invocation_id: f"call-{n}" for n, i in enumerate(invs)}
    assert out.draft is not None
    draft = json.dumps(out.draft.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
    return calls, re.sub(r"inv-[0-9a-f]{12}", lambda m: names.get(m.group(0), "unknown"), draft)


def test_offline_planner_repeats_itself_after_other_runs() -> None:
    """pg-deadlock asks two lookups in one step; its calls and draft are the same on every run
    in the process, before and after another scenario warmed caches and the knowledge base."""
    store = InMemoryCanonicalStore()
    first = _run(store, "pg-deadlock")
    _run(store, "payment-timeout")
    for _ in range(2):
        again = _run(store, "pg-deadlock")
        assert again[0] == first[0]
        assert again[1] == first[1]
