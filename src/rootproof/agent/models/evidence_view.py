"""What the offline planner knows, read back from the observations in its conversation.

The planner reads runtime evidence only through model observations, as an LLM would: this
module parses the conversation (its own tool calls and the observations returned) into
`Observation`s and evaluates card signals against their refs.
"""

from __future__ import annotations

import fnmatch
import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from rootproof.agent.models.base import AssistantMessage, Message, ToolResultMessage
from rootproof.kb.cards import Signal
from rootproof.kb.signals import as_number, norm, ref_matches, row_of

__all__ = [
    "Hit",
    "Observation",
    "evaluate_signal",
    "metric_style",
    "metric_styles_seen",
    "near_misses",
    "observations_from",
    "query_phrases",
    "query_terms",
    "ref_spans",
    "signal_strings",
    "uncovered_metric_names",
]

LOG_KINDS = {"inspect_postgres": {"log"}, "inspect_redis": {"log", "slowlog"}, "inspect_nginx": {"error_log", "access_log"}}


@dataclass(frozen=True, kw_only=True)
class Hit:
    """A ref that passed a signal's test."""

    invocation_id: str
    tool: str
    raw_path: str
    text: str
    data_source: str
    kind: str | None = None
    """The inspector kind of the call that returned the ref, if any."""
    spans: tuple[tuple[int, int], ...] = ()
    """The ref's untrusted spans (what an outsider wrote), as the observation carries them."""

    @property
    def key(self) -> tuple[str, str]:
        """(invocation id, raw path): which ref this is."""
        return (self.invocation_id, self.raw_path)


@dataclass(kw_only=True)
class Observation:
    """One tool call of this conversation and what came back."""

    tool: str
    args: dict[str, Any]
    invocation_id: str = ""
    status: str = ""
    evidence_status: str = ""
    data_source: str = ""
    refs: list[dict[str, Any]] = field(default_factory=list)
    omitted: int = 0
    total_matches: int | None = None
    """Matches in all (a paged tool's `total_matches`), when the observation gives it."""
    code: str | None = None
    step: int = 0
    window: dict[str, str] | None = None
    """The time window the tool searched ({from, to}), when it has one."""
    findings: list[dict[str, Any]] = field(default_factory=list)
    """What the analyzers found in the whole result (`rootproof.diagnosis.findings`)."""

    @property
    def kind(self) -> str | None:
        """The inspector kind, if any."""
        k = self.args.get("kind")
        return str(k) if k else None

    @property
    def ready(self) -> bool:
        """Executed and returned."""
        return self.status == "READY"

    def hit(self, ref: dict[str, Any]) -> Hit:
        """One of its refs as a `Hit` (its kind, its source, its untrusted spans)."""
        return Hit(
            invocation_id=self.invocation_id,
            tool=self.tool,
            raw_path=str(ref.get("raw_path", "")),
            text=str(ref.get("text", "")),
            data_source=str(ref.get("data_source") or self.data_source),
            kind=self.kind,
            spans=ref_spans(ref),
        )

    @property
    def complete(self) -> bool:
        """READY with nothing omitted."""
        return self.ready and self.omitted == 0


def observations_from(messages: list[Message]) -> list[Observation]:
    """Pair each tool call with its observation."""
    calls: dict[str, tuple[str, dict[str, Any], int]] = {}
    out: list[Observation] = []
    step = -1
    for m in messages:
        if isinstance(m, AssistantMessage):
            if m.tool_calls:
                step += 1
            for c in m.tool_calls:
                args = c.arguments if isinstance(c.arguments, dict) else {}
                calls[c.id] = (c.name, args, step)
        elif isinstance(m, ToolResultMessage):
            name, args, st = calls.get(m.tool_call_id, (m.name, {}, step))
            try:
                obs = json.loads(m.content)
            except json.JSONDecodeError:
                obs = {}
            out.append(
                Observation(
                    tool=name,
                    args=args,
                    invocation_id=str(obs.get("invocation_id", "")),
                    status=str(obs.get("status", "")),
                    evidence_status=str(obs.get("evidence_status", "")),
                    data_source=str(obs.get("data_source", "")),
                    refs=list(obs.get("refs", [])),
                    omitted=int(obs.get("omitted", 0) or 0),
                    total_matches=obs["total_matches"] if isinstance(obs.get("total_matches"), int) else None,
                    code=obs.get("code"),
                    step=st,
                    window=obs.get("window") if isinstance(obs.get("window"), dict) else None,
                    findings=[f for f in obs.get("findings") or [] if isinstance(f, dict)],
                )
            )
    return out


def ref_spans(ref: dict[str, Any]) -> tuple[tuple[int, int], ...]:
    """The untrusted spans an observed ref carries (malformed entries are dropped)."""
    out: list[tuple[int, int]] = []
    for span in ref.get("untrusted_spans") or ():
        if isinstance(span, list | tuple) and len(span) == 2 and all(isinstance(x, int) for x in span):
            out.append((int(span[0]), int(span[1])))
    return tuple(out)


