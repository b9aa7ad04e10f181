"""Snapshot evaluation reports: one JSON document and one self-contained HTML page.

Reports carry scores, reasons, the tool audit, citations, guard verdicts and what the user
received — never knowledge-card bodies (a `lookup_knowledge` ref or excerpt is reduced to its
card id), raw model responses or secrets (settings go through `Settings.public_dict`).
"""

from __future__ import annotations

import html
import re
from typing import Any

from rootproof.eval.scoring import DIMENSIONS, CaseObservation, CitedRef
from rootproof.eval.snapshot import CaseResult, SuiteResult

__all__ = ["KNOWLEDGE_OMITTED", "public_tool_audit", "render_html", "report_json"]

KNOWLEDGE_OMITTED = "[knowledge card text omitted]"
_CARD = re.compile(r"^\[([^\]]+)\]")


def _is_knowledge(ref: CitedRef) -> bool:
    return ref.data_source == "knowledge" or (ref.canonical_tool or ref.tool_name) == "lookup_knowledge"


def _card_id(ref: CitedRef) -> str | None:
    m = _CARD.match(ref.text or "")
    return m.group(1) if m else None


def public_citation(ref: CitedRef) -> dict[str, Any]:
    """A citation as reports show it: knowledge text reduced to the card id."""
    knowledge = _is_knowledge(ref)
    return {
        "claim_id": ref.claim_id,
        "claim_kind": ref.claim_kind,
        "invocation_id": ref.invocation_id,
        "tool_name": ref.tool_name,
        "raw_path": ref.raw_path,
        "verified": ref.verified,
        "data_source": ref.data_source,
        "card_id": _card_id(ref) if knowledge else None,
        "excerpt": KNOWLEDGE_OMITTED if knowledge else ref.excerpt,
        "text": KNOWLEDGE_OMITTED if knowledge else ref.text,
    }


def public_tool_audit(obs: CaseObservation) -> list[dict[str, Any]]:
    """The tool audit as persisted: metadata only, no payloads."""
    return [
        {
            "invocation_id": t.invocation_id,
            "step": t.step_index,
            "tool": t.tool,
            "status": t.status,
            "code": t.code,
            "evidence_status": t.evidence_status,
            "evidence_count": t.evidence_count,
            "scope_key": t.scope_key,
            "data_source": t.data_source,
            "duration_ms": t.duration_ms,
        }
        for t in obs.tool_audit
    ]


def _knowledge_bodies(obs: CaseObservation) -> list[str]:
    """Card texts the run saw (whole chunks and their longer lines), longest first, to scrub."""
    found: set[str] = set()
    for ref in obs.draft_refs + obs.cited_refs:
        if _is_knowledge(ref) and ref.text:
            body = ref.text.split(": ", 1)[1] if ": " in ref.text else ref.text
            found.add(body.strip())
            found.update(line.strip() for line in body.splitlines() if len(line.strip()) >= 16)
    return sorted((b for b in found if b), key=len, reverse=True)


def _scrub(value: Any, bodies: list[str]) -> Any:
    """Replace every known card text inside `value` (recursively) with the omission marker."""
    if isinstance(value, str):
        for b in bodies:
            if b in value:
                value = value.replace(b, KNOWLEDGE_OMITTED)
        return value
    if isinstance(value, dict):
        return {k: _scrub(v, bodies) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, bodies) for v in value]
    return value


def _public_content(obs: CaseObservation) -> dict[str, Any] | None:
    """What the user received, with knowledge-card text reduced to card ids.

    Citation excerpts of `lookup_knowledge` refs are omitted, a claim that cites only
    knowledge keeps its id but not its text, and any card text quoted elsewhere is scrubbed.
    """
    content = obs.content
    if content is None:
        return None
    report = content.get("report")
    if not isinstance(report, dict):
        return dict(content)
    knowledge_invocations = {t.invocation_id for t in obs.tool_audit if t.tool == "lookup_knowledge"}

    def is_knowledge(c: Any) -> bool:
        return isinstance(c, dict) and (
            c.get("tool_name") == "lookup_knowledge" or c.get("invocation_id") in knowledge_invocations
        )

    claims = []
    for claim in report.get("claims") or []:
        if not isinstance(claim, dict):
            continue
        raw = claim.get("citations") or []
        cites = [{**c, "excerpt": KNOWLEDGE_OMITTED} if is_knowledge(c) else c for c in raw]
        text = claim.get("text")
        if raw and all(is_knowledge(c) for c in raw):
            text = "[claim citing knowledge cards only; text omitted]"
        claims.append({**claim, "text": text, "citations": cites})
    scrubbed: dict[str, Any] = _scrub(
        {**content, "report": {**report, "claims": claims}}, _knowledge_bodies(obs)
    )
    return scrubbed


