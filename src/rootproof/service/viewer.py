"""The trace viewer: one run's trace as one self-contained HTML page (`GET /runs/{run_id}`).

`render_run_page(trace)` takes what `SqlTraceStore.trace(run_id)` returns and builds the page:
the question and how the run ended (route, model, status, release outcome, fallback type), a
timeline of model steps and the tool calls each step made, the claims of the report with their
citations and verified excerpts (or what the trace keeps of a withheld draft), the guards'
verdicts under the rule set version they ran, and the content the user received. The reasoning
audit (`SqlTraceStore.reasoning(run_id)`) is shown only when the caller passes it (auditors);
otherwise the page says it is hidden and shows its metadata alone.

Everything in a trace is untrusted text (log lines and tool output are written by outsiders,
claims by a model, the question by a user): every value is HTML-escaped, attribute values
included, and control characters are shown as escapes (`rootproof.terminal.terminal_safe`).
Sizes are bounded: long texts are clipped with a visible note, long lists are cut with a count.
The page has no external assets; its one inline style sheet and one small inline script are
allowed by a Content-Security-Policy of their hashes, so markup that ever slipped through could
not run a script or load anything. Elements carry `data-testid` attributes for browser tests.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from collections.abc import Mapping
from typing import Any

from rootproof.terminal import one_line, terminal_safe

__all__ = [
    "CLAIMS_MAX",
    "EVENTS_MAX",
    "PARAMS_CHARS",
    "QUESTION_CHARS",
    "REASONING_CHARS",
    "RECEIVED_CHARS",
    "REFS_PER_CALL",
    "TEXT_CHARS",
    "TIMELINE_MAX",
    "render_run_page",
]

TEXT_CHARS = 2_000
"""Characters shown of one excerpt, ref text, claim, model output or message."""
QUESTION_CHARS = 8_000
"""Characters shown of the question (the harness already cuts it at `MAX_QUESTION_CHARS`)."""
PARAMS_CHARS = 1_000
"""Characters shown of a tool call's arguments (as JSON)."""
REASONING_CHARS = 16_000
"""Characters shown of one reasoning or assistant text (the store keeps up to 32 000)."""
RECEIVED_CHARS = 100_000
"""Characters shown of the received content as pretty JSON."""
REFS_PER_CALL = 40
"""Evidence refs shown per tool call."""
TIMELINE_MAX = 400
"""Model steps plus tool calls shown in the timeline."""
CLAIMS_MAX = 50
"""Claims (and withheld citations) shown."""
EVENTS_MAX = 300
"""Public events shown."""
_LIST_MAX = 100
"""Items shown of any other list (violations, verdicts, rules, verified sources, limitations)."""

_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_SURROGATE = re.compile("[\ud800-\udfff]")

_CSS = """
:root{--fg:#1d232a;--muted:#5b6672;--line:#dde2e8;--bg:#f5f6f8;--card:#fff;--ok:#12722f;--okbg:#e3f4e8;
--warn:#8a5300;--warnbg:#fff1d6;--bad:#a51d12;--badbg:#fde7e5;--info:#1f4f99;--infobg:#e5eefc}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
font:14px/1.5 system-ui,-apple-system,"Segoe UI","Noto Sans","Noto Sans CJK SC","WenQuanYi Zen Hei","PingFang SC","Microsoft YaHei",sans-serif}
main{max-width:1180px;margin:0 auto;padding:20px 24px 48px}
header.top{background:#1d2733;color:#fff}
header.top .inner{max-width:1180px;margin:0 auto;padding:14px 24px;display:flex;gap:16px;align-items:center;flex-wrap:wrap}
header.top .brand{font-weight:700;letter-spacing:.02em}
header.top nav a{color:#c9d6e6;text-decoration:none;margin-right:14px;font-size:13px}
header.top nav a:hover{color:#fff}
header.top .tools{margin-left:auto}
header.top form.signout{display:inline;margin-left:12px;font-size:13px;color:#c9d6e6}
button{font:inherit;font-size:12px;border:1px solid #5d6b7b;background:#2b3746;color:#fff;border-radius:4px;padding:2px 8px;cursor:pointer;margin-left:4px}
h1{font-size:20px;margin:6px 0 2px} h2{font-size:16px;margin:0 0 10px} h3{font-size:14px;margin:14px 0 6px}
section.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:16px 20px;margin:16px 0}
.question{font-size:17px;white-space:pre-wrap;overflow-wrap:anywhere;background:#f8f9fb;border-left:4px solid #6b7c93;padding:8px 12px;margin:8px 0 12px}
.meta{color:var(--muted);font-size:12px}
.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(250px,1fr));gap:6px 18px;margin:0}
.facts div{min-width:0} .facts dt{color:var(--muted);font-size:11.5px;text-transform:uppercase;letter-spacing:.04em}
.facts dd{margin:0;overflow-wrap:anywhere}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;background:#eef1f5;color:var(--fg);white-space:nowrap}
.ok{background:var(--okbg);color:var(--ok)} .warn{background:var(--warnbg);color:var(--warn)}
.bad{background:var(--badbg);color:var(--bad)} .info{background:var(--infobg);color:var(--info)}
.muted{color:var(--muted)}
code,pre,.mono{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,"WenQuanYi Zen Hei Mono",monospace;font-size:12px}
code{overflow-wrap:anywhere}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f8f9fb;border:1px solid #e6e9ee;border-radius:6px;padding:8px 10px;margin:6px 0}
.excerpt{white-space:pre-wrap;overflow-wrap:anywhere;background:#fbfbf7;border-left:3px solid #c9b458;padding:4px 8px;margin:4px 0;
font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,"WenQuanYi Zen Hei Mono",monospace;font-size:12.5px}
mark.untrusted{background:#ffe3e0;color:inherit;border-bottom:1px dashed var(--bad)}
.clipped{display:inline-block;margin-left:6px;font:11.5px system-ui,sans-serif;color:var(--warn);background:var(--warnbg);border-radius:4px;padding:0 6px}
table{border-collapse:collapse;width:100%;font-size:12.5px;margin:4px 0}
th,td{border-bottom:1px solid #e6e9ee;padding:4px 6px;text-align:left;vertical-align:top;overflow-wrap:break-word}
td.mono,td.wrap{overflow-wrap:anywhere;width:100%} td.nw{white-space:nowrap}
th{background:#f0f2f5;font-weight:600}
details>summary{cursor:pointer;color:var(--info);font-size:12.5px;margin:4px 0}
ol.timeline{list-style:none;margin:0;padding:0}
.step{border-left:3px solid #8fa3bf;padding:6px 0 6px 14px;margin:0 0 4px}
.step-head{display:flex;gap:10px;align-items:baseline;flex-wrap:wrap}
.step-head .idx{font-weight:700}
.step-out{font-size:12.5px;color:#37414c;white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0}
ol.calls{list-style:none;margin:6px 0 0;padding:0}
.call{border:1px solid var(--line);border-radius:6px;padding:6px 10px;margin:6px 0;background:#fcfcfd}
.call:target,.claim:target{outline:2px solid #6b8fd6}
.call-head{display:flex;gap:8px;align-items:baseline;flex-wrap:wrap}
.call-head .tool{font-weight:700;font-family:ui-monospace,"DejaVu Sans Mono",monospace}
.claim{border:1px solid var(--line);border-radius:6px;padding:8px 12px;margin:8px 0}
.claim.withheld{border-style:dashed;background:#fffdf8}
.claim-head{display:flex;gap:8px;align-items:baseline;flex-wrap:wrap;margin-bottom:4px}
.claim-text{white-space:pre-wrap;overflow-wrap:anywhere}
ol.cites{margin:6px 0 0;padding-left:20px}
.cite{margin:6px 0}
.note{background:var(--warnbg);border:1px solid #f1d9a6;border-radius:6px;padding:8px 12px;margin:8px 0}
.story{font-size:14.5px;margin:0 0 12px} .cause{margin:4px 0} ul{margin:4px 0 4px 20px;padding:0}
"""

