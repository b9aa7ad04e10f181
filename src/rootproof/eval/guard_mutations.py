"""Guard benchmark, part 2: the mutations, one function per kind, each with its expected result."""

from __future__ import annotations

import copy
import dataclasses
import random
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from rootproof.agent.draft import MAX_CLAIMS
from rootproof.boundary.provenance import record_key, untrusted_spans
from rootproof.boundary.store import (
    CanonicalInvocation,
    CanonicalStore,
    InMemoryCanonicalStore,
)
from rootproof.eval.guard_sources import (
    _INJECTIONS,
    _INVENTED_CAUSES,
    _PARAPHRASES,
    _SERVICE_RE,
    _WORD_SWAPS,
    BenchCase,
    Draft,
    RecordedRun,
    _cite,
    _knowledge_refs,
    _message_part,
    _no_evidence_refs,
    _positive_refs,
    choose_excerpt,
)
from rootproof.evidence_sources import names_component, observed_components
from rootproof.guard.entities import ABOUT_TYPES, named, ref_entities
from rootproof.kb.cards import Card, Hypothesis
from rootproof.tools.base import TOOLS
from rootproof.tools.refs import NO_EVIDENCE_PATH, EvidenceRef, normalize_text


@dataclass(kw_only=True)
class _Ctx:
    runs: list[RecordedRun]
    store: InMemoryCanonicalStore
    rng: random.Random
    entities: dict[str, set[str]] = field(default_factory=dict)
    cards: dict[str, Card] = field(default_factory=dict)
    """The card catalogue the guard gets (for ROOT_CAUSE_NOT_DISCRIMINATED)."""


Mutator = Callable[[BenchCase, _Ctx], tuple[Draft, str | None, CanonicalStore | None] | None]


def _citations(
    d: Draft, *, kinds: tuple[str, ...] = ("finding", "root_cause", "negative_observation")
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(c, cit) for c in d["claims"] if c["kind"] in kinds for cit in c["citations"]]


def _ref_of(store: CanonicalStore, cit: dict[str, Any]) -> tuple[CanonicalInvocation, EvidenceRef] | None:
    inv = store.get(cit["invocation_id"])
    if inv is None:
        return None
    ref = inv.ref(cit["raw_path"])
    return (inv, ref) if ref is not None else None


