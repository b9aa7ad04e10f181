"""Property: whatever draft is built from a recorded run, PUBLISHED implies every citation verifies.

Drafts are random subsets and perturbations of a real run's citations, claims and excerpts. The
verification here is written apart from the guard: invocation of this run, READY, path among
the recorded refs, the recorded text recomputed from the canonical result (DESIGN.md "Evidence
refs" table), the excerpt contained after NFKC + whitespace normalisation; and every claim has
a SUPPORTED verdict.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rootproof.boundary.store import CanonicalInvocation, InMemoryCanonicalStore, InvocationStatus
from rootproof.guard.release import release_draft
from rootproof.guard.semantic import OfflineJudge, SemanticGuard
from rootproof.kb.channels import encode


@functools.cache
def recorded() -> tuple[InMemoryCanonicalStore, str, str, list[CanonicalInvocation]]:
    """One real offline-planner run of pg-row-lock and one of pg-deadlock (for foreign ids)."""
    from rootproof.harness import memory_harness
    from rootproof.scenarios.loader import load_scenario
    from rootproof.settings import load_settings

    store = InMemoryCanonicalStore()
    h = memory_harness(load_settings(), canonical=store)
    sc = load_scenario("pg-row-lock")
    run = h.diagnose(sc.question, scenario=sc)
    other = h.diagnose(load_scenario("pg-deadlock").question, scenario=load_scenario("pg-deadlock"))
    return store, run.run_id, other.run_id, store.for_run(run.run_id)


@functools.cache
def semantic() -> SemanticGuard:
    return SemanticGuard(OfflineJudge(embed=encode))


def _canon(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _fmt(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return "null" if v is None else _canon(v)


def recompute(tool: str, result: dict[str, Any], path: str) -> str | None:
    """The ref text at `path`, from the DESIGN.md table; None when the path does not resolve."""
    if path == "$.no_evidence":
        return str(result["no_evidence"]) if "no_evidence" in result else None
    m = re.fullmatch(r"\$\.(entries|series|rows|lines|results)\[(\d+)\]", path)
    if m:
        items = result.get(m.group(1))
        i = int(m.group(2))
        if not isinstance(items, list) or i >= len(items):
            return None
        v = items[i]
        if m.group(1) == "entries":
            return f"{v['ts']} {v['level']} {v['service']} [{v['source']}] {v['message']}"
        if m.group(1) == "series":
            labels = v.get("labels") or {}
            lab = "{" + ",".join(f'{k}="{_fmt(labels[k])}"' for k in sorted(labels)) + "}" if labels else ""
            s = v["summary"]
            w = result.get("window") or {}
            stats = " ".join(f"{k}={_fmt(s[k])}" for k in ("first", "last", "min", "max", "delta", "mean"))
            return (
                f"{v['metric']}{lab} {stats} unit={v.get('unit', '')} window={w.get('from')}..{w.get('to')}"
            )
        if m.group(1) == "rows":
            return _canon(v)
        if m.group(1) == "lines":
            return str(v)
        return f"[{v['card_id']}] {v['title']}: {v['text']}"
    m = re.fullmatch(r"\$\.settings\.([A-Za-z0-9_\-]+)", path)
    if m and isinstance(result.get("settings"), dict) and m.group(1) in result["settings"]:
        return f"{m.group(1)} = {_fmt(result['settings'][m.group(1)])}"
    return None


def norm(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip()


@st.composite
def drafts(draw: st.DrawFn) -> dict[str, Any]:
    store, run_id, other_run, invs = recorded()
    ready = [i for i in invs if i.status is InvocationStatus.READY]
    pool = [(i, r) for i in ready for r in i.evidence_refs]
    foreign = [i.invocation_id for i in store.for_run(other_run)]
    claims = []
    for n in range(draw(st.integers(1, 4))):
        cits = []
        for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2, 3]))):
            inv, ref = draw(st.sampled_from(pool))
            tokens = ref.text.split(" ")
            a = draw(st.integers(0, len(tokens) - 1))
            b = draw(st.integers(a + 1, len(tokens)))
            excerpt = " ".join(tokens[a:b])
            if draw(st.integers(0, 9)) == 0:  # an arbitrary character window, often too short or split
                i = draw(st.integers(0, max(0, len(ref.text) - 1)))
                excerpt = ref.text[i : draw(st.integers(i, len(ref.text)))]
            cit = {
                "invocation_id": inv.invocation_id,
                "tool_name": inv.tool_name,
                "raw_path": ref.raw_path,
                "excerpt": excerpt,
            }
            perturb = draw(
                st.sampled_from(["none"] * 12 + ["char", "case", "space", "id", "foreign", "tool", "path"])
            )
            if perturb == "char" and excerpt:
                k = draw(st.integers(0, len(excerpt) - 1))
                cit["excerpt"] = excerpt[:k] + draw(st.sampled_from(["0", "x", " ", "不"])) + excerpt[k + 1 :]
            elif perturb == "case":
                cit["excerpt"] = excerpt.swapcase()
            elif perturb == "space":
                cit["excerpt"] = "  " + excerpt.replace(" ", "\n\t ") + " "
            elif perturb == "id":
                cit["invocation_id"] = "inv-" + draw(st.text("0123456789abcdef", min_size=12, max_size=12))
            elif perturb == "foreign" and foreign:
                cit["invocation_id"] = draw(st.sampled_from(foreign))
            elif perturb == "tool":
                cit["tool_name"] = draw(
                    st.sampled_from(["query_logs", "query_metrics", "inspect_postgres", "lookup_knowledge"])
                )
            elif perturb == "path":
                cit["raw_path"] = draw(
                    st.sampled_from(
                        [
                            "$.entries[0]",
                            "$.rows[1]",
                            "$.series[0]",
                            "$.no_evidence",
                            "$.results[0]",
                            "$.entries[99]",
                        ]
                    )
                )
            cits.append(cit)
        quoted = " and ".join(f'"{c["excerpt"]}"' for c in cits)
        text = draw(
            st.sampled_from(
                [f"Logs show {quoted}"] * 3
                + [
                    f"日志显示：{quoted}",
                    quoted or "All good",
                    "The database is healthy",
                    f"{quoted} caused by a DNS failure",
                ]
            )
        )
        negative = bool(cits) and all(c["raw_path"] == "$.no_evidence" for c in cits)
        kind = "negative_observation" if negative else "finding"
        if draw(st.integers(0, 4)) == 0:
            kind = draw(st.sampled_from(["finding", "root_cause", "negative_observation"]))
        claims.append({"id": f"c{n + 1}", "text": text[:2000], "kind": kind, "citations": cits})
    rc_ids = [c["id"] for c in claims if c["kind"] == "root_cause"]
    root = (
        {"component": "postgresql", "mechanism": "row_lock_contention", "culprit": "", "claim_ids": rc_ids}
        if rc_ids or draw(st.booleans())
        else None
    )
    return {"answer_version": "diagnosis_draft_v1", "summary": "s", "root_cause": root, "claims": claims}


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(draft=drafts())
def test_published_implies_every_citation_verified_and_every_claim_supported(draft: dict[str, Any]) -> None:
    store, run_id, _, _ = recorded()
    decision = release_draft(draft, run_id=run_id, store=store, semantic=semantic(), language="en")
    event(decision.release_outcome)
    if decision.release_outcome != "PUBLISHED":
        assert decision.content["content_type"] == "SAFE_FALLBACK"
        assert decision.content["fallback"]["verified_sources"] == [] or decision.evidence.passed
        return
    for claim in draft["claims"]:
        assert claim["citations"], claim
        for cit in claim["citations"]:
            inv = store.get(cit["invocation_id"])
            assert inv is not None and inv.run_id == run_id
            assert inv.status is InvocationStatus.READY and inv.result is not None
            assert inv.tool_name == cit["tool_name"]
            recorded_ref = next((r for r in inv.evidence_refs if r.raw_path == cit["raw_path"]), None)
            assert recorded_ref is not None
            assert recompute(inv.tool_name, inv.result, cit["raw_path"]) == recorded_ref.text
            assert norm(cit["excerpt"]) and norm(cit["excerpt"]) in norm(recorded_ref.text)
            assert (claim["kind"] == "negative_observation") == (cit["raw_path"] == "$.no_evidence")
    assert decision.semantic is not None
    verdicts = {v.claim_id: v.verdict for v in decision.semantic.verdicts}
    assert verdicts == {c["id"]: "SUPPORTED" for c in draft["claims"]}


def test_the_generator_reaches_published_drafts() -> None:
    """Guard against a vacuous property: a plain verbatim draft from the run does publish."""
    store, run_id, _, invs = recorded()
    inv = next(i for i in invs if i.tool_name == "query_logs" and i.evidence_status == "EVIDENCE_FOUND")
    ref = inv.evidence_refs[0]
    ex = ref.text.split("] ", 1)[1].split("\n")[0]
    draft = {
        "answer_version": "diagnosis_draft_v1",
        "summary": "s",
        "claims": [
            {
                "id": "c1",
                "text": f'Logs show "{ex}"',
                "kind": "finding",
                "citations": [
                    {
                        "invocation_id": inv.invocation_id,
                        "tool_name": "query_logs",
                        "raw_path": ref.raw_path,
                        "excerpt": ex,
                    }
                ],
            }
        ],
    }
    assert (
        release_draft(draft, run_id=run_id, store=store, semantic=semantic(), language="en").release_outcome
        == "PUBLISHED"
    )