_JS = """
(function () {
  var d = document;
  d.documentElement.setAttribute("data-viewer-script", "ran");
  function setAll(open) { d.querySelectorAll("details").forEach(function (x) { x.open = open; }); }
  var e = d.getElementById("expand-all"), c = d.getElementById("collapse-all");
  if (e) { e.addEventListener("click", function () { setAll(true); }); }
  if (c) { c.addEventListener("click", function () { setAll(false); }); }
  function openTarget() {
    var id = location.hash.slice(1), t = id ? d.getElementById(id) : null;
    if (t) { t.querySelectorAll("details").forEach(function (x) { x.open = true; }); }
  }
  window.addEventListener("hashchange", openTarget);
  openTarget();
})();
"""


def _csp_hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii") + "'"


_CSP = (
    f"default-src 'none'; style-src {_csp_hash(_CSS)}; script-src {_csp_hash(_JS)}; "
    "img-src 'none'; base-uri 'none'; form-action 'none'"
)
_CSP_SIGNED_IN = _CSP.replace("form-action 'none'", "form-action 'self'")
"""The policy of a page with the sign-out form: forms may post to this service only."""


# -- escaping and bounds -----------------------------------------------------------------------


def _str(value: Any) -> str:
    """A value as display text: strings as they are, JSON for containers, '' for None."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _esc(text: str, *, lines: bool = False) -> str:
    """Escape for element text and attribute values; control characters shown as escapes, a lone
    surrogate (JSON `\\ud800`, not encodable as UTF-8) as U+FFFD. Line breaks and tabs are shown
    escaped too (`\\n`), so text from evidence never lays out a line of the report, except where
    `lines` keeps them: the question, a model's output, a preformatted dump."""
    return html.escape(_SURROGATE.sub("\ufffd", terminal_safe(text) if lines else one_line(text)), quote=True)


def _clip_note(hidden: int) -> str:
    return f'<span class="clipped" data-testid="clipped">… clipped: {hidden:,} more characters</span>'


def _t(value: Any, limit: int = TEXT_CHARS, *, lines: bool = False) -> str:
    """Escaped text (`_esc`), clipped at `limit` characters with a visible note."""
    text = _str(value)
    if len(text) <= limit:
        return _esc(text, lines=lines)
    return _esc(text[:limit], lines=lines) + _clip_note(len(text) - limit)


def _a(value: Any) -> str:
    """An attribute value (escaped, at most 200 characters)."""
    return _esc(_str(value)[:200])


def _anchor(prefix: str, value: Any) -> str:
    """A stable element id from untrusted text: safe characters only, else a short digest."""
    raw = _str(value)
    safe = _ID_CHARS.sub("", raw)[:64]
    if safe != raw or not safe:
        safe = (safe[:40] + "-" if safe else "") + hashlib.sha256(raw.encode("utf-8", "replace")).hexdigest()[:10]
    return f"{prefix}-{safe}"


def _spans(value: Any, length: int) -> list[tuple[int, int]]:
    """Recorded `untrusted_spans`, kept only when well formed (sorted, disjoint, in range)."""
    out: list[tuple[int, int]] = []
    if not isinstance(value, list):
        return out
    pos = 0
    for item in value[:200]:
        if not (isinstance(item, list | tuple) and len(item) == 2 and all(type(x) is int for x in item)):
            return []
        start, end = item
        if start < pos or end <= start:
            return []
        if start >= length:
            break
        out.append((start, min(end, length)))
        pos = end
    return out


def _marked(text: Any, spans: Any, limit: int = TEXT_CHARS) -> str:
    """Escaped ref text with its outsider-written spans marked, clipped at `limit`."""
    full = _str(text)
    shown = full[:limit]
    parts: list[str] = []
    pos = 0
    for start, end in _spans(spans, len(shown)):
        parts.append(_esc(shown[pos:start]))
        parts.append(f'<mark class="untrusted" title="written by an outsider">{_esc(shown[start:end])}</mark>')
        pos = end
    parts.append(_esc(shown[pos:]))
    if len(full) > limit:
        parts.append(_clip_note(len(full) - limit))
    return "".join(parts)


def _cut(items: list[Any], limit: int, what: str) -> tuple[list[Any], str]:
    """The first `limit` items and, when some are left out, a visible note saying how many."""
    if len(items) <= limit:
        return items, ""
    return items[:limit], f'<p class="meta" data-testid="list-clipped">… {len(items) - limit:,} more {what} not shown</p>'


