"""The trace viewer page (`rootproof.service.viewer.render_run_page`) on the traces of real runs.

Four runs through `Harness(Runtime.from_settings(...))` into a real `SqlTraceStore` on a
temporary SQLite file: the built-in `payment-timeout` (its Chinese question; the guards withhold
the draft, EVIDENCE_VALIDATION_FAILED with ROOT_CAUSE_MOCK_ONLY), the built-in `pg-row-lock`
(published), a copy of `pg-row-lock` whose PostgreSQL log line (the one its report cites first)
ends with markup, asked a question carrying the same markup (it reaches the question, excerpts,
ref texts and the received JSON), and `pg-row-lock` under a scripted model whose reasoning
carries the markup and whose second claim misquotes a number (SEMANTIC_UNSUPPORTED); and two
runs that never reach the guards (a greeting answered by a system message, a model that gives
no valid draft).

Unit tests read the rendered HTML; the browser test serves the pages over a loopback HTTP server
and renders them in Debian's headless `chromium` (`--dump-dom`, `--screenshot`): the elements
are there and no planted script ran. Without chromium it skips (fails under
`ROOTPROOF_REQUIRE_SERVICES=1`). The runs keep the knowledge index cache of the default data
folder (built once, as every command does); only the trace store is temporary.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import html
import json
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from rootproof.agent.models.base import ModelRequest
from rootproof.agent.models.scripted import ScriptedModel, ScriptedStep
from rootproof.harness import Harness
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.service.viewer import PARAMS_CHARS, QUESTION_CHARS, TEXT_CHARS, render_run_page
from rootproof.settings import load_settings
from rootproof.store.sql import SqlTraceStore
from rootproof.terminal import one_line

BUILTIN = Path(__file__).resolve().parents[2] / "src" / "rootproof" / "scenarios" / "builtin"
PWNED = "PWNED"
XSS = f"<script>document.title='{PWNED}'</script>\"><img src=x onerror=\"document.title='{PWNED}'\">"
"""Planted in a question and in a log line: must render as text, never as markup."""
SEED_QUESTION = "支付接口最近出现超时"
PLANTED_LINE = "[5301] app@orders LOG:  process 5301 still waiting for ShareLock on transaction 81234 after 1000.211 ms"
"""The PostgreSQL log line the report's first root-cause claim cites."""
VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"})


@dataclass(frozen=True)
class Run:
    trace: dict[str, Any]
    reasoning: list[dict[str, Any]]

    @property
    def run(self) -> dict[str, Any]:
        run: dict[str, Any] = self.trace["run"]
        return run


@dataclass(frozen=True)
class Runs:
    seed: Run
    published: Run
    planted: Run
    unsupported: Run
    chat: Run
    no_draft: Run


def _cite(requests: list[ModelRequest], needle: str) -> dict[str, Any]:
    """A citation of the first observed ref containing `needle`, quoting `needle`."""
    for m in requests[-1].messages:
        if m.role == "tool":
            o = json.loads(m.content)
            for r in o.get("refs") or []:
                if needle in r["text"]:
                    return {"invocation_id": o["invocation_id"], "tool_name": o["tool"], "raw_path": r["raw_path"], "excerpt": needle}
    raise AssertionError(f"no observed ref contains {needle!r}")


def _misquoting_draft(requests: list[ModelRequest]) -> dict[str, Any]:
    """c1 (the root cause) quotes two waiting processes; c2 misquotes how long one waited."""
    quotes = [_cite(requests, f"process {pid} still waiting for ShareLock on transaction 81234") for pid in (5301, 5188)]
    return {
        "summary": "PostgreSQL row lock contention on transaction 81234",
        "root_cause": {"component": "postgresql", "mechanism": "row_lock_contention", "culprit": "transaction 81234", "claim_ids": ["c1"]},
        "claims": [
            {
                "id": "c1",
                "kind": "root_cause",
                "text": 'PostgreSQL logs "process 5301 still waiting for ShareLock on transaction 81234" and "process 5188 still waiting for ShareLock on transaction 81234"',
                "citations": quotes,
            },
            {"id": "c2", "kind": "finding", "text": "process 5301 waited 99999 ms for ShareLock on transaction 81234", "citations": quotes[:1]},
        ],
    }


