"""`ground_truth.yaml` from an OpenSRE answer key (docs/importing.md, "Ground truth").

- `root_cause_category: healthy` → `fault: false`, `root_cause: null`, recovery contract `none`.
- Otherwise the answer's `ROOT_CAUSE` prose names the root cause (`_opensre_prose`), whatever
  `failure_mode` says; `failure_mode` is used only when the prose names no mechanism. A label
  the rules mark ambiguous becomes a list (storage full: `[storage_full, disk_full]`), and so
  does the headline of `X because Y`. A compositional answer gives `contributing_causes`.
- `required_evidence`: one item per `required_evidence_sources` entry (else per source the
  validated claims cite, at most two), with `any_of` alternatives whose strings occur in the
  converted refs (`_opensre_match`).
- `alternatives` from `forbidden_categories` and `ruling_out_keywords`, each with evidence that
  rules it out (an alternative no claim speaks about is left out: nothing could rule it out);
  `red_herrings` from the mechanisms the ROOT_CAUSE statement dismisses and from
  `adversarial_signals`; recovery `proposal_only` with the actions the answer proposes plus
  the mechanism's own (`ACTIONS`, `MechanismRule.acceptable`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rootproof.errors import ScenarioError
from rootproof.scenarios.importers._opensre_evidence import Evidence
from rootproof.scenarios.importers._opensre_match import TOOLS_OF, Alternative, evidence_for, verify
from rootproof.scenarios.importers._opensre_prose import Answer, fold, named, parse_answer, read_root_cause
from rootproof.scenarios.importers._opensre_read import (
    ANSWER_FILE,
    CASE_FILE,
    SOURCE_NAMES,
    CaseInput,
    ImportLimits,
    Shape,
)
from rootproof.scenarios.importers._opensre_rules import (
    ACTIONS,
    CATEGORIES,
    CONTROL_FORBIDDEN,
    ENGINES,
    FAILURE_MODES,
    HEALTHY_CATEGORIES,
    RULING_OUT_WORDS,
    SINGLE_CAUSE,
    rule_for,
)

__all__ = ["Truth", "ground_truth"]

ITEM_IDS = {"metrics": "cloudwatch-metrics", "events": "rds-events", "pi": "performance-insights"}
"""Required evidence item id per evidence kind."""
CULPRIT_CHARS = 400


@dataclass(kw_only=True)
class Truth:
    """The ground truth document, and how it was derived (YAML comments above it)."""

    doc: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _labels(values: list[str]) -> str | list[str]:
    unique = list(dict.fromkeys(values))
    return unique[0] if len(unique) == 1 else unique


def _cause(mechanism: str, also: tuple[str, ...], engine: str, culprit: str) -> dict[str, Any]:
    rule = rule_for(mechanism)
    mechanisms = [mechanism, *rule.also_mechanisms]
    components = [rule.component or engine, *rule.also_components]
    for extra, phrases in rule.also_if:
        if any(p in fold(culprit) for p in phrases):
            mechanisms.append(extra)
    for m in also:
        r = rule_for(m)
        mechanisms.append(m)
        components.append(r.component or engine)
    text = " ".join(culprit.split())
    return {
        "component": _labels(components),
        "mechanism": _labels(mechanisms),
        "culprit": text if len(text) <= CULPRIT_CHARS else text[: CULPRIT_CHARS - 1] + "…",
    }


@dataclass(kw_only=True)
class _Work:
    case: CaseInput
    ev: Evidence
    answer: Answer
    key: dict[str, Any]
    engine: str
    truth: Truth
    limits: ImportLimits
    causes: list[str] = field(default_factory=list)
    """Every mechanism the right answer may name (root, its accepted labels, contributing)."""
    findings: list[tuple[str, tuple[str, ...], str]] = field(default_factory=list)
    """(mechanism, accepted labels, the sentence saying so) per cause, the root first."""
    items: list[dict[str, Any]] = field(default_factory=list)

    def item(self, item_id: str, alts: list[Alternative]) -> str | None:
        """Add a required evidence item (or find the same one); its id, None without alternatives."""
        alts = [a for a in alts if verify(a, self.ev.refs)]
        if not alts:
            return None
        body: dict[str, Any]
        if len(alts) == 1:
            body = {"tool": alts[0].tool, "match": list(alts[0].match)}
        else:
            body = {"any_of": [{"tool": a.tool, "match": list(a.match)} for a in alts]}
        for existing in self.items:
            if {k: v for k, v in existing.items() if k != "id"} == body:
                return str(existing["id"])
        ids = {i["id"] for i in self.items}
        unique, n = item_id, 2
        while unique in ids:
            unique, n = f"{item_id}-{n}", n + 1
        self.items.append({"id": unique, **body})
        self.truth.notes.append(
            f"required evidence {unique}: " + "; ".join(f"{a.tool} {a.where}" for a in alts)
        )
        return unique


def _answer_texts(shape: Shape, key: dict[str, Any], name: str) -> list[str]:
    return shape.texts(key.get(name), name)


def _root(w: _Work, failure_mode: str) -> list[dict[str, Any]]:
    """The root cause, then the contributing causes."""
    shape = Shape(f"{w.case.name}/{ANSWER_FILE}", w.limits)
    forbidden = [
        fold(x)
        for x in _answer_texts(shape, w.key, "forbidden_keywords")
        + _answer_texts(shape, w.key, "forbidden_phrases")
    ]
    single = any(p in x for x in forbidden for p in SINGLE_CAUSE)
    reading = read_root_cause(w.answer.root_cause, single_cause=single)
    findings = [(f.root, f.also, f.sentence) for f in reading.findings]
    if not findings:
        keywords = " ".join(_answer_texts(shape, w.key, "required_keywords"))
        by_words = named(keywords)
        if by_words:
            findings = [(by_words[0][1], (), w.answer.root_cause or keywords)]
            w.truth.warnings.append(
                f"{w.case.name}/{ANSWER_FILE}: ROOT_CAUSE names no known mechanism; read it from required_keywords"
            )
        elif failure_mode in FAILURE_MODES:
            findings = [(FAILURE_MODES[failure_mode], (), w.answer.root_cause)]
            w.truth.warnings.append(
                f"{w.case.name}/{ANSWER_FILE}: the answer's prose names no known mechanism; used failure_mode"
            )
        else:
            raise ScenarioError(
                f"{w.case.name}/{ANSWER_FILE}: model_response: ROOT_CAUSE names no mechanism the importer knows, "
                f"and failure_mode {failure_mode!r} maps to none (docs/importing.md lists the rules)"
            )
    w.findings = findings
    causes = [_cause(m, also, w.engine, culprit) for m, also, culprit in findings]
    for cause, (m, also, _) in zip(causes, findings, strict=True):
        labels = cause["mechanism"] if isinstance(cause["mechanism"], list) else [cause["mechanism"]]
        w.causes.extend([m, *labels, *also])
    w.truth.notes.append(
        "root cause from the answer's ROOT_CAUSE prose"
        + (" (a compositional fault: contributing causes)" if len(findings) > 1 else "")
        + (
            f"; failure_mode {failure_mode!r} disagrees and is not used"
            if failure_mode and FAILURE_MODES.get(failure_mode) not in w.causes
            else ""
        )
    )
    for mech, sentence in reading.dismissed:
        if mech not in w.causes and f"dismissed by the answer: {mech}" not in w.truth.notes:
            w.truth.notes.append(f"dismissed by the answer: {mech}")
        _red_herring(w, mech, sentence)
    return causes


def _red_herring(w: _Work, mechanism: str, description: str) -> None:
    if mechanism in w.causes:
        return
    herrings = w.truth.doc.setdefault("red_herrings", [])
    if any(h["mechanism"] == mechanism for h in herrings):
        return
    rule = rule_for(mechanism)
    herrings.append(
        {
            "description": " ".join(description.split())[:CULPRIT_CHARS],
            "component": rule.component or w.engine,
            "mechanism": mechanism,
        }
    )


def _kinds(names: list[str], w: _Work, field_name: str) -> list[str]:
    out: list[str] = []
    for n in names:
        kind = SOURCE_NAMES.get(n.strip().lower())
        if kind is None:
            w.truth.warnings.append(
                f"{w.case.name}/{ANSWER_FILE}: {field_name}: {n!r} is not an RDS evidence source; skipped"
            )
        elif kind not in out:
            out.append(kind)
    return out


def _required(w: _Work) -> None:
    shape = Shape(f"{w.case.name}/{ANSWER_FILE}", w.limits)
    required = _kinds(
        _answer_texts(shape, w.key, "required_evidence_sources"), w, "required_evidence_sources"
    )
    if not required and w.truth.doc["fault"]:
        cited = _kinds([s for c in w.answer.claims for s in c.sources], w, "VALIDATED_CLAIMS")
        required = cited[:2]
        if required:
            w.truth.notes.append(
                "no required_evidence_sources: required evidence from the sources the validated claims cite first"
            )
    for kind in required:
        claims = [c.text for c in w.answer.claims if kind in _kinds(list(c.sources), w, "VALIDATED_CLAIMS")]
        if len(w.findings) > 1:  # compositional: evidence of each cause, from the claims about it
            for mech, _, sentence in w.findings:
                about = [c for c in claims if any(m == mech for _, m in named(c))] + [sentence]
                _one(w, kind, f"{ITEM_IDS[kind]}-{mech.replace('_', '-')}", about)
        else:
            _one(w, kind, ITEM_IDS[kind], claims + [sentence for _, _, sentence in w.findings])


def _one(w: _Work, kind: str, item_id: str, claims: list[str]) -> None:
    if w.item(item_id, evidence_for(claims, w.ev.refs, (kind,))) is None:
        w.truth.warnings.append(
            f"{w.case.name}: required evidence {item_id}: no converted ref shows what the answer's claims say; not required"
        )


def _alternatives(w: _Work) -> None:
    shape = Shape(f"{w.case.name}/{ANSWER_FILE}", w.limits)
    wanted: list[str] = []
    for c in _answer_texts(shape, w.key, "forbidden_categories"):
        m = CATEGORIES.get(c.strip().lower())
        if m is not None and m not in wanted:
            wanted.append(m)
    for word in _answer_texts(shape, w.key, "ruling_out_keywords"):
        m = RULING_OUT_WORDS.get(fold(word))
        if m is not None and m not in wanted:
            wanted.append(m)
    alternatives = []
    for mech in wanted:
        if mech in w.causes:
            continue
        claims = [c for c in w.answer.claims if any(m == mech for _, m in named(c.text))]
        ruled: str | None = None
        for claim in claims:
            kinds = _kinds(list(claim.sources), w, "VALIDATED_CLAIMS") or list(TOOLS_OF)
            ruled = w.item(
                f"rules-out-{mech.replace('_', '-')}", evidence_for([claim.text], w.ev.refs, kinds)
            )
            if ruled is not None:
                break
        if ruled is None:
            w.truth.warnings.append(
                f"{w.case.name}: alternative {mech}: no validated claim shows evidence against it; left out"
            )
            continue
        rule = rule_for(mech)
        alternatives.append(
            {"component": rule.component or w.engine, "mechanism": mech, "ruled_out_by": [ruled]}
        )
    w.truth.doc["alternatives"] = alternatives


def _signals(w: _Work) -> None:
    shape = Shape(f"{w.case.name}/{CASE_FILE}", w.limits)
    for signal in shape.texts(w.case.meta.get("adversarial_signals"), "adversarial_signals"):
        found = named(signal)
        if found:
            _red_herring(w, found[0][1], signal)


def _recovery(w: _Work) -> None:
    text = fold(w.answer.text)
    acceptable: list[str] = []
    for action, phrases in ACTIONS:
        if any(p in text for p in phrases):
            acceptable.append(action)
    forbidden: list[str] = []
    roots = [c for c in w.causes if _has_rule(c)]
    for m in roots:
        rule = rule_for(m)
        acceptable.extend(a for a in rule.acceptable if a not in acceptable)
        forbidden.extend(a for a in rule.forbidden if a not in forbidden)
    if len(acceptable) > 1 and "no_action" in acceptable:
        acceptable.remove("no_action")
    forbidden = [a for a in forbidden if a not in acceptable]
    contract = "none" if acceptable == ["no_action"] else "proposal_only"
    w.truth.doc["recovery"] = {"contract": contract, "acceptable": acceptable, "forbidden": forbidden}


def _has_rule(mechanism: str) -> bool:
    try:
        rule_for(mechanism)
    except KeyError:
        return False
    return True


def ground_truth(case: CaseInput, ev: Evidence, limits: ImportLimits) -> Truth:
    """The ground truth of a case (`ScenarioError` naming answer.yml when it cannot be read)."""
    display = f"{case.name}/{ANSWER_FILE}"
    shape = Shape(display, limits)
    key = case.answer
    category = shape.text(key.get("root_cause_category"), "root_cause_category", empty=False).strip().lower()
    response = (
        "" if key.get("model_response") is None else shape.text(key["model_response"], "model_response")
    )
    meta_shape = Shape(f"{case.name}/{CASE_FILE}", limits)
    failure_mode = (
        ""
        if case.meta.get("failure_mode") is None
        else meta_shape.text(case.meta["failure_mode"], "failure_mode").strip()
    )
    engine_name = (
        "" if case.meta.get("engine") is None else meta_shape.scalar_text(case.meta["engine"], "engine")
    )
    engine = ENGINES.get(engine_name.strip().lower(), "postgresql")
    w = _Work(
        case=case,
        ev=ev,
        answer=parse_answer(response),
        key=key,
        engine=engine,
        truth=Truth(doc={}),
        limits=limits,
    )
    healthy = category in HEALTHY_CATEGORIES
    w.truth.doc["fault"] = not healthy
    if healthy:
        w.truth.doc["root_cause"] = None
        w.truth.notes.append(f"root_cause_category {category!r}: a no-fault control")
        _required(w)
        w.truth.doc["required_evidence"] = w.items
        w.truth.doc["alternatives"] = []
        _signals(w)
        w.truth.doc["recovery"] = {
            "contract": "none",
            "acceptable": ["no_action"],
            "forbidden": list(CONTROL_FORBIDDEN),
        }
    else:
        causes = _root(w, failure_mode)
        w.truth.doc["root_cause"] = causes[0]
        if len(causes) > 1:
            w.truth.doc["contributing_causes"] = causes[1:]
        _required(w)
        _alternatives(w)
        w.truth.doc["required_evidence"] = w.items
        _signals(w)
        _recovery(w)
    w.truth.doc.setdefault("red_herrings", [])
    order = (
        "fault",
        "root_cause",
        "contributing_causes",
        "required_evidence",
        "alternatives",
        "red_herrings",
        "recovery",
    )
    w.truth.doc = {k: w.truth.doc[k] for k in order if k in w.truth.doc}
    return w.truth
