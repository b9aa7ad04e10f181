"""Live evaluation reports: one JSON document and one self-contained HTML page.

Like the snapshot reports (`rootproof.eval.report`): scores, reasons, phases, recovery records,
checks and the audit; never knowledge-card bodies, raw model responses or secrets (the stored
settings go through `Settings.public_dict`).
"""

from __future__ import annotations

from typing import Any

from rootproof.eval.report import _CSS, _e
from rootproof.live.bench.runner import LIVE_DIMENSIONS, PHASES, LiveCaseResult, LiveSuiteResult

__all__ = ["render_html", "report_json"]


def report_json(suite: LiveSuiteResult) -> dict[str, Any]:
    """`{eval_id, kind, state, approval, git_sha, suite_version, model, summary, scenarios: [...]}`."""
    summary = {k: v for k, v in suite.summary.items() if k != "cases"}
    return {
        "eval_id": suite.eval_id,
        "kind": "live",
        "state": suite.state,
        "approval": suite.approval,
        "git_sha": suite.git_sha,
        "suite_version": suite.suite_version,
        "model": suite.model,
        "summary": summary,
        "scenarios": [c.as_dict() for c in suite.cases],
    }


def _verdict(c: LiveCaseResult) -> str:
    if c.infra_invalid is not None:
        return "<span class=gate>INFRA_INVALID</span>"
    if c.cancelled:
        return "<span class=gate>CANCELLED</span>"
    return "<span class=pass>PASS</span>" if c.passed else "<span class=fail>FAIL</span>"


def _case(c: LiveCaseResult) -> str:
    gates = "".join(f"<span class=gate>{_e(g)}</span>" for g in c.hard_gates)
    phases = "".join(
        f"<tr><td>{_e(name)}</td><td>{'—' if p.ok is None else ('<span class=pass>ok</span>' if p.ok else '<span class=fail>failed</span>')}</td>"
        f"<td>{p.duration_ms}</td><td class=mono>{_e(p.detail)}</td></tr>"
        for name, p in c.phases.items()
    )
    dims = "".join(
        f"<tr><td>{_e(k)}</td><td>{d.score:.1f} / {d.max}</td><td><ul>{''.join(f'<li>{_e(r)}</li>' for r in d.reasons)}</ul></td></tr>"
        for k, d in c.dimensions.items()
    )
    actions = "".join(
        f"<tr><td>{_e(r.action)}</td><td class=mono>{_e(r.target)}</td><td>{'yes' if r.whitelisted else 'no'}</td><td>{'yes' if r.approved else 'no'}</td>"
        f"<td>{'yes' if r.executed else 'no'}</td><td>{'ok' if r.ok else '—'}</td><td class=mono>{_e(r.result)}</td></tr>"
        for r in c.recovery
    )
    checks = "".join(
        f"<tr><td>{_e(phase)}</td><td>{_e(ch.name)}</td><td>{'<span class=pass>ok</span>' if ch.ok else '<span class=fail>failed</span>'}</td><td class=mono>{_e(ch.detail)}</td></tr>"
        for phase, cs in c.checks.items()
        for ch in cs
    )
    why = "".join(
        f"<li>{_e(r)}</li>" for r in ([c.infra_invalid] if c.infra_invalid else []) + c.failure_reasons
    )
    rc = f"{c.root_cause['component']}/{c.root_cause['mechanism']}" if c.root_cause else "—"
    return (
        f'<div class=card id="{_e(c.case_id)}"><h2>{_e(c.case_id)} — {c.score:.1f} {_verdict(c)} {gates}</h2>'
        f"<p class=meta>contract {_e(c.contract)} · approval {_e(c.approval)} · live run <code>{_e(c.live_run_id)}</code> · diagnosis run <code>{_e(c.run_id)}</code>"
        f" · root cause {_e(rc)}</p>"
        f"{f'<ul>{why}</ul>' if why else ''}"
        f"<h3>Phases</h3><table><tr><th>phase</th><th>result</th><th>ms</th><th>detail</th></tr>{phases}</table>"
        f"<h3>Score</h3><table><tr><th>dimension</th><th>points</th><th>reasons</th></tr>{dims}</table>"
        f"<h3>Recovery</h3>{'<table><tr><th>action</th><th>target</th><th>whitelisted</th><th>approved</th><th>executed</th><th>ok</th><th>result</th></tr>' + actions + '</table>' if actions else '<p class=meta>no proposal</p>'}"
        f"<h3>Checks</h3><table><tr><th>phase</th><th>check</th><th>result</th><th>detail</th></tr>{checks}</table>"
        f"<h3>Audit</h3><p class=mono>{_e(c.audit)}</p></div>"
    )


def render_html(suite: LiveSuiteResult) -> str:
    """One self-contained page (inline CSS, no external assets)."""
    s = suite.summary
    metrics = [
        (k, s.get(k))
        for k in (
            "scenarios",
            "mean_score",
            "pass_rate",
            "passed",
            "infra_invalid",
            "residue",
            "hard_gate_violations",
            "wall_time_s",
        )
    ]
    metrics += [
        (f"mean {d} (of {m})", (s.get("by_dimension") or {}).get(d)) for d, m in LIVE_DIMENSIONS.items()
    ]
    rows = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in metrics)
    index = "".join(
        f'<tr><td><a href="#{_e(c.case_id)}">{_e(c.case_id)}</a></td><td>{c.score:.1f}</td><td>{_verdict(c)}</td>'
        + "".join(
            f"<td>{'—' if c.phases[p].ok is None else ('ok' if c.phases[p].ok else '✗')}</td>" for p in PHASES
        )
        + f"<td>{_e(', '.join(c.hard_gates))}</td></tr>"
        for c in suite.cases
    )
    head = "".join(f"<th>{_e(p)}</th>" for p in PHASES)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>rootproof live evaluation {_e(suite.eval_id)}</title><style>{_CSS}</style></head><body>"
        f"<h1>Live evaluation — {_e(suite.state)}</h1>"
        f"<p class=meta>eval {_e(suite.eval_id)} · git {_e(suite.git_sha or 'unknown')} · suite {_e(suite.suite_version)} · model {_e(suite.model)} · approval {_e(suite.approval)}</p>"
        f"<div class=card><table class=metrics>{rows}</table></div>"
        f"<div class=card><table><tr><th>scenario</th><th>score</th><th>verdict</th>{head}<th>hard gates</th></tr>{index}</table></div>"
        f"{''.join(_case(c) for c in suite.cases)}</body></html>\n"
    )