def _planted_scenario(folder: Path) -> Path:
    """A copy of `pg-row-lock` whose cited PostgreSQL log line ends with `XSS`."""
    target = folder / "pg-row-lock"
    shutil.copytree(BUILTIN / "pg-row-lock", target)
    path = target / "snapshot" / "tool_responses.yaml"
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    hits = [e for e in data["logs"] if e["message"].endswith(PLANTED_LINE)]
    assert len(hits) == 1
    hits[0]["message"] += f" {XSS}"
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return target


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    tmp = tmp_path_factory.mktemp("viewer")
    settings = load_settings(database_url=f"sqlite:///{tmp / 'trace.db'}")
    planted_dir = _planted_scenario(tmp)
    with Runtime.from_settings(settings) as runtime:
        h = Harness(runtime)
        store = runtime.sink
        assert isinstance(store, SqlTraceStore)

        def run(question: str, scenario: Any, model: Any = None) -> Run:
            out = h.diagnose(question, scenario=scenario, model=model)
            trace = store.trace(out.run_id)
            assert trace is not None
            return Run(trace, store.reasoning(out.run_id))

        pg = load_scenario("pg-row-lock")
        planted = load_scenario(planted_dir)
        return Runs(
            seed=run(SEED_QUESTION, load_scenario("payment-timeout")),
            published=run(pg.question, pg),
            planted=run(f"{planted.question} {XSS}", planted),
            unsupported=run(
                pg.question,
                pg,
                ScriptedModel(
                    [
                        ScriptedStep(calls=[("query_logs", {"query": "ShareLock"})], reasoning=f"look at the locks {XSS}"),
                        ScriptedStep(draft=_misquoting_draft, text="drafting"),
                    ]
                ),
            ),
            chat=run("你好", None),
            no_draft=run(pg.question, pg, ScriptedModel([ScriptedStep(draft="not json at all"), ScriptedStep(draft="still not json")])),
        )


