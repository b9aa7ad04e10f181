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
from rootproof.kb.signals import as_number, norm, ref_matches

__all__ = ["Hit", "Observation", "evaluate_signal", "observations_from", "query_phrases", "ref_spans", "query_terms", "signal_strings"]

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


def ref_spans(ref: dict[str, Any]) -> tuple[tuple[int, int], ...]:
    """The untrusted spans an observed ref carries (malformed entries are dropped)."""
    out: list[tuple[int, int]] = []
    for span in ref.get("untrusted_spans") or ():
        if isinstance(span, list | tuple) and len(span) == 2 and all(isinstance(x, int) for x in span):
            out.append((int(span[0]), int(span[1])))
    return tuple(out)


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
        return fnmatch.fnmatch(norm(sig.metric or ""), norm(str(obs.args.get("metric", ""))).replace("\\*", "*")) or str(obs.args.get("metric")) in ("*", sig.metric)
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
            # Text that reads as instructions to an AI is never evidence of a mechanism.
            if ref.get("instruction_like"):
                continue
            spans = ref_spans(ref)
            if ref_matches(sig, obs.tool, obs.kind, path, text, spans):
                seen.add((obs.invocation_id, path))
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
    if hits and sig.any_:
        # Put first one hit for each alternative string, so the first few cited refs show every
        # form of the signal that occurred (e.g. both "connect() failed" and "no live upstreams").
        lead: list[Hit] = []
        for alt in sig.any_:
            h = next((h for h in hits if norm(alt) in norm(h.text) and h not in lead), None)
            if h is not None:
                lead.append(h)
        hits = lead + [h for h in hits if h not in lead]
    if hits:
        observable = True
    return observable, hits
