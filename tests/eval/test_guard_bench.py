"""The guard benchmark on a small instance count: every mutation kind caught, no valid draft refused."""

from __future__ import annotations

from typing import Any

import pytest

from rootproof.eval.guard import MUTATIONS, run_guard_benchmark

SCENARIOS = ["pg-row-lock", "pg-deadlock", "payment-timeout"]


@pytest.fixture(scope="module")
def summary() -> dict[str, Any]:
    return run_guard_benchmark(seed=0, per_kind=3, scenario_ids=SCENARIOS, injected_runs=2)


def test_every_mutation_kind_is_caught(summary: dict[str, Any]) -> None:
    rows = summary["by_mutation"]
    assert set(rows) == set(MUTATIONS)
    for kind, row in rows.items():
        assert row["expected"] == MUTATIONS[kind]
        assert row["n"] == 3, f"{kind}: only {row['n']} instances generated"
        assert row["caught"] == row["n"], f"{kind}: {row.get('missed_examples')}"
    assert summary["false_publishes"] == 0


def test_no_valid_draft_is_refused(summary: dict[str, Any]) -> None:
    assert summary["valid_drafts"] > 0
    assert summary["false_rejects"] == 0, summary.get("false_reject_examples")
    assert summary["false_reject_rate_by_language"] == {"en": 0.0, "zh": 0.0}


def test_both_sources_and_languages_contribute(summary: dict[str, Any]) -> None:
    src = summary["sources"]
    assert src["offline_planner"]["published"] > 0
    assert src["scripted_paraphrase"]["published"] > 0
    assert set(src["scripted_paraphrase"]["by_language"]) == {"en", "zh"}
    assert src["poisoned_runs"] == 2
    assert summary["drafts"] == summary["valid_drafts"] + 3 * len(MUTATIONS)


def test_seeded_runs_are_deterministic(summary: dict[str, Any]) -> None:
    again = run_guard_benchmark(seed=0, per_kind=3, scenario_ids=SCENARIOS, injected_runs=2)
    strip = ("drafts_per_second",)
    assert {k: v for k, v in again.items() if k not in strip} == {
        k: v for k, v in summary.items() if k not in strip
    }


def test_the_contributing_kinds_need_the_contributing_cause_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """A guard that checked only the root cause would publish the contributing_* mutations."""
    import rootproof.guard.evidence as evidence

    only_root = evidence._causes
    monkeypatch.setattr(evidence, "_causes", lambda draft: only_root(draft)[:1])
    weak = run_guard_benchmark(seed=0, per_kind=6, scenario_ids=SCENARIOS, injected_runs=2)
    kinds = weak.get("false_publish_kinds") or {}
    assert kinds and all(k.startswith("contributing_") for k in kinds), kinds