def case_row(c: CaseResult) -> dict[str, Any]:
    """One scenario row of the JSON report."""
    obs, s = c.observation, c.score
    return {
        "id": c.scenario_id,
        "score": s.score,
        "passed": s.passed,
        "outcome": obs.release_outcome,
        "fallback_type": obs.fallback_type,
        "root_cause": s.root_cause,
        "contributing_causes": list(s.contributing_causes),
        "dimensions": s.dimensions_dict(),
        "hard_gates": list(s.hard_gates),
        "tool_calls": len(obs.tool_audit),
        "duration_ms": obs.duration_ms,
        "tokens": c.tokens,
        "wall_time_s": c.wall_time_s,
        "failure_class": s.failure_class,
        "failure_reasons": list(s.failure_reasons),
        "aiops": _aiops_row(obs.aiops),
        "run_id": obs.run_id,
        **({"questions": [q.as_dict() for q in c.questions]} if c.questions else {}),
    }


def _aiops_row(ev: dict[str, Any] | None) -> dict[str, Any] | None:
    """An alert-mode run's AIOps rules: passed, and the rules that failed with their details."""
    if ev is None:
        return None
    return {"passed": ev["passed"], "failed": [{"rule": c["rule"], "detail": c["detail"]} for c in ev["checks"] if not c["passed"]]}


def report_json(suite: SuiteResult) -> dict[str, Any]:
    """`{eval_id, state, git_sha, suite_version, model, summary, scenarios: [...]}`."""
    summary = {k: v for k, v in suite.summary.items() if k != "timings"}
    return {
        "eval_id": suite.eval_id,
        "state": suite.state,
        "git_sha": suite.git_sha,
        "suite_version": suite.suite_version,
        "model": suite.model,
        "summary": summary,
        "scenarios": [case_row(c) for c in suite.cases],
    }