def signal_strings(sig: Signal) -> list[str]:
    """The strings of a match/any test, each followed by its aliases."""
    return [a for s in sig.match or sig.any_ or [] for a in sig.spellings(s)]


def metric_style(name: str) -> str:
    """How a metric name is spelled: `path` (Cloud Monitoring `…/database/cpu/utilization`),
    `dotted` (Datadog, New Relic, Performance Insights `db.load.avg`), `camel` (CloudWatch
    `CPUUtilization`) or `snake` (Prometheus exporters, Azure Monitor)."""
    bare = name.replace("*", "").replace("?", "")
    if "/" in bare:
        return "path"
    if "." in bare:
        return "dotted"
    if "_" not in bare and any(ch.isupper() for ch in bare):
        return "camel"
    return "snake"


_SERIES_NAME = re.compile(r"^([^\s{]+)(?:\{[^}]*\})? first=")


def metric_styles_seen(observations: list[Observation]) -> set[str]:
    """The spellings of the metric series the observations returned (empty when none came back)."""
    out: set[str] = set()
    for obs in observations:
        if obs.tool != "query_metrics" or not obs.ready:
            continue
        for ref in obs.refs:
            m = _SERIES_NAME.match(str(ref.get("text", "")))
            if m:
                out.add(metric_style(m.group(1)))
    return out


def metric_names_to_check(sig: Signal, observations: list[Observation]) -> list[str]:
    """The names of a metric signal worth asking for here: every name spelled the way this
    environment's series are (all of them before any series came back), canonical first."""
    names = [n for n, _ in sig.metric_names()]
    styles = metric_styles_seen(observations)
    if not styles:
        return names
    return [n for n in names if metric_style(n) in styles]


def query_terms(sig: Signal) -> list[str]:
    """What a `query` must ask for so that a filtered look can answer the signal: its strings, the
    field it tests, or the literal values of its row conditions (not numbers or comparisons)."""
    if sig.field:
        return [sig.field]
    if sig.where:
        out: list[str] = []
        for v in sig.where.values():
            for x in v if isinstance(v, list) else [v]:
                text = str(x).strip()
                if isinstance(x, str) and text and text != "nonempty" and text[:1] not in "<>!=" and as_number(text) is None:
                    out.append(text)
        return out
    return signal_strings(sig)


_PHRASE = re.compile(r'"([^"]+)"|(\S+)')


def query_phrases(query: str) -> set[str]:
    """Terms and phrases of a query, normalised."""
    return {norm(a or b) for a, b in _PHRASE.findall(query or "")}


def _covers(obs: Observation, sig: Signal) -> bool:
    """Whether `obs` answers `sig` without a new call (same tool/kind, nothing omitted, query covers it)."""
    if obs.tool != sig.tool or not obs.complete:
        return False
    if sig.kind is not None and obs.kind != sig.kind:
        return False
    if sig.tool == "query_metrics":
        return _covers_metric(obs, sig.metric or "")
    is_log_like = sig.tool == "query_logs" or (sig.kind in LOG_KINDS.get(sig.tool, set()))
    q = str(obs.args.get("query", "") or "")
    if is_log_like or q:
        if sig.tool == "query_logs":
            if sig.scope and obs.args.get("scope", "ALL") not in ("ALL", sig.scope):
                return False
            # A look narrowed to one service or a minimum level does not cover every entry.
            if obs.args.get("service") or (obs.args.get("level") and obs.args.get("level") != sig.level):
                return False
        if not q.strip():
            return True
        phrases = query_phrases(q)
        wanted = query_phrases(sig.query) if sig.query else {norm(s) for s in query_terms(sig)}
        return bool(wanted) and bool(wanted & phrases)
    return True


def _table(obs: Observation) -> list[dict[str, Any]]:
    """The table rows an observation returned."""
    rows: list[dict[str, Any]] = []
    for ref in obs.refs:
        if str(ref.get("raw_path", "")).startswith("$.rows["):
            row = row_of(obs.tool, str(ref.get("text", "")))
            if row is not None:
                rows.append(row)
    return rows


def _covers_metric(obs: Observation, name: str) -> bool:
    """Whether a complete `query_metrics` observation asked for (at least) the series `name` names."""
    if obs.tool != "query_metrics" or not obs.complete:
        return False
    asked = str(obs.args.get("metric", ""))
    return asked in ("*", name) or fnmatch.fnmatch(norm(name), norm(asked))


def uncovered_metric_names(sig: Signal, observations: list[Observation]) -> list[str]:
    """The names of a metric signal (canonical and aliases, as `metric_names_to_check` picks
    them) that no complete observation asked for yet."""
    return [n for n in metric_names_to_check(sig, observations) if not any(_covers_metric(o, n) for o in observations)]


_MEMO_SIZE = 65536
"""(invocation, signal) pairs whose test `_observation_hits` remembers (a run's planner tests
the same pairs at every step: the observations of earlier steps do not change)."""
_memo: OrderedDict[tuple[str, int, str | None, int], tuple[Signal, bool, tuple[Hit, ...]]] = OrderedDict()
_memo_lock = threading.Lock()


