"""What the offline planner knows, read back from the observations in its conversation.

The planner reads runtime evidence only through model observations, as an LLM would: this
module parses the conversation (its own tool calls and the observations returned) into
`Observation`s and evaluates card signals against their refs.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from typing import Any

from rootproof.agent.models.base import AssistantMessage, Message, ToolResultMessage
from rootproof.kb.cards import Signal
from rootproof.tools.refs import fold_text

__all__ = ["Hit", "Observation", "evaluate_signal", "observations_from", "query_phrases", "query_terms", "signal_strings"]

LOG_KINDS = {"inspect_postgres": {"log"}, "inspect_redis": {"log", "slowlog"}, "inspect_nginx": {"error_log", "access_log"}}


def _n(text: str) -> str:
    return " ".join(fold_text(text).split())


@dataclass(frozen=True, kw_only=True)
class Hit:
    """A ref that passed a signal's test."""

    invocation_id: str
    tool: str
    raw_path: str
    text: str
    data_source: str


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
    code: str | None = None
    step: int = 0
    window: dict[str, str] | None = None
    """The time window the tool searched ({from, to}), when it has one."""

    @property
    def kind(self) -> str | None:
        """The inspector kind, if any."""
        k = self.args.get("kind")
        return str(k) if k else None

    @property
    def ready(self) -> bool:
        """Executed and returned."""
        return self.status == "READY"

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
                    code=obs.get("code"),
                    step=st,
                    window=obs.get("window") if isinstance(obs.get("window"), dict) else None,
                )
            )
    return out


def signal_strings(sig: Signal) -> list[str]:
    """The strings of a match/any test."""
    return list(sig.match or sig.any_ or [])


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
                if isinstance(x, str) and text and text != "nonempty" and text[:1] not in "<>!=" and _num(text) is None:
                    out.append(text)
        return out
    return signal_strings(sig)


_PHRASE = re.compile(r'"([^"]+)"|(\S+)')


def query_phrases(query: str) -> set[str]:
    """Terms and phrases of a query, normalised."""
    return {_n(a or b) for a, b in _PHRASE.findall(query or "")}


def _covers(obs: Observation, sig: Signal) -> bool:
    """Whether `obs` answers `sig` without a new call (same tool/kind, nothing omitted, query covers it)."""
    if obs.tool != sig.tool or not obs.complete:
        return False
    if sig.kind is not None and obs.kind != sig.kind:
        return False
    if sig.tool == "query_metrics":
        return fnmatch.fnmatch(_n(sig.metric or ""), _n(str(obs.args.get("metric", ""))).replace("\\*", "*")) or str(obs.args.get("metric")) in ("*", sig.metric)
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
        wanted = query_phrases(sig.query) if sig.query else {_n(s) for s in query_terms(sig)}
        return bool(wanted) and bool(wanted & phrases)
    return True


_DURATION = re.compile(r"^(?:(\d+) days? )?(\d+):(\d{2}):(\d{2}(?:\.\d+)?)$")


def _num(v: Any) -> float | None:
    """A number, a percentage, or a duration (`00:24:32.118`, `1 day 02:00:00`) in seconds."""
    text = str(v).strip()
    try:
        return float(text.rstrip("%"))
    except ValueError:
        pass
    m = _DURATION.match(text)
    if m:
        days = int(m.group(1) or 0)
        return days * 86400 + int(m.group(2)) * 3600 + int(m.group(3)) * 60 + float(m.group(4))
    return None


def _cmp(actual: Any, op: str, expected: Any) -> bool:
    a, e = _num(actual), _num(expected)
    if op == "contains":
        return _n(str(expected)) in _n(str(actual))
    if op in ("eq", "ne"):
        same = (a == e) if a is not None and e is not None else _n(str(actual)) == _n(str(expected))
        return same if op == "eq" else not same
    if a is None or e is None:
        return False
    return {"gt": a > e, "ge": a >= e, "lt": a < e, "le": a <= e}[op]