class _Page(HTMLParser):
    """Elements (tag, attributes) and the text under each `data-testid`, of a parsed page."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.texts: dict[str, list[str]] = {}
        self.title = ""
        self._stack: list[tuple[str, str | None]] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        if tag not in VOID:
            self._stack.append((tag, a.get("data-testid")))
            if a.get("data-testid"):
                self.texts.setdefault(a["data-testid"], []).append("")

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            if self._stack.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._stack and self._stack[-1][0] == "title":
            self.title += data
        for _tag, testid in self._stack:
            if testid:
                self.texts[testid][-1] += data

    def by(self, testid: str, **attrs: str) -> list[dict[str, str]]:
        """Elements with this `data-testid` and these attribute values (`data_x` for `data-x`)."""
        want = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [a for _t, a in self.elements if a.get("data-testid") == testid and all(a.get(k) == v for k, v in want.items())]

    def text(self, testid: str) -> list[str]:
        return self.texts.get(testid, [])


def _escaped(text: str) -> str:
    return html.escape(text, quote=True)


# -- unit: the seed fallback ----------------------------------------------------------------------


def test_fallback_page_shows_the_withheld_draft_and_the_guards_verdicts(runs: Runs) -> None:
    run, trace = runs.seed.run, runs.seed.trace
    assert (run["status"], run["release_outcome"], run["fallback_type"]) == ("SUCCESS", "FALLBACK", "EVIDENCE_VALIDATION_FAILED")
    text = render_run_page(trace)
    page = _Page(text)
    assert page.title == f"rootproof run {run['run_id']}"
    [summary] = page.by("run-summary")
    assert (summary["data-status"], summary["data-release-outcome"], summary["data-fallback-type"]) == (
        "SUCCESS",
        "FALLBACK",
        "EVIDENCE_VALIDATION_FAILED",
    )
    assert page.text("question") == [SEED_QUESTION]
    assert page.text("route") == ["DIAGNOSIS"] and page.text("model") == [run["model"]]
    assert "ROOT_CAUSE_MOCK_ONLY" in page.text("outcome-story")[0]
    # timeline: step 0 calls both tools, step 1 drafts; the logs are mock
    steps = page.by("model-step")
    assert [(s["data-step-index"], s["data-tool-call"]) for s in steps] == [("0", "yes"), ("1", "no")]
    calls = page.by("tool-call")
    assert sorted((c["data-tool"], c["data-status"], c["data-evidence-status"]) for c in calls) == [
        ("lookup_knowledge", "READY", "EVIDENCE_FOUND"),
        ("query_logs", "READY", "EVIDENCE_FOUND"),
    ]
    assert {c["data-tool"]: c["data-data-source"] for c in calls}["query_logs"] == "mock"
    assert len(page.text("call-duration")) == 2 and len(page.text("step-tokens")) == 2
    # the guards: EvidenceGuard failed on ROOT_CAUSE_MOCK_ONLY, the SemanticGuard never ran
    se = run["self_evaluation"]
    assert page.text("rule-set-version") == [se["rule_set_version"]]
    [ev] = page.by("guard-verdict", data_guard="evidence")
    assert (ev["data-passed"], ev["data-codes"]) == ("no", "ROOT_CAUSE_MOCK_ONLY")
    assert [v["data-code"] for v in page.by("violation")] == ["ROOT_CAUSE_MOCK_ONLY"]
    [sem] = page.by("guard-verdict", data_guard="semantic")
    assert sem["data-passed"] == "not-run"
    # the withheld draft: no published claim; what it cited, none verified, with the recorded ref texts
    assert page.by("claim", data_state="published") == []
    assert page.by("withheld-note")
    cited = {(t["invocation_id"], p) for t in se["tool_trace_summary"] for p in t["cited_paths"]}
    cites = page.by("citation", data_state="withheld")
    assert {(c["data-invocation-id"], c["data-path"]) for c in cites} == cited and len(cites) == 10
    assert {c["data-verified"] for c in cites} == {"no"}
    logs = next(i for i in trace["invocations"] if i["tool_name"] == "query_logs")
    first = next(r["text"] for r in logs["evidence_refs"] if r["raw_path"] == "$.entries[1]")
    assert "HikariPool-1 - Connection is not available" in first and first in page.text("excerpt")
    # what the user received: the content JSON, pretty and escaped
    assert _escaped(json.dumps(run["content"], ensure_ascii=False, indent=2)) in text
    assert page.text("fallback-message") == ["EVIDENCE_VALIDATION_FAILED 当前证据无法完成真实性校验，无法确认根因"]
    # reasoning: hidden unless given; the audit texts appear only for auditors
    assistant = next(r["assistant_text"] for r in runs.seed.reasoning if r["assistant_text"])
    assert page.by("reasoning-hidden") and not page.by("reasoning")
    assert _escaped(assistant) not in text
    audit = _Page(render_run_page(trace, reasoning=runs.seed.reasoning))
    assert audit.by("reasoning") and not audit.by("reasoning-hidden")
    assert [r["data-step-index"] for r in audit.by("reasoning-step")] == ["0", "1"]
    assert audit.text("assistant-text") == [assistant]


# -- unit: a published report --------------------------------------------------------------------


def test_published_page_shows_every_claim_with_its_verified_citations(runs: Runs) -> None:
    run, trace = runs.published.run, runs.published.trace
    assert (run["status"], run["release_outcome"], run["fallback_type"]) == ("SUCCESS", "PUBLISHED", None)
    text = render_run_page(trace)
    page = _Page(text)
    report = run["content"]["report"]
    claims = page.by("claim", data_state="published")
    assert [(c["data-claim-id"], c["data-kind"]) for c in claims] == [(c["id"], c["kind"]) for c in report["claims"]]
    # A line break inside a claim (a quoted stack trace) is shown escaped, never as layout.
    assert page.text("claim-text") == [one_line(c["text"]) for c in report["claims"]]
    assert any("\n" in c["text"] for c in report["claims"]) and not any("\n" in t for t in page.text("claim-text"))
    cites = page.by("citation", data_state="published")
    expected = [(x["invocation_id"], x["raw_path"]) for c in report["claims"] for x in c["citations"]]
    assert [(c["data-invocation-id"], c["data-path"]) for c in cites] == expected
    assert {c["data-verified"] for c in cites} == {"yes"}  # every citation is in verified_sources
    assert page.text("excerpt") == [one_line(x["excerpt"][:TEXT_CHARS]) for c in report["claims"] for x in c["citations"]]
    for c in report["claims"]:
        for x in c["citations"]:
            assert _escaped(one_line(x["excerpt"])) in text
    assert page.text("report-summary") == [one_line(report["summary"])]
    # verdicts: EvidenceGuard passed, every claim SUPPORTED by the SemanticGuard
    se = run["self_evaluation"]
    [ev] = page.by("guard-verdict", data_guard="evidence")
    [sem] = page.by("guard-verdict", data_guard="semantic")
    assert (ev["data-passed"], ev["data-codes"], sem["data-passed"]) == ("yes", "", "yes")
    verdicts = page.by("semantic-verdict")
    assert [(v["data-claim-id"], v["data-verdict"]) for v in verdicts] == [
        (v["claim_id"], v["verdict"]) for v in se["semantic_guard"]["verdicts"]
    ]
    assert {v["data-verdict"] for v in verdicts} == {"SUPPORTED"} and len(verdicts) == len(report["claims"])
    assert page.text("rule-set-version") == [se["rule_set_version"]]
    # the timeline has every step and call, in order
    assert [s["data-step-index"] for s in page.by("model-step")] == [str(s["step_index"]) for s in trace["steps"]]
    assert [c["data-invocation-id"] for c in page.by("tool-call")] == [i["invocation_id"] for i in trace["invocations"]]
    assert _escaped(json.dumps(run["content"], ensure_ascii=False, indent=2)) in text
    assert page.text("conclusion")[0].count(run["conclusion"]["culprit"]) == 1


# -- unit: a draft the SemanticGuard withheld, and the auditors' page ------------------------------


def test_unsupported_draft_shows_its_claims_by_id_with_verdicts_and_reasoning_only_for_auditors(runs: Runs) -> None:
    run, trace = runs.unsupported.run, runs.unsupported.trace
    assert (run["release_outcome"], run["fallback_type"]) == ("FALLBACK", "SEMANTIC_UNSUPPORTED")
    page = _Page(render_run_page(trace))
    claims = page.by("claim", data_state="withheld")
    assert [c["data-claim-id"] for c in claims] == ["c1", "c2"]
    assert [(v["data-claim-id"], v["data-verdict"]) for v in page.by("semantic-verdict")] == [("c1", "SUPPORTED"), ("c2", "UNSUPPORTED")]
    [sem] = page.by("guard-verdict", data_guard="semantic")
    [ev] = page.by("guard-verdict", data_guard="evidence")
    assert (ev["data-passed"], sem["data-passed"], sem["data-state"]) == ("yes", "no", "unsupported")
    assert "NUMBER_NOT_IN_EVIDENCE" in page.text("guards")[0] and "(c2)" in page.text("outcome-story")[0]
    # the EvidenceGuard verified both cited refs: the withheld citations say so
    cites = page.by("citation", data_state="withheld")
    assert len(cites) == 2 and {c["data-verified"] for c in cites} == {"yes"}
    # the reasoning: hidden here; shown (escaped) to auditors
    assert page.by("reasoning-hidden") and not page.text("reasoning-content") and XSS not in "".join(page.text("reasoning-hidden"))
    text = render_run_page(trace, reasoning=runs.unsupported.reasoning)
    assert XSS not in text and text.count("<script>") == 1
    audit = _Page(text)
    assert audit.text("reasoning-content") == [f"look at the locks {XSS}"]
    assert audit.text("assistant-text")[1].startswith("drafting")


def test_runs_that_never_reached_the_guards_say_so(runs: Runs) -> None:
    chat, no_draft = runs.chat.run, runs.no_draft.run
    assert (chat["route"], chat["content"]["content_type"]) == ("SYSTEM_CHAT", "SYSTEM_MESSAGE")
    assert (no_draft["release_outcome"], no_draft["fallback_type"]) == ("FALLBACK", "NO_DRAFT")
    for run in (runs.chat, runs.no_draft):
        page = _Page(render_run_page(run.trace))
        assert page.by("no-draft") and not page.by("claim") and not page.by("citation")
        assert [v["data-passed"] for v in page.by("guard-verdict")] == ["not-run", "not-run"]
        assert page.text("rule-set-version") == [run.run["self_evaluation"]["rule_set_version"]]
        assert page.by("received")
    chat_page = _Page(render_run_page(runs.chat.trace))
    assert chat_page.text("system-message") == [chat["content"]["message"]]
    assert "Published a system message" in chat_page.text("outcome-story")[0]
    assert "no draft reached the guards" in _Page(render_run_page(runs.no_draft.trace)).text("outcome-story")[0]


# -- unit: untrusted text ------------------------------------------------------------------------


def test_planted_markup_in_the_question_and_an_excerpt_renders_as_text(runs: Runs) -> None:
    run, trace = runs.planted.run, runs.planted.trace
    assert run["release_outcome"] == "PUBLISHED" and XSS in run["question"]
    excerpts = [x["excerpt"] for c in run["content"]["report"]["claims"] for x in c["citations"] if XSS in x["excerpt"]]
    assert excerpts, "the planted line must be cited, so that the markup reaches an excerpt"
    text = render_run_page(trace, reasoning=runs.planted.reasoning)
    assert XSS not in text and "<img" not in text and "onerror=\"" not in text
    assert text.count("<script>") == 1  # the page's own
    assert _escaped(XSS) in text
    page = _Page(text)
    assert not [t for t, a in page.elements if t == "img" or any(k.startswith("on") for k in a)]
    assert XSS in page.text("question")[0]
    assert any(XSS in e for e in page.text("excerpt"))
    assert json.dumps(XSS, ensure_ascii=False)[1:-1] in page.text("received-json")[0]  # as JSON text
    refs = [t for t in page.text("evidence-ref") if XSS in t]
    assert refs  # the ref text in the timeline is escaped too


def test_sizes_are_bounded_and_control_characters_shown(runs: Runs) -> None:
    trace = copy.deepcopy(runs.published.trace)
    run = trace["run"]
    run["question"] = "why \x1b[2J\u202e \ud800 " + "q" * 20_000
    claim = run["content"]["report"]["claims"][0]
    claim["citations"][0]["excerpt"] = "x" * 50_000
    logs = next(i for i in trace["invocations"] if i["tool_name"] == "query_logs")
    logs["evidence_refs"] = [{"raw_path": f"$.entries[{n}]", "text": "y" * 10_000, "data_source": "snapshot", "untrusted_spans": [[5, 9_000]]} for n in range(500)]
    logs["input_params"] = {"query": "z" * 5_000}
    text = render_run_page(trace)
    text.encode("utf-8")  # the lone surrogate became U+FFFD: the page encodes
    page = _Page(text)
    assert len(text) < 2_000_000
    assert "\x1b" not in text and "\u202e" not in text and "\\x1b[2J\\u202e \ufffd" in page.text("question")[0]
    assert f"clipped: {len(run['question']) - QUESTION_CHARS:,} more characters" in page.text("question")[0]
    assert f"clipped: {50_000 - TEXT_CHARS:,} more characters" in page.text("citation")[0]
    paths = {r["data-path"] for r in page.by("evidence-ref")}
    assert "$.entries[39]" in paths and "$.entries[40]" not in paths and "460 more refs not shown" in text
    assert sum("clipped: 8,000 more characters" in t for t in page.text("evidence-ref")) == 40  # 2 000 of 10 000 shown
    args = page.text("tool-args")[trace["invocations"].index(logs)]
    assert f"clipped: {len(json.dumps(logs['input_params'])) - PARAMS_CHARS:,} more characters" in args


def test_page_is_self_contained_and_its_policy_allows_only_its_own_style_and_script(runs: Runs) -> None:
    text = render_run_page(runs.seed.trace)
    assert not re.search(r"<(link|img|iframe|object|embed)\b|\bsrc=|https?://", text)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', text)
    assert csp is not None
    style = re.search(r"<style>(.*?)</style>", text, re.S)
    script = re.search(r"<script>(.*?)</script>", text, re.S)
    assert style is not None and script is not None

    def digest(source: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"

    policy = csp.group(1)
    assert "default-src 'none'" in policy
    assert f"style-src {digest(style.group(1))}" in policy and f"script-src {digest(script.group(1))}" in policy


def test_an_unknown_run_is_refused() -> None:
    with pytest.raises(ValueError, match="trace.run"):
        render_run_page({"run": None, "steps": []})


# -- the browser ---------------------------------------------------------------------------------


def _chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)
    if path is None:
        what = "chromium is not installed (apt-get install chromium)"
        if os.environ.get("ROOTPROOF_REQUIRE_SERVICES", "") == "1":
            pytest.fail(f"{what} (ROOTPROOF_REQUIRE_SERVICES=1)", pytrace=False)
        pytest.skip(what)
    return path


@pytest.fixture
def pages() -> Iterator[tuple[dict[str, bytes], str]]:
    """A loopback HTTP server of `{path: HTML}` (filled by the test); yields (pages, base URL)."""
    served: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = served.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _browse(chromium: str, profile: Path, url: str, *args: str) -> str:
    """Run headless chromium on `url` (its own process group, killed whole on a timeout); its stdout."""
    from tests.service.cdp import HEADLESS

    cmd = [
        chromium,
        *HEADLESS,
        f"--user-data-dir={profile}",
        *args,
        url,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"chromium did not finish within 30 s: {' '.join(args)} {url}", pytrace=False)
    assert proc.returncode == 0, err[-2000:]
    return out


def test_the_browser_renders_the_pages_and_runs_no_planted_script(
    runs: Runs, pages: tuple[dict[str, bytes], str], tmp_path: Path
) -> None:
    chromium = _chromium()
    served, base = pages
    cases = {"seed": runs.seed, "published": runs.published, "planted": runs.planted, "audit": runs.unsupported}
    for name, run in cases.items():
        audit = run.reasoning if name == "audit" else None
        served[f"/runs/{run.run['run_id']}"] = render_run_page(run.trace, reasoning=audit).encode("utf-8")
    # the control: the same markup unescaped does run in this browser (so the check below means something)
    served["/control"] = f"<!DOCTYPE html><html><head><title>control</title></head><body>{XSS}</body></html>".encode()
    profile = tmp_path / "profile"
    control = _Page(_browse(chromium, profile, f"{base}/control", "--dump-dom"))
    assert control.title == PWNED
    for name, run in cases.items():
        url = f"{base}/runs/{run.run['run_id']}"
        shot = tmp_path / f"{name}.png"
        dom = _Page(_browse(chromium, profile, url, "--dump-dom", f"--screenshot={shot}", "--window-size=1280,2000"))
        assert dom.title == f"rootproof run {run.run['run_id']}", name  # no planted script changed it
        assert ("html", {"lang": "en", "data-viewer-script": "ran"}) in dom.elements, name  # the page's own script ran
        assert not [t for t, a in dom.elements if t == "img" or any(k.startswith("on") for k in a)], name
        assert len([t for t, _a in dom.elements if t == "script"]) == 1, name
        assert len(dom.by("tool-call")) == len(run.trace["invocations"]) > 0, name
        assert len(dom.by("model-step")) == len(run.trace["steps"]) > 0, name
        assert dom.by("guard-verdict", data_guard="evidence") and dom.by("guard-verdict", data_guard="semantic"), name
        assert dom.by("received"), name
        if name == "audit":
            assert dom.by("reasoning-step") and XSS in dom.text("reasoning-content")[0]
        else:
            assert dom.by("reasoning-hidden"), name
        if run.run["release_outcome"] == "PUBLISHED":
            assert len(dom.by("claim", data_state="published")) == len(run.run["content"]["report"]["claims"]), name
            assert len(dom.by("semantic-verdict")) == len(run.run["content"]["report"]["claims"]), name
        else:
            assert dom.by("citation", data_state="withheld"), name
        if name == "planted":
            assert XSS in dom.text("question")[0] and any(XSS in e for e in dom.text("excerpt"))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000, name
        print(f"screenshot {name}: {shot}")
