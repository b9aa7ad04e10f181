"""The verdict: which candidate is the root cause, by weight, margin and the gates the
EvidenceGuard applies (two independent records, one from the component, a signal that tells it
apart), a symptom yielding to the fault of its dependency, impact, and the contributing causes
confirmed on independent evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rootproof.diagnosis.findings import explains, symptoms
from rootproof.diagnosis.reach import unreached
from rootproof.kb.signals import ref_matches

if TYPE_CHECKING:
    pass
from rootproof.diagnosis.candidates import Candidate, _from_component
from rootproof.diagnosis.state import (
    CONTEXT_WEIGHT,
    MARGIN,
    MIN_RECORDS,
    ROOT_THRESHOLD,
    PlannerState,
    _record,
)
from rootproof.evidence_sources import observes


class VerdictStage(PlannerState):
    """The planner's verdict stage (mixed into `EvidencePlanner`)."""

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
        # An analyzer's finding of weight 2 or more (a blocking tree, a limit reached, statements
        # cancelled while they waited for a row lock) reads the server's state for this mechanism
        # alone: it tells the hypothesis apart as a discriminating signal does.
        told = c.finding_weight >= 2 or any(s.discriminating for s, _ in scored)
        shared = bool(hits) and bool(c.distinguishes_from) and not told
        if shared:
            shared = all(any(ref_matches(a, h.tool, h.kind, h.raw_path, h.text, h.spans) for a in alt_signals) for h in hits)
        if shared:
            names = ", ".join(a.replace("/", " ") for a in alts if any(ref_matches(s, h.tool, h.kind, h.raw_path, h.text, h.spans) for s in by_key[a].signals for h in hits))
            missing.append((f"every signal seen is shared with {names}; none tells it apart", f"所见信号均与 {names} 共有，没有能区分它们的信号"))
        elif hits and not told:
            # A symptom (an exhausted pool's timeouts) is never enough while a discriminating
            # signal of a cause it is told apart from, or that explains it, is seen (an unknown host).
            rivals = [k for k in (*alts, *(o.key for o in by_key.values() if c.key in o.explains)) if k != c.key]
            seen_apart = [k for k in dict.fromkeys(rivals) if any(s.discriminating and s.weight >= CONTEXT_WEIGHT for s, _ in by_key[k].hits)]
            if seen_apart:
                names = ", ".join(k.replace("/", " ") for k in seen_apart)
                missing.append((f"a discriminating signal of {names} is seen and none of its own", f"已见 {names} 的区分信号，而没有它自己的区分信号"))
                shared = True
        return missing, shared

    @staticmethod
    def _own_ground(c: Candidate) -> bool:
        """Whether `c` is seen in its own right, enough to take the lead from what it explains: state
        an analyzer read (a finding with a weight), or discriminating evidence on two records from
        a source that observes its component (not one line in another service's log)."""
        if c.finding_weight > 0:
            return True
        own = {_record(h) for s, hs in c.hits if s.discriminating and s.weight >= CONTEXT_WEIGHT for h in hs if observes(c.component, h.tool, h.kind, h.text)}
        return len(own) >= MIN_RECORDS

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
        # A hypothesis whose evidence is about another database than the impact seen (a shared
        # server's neighbour) does not contend: it cannot be the root cause of what went wrong.
        self._gaps = {}
        for c in ranked:
            if c.seen > 0 and c.key not in symptoms():
                gap = unreached([h for s, hs in c.hits if s.weight >= CONTEXT_WEIGHT for h in hs], self._observations, self._alerted)
                if gap is not None:
                    self._gaps[c.key] = gap
        contenders = [c for c in ranked if not gates.get(c.key, ([], False))[1] and c.key not in self._gaps]
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
        # So does any leader a cause's cards say that cause explains (a pool's leak warnings, by
        # the lock its requests waited on), when that cause is seen in its own right.
        if best.key in symptoms() or any(best.key in c.explains for c in contenders if c is not best):
            symptom = best.key in symptoms()
            faults = [
                c
                for c in contenders
                if c is not best
                and c.key not in symptoms()
                and (best.key in c.explains or (symptom and (c.key in best.distinguishes_from or explains(c.key, best.key))))
                and clears(c)
                and any(s.discriminating for s, _ in c.hits)
                and self._own_ground(c)
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
        if best.key in self._gaps:
            missing.insert(0, self._gaps[best.key].reason())
        if best.seen < ROOT_THRESHOLD or not best.strong:
            missing.insert(0, (f"its signals weigh {best.seen:g} (a root cause needs {ROOT_THRESHOLD:g}, one of weight 2 or more)", f"信号权重 {best.seen:g}（根因需要 {ROOT_THRESHOLD:g}，且至少一个权重 ≥ 2 的信号）"))
        elif best.seen - runner < MARGIN:
            missing.insert(0, (f"it leads the runner-up by {best.seen - runner:g} (a root cause needs {MARGIN:g})", f"领先次强假设 {best.seen - runner:g}（根因需要 {MARGIN:g}）"))
        causes = self._unchecked_causes(best, candidates)
        if not causes:
            # An alternative its cards name, with evidence of its own, that one unchecked
            # discriminating signal could bring level with the leader, is told apart before the
            # leader is confirmed.
            def open_weight(c: Candidate) -> float:
                return max((s.weight for s in c.unobservable if s.discriminating and not s.rules_out and self._asks(s, self._offered)), default=0.0)

            causes = [
                c
                for c in candidates
                if c is not best
                and c.key in best.distinguishes_from
                and c.seen > 0
                and open_weight(c) > 0
                and c.seen + open_weight(c) >= best.seen
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
        if not missing and best.key in symptoms() and best.key not in self._explained:
            # The symptom stands only where no fault is visible in what it points at: a cause that
            # can explain it with discriminating evidence of its own, even too little to confirm,
            # leaves the root cause unknown rather than the symptom published.
            seen_causes = [c for c in candidates if c is not best and explains(c.key, best.key) and any(s.discriminating and s.weight >= CONTEXT_WEIGHT for s, _ in c.hits)]
            # Where the run can read a dependency's state (an inspect tool, metrics), the symptom's
            # own evidence must tell it apart: pool waits alone say only that something is slow.
            lookable = any(t.startswith("inspect_") or t == "query_metrics" for t in self._offered)
            if lookable and not any(s.discriminating for s, _ in best.hits):
                missing.append(("it is a symptom, and nothing seen tells it apart from what would cause it", "它是症状，没有任何所见证据能把它与其原因区分开"))
            elif seen_causes:
                names = ", ".join(c.key.replace("/", " ") for c in seen_causes[:3])
                missing.append((f"it is a symptom, and a fault that would explain it shows evidence of its own: {names}", f"它是症状，能解释它的故障已有自身证据：{names}"))
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
