"""Candidates from evidence: which hypotheses of the catalogue the observations show.

The question and the alert only order the work (their knowledge lookup comes first); they never
decide which hypotheses exist. A hypothesis of any card is a candidate when an analyzer's
finding supports it, or when one of its discriminating signals of weight `EVIDENCE_WEIGHT` or
more that tests what a server or client said (a log line's words) matches a runtime record
(never knowledge, never text that reads as instructions, never untrusted spans alone:
`evaluate_signal` applies those rules). A symptom mechanism (the vocabulary's `symptoms`) is
never a candidate by its own evidence: the dependency it points at is looked at first. The
verdict's gates still decide whether a candidate is a root cause.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rootproof.agent.models.evidence_view import (
    Hit,
    Observation,
    evaluate_signal,
    near_misses,
)
from rootproof.diagnosis.findings import entry, symptoms
from rootproof.evidence_sources import from_component

if TYPE_CHECKING:
    from rootproof.kb.cards import Hypothesis, Signal
from rootproof.diagnosis.state import CONTEXT_WEIGHT, MIN_RECORDS, ROOT_THRESHOLD, PlannerState, _record
from rootproof.kb.cards import Card, Hypothesis
from rootproof.kb.signals import row_of

__all__ = ["EVIDENCE_WEIGHT", "shown_by_evidence", "supported"]

EVIDENCE_WEIGHT = 2.0
"""The least weight of a discriminating signal that makes its hypothesis a candidate by itself."""


def supported(observations: list[Observation]) -> list[str]:
    """The `component/mechanism` pairs the analyzers' findings support, in the order seen (a
    symptom's finding orders the work, it makes no candidate)."""
    return list(dict.fromkeys(str(k) for o in observations if o.ready for f in o.findings if not f.get("symptom") for k in f.get("supports") or []))


def shown_by_evidence(cards: dict[str, Card], observations: list[Observation], known: set[str]) -> Iterator[tuple[Hypothesis, str]]:
    """(hypothesis, card id) for every hypothesis not in `known` (`component/mechanism`) that a
    finding supports or a runtime observation shows by a discriminating signal; each hypothesis
    once (findings first, then cards in id order)."""
    runtime = [o for o in observations if o.tool != "lookup_knowledge" and o.ready]
    tools = {o.tool for o in runtime}
    if not runtime:
        return
    shown = set(known)
    # A finding's mechanism brings every card's hypothesis of it (their signals, what they
    # explain), even when the question's cards proposed it already.
    wanted = supported(runtime)
    for key in wanted:
        for card_id in sorted(cards):
            for h in cards[card_id].hypotheses:
                if f"{h.component}/{h.mechanism}" == key:
                    yield h, card_id
        shown.add(key)
    symptom = symptoms()
    for card_id in sorted(cards):
        for h in cards[card_id].hypotheses:
            key = f"{h.component}/{h.mechanism}"
            if key in shown or key in symptom:
                continue
            for s in h.signals:
                # What a server or a client said (a log line's words), not a reading: a counter since
                # start or a level is the analyzers' to judge against its limit or baseline.
                said = bool(s.match or s.any_) and not s.where and not s.field
                if said and s.discriminating and not s.rules_out and s.weight >= EVIDENCE_WEIGHT and s.tool in tools and evaluate_signal(s, runtime)[1]:
                    shown.add(key)
                    yield h, card_id
                    break


_CARD_ID = re.compile(r"^\[([a-z0-9-]+)\]")


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
                refs = {str(r.get("raw_path")): r for r in o.refs}
                hits = [o.hit(refs[str(p)]) for p in f.get("refs") or [] if str(p) in refs]
                out[code] = (code, {_record(h) for h in hits}, weight)
    return list(out.values())


def _finding_meaning(observations: list[Observation]) -> dict[tuple[str, str], tuple[str, ...]]:
    """(invocation id, raw path) → the mechanisms a fault's finding about a subject (a root
    blocker, a limit reached) says the ref shows."""
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    blockers: dict[str, tuple[str, ...]] = {}
    for o in observations:
        for f in o.findings:
            supports = tuple(str(k) for k in f.get("supports") or [])
            # A symptom's refs are evidence for what causes it too: only a fault's finding claims them.
            if not supports or not f.get("subject") or f.get("symptom"):
                continue
            for p in f.get("refs") or []:
                out[(o.invocation_id, str(p))] = tuple(dict.fromkeys(out.get((o.invocation_id, str(p)), ()) + supports))
            # The subject's own session rows in any PostgreSQL result (its activity row as well as
            # its granted locks) mean the same.
            pid = (f.get("facts") or {}).get("pid")
            if pid is not None:
                blockers[str(pid)] = tuple(dict.fromkeys(blockers.get(str(pid), ()) + supports))
    for o in observations:
        if o.tool != "inspect_postgres" or not blockers:
            continue
        for r in o.refs:
            row = row_of(o.tool, str(r.get("text", ""))) if str(r.get("text", "")).startswith("{") else None
            if isinstance(row, dict) and str(row.get("pid")) in blockers and not row.get("blocking_pids"):
                key = (o.invocation_id, str(r.get("raw_path")))
                out[key] = tuple(dict.fromkeys(out.get(key, ()) + blockers[str(row.get("pid"))]))
    return out


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



class CandidateStage(PlannerState):
    """The planner's candidates stage (mixed into `EvidencePlanner`): the cards the lookup returned,
    then what the evidence shows; each scored on the observations."""

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
        # What an analyzer has read a ref to be (the root blocker of a lock, a limit reached) is
        # its meaning: that ref is evidence only for the mechanisms the finding supports, never
        # for a rival's signal (the blocker's idle transaction is not a pool's leaked connection).
        meaning = _finding_meaning(observations)
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
                hits = [h for h in hits if c.key in meaning.get(h.key, (c.key,))]
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
            # (Its own evidence must stand without a single planted line: state an analyzer read
            # now, or discriminating evidence on two records.)
            told = {_record(h) for s, hs in c.hits if s.discriminating for h in hs}
            if c.strong and c.own >= ROOT_THRESHOLD and (c.finding_weight > 0 or len(told) >= MIN_RECORDS):
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
