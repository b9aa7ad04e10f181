"""The offline planner: the embedded default model. Deterministic and explainable.

Diagnosis knowledge is data: candidate hypotheses and their signals come from the knowledge
cards that `lookup_knowledge` returned in this run; runtime evidence is read only from the
observations in the conversation. No scenario ids, no ground truth, no per-incident rules.

Steps: (0) look up knowledge and take a broad first look with each allowed runtime tool;
(1..) call only for signals not yet observable, merged per tool and kind, never repeating a
scope, the discriminating signals of the leader and of what tells it apart first (kept in
budget); then write the draft: the best hypothesis becomes the root cause only if it clears a
threshold and a margin over the runner-up and what the EvidenceGuard requires holds (two
independent records, one from the component or a client error naming it, and a signal that
tells it apart from the alternatives its cards name when all its evidence is shared with
them); the others are ruled out (citing evidence from a source able to observe them, and only
once their discriminating signals were looked at) or left open; too little evidence → no root cause, and the draft says what is missing. One record
counts once per hypothesis, by the heaviest signal it matched; text an outsider wrote
(untrusted spans) and text that reads as instructions are never a signal.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from rootproof.agent.draft import DiagnosisDraft
from rootproof.agent.models.base import ModelRequest, ModelTurn, ToolCall, UserMessage
from rootproof.agent.models.evidence_view import (
    LOG_KINDS,
    Hit,
    Observation,
    evaluate_signal,
    near_misses,
    observations_from,
    query_terms,
    ref_spans,
    signal_strings,
    uncovered_metric_names,
)
from rootproof.boundary.provenance import outside_spans, record_key
from rootproof.diagnosis.candidates import shown_by_evidence
from rootproof.diagnosis.findings import entry, explains, symptoms
from rootproof.diagnosis.impact import impact_seen
from rootproof.diagnosis.wording import blocker_culprit, limit_culprit
from rootproof.evidence_sources import from_component, names_component, observes
from rootproof.kb.signals import as_number, norm, ref_matches, row_of
from rootproof.taxonomy import recovery_policy
from rootproof.tools.base import parse_since
from rootproof.tools.refs import parse_log_ref

if TYPE_CHECKING:
    from rootproof.kb import KnowledgeBase
    from rootproof.kb.cards import Hypothesis, Signal

__all__ = ["KnowledgeAnswerer", "OfflinePlanner"]

ROOT_THRESHOLD = 3.0
"""Seen signal weight a hypothesis needs to become the root cause."""
MARGIN = 1.5
"""Seen weight the best hypothesis needs over the runner-up."""
LOOKUP_TOP_K = 3
"""Results per lookup: three chunks fit whole in a 4 KiB observation, so none is omitted unseen."""
ALERT_MARGIN = timedelta(minutes=10)
"""How far before an alert's start its evidence is looked for."""
CONTEXT_WEIGHT = 1.0
"""Signals lighter than this are context: cited when their hypothesis is confirmed, never scored."""
MIN_RECORDS = 2
"""Independent records (texts that differ once timestamps are removed) a root cause needs."""
MAX_CALLS_PER_TOOL = 4
MAX_TOOL_CALLS = 12
MAX_PHRASES = 8
STATE_VALUE_MAX = 40
"""Longest row value read as a state (`idle in transaction`) when looking up what the inspectors showed."""
EXCERPT_MAX = 280
BROAD = {
    "query_logs": {},
    "query_metrics": {"metric": "*"},
    "inspect_postgres": {"kind": "activity"},
    "inspect_redis": {"kind": "info"},
    "inspect_nginx": {"kind": "error_log"},
}
_STOP_CODES = {"SCOPE_SATURATED", "BUDGET_EXHAUSTED", "TOOL_NOT_ALLOWED", "CIRCUIT_OPEN"}
_CARD_ID = re.compile(r"^\[([a-z0-9-]+)\]")
_CULPRIT_NAMES = ("application_name", "client_addr", "client_hostname", "usename", "user", "pid", "statement", "query", "name", "id", "addr", "host")
"""Row fields that name a culprit (a statement, a user, a host, a session), in this order."""
_EXCEPTION = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Exception|Error)\b")

_LABELS_ZH = {
    "row_lock_contention": "行锁争用", "deadlock": "死锁", "connection_exhaustion": "连接耗尽", "pool_leak": "连接池泄漏",
    "slow_query": "慢查询", "replication_lag": "复制延迟", "max_clients_reached": "达到最大客户端数", "memory_eviction": "内存驱逐",
    "upstream_timeout": "上游超时", "gc_pause": "gc 停顿", "oom_kill": "OOM kill", "disk_full": "磁盘满",
    "dns_resolution_failure": "DNS 解析失败", "certificate_expired": "证书过期", "bad_config_rollout": "配置变更",
    "cpu_saturation": "CPU 饱和", "thread_pool_exhaustion": "线程池耗尽", "queue_backlog": "队列积压", "network_partition": "网络分区",
    "failover": "故障切换", "storage_full": "存储空间耗尽", "checkpoint_storm": "检查点风暴", "vacuum_storm": "vacuum 风暴",
}


def _label(component: str, mechanism: str, zh: bool) -> str:
    comp = component.replace("_", " ")
    if zh:
        return f"{comp} {_LABELS_ZH.get(mechanism, mechanism.replace('_', ' '))}"
    return f"{comp} {mechanism.replace('_', ' ')}"


def _schema_enum(schema: dict[str, Any], name: str) -> tuple[str, ...] | None:
    """The values a tool's argument `name` may take, in order, from its JSON schema (None: no such enum)."""
    prop = (schema.get("properties") or {}).get(name)
    if not isinstance(prop, dict):
        return None
    if "$ref" in prop:
        ref = str(prop["$ref"]).rsplit("/", 1)[-1]
        prop = (schema.get("$defs") or {}).get(ref, {})
    enum = prop.get("enum")
    return tuple(str(v) for v in enum) if isinstance(enum, list) else None


def _schema_kinds(schema: dict[str, Any]) -> frozenset[str] | None:
    """The values a tool's `kind` argument may take (None: no such enum)."""
    enum = _schema_enum(schema, "kind")
    return None if enum is None else frozenset(enum)


def _question(request: ModelRequest) -> str:
    for m in request.messages:
        if isinstance(m, UserMessage):
            return m.content
    return ""


def _is_zh(text: str) -> bool:
    return sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff") >= 2


def _alert(question: str) -> dict[str, Any]:
    """The primary alert of an alert-mode request; related alerts are context and never steer the plan."""
    marker = "Alert payload (data):\n"
    if marker in question:
        try:
            data = json.loads(question.split(marker, 1)[1])
        except json.JSONDecodeError:
            return {}
        primary = data.get("primary_alert") if isinstance(data, dict) else None
        return primary if isinstance(primary, dict) else {}
    return {}


