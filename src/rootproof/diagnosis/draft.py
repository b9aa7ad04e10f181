"""The draft: the root cause with its evidence and culprit, the chain (what it explains), the
alternatives ruled out or left open, recovery, limitations and next steps, in the user's
language; excerpts verbatim from the evidence."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rootproof.agent.draft import DiagnosisDraft
from rootproof.agent.models.evidence_view import (
    Hit,
    Observation,
    ref_spans,
    signal_strings,
)
from rootproof.diagnosis.wording import blocker_culprit, limit_culprit
from rootproof.evidence_sources import observes
from rootproof.guard.entities import claim_mismatches, culprit_strays
from rootproof.kb.signals import as_number, row_of
from rootproof.taxonomy import recovery_policy
from rootproof.tools.refs import parse_log_ref

if TYPE_CHECKING:
    from rootproof.kb.cards import Signal
from rootproof.diagnosis.candidates import _CARD_ID, Candidate, _distinct_first
from rootproof.diagnosis.findings import explains, symptoms
from rootproof.diagnosis.state import MARGIN, PlannerState, _alert, _excerpt, _record
from rootproof.diagnosis.wording import _is_zh, _label

_CULPRIT_NAMES = ("application_name", "client_addr", "client_hostname", "usename", "user", "pid", "statement", "query", "name", "id", "addr", "host")



class DraftStage(PlannerState):
    """The planner's draft stage (mixed into `EvidencePlanner`)."""

    def _draft(self, question: str, candidates: list[Candidate], observations: list[Observation]) -> dict[str, Any]:
        zh = _is_zh(question)
        ranked, best, runner, confirmed, missing, contributing = self._verdict(candidates)
        if best is not None:
            ranked = [best] + [c for c in ranked if c is not best]
        claims: list[dict[str, Any]] = []
        hypotheses: list[dict[str, Any]] = []

        cited: dict[tuple[str, str], Hit] = {}

        def cite(h: Hit, anchors: list[str]) -> dict[str, Any]:
            cited[h.key] = h
            return {"invocation_id": h.invocation_id, "tool_name": h.tool, "raw_path": h.raw_path, "excerpt": _excerpt(h.text, anchors, h.spans)}

        def add_claim(text: str, kind: str, cits: list[dict[str, Any]]) -> str:
            cits = _agreeing(text, cits, cited)
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
            # What the analyzers found for it, read in the whole results: its refs (the raw
            # values: the limit and the reading, the blocker's own row) are cited.
            found = self._findings(best.key, observations)
            # The root blocker's own session row (its activity, not a waiter's row naming it).
            own = self._own_row([f for f, _ in found], observations)
            own_row = row_of(own.tool, own.text) if own is not None else None
            culprit = limit_culprit([f for f, _ in found], zh) or blocker_culprit([f for f, _ in found], zh, own_row) or self._culprit(best)

            def chain(x: Hit, who: str = culprit) -> bool:
                """Not the row of a session outside the culprit's chain (EG-18): an unrelated
                session idle in transaction matches a row-lock signal too."""
                return not culprit_strays(who, [(x.tool, x.raw_path, x.text)])

            for sig, hits in ordered[:6]:
                anchors = signal_strings(sig)
                fresh = [x for x in hits if (x.invocation_id, x.raw_path) not in shown and chain(x)]
                if not fresh:
                    continue  # every ref of this signal is already quoted by an earlier claim
                hits = fresh
                shown.update((x.invocation_id, x.raw_path) for x in hits[:4])
                h = hits[0]
                ex = _excerpt(h.text, anchors)
                text = f"根因证据（{label}）：“{ex}”" if zh else f"Root cause evidence ({label}): \"{ex}\""
                rc_ids.append(add_claim(text, "root_cause", [cite(x, anchors) for x in hits[:4]]))
            rest = [(sig, h) for sig, hits in ordered[6:] for h in [x for x in hits if chain(x)][:2]]
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
            card_ref = self._card_hit(best, observations, "zh" if zh else "en")
            kc_ids = []
            if card_ref is not None:
                ex = _excerpt(card_ref.text, [])
                kc_ids.append(add_claim(f"知识卡片：“{ex}”" if zh else f"Knowledge card: \"{ex}\"", "finding", [cite(card_ref, [])]))
            # Only a finding about a subject (the limit that ran out, the root blocker) is quoted:
            # a hint (who waits, which transactions are open) names no one.
            f_hits = [h for f, hs in found if f.get("subject") for h in hs if h.key not in shown and chain(h)][:4]
            host = next((c for c in claims if c["id"] in rc_ids and len(c["citations"]) + len(f_hits) <= 8), None)
            if f_hits and host is not None:
                # Within the claims cap: the readings join the first root-cause claim that has room.
                shown.update(h.key for h in f_hits)
                host["citations"].extend(cite(h, []) for h in f_hits)
            elif f_hits:
                shown.update(h.key for h in f_hits)
                ex = "; ".join(_excerpt(h.text, []) for h in f_hits[:3])
                rc_ids.append(add_claim(f"根因证据（{label}）：“{ex}”" if zh else f"Root cause evidence ({label}): \"{ex}\"", "root_cause", [cite(h, []) for h in f_hits]))
            if own is not None and own.key not in shown and chain(own):
                shown.add(own.key)
                ex = _excerpt(own.text, [])
                rc_ids.append(add_claim(f"罪魁（{label}）：“{ex}”" if zh else f"Culprit ({label}): \"{ex}\"", "root_cause", [cite(own, [])]))
            culprit_hit = self._culprit_hit(best)
            if culprit_hit is not None and chain(culprit_hit):
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
                co_culprit = self._culprit(co)
                co_hits = [(sg, [h for h in hs if h.key not in shown and chain(h, co_culprit)]) for sg, hs in sorted(co.hits, key=lambda sh: -sh[0].weight)]
                co_hits = [(sg, hs) for sg, hs in co_hits if hs]
                if not co_hits:
                    continue
                sg0, hs0 = co_hits[0]
                ex = _excerpt(hs0[0].text, signal_strings(sg0))
                cits = [cite(h, signal_strings(sg)) for sg, hs in co_hits[:4] for h in hs[:2]]
                co_hit = self._culprit_hit(co)
                if co_hit is not None and chain(co_hit, co_culprit) and co_hit.key not in {(c["invocation_id"], c["raw_path"]) for c in cits}:
                    cits.append(cite(co_hit, []))
                shown.update((c["invocation_id"], c["raw_path"]) for c in cits)
                text = f"独立的促成原因（{co_label}）：“{ex}”" if zh else f"Contributing cause, on independent evidence ({co_label}): \"{ex}\""
                cid = add_claim(text, "root_cause", cits[:8])
                contributing_out.append({"component": co.component, "mechanism": co.mechanism, "culprit": co_culprit, "claim_ids": [cid]})
                hypotheses.append({"statement": co_label, "component": co.component, "mechanism": co.mechanism, "status": "confirmed", "claim_ids": [cid]})
                written_co.add(co.key)
            hypotheses.append({"statement": label, "component": best.component, "mechanism": best.mechanism, "status": "confirmed", "claim_ids": rc_ids + kc_ids})
            top = best.top_hits(1)
            effects = [c for c in ranked[1:] if (c.key in best.explains or c.key in self._explained) and c.own > 0 and c.key not in written_co]
            # The chain first: the symptoms it explains (a proxy's 504s) before its other effects.
            effects.sort(key=lambda c: c.key not in symptoms())
            for eff in effects:
                if len(claims) >= (11 if eff.key in symptoms() else 10):
                    break
                # A symptom is explained by the root cause through the culprit's chain: the row
                # of an unrelated session is no consequence of it (EG-18).
                eff_hits = [(sg, kept) for sg, hs in sorted(eff.hits, key=lambda sh: -sh[0].weight) if (kept := [h for h in hs if chain(h)])]
                if not eff_hits:
                    continue
                sig, hits = eff_hits[0]
                anchors = signal_strings(sig)
                elabel = _label(eff.component, eff.mechanism, zh)
                ex = _excerpt(hits[0].text, anchors)
                text = f"{elabel} 是 {label} 的结果：“{ex}”" if zh else f"{elabel} is a consequence of {label}: \"{ex}\""
                cits = [cite(h, signal_strings(sg)) for sg, hs in eff_hits[:4] for h in hs[:2]]
                # … and what shows the cause behind it: the root cause's discriminating evidence.
                cause = [cite(h, signal_strings(sg)) for sg, hs in ordered if sg.discriminating for h in [x for x in hs if chain(x)][:1]][:2]
                cid = add_claim(text, "finding", cits[:6] + cause)
                # As a root cause it is ruled out: what it shows is a consequence of the root cause.
                hypotheses.append({"statement": f"{elabel} ({'由 ' + label + ' 引起，不是根因' if zh else 'explained by ' + label + ', not the root cause'})", "component": eff.component, "mechanism": eff.mechanism, "status": "explained", "claim_ids": [cid]})
            # A symptom an analyzer read (a proxy's timeouts per upstream) that the root cause can
            # explain is stated in the chain too, citing its own lines and the cause's evidence.
            written_effects = {c.key for c in effects}
            for key, all_hits in self._symptom_findings(observations):
                hits = [h for h in all_hits if chain(h)]
                if not hits or len(claims) >= 11 or key in written_effects or key == best.key or not explains(best.key, key):
                    continue
                written_effects.add(key)
                comp, _, mech = key.partition("/")
                elabel = _label(comp, mech, zh)
                ex = _excerpt(hits[0].text, [])
                cause = [cite(h, signal_strings(sg)) for sg, hs in ordered if sg.discriminating for h in [x for x in hs if chain(x)][:1]][:2]
                text = f"{elabel} 是 {label} 的结果：“{ex}”" if zh else f"{elabel} is a consequence of {label}: \"{ex}\""
                cid = add_claim(text, "finding", [cite(h, []) for h in hits[:3]] + cause)
                hypotheses.append({"statement": f"{elabel} ({'由 ' + label + ' 引起，不是根因' if zh else 'explained by ' + label + ', not the root cause'})", "component": comp, "mechanism": mech, "status": "explained", "claim_ids": [cid]})
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
                tests = [x for x in self._observing(comp, best, by_key.get(alt_key), observations) if chain(x)]
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
            # A loud hypothesis about another database than the impact's (a shared server's
            # neighbour) is said to be no cause of it, not left as a bare partial signal.
            for key, gap in self._gaps.items():
                if best is not None and key == best.key and missing:
                    continue  # said above
                component, _, mechanism = key.partition("/")
                en, zh_text = gap.reason()
                limitations.append(f"{_label(component, mechanism, zh)} 不是根因：{zh_text}" if zh else f"{_label(component, mechanism, zh)} is not the root cause: {en}")
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

    def _card_hit(self, c: Candidate, observations: list[Observation], language: str) -> Hit | None:
        """The first card found for the root cause written in the answer's language (a card in
        the other language is not quoted: an English answer does not cite a Chinese card)."""
        for o in observations:
            if o.tool != "lookup_knowledge" or not o.ready:
                continue
            for ref in o.refs:
                m = _CARD_ID.match(str(ref.get("text", "")))
                card = self.kb.cards.get(m.group(1)) if m else None
                if m and m.group(1) in c.cards and card is not None and card.language == language:
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
    def _symptom_findings(observations: list[Observation]) -> list[tuple[str, list[Hit]]]:
        """(symptom `component/mechanism`, the refs its findings name as hits), per symptom."""
        out: dict[str, list[Hit]] = {}
        for o in observations:
            if not o.ready:
                continue
            by_path = {str(r.get("raw_path")): r for r in o.refs}
            for f in o.findings:
                if not f.get("symptom"):
                    continue
                for key in f.get("supports") or []:
                    out.setdefault(str(key), []).extend(
                        o.hit(by_path[p])
                        for p in f.get("refs") or []
                        if p in by_path
                    )
        return [(k, v) for k, v in out.items() if v]

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
                    o.hit(by_path[p])
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
                hit = o.hit(r)
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


def _agreeing(text: str, cits: list[dict[str, Any]], cited: dict[tuple[str, str], Hit]) -> list[dict[str, Any]]:
    """The claim's citations less any the EvidenceGuard's entity rule (EG-18) would find about
    something else than what the claim's own words name (its first citation always stays)."""
    refs = []
    for i, c in enumerate(cits):
        h = cited.get((c["invocation_id"], c["raw_path"]))
        if h is not None and h.data_source != "knowledge" and c["raw_path"] != "$.no_evidence":
            refs.append((i, h.tool, h.raw_path, h.text))
    bad = {i for i, _ in claim_mismatches(text, refs) if i}
    return [c for i, c in enumerate(cits) if i not in bad]