# ---------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;padding:24px;color:#1d232a;background:#f6f7f9}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px} h3{font-size:14px;margin:14px 0 6px}
.meta{color:#5b6672;font-size:12px} .card{background:#fff;border:1px solid #dde2e8;border-radius:8px;padding:14px 18px;margin:12px 0}
table{border-collapse:collapse;width:100%;font-size:12.5px} th,td{border-bottom:1px solid #e6e9ee;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600} code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;word-break:break-all}
.pass{color:#12722f;font-weight:700} .fail{color:#b42318;font-weight:700} .gate{background:#fde7e7;color:#8a1414;border-radius:4px;padding:1px 6px;margin-right:4px}
.pill{display:inline-block;border-radius:10px;padding:0 8px;background:#eef1f5;margin-right:6px;font-size:12px}
.metrics td:first-child{width:220px;color:#5b6672} ul{margin:4px 0 4px 18px;padding:0} details summary{cursor:pointer;font-weight:600}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _bar_chart(by_dim: dict[str, float]) -> str:
    """An inline SVG bar chart: mean points per dimension against its maximum."""
    row_h, label_w, bar_w = 26, 120, 360
    height = row_h * len(DIMENSIONS) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 90}" height="{height}" role="img" aria-label="mean score per dimension">'
    ]
    for i, (dim, mx) in enumerate(DIMENSIONS.items()):
        y = 5 + i * row_h
        val = float(by_dim.get(dim, 0.0))
        w = 0 if mx == 0 else int(bar_w * max(0.0, min(1.0, val / mx)))
        ratio = val / mx if mx else 0
        color = "#2f9e44" if ratio >= 0.8 else "#f08c00" if ratio >= 0.5 else "#e03131"
        parts.append(f'<text x="0" y="{y + 16}" font-size="12" fill="#1d232a">{_e(dim)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{bar_w}" height="16" fill="#e9ecef" rx="3"/>')
        parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{w}" height="16" fill="{color}" rx="3"/>')
        parts.append(
            f'<text x="{label_w + bar_w + 8}" y="{y + 16}" font-size="12" fill="#1d232a">{val:.1f} / {mx}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _timeline(obs: CaseObservation) -> str:
    if not obs.tool_audit:
        return "<p class=meta>no tool calls</p>"
    rows = "".join(
        f"<tr><td>{t.step_index}</td><td><code>{_e(t.invocation_id)}</code></td><td>{_e(t.tool)}</td><td>{_e(t.status)}</td>"
        f"<td>{_e(t.code or t.evidence_status)}</td><td>{t.evidence_count}</td><td>{_e(t.data_source)}</td>"
        f"<td class=mono>{_e(t.scope_key)}</td><td>{t.duration_ms}</td></tr>"
        for t in obs.tool_audit
    )
    return (
        "<table><tr><th>step</th><th>invocation</th><th>tool</th><th>status</th><th>code / evidence</th>"
        f"<th>refs</th><th>source</th><th>scope key</th><th>ms</th></tr>{rows}</table>"
    )


def _citations(obs: CaseObservation) -> str:
    refs = obs.cited_refs if obs.published else obs.draft_refs
    title = (
        "Citations of the published report"
        if obs.published
        else "Citations of the withheld draft (not released)"
    )
    if not refs:
        return f"<h3>{title}</h3><p class=meta>none</p>"
    rows = []
    for r in refs:
        p = public_citation(r)
        mark = "<span class=pass>✓</span>" if p["verified"] else "<span class=fail>✗</span>"
        where = f"card {_e(p['card_id'])}" if p["card_id"] else _e(p["data_source"])
        rows.append(
            f"<tr><td>{_e(p['claim_id'])}</td><td>{_e(p['claim_kind'])}</td><td>{_e(p['tool_name'])}</td>"
            f"<td><code>{_e(p['invocation_id'])}</code></td><td><code>{_e(p['raw_path'])}</code></td><td>{mark}</td>"
            f"<td>{where}</td><td class=mono>{_e(p['excerpt'])}</td></tr>"
        )
    return (
        f"<h3>{title}</h3><table><tr><th>claim</th><th>kind</th><th>tool</th><th>invocation</th><th>path</th>"
        f"<th>verified</th><th>source</th><th>excerpt</th></tr>{''.join(rows)}</table>"
    )


def _guards(obs: CaseObservation) -> str:
    bodies = _knowledge_bodies(obs)
    ev = (
        "not run"
        if obs.guard_passed is None
        else ("passed" if obs.guard_passed else "failed: " + ", ".join(obs.guard_codes))
    )
    out = [f"<h3>Guard verdicts</h3><p>EvidenceGuard: <b>{_e(ev)}</b></p>"]
    if obs.semantic:
        rows = "".join(
            f"<tr><td>{_e(v.get('claim_id'))}</td><td>{_e(v.get('verdict'))}</td><td>{_e(v.get('coverage'))}</td><td>{_e(_scrub(v.get('reason'), bodies))}</td></tr>"
            for v in obs.semantic
        )
        out.append(
            f"<table><tr><th>claim</th><th>SemanticGuard</th><th>coverage</th><th>reason</th></tr>{rows}</table>"
        )
    else:
        out.append("<p class=meta>SemanticGuard: not run</p>")
    return "".join(out)


def _released(obs: CaseObservation) -> str:
    content = _public_content(obs)
    if content is None:
        return "<h3>Released content</h3><p class=meta>none (cancelled or failed)</p>"
    kind = content.get("content_type")
    if kind == "SAFE_FALLBACK":
        fb = content.get("fallback") or {}
        return (
            f"<h3>Released content: SAFE_FALLBACK</h3><p><b>{_e(fb.get('type'))}</b>: {_e(fb.get('message'))}</p>"
            f"<ul>{''.join(f'<li>{_e(x)}</li>' for x in fb.get('limitations') or [])}"
            f"{''.join(f'<li>next: {_e(x)}</li>' for x in fb.get('next_steps') or [])}</ul>"
        )
    report = content.get("report") or {}
    rc = report.get("root_cause")

    def cause(c: dict[str, Any]) -> str:
        return f"{_e(c.get('component'))} / {_e(c.get('mechanism'))} — {_e(c.get('culprit'))}"

    rc_html = cause(rc) if isinstance(rc, dict) else "none (no fault found)"
    contributing = [c for c in report.get("contributing_causes") or [] if isinstance(c, dict)]
    if contributing:
        rc_html += "</p><p><b>Contributing causes:</b> " + "; ".join(cause(c) for c in contributing)
    claims = "".join(
        f"<li><span class=pill>{_e(c.get('id'))} {_e(c.get('kind'))}</span>{_e(c.get('text'))}</li>"
        for c in report.get("claims") or []
        if isinstance(c, dict)
    )
    hyps = "".join(
        f"<li><span class=pill>{_e(h.get('status'))}</span>{_e(h.get('component'))}/{_e(h.get('mechanism'))}: {_e(h.get('statement'))}</li>"
        for h in report.get("hypotheses") or []
        if isinstance(h, dict)
    )
    rec = "".join(
        f"<li>{_e(r.get('action'))} (risk {_e(r.get('risk'))}, approval {'required' if r.get('requires_approval') else 'not required'}) — verify: {_e(r.get('verification'))}</li>"
        for r in report.get("recovery") or []
        if isinstance(r, dict)
    )
    return (
        f"<h3>Released content: {_e(kind)}</h3><p>{_e(report.get('summary'))}</p><p><b>Root cause:</b> {rc_html}</p>"
        f"<details><summary>claims ({len(report.get('claims') or [])})</summary><ul>{claims}</ul></details>"
        f"<details><summary>hypotheses</summary><ul>{hyps}</ul></details>"
        f"<details open><summary>recovery</summary><ul>{rec or '<li>none</li>'}</ul></details>"
        f"<p class=meta>verified sources: {len(content.get('verified_sources') or [])}</p>"
    )


def _case(c: CaseResult) -> str:
    obs, s = c.observation, c.score
    verdict = "<span class=pass>PASS</span>" if s.passed else "<span class=fail>FAIL</span>"
    gates = "".join(f"<span class=gate>{_e(g)}</span>" for g in s.hard_gates)
    dims = "".join(
        f"<tr><td>{_e(k)}</td><td>{d.score:.1f} / {d.max}</td><td><ul>{''.join(f'<li>{_e(r)}</li>' for r in d.reasons)}</ul></td></tr>"
        for k, d in s.dimensions.items()
    )
    why = "".join(f"<li>{_e(r)}</li>" for r in s.failure_reasons + s.gate_reasons)
    return (
        f'<div class=card id="{_e(c.scenario_id)}"><h2>{_e(c.scenario_id)} — {s.score:.1f} {verdict} {gates}</h2>'
        f"<p class=meta>outcome {_e(obs.release_outcome)} {_e(obs.fallback_type or '')} · status {_e(obs.status)} · "
        f"failure class {_e(s.failure_class or '—')} · {obs.duration_ms} ms · run <code>{_e(obs.run_id)}</code></p>"
        f"{f'<ul>{why}</ul>' if why else ''}"
        f"<table><tr><th>dimension</th><th>points</th><th>reasons</th></tr>{dims}</table>"
        f"<h3>Timeline of tool calls</h3>{_timeline(obs)}{_citations(obs)}{_guards(obs)}{_aiops(obs)}{_released(obs)}</div>"
    )


def _aiops(obs: CaseObservation) -> str:
    """An alert-mode run's AIOps rules (recorded, not scored)."""
    if obs.aiops is None:
        return ""
    rows = "".join(
        f"<tr><td>{_e(c['rule'])}</td><td>{'<span class=pass>pass</span>' if c['passed'] else '<span class=fail>fail</span>'}</td><td>{_e(c['detail'])}</td></tr>"
        for c in obs.aiops["checks"]
    )
    return f"<h3>AIOps rules ({_e(obs.aiops['rule_set_version'])})</h3><table><tr><th>rule</th><th>result</th><th>detail</th></tr>{rows}</table>"


def render_html(suite: SuiteResult) -> str:
    """One self-contained page (inline CSS and SVG, no external assets)."""
    s = suite.summary
    metrics = [
        ("scenarios", s.get("scenarios")),
        ("mean score", s.get("mean_score")),
        ("pass rate", s.get("pass_rate")),
        ("hard-gate violations", s.get("hard_gate_violations")),
        ("publish rate", s.get("publish_rate")),
        ("fallback rate", s.get("fallback_rate")),
        ("AIOps rules passed (alert runs)", f"{s.get('aiops_pass_rate')} of {s.get('alert_scenarios', 0)}"),
        ("false-confident rate", s.get("false_confident_rate")),
        ("wall time (s)", s.get("wall_time_s")),
        ("scenarios / s", s.get("scenarios_per_second")),
        ("jobs", s.get("jobs")),
    ]
    rows = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in metrics)
    index = "".join(
        f'<tr><td><a href="#{_e(c.scenario_id)}">{_e(c.scenario_id)}</a></td><td>{c.score.score:.1f}</td>'
        f"<td>{'<span class=pass>pass</span>' if c.score.passed else '<span class=fail>fail</span>'}</td>"
        f"<td>{_e(c.observation.release_outcome)}</td><td>{_e(c.score.failure_class or '')}</td>"
        f"<td>{_e(', '.join(c.score.hard_gates))}</td></tr>"
        for c in suite.cases
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>rootproof snapshot evaluation {_e(suite.eval_id)}</title><style>{_CSS}</style></head><body>"
        f"<h1>Snapshot evaluation — {_e(suite.state)}</h1>"
        f"<p class=meta>eval {_e(suite.eval_id)} · git {_e(suite.git_sha or 'unknown')} · suite {_e(suite.suite_version)} · model {_e(suite.model)}</p>"
        f"<div class=card><table class=metrics>{rows}</table><h3>Mean points per dimension</h3>{_bar_chart(s.get('by_dimension') or {})}</div>"
        f"<div class=card><table><tr><th>scenario</th><th>score</th><th>verdict</th><th>outcome</th><th>failure class</th><th>hard gates</th></tr>{index}</table></div>"
        f"{''.join(_case(c) for c in suite.cases)}</body></html>\n"
    )
