"""The plan: the first look (every system once, every target of it), then each step's calls: the
signals not yet observable, merged per tool and kind, the discriminating ones of the leader and
of what tells it apart first (a symptom's dependency first), knowledge lookups of what was seen,
within the run's budget."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from rootproof.agent.models.base import ToolCall
from rootproof.agent.models.evidence_view import (
    LOG_KINDS,
    Observation,
    query_terms,
    ref_spans,
    signal_strings,
    uncovered_metric_names,
)
from rootproof.boundary.provenance import outside_spans
from rootproof.evidence_sources import names_component
from rootproof.kb.signals import norm, row_of
from rootproof.tools.base import parse_since

if TYPE_CHECKING:
    from rootproof.kb.cards import Signal
from rootproof.diagnosis.candidates import Candidate
from rootproof.diagnosis.state import LOOKUP_TOP_K, MIN_RECORDS, PlannerState, _alert
from rootproof.diagnosis.wording import _label

ALERT_MARGIN = timedelta(minutes=10)


MAX_PHRASES = 8


STATE_VALUE_MAX = 40


BROAD = {
    "query_logs": {},
    "query_metrics": {"metric": "*"},
    "inspect_postgres": {"kind": "activity"},
    "inspect_redis": {"kind": "info"},
    "inspect_nginx": {"kind": "error_log"},
}


_STOP_CODES = {"SCOPE_SATURATED", "BUDGET_EXHAUSTED", "TOOL_NOT_ALLOWED", "CIRCUIT_OPEN"}


_EXCEPTION = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Exception|Error)\b")


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



class PlanStage(PlannerState):
    """The planner's plan stage (mixed into `EvidencePlanner`)."""

    def _asks(self, s: Signal, offered: set[str]) -> bool:
        """Whether a call can answer the signal: its tool is offered, with its kind (a tool's
        schema lists the kinds it has; a source without load breakdowns has no such kind)."""
        if s.tool not in offered:
            return False
        kinds = self._kinds.get(s.tool)
        return s.kind is None or kinds is None or s.kind in kinds

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
        # The leading hypothesis by weight, even when its evidence is all shared with an alternative;
        # not one whose evidence does not reach the impact seen (another database's trouble).
        best = next((c for c in ranked if c.key not in self._gaps), ranked[0]) if ranked else None
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
        # A hypothesis whose evidence does not reach the impact seen gets no more calls.
        pursue = [c for c in pursue if c.key not in self._gaps]
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
