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

from collections.abc import Iterator

from rootproof.agent.models.evidence_view import Observation, evaluate_signal
from rootproof.diagnosis.findings import symptoms
from rootproof.kb.cards import Card, Hypothesis

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
    wanted = [k for k in supported(runtime) if k not in shown]
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