def _observation_hits(sig: Signal, obs: Observation) -> tuple[bool, tuple[Hit, ...]]:
    """(covers, hits) of one signal on one READY observation of its tool and kind, remembered
    per invocation (ids are unique per call; the signal object itself is checked, not only its id)."""
    key = (obs.invocation_id, id(sig), obs.kind, len(obs.refs))
    if obs.invocation_id:
        with _memo_lock:
            got = _memo.get(key)
            if got is not None and got[0] is sig:
                _memo.move_to_end(key)
                return got[1], got[2]
    covers = sig.tool != "query_metrics" and _covers(obs, sig)
    # The rows of the whole result, for conditions on a row's share of its column (only when
    # nothing was omitted: a share of what was shown would be a guess).
    table = _table(obs) if sig.where and obs.complete else None
    hits: list[Hit] = []
    seen: set[str] = set()
    for ref in obs.refs:
        path, text = str(ref.get("raw_path", "")), str(ref.get("text", ""))
        if path == "$.no_evidence" or path in seen:
            continue
        # Text that reads as instructions to an AI is never evidence of a mechanism.
        if ref.get("instruction_like"):
            continue
        spans = ref_spans(ref)
        if ref_matches(sig, obs.tool, obs.kind, path, text, spans, table):
            seen.add(path)
            hits.append(
                Hit(
                    invocation_id=obs.invocation_id,
                    tool=obs.tool,
                    raw_path=path,
                    text=text,
                    data_source=str(ref.get("data_source", obs.data_source)),
                    kind=obs.kind,
                    spans=spans,
                )
            )
    out = (covers, tuple(hits))
    if obs.invocation_id:
        with _memo_lock:
            _memo[key] = (sig, *out)
            if len(_memo) > _MEMO_SIZE:
                _memo.popitem(last=False)
    return out


def evaluate_signal(sig: Signal, observations: list[Observation]) -> tuple[bool, list[Hit]]:
    """(observable, hits): observable when some observation covers the signal (for a metric, each
    of its names spelled as this environment spells them); hits are refs that pass."""
    if sig.tool == "query_metrics":
        observable = any(o.tool == "query_metrics" and o.ready for o in observations) and not uncovered_metric_names(sig, observations)
    else:
        observable = False
    hits: list[Hit] = []
    seen: set[tuple[str, str]] = set()
    for obs in observations:
        if obs.tool != sig.tool or not obs.ready:
            continue
        if sig.kind is not None and obs.kind != sig.kind:
            continue
        covers, found = _observation_hits(sig, obs)
        observable = observable or covers
        for one in found:
            if one.key not in seen:
                seen.add(one.key)
                hits.append(one)
    if hits and sig.any_:
        # Put first one hit for each alternative string, so the first few cited refs show every
        # form of the signal that occurred (e.g. both "connect() failed" and "no live upstreams").
        lead: list[Hit] = []
        for alt in sig.any_:
            h = next((h for h in hits if any(norm(a) in norm(h.text) for a in sig.spellings(alt)) and h not in lead), None)
            if h is not None:
                lead.append(h)
        hits = lead + [h for h in hits if h not in lead]
    if hits:
        observable = True
    elif sig.tool == "query_metrics" and not observable:
        # A series under one of its names was seen and tested: the signal was looked at, whatever
        # other names it has.
        globs = [norm(n) for n, _ in sig.metric_names()]
        observable = any(
            (m := _SERIES_NAME.match(str(ref.get("text", "")))) is not None and any(fnmatch.fnmatch(norm(m.group(1)), g) for g in globs)
            for obs in observations
            if obs.tool == "query_metrics" and obs.ready
            for ref in obs.refs
        )
    return observable, hits


def near_misses(sig: Signal, observations: list[Observation]) -> list[Hit]:
    """The refs a metric or field signal tested and found normal: series under one of its names
    whose summary fails the trend test, or the named field whose value fails the comparison.
    What a draft cites to show that the signal was looked at and did not hold."""
    if sig.tool == "query_metrics":
        low = float("-inf")
        renamed = {k: [a.model_copy(update={"threshold": low}) for a in v] for k, v in sig.aliases.items()}
        probe = sig.model_copy(update={"trend": "high", "threshold": low, "aliases": renamed})
    elif sig.field is not None:
        probe = sig.model_copy(update={"op": "ne", "value": "\x00"})
    else:
        return []
    out: list[Hit] = []
    for obs in observations:
        if obs.tool != sig.tool or not obs.ready or (sig.kind is not None and obs.kind != sig.kind):
            continue
        for ref in obs.refs:
            path, text = str(ref.get("raw_path", "")), str(ref.get("text", ""))
            if path == "$.no_evidence" or ref.get("instruction_like"):
                continue
            spans = ref_spans(ref)
            if ref_matches(probe, obs.tool, obs.kind, path, text, spans) and not ref_matches(sig, obs.tool, obs.kind, path, text, spans):
                out.append(Hit(invocation_id=obs.invocation_id, tool=obs.tool, raw_path=path, text=text, data_source=str(ref.get("data_source", obs.data_source)), kind=obs.kind, spans=spans))
    return out
