"""The guard benchmark (`rootproof eval guard`): mutate valid drafts from real runs, count what the guards catch.

Valid drafts come from real runs of the built-in scenarios through the harness (trace in
memory, a private canonical store): (a) the offline planner's own drafts, with the scenario's
question and with a question in the other language; (b) scripted paraphrases of each run —
claims quoting verbatim windows of the run's recorded refs with English or Chinese framing,
negative observations citing `$.no_evidence`, and a root cause citing the same runtime refs
as the planner's published one. A valid draft the release pipeline refuses is a false reject.

Every mutation is applied to a published valid draft and has one expected result (docs/evaluation.md
"Guard benchmark"); it is caught only when that code is among the EvidenceGuard's violations
or, for the semantic kinds, when the mutated claim's verdict is UNSUPPORTED. A mutated draft
that `release_draft` would publish is a false publish. Seeded: the same seed gives the same
drafts and figures (timings aside).
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rootproof.boundary.store import (
    CanonicalStore,
)
from rootproof.eval.guard_mutations import (
    MUTATORS,
    _Ctx,
)
from rootproof.eval.guard_sources import (
    DEFAULT_PER_KIND,
    MUTATIONS,
    BenchCase,
    Progress,
    RecordedRun,
    collect_runs,
    paraphrase_draft,
)
from rootproof.guard.release import release_draft
from rootproof.guard.semantic import OfflineJudge, SemanticGuard
from rootproof.kb.cards import Card, load_cards

__all__ = ["MUTATIONS", "BenchCase", "RecordedRun", "guard_command", "run_guard_benchmark"]


def _release(case: BenchCase, store: CanonicalStore, semantic: SemanticGuard, cards: dict[str, Card]) -> None:
    t0 = time.perf_counter()
    case.decision = release_draft(
        case.draft,
        run_id=case.run.run_id,
        store=case.store or store,
        semantic=semantic,
        language=case.language,
        cards=cards,
    )
    case.seconds = time.perf_counter() - t0


def _valid_cases(runs: list[RecordedRun], rng: random.Random, paraphrases: int) -> list[BenchCase]:
    cases: list[BenchCase] = []
    for run in runs:
        d = run.planner_draft
        # The mock run's planner draft is meant to be refused (the seed story), so it is no valid draft.
        if d is not None and not run.mock and not run.injected and d.claims:
            cases.append(
                BenchCase(
                    draft=d.model_dump(mode="json"), run=run, language=run.language, source="offline_planner"
                )
            )
        for n in range(paraphrases):
            lang = ("en", "zh")[n % 2]
            p = paraphrase_draft(run, lang, rng)
            if p is not None:
                cases.append(BenchCase(draft=p, run=run, language=lang, source="scripted_paraphrase"))
    return cases


def run_guard_benchmark(
    *,
    seed: int = 0,
    min_drafts: int = 500,
    progress: Progress | None = None,
    per_kind: int | None = None,
    scenario_ids: list[str] | None = None,
    injected_runs: int = 8,
) -> dict[str, Any]:
    """Run the benchmark; return the JSON summary (docs/evaluation.md)."""
    from rootproof.kb.channels import encode

    rng = random.Random(seed)
    runs, store = collect_runs(progress, scenario_ids=scenario_ids, injected=injected_runs)
    from rootproof.settings import load_settings

    cards_dir = load_settings().cards_dir
    cards = load_cards([cards_dir] if cards_dir else [])  # the catalogue the harness hands the guard
    semantic = SemanticGuard(OfflineJudge(embed=encode))
    encode(["warm-up"])  # load the encoder before timing
    paraphrases = 6
    valid = _valid_cases(runs, rng, paraphrases)
    for case in valid:
        _release(case, store, semantic, cards)
    published = [c for c in valid if c.decision is not None and c.decision.release_outcome == "PUBLISHED"]
    rejected = [c for c in valid if c not in published]
    n_kind = (
        per_kind
        if per_kind is not None
        else max(DEFAULT_PER_KIND, -(-(min_drafts - len(valid)) // len(MUTATIONS)))
    )
    if progress:
        progress(
            f"{len(valid)} valid drafts ({len(rejected)} refused); {n_kind} mutations of each of {len(MUTATIONS)} kinds"
        )
    ctx = _Ctx(runs=runs, store=store, rng=rng, cards=cards)
    mutated: list[BenchCase] = []
    shortfall: dict[str, int] = {}
    for kind, expected in MUTATIONS.items():
        made = 0
        pool = list(published)
        rng.shuffle(pool)
        i = 0
        # Cycle through the published drafts; a draft the kind does not apply to leaves the pool.
        while made < n_kind and pool:
            base = pool[i % len(pool)]
            out = MUTATORS[kind](base, ctx)
            if out is None or out[0] == base.draft:
                pool.remove(base)
                continue
            i += 1
            draft, claim_id, mstore = out
            case = BenchCase(
                draft=draft,
                run=base.run,
                language=base.language,
                source=base.source,
                kind=kind,
                expected=expected,
                claim_id=claim_id,
                store=mstore,
            )
            _release(case, store, semantic, cards)
            mutated.append(case)
            made += 1
        if made < n_kind:
            shortfall[kind] = n_kind - made
    return _summary(runs, valid, rejected, mutated, shortfall, seed)


def _summary(
    runs: list[RecordedRun],
    valid: list[BenchCase],
    rejected: list[BenchCase],
    mutated: list[BenchCase],
    shortfall: dict[str, int],
    seed: int,
) -> dict[str, Any]:
    everything = valid + mutated
    seconds = sum(c.seconds for c in everything)
    by_mutation: dict[str, dict[str, Any]] = {}
    for kind, expected in MUTATIONS.items():
        cases = [c for c in mutated if c.kind == kind]
        missed = [c for c in cases if not c.caught]
        by_mutation[kind] = {"n": len(cases), "caught": len(cases) - len(missed), "expected": expected}
        if expected == "UNSUPPORTED":
            by_mutation[kind]["verdict_reasons"] = dict(sorted(Counter(_reason_of(c) for c in cases).items()))
        if missed:
            by_mutation[kind]["missed_examples"] = [_miss_example(c) for c in missed[:3]]
    by_lang: dict[str, float] = {}
    for lang in ("en", "zh"):
        n = sum(1 for c in valid if c.language == lang)
        by_lang[lang] = round(sum(1 for c in rejected if c.language == lang) / n, 4) if n else 0.0
    sources: dict[str, Any] = {
        "runs": len(runs),
        "scenarios": len({r.scenario_id for r in runs}),
        "poisoned_runs": sum(1 for r in runs if r.injected),
    }
    for src in ("offline_planner", "scripted_paraphrase"):
        cs = [c for c in valid if c.source == src]
        sources[src] = {
            "drafts": len(cs),
            "published": sum(1 for c in cs if c not in rejected),
            "by_language": dict(sorted(Counter(c.language for c in cs).items())),
        }
    false_publishes = [
        c for c in mutated if c.decision is not None and c.decision.release_outcome == "PUBLISHED"
    ]
    summary: dict[str, Any] = {
        "seed": seed,
        "drafts": len(everything),
        "valid_drafts": len(valid),
        "false_publishes": len(false_publishes),
        "false_rejects": len(rejected),
        "false_reject_rate": round(len(rejected) / len(valid), 4) if valid else 0.0,
        "false_reject_rate_by_language": by_lang,
        "by_mutation": by_mutation,
        "drafts_per_second": round(len(everything) / seconds, 1) if seconds else 0.0,
        "sources": sources,
    }
    if rejected:
        summary["false_reject_examples"] = [_reject_example(c) for c in rejected[:5]]
    if false_publishes:
        summary["false_publish_kinds"] = dict(Counter(c.kind for c in false_publishes))
    if shortfall:
        summary["shortfall"] = shortfall
    failed = []
    if summary["drafts"] < 500:
        failed.append("drafts < 500")
    if false_publishes:
        failed.append("false_publishes > 0")
    if summary["false_reject_rate"] > 0.02:
        failed.append("false_reject_rate > 0.02")
    failed += [
        f"{k} caught {v['caught']}/{v['n']}"
        for k, v in by_mutation.items()
        if v["caught"] != v["n"] or v["n"] < 20
    ]
    summary["targets"] = {"met": not failed, "failed": failed}
    return summary


def _reason_of(c: BenchCase) -> str:
    d = c.decision
    if d is None or d.semantic is None:
        return "evidence guard refused: " + ",".join(d.evidence.codes if d else [])
    v = next((v for v in d.semantic.verdicts if v.claim_id == c.claim_id), None)
    return v.reason.split(":")[0].split(" 0.")[0] if v else "no verdict"


def _miss_example(c: BenchCase) -> dict[str, Any]:
    d = c.decision
    assert d is not None
    claim = next((cl for cl in c.draft["claims"] if cl["id"] == c.claim_id), None)
    verdict = next((v for v in (d.semantic.verdicts if d.semantic else []) if v.claim_id == c.claim_id), None)
    return {
        "scenario": c.run.scenario_id,
        "language": c.language,
        "release_outcome": d.release_outcome,
        "codes": d.evidence.codes,
        "claim": claim["text"][:300] if claim else None,
        "premise": [cit["excerpt"][:200] for cit in claim["citations"]] if claim else None,
        "verdict": verdict.reason if verdict else None,
    }


def _reject_example(c: BenchCase) -> dict[str, Any]:
    d = c.decision
    assert d is not None
    bad = [v for v in (d.semantic.verdicts if d.semantic else []) if v.verdict != "SUPPORTED"]
    claims = {cl["id"]: cl for cl in c.draft["claims"]}
    return {
        "scenario": c.run.scenario_id,
        "source": c.source,
        "language": c.language,
        "fallback_type": d.fallback_type,
        "codes": d.evidence.codes,
        "unsupported": [{"claim": claims[v.claim_id]["text"][:300], "reason": v.reason} for v in bad[:3]],
    }


def _print_table(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"guard benchmark: {summary['drafts']} drafts, {summary['valid_drafts']} valid")
    for col in ("mutation", "expected", "caught", "n"):
        table.add_column(col)
    for kind, row in summary["by_mutation"].items():
        style = "" if row["caught"] == row["n"] else "bold red"
        table.add_row(kind, row["expected"], str(row["caught"]), str(row["n"]), style=style)
    con = Console(stderr=True)
    con.print(table)
    con.print(
        f"false publishes {summary['false_publishes']}, false rejects {summary['false_rejects']} "
        f"(rate {summary['false_reject_rate']}, by language {summary['false_reject_rate_by_language']}), "
        f"{summary['drafts_per_second']} drafts/s; targets met: {summary['targets']['met']}"
    )


def guard_command(json_path: Path | None, *, seed: int = 0) -> dict[str, Any]:
    """`rootproof eval guard`: run, print the table on stderr, the JSON to `json_path` or stdout."""
    summary = run_guard_benchmark(seed=seed, progress=lambda m: print(m, file=sys.stderr))
    _print_table(summary)
    text = json.dumps(summary, ensure_ascii=False, indent=2)
    if json_path is not None:
        json_path.write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return summary