def _where_ok(row: dict[str, Any], cond: dict[str, Any]) -> bool:
    for key, want in cond.items():
        if key not in row:
            return False
        have = row[key]
        if isinstance(want, list):
            if not any(_cmp(have, "eq", w) for w in want):
                return False
            continue
        if isinstance(want, str):
            w = want.strip()
            if w == "nonempty":
                if not have:
                    return False
                continue
            for op, name in ((">=", "ge"), ("<=", "le"), ("!=", "ne"), (">", "gt"), ("<", "lt")):
                if w.startswith(op):
                    if not _cmp(have, name, w[len(op):].strip()):
                        return False
                    break
            else:
                if not _cmp(have, "eq", w):
                    return False
            continue
        if not _cmp(have, "eq", want):
            return False
    return True


def _row_of(tool: str, text: str) -> dict[str, Any] | None:
    if text.startswith("{"):
        try:
            row = json.loads(text)
            return row if isinstance(row, dict) else None
        except json.JSONDecodeError:
            return None
    if tool == "inspect_redis":
        return dict(p.split("=", 1) for p in text.split() if "=" in p)
    return None


_SERIES = re.compile(r"^(?P<metric>[^\s{]+)(?P<labels>\{[^}]*\})? first=(?P<first>\S+) last=(?P<last>\S+) min=(?P<min>\S+) max=(?P<max>\S+) delta=(?P<delta>\S+) mean=(?P<mean>\S+)")


def _field_value(path: str, text: str) -> tuple[str, str] | None:
    name = path.rsplit(".", 1)[-1].strip("[]'")
    for sep in (" = ", ":", ": "):
        if text.startswith(name + sep):
            return name, text[len(name) + len(sep):].strip()
    return None


def evaluate_signal(sig: Signal, observations: list[Observation]) -> tuple[bool, list[Hit]]:
    """(observable, hits): observable when some observation covers the signal; hits are refs that pass."""
    observable = False
    hits: list[Hit] = []
    seen: set[tuple[str, str]] = set()
    for obs in observations:
        if obs.tool != sig.tool or not obs.ready:
            continue
        if sig.kind is not None and obs.kind != sig.kind:
            continue
        if _covers(obs, sig):
            observable = True
        for ref in obs.refs:
            path, text = str(ref.get("raw_path", "")), str(ref.get("text", ""))
            if path == "$.no_evidence" or (obs.invocation_id, path) in seen:
                continue
            if _passes(sig, obs.tool, path, text):
                seen.add((obs.invocation_id, path))
                hits.append(Hit(invocation_id=obs.invocation_id, tool=obs.tool, raw_path=path, text=text, data_source=str(ref.get("data_source", obs.data_source))))
    if hits and sig.any_:
        # Put first one hit for each alternative string, so the first few cited refs show every
        # form of the signal that occurred (e.g. both "connect() failed" and "no live upstreams").
        lead: list[Hit] = []
        for alt in sig.any_:
            h = next((h for h in hits if _n(alt) in _n(h.text) and h not in lead), None)
            if h is not None:
                lead.append(h)
        hits = lead + [h for h in hits if h not in lead]
    if hits:
        observable = True
    return observable, hits


def _passes(sig: Signal, tool: str, path: str, text: str) -> bool:
    test = sig.test
    nt = _n(text)
    if test == "match":
        return all(_n(s) in nt for s in sig.match or [])
    if test == "any":
        return any(_n(s) in nt for s in sig.any_ or [])
    if test == "where":
        if not path.startswith("$.rows["):
            return False
        row = _row_of(tool, text)
        return row is not None and _where_ok(row, dict(sig.where or {}))
    if test == "field":
        fv = _field_value(path, text)
        return fv is not None and _n(fv[0]) == _n(sig.field or "") and sig.op is not None and _cmp(fv[1], sig.op, sig.value)
    m = _SERIES.match(text)
    if not m or not fnmatch.fnmatch(_n(m.group("metric")), _n(sig.metric or "")):
        return False
    if sig.labels:
        labels = m.group("labels") or ""
        if not all(f'{k}="{v}"' in labels for k, v in sig.labels.items()):
            return False
    thr = sig.threshold or 0.0
    val = {k: _num(m.group(k)) for k in ("delta", "max", "min")}
    if sig.trend == "rises":
        return val["delta"] is not None and val["delta"] > thr
    if sig.trend == "falls":
        return val["delta"] is not None and val["delta"] < -thr
    if sig.trend == "high":
        return val["max"] is not None and val["max"] >= thr
    return val["min"] is not None and val["min"] <= thr