def _pick_citation(
    d: Draft, ctx: _Ctx, ok: Callable[[dict[str, Any], dict[str, Any]], bool] = lambda c, t: True
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    cands = [(c, t) for c, t in _citations(d) if ok(c, t)]
    return ctx.rng.choice(cands) if cands else None


def _m_fabricated(case: BenchCase, ctx: _Ctx) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    d = copy.deepcopy(case.draft)
    picked = _pick_citation(d, ctx)
    if picked is None:
        return None
    new = "inv-" + "".join(ctx.rng.choice("0123456789abcdef") for _ in range(12))
    if ctx.store.get(new) is not None:
        return None
    picked[1]["invocation_id"] = new
    return d, picked[0]["id"], None


def _m_foreign(case: BenchCase, ctx: _Ctx) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    d = copy.deepcopy(case.draft)
    picked = _pick_citation(d, ctx)
    if picked is None:
        return None
    cit = picked[1]
    others = [r for r in ctx.runs if r.run_id != case.run.run_id]
    # Prefer the same scenario in the other language: the same tool, path and excerpt may verify there.
    same = [r for r in others if r.scenario_id == case.run.scenario_id] or others
    invs = [i for r in same for i in r.ready() if i.tool_name == cit["tool_name"]] or [
        i for r in others for i in r.ready()
    ]
    if not invs:
        return None
    cit["invocation_id"] = ctx.rng.choice(invs).invocation_id
    return d, picked[0]["id"], None


def _m_wrong_tool(case: BenchCase, ctx: _Ctx) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    d = copy.deepcopy(case.draft)
    picked = _pick_citation(d, ctx)
    if picked is None:
        return None
    picked[1]["tool_name"] = ctx.rng.choice(sorted(t for t in TOOLS if t != picked[1]["tool_name"]))
    return d, picked[0]["id"], None


def _m_path_not_in_refs(case: BenchCase, ctx: _Ctx) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    d = copy.deepcopy(case.draft)
    picked = _pick_citation(d, ctx, lambda c, t: t["raw_path"] != NO_EVIDENCE_PATH)
    if picked is None:
        return None
    cit = picked[1]
    inv = ctx.store.get(cit["invocation_id"])
    assert inv is not None
    m = re.fullmatch(r"(.*)\[(\d+)\]", cit["raw_path"])
    new = (
        f"{m.group(1)}[{len(inv.evidence_refs) + ctx.rng.randint(0, 50)}]"
        if m
        else cit["raw_path"] + ctx.rng.choice(["_total", "_max", "2"])
    )
    if inv.ref(new) is not None:
        return None
    cit["raw_path"] = new
    return d, picked[0]["id"], None


def _copy_run_store(run: RecordedRun) -> InMemoryCanonicalStore:
    out = InMemoryCanonicalStore()
    for inv in run.invocations:
        out.put(copy.deepcopy(inv))
    return out


def _m_path_unresolved(case: BenchCase, ctx: _Ctx) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    d = copy.deepcopy(case.draft)
    picked = _pick_citation(d, ctx, lambda c, t: t["raw_path"] != NO_EVIDENCE_PATH)
    if picked is None:
        return None
    claim, cit = picked
    store = _copy_run_store(case.run)
    inv = store.get(cit["invocation_id"])
    assert inv is not None
    ref = inv.ref(cit["raw_path"])
    assert ref is not None
    if ctx.rng.random() < 0.5:
        # A recorded ref whose path resolves nowhere in the canonical result.
        m = re.fullmatch(r"(.*)\[(\d+)\]", ref.raw_path)
        path = f"{m.group(1)}[{10_000 + ctx.rng.randint(0, 999)}]" if m else ref.raw_path + "_shadow"
        inv.evidence_refs.append(dataclasses.replace(ref, raw_path=path))
        cit["raw_path"] = path
    else:
        # A recorded ref whose text no longer recomputes from the canonical result.
        extra = ctx.rng.choice([" (retry 3)", " [tampered]", " upstream=10.9.9.9"])
        inv.evidence_refs = [
            dataclasses.replace(r, text=r.text + extra) if r.raw_path == ref.raw_path else r
            for r in inv.evidence_refs
        ]
        old = cit["excerpt"]
        cit["excerpt"] = (ref.text + extra).strip()[-min(len(ref.text) + len(extra), 160) :].strip()
        claim["text"] = claim["text"].replace(old, cit["excerpt"])
    return d, claim["id"], store


def _replace_in_claim(claim: dict[str, Any], old: str, new: str) -> None:
    claim["text"] = claim["text"].replace(old, new)


def _excerpt_mutation(fn: Callable[[str, random.Random], str | None]) -> Mutator:
    def mutate(case: BenchCase, ctx: _Ctx) -> tuple[Draft, str | None, CanonicalStore | None] | None:
        d = copy.deepcopy(case.draft)
        cands = _citations(d)
        ctx.rng.shuffle(cands)
        for claim, cit in cands:
            found = _ref_of(ctx.store, cit)
            if found is None:
                continue
            for _ in range(6):
                new = fn(cit["excerpt"], ctx.rng)
                if new and new != cit["excerpt"] and normalize_text(new) not in normalize_text(found[1].text):
                    _replace_in_claim(claim, cit["excerpt"], new)
                    cit["excerpt"] = new
                    return d, claim["id"], None
        return None

    return mutate


def _digit_changed(ex: str, rng: random.Random) -> str | None:
    pos = [i for i, ch in enumerate(ex) if ch.isdigit()]
    if not pos:
        return None
    i = rng.choice(pos)
    return ex[:i] + rng.choice([d for d in "0123456789" if d != ex[i]]) + ex[i + 1 :]


def _word_changed(ex: str, rng: random.Random) -> str | None:
    words = list(re.finditer(r"[A-Za-z]{4,}", ex))
    if not words:
        return None
    m = rng.choice(words)
    w = m.group(0)
    repl = _WORD_SWAPS.get(w.lower()) or rng.choice(["healthy", "normal", "primary", "stable", "cached"])
    if w.isupper():
        repl = repl.upper()
    elif w[0].isupper():
        repl = repl.capitalize()
    return ex[: m.start()] + repl + ex[m.end() :]


_NEG_WORD = re.compile(r"\b(?:not|no|never)\s+", re.I)
_VERB = re.compile(r"\b(is|was|are|were|has|had|can|could|did|does|will)\b\s+", re.I)


def _negation_flipped(ex: str, rng: random.Random) -> str | None:
    m = _NEG_WORD.search(ex)
    if m:
        return ex[: m.start()] + ex[m.end() :]
    m = _VERB.search(ex)
    if m:
        return ex[: m.end()] + "not " + ex[m.end() :]
    words = list(re.finditer(r"\b[A-Za-z]{4,}\b", ex))
    if not words:
        return None
    w = rng.choice(words)
    return ex[: w.start()] + "no " + ex[w.start() :]


def _paraphrased(ex: str, rng: random.Random) -> str | None:
    out = ex
    for pat, repl in rng.sample(_PARAPHRASES, len(_PARAPHRASES)):
        out = pat.sub(repl, out)
        if out != ex:
            return out
    tokens = ex.split()
    if len(tokens) >= 3:
        k = rng.randint(1, len(tokens) - 1)
        return " ".join(tokens[k:] + tokens[:k])
    return None


def _m_negative_cites_positive(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    d = copy.deepcopy(case.draft)
    findings = [c for c in d["claims"] if c["kind"] == "finding" and c["citations"]]
    if not findings:
        return None
    claim = ctx.rng.choice(findings)
    claim["kind"] = "negative_observation"
    claim["text"] = ("查询没有匹配：" if case.language == "zh" else "The query found no match: ") + claim[
        "citations"
    ][0]["excerpt"]
    return d, claim["id"], None


def _m_positive_cites_no_evidence(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    d = copy.deepcopy(case.draft)
    negatives = _no_evidence_refs(case.run)
    findings = [c for c in d["claims"] if c["kind"] == "finding"]
    if not negatives or not findings:
        return None
    claim = ctx.rng.choice(findings)
    inv, ref = ctx.rng.choice(negatives)
    ex = choose_excerpt(inv, ref, ctx.rng)
    claim["citations"] = [_cite(inv, ref, ex)]
    claim["text"] = f"证据显示：“{ex}”" if case.language == "zh" else f'The evidence shows "{ex}"'
    return d, claim["id"], None


def _m_claim_without_citation(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    d = copy.deepcopy(case.draft)
    cited = [c for c in d["claims"] if c["citations"]]
    if not cited:
        return None
    claim = ctx.rng.choice(cited)
    claim["citations"] = []
    return d, claim["id"], None


def _set_root_cause(d: Draft, claim: dict[str, Any], component: str, mechanism: str) -> None:
    for c in d["claims"]:
        if c["kind"] == "root_cause":
            c["kind"] = "finding"
    d["claims"].append(claim)
    d["root_cause"] = {
        "component": component,
        "mechanism": mechanism,
        "culprit": "",
        "claim_ids": [claim["id"]],
    }
    d["hypotheses"] = [
        {
            "statement": d["summary"],
            "component": component,
            "mechanism": mechanism,
            "status": "confirmed",
            "claim_ids": [claim["id"]],
        }
    ]


def _next_id(d: Draft) -> str:
    return f"c{len(d['claims']) + 1}"


def _m_root_cause_knowledge_only(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    knowledge = _knowledge_refs(case.run)
    if not knowledge or case.run.mock:
        return None
    d = copy.deepcopy(case.draft)
    if len(d["claims"]) >= 12:
        return None
    inv, ref = ctx.rng.choice(knowledge)
    ex = choose_excerpt(inv, ref, ctx.rng)
    claim: dict[str, Any] = {
        "id": _next_id(d),
        "text": ("根因：“{ex}”" if case.language == "zh" else 'Root cause: "{ex}"').format(ex=ex),
        "kind": "root_cause",
        "citations": [_cite(inv, ref, ex)],
    }
    rc = d.get("root_cause") or {"component": "application", "mechanism": "connection_exhaustion"}
    _set_root_cause(d, claim, rc["component"], rc["mechanism"])
    return d, claim["id"], None


def _m_root_cause_mock_only(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    if not case.run.mock:
        return None
    mocks = [(i, r) for i, r in _positive_refs(case.run) if r.data_source == "mock"]
    d = copy.deepcopy(case.draft)
    if not mocks or len(d["claims"]) >= 12:
        return None
    inv, ref = ctx.rng.choice(mocks)
    ex = choose_excerpt(inv, ref, ctx.rng)
    claim: dict[str, Any] = {
        "id": _next_id(d),
        "text": ("根因：“{ex}”" if case.language == "zh" else 'Root cause: "{ex}"').format(ex=ex),
        "kind": "root_cause",
        "citations": [_cite(inv, ref, ex)],
    }
    planner = case.run.planner_draft
    rc = planner.root_cause if planner is not None and planner.root_cause is not None else None
    _set_root_cause(
        d, claim, rc.component if rc else "connection_pool", rc.mechanism if rc else "connection_exhaustion"
    )
    return d, claim["id"], None


def _m_injected(case: BenchCase, ctx: _Ctx) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    flagged = [
        (inv, r)
        for inv in case.run.ready()
        for r in inv.evidence_refs
        if r.instruction_like and r.data_source != "knowledge"
    ]
    d = copy.deepcopy(case.draft)
    if not flagged or len(d["claims"]) >= 12:
        return None
    inv, ref = ctx.rng.choice(flagged)
    msg = _message_part(inv, ref)
    label = next(((c, m) for t, c, m in _INJECTIONS if t in msg), ("application", "bad_config_rollout"))
    ex = msg.strip()
    claim: dict[str, Any] = {
        "id": _next_id(d),
        "text": ("根因：“{ex}”" if case.language == "zh" else 'Root cause: "{ex}"').format(ex=ex),
        "kind": "root_cause",
        "citations": [_cite(inv, ref, ex)],
    }
    _set_root_cause(d, claim, label[0], label[1])
    return d, claim["id"], None


def _premise(claim: dict[str, Any]) -> str:
    return "\n".join(c["excerpt"] for c in claim["citations"])


def _claim_mutation(
    fn: Callable[[dict[str, Any], BenchCase, _Ctx], str | None],
    kinds: tuple[str, ...] = ("finding", "root_cause"),
) -> Mutator:
    def mutate(case: BenchCase, ctx: _Ctx) -> tuple[Draft, str | None, CanonicalStore | None] | None:
        d = copy.deepcopy(case.draft)
        claims = [c for c in d["claims"] if c["kind"] in kinds and c["citations"]]
        ctx.rng.shuffle(claims)
        for claim in claims:
            new = fn(claim, case, ctx)
            if new and new != claim["text"]:
                claim["text"] = new
                return d, claim["id"], None
        return None

    return mutate


_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:\.\d+)?")


def _number_changed(claim: dict[str, Any], case: BenchCase, ctx: _Ctx) -> str | None:
    text: str = claim["text"]
    prem = _premise(claim)
    nums = list(_NUMBER.finditer(text))
    if not nums:
        return None
    present = set(_NUMBER.findall(prem))
    m = ctx.rng.choice(nums)
    old = m.group(0)
    for _ in range(20):
        if "." in old:
            new = f"{float(old) * ctx.rng.choice([2, 3, 10]) + 1:.{len(old.split('.')[1])}f}"
        else:
            new = str(int(old) + ctx.rng.choice([1, 7, 13, 100, 999]))
        if new not in present and new not in prem:
            return text[: m.start()] + new + text[m.end() :]
    return None


def _run_entities(run: RecordedRun) -> set[str]:
    out: set[str] = set()
    for inv in run.ready():
        if inv.tool_name == "lookup_knowledge" or inv.result is None:
            continue
        for e in inv.result.get("entries") or []:
            if isinstance(e, dict) and isinstance(e.get("service"), str):
                out.add(e["service"])
        for r in inv.evidence_refs:
            out.update(
                m for m in _SERVICE_RE.findall(r.text) if any(ch.isalpha() for ch in m) and len(m) >= 6
            )
    return out


def _entity_swapped(claim: dict[str, Any], case: BenchCase, ctx: _Ctx) -> str | None:
    own = ctx.entities.setdefault(case.run.run_id, _run_entities(case.run))
    text: str = claim["text"]
    prem = _premise(claim).casefold()
    present = sorted(e for e in own if e in text)
    if not present:
        return None
    old = ctx.rng.choice(present)
    foreign = sorted(
        {
            e
            for r in ctx.runs
            if r.scenario_id != case.run.scenario_id
            for e in ctx.entities.setdefault(r.run_id, _run_entities(r))
        }
        - own
    )
    foreign = [e for e in foreign if e.casefold() not in prem]
    if not foreign:
        return None
    return text.replace(old, ctx.rng.choice(foreign))


def _claim_negated(claim: dict[str, Any], case: BenchCase, ctx: _Ctx) -> str | None:
    text: str = claim["text"]
    if re.search(r"[\u4e00-\u9fff]", text):
        return ctx.rng.choice(["并非如此：", "没有发生：", "不存在："]) + text
    m = _NEG_WORD.search(text)
    if m and ctx.rng.random() < 0.5:
        return text[: m.start()] + text[m.end() :]
    return (
        ctx.rng.choice(["It is not true that ", "There was no sign that ", "Never observed: "])
        + text[0].lower()
        + text[1:]
    )


def _cause_invented(claim: dict[str, Any], case: BenchCase, ctx: _Ctx) -> str | None:
    allowed = set()
    if case.draft.get("root_cause"):
        allowed.add(case.draft["root_cause"]["mechanism"])
    allowed |= {c["mechanism"] for c in case.draft.get("contributing_causes") or []}
    allowed |= {h["mechanism"] for h in case.draft.get("hypotheses") or []}
    prem = _premise(claim).casefold()
    causes = [c for c in _INVENTED_CAUSES if c[0] not in allowed and c[0].split("_")[0] not in prem]
    if not causes:
        return None
    _, en, zh = ctx.rng.choice(causes)
    text: str = claim["text"]
    return text + ("，" + zh if case.language == "zh" else " " + en)


def _kind_of(inv: CanonicalInvocation) -> str | None:
    k = inv.arguments.get("kind") if isinstance(inv.arguments, dict) else None
    return str(k) if k else None


def _countable_refs(run: RecordedRun) -> list[tuple[CanonicalInvocation, EvidenceRef]]:
    """Runtime refs the new root-cause rules count: not mock, knowledge, instruction-like or $.no_evidence."""
    return [(i, r) for i, r in _positive_refs(run) if r.data_source != "mock"]


def _outside_excerpt(inv: CanonicalInvocation, ref: EvidenceRef, rng: random.Random) -> str:
    """A verbatim excerpt with letters outside the ref's untrusted spans (a careful agent's quote)."""
    spans = untrusted_spans(inv.tool_name, ref.text)
    for _ in range(8):
        ex = choose_excerpt(inv, ref, rng, headline=True)
        start = ref.text.find(ex)
        if start < 0 or not spans:
            return ex
        if any(ch.isalnum() and not any(s <= start + k < e for s, e in spans) for k, ch in enumerate(ex)):
            return ex
    return ref.text.strip()


def _replace_root_cause(d: Draft, claims: list[dict[str, Any]]) -> None:
    """The root cause (same component and mechanism) now rests only on `claims`."""
    old = set(d["root_cause"]["claim_ids"])
    for c in d["claims"]:
        if c["kind"] == "root_cause":
            c["kind"] = "finding"
    d["claims"] = [c for c in d["claims"] if c["id"] not in old]
    for cl in claims:
        cl["id"] = _fresh_id(d, "m")  # unique: `m{len + 1}` could repeat an id the draft kept
        d["claims"].append(cl)
    d["root_cause"]["claim_ids"] = [c["id"] for c in claims]
    for h in d.get("hypotheses") or []:
        h["claim_ids"] = [cid for cid in h["claim_ids"] if cid not in old]
        if h["status"] == "confirmed":
            h["claim_ids"] = d["root_cause"]["claim_ids"] + h["claim_ids"]


def _m_uncorroborated(case: BenchCase, ctx: _Ctx) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    """The root cause rests on one record: one ref quoted twice, or the same line at another time."""
    if not case.draft.get("root_cause") or case.run.mock:
        return None
    d = copy.deepcopy(case.draft)
    rc = d["root_cause"]
    rc_cits = [
        cit
        for c in d["claims"]
        if c["id"] in rc["claim_ids"] or c["kind"] == "root_cause"
        for cit in c["citations"]
    ]
    found = [(cit, _ref_of(ctx.store, cit)) for cit in rc_cits if cit["raw_path"] != NO_EVIDENCE_PATH]
    runtime = [
        (cit, f)
        for cit, f in found
        if f is not None and f[1].data_source not in ("mock", "knowledge") and not f[1].instruction_like
    ]
    if not runtime:
        return None
    cit, (inv, ref) = ctx.rng.choice(runtime)
    ex = _outside_excerpt(inv, ref, ctx.rng)
    label = f"{rc['component']}/{rc['mechanism']}"
    text = ("根因（{l}）：“{ex}”" if case.language == "zh" else 'Root cause ({l}): "{ex}"').format(
        l=label, ex=ex
    )
    claims: list[dict[str, Any]] = [
        {"id": "", "text": text, "kind": "root_cause", "citations": [_cite(inv, ref, ex)]}
    ]
    if ctx.rng.random() < 0.5:
        # The same record again: the same ref quoted in a second claim.
        again = ("同一条记录：“{ex}”" if case.language == "zh" else 'The same record: "{ex}"').format(ex=ex)
        claims.append({"id": "", "text": again, "kind": "root_cause", "citations": [_cite(inv, ref, ex)]})
    _replace_root_cause(d, claims)
    if len(d["claims"]) > MAX_CLAIMS:
        return None  # no room: the draft would be refused as invalid, not as uncorroborated
    return d, str(claims[0]["id"]), None


_ALTERNATIVES = [
    ("redis", "max_clients_reached", "Redis max clients reached", "Redis 连接数达到上限"),
    ("dns", "dns_resolution_failure", "DNS resolution failure", "DNS 解析失败"),
    ("tls", "certificate_expired", "an expired certificate", "证书过期"),
    ("disk", "disk_full", "a full disk", "磁盘已满"),
    ("network", "network_partition", "a network partition", "网络分区"),
    ("jvm", "gc_pause", "long GC pauses", "GC 停顿"),
    ("postgresql", "row_lock_contention", "PostgreSQL row lock contention", "PostgreSQL 行锁竞争"),
    ("message_queue", "queue_backlog", "a message queue backlog", "消息队列积压"),
    ("mysql", "connection_exhaustion", "MySQL connection exhaustion", "MySQL 连接耗尽"),
    ("kubernetes", "oom_kill", "an OOM kill", "OOM 杀进程"),
]


def _m_ruled_out_untested(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    """An alternative written ruled_out on a ref from a source that cannot observe its component."""
    d = copy.deepcopy(case.draft)
    refs = _countable_refs(case.run)
    if not refs or len(d["claims"]) >= 12:
        return None
    rc = d.get("root_cause") or {}
    for _ in range(10):
        inv, ref = ctx.rng.choice(refs)
        seen = observed_components(inv.tool_name, _kind_of(inv), ref.text)
        alts = [a for a in _ALTERNATIVES if a[0] not in seen and a[0] != rc.get("component")]
        if alts:
            break
    else:
        return None
    comp, mech, en, zh = ctx.rng.choice(alts)
    ex = _outside_excerpt(inv, ref, ctx.rng)
    cid = _next_id(d)
    text = (
        f"排除{zh}：证据指向别处，“{ex}”"
        if case.language == "zh"
        else f'{en} ruled out: the evidence points elsewhere, "{ex}"'
    )
    d["claims"].append({"id": cid, "text": text, "kind": "finding", "citations": [_cite(inv, ref, ex)]})
    d.setdefault("hypotheses", []).append(
        {
            "statement": text[:200],
            "component": comp,
            "mechanism": mech,
            "status": "ruled_out",
            "claim_ids": [cid],
        }
    )
    return d, cid, None


def _proposing(cards: dict[str, Card], comp: str, mech: str) -> list[Hypothesis]:
    return [h for c in cards.values() for h in c.hypotheses if (h.component, h.mechanism) == (comp, mech)]


def _m_not_discriminated(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    """A root cause whose cited refs are all shared symptoms of an alternative its cards name, with
    no discriminating signal: two independent records, one from the component, so only EG-17 can tell."""
    from rootproof.kb.signals import ref_matches

    if case.run.mock or not ctx.cards:
        return None
    refs = _countable_refs(case.run)
    pairs = sorted({(h.component, h.mechanism) for c in ctx.cards.values() for h in c.hypotheses})
    ctx.rng.shuffle(pairs)
    for comp, mech in pairs:
        own = _proposing(ctx.cards, comp, mech)
        alts = sorted({a for h in own for a in h.distinguishes_from} - {f"{comp}/{mech}"})
        if not alts:
            continue
        alt_hyps = [h for a in alts for h in _proposing(ctx.cards, *a.split("/", 1))]
        shared = []
        for inv, ref in refs:
            kind, spans = _kind_of(inv), untrusted_spans(inv.tool_name, ref.text)
            if any(
                ref_matches(s, inv.tool_name, kind, ref.raw_path, ref.text, spans)
                for h in own
                for s in h.signals
                if s.discriminating
            ):
                continue
            if any(
                ref_matches(s, inv.tool_name, kind, ref.raw_path, ref.text, spans)
                for h in alt_hyps
                for s in h.signals
            ):
                shared.append((inv, ref))
        records = {record_key(r.text) for _, r in shared}
        anchor = [
            (i, r)
            for i, r in shared
            if comp in observed_components(i.tool_name, _kind_of(i), r.text)
            or comp in names_component(r.text)
        ]
        if len(records) < 2 or not anchor:
            continue
        first = ctx.rng.choice(anchor)
        second = next(((i, r) for i, r in shared if record_key(r.text) != record_key(first[1].text)), None)
        if second is None:
            continue
        d = copy.deepcopy(case.draft)
        if not d.get("root_cause"):
            d["root_cause"] = {"component": comp, "mechanism": mech, "culprit": "", "claim_ids": []}
        d["root_cause"].update(component=comp, mechanism=mech)
        claims: list[dict[str, Any]] = []
        for inv, ref in (first, second):
            ex = _outside_excerpt(inv, ref, ctx.rng)
            text = ("根因证据：“{ex}”" if case.language == "zh" else 'Root cause evidence: "{ex}"').format(
                ex=ex
            )
            claims.append({"id": "", "text": text, "kind": "root_cause", "citations": [_cite(inv, ref, ex)]})
        d["hypotheses"] = [
            {
                "statement": f"{comp} {mech}".replace("_", " "),
                "component": comp,
                "mechanism": mech,
                "status": "confirmed",
                "claim_ids": [],
            }
        ]
        _replace_root_cause(d, claims)
        return d, str(claims[0]["id"]), None
    return None


# -- contributing causes: each mutation adds one, broken in one way; the root cause stays as published --


def _fresh_id(d: Draft, prefix: str = "k") -> str:
    taken = {c["id"] for c in d["claims"]}
    return next(f"{prefix}{n}" for n in range(1, 100) if f"{prefix}{n}" not in taken)


def _other_cause(
    d: Draft, rng: random.Random, components: Collection[str] | None = None
) -> tuple[str, str, str, str]:
    """A cause (component, mechanism, en, zh) other than the draft's root cause (of `components` when any fits)."""
    rc = d.get("root_cause") or {}
    others = [a for a in _ALTERNATIVES if (a[0], a[1]) != (rc.get("component"), rc.get("mechanism"))]
    fitting = [a for a in others if components and a[0] in components]
    return rng.choice(fitting or others)


def _contributing_text(language: str, cause: tuple[str, str, str, str], ex: str) -> str:
    return (
        f"促成原因（{cause[3]}）：“{ex}”" if language == "zh" else f'Contributing cause ({cause[2]}): "{ex}"'
    )


def _contributing_claim(
    language: str, cause: tuple[str, str, str, str], inv: CanonicalInvocation, ref: EvidenceRef, ex: str
) -> dict[str, Any]:
    """A finding quoting `ex` of `ref` as the evidence of a contributing cause (no id yet)."""
    return {
        "id": "",
        "text": _contributing_text(language, cause, ex),
        "kind": "finding",
        "citations": [_cite(inv, ref, ex)],
    }


def _add_contributing(d: Draft, cause: tuple[str, str, str, str], claims: list[dict[str, Any]]) -> list[str]:
    """Append `claims` (fresh ids) and a contributing cause resting on them; return their ids."""
    ids = []
    for cl in claims:
        cl["id"] = _fresh_id(d)
        d["claims"].append(cl)
        ids.append(cl["id"])
    d.setdefault("contributing_causes", []).append(
        {"component": cause[0], "mechanism": cause[1], "culprit": "", "claim_ids": list(ids)}
    )
    return ids


def _root_cause_refs(d: Draft) -> set[tuple[str, str]]:
    rc = d.get("root_cause") or {}
    return {
        (cit["invocation_id"], cit["raw_path"])
        for c in d["claims"]
        if c["id"] in rc.get("claim_ids", []) or c["kind"] == "root_cause"
        for cit in c["citations"]
    }


def _contributing_base(case: BenchCase, extra_claims: int = 1) -> Draft | None:
    """A copy of a published draft with a root cause and room for the new claims, else None."""
    if not case.draft.get("root_cause") or case.run.mock:
        return None
    if len(case.draft["claims"]) + extra_claims > 12:
        return None
    return copy.deepcopy(case.draft)


def _m_contributing_knowledge_only(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    """A contributing cause citing only a knowledge card."""
    knowledge = _knowledge_refs(case.run)
    d = _contributing_base(case)
    if d is None or not knowledge:
        return None
    inv, ref = ctx.rng.choice(knowledge)
    ex = choose_excerpt(inv, ref, ctx.rng)
    cause = _other_cause(d, ctx.rng)
    claim = _contributing_claim(case.language, cause, inv, ref, ex)
    return d, _add_contributing(d, cause, [claim])[0], None


def _m_contributing_mock_only(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    """A contributing cause citing only a ref the snapshot marks mock (the root cause cites none of them)."""
    d = _contributing_base(case)
    if d is None:
        return None
    taken = _root_cause_refs(d)
    refs = [(i, r) for i, r in _countable_refs(case.run) if (i.invocation_id, r.raw_path) not in taken]
    if not refs:
        return None
    inv, ref = ctx.rng.choice(refs)
    store = _copy_run_store(case.run)
    marked = store.get(inv.invocation_id)
    assert marked is not None
    marked.evidence_refs = [
        dataclasses.replace(r, data_source="mock") if r.raw_path == ref.raw_path else r
        for r in marked.evidence_refs
    ]
    ex = _outside_excerpt(inv, ref, ctx.rng)
    cause = _other_cause(d, ctx.rng, observed_components(inv.tool_name, _kind_of(inv), ref.text))
    claim = _contributing_claim(case.language, cause, inv, ref, ex)
    return d, _add_contributing(d, cause, [claim])[0], store


def _m_contributing_injected(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    """A contributing cause resting only on tool output that tells the reader the root cause."""
    flagged = [
        (inv, r)
        for inv in case.run.ready()
        for r in inv.evidence_refs
        if r.instruction_like and r.data_source != "knowledge"
    ]
    d = _contributing_base(case)
    if d is None or not flagged:
        return None
    inv, ref = ctx.rng.choice(flagged)
    msg = _message_part(inv, ref)
    label = next(((c, m) for t, c, m in _INJECTIONS if t in msg), None)
    rc = d["root_cause"]
    if label is None or label == (rc["component"], rc["mechanism"]):
        cause = _other_cause(d, ctx.rng)
    else:
        cause = next(
            (a for a in _ALTERNATIVES if (a[0], a[1]) == label),
            (*label, label[1].replace("_", " "), label[1]),
        )
    ex = msg.strip()
    claim = _contributing_claim(case.language, cause, inv, ref, ex)
    return d, _add_contributing(d, cause, [claim])[0], None


def _m_contributing_uncorroborated(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    """A contributing cause resting on one record (one ref, perhaps quoted twice), from its own component."""
    refs = _countable_refs(case.run)
    d = _contributing_base(case, extra_claims=2)
    if d is None or not refs:
        return None
    inv, ref = ctx.rng.choice(refs)
    ex = _outside_excerpt(inv, ref, ctx.rng)
    cause = _other_cause(d, ctx.rng, observed_components(inv.tool_name, _kind_of(inv), ref.text))
    claims: list[dict[str, Any]] = [_contributing_claim(case.language, cause, inv, ref, ex)]
    if ctx.rng.random() < 0.5:
        again = ("同一条记录：“{ex}”" if case.language == "zh" else 'The same record: "{ex}"').format(ex=ex)
        claims.append({"id": "", "text": again, "kind": "finding", "citations": [_cite(inv, ref, ex)]})
    return d, _add_contributing(d, cause, claims)[0], None


def _m_contributing_claim_ref_unknown(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    """A contributing cause resting on the root cause's claims and one claim id the draft does not have."""
    d = _contributing_base(case, extra_claims=0)
    if d is None:
        return None
    rc = d["root_cause"]
    cause = _other_cause(d, ctx.rng, {rc["component"]})
    missing = _fresh_id(d, "x")
    d.setdefault("contributing_causes", []).append(
        {
            "component": cause[0],
            "mechanism": cause[1],
            "culprit": "",
            "claim_ids": [*rc["claim_ids"], missing],
        }
    )
    return d, None, None


# -- claims that cite a neighbour (EG-18) ----------------------------------------------------------
def _subject(inv: CanonicalInvocation, ref: EvidenceRef) -> tuple[str, str] | None:
    return ref_entities(inv.tool_name, ref.raw_path, ref.text).subject


def _names(text: str, value: str) -> bool:
    """Whether `value` (a number) occurs in `text` as a whole number."""
    return re.search(r"(?<!\d)" + re.escape(value) + r"(?!\d)", text) is not None


def _other_texts(claim: dict[str, Any], keep: dict[str, Any], ctx: _Ctx) -> list[str]:
    """The texts of the claim's other cited refs."""
    out = []
    for cit in claim["citations"]:
        if cit is keep:
            continue
        found = _ref_of(ctx.store, cit)
        if found is not None:
            out.append(found[1].text)
    return out


def _m_citation_sibling_row(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    """A claim that names a session (or client) by quoting its row now cites a sibling row of the
    same call, another session's; no other ref it cites names the first."""
    d = copy.deepcopy(case.draft)
    options = []
    for claim in d["claims"]:
        if claim["kind"] == "negative_observation":
            continue
        for cit in claim["citations"]:
            found = _ref_of(ctx.store, cit)
            if found is None or not cit["raw_path"].startswith("$.rows["):
                continue
            inv, ref = found
            subj = _subject(inv, ref)
            if subj is None or subj not in named(claim["text"]):
                continue
            if any(_names(t, subj[1]) for t in _other_texts(claim, cit, ctx)):
                continue
            siblings = [
                r
                for r in inv.evidence_refs
                if r.raw_path.startswith("$.rows[") and r.raw_path != ref.raw_path
                and (s2 := _subject(inv, r)) is not None and s2[0] == subj[0] and s2 != subj
                and not _names(claim["text"], s2[1])
            ]
            if siblings:
                options.append((claim, cit, inv, siblings))
    if not options:
        return None
    claim, cit, inv, siblings = ctx.rng.choice(options)
    sib = ctx.rng.choice(siblings)
    cit.update(_cite(inv, sib, choose_excerpt(inv, sib, ctx.rng)))
    return d, str(claim["id"]), None


def _m_citation_unrelated_line(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    """A finding (or a ruled-out alternative) that names a session, transaction, address,
    relation or database by quoting a line now cites a line about something else."""
    d = copy.deepcopy(case.draft)
    lines = [
        (inv, r)
        for inv, r in _countable_refs(case.run)
        if r.raw_path.startswith(("$.lines[", "$.entries[")) and any(k in ABOUT_TYPES for k, _ in named(r.text))
    ]
    options = []
    for claim in d["claims"]:
        if claim["kind"] != "finding":
            continue
        for cit in claim["citations"]:
            found = _ref_of(ctx.store, cit)
            if found is None or not cit["raw_path"].startswith(("$.lines[", "$.entries[")):
                continue
            others = _other_texts(claim, cit, ctx)
            named_here = [
                e for e in named(claim["text"]) & named(found[1].text)
                if e[0] in ABOUT_TYPES and not any(e[1].casefold() in t.casefold() for t in others)
            ]
            if not named_here:
                continue
            unrelated = [
                (inv, r) for inv, r in lines
                if not any(e[1].casefold() in r.text.casefold() for e in named_here)
            ]
            if unrelated:
                options.append((claim, cit, unrelated))
    if not options:
        return None
    claim, cit, unrelated = ctx.rng.choice(options)
    inv, ref = ctx.rng.choice(unrelated)
    cit.update(_cite(inv, ref, choose_excerpt(inv, ref, ctx.rng)))
    return d, str(claim["id"]), None


def _m_culprit_waiter_row(
    case: BenchCase, ctx: _Ctx
) -> tuple[Draft, str | None, CanonicalStore | None] | None:
    """The root cause names a blocking session as its culprit; its claims now cite, instead of
    the blocker's own row, the row of a session waiting for it (which lists the blocker in
    `blocking_pids`)."""
    rc = case.draft.get("root_cause")
    culprit = named((rc or {}).get("culprit") or "")
    if not rc or not culprit:
        return None
    d = copy.deepcopy(case.draft)
    rc = d["root_cause"]
    rc_claims = [c for c in d["claims"] if c["id"] in rc["claim_ids"] or c["kind"] == "root_cause"]
    own = []
    for claim in rc_claims:
        for cit in claim["citations"]:
            found = _ref_of(ctx.store, cit)
            if found is not None and cit["raw_path"].startswith("$.rows["):
                subj = _subject(*found)
                if subj is not None and subj in culprit:
                    own.append((cit, subj))
    if not own:
        return None
    blocker = own[0][1]
    waiters = [
        (inv, r)
        for inv, r in _countable_refs(case.run)
        if r.raw_path.startswith("$.rows[")
        and (s2 := _subject(inv, r)) is not None and s2[0] == blocker[0] and s2 != blocker
        and re.search(r'"blocking_pids":\[[^\]]*(?<!\d)' + re.escape(blocker[1]) + r"(?!\d)", r.text)
    ]
    if not waiters:
        return None
    for cit, subj in own:
        if subj == blocker:
            inv, ref = ctx.rng.choice(waiters)
            cit.update(_cite(inv, ref, choose_excerpt(inv, ref, ctx.rng)))
    return d, None, None


MUTATORS: dict[str, Mutator] = {
    "fabricated_invocation_id": _m_fabricated,
    "foreign_invocation_id": _m_foreign,
    "wrong_tool_name": _m_wrong_tool,
    "path_not_in_refs": _m_path_not_in_refs,
    "path_unresolved": _m_path_unresolved,
    "excerpt_digit_changed": _excerpt_mutation(_digit_changed),
    "excerpt_word_changed": _excerpt_mutation(_word_changed),
    "excerpt_negation_flipped": _excerpt_mutation(_negation_flipped),
    "excerpt_paraphrased": _excerpt_mutation(_paraphrased),
    "negative_cites_positive": _m_negative_cites_positive,
    "positive_cites_no_evidence": _m_positive_cites_no_evidence,
    "claim_without_citation": _m_claim_without_citation,
    "root_cause_knowledge_only": _m_root_cause_knowledge_only,
    "root_cause_mock_only": _m_root_cause_mock_only,
    "injected_instruction": _m_injected,
    "unsupported_number_changed": _claim_mutation(_number_changed),
    "unsupported_entity_swapped": _claim_mutation(_entity_swapped),
    "unsupported_negation_flipped": _claim_mutation(_claim_negated),
    "unsupported_cause_invented": _claim_mutation(_cause_invented),
    "root_cause_uncorroborated": _m_uncorroborated,
    "ruled_out_untested": _m_ruled_out_untested,
    "root_cause_not_discriminated": _m_not_discriminated,
    "contributing_knowledge_only": _m_contributing_knowledge_only,
    "contributing_mock_only": _m_contributing_mock_only,
    "contributing_injected": _m_contributing_injected,
    "contributing_uncorroborated": _m_contributing_uncorroborated,
    "contributing_claim_ref_unknown": _m_contributing_claim_ref_unknown,
    "citation_sibling_row": _m_citation_sibling_row,
    "citation_unrelated_line": _m_citation_unrelated_line,
    "culprit_waiter_row": _m_culprit_waiter_row,
}


# -- the benchmark ------------------------------------------------------------------------------------