def _since_alert_start(alert: dict[str, Any], observations: list[Observation]) -> dict[str, Any] | None:
    """Arguments of a log query reaching back to the alert's start (minus a margin), when the
    first look's window began after it; None when the first look already covered it."""
    try:
        start = datetime.fromisoformat(str(alert.get("starts_at", "")).replace("Z", "+00:00"))
    except ValueError:
        return None
    first = next((o for o in observations if o.tool == "query_logs" and o.step == 0 and o.ready and o.window), None)
    if first is None or first.window is None:
        return None
    try:
        lo = datetime.fromisoformat(first.window["from"].replace("Z", "+00:00"))
        hi = datetime.fromisoformat(first.window["to"].replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return None
    begin = start - ALERT_MARGIN
    if begin >= lo:
        return None
    minutes = min(int((hi - begin).total_seconds() // 60) + 1, 7 * 24 * 60)
    return {**first.args, "since": f"{minutes}m"}


def _widest_since(signals: list[Signal]) -> str | None:
    """The widest `since` the signals of one call ask for (None: the tool's own window)."""
    asked = [s.since for s in signals if s.since is not None]
    return max(asked, key=parse_since) if asked else None


def _excerpt(text: str, anchors: list[str], spans: tuple[tuple[int, int], ...] = ()) -> str:
    """A verbatim piece of `text` (whole when short), centred on the first anchor found outside
    the untrusted `spans`."""
    if len(text) <= EXCERPT_MAX:
        return text
    masked = text
    for start, end in spans:
        masked = masked[:start] + "\x00" * max(0, min(end, len(masked)) - start) + masked[end:]
    low = masked.casefold()
    pos = -1
    for a in anchors:
        pos = low.find(a.casefold())
        if pos >= 0:
            break
    start = max(0, pos - 80) if pos >= 0 else 0
    piece = text[start : start + EXCERPT_MAX]
    if start > 0 and " " in piece[:40]:
        piece = piece[piece.index(" ") + 1 :]
    if start + EXCERPT_MAX < len(text) and " " in piece[-40:]:
        piece = piece[: piece.rindex(" ")]
    return piece.strip()


def _record(h: Hit) -> tuple[str, str]:
    """Which record a hit is: its tool and its text without timestamps."""
    return (h.tool, record_key(h.text))


def _distinct_first(hits: list[Hit]) -> list[Hit]:
    """`hits` with one hit per record first, then the repeats (so the first few cited refs are
    independent records)."""
    seen: set[tuple[str, str]] = set()
    lead: list[Hit] = []
    rest: list[Hit] = []
    for h in hits:
        (rest if _record(h) in seen else lead).append(h)
        seen.add(_record(h))
    return lead + rest


def _finding_weights(key: str, observations: list[Observation]) -> list[tuple[str, set[tuple[str, str]], float]]:
    """(finding name, its refs as records, its vocabulary weight) of the findings that support
    `key`, one per finding name (the first seen), weight above 0."""
    out: dict[str, tuple[str, set[tuple[str, str]], float]] = {}
    for o in observations:
        if not o.ready:
            continue
        for f in o.findings:
            code = str(f.get("finding", ""))
            weight = float(entry(code).get("weight") or 0)
            if weight > 0 and key in (f.get("supports") or []) and code not in out:
                texts = {str(r.get("raw_path")): str(r.get("text", "")) for r in o.refs}
                hits = [Hit(invocation_id=o.invocation_id, tool=o.tool, raw_path=str(p), text=texts[str(p)], data_source=o.data_source, kind=o.kind) for p in f.get("refs") or [] if str(p) in texts]
                out[code] = (code, {_record(h) for h in hits}, weight)
    return list(out.values())


def _from_component(component: str, h: Hit) -> bool:
    """Whether the ref comes from a source that observes `component`, or is a client error naming it."""
    return from_component(component, h.tool, h.kind, h.text, spans=h.spans or None)


@dataclass(kw_only=True)
class Candidate:
    """One hypothesis under test, merged over the cards that propose it."""

    component: str
    mechanism: str
    rank: int
    cards: list[str] = field(default_factory=list)
    signals: list[Signal] = field(default_factory=list)
    distinguishes_from: list[str] = field(default_factory=list)
    recovery: list[str] = field(default_factory=list)
    explains: list[str] = field(default_factory=list)
    seen: float = 0.0
    own: float = 0.0
    """Seen weight of its own signals, before the effects it explains are added."""
    checked: float = 0.0
    hits: list[tuple[Signal, list[Hit]]] = field(default_factory=list)
    """Each counted signal with the refs it newly brought (a record counts once, by the heaviest signal)."""
    unobservable: list[Signal] = field(default_factory=list)
    records: set[tuple[str, str]] = field(default_factory=set)
    """(tool, timestamp-free text) of every record its scored signals matched."""
    against: list[tuple[Signal, list[Hit]]] = field(default_factory=list)
    """Each seen `rules_out` signal with its refs: evidence against the hypothesis."""
    culprit_hits: list[tuple[Signal, list[Hit]]] = field(default_factory=list)
    """Each seen `culprit` signal with all its refs (whatever heavier signal counted them)."""
    near_misses: list[tuple[Signal, list[Hit]]] = field(default_factory=list)
    """Each metric or field signal that was looked at and did not hold, with the series or
    fields it tested (what was normal)."""
    finding_codes: list[str] = field(default_factory=list)
    """The analyzers' findings whose weight it counts (one per finding name)."""
    finding_weight: float = 0.0
    """The heaviest of those findings' weights."""

    @property
    def key(self) -> str:
        """`component/mechanism`."""
        return f"{self.component}/{self.mechanism}"

    @property
    def strong(self) -> bool:
        """At least one seen signal, or analyzer finding, of weight ≥ 2."""
        return self.finding_weight >= 2 or any(s.weight >= 2 for s, _ in self.hits)

    def top_hits(self, n: int) -> list[Hit]:
        """The hits of the heaviest signals, at most `n`, distinct refs."""
        out: list[Hit] = []
        for _, hits in sorted(self.hits, key=lambda sh: -sh[0].weight):
            for h in hits[:1]:
                if all((h.invocation_id, h.raw_path) != (o.invocation_id, o.raw_path) for o in out):
                    out.append(h)
        return out[:n]


class OfflinePlanner:
    """Implements the `Model` protocol without a language model."""

    name = "offline-planner-v1"

    def __init__(self, knowledge: KnowledgeBase) -> None:
        self.kb = knowledge
        self._kinds: dict[str, frozenset[str]] = {}
        self._targets: dict[str, tuple[str, ...]] = {}
        self._offered: set[str] = set()
        self._impact: str | None = None
        """What shows impact in the window (`diagnosis.impact`), set by `step`."""
        self._explained: set[str] = set()
        """Symptoms the verdict found explained by the root cause it chose (set by `_verdict`)."""
        self._max_calls = MAX_TOOL_CALLS
        self._per_tool = MAX_CALLS_PER_TOOL

    def _asks(self, s: Signal, offered: set[str]) -> bool:
        """Whether a call can answer the signal: its tool is offered, with its kind (a tool's
        schema lists the kinds it has; a source without load breakdowns has no such kind)."""
        if s.tool not in offered:
            return False
        kinds = self._kinds.get(s.tool)
        return s.kind is None or kinds is None or s.kind in kinds

    # -- the protocol ------------------------------------------------------------------------
    def step(self, request: ModelRequest) -> ModelTurn:
        question = _question(request)
        observations = observations_from(request.messages)
        offered = {t.name for t in request.tools}
        self._offered = offered
        # The run's budget when the loop gives one (a scenario's or the settings'), else the defaults.
        self._max_calls = request.tool_calls or MAX_TOOL_CALLS
        self._per_tool = request.calls_per_tool or MAX_CALLS_PER_TOOL
        self._kinds = {t.name: k for t in request.tools if (k := _schema_kinds(t.parameters)) is not None}
        # A system with several targets (two Redis of one targets file) asks for one by name:
        # every one of them is looked at, and each has its own calls.
        self._targets = {t.name: n for t in request.tools if (n := _schema_enum(t.parameters, "target"))}
        if not observations and request.mode == "gather":
            return ModelTurn(tool_calls=self._first_look(question, offered, request.step_index))
        candidates = self._candidates(observations)
        self._score(candidates, observations)
        self._impact = impact_seen(observations, bool(_alert(question)))
        if request.mode == "gather":
            calls = self._next_calls(question, candidates, observations, offered, request.step_index)
            if calls:
                return ModelTurn(tool_calls=calls)
        return ModelTurn(draft=self._draft(question, candidates, observations))

    # -- planning --------------------------------------------------------------------------
    def _first_look(self, question: str, offered: set[str], step: int) -> list[ToolCall]:
        alert = _alert(question)
        text = question.split("Alert payload (data):", 1)[0].strip()
        extra = [str(alert.get(k, "")) for k in ("name", "summary") if str(alert.get(k, "")) not in text]
        lookup = " ".join(p for p in (text, *extra) if p).strip() or question[:500]
        calls: list[ToolCall] = []
        if "lookup_knowledge" in offered:
            calls.append(ToolCall(id=f"s{step}-0", name="lookup_knowledge", arguments={"query": lookup[:1000], "top_k": LOOKUP_TOP_K}))
        for tool, args in BROAD.items():
            if tool in offered:
                for target in self._targets.get(tool) or (None,):
                    a = dict(args)
                    if tool == "query_logs" and alert.get("service"):
                        a["service"] = str(alert["service"])
                    if target is not None:
                        a["target"] = target
                    calls.append(ToolCall(id=f"s{step}-{len(calls) + 1}", name=tool, arguments=a))
        return calls

    def _cap(self, tool: str) -> int:
        """Calls a tool may take in this run: its per-tool budget, per target where it has several."""
        return self._per_tool * max(1, len(self._targets.get(tool, ())))

    def _aimed(self, tool: str, args: dict[str, Any], candidates: list[Candidate]) -> list[dict[str, Any]]:
        """`args` for each target the call should ask (one, unnamed, for a tool without targets):
        the targets where a hypothesis with evidence was seen, else every one."""
        names = self._targets.get(tool)
        if not names:
            return [args]
        seen = {h.data_source for c in candidates if c.seen > 0 for _, hs in c.hits for h in hs if h.tool == tool}
        hot = [n for n in names if f"live:{n}" in seen or n in seen]
        return [{**args, "target": n} for n in (hot or names)]

    def _candidates(self, observations: list[Observation]) -> list[Candidate]:
        out: dict[str, Candidate] = {}
        for obs in observations:
            if obs.tool != "lookup_knowledge" or not obs.ready:
                continue
            for ref in obs.refs:
                m = _CARD_ID.match(str(ref.get("text", "")))
                card = self.kb.cards.get(m.group(1)) if m else None
                if card is None:
                    continue
                for h in card.hypotheses:
                    self._merge(out, h, card.id)
        # Then every hypothesis of the catalogue the evidence itself shows: the question's lookup
        # orders the work, it does not decide which hypotheses exist.
        for h, card_id in shown_by_evidence(self.kb.cards, observations, set(out)):
            self._merge(out, h, card_id)
        return list(out.values())

    @staticmethod
    def _merge(out: dict[str, Candidate], h: Hypothesis, card_id: str) -> None:
        key = f"{h.component}/{h.mechanism}"
        c = out.get(key)
        if c is None:
            c = out[key] = Candidate(component=h.component, mechanism=h.mechanism, rank=len(out))
        if card_id not in c.cards:
            c.cards.append(card_id)
        known = {s.model_dump_json() for s in c.signals}
        c.signals.extend(s for s in h.signals if s.model_dump_json() not in known)
        c.distinguishes_from.extend(d for d in h.distinguishes_from if d not in c.distinguishes_from)
        c.recovery.extend(r for r in h.recovery if r not in c.recovery)
        c.explains.extend(e for e in h.explains if e not in c.explains)

    @staticmethod
    def _score(candidates: list[Candidate], observations: list[Observation]) -> None:
        for c in candidates:
            c.seen = c.checked = 0.0
            c.hits, c.unobservable, c.records, c.against, c.near_misses, c.culprit_hits = [], [], set(), [], [], []
            c.finding_codes, c.finding_weight = [], 0.0
            found: list[tuple[Signal, list[Hit]]] = []
            for s in c.signals:
                observable, hits = evaluate_signal(s, observations)
                if not observable:
                    c.unobservable.append(s)
                if s.rules_out:
                    if hits:
                        c.against.append((s, hits))
                    continue
                if hits and s.culprit:
                    c.culprit_hits.append((s, hits))
                if hits:
                    found.append((s, hits))
                elif observable:
                    missed = near_misses(s, observations)
                    if missed:
                        c.near_misses.append((s, missed))
                if observable:
                    c.checked += s.weight
            # One record counts once per hypothesis, whichever cards or signals name it: the
            # heaviest signal that matched it counts; a signal whose every record a heavier one
            # already counted adds nothing (one Full GC line is one line, not two cards' worth).
            claimed: set[tuple[str, str]] = set()
            for s, hits in sorted(found, key=lambda sh: -sh[0].weight):
                fresh = _distinct_first([h for h in hits if _record(h) not in claimed])
                claimed.update(_record(h) for h in hits)
                if not fresh:
                    continue
                c.hits.append((s, fresh))
                if s.weight >= CONTEXT_WEIGHT:
                    c.seen += s.weight
                    c.records.update(_record(h) for h in fresh)
            # What the analyzers read in the whole results (a blocking tree now, a limit reached):
            # each finding's weight once per finding kind, its refs records of their own.
            for code, refs, weight in _finding_weights(c.key, observations):
                c.seen += weight
                c.records.update(refs)
                c.finding_codes.append(code)
                c.finding_weight = max(c.finding_weight, weight)
            c.own = c.seen
        # A cause that is itself strongly seen also accounts for the symptoms of the effects it
        # explains (a leak explains the exhausted pool; an OOM kill explains the crash loop), each
        # record still counted once.
        by_key = {c.key: c for c in candidates}
        for c in candidates:
            if c.strong and c.own >= ROOT_THRESHOLD:
                taken = set(c.records)
                extra = 0.0
                for e in c.explains:
                    eff = by_key.get(e)
                    if eff is None:
                        continue
                    for s, hits in eff.hits:
                        recs = {_record(h) for h in hits}
                        if s.weight >= CONTEXT_WEIGHT and recs - taken:
                            extra += s.weight
                        taken |= recs
                c.seen = c.own + extra
        # Evidence against a hypothesis (its metric back to baseline, its resource expanded)
        # counts against it, by the heaviest such signal per record.
        for c in candidates:
            claimed = set()
            against = 0.0
            for s, hits in sorted(c.against, key=lambda sh: -sh[0].weight):
                if {_record(h) for h in hits} - claimed:
                    against += s.weight
                claimed.update(_record(h) for h in hits)
            if against:
                c.seen = max(0.0, c.seen - against)
                c.own = max(0.0, c.own - against)

    def _gate(self, c: Candidate, by_key: dict[str, Candidate]) -> tuple[list[tuple[str, str]], bool]:
        """(what is missing for `c` to be a root cause the EvidenceGuard accepts, whether all its
        evidence is shared with an alternative its cards name and none of it discriminates)."""
        scored = [(s, hs) for s, hs in c.hits if s.weight >= CONTEXT_WEIGHT]
        hits = [h for _, hs in scored for h in hs]
        missing: list[tuple[str, str]] = []
        n = len(c.records)
        if n < MIN_RECORDS:
            missing.append((f"only {n} independent record(s) support it; {MIN_RECORDS} are needed", f"只有 {n} 条独立记录支持，至少需要 {MIN_RECORDS} 条"))
        if hits and not any(_from_component(c.component, h) for h in hits):
            missing.append((f"no evidence from {c.component} itself or a client error naming it", f"没有来自 {c.component} 本身或点名它的客户端错误的证据"))
        alts = [a for a in c.distinguishes_from if a in by_key]
        alt_signals = [s for a in alts for s in by_key[a].signals]
        shared = bool(hits) and bool(c.distinguishes_from) and not any(s.discriminating for s, _ in scored)
        if shared:
            shared = all(any(ref_matches(a, h.tool, h.kind, h.raw_path, h.text, h.spans) for a in alt_signals) for h in hits)
        if shared:
            names = ", ".join(a.replace("/", " ") for a in alts if any(ref_matches(s, h.tool, h.kind, h.raw_path, h.text, h.spans) for s in by_key[a].signals for h in hits))
            missing.append((f"every signal seen is shared with {names}; none tells it apart", f"所见信号均与 {names} 共有，没有能区分它们的信号"))
        elif hits and not any(s.discriminating for s, _ in scored):
            # A symptom (an exhausted pool's timeouts) is never enough while a discriminating
            # signal of a cause it is told apart from, or that explains it, is seen (an unknown host).
            rivals = [k for k in (*alts, *(o.key for o in by_key.values() if c.key in o.explains)) if k != c.key]
            told = [k for k in dict.fromkeys(rivals) if any(s.discriminating and s.weight >= CONTEXT_WEIGHT for s, _ in by_key[k].hits)]
            if told:
                names = ", ".join(k.replace("/", " ") for k in told)
                missing.append((f"a discriminating signal of {names} is seen and none of its own", f"已见 {names} 的区分信号，而没有它自己的区分信号"))
                shared = True
        return missing, shared

    @staticmethod
    def _independent(a: Candidate, b: Candidate) -> bool:
        """Whether two hypotheses rest on independent evidence and do not compete: no record in
        common, neither explains the other, and neither's cards name the other as an alternative
        to tell apart."""
        return (
            not (a.records & b.records)
            and a.key not in b.explains
            and b.key not in a.explains
            and a.key not in b.distinguishes_from
            and b.key not in a.distinguishes_from
            and a.key != b.key
        )

    def _verdict(self, candidates: list[Candidate]) -> tuple[list[Candidate], Candidate | None, float, bool, list[tuple[str, str]], list[Candidate]]:
        """(ranked, best, runner-up weight, confirmed, what is missing, contributing causes): the
        leader among the hypotheses whose evidence is not all shared with a named alternative;
        the margin is kept over the rivals that share its evidence or compete with it, and a
        hypothesis confirmed on independent evidence is a contributing cause."""
        ranked = sorted(candidates, key=lambda c: (-c.seen, c.rank))
        if not ranked:
            return ranked, None, 0.0, False, [], []
        by_key = {c.key: c for c in candidates}
        gates = {c.key: self._gate(c, by_key) for c in ranked if c.seen > 0}
        contenders = [c for c in ranked if not gates.get(c.key, ([], False))[1]]
        best = contenders[0] if contenders else ranked[0]
        # A rival resting on one record (one line, however often repeated) could never be a root
        # cause itself, and does not block one.
        rivals = [c for c in contenders if c is not best and len(c.records) >= MIN_RECORDS]

        def clears(c: Candidate) -> bool:
            return c.seen >= ROOT_THRESHOLD and c.strong and not gates.get(c.key, ([], False))[0]

        # A symptom (a proxy's timeouts) yields to a fault of the dependency it points at that is
        # seen in its own right (GC pauses, a lock, a limit): that fault is the root cause, and the
        # symptom is what it explains.
        self._explained = set()
        if best.key in symptoms():
            faults = [
                c
                for c in contenders
                if c is not best
                and (best.key in c.explains or c.key in best.distinguishes_from or explains(c.key, best.key))
                and clears(c)
                and any(s.discriminating for s, _ in c.hits)
            ]
            if faults:
                self._explained.add(best.key)
                best = max(faults, key=lambda c: (c.seen, -c.rank))
                rivals = [c for c in contenders if c is not best and len(c.records) >= MIN_RECORDS and c.key not in self._explained]

        # A rival confirmed in its own right on independent evidence is a contributing cause, not a
        # runner-up; every other rival (sharing evidence, competing, or not confirmed) keeps the margin.
        independent = [c for c in rivals if self._independent(best, c) and clears(c)]
        runner = max((c.seen for c in rivals if c not in independent), default=0.0)
        missing = list(gates.get(best.key, ([], False))[0])
        if best.seen < ROOT_THRESHOLD or not best.strong:
            missing.insert(0, (f"its signals weigh {best.seen:g} (a root cause needs {ROOT_THRESHOLD:g}, one of weight 2 or more)", f"信号权重 {best.seen:g}（根因需要 {ROOT_THRESHOLD:g}，且至少一个权重 ≥ 2 的信号）"))
        elif best.seen - runner < MARGIN:
            missing.insert(0, (f"it leads the runner-up by {best.seen - runner:g} (a root cause needs {MARGIN:g})", f"领先次强假设 {best.seen - runner:g}（根因需要 {MARGIN:g}）"))
        causes = self._unchecked_causes(best, candidates)
        if not causes:
            # An alternative its cards name, with evidence of its own, that its unchecked
            # discriminating signals could still carry within the margin of the leader, is told
            # apart before the leader is confirmed.
            def open_weight(c: Candidate) -> float:
                return sum(s.weight for s in c.unobservable if s.discriminating and not s.rules_out and self._asks(s, self._offered))

            causes = [
                c
                for c in candidates
                if c is not best
                and c.key in best.distinguishes_from
                and c.seen > 0
                and open_weight(c) > 0
                and c.seen + open_weight(c) > best.seen - MARGIN
            ]
            if causes and not missing:
                names = ", ".join(c.key.replace("/", " ") for c in causes)
                missing.append((f"an alternative with evidence of its own is not told apart yet: {names}", f"有自身证据的备选假设尚未区分：{names}"))
                causes = []
        if causes and not missing:
            # A symptom (a proxy's timeouts, pool waits) is the root cause only once the
            # dependency it points at was looked at: the causes that would explain it, checked.
            names = ", ".join(c.key.replace("/", " ") for c in causes)
            missing.append((f"it is a symptom, and what would explain it is not checked yet: {names}", f"它是症状，能解释它的原因尚未检查：{names}"))
        if not missing and self._impact is None:
            # Impact: a root cause explains something seen going wrong in the window.
            missing.append(("it explains nothing seen in the window: no errors, no refused or blocked work, no failing or slowing requests, no alert", "它解释不了窗口内看到的任何问题：没有错误、没有被拒或阻塞的工作、没有失败或变慢的请求、没有告警"))
        confirmed = best.seen > 0 and not missing
        contributing: list[Candidate] = []
        if confirmed:
            for c in independent:
                # Confirmed in its own right: over the threshold, what the guard needs holds, and
                # it leads its own rivals (those that share its evidence) by the margin.
                if any(not self._independent(c, k) for k in contributing):
                    continue
                own_rivals = [r.seen for r in rivals if r is not c and not self._independent(c, r) and r is not best]
                if c.seen - max(own_rivals, default=0.0) >= MARGIN:
                    contributing.append(c)
        return ranked, best, runner, confirmed, missing, contributing[:2]

    def _next_calls(self, question: str, candidates: list[Candidate], observations: list[Observation], offered: set[str], step: int) -> list[ToolCall]:
        lookups = [o for o in observations if o.tool == "lookup_knowledge"]
        used: dict[str, int] = {}
        for o in observations:
            if o.code is None or o.ready:
                used[o.tool] = used.get(o.tool, 0) + 1
        blocked = {o.tool for o in observations if o.code in _STOP_CODES}
        # A tool whose backend failed twice is down for this run (a Redis refusing every client):
        # asking it again only adds failed calls.
        failures: dict[str, int] = {}
        for o in observations:
            if o.status in ("FAILED", "TIMED_OUT"):
                failures[o.tool] = failures.get(o.tool, 0) + 1
        blocked |= {t for t, n in failures.items() if n >= 2}
        total = sum(used.values())
        calls: list[ToolCall] = []
        done = {json.dumps([o.tool, o.args], sort_keys=True) for o in observations}
        # Second looks at the logs: every service when the alert's own had none; from the alert's
        # start when it began before the first look's window.
        second: list[tuple[str, dict[str, Any]]] = [
            ("wide", {k: v for k, v in o.args.items() if k != "service"})
            for o in observations
            if o.tool == "query_logs" and o.step == 0 and o.args.get("service") and o.evidence_status == "NO_EVIDENCE"
        ]
        wider = _since_alert_start(_alert(question), observations)
        if wider is not None:
            second.append(("alert-window", wider))
        # A busy log (more than half a page of lines in the window, most of them not shown: a
        # service's access lines): the warnings and errors of the same window, which the newest
        # lines pushed out of view.
        second += [
            ("warnings", {**o.args, "level": "WARN"})
            for o in observations
            if o.tool == "query_logs"
            and o.step == 0
            and o.ready
            and (o.total_matches or 0) > max(int(o.args.get("limit") or 50) // 2, 2 * len(o.refs))
            and not o.args.get("level")
            and not o.args.get("query")
        ]
        for label, args_log in second:
            key = json.dumps(["query_logs", args_log], sort_keys=True)
            if key not in done and "query_logs" not in blocked:
                done.add(key)
                calls.append(ToolCall(id=f"s{step}-{label}", name="query_logs", arguments=args_log))
                used["query_logs"] = used.get("query_logs", 0) + 1
                total += 1
        ranked, _, _, confirmed, _, contributing = self._verdict(candidates)
        # The leading hypothesis by weight, even when its evidence is all shared with an alternative.
        best = ranked[0] if ranked else None
        # The discriminating signals of what tells the leader apart (the alternatives its cards name,
        # the causes it explains or that explain it), not yet looked at: checked before the leader's
        # own weaker signals and before more knowledge is looked up; their calls are kept in budget.
        # Not for a leader resting on one record: it could never be a root cause, and the budget
        # goes to what may corroborate a cause instead.
        by_key = {c.key: c for c in candidates}
        contender = best is not None and best.seen > 0 and len(best.records) >= MIN_RECORDS
        related = self._related(best, candidates) if best is not None and contender else []
        urgent = [
            s
            for k in related
            for s in by_key[k].unobservable
            if s.discriminating and self._asks(s, offered) and s.tool not in blocked and used.get(s.tool, 0) < self._cap(s.tool)
        ]
        n_urgent = len({(s.tool, s.kind, s.metric if s.tool == "query_metrics" else None) for s in urgent})

        def lookup_room() -> bool:
            n = sum(1 for c in calls if c.name == "lookup_knowledge")
            return total + n + n_urgent < self._max_calls

        can_lookup = "lookup_knowledge" in offered and "lookup_knowledge" not in blocked
        asked = " ".join(str(o.args.get("query", "")) for o in lookups)
        # While nothing is confirmed, or nothing seen tells the leader apart: ask the knowledge base
        # about what was seen and not yet asked about (the most severe messages, recent changes,
        # the metrics that moved).
        # Nothing seen tells the leader apart, and a client error names the component of an
        # alternative its cards name: that alternative's knowledge must be in view.
        named = self._named(observations)
        undiscriminated = (
            best is not None
            and not any(s.discriminating for s, _ in best.hits)
            and any(p.partition("/")[0] in named - {best.component} for p in best.distinguishes_from)
        )
        repeat_query = ""
        # Once per run the evidence is looked up even when a hypothesis is confirmed already: what
        # confirmed it may be a symptom (a gateway's timeouts) of what the errors and the state
        # seen name (the upstream's lock waits), whose knowledge is not in view yet.
        # (Only where more than one runtime tool found evidence: with one source, the errors seen
        # are what confirmed the leader.)
        sources = {o.tool for o in observations if o.tool != "lookup_knowledge" and o.ready and o.evidence_status == "EVIDENCE_FOUND"}
        first_evidence_lookup = not any(o.step > 0 for o in lookups) and len(sources) >= 2
        if can_lookup and (not confirmed or undiscriminated or first_evidence_lookup) and len(lookups) < self._per_tool:
            lines = self._error_lines(observations, asked) + self._state_identifiers(observations, asked)
            # Messages that only repeat, with other numbers, what was asked already wait until no
            # differential lookup is left to make.
            asked_shape = re.sub(r"\d+", "#", asked)
            repeat = [ln for ln in lines if re.sub(r"\d+", "#", ln) not in asked_shape] == []
            # The first lookup of the evidence outranks the leader's pending checks: while the errors
            # seen are not looked up, the leader may be a hypothesis they would displace.
            room = total + 1 < self._max_calls if first_evidence_lookup else lookup_room()
            if lines and not repeat and room:
                calls.append(ToolCall(id=f"s{step}-k", name="lookup_knowledge", arguments={"query": " ".join(lines)[:1000], "top_k": LOOKUP_TOP_K}))
            elif lines:
                repeat_query = " ".join(lines)[:1000]
        # Differential lookups: knowledge about what the leading hypothesis must be told apart from
        # (one lookup per alternative not yet among the candidates), and about the leading
        # hypothesis itself when only a general card proposed it or it is not confirmed; while it is not yet confirmed,
        # the runtime evidence is not all in view, or nothing seen tells it apart.
        # They wait for a lookup of the evidence issued in this step: what it brings is not asked again.
        asked_evidence = any(c.id == f"s{step}-k" for c in calls)
        if best is not None and best.seen > 0 and can_lookup and not asked_evidence:
            incomplete = any(o.omitted for o in observations if o.tool != "lookup_knowledge") or any(t.startswith("inspect_") for t in offered)
            keys = {c.key for c in candidates}
            general = self._general(best)
            alts = [p for p in best.distinguishes_from if p not in keys] if best.strong else []
            # Alternatives that a client error in the evidence names come first.
            alts.sort(key=lambda p: p.partition("/")[0] not in named)
            # A strongly seen rival known only from a general card is looked up too, so that it is
            # weighed with all its signals.
            rivals = [c.key for c in ranked[1:] if c.strong and self._general(c)]
            targets = alts + ([best.key] if (general and best.strong) or not confirmed else []) + rivals
            # (While none of its seen signals discriminates, an alternative whose card is not in
            # view yet may share every one of them.)
            for pair in targets:
                if not (not confirmed or incomplete or undiscriminated) or len(lookups) + sum(1 for c in calls if c.name == "lookup_knowledge") >= self._per_tool or not lookup_room():
                    break
                args_dx: dict[str, Any] = {"query": _label(pair.partition("/")[0], pair.partition("/")[2], False), "top_k": LOOKUP_TOP_K}
                key = json.dumps(["lookup_knowledge", args_dx], sort_keys=True)
                if key not in done:
                    done.add(key)
                    calls.append(ToolCall(id=f"s{step}-dx{len(calls)}", name="lookup_knowledge", arguments=args_dx))
        if repeat_query and not any(c.name == "lookup_knowledge" for c in calls) and lookup_room():
            calls.append(ToolCall(id=f"s{step}-k", name="lookup_knowledge", arguments={"query": repeat_query, "top_k": LOOKUP_TOP_K}))
        used["lookup_knowledge"] = used.get("lookup_knowledge", 0) + sum(1 for c in calls if c.name == "lookup_knowledge")
        total += sum(1 for c in calls if c.name == "lookup_knowledge")
        # One runtime call stays free for each alternative of the leader whose card is being looked
        # up now: its discriminating signal is checked next step.
        looked_up = {str(c.arguments.get("query")) for c in calls if c.name == "lookup_knowledge" and isinstance(c.arguments, dict)}
        named_alts = best.distinguishes_from if best is not None and contender else []
        reserve = sum(1 for p in named_alts if p not in by_key and _label(p.partition("/")[0], p.partition("/")[2], False) in looked_up)
        groups: dict[tuple[str, str | None], list[Signal]] = {}
        # While knowledge is still being looked up, spend runtime calls only on hypotheses that
        # already have strong evidence; the others wait for the cards the lookup may bring.
        # A hypothesis whose own knowledge is being looked up waits for it too (its card may name
        # the signals worth the remaining calls).
        self_looked = {str(c.arguments.get("query")) for c in calls if c.name == "lookup_knowledge" and isinstance(c.arguments, dict)}
        pursue = [c for c in ranked if c.strong and _label(c.component, c.mechanism, False) not in self_looked] if calls else ranked
        # First the leader's own discriminating signals, then those of what tells it apart; the
        # rest after them (one call per tool and kind: a call for a first signal also asks for the
        # others of its tool and kind).
        lead = [s for s in best.unobservable if s.discriminating] if best is not None and best in pursue else []
        # A symptom leads: what would explain it is looked at before its own signals (the
        # dependency it points at first).
        if best is not None:
            lead = [s for c in self._unchecked_causes(best, candidates) for s in c.unobservable if s.discriminating and not s.rules_out] + lead
        # Once a mechanism is confirmed, one more bounded look fetches what names its culprit
        # (the blocking session, the top statement by load, the client holding connections).
        if confirmed and best is not None:
            lead = [s for c in [best, *contributing] for s in c.unobservable if s.culprit and self._asks(s, offered)] + lead
        ahead = [s for s in sorted(lead, key=lambda s: -s.weight) + [s for s in urgent if s not in lead] if self._asks(s, offered) and s.tool not in blocked]
        for s in ahead:
            groups.setdefault((s.tool, s.kind), []).append(s)
        firsts = set(groups)
        for c in pursue:
            for s in sorted(c.unobservable, key=lambda s: -s.weight):
                if self._asks(s, offered) and s.tool not in blocked and s not in ahead:
                    groups.setdefault((s.tool, s.kind), []).append(s)
        planned: list[tuple[float, str, dict[str, Any]]] = []
        for order, ((tool, kind), sigs) in enumerate(groups.items()):
            first = (tool, kind) in firsts
            # The discriminating checks come first; then groups in candidate order (strongest
            # first); within that, heavier signals first.
            weight = max(s.weight for s in sigs) - 100.0 * order + (10_000.0 if first else 0.0)
            log_like = tool == "query_logs" or (kind in LOG_KINDS.get(tool, set()))
            if tool == "query_metrics":
                for s in sigs:
                    # Every name it has (canonical and aliases) spelled as this environment
                    # spells its series, that no complete look asked for yet.
                    for rank, name in enumerate(uncovered_metric_names(s, observations)):
                        args: dict[str, Any] = {"metric": name}
                        if s.labels:
                            args["labels"] = dict(s.labels)
                        if s.since is not None:
                            args["since"] = s.since
                        planned.append((s.weight - 100.0 * order - 0.01 * rank + (10_000.0 if s in ahead else 0.0), tool, args))
                continue
            args = {"kind": kind} if kind else {}
            since = _widest_since(sigs)
            if since is not None:
                # Evidence that precedes the symptoms: the widest window a signal asks for.
                args["since"] = since
            if not log_like and kind and any(o.tool == tool and o.kind == kind and o.ready and o.omitted and not o.args.get("query") for o in observations):
                # The whole view was cut short: ask again for just what the signals test.
                terms = [t for s in sigs for t in query_terms(s)]
                if terms:
                    args["query"] = " ".join(dict.fromkeys(f'"{t}"' for t in terms[:MAX_PHRASES]))
            if log_like:
                phrases: list[str] = []
                for s in sigs:
                    for p in ([s.query] if s.query else [f'"{x}"' for x in signal_strings(s)]):
                        if p and p not in phrases:
                            phrases.append(p)
                if not phrases:
                    continue
                args["query"] = " ".join(phrases[:MAX_PHRASES])
                scopes = {s.scope for s in sigs}
                if tool == "query_logs" and len(scopes) == 1 and None not in scopes:
                    args["scope"] = scopes.pop()
            planned.append((weight, tool, args))
        # The last call of a tool stays free for what names a culprit (the top statement, the
        # client holding the sessions) while a hypothesis with evidence still lacks it, so the
        # drill-down after confirmation is never crowded out.
        culprit_kinds = {(s.tool, s.kind) for c in ranked if c.seen > 0 for s in c.unobservable if s.culprit and self._asks(s, offered) and s.tool not in blocked}
        aimed = [(w, t, a) for w, t, base in sorted(planned, key=lambda p: -p[0]) for a in self._aimed(t, base, candidates)]
        for weight, tool, args in aimed:
            sig = json.dumps([tool, args], sort_keys=True)
            if sig in done or used.get(tool, 0) >= self._cap(tool) or total >= self._max_calls - (0 if weight >= 5_000.0 else reserve):
                continue
            kept = {k for t, k in culprit_kinds if t == tool} - {args.get("kind")}
            if kept and used.get(tool, 0) >= self._cap(tool) - 1 and (tool, args.get("kind")) not in culprit_kinds:
                continue
            done.add(sig)
            used[tool] = used.get(tool, 0) + 1
            total += 1
            calls.append(ToolCall(id=f"s{step}-{len(calls)}", name=tool, arguments=args))
        return calls

    def _general(self, c: Candidate) -> bool:
        """Whether only general cards (more than two hypotheses each) propose `c`."""
        return all(len(self.kb.cards[cid].hypotheses) > 2 for cid in c.cards if cid in self.kb.cards)

    @staticmethod
    def _named(observations: list[Observation]) -> frozenset[str]:
        """The components that client errors in the runtime evidence name (outside untrusted spans)."""
        out: set[str] = set()
        for o in observations:
            if o.tool == "lookup_knowledge" or not o.ready:
                continue
            for ref in o.refs:
                if ref.get("raw_path") != "$.no_evidence" and not ref.get("instruction_like"):
                    out |= names_component(str(ref.get("text", "")))
        return frozenset(out)

    def _state_identifiers(self, observations: list[Observation], asked: str = "") -> list[str]:
        """What the knowledge base's identifier index recognises in the values of the rows the
        inspectors showed (a session `idle in transaction`), outside untrusted spans and not asked
        about yet: a lookup of the evidence names the state as well as the errors."""
        found: list[str] = []
        asked_n = norm(asked)
        for o in observations:
            if not o.tool.startswith("inspect_") or not o.ready or o.kind in LOG_KINDS.get(o.tool, set()):
                continue
            for ref in o.refs:
                if not str(ref.get("raw_path", "")).startswith("$.rows[") or ref.get("instruction_like"):
                    continue
                # A row's values (a session's state, a client's flags), never its column names: those
                # name a metric or a view in every result, healthy or not.
                row = row_of(o.tool, outside_spans(str(ref.get("text", "")), ref_spans(ref)))
                if not row:
                    continue
                # Short values only: a state (`idle in transaction`, `Lock`), not free text such as
                # a session's last statement, which names whatever views a client happens to read.
                text = " | ".join(v for v in row.values() if isinstance(v, str) and 0 < len(v) <= STATE_VALUE_MAX)
                for ident in self.kb.identifiers_in(text):
                    if ident not in found and ident not in asked_n:
                        found.append(ident)
        return found[:3]

    @staticmethod
    def _error_lines(observations: list[Observation], asked: str = "") -> list[str]:
        """The first lines of the most severe messages, and the metrics that moved: a second lookup's query."""
        ranked: list[tuple[int, str]] = []
        metrics: list[str] = []
        exceptions: list[str] = []
        sev = (("FATAL", 0), ("PANIC", 0), ("ERROR", 1), ("[error]", 1), ("[crit]", 0), ("[emerg]", 0), ("[alert]", 0), ("WARN", 2), ("[warn]", 2))
        for o in observations:
            if o.tool == "lookup_knowledge" or not o.ready:
                continue
            # Messages only: a state table's row (a session whose last statement was ROLLBACK) is
            # no error line; what the knowledge base knows of rows is `_state_identifiers`'.
            if o.tool.startswith("inspect_") and o.kind not in LOG_KINDS.get(o.tool, set()):
                continue
            for ref in o.refs:
                if ref.get("raw_path") == "$.no_evidence" or ref.get("instruction_like"):
                    continue
                # What an outsider wrote (a request's URL, user agent, body) never steers a lookup.
                text = outside_spans(str(ref.get("text", "")), ref_spans(ref))
                if o.tool == "query_metrics":
                    m = re.match(r"^([^\s{]+)\S* first=\S+ last=\S+ min=\S+ max=\S+ delta=(\S+)", text)
                    if m and m.group(2) not in ("0", "0.0") and m.group(1) not in metrics and m.group(1) not in asked:
                        metrics.append(m.group(1))
                    continue
                first = text.split("\n", 1)[0]
                rank = next((r for tag, r in sev if tag in first), None)
                if rank is None and re.search(r"Exception|refused|timed out|failed|denied|No space|Killed process", first):
                    rank = 2
                if re.search(r"(?i)\b(deploy(ed|ing|ment)?|roll(ed)? ?out|rollback|reload(ed)?|config(uration)? (revision|change|push)|applying .{0,40}config|upgrade[ds]?|release[ds]?)\b", first):
                    rank = 0
                if rank is None:
                    continue
                msg = first.split("] ", 1)[-1] if o.tool == "query_logs" else first
                msg = re.sub(r"^\S+ \S+ (UTC )?\[\d+\] ", "", msg)[:140]
                # One message once, whatever its numbers (each timeout's duration and queue length).
                shape = re.sub(r"\d+", "#", msg)
                if msg not in asked and all(shape != re.sub(r"\d+", "#", m) for _, m in ranked):
                    ranked.append((rank, msg))
                # The exceptions an error names anywhere in it (a cause at the end of the line or in
                # its stack trace): exact identifiers for the knowledge base's identifier index.
                for exc in _EXCEPTION.findall(text):
                    if exc not in asked and exc not in msg and exc not in exceptions:
                        exceptions.append(exc)
        ranked.sort(key=lambda rm: rm[0])
        return [m for _, m in ranked[:3]] + exceptions[:3] + metrics[:3]

    # -- the draft -------------------------------------------------------------------------
    def _draft(self, question: str, candidates: list[Candidate], observations: list[Observation]) -> dict[str, Any]:
        zh = _is_zh(question)
        ranked, best, runner, confirmed, missing, contributing = self._verdict(candidates)
        if best is not None:
            ranked = [best] + [c for c in ranked if c is not best]
        claims: list[dict[str, Any]] = []
        hypotheses: list[dict[str, Any]] = []

        def cite(h: Hit, anchors: list[str]) -> dict[str, Any]:
            return {"invocation_id": h.invocation_id, "tool_name": h.tool, "raw_path": h.raw_path, "excerpt": _excerpt(h.text, anchors, h.spans)}

        def add_claim(text: str, kind: str, cits: list[dict[str, Any]]) -> str:
            cid = f"c{len(claims) + 1}"
            claims.append({"id": cid, "text": text, "kind": kind, "citations": cits})
            return cid

        root_cause = None
        contributing_out: list[dict[str, Any]] = []
        written_co: set[str] = set()
        recovery: list[dict[str, Any]] = []
        limitations: list[str] = []
        next_steps: list[str] = []
        if best is not None and confirmed:
            label = _label(best.component, best.mechanism, zh)
            rc_ids = []
            ordered = sorted(best.hits, key=lambda sh: -sh[0].weight)
            shown: set[tuple[str, str]] = set()
            for sig, hits in ordered[:6]:
                anchors = signal_strings(sig)
                fresh = [x for x in hits if (x.invocation_id, x.raw_path) not in shown]
                if not fresh:
                    continue  # every ref of this signal is already quoted by an earlier claim
                hits = fresh
                shown.update((x.invocation_id, x.raw_path) for x in hits[:4])
                h = hits[0]
                ex = _excerpt(h.text, anchors)
                text = f"根因证据（{label}）：“{ex}”" if zh else f"Root cause evidence ({label}): \"{ex}\""
                rc_ids.append(add_claim(text, "root_cause", [cite(x, anchors) for x in hits[:4]]))
            rest = [(sig, h) for sig, hits in ordered[6:] for h in hits[:2]]
            if rest:
                ex = _excerpt(rest[0][1].text, signal_strings(rest[0][0]))
                text = f"更多支持证据（{label}）：“{ex}”" if zh else f"More evidence for {label}: \"{ex}\""
                rc_ids.append(add_claim(text, "root_cause", [cite(h, signal_strings(sig)) for sig, h in rest[:8]]))
            symptom = self._symptom(_alert(question), observations, shown)
            if symptom:
                svc = symptom[0][0]
                ex = _excerpt(symptom[0][1].text, [])
                text = f"{svc} 症状：“{ex}”" if zh else f"Symptom at {svc}: \"{ex}\""
                add_claim(text, "finding", [cite(h, []) for _, h in symptom])
            card_ref = self._card_hit(best, observations)
            kc_ids = []
            if card_ref is not None:
                ex = _excerpt(card_ref.text, [])
                kc_ids.append(add_claim(f"知识卡片：“{ex}”" if zh else f"Knowledge card: \"{ex}\"", "finding", [cite(card_ref, [])]))
            # What the analyzers found for it, read in the whole results: its refs (the raw
            # values: the limit and the reading, the blocker's own row) are cited.
            found = self._findings(best.key, observations)
            # Only a finding about a subject (the limit that ran out, the root blocker) is quoted:
            # a hint (who waits, which transactions are open) names no one.
            f_hits = [h for f, hs in found if f.get("subject") for h in hs if h.key not in shown][:4]
            host = next((c for c in claims if c["id"] in rc_ids and len(c["citations"]) + len(f_hits) <= 8), None)
            if f_hits and host is not None:
                # Within the claims cap: the readings join the first root-cause claim that has room.
                shown.update(h.key for h in f_hits)
                host["citations"].extend(cite(h, []) for h in f_hits)
            elif f_hits:
                shown.update(h.key for h in f_hits)
                ex = "; ".join(_excerpt(h.text, []) for h in f_hits[:3])
                rc_ids.append(add_claim(f"根因证据（{label}）：“{ex}”" if zh else f"Root cause evidence ({label}): \"{ex}\"", "root_cause", [cite(h, []) for h in f_hits]))
            # The root blocker's own session row (its activity, not a waiter's row naming it).
            own = self._own_row([f for f, _ in found], observations)
            own_row = row_of(own.tool, own.text) if own is not None else None
            culprit = limit_culprit([f for f, _ in found], zh) or blocker_culprit([f for f, _ in found], zh, own_row) or self._culprit(best)
            if own is not None and own.key not in shown:
                shown.add(own.key)
                ex = _excerpt(own.text, [])
                rc_ids.append(add_claim(f"罪魁（{label}）：“{ex}”" if zh else f"Culprit ({label}): \"{ex}\"", "root_cause", [cite(own, [])]))
            culprit_hit = self._culprit_hit(best)
            if culprit_hit is not None:
                # The ref that names the culprit is cited by a root-cause claim of its own (or
                # is already quoted by one).
                if culprit_hit.key not in shown:
                    shown.add(culprit_hit.key)
                    ex = _excerpt(culprit_hit.text, [])
                    rc_ids.append(add_claim(f"罪魁（{label}）：“{ex}”" if zh else f"Culprit ({label}): \"{ex}\"", "root_cause", [cite(culprit_hit, [])]))
            root_cause = {"component": best.component, "mechanism": best.mechanism, "culprit": culprit, "claim_ids": rc_ids}
            for co in contributing:
                if len(claims) >= 10:
                    break
                co_label = _label(co.component, co.mechanism, zh)
                co_hits = [(sg, [h for h in hs if h.key not in shown]) for sg, hs in sorted(co.hits, key=lambda sh: -sh[0].weight)]
                co_hits = [(sg, hs) for sg, hs in co_hits if hs]
                if not co_hits:
                    continue
                sg0, hs0 = co_hits[0]
                ex = _excerpt(hs0[0].text, signal_strings(sg0))
                cits = [cite(h, signal_strings(sg)) for sg, hs in co_hits[:4] for h in hs[:2]]
                co_hit = self._culprit_hit(co)
                if co_hit is not None and co_hit.key not in {(c["invocation_id"], c["raw_path"]) for c in cits}:
                    cits.append(cite(co_hit, []))
                shown.update((c["invocation_id"], c["raw_path"]) for c in cits)
                text = f"独立的促成原因（{co_label}）：“{ex}”" if zh else f"Contributing cause, on independent evidence ({co_label}): \"{ex}\""
                cid = add_claim(text, "root_cause", cits[:8])
                contributing_out.append({"component": co.component, "mechanism": co.mechanism, "culprit": self._culprit(co), "claim_ids": [cid]})
                hypotheses.append({"statement": co_label, "component": co.component, "mechanism": co.mechanism, "status": "confirmed", "claim_ids": [cid]})
                written_co.add(co.key)
            hypotheses.append({"statement": label, "component": best.component, "mechanism": best.mechanism, "status": "confirmed", "claim_ids": rc_ids + kc_ids})
            top = best.top_hits(1)
            effects = [c for c in ranked[1:] if (c.key in best.explains or c.key in self._explained) and c.own > 0 and c.key not in written_co]
            for eff in effects:
                if len(claims) >= 10:
                    break
                eff_hits = sorted(eff.hits, key=lambda sh: -sh[0].weight)
                sig, hits = eff_hits[0]
                anchors = signal_strings(sig)
                elabel = _label(eff.component, eff.mechanism, zh)
                ex = _excerpt(hits[0].text, anchors)
                text = f"{elabel} 是 {label} 的结果：“{ex}”" if zh else f"{elabel} is a consequence of {label}: \"{ex}\""
                cits = [cite(h, signal_strings(sg)) for sg, hs in eff_hits[:4] for h in hs[:2]]
                # … and what shows the cause behind it: the root cause's discriminating evidence.
                cause = [cite(h, signal_strings(sg)) for sg, hs in ordered if sg.discriminating for h in hs[:1]][:2]
                cid = add_claim(text, "finding", cits[:6] + cause)
                # As a root cause it is ruled out: what it shows is a consequence of the root cause.
                hypotheses.append({"statement": f"{elabel} ({'由 ' + label + ' 引起，不是根因' if zh else 'explained by ' + label + ', not the root cause'})", "component": eff.component, "mechanism": eff.mechanism, "status": "explained", "claim_ids": [cid]})
            # An alternative with a discriminating signal seen is not ruled out: it stays open.
            alternatives = [c for c in ranked[1:] if c.key not in written_co and (c.seen + MARGIN <= best.seen or c.against) and c not in effects and not any(s.discriminating for s, _ in c.hits)]
            # The alternatives its cards name are answered first.
            alternatives.sort(key=lambda c: c.key not in best.distinguishes_from)
            seen_keys = {best.key} | {c.key for c in ranked}
            # The alternatives the cards of the root cause and of each contributing cause name.
            named_alts = list(dict.fromkeys(p for c in [best, *contributing] for p in c.distinguishes_from))
            extra = [p for p in named_alts if p not in seen_keys and p not in written_co]
            alternatives.sort(key=lambda c: c.key not in named_alts)
            by_key = {c.key: c for c in candidates}
            untested: list[str] = []
            written: set[str] = set()
            for alt_key in [c.key for c in alternatives][:5] + extra[: max(0, 5 - len(alternatives))]:
                comp, _, mech = alt_key.partition("/")
                if len(claims) >= 11 or not top:
                    break
                alt = _label(comp, mech, zh)
                written.add(alt_key)
                # Never ruled out while a signal that would tell it apart was not looked at: what
                # was not checked proves nothing against it.
                unchecked = self._unchecked(alt_key, by_key.get(alt_key))
                # … unless one of its discriminating signals was looked at and found normal (the
                # series that would show it, within bounds): then it was tested.
                declared = by_key.get(alt_key) or self._declared(alt_key, observations)
                if unchecked and declared is not None and any(sg.discriminating for sg, _ in declared.near_misses) and not declared.hits:
                    unchecked = []
                # … or the root cause, confirmed on a signal that tells it apart, explains it (a
                # deadlock is lock waits that PostgreSQL resolved): as a root cause it is answered
                # by that evidence, whatever of its own was not looked at.
                if unchecked and alt_key in best.explains and any(sg.discriminating for sg, _ in best.hits):
                    unchecked = []
                if unchecked:
                    untested.append(alt_key)
                    hypotheses.append({"statement": alt, "component": comp, "mechanism": mech, "status": "open", "claim_ids": []})
                    what = self._describe(unchecked[0])
                    limitations.append(f"未能排除 {alt}：未检查其区分信号（{what}）" if zh else f"{alt} not ruled out: its discriminating signal was not checked ({what})")
                    continue
                # Ruled out only by evidence from a source able to observe the alternative's
                # component (and that is no signal of it); else it stays open.
                tests = self._observing(comp, best, by_key.get(alt_key), observations)
                if not tests:
                    untested.append(alt_key)
                    hypotheses.append({"statement": alt, "component": comp, "mechanism": mech, "status": "open", "claim_ids": []})
                    limitations.append(
                        f"未能检验 {alt}：没有能观察 {comp.replace('_', ' ')} 的证据来源" if zh else f"{alt} not tested: no evidence from a source able to observe {comp.replace('_', ' ')}"
                    )
                    continue
                alt_c = by_key.get(alt_key) or self._declared(alt_key, observations)
                against = [h for _, hs in sorted(alt_c.against, key=lambda sh: -sh[0].weight) for h in hs[:2]] if alt_c else []
                if against:
                    ex = _excerpt(against[0].text, [], against[0].spans)
                    text = f"排除 {alt}：“{ex}”" if zh else f"{alt} ruled out: \"{ex}\""
                else:
                    ex = _excerpt(tests[0].text, [], tests[0].spans)
                    text = f"排除 {alt}：证据指向 {label}：“{ex}”" if zh else f"{alt} ruled out: the evidence points to {label}: \"{ex}\""
                # What contradicts it first, then what its own signals tested and found normal
                # (its metric flat), then the evidence for the root cause.
                normal = [h for _, hs in (alt_c.near_misses if alt_c else []) for h in hs[:1]]
                lead_refs = _distinct_first(against[:4] + normal)[:4]
                if normal and not against:
                    ex = _excerpt(normal[0].text, [], normal[0].spans)
                    text = f"排除 {alt}：“{ex}”" if zh else f"{alt} ruled out: \"{ex}\""
                pool = lead_refs + [x for x in tests if x.key not in {a.key for a in lead_refs}]
                cid = add_claim(text, "finding", [cite(x, []) for x in pool[:8]])
                hypotheses.append({"statement": alt, "component": comp, "mechanism": mech, "status": "ruled_out", "claim_ids": [cid]})
            for c in ranked[1:]:
                if c in effects or c.key in written or c.key in written_co:
                    continue
                unchecked = [sg for sg in c.unobservable if sg.discriminating]
                if unchecked and c.key in self._related(best, candidates):
                    what = self._describe(unchecked[0])
                    limitations.append(f"未能排除 {_label(c.component, c.mechanism, zh)}：未检查其区分信号（{what}）" if zh else f"{_label(c.component, c.mechanism, zh)} not ruled out: its discriminating signal was not checked ({what})")
                hypotheses.append({"statement": _label(c.component, c.mechanism, zh), "component": c.component, "mechanism": c.mechanism, "status": "open", "claim_ids": []})
            for action in best.recovery[:2]:
                risk, approval = recovery_policy(action)
                verification = (
                    f"执行后重新检查 {label} 的信号（如“{_excerpt(top[0].text, [])[:80]}”）不再出现，并确认业务延迟恢复"
                    if zh
                    else f"Re-run the checks for {label} and confirm the signal no longer appears and the symptom recovers"
                )
                recovery.append({"action": action, "target": culprit[:300], "risk": risk, "requires_approval": bool(approval or action != "no_action"), "verification": verification})
            summary = (f"根因：{label}。{culprit}" if zh else f"Root cause: {label}. {culprit}")[:4000]
            for s in best.unobservable[:3]:
                limitations.append(("未能观察的信号：" if zh else "Signal not observed: ") + self._describe(s))
        else:
            for c in ranked[:6]:
                status = "open"
                cids: list[str] = []
                label = _label(c.component, c.mechanism, zh)
                if c.hits and len(claims) < 8:
                    sig, hits = max(c.hits, key=lambda sh: sh[0].weight)
                    anchors = signal_strings(sig)
                    ex = _excerpt(hits[0].text, anchors)
                    cids.append(add_claim(f"{label} 的部分信号：“{ex}”" if zh else f"Partial signal of {label}: \"{ex}\"", "finding", [cite(hits[0], anchors)]))
                # The health evidence: what contradicts the suspected mechanism (its metric back to
                # baseline, its resource expanded), else the series and fields its signals tested
                # and found normal. Ruled out only with a ref from a source able to observe it.
                health = [h for _, hs in sorted(c.against, key=lambda sh: -sh[0].weight) for h in hs[:2]]
                # (Worded without a negation: the judge reads one as denying the quoted evidence.)
                word = ("已排除" if zh else "ruled out") if health else ("已检查" if zh else "checked")
                if not health and c.seen == 0:
                    health = [h for _, hs in sorted(c.near_misses, key=lambda sh: -sh[0].weight) for h in hs[:1]]
                if health and len(claims) < 9:
                    health = _distinct_first(health)[:4]
                    ex = _excerpt(health[0].text, [], health[0].spans)
                    text = f"{label} {word}：“{ex}”" if zh else f"{label} {word}: \"{ex}\""
                    observing = [h for h in health if observes(c.component, h.tool, h.kind, h.text)]
                    if not observing and c.against:
                        observing = [h for h in self._observing(c.component, c, None, observations) if h.key not in {x.key for x in health}][:2]
                    cids.append(add_claim(text, "finding", [cite(h, []) for h in (health + [o for o in observing if o not in health])][:8]))
                    if observing and (c.against or c.seen == 0):
                        status = "ruled_out"
                hypotheses.append({"statement": label, "component": c.component, "mechanism": c.mechanism, "status": status, "claim_ids": cids})
            if not any(c["kind"] == "finding" for c in claims):
                # Nothing any hypothesis names was seen: what the first looks showed is the health
                # evidence (the series the question is about, the latest entries).
                looked = self._first_refs(observations)
                if looked:
                    ex = _excerpt(looked[0].text, [], looked[0].spans)
                    add_claim(f"已检查：“{ex}”" if zh else f"Checked: \"{ex}\"", "finding", [cite(h, []) for h in looked])
            if best is None:
                limitations.append("知识库未返回可检验的假设" if zh else "The knowledge base returned no hypothesis that could be tested")
            elif best.seen == 0:
                limitations.append("候选假设的信号均未在证据中出现" if zh else "None of the candidate hypotheses' signals appeared in the evidence")
            else:
                limitations.append(
                    f"证据不足以区分候选原因（最强 {best.seen:g}，次强 {runner:g}）" if zh else f"The evidence does not single out one cause (strongest {best.seen:g}, runner-up {runner:g})"
                )
                lead = _label(best.component, best.mechanism, zh)
                for en, zh_text in missing:
                    limitations.append(f"{lead} 未确认：{zh_text}" if zh else f"{lead} not confirmed: {en}")
            summary = (
                "未发现足以确认根因的证据；已检查的信号见下，未命中的查询仅表示该查询没有匹配。"
                if zh
                else "No evidence strong enough to confirm a root cause was found; the signals checked are listed below, and a query with no match means only that the query found no match."
            )
            next_steps.append("扩大时间窗口或补充相关服务的日志与指标后重新诊断" if zh else "Widen the window or add logs and metrics of the services involved, then diagnose again")
        for o in observations:
            if len(claims) >= 12:
                break
            if o.tool != "lookup_knowledge" and o.ready and o.evidence_status == "NO_EVIDENCE" and o.args.get("query"):
                ref = next((r for r in o.refs if r.get("raw_path") == "$.no_evidence"), None)
                if ref is not None:
                    text = str(ref["text"])
                    ex = _excerpt(text, [])
                    add_claim(f"查询无匹配：“{ex}”" if zh else f"Query found no match: \"{ex}\"", "negative_observation", [{"invocation_id": o.invocation_id, "tool_name": o.tool, "raw_path": "$.no_evidence", "excerpt": ex}])
        refused = [o for o in observations if not o.ready]
        if refused:
            limitations.append(
                (f"{len(refused)} 次工具调用被拒绝或失败" if zh else f"{len(refused)} tool call(s) were refused or failed")
                + f" ({', '.join(sorted({str(o.code) for o in refused}))})"
            )
        plan = []
        for o in observations:
            why = "broad first look" if o.step == 0 and o.tool != "lookup_knowledge" else ("knowledge lookup" if o.tool == "lookup_knowledge" else "check the signals of the candidate hypotheses")
            plan.append({"step": max(o.step, 0), "hypothesis": best.key if best else "", "tool": o.tool, "why": why})
        out: dict[str, Any] = {
            "answer_version": "diagnosis_draft_v1",
            "summary": summary,
            "root_cause": root_cause,
            "claims": claims,
            "hypotheses": hypotheses[:20],
            "plan": plan[:30],
            "recovery": recovery,
            "limitations": limitations[:20],
            "next_steps": next_steps[:20],
        }
        if contributing_out and "contributing_causes" in DiagnosisDraft.model_fields:
            out["contributing_causes"] = contributing_out
        return out

    def _unchecked_causes(self, best: Candidate, candidates: list[Candidate]) -> list[Candidate]:
        """When `best` is a symptom mechanism (the vocabulary's `symptoms`): the candidates that
        would explain it (they name it in `explains`, or its cards name them as alternatives) and
        that are not a symptom themselves, with a discriminating signal not yet checked."""
        if best.key not in symptoms():
            return []
        return [
            c
            for c in candidates
            if c is not best
            and c.key not in symptoms()
            and (best.key in c.explains or c.key in best.distinguishes_from)
            and any(s.discriminating and not s.rules_out and self._asks(s, self._offered) for s in c.unobservable)
        ]

    @staticmethod
    def _related(best: Candidate, candidates: list[Candidate]) -> list[str]:
        """The candidates that tell `best` apart: the alternatives its cards name, and those it
        explains or that explain it."""
        return [c.key for c in candidates if c is not best and (c.key in best.distinguishes_from or c.key in best.explains or best.key in c.explains)]

    def _declared(self, key: str, observations: list[Observation]) -> Candidate | None:
        """The alternative `key` as the cards that declare it describe it, scored on the
        observations (for what its signals tested and found normal, and what contradicts it)."""
        comp, _, mech = key.partition("/")
        out: dict[str, Candidate] = {}
        for card in self.kb.cards.values():
            for h in card.hypotheses:
                if (h.component, h.mechanism) == (comp, mech):
                    self._merge(out, h, card.id)
        c = out.get(key)
        if c is not None:
            self._score([c], observations)
        return c

    def _unchecked(self, key: str, alt: Candidate | None) -> list[Signal]:
        """The discriminating signals of the alternative `key` that no observation covered: those
        of its candidate, or, when its card was never looked up, of the cards that declare it."""
        if alt is not None:
            return [s for s in alt.unobservable if s.discriminating]
        comp, _, mech = key.partition("/")
        return [s for card in self.kb.cards.values() for h in card.hypotheses if (h.component, h.mechanism) == (comp, mech) for s in h.signals if s.discriminating]

    @staticmethod
    def _observing(component: str, best: Candidate, alt: Candidate | None, observations: list[Observation]) -> list[Hit]:
        """Up to 4 refs from sources able to observe `component` that are no signal of the
        alternative: the confirmed hypothesis's own evidence first, then any other runtime ref;
        `mock` data last."""
        against = {_record(h) for _, hs in (alt.hits if alt else []) for h in hs}
        out: list[Hit] = []
        pool = [h for _, hs in sorted(best.hits, key=lambda sh: -sh[0].weight) for h in hs]
        for o in observations:
            if o.tool == "lookup_knowledge" or not o.ready:
                continue
            for ref in o.refs:
                if ref.get("raw_path") == "$.no_evidence" or ref.get("instruction_like"):
                    continue
                pool.append(Hit(invocation_id=o.invocation_id, tool=o.tool, raw_path=str(ref.get("raw_path", "")), text=str(ref.get("text", "")), data_source=str(ref.get("data_source", o.data_source)), kind=o.kind, spans=ref_spans(ref)))
        for h in sorted(pool, key=lambda h: h.data_source == "mock"):
            if len(out) >= 4:
                break
            if h.key in {x.key for x in out} or _record(h) in against:
                continue
            if observes(component, h.tool, h.kind, h.text):
                out.append(h)
        return out

    @staticmethod
    def _first_refs(observations: list[Observation], n: int = 3) -> list[Hit]:
        """Up to `n` refs of the first runtime looks: each look's first ref (metric series
        first), runtime and not `mock` or instruction-like."""
        out: list[Hit] = []
        looks = sorted((o for o in observations if o.tool != "lookup_knowledge" and o.ready and o.step == 0), key=lambda o: o.tool != "query_metrics")
        for o in looks:
            for ref in o.refs:
                path = str(ref.get("raw_path", ""))
                if path == "$.no_evidence" or ref.get("instruction_like") or str(ref.get("data_source", o.data_source)) == "mock":
                    continue
                out.append(Hit(invocation_id=o.invocation_id, tool=o.tool, raw_path=path, text=str(ref.get("text", "")), data_source=str(ref.get("data_source", o.data_source)), kind=o.kind, spans=ref_spans(ref)))
                break
        return out[:n]

    @staticmethod
    def _card_hit(c: Candidate, observations: list[Observation]) -> Hit | None:
        for o in observations:
            if o.tool != "lookup_knowledge" or not o.ready:
                continue
            for ref in o.refs:
                m = _CARD_ID.match(str(ref.get("text", "")))
                if m and m.group(1) in c.cards:
                    return Hit(invocation_id=o.invocation_id, tool=o.tool, raw_path=str(ref["raw_path"]), text=str(ref["text"]), data_source=str(ref.get("data_source", "knowledge")))
        return None

    @staticmethod
    def _symptom(alert: dict[str, Any], observations: list[Observation], shown: set[tuple[str, str]]) -> list[tuple[str, Hit]]:
        """Error lines of the service in question, not quoted yet: the alert's service, else the
        service with the most ERROR/FATAL lines; up to 4, the most severe first."""
        lines: list[tuple[int, str, Hit]] = []
        seen: set[tuple[str, str]] = set(shown)
        for o in observations:
            if o.tool != "query_logs" or not o.ready:
                continue
            for r in o.refs:
                log = parse_log_ref(str(r.get("text", "")))
                key = (o.invocation_id, str(r.get("raw_path", "")))
                if log is None or log.level not in ("ERROR", "FATAL", "WARN") or key in seen:
                    continue
                seen.add(key)
                hit = Hit(invocation_id=o.invocation_id, tool=o.tool, raw_path=key[1], text=str(r["text"]), data_source=str(r.get("data_source", o.data_source)))
                lines.append((0 if log.level in ("ERROR", "FATAL") else 1, log.service, hit))
        if not lines:
            return []
        service = str(alert.get("service") or "")
        if not service:
            errors = [svc for sev, svc, _ in lines if sev == 0]
            service = max(dict.fromkeys(errors), key=errors.count) if errors else ""
        picked = sorted((ln for ln in lines if ln[1] == service), key=lambda ln: ln[0])
        return [(svc, h) for _, svc, h in picked[:4]]

    @staticmethod
    def _culprit_hit(c: Candidate) -> Hit | None:
        """The ref that names the culprit: of the hypothesis's `culprit` signals (heaviest first),
        the row ranking highest by the first numeric field its test bounds (the top statement by
        load, the client holding the most connections), else its first ref."""
        for s, hits in sorted(c.culprit_hits, key=lambda sh: -sh[0].weight):
            ranks = [k for k, v in (s.where or {}).items() if isinstance(v, str) and v.strip()[:1] in "<>"]
            if not ranks:
                return hits[0]

            def value(h: Hit, key: str = ranks[0]) -> float:
                row = row_of(h.tool, h.text) or {}
                num = as_number(row.get(key, ""))
                return num if num is not None else float("-inf")

            return max(hits, key=value)
        return None

    @staticmethod
    def _findings(key: str, observations: list[Observation]) -> list[tuple[dict[str, Any], list[Hit]]]:
        """The analyzers' findings that support `key`, each with the refs it names as hits."""
        out: list[tuple[dict[str, Any], list[Hit]]] = []
        for o in observations:
            if not o.ready:
                continue
            by_path = {str(r.get("raw_path")): r for r in o.refs}
            for f in o.findings:
                if key not in (f.get("supports") or []):
                    continue
                hits = [
                    Hit(invocation_id=o.invocation_id, tool=o.tool, raw_path=p, text=str(by_path[p].get("text", "")), data_source=str(by_path[p].get("data_source") or o.data_source), kind=o.kind, spans=ref_spans(by_path[p]))
                    for p in f.get("refs") or []
                    if p in by_path
                ]
                out.append((f, hits))
        return out

    @staticmethod
    def _own_row(findings: list[dict[str, Any]], observations: list[Observation]) -> Hit | None:
        """The session row of a blocking finding's root blocker: the row whose `pid` is the
        blocker and that waits on no one, from a `kind: activity` result when one has it."""
        pid = next((f["facts"]["pid"] for f in findings if f.get("finding") == "postgresql.blocking" and (f.get("facts") or {}).get("pid") is not None), None)
        if pid is None:
            return None
        best: Hit | None = None
        for o in observations:
            if o.tool != "inspect_postgres" or not o.ready:
                continue
            for r in o.refs:
                row = row_of(o.tool, str(r.get("text", ""))) if str(r.get("text", "")).startswith("{") else None
                if not isinstance(row, dict) or str(row.get("pid")) != str(pid) or row.get("blocking_pids"):
                    continue
                hit = Hit(invocation_id=o.invocation_id, tool=o.tool, raw_path=str(r.get("raw_path")), text=str(r.get("text", "")), data_source=str(r.get("data_source") or o.data_source), kind=o.kind, spans=ref_spans(r))
                if o.kind == "activity":
                    return hit
                best = best or hit
        return best

    @staticmethod
    def _describe_row(h: Hit) -> str:
        """A culprit as its ref shows it: a row by its identifying fields (statement, user, host,
        pid, client) and its figures; a log line by its service and message."""
        row = row_of(h.tool, h.text) if h.text.startswith("{") or h.tool == "inspect_redis" else None
        if isinstance(row, dict) and row:
            if row.get("blocking_pids"):
                blockers = row["blocking_pids"]
                return f"pid {blockers[0] if isinstance(blockers, list) else blockers} blocks pid {row.get('pid')} ({row.get('mode', 'lock')} {row.get('locktype', '')})".strip()
            names = [str(row[k]) for k in _CULPRIT_NAMES if row.get(k) not in (None, "", [])]
            figures = [f"{k}={row[k]}" for k, v in row.items() if k not in _CULPRIT_NAMES and isinstance(v, int | float) and not isinstance(v, bool)]
            text = "; ".join(names[:4]) or _excerpt(h.text, [])
            return (f"{text} ({', '.join(figures[:3])})" if figures else text)[:300]
        first = h.text.strip().splitlines()[0]
        log = parse_log_ref(first)
        return (f"{log.service}: {log.message}" if log and log.message else _excerpt(first, []))[:300]

    def _culprit(self, c: Candidate) -> str:
        hit = self._culprit_hit(c)
        if hit is not None:
            return self._describe_row(hit)
        for _, hits in sorted(c.hits, key=lambda sh: -sh[0].weight):
            for h in hits:
                if h.text.startswith("{"):
                    try:
                        row = json.loads(h.text)
                    except json.JSONDecodeError:
                        continue
                    if isinstance(row, dict) and row.get("blocking_pids"):
                        blockers = row["blocking_pids"]
                        return f"pid {blockers[0] if isinstance(blockers, list) else blockers} blocks pid {row.get('pid')} ({row.get('mode', 'lock')} {row.get('locktype', '')})".strip()
                    if isinstance(row, dict) and "pid" in row:
                        parts = [f"pid {row['pid']}"] + [f"{k}={row[k]}" for k in ("state", "application_name") if row.get(k) not in (None, "", [])]
                        return ", ".join(str(p) for p in parts)
        top = c.top_hits(1)
        if not top:
            return ""
        # A log line names its service and message; its timestamp, level, file and any stack trace are noise here.
        first = top[0].text.strip().splitlines()[0]
        log = parse_log_ref(first)
        return (f"{log.service}: {log.message}" if log and log.message else _excerpt(first, []))[:200]

    @staticmethod
    def _describe(s: Signal) -> str:
        what = ", ".join(signal_strings(s)) or (f"{s.field} {s.op} {s.value}" if s.field else (f"{s.metric} {s.trend}" if s.metric else json.dumps(s.where)))
        return f"{s.tool}{'/' + s.kind if s.kind else ''}: {what}"


class KnowledgeAnswerer:
    """The KNOWLEDGE_QUERY path's offline model: look the question up, answer citing the cards."""

    name = "offline-knowledge-v1"

    def __init__(self, language: str) -> None:
        self.zh = language == "zh"

    def step(self, request: ModelRequest) -> ModelTurn:
        question = _question(request)
        observations = observations_from(request.messages)
        if not observations and request.mode == "gather":
            return ModelTurn(tool_calls=[ToolCall(id="k0", name="lookup_knowledge", arguments={"query": question[:1000], "top_k": 3})])
        claims: list[dict[str, Any]] = []
        titles: list[str] = []
        for o in observations:
            if not o.ready:
                continue
            for ref in o.refs[:3]:
                path = str(ref.get("raw_path"))
                text = str(ref.get("text", ""))
                ex = _excerpt(text, [])
                if path == "$.no_evidence":
                    claims.append({"id": f"c{len(claims) + 1}", "text": (f"知识库没有匹配：“{ex}”" if self.zh else f"The knowledge base found no match: \"{ex}\""), "kind": "negative_observation", "citations": [{"invocation_id": o.invocation_id, "tool_name": o.tool, "raw_path": path, "excerpt": ex}]})
                    continue
                titles.append(text.split("]", 1)[-1].split(":", 1)[0].strip())
                claims.append({"id": f"c{len(claims) + 1}", "text": (f"知识卡片：“{ex}”" if self.zh else f"Knowledge card: \"{ex}\""), "kind": "finding", "citations": [{"invocation_id": o.invocation_id, "tool_name": o.tool, "raw_path": path, "excerpt": ex}]})
        if titles:
            summary = ("相关知识卡片：" if self.zh else "Relevant knowledge cards: ") + "; ".join(titles)
        else:
            summary = "知识库中没有覆盖这个问题的卡片。" if self.zh else "No knowledge card covers this question."
        return ModelTurn(draft={"answer_version": "diagnosis_draft_v1", "summary": summary, "root_cause": None, "claims": claims[:12]})