def _d(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _l(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _badge(value: Any, tone: str = "") -> str:
    return f'<span class="badge {tone}">{_t(value, 80)}</span>'


def _tone(value: Any) -> str:
    v = _str(value)
    if v in ("SUCCESS", "PUBLISHED", "READY", "EVIDENCE_FOUND", "SUPPORTED", "passed", "COMPLETED", "confirmed"):
        return "ok"
    if v in ("FALLBACK", "NO_EVIDENCE", "DEDUPLICATED", "withheld", "open"):
        return "warn"
    if v in ("FAILED", "TIMED_OUT", "CANCELLED", "REJECTED", "ERROR", "UNSUPPORTED", "failed"):
        return "bad"
    return ""


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _yes(value: Any) -> str:
    return "yes" if value else "no"


# -- sections ----------------------------------------------------------------------------------


def _summary(run: dict[str, Any], trace: dict[str, Any]) -> str:
    outcome = run.get("release_outcome")
    facts = [
        ("route", "route", _t(run.get("route") or "—", 80)),
        ("model", "model", _t(run.get("model") or "—", 200)),
        ("status", "status", _badge(run.get("status") or "running", _tone(run.get("status")))),
        ("release outcome", "release-outcome", _badge(outcome or "—", _tone(outcome))),
        ("fallback type", "fallback-type", _badge(run.get("fallback_type"), "warn") if run.get("fallback_type") else "—"),
        ("lifecycle", "lifecycle", _t(run.get("lifecycle_state"), 80)),
        ("scenario", "scenario", _t(run.get("scenario_id") or "—", 200)),
        ("language", "language", _t(run.get("language"), 20)),
        ("duration", "duration", f"{_t(run.get('duration_ms'), 20)} ms" if run.get("duration_ms") is not None else "—"),
        ("tokens", "tokens", _t(run.get("tokens"), 20)),
        ("started", "started", _t(run.get("started_at"), 40)),
        ("ended", "ended", _t(run.get("ended_at") or "—", 40)),
        ("principal", "principal", _t(run.get("principal"), 200)),
        ("session", "session", f"<code>{_t(run.get('session_id'), 80)}</code>"),
    ]
    if run.get("targets_checksum"):
        facts.append(("targets file", "targets-checksum", f"<code>{_t(run.get('targets_checksum'), 100)}</code>"))
    dl = "".join(f'<div><dt>{label}</dt><dd data-testid="{tid}">{value}</dd></div>' for label, tid, value in facts)
    out = [
        f'<section class="card" id="summary" data-testid="run-summary" data-status="{_a(run.get("status"))}" '
        f'data-release-outcome="{_a(outcome)}" data-fallback-type="{_a(run.get("fallback_type"))}">',
        f'<h1>Run <code data-testid="run-id">{_t(run.get("run_id"), 100)}</code></h1>',
        f'<div class="question" data-testid="question" lang="{_a(run.get("language"))}">{_t(run.get("question"), QUESTION_CHARS, lines=True)}</div>',
        f'<p class="story" data-testid="outcome-story">{_story(run)}</p>',
        f'<dl class="facts">{dl}</dl>',
    ]
    if run.get("error"):
        out.append(f'<h3>Error</h3><pre data-testid="run-error">{_t(run.get("error"), lines=True)}</pre>')
    conclusion = run.get("conclusion")
    if isinstance(conclusion, Mapping):
        out.append(f'<h3>Published conclusion</h3><div data-testid="conclusion">{_cause(conclusion, "root cause")}')
        for c in _l(conclusion.get("contributing_causes"))[:10]:
            out.append(_cause(_d(c), "contributing cause"))
        out.append("</div>")
    alert = run.get("alert")
    if isinstance(alert, Mapping):
        out.append(_alert(alert))
    usage = _d(run.get("budget_usage"))
    if usage:
        cells = "".join(
            f"<tr><td>{_t(k, 60)}</td><td>{_t(v, 300)}</td></tr>" for k, v in list(usage.items())[:_LIST_MAX]
        )
        out.append(f'<details><summary>budget usage</summary><table data-testid="budget-usage">{cells}</table></details>')
    prompts = _d(run.get("prompt_audit"))
    if prompts:
        rows = "".join(
            f"<tr><td>{_t(_d(p).get('name'), 80)}</td><td>{_t(_d(p).get('version'), 80)}</td><td><code>{_t(_d(p).get('resource'), 200)}</code></td></tr>"
            for p in _l(prompts.get("prompts"))[:_LIST_MAX]
        )
        out.append(
            f'<details><summary>prompts ({_t(prompts.get("version"), 80)})</summary>'
            f'<table data-testid="prompt-audit"><tr><th>prompt</th><th>version</th><th>resource</th></tr>{rows}</table></details>'
        )
    out.append(_events(_l(trace.get("events"))))
    out.append("</section>")
    return "".join(out)


def _story(run: dict[str, Any]) -> str:
    """One line: how the run ended and why (escaped HTML)."""
    se = _d(run.get("self_evaluation"))
    ev, sem = _d(se.get("evidence_guard")), _d(se.get("semantic_guard"))
    content = _d(run.get("content"))
    outcome, kind = run.get("release_outcome"), content.get("content_type")
    if not run.get("status"):
        return "The run has not ended."
    if run.get("status") == "CANCELLED":
        return "Cancelled: nothing was released."
    if outcome == "PUBLISHED":
        if kind == "SYSTEM_MESSAGE":
            return "Published a system message (no diagnosis was asked for)."
        return f"Published {_t(kind, 60)}: the EvidenceGuard verified every citation and the SemanticGuard found every claim supported."
    what = f"Safe fallback {_badge(run.get('fallback_type'), 'warn')}: "
    if ev and not ev.get("passed"):
        codes = " ".join(_badge(c, "bad") for c in _l(ev.get("codes"))[:20])
        return what + f"the EvidenceGuard withheld the draft {codes}."
    if sem and not sem.get("available"):
        return what + "the SemanticGuard was unavailable, so the draft was withheld."
    if sem and not sem.get("supported"):
        bad = [_str(_d(v).get("claim_id")) for v in _l(sem.get("verdicts")) if _d(v).get("verdict") != "SUPPORTED"]
        return what + f"the SemanticGuard found claims unsupported ({_t(', '.join(bad), 300)})."
    if ev:
        return what + "both guards passed, but the run could not publish the draft (see the fallback's limitations)."
    return what + "no draft reached the guards."


def _cause(cause: Mapping[str, Any], label: str) -> str:
    ids = ", ".join(_str(i) for i in _l(cause.get("claim_ids"))[:20])
    return (
        f'<p class="cause"><b>{label}:</b> <code>{_t(cause.get("component"), 100)}</code> / '
        f'<code>{_t(cause.get("mechanism"), 100)}</code> — {_t(cause.get("culprit"), 500)}'
        + (f' <span class="meta">claims {_t(ids, 300)}</span>' if ids else "")
        + "</p>"
    )


def _alert(alert: Mapping[str, Any]) -> str:
    p = _d(alert.get("primary"))
    related = _l(alert.get("related"))
    return (
        f'<h3>Alert</h3><p data-testid="alert">{_badge(p.get("severity") or "—", "info")} <b>{_t(p.get("name"), 300)}</b> '
        f'service <code>{_t(p.get("service"), 200)}</code> · source {_t(alert.get("source"), 60)} · '
        f"{len(related)} related</p>"
    )


def _events(events: list[Any]) -> str:
    if not events:
        return ""
    shown, note = _cut(events, EVENTS_MAX, "events")
    items = []
    for e in shown:
        e = _d(e)
        data = _d(e.get("data"))
        detail = data.get("phase") or data.get("content_type") or data.get("release_outcome") or data.get("tool") or ""
        items.append(
            f'<li data-testid="event" data-type="{_a(e.get("type"))}"><code>{_t(e.get("seq"), 12)}</code> '
            f"{_t(e.get('type'), 40)}{f' <span class=meta>{_t(detail, 120)}</span>' if detail else ''}</li>"
        )
    return f'<details><summary>public events ({len(events)})</summary><ol class="meta">{"".join(items)}</ol>{note}</details>'


def _cited_paths(summary: list[Any]) -> dict[str, set[str]]:
    """Paths the draft (published or withheld) cited, per invocation (`tool_trace_summary`)."""
    out: dict[str, set[str]] = {}
    for t in summary:
        t = _d(t)
        out.setdefault(_str(t.get("invocation_id")), set()).update(_str(p) for p in _l(t.get("cited_paths")))
    return out


def _path_order(path: str) -> tuple[str, int, str]:
    """`$.entries[2]` before `$.entries[10]`."""
    m = re.match(r"^(.*?)\[(\d+)\](.*)$", path)
    return (m.group(1), int(m.group(2)), m.group(3)) if m else (path, -1, "")


def _verified(sources: list[Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(_str(_d(s).get("invocation_id")), _str(_d(s).get("raw_path"))): _d(s) for s in sources}


def _timeline(trace: dict[str, Any], cited: dict[str, set[str]], verified: dict[tuple[str, str], dict[str, Any]]) -> str:
    steps = [_d(s) for s in _l(trace.get("steps"))]
    calls = [_d(i) for i in _l(trace.get("invocations"))]
    by_step: dict[Any, list[dict[str, Any]]] = {}
    for i in calls:
        by_step.setdefault(i.get("step_index"), []).append(i)
    known = {s.get("step_index") for s in steps}
    orphans = [i for i in calls if i.get("step_index") not in known]
    budget = TIMELINE_MAX
    items: list[str] = []
    left_out = 0
    for s in steps:
        own = by_step.get(s.get("step_index"), [])
        if budget <= 0:
            left_out += 1 + len(own)
            continue
        budget -= 1
        rendered = []
        for i in own:
            if budget <= 0:
                left_out += 1
                continue
            budget -= 1
            rendered.append(_call(i, cited, verified))
        items.append(_step(s, rendered))
    if orphans:
        rendered = []
        for i in orphans:
            if budget <= 0:
                left_out += 1
                continue
            budget -= 1
            rendered.append(_call(i, cited, verified))
        if rendered:
            items.append(
                '<li class="step" data-testid="unattributed-calls"><div class="step-head"><span class="idx">tool calls without a recorded model step</span></div>'
                f'<ol class="calls">{"".join(rendered)}</ol></li>'
            )
    note = f'<p class="meta" data-testid="list-clipped">… {left_out:,} more steps and tool calls not shown</p>' if left_out else ""
    body = f'<ol class="timeline">{"".join(items)}</ol>{note}' if items else '<p class="meta">no model step or tool call was recorded</p>'
    return (
        f'<section class="card" id="timeline" data-testid="timeline"><h2>Timeline: {_n(len(steps), "model step")}, {_n(len(calls), "tool call")}</h2>'
        f"{body}</section>"
    )


def _step(s: dict[str, Any], calls: list[str]) -> str:
    tool_call = bool(s.get("has_tool_call"))
    tokens_in, tokens_out = s.get("input_tokens") or 0, s.get("output_tokens") or 0
    return (
        f'<li class="step" data-testid="model-step" data-step-index="{_a(s.get("step_index"))}" data-tool-call="{_yes(tool_call)}">'
        f'<div class="step-head"><span class="idx">model step {_t(s.get("step_index"), 12)}</span>'
        f"{_badge('tool call' if tool_call else 'no tool call', 'info' if tool_call else '')}"
        f'<span class="meta" data-testid="step-duration">{_t(s.get("duration_ms"), 20)} ms</span>'
        f'<span class="meta" data-testid="step-tokens">tokens in {_t(tokens_in, 20)} · out {_t(tokens_out, 20)}</span>'
        f'<span class="meta">{_t(s.get("agent_name"), 60)}</span></div>'
        f'<div class="step-out" data-testid="step-output">{_t(s.get("model_output"), lines=True)}</div>'
        f'<details><summary>model input (summary)</summary><pre>{_t(s.get("model_input"), lines=True)}</pre></details>'
        + (f'<ol class="calls">{"".join(calls)}</ol>' if calls else "")
        + "</li>"
    )


def _call(i: dict[str, Any], cited: dict[str, set[str]], verified: dict[tuple[str, str], dict[str, Any]]) -> str:
    inv = _str(i.get("invocation_id"))
    status = i.get("status")
    code = i.get("refusal_code")
    refs = [_d(r) for r in _l(i.get("evidence_refs"))]
    cited_here = cited.get(inv, set())
    head = (
        f'<div class="call-head"><span class="tool" data-testid="tool-name">{_t(i.get("tool_name"), 80)}</span>'
        f'<span data-testid="tool-status">{_badge(status, _tone(status))}</span>'
        + (f"{_badge(code, 'bad')}" if code and code != status else "")
        + f'<span data-testid="evidence-status">{_badge(i.get("evidence_status") or "—", _tone(i.get("evidence_status")))}</span>'
        f'<span class="meta">source <span data-testid="data-source">{_source(i.get("data_source"))}</span></span>'
        f'<span class="meta" data-testid="call-duration">{_t(i.get("duration_ms"), 20)} ms</span>'
        f'<span class="meta">{_t(i.get("result_bytes"), 20)} bytes · {_n(len(refs), "ref")}'
        + (f" · {len(cited_here)} cited" if cited_here else "")
        + f'</span><code class="meta">{_t(inv, 80)}</code></div>'
    )
    extra = []
    for label, key in (("message", "message"), ("error", "error_message"), ("deduplicated", "dedup_reason")):
        if i.get(key):
            extra.append(f'<div class="meta">{label}: {_t(i.get(key))}</div>')
    inner = f'<div class="meta">arguments <code data-testid="tool-args">{_t(i.get("input_params"), PARAMS_CHARS)}</code></div>'
    if i.get("retrieval_layer"):
        inner += (
            f'<div class="meta">retrieval {_t(i.get("retrieval_layer"), 20)} · L0 {_t(i.get("l0_match_count"), 12)} · '
            f'L1 {_t(i.get("l1_match_count"), 12)} · relevance {_t(i.get("relevance_level"), 40)}</div>'
        )
    shown, note = _cut(refs, REFS_PER_CALL, "refs")
    rows = []
    for r in shown:
        path = _str(r.get("raw_path"))
        marks = []
        if path in cited_here:
            marks.append(_badge("cited", "info"))
        if (inv, path) in verified:
            marks.append(_badge("verified", "ok"))
        if r.get("instruction_like"):
            marks.append(_badge("reads as instructions to an AI", "bad"))
        rows.append(
            f'<tr data-testid="evidence-ref" data-path="{_a(path)}"><td class="nw"><code>{_t(path, 60)}</code><br>{"".join(marks)}</td>'
            f'<td class="mono">{_marked(r.get("text"), r.get("untrusted_spans"))}</td><td class="nw">{_source(r.get("data_source"))}</td></tr>'
        )
    if rows:
        inner += (
            "<table><tr><th>path</th><th>text (outsider-written spans marked)</th>"
            f'<th>source</th></tr>{"".join(rows)}</table>{note}'
        )
    if i.get("output_preview"):
        inner += f'<h3>output preview</h3><pre>{_t(i.get("output_preview"), lines=True)}</pre>'
    args = _str(i.get("input_params"))
    brief = _esc(args[:140]) + ("…" if len(args) > 140 else "")
    extra.append(f"<details><summary>arguments <code>{brief}</code> · {_n(len(refs), 'ref')}</summary>{inner}</details>")
    return (
        f'<li class="call" id="{_anchor("call", inv)}" data-testid="tool-call" data-invocation-id="{_a(inv)}" '
        f'data-tool="{_a(i.get("tool_name"))}" data-status="{_a(status)}" data-evidence-status="{_a(i.get("evidence_status"))}" '
        f'data-data-source="{_a(i.get("data_source"))}">{head}{"".join(extra)}</li>'
    )


def _citation(c: dict[str, Any], verified: dict[tuple[str, str], dict[str, Any]], refs: dict[tuple[str, str], dict[str, Any]], known: set[str]) -> str:
    """A citation of a published claim: its excerpt, verified when the content lists its source."""
    inv, path = _str(c.get("invocation_id")), _str(c.get("raw_path"))
    source = verified.get((inv, path))
    ref = refs.get((inv, path), {})
    body = f'<div class="excerpt" data-testid="excerpt">{_t(c.get("excerpt"))}</div>'
    ref_text = _str(ref.get("text"))
    if ref_text and ref_text != _str(c.get("excerpt")):
        body += f'<details><summary>the whole recorded ref</summary><div class="excerpt">{_marked(ref_text, ref.get("untrusted_spans"))}</div></details>'
    data_source = (source or ref).get("data_source")
    return (
        f'<li class="cite" data-testid="citation" data-state="published" data-verified="{_yes(source is not None)}" '
        f'data-invocation-id="{_a(inv)}" data-path="{_a(path)}">'
        f"{_badge('verified', 'ok') if source is not None else _badge('not verified', 'bad')} "
        f'<b>{_t(c.get("tool_name"), 80)}</b> {_link(inv, known)} <code>{_t(path, 200)}</code>'
        f'{f" <span class=meta>source {_source(data_source)}</span>" if data_source else ""}{body}</li>'
    )


def _withheld_cite(c: dict[str, Any], verified: dict[tuple[str, str], dict[str, Any]], refs: dict[tuple[str, str], dict[str, Any]], known: set[str]) -> str:
    inv, path = _str(c.get("invocation_id")), _str(c.get("raw_path"))
    ok = (inv, path) in verified
    ref = refs.get((inv, path), {})
    text = _marked(ref.get("text"), ref.get("untrusted_spans")) if ref else '<span class="meta">no ref recorded at this path</span>'
    return (
        f'<tr data-testid="citation" data-state="withheld" data-verified="{_yes(ok)}" data-invocation-id="{_a(inv)}" data-path="{_a(path)}">'
        f"<td class=nw>{_badge('verified', 'ok') if ok else _badge('not verified', 'warn')}</td><td class=nw><b>{_t(c.get('tool_name'), 80)}</b></td>"
        f"<td class=nw>{_link(inv, known)}</td><td class=nw><code>{_t(path, 60)}</code></td><td class=nw>{_source(ref.get('data_source'))}</td>"
        f'<td class="mono" data-testid="excerpt">{text}</td></tr>'
    )


def _link(inv: str, known: set[str]) -> str:
    """An invocation id, linked to its tool call in the timeline when the trace has it."""
    return f'<a href="#{_anchor("call", inv)}"><code>{_t(inv, 80)}</code></a>' if inv in known else f"<code>{_t(inv, 80)}</code>"


def _source(value: Any) -> str:
    """A data source; `mock` stands out (it never proves a root cause)."""
    if not value:
        return "—"
    return _badge(value, "warn") if _str(value) == "mock" else _t(value, 80)


def _claims(run: dict[str, Any], trace: dict[str, Any], se: dict[str, Any], cited: dict[str, set[str]]) -> str:
    content = _d(run.get("content"))
    body = _d(content.get("report") or content.get("answer"))
    calls = [_d(i) for i in _l(trace.get("invocations"))]
    known = {_str(i.get("invocation_id")) for i in calls}
    refs = {(_str(i.get("invocation_id")), _str(_d(r).get("raw_path"))): _d(r) for i in calls for r in _l(i.get("evidence_refs"))}
    sem = _d(se.get("semantic_guard"))
    verdicts = {_str(_d(v).get("claim_id")): _d(v) for v in _l(sem.get("verdicts"))}
    published = run.get("release_outcome") == "PUBLISHED" and bool(body)
    out = ['<section class="card" id="claims" data-testid="claims">']
    if published:
        verified = _verified(_l(content.get("verified_sources")))
        claims = [_d(c) for c in _l(body.get("claims"))]
        out.append(f"<h2>Claims of the published {'report' if 'report' in content else 'answer'} ({len(claims)})</h2>")
        out.append(f'<p data-testid="report-summary">{_t(body.get("summary"), 4000)}</p>')
        if isinstance(body.get("root_cause"), Mapping):
            out.append(_cause(body["root_cause"], "root cause"))
        elif "root_cause" in body:
            out.append('<p class="cause"><b>root cause:</b> none (no fault found)</p>')
        for cause in _l(body.get("contributing_causes"))[:10]:
            out.append(_cause(_d(cause), "contributing cause"))
        shown, note = _cut(claims, CLAIMS_MAX, "claims")
        for c in shown:
            cites = [_d(x) for x in _l(c.get("citations"))]
            cshown, cnote = _cut(cites, _LIST_MAX, "citations")
            v = verdicts.get(_str(c.get("id")))
            out.append(
                f'<div class="claim" id="{_anchor("claim", c.get("id"))}" data-testid="claim" data-state="published" '
                f'data-claim-id="{_a(c.get("id"))}" data-kind="{_a(c.get("kind"))}">'
                f'<div class="claim-head"><code>{_t(c.get("id"), 40)}</code>{_badge(c.get("kind"), "info")}'
                + (_badge(f"semantic: {_str(v.get('verdict'))}", _tone(v.get("verdict"))) if v else "")
                + f'</div><div class="claim-text" data-testid="claim-text">{_t(c.get("text"))}</div>'
                f'<ol class="cites">{"".join(_citation(x, verified, refs, known) for x in cshown)}</ol>{cnote}</div>'
            )
        out.append(note)
        out.append(_report_extras(body))
    else:
        out.append(_withheld(run, se, verdicts, cited, refs, known))
    out.append("</section>")
    return "".join(out)


def _withheld(run: dict[str, Any], se: dict[str, Any], verdicts: dict[str, dict[str, Any]], cited: dict[str, set[str]], refs: dict[tuple[str, str], dict[str, Any]], known: set[str]) -> str:
    ev = _d(se.get("evidence_guard"))
    outcome = run.get("release_outcome")
    if _d(run.get("content")).get("content_type") == "SYSTEM_MESSAGE":
        return '<h2>Claims: none</h2><p class="meta" data-testid="no-draft">The run answered with a system message; nothing was diagnosed.</p>'
    out = [f"<h2>Claims: {'no report was published' if outcome else 'the run has not ended'}</h2>"]
    if not ev and not verdicts:
        out.append(
            '<p class="note" data-testid="no-draft">No draft reached the guards '
            f"({_t(run.get('fallback_type') or outcome or 'still running', 80)}): there are no claims to show.</p>"
        )
        return "".join(out)
    out.append(
        '<p class="note" data-testid="withheld-note">This draft was withheld '
        f"({_t(run.get('fallback_type') or outcome, 80)}; the line at the top says why), and the user received the "
        "content below instead. The trace keeps the guards' findings and what the draft cited, not the "
        "draft's own text: claims appear by id, citations with the recorded text of the ref they point at.</p>"
    )
    verified = _verified(_l(ev.get("verified_sources")))
    ids: list[str] = []
    for cid in list(verdicts) + [_str(_d(v).get("claim_id")) for v in _l(ev.get("violations")) if _d(v).get("claim_id")]:
        if cid and cid not in ids:
            ids.append(cid)
    violations: dict[str, list[dict[str, Any]]] = {}
    for v in _l(ev.get("violations")):
        violations.setdefault(_str(_d(v).get("claim_id")), []).append(_d(v))
    shown, note = _cut(ids, CLAIMS_MAX, "claims")
    for cid in shown:
        v = verdicts.get(cid)
        found = "".join(
            f'<li>{_badge(x.get("code"), "bad")} {_t(x.get("detail"))}'
            + (f' <span class="meta">citation {_t(x.get("citation_index"), 12)}</span>' if x.get("citation_index") is not None else "")
            + "</li>"
            for x in violations.get(cid, [])[:_LIST_MAX]
        )
        out.append(
            f'<div class="claim withheld" id="{_anchor("claim", cid)}" data-testid="claim" data-state="withheld" data-claim-id="{_a(cid)}">'
            f'<div class="claim-head"><code>{_t(cid, 40)}</code>{_badge("withheld", "warn")}'
            + (_badge(f"semantic: {_str(v.get('verdict'))}", _tone(v.get("verdict"))) if v else "")
            + "</div>"
            + (f'<div class="meta">{_t(v.get("reason"))}</div>' if v else "")
            + (f"<ul>{found}</ul>" if found else "")
            + '<div class="meta">claim text not recorded</div></div>'
        )
    out.append(note)
    tools = {_str(_d(t).get("invocation_id")): _str(_d(t).get("tool")) for t in _l(se.get("tool_trace_summary"))}
    cites = [
        {"invocation_id": inv, "raw_path": path, "tool_name": tools.get(inv, "")}
        for inv, paths in cited.items()
        for path in sorted(paths, key=_path_order)
    ]
    out.append(f"<h3>What the withheld draft cited ({len(cites)})</h3>")
    if not cites:
        out.append('<p class="meta">no citation recorded</p>')
    else:
        cshown, cnote = _cut(cites, CLAIMS_MAX, "citations")
        rows = "".join(_withheld_cite(c, verified, refs, known) for c in cshown)
        out.append(
            '<p class="meta">Each row is a ref the draft cited, with the text the tool recorded at that path '
            "(the draft's own excerpt is not kept).</p>"
            f"<table><tr><th>verified</th><th>tool</th><th>invocation</th><th>path</th><th>source</th><th>recorded ref text</th></tr>{rows}</table>{cnote}"
        )
    return "".join(out)


def _report_extras(body: dict[str, Any]) -> str:
    out = []
    hyps = [_d(h) for h in _l(body.get("hypotheses"))]
    if hyps:
        rows = "".join(
            f"<tr><td>{_badge(h.get('status'), _tone(h.get('status')))}</td><td><code>{_t(h.get('component'), 100)}</code> / "
            f"<code>{_t(h.get('mechanism'), 100)}</code></td><td>{_t(h.get('statement'))}</td>"
            f"<td>{_t(', '.join(_str(x) for x in _l(h.get('claim_ids'))[:20]), 300)}</td></tr>"
            for h in hyps[:_LIST_MAX]
        )
        out.append(f'<h3>Hypotheses</h3><table data-testid="hypotheses"><tr><th>status</th><th>cause</th><th>statement</th><th>claims</th></tr>{rows}</table>')
    rec = [_d(r) for r in _l(body.get("recovery"))]
    if rec:
        items = "".join(
            f"<li><code>{_t(r.get('action'), 100)}</code> {_t(r.get('target'), 300)} · risk {_t(r.get('risk'), 20)} · "
            f"approval {'required' if r.get('requires_approval') else 'not required'} — verify: {_t(r.get('verification'), 500)}</li>"
            for r in rec[:_LIST_MAX]
        )
        out.append(f'<h3>Recovery proposals</h3><ul data-testid="recovery">{items}</ul>')
    return "".join(out)


def _other_version(result: dict[str, Any], version: Any) -> str:
    """A guard's own rule set version, shown only where it differs from the run's."""
    own = result.get("rule_set_version")
    return f' <span class="meta">rule set {_t(own, 200)}</span>' if own and own != version else ""


def _guards(se: dict[str, Any]) -> str:
    ev, sem, ai = _d(se.get("evidence_guard")), _d(se.get("semantic_guard")), _d(se.get("aiops_rule_evaluation"))
    version = se.get("rule_set_version") or ev.get("rule_set_version") or sem.get("rule_set_version")
    out = [
        '<section class="card" id="guards" data-testid="guards"><h2>Guards</h2>',
        f'<p>rule set <code data-testid="rule-set-version">{_t(version or "not recorded", 200)}</code></p>',
    ]
    if ev:
        passed = bool(ev.get("passed"))
        codes = [_str(c) for c in _l(ev.get("codes"))]
        violated = set(codes)
        vrows = "".join(
            f'<tr data-testid="violation" data-code="{_a(_d(v).get("code"))}"><td class="nw">{_badge(_d(v).get("code"), "bad")}</td>'
            f'<td class="nw">{_t(_d(v).get("claim_id") or "—", 40)}</td><td class="nw">{_t(_d(v).get("citation_index"), 12) if _d(v).get("citation_index") is not None else "—"}</td>'
            f'<td class="wrap">{_t(_d(v).get("detail"))}</td></tr>'
            for v in _l(ev.get("violations"))[:_LIST_MAX]
        )
        rrows = "".join(
            f'<tr{" class=bad" if _str(_d(r).get("code")) in violated else ""}><td class="nw"><code>{_t(_d(r).get("id"), 20)}</code></td>'
            f'<td class="nw"><code>{_t(_d(r).get("code"), 60)}</code></td><td class="wrap">{_t(_d(r).get("description"), 1000)}</td></tr>'
            for r in _l(ev.get("rules"))[:_LIST_MAX]
        )
        out.append(
            f'<div data-testid="guard-verdict" data-guard="evidence" data-passed="{_yes(passed)}" data-codes="{_a(" ".join(codes))}">'
            f"<h3>EvidenceGuard {_badge('passed' if passed else 'failed', 'ok' if passed else 'bad')} "
            f"{_other_version(ev, version)}</h3>"
            f'<p>codes: <span data-testid="evidence-codes">{" ".join(_badge(c, "bad") for c in codes) or "none"}</span> · '
            f"{len(_l(ev.get('verified_sources')))} verified sources</p>"
            + (f"<table><tr><th>code</th><th>claim</th><th>citation</th><th>detail</th></tr>{vrows}</table>" if vrows else "")
            + (f"<details><summary>rules checked ({len(_l(ev.get('rules')))})</summary><table><tr><th>id</th><th>code</th><th>checks</th></tr>{rrows}</table></details>" if rrows else "")
            + "</div>"
        )
    else:
        out.append('<div data-testid="guard-verdict" data-guard="evidence" data-passed="not-run"><h3>EvidenceGuard <span class="badge">not run</span></h3><p class="meta">no draft reached the guards</p></div>')
    if sem:
        supported = bool(sem.get("supported"))
        state = "supported" if supported else "unavailable" if not sem.get("available") else "unsupported"
        verdicts = [_d(v) for v in _l(sem.get("verdicts"))]
        vshown, vnote = _cut(verdicts, _LIST_MAX, "verdicts")
        vrows = "".join(
            f'<tr data-testid="semantic-verdict" data-claim-id="{_a(v.get("claim_id"))}" data-verdict="{_a(v.get("verdict"))}">'
            f'<td class="nw"><code>{_t(v.get("claim_id"), 40)}</code></td><td class="nw">{_badge(v.get("verdict"), _tone(v.get("verdict")))}</td>'
            f'<td class="nw">{_t(v.get("code") or "—", 60)}</td><td class="nw">{_t(v.get("coverage") if v.get("coverage") is not None else "—", 20)}</td>'
            f"<td class=wrap>{_t(v.get('reason'))}</td></tr>"
            for v in vshown
        )
        rrows = "".join(
            f'<tr><td class="nw"><code>{_t(_d(r).get("id"), 20)}</code></td><td class="nw"><code>{_t(_d(r).get("code"), 60)}</code></td>'
            f'<td class="wrap">{_t(_d(r).get("description"), 1000)}</td></tr>'
            for r in _l(sem.get("rules"))[:_LIST_MAX]
        )
        out.append(
            f'<div data-testid="guard-verdict" data-guard="semantic" data-passed="{_yes(supported)}" data-state="{state}">'
            f"<h3>SemanticGuard {_badge(state, 'ok' if supported else 'bad')} "
            f'<span class="meta">judge {_t(sem.get("judge"), 100)}</span>{_other_version(sem, version)}</h3>'
            + (f'<p class="bad">error: {_t(sem.get("error"))}</p>' if sem.get("error") else "")
            + f"<table><tr><th>claim</th><th>verdict</th><th>code</th><th>coverage</th><th>reason</th></tr>{vrows}</table>{vnote}"
            + (f"<details><summary>rules ({len(_l(sem.get('rules')))})</summary><table><tr><th>id</th><th>code</th><th>checks</th></tr>{rrows}</table></details>" if rrows else "")
            + "</div>"
        )
    else:
        why = "the EvidenceGuard failed first" if ev and not ev.get("passed") else "no draft reached the guards"
        out.append(f'<div data-testid="guard-verdict" data-guard="semantic" data-passed="not-run"><h3>SemanticGuard <span class="badge">not run</span></h3><p class="meta">{why}</p></div>')
    if ai:
        rows = "".join(
            f'<tr><td><code>{_t(_d(c).get("rule"), 100)}</code></td><td>{_badge("pass" if _d(c).get("passed") else "fail", "ok" if _d(c).get("passed") else "bad")}</td>'
            f'<td>{_t(_d(c).get("detail"))}</td></tr>'
            for c in _l(ai.get("checks"))[:_LIST_MAX]
        )
        out.append(
            f'<div data-testid="guard-verdict" data-guard="aiops" data-passed="{_yes(ai.get("passed"))}">'
            f"<h3>AIOps rules {_badge('passed' if ai.get('passed') else 'failed', 'ok' if ai.get('passed') else 'bad')} "
            f'<span class="meta">rule set {_t(ai.get("rule_set_version"), 200)}</span></h3>'
            f"<table><tr><th>rule</th><th>result</th><th>detail</th></tr>{rows}</table></div>"
        )
    out.append("</section>")
    return "".join(out)


def _received(run: dict[str, Any]) -> str:
    content = run.get("content")
    out = ['<section class="card" id="received" data-testid="received"><h2>What the user received</h2>']
    if not isinstance(content, Mapping):
        out.append('<p class="meta" data-testid="received-none">nothing: the run was cancelled or has not ended</p></section>')
        return "".join(out)
    kind = content.get("content_type")
    out.append(f'<p>{_badge(kind, "info")}</p>')
    if kind == "SAFE_FALLBACK":
        fb = _d(content.get("fallback"))
        lims, lnote = _cut(_l(fb.get("limitations")), _LIST_MAX, "limitations")
        steps, snote = _cut(_l(fb.get("next_steps")), _LIST_MAX, "next steps")
        out.append(
            f'<p data-testid="fallback-message">{_badge(fb.get("type"), "warn")} {_t(fb.get("message"))}</p>'
            f'<h3>Limitations</h3><ul>{"".join(f"<li>{_t(x)}</li>" for x in lims)}</ul>{lnote}'
            f'<h3>Next steps</h3><ul>{"".join(f"<li>{_t(x)}</li>" for x in steps)}</ul>{snote}'
        )
    elif kind == "SYSTEM_MESSAGE":
        out.append(f'<p data-testid="system-message">{_t(content.get("message"), 4000)}</p>')
    text = json.dumps(content, ensure_ascii=False, indent=2, default=str)
    out.append(
        f'<details open><summary>content JSON ({len(text):,} characters)</summary><pre data-testid="received-json">{_t(text, RECEIVED_CHARS, lines=True)}</pre></details></section>'
    )
    return "".join(out)


def _reasoning(trace: dict[str, Any], reasoning: list[dict[str, Any]] | None) -> str:
    meta = [_d(r) for r in _l(trace.get("reasoning"))]
    if reasoning is None:
        rows = "".join(
            f"<tr><td>{_t(r.get('step_index'), 12)}</td><td>{_yes(r.get('reasoning_available'))}</td>"
            f"<td>{_t(r.get('content_source'), 60)}</td><td>{_t(r.get('content_bytes'), 20)}</td></tr>"
            for r in meta[:_LIST_MAX]
        )
        return (
            '<section class="card" id="reasoning" data-testid="reasoning-hidden"><h2>Reasoning</h2>'
            '<p class="note">Hidden: the model\'s reasoning and assistant texts are shown to auditors only.</p>'
            + (f"<table><tr><th>step</th><th>provider reasoning</th><th>content source</th><th>bytes</th></tr>{rows}</table>" if rows else "")
            + "</section>"
        )
    shown, note = _cut([_d(r) for r in reasoning], _LIST_MAX, "reasoning rows")
    items = []
    for r in shown:
        parts = []
        if r.get("reasoning_content"):
            parts.append(f'<h3>provider reasoning</h3><pre data-testid="reasoning-content">{_t(r.get("reasoning_content"), REASONING_CHARS, lines=True)}</pre>')
        if r.get("assistant_text"):
            parts.append(f'<h3>assistant text</h3><pre data-testid="assistant-text">{_t(r.get("assistant_text"), REASONING_CHARS, lines=True)}</pre>')
        items.append(
            f'<div class="claim" data-testid="reasoning-step" data-step-index="{_a(r.get("step_index"))}">'
            f'<div class="claim-head"><b>model step {_t(r.get("step_index"), 12)}</b>{_badge(r.get("content_source"), "info")}'
            f'<span class="meta">{_t(r.get("content_bytes"), 20)} bytes</span></div>'
            + ("".join(parts) or '<p class="meta">nothing recorded for this step</p>')
            + "</div>"
        )
    return (
        '<section class="card" id="reasoning" data-testid="reasoning"><h2>Reasoning (audit)</h2>'
        '<p class="meta">Sensitive: the model\'s own reasoning and assistant texts, for auditors.</p>'
        + ("".join(items) or '<p class="meta">no reasoning rows recorded</p>')
        + note
        + "</section>"
    )


# -- the page ----------------------------------------------------------------------------------


def render_run_page(trace: Mapping[str, Any], *, reasoning: list[dict[str, Any]] | None = None, signed_in_as: str | None = None) -> str:
    """One self-contained HTML document for one run's trace.

    Args:
        trace: what `SqlTraceStore.trace(run_id)` returned (`run`, `steps`, `invocations`,
            `reasoning` metadata, `events`).
        reasoning: `SqlTraceStore.reasoning(run_id)`, for auditors only; None shows a note that
            the reasoning is hidden (with its metadata alone).
        signed_in_as: who a browser session belongs to (`key:1a2b3c4d5e6f (operator)`): the
            header then names it beside a sign-out button (a form posting to `/logout`, the
            one form the page's policy allows).

    Raises:
        ValueError: `trace` has no `run` (an unknown run).
    """
    data = _d(trace)
    run = _d(data.get("run"))
    if not run:
        raise ValueError("trace.run: missing (unknown run)")
    se = _d(run.get("self_evaluation"))
    cited = _cited_paths(_l(se.get("tool_trace_summary")))
    content = _d(run.get("content"))
    sources = _l(content.get("verified_sources")) or _l(_d(se.get("evidence_guard")).get("verified_sources"))
    verified = _verified(sources)
    nav = "".join(
        f'<a href="#{a}">{label}</a>'
        for a, label in (
            ("summary", "Run"),
            ("timeline", "Timeline"),
            ("claims", "Claims"),
            ("guards", "Guards"),
            ("received", "Received"),
            ("reasoning", "Reasoning"),
        )
    )
    doc = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP if signed_in_as is None else _CSP_SIGNED_IN}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1"><meta name="referrer" content="no-referrer">'
        '<meta name="robots" content="noindex">'
        f"<title>rootproof run {_t(run.get('run_id'), 100)}</title><style>{_CSS}</style></head>"
        f'<body data-run-id="{_a(run.get("run_id"))}">'
        '<header class="top"><div class="inner"><span class="brand">rootproof · trace</span>'
        f'<nav>{nav}</nav><span class="tools"><button type="button" id="expand-all">expand all</button>'
        '<button type="button" id="collapse-all">collapse all</button></span>'
        + (
            ""
            if signed_in_as is None
            else f'<form class="signout" method="post" action="/logout" data-testid="sign-out">{_t(signed_in_as, 100)} '
            '<button type="submit" id="sign-out">sign out</button></form>'
        )
        + "</div></header><main>"
        + _summary(run, data)
        + _timeline(data, cited, verified)
        + _claims(run, data, se, cited)
        + _guards(se)
        + _received(run)
        + _reasoning(data, reasoning)
        + f"</main><script>{_JS}</script></body></html>\n"
    )
    return doc
