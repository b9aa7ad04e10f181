"""Notifications: the receivers file and its one-line errors, the message built from real runs
(published and fallback, en and zh), Slack escaping of planted mentions and links, what never
reaches a body, and one delivery attempt against a loopback HTTP server."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

import rootproof.scenarios
from rootproof.errors import ConfigError
from rootproof.harness import Harness
from rootproof.run.records import MemoryTraceSink, RunRecord
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.service.notify import (
    BODY_BYTES,
    FIELD_CHARS,
    Delivery,
    Notification,
    Receiver,
    build_notification,
    deliver,
    load_receivers,
    render,
)
from rootproof.settings import load_settings

SECRET = "T0KEN-s3cr3t-9f8e7d"
"""A distinctive part of every receiver URL: it must never show in an error, repr, log or detail."""
PUBLIC = "https://rootproof.example.com/"
PLANTED_EVIDENCE = "order-admin <!channel> & <https://evil.example|click> <@U123>"
PLANTED_SUMMARY = "p95 <!channel> & <https://x.example|y> is high"


# -- the receivers file ------------------------------------------------------------------------
def _file(tmp_path: Path, text: str | bytes, name: str = "notify.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _error(path: Path, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_receivers(path, environ if environ is not None else {})
    message = str(info.value)
    assert message.startswith(f"ROOTPROOF_NOTIFICATIONS: {path}: "), message
    assert "\n" not in message and SECRET not in message and "hooks.example" not in message, message
    return message.removeprefix(f"ROOTPROOF_NOTIFICATIONS: {path}: ")


HOOK = f"https://hooks.example/services/{SECRET}"
ENV = {"ONCALL_HOOK_URL": HOOK}
ONE = "receivers:\n  - name: oncall-hook\n    kind: webhook\n    url_env: ONCALL_HOOK_URL\n"


@pytest.mark.parametrize(
    ("text", "environ", "expected"),
    [
        ("", ENV, "empty: expected a mapping with a receivers list"),
        ("receivers: [\n", ENV, "not valid YAML at line 2"),
        ("- name: x\n", ENV, "expected a mapping with a receivers list at the top level, got list"),
        ("other: 1\n", ENV, "other: unknown key (expected receivers)"),
        (ONE + "extra: true\n", ENV, "extra: unknown key (expected receivers)"),
        ("{}\n", ENV, "receivers: missing (required)"),
        ("receivers: oncall\n", ENV, "receivers: expected a non-empty list of receivers"),
        ("receivers: []\n", ENV, "receivers: expected a non-empty list of receivers"),
        (
            f"receivers:\n  - {HOOK}\n",
            ENV,
            "receivers[0]: expected a mapping (name, kind, url_env, url_file, timeout_s), got str",
        ),
        (
            ONE + f"    url: {HOOK}\n",
            ENV,
            "receivers[0].url: unknown key (expected name, kind, url_env, url_file, timeout_s)",
        ),
        (
            ONE + "  - name: two\n    kind: email\n    url_env: ONCALL_HOOK_URL\n",
            ENV,
            "receivers[1].kind: expected webhook or slack",
        ),
        (
            "receivers:\n  - kind: slack\n    url_env: ONCALL_HOOK_URL\n",
            ENV,
            "receivers[0].name: missing (required)",
        ),
        (
            "receivers:\n  - name: Oncall Hook\n    kind: slack\n    url_env: ONCALL_HOOK_URL\n",
            ENV,
            "receivers[0].name: expected 1 to 64 lowercase letters",
        ),
        (
            "receivers:\n  - name: 12\n    kind: slack\n    url_env: ONCALL_HOOK_URL\n",
            ENV,
            "receivers[0].name: expected a string",
        ),
        (
            ONE + "    timeout_s: 0.1\n",
            ENV,
            "receivers[0].timeout_s: expected a number of seconds from 0.5 to 60",
        ),
        (
            ONE + "    timeout_s: 61\n",
            ENV,
            "receivers[0].timeout_s: expected a number of seconds from 0.5 to 60",
        ),
        (
            ONE + "    timeout_s: ten\n",
            ENV,
            "receivers[0].timeout_s: expected a number of seconds from 0.5 to 60",
        ),
        (
            ONE + "    timeout_s: true\n",
            ENV,
            "receivers[0].timeout_s: expected a number of seconds from 0.5 to 60",
        ),
        (ONE + "    url_file: hook.url\n", ENV, "receivers[0]: give exactly one of url_env and url_file"),
        (
            "receivers:\n  - name: a\n    kind: slack\n",
            ENV,
            "receivers[0]: give exactly one of url_env and url_file",
        ),
        (
            ONE
            + ONE.removeprefix("receivers:\n").replace("oncall-hook", "b")
            + ONE.removeprefix("receivers:\n"),
            ENV,
            'receivers[2].name: duplicate name "oncall-hook"',
        ),
        (ONE, {}, "receivers[0].url_env: the environment variable ONCALL_HOOK_URL is not set"),
        (
            ONE,
            {"ONCALL_HOOK_URL": "  \n"},
            "receivers[0].url_env: the environment variable ONCALL_HOOK_URL is empty",
        ),
        (
            ONE,
            {"ONCALL_HOOK_URL": f"ftp://hooks.example/{SECRET}"},
            "receivers[0].url_env: the environment variable ONCALL_HOOK_URL does not hold an http or https URL with a host",
        ),
        (
            ONE,
            {"ONCALL_HOOK_URL": f"https:///{SECRET}"},
            "receivers[0].url_env: the environment variable ONCALL_HOOK_URL does not hold an http or https URL with a host",
        ),
        (
            ONE,
            {"ONCALL_HOOK_URL": f"https://hooks.example/a {SECRET}"},
            "receivers[0].url_env: the environment variable ONCALL_HOOK_URL does not hold an http or https URL with a host",
        ),
        (
            ONE,
            {"ONCALL_HOOK_URL": f"https://hooks.example:99999/{SECRET}"},
            "receivers[0].url_env: the environment variable ONCALL_HOOK_URL does not hold an http or https URL with a host",
        ),
        (
            ONE.replace("url_env: ONCALL_HOOK_URL", "url_env: ONCALL-HOOK"),
            ENV,
            "receivers[0].url_env: expected the name of an environment variable",
        ),
    ],
)
def test_a_wrong_receivers_file_is_one_line_naming_the_field(
    tmp_path: Path, text: str, environ: dict[str, str], expected: str
) -> None:
    assert _error(_file(tmp_path, text), environ).startswith(expected)


def test_file_level_errors(tmp_path: Path) -> None:
    assert _error(tmp_path / "absent.yaml") == "not found"
    assert _error(tmp_path) == "not a file"
    assert _error(_file(tmp_path, b"receivers:\n  - name: \xff\xfe\n")).startswith("not UTF-8 text")
    big = ONE + "# " + "x" * (64 * 1024) + "\n"
    assert _error(_file(tmp_path, big), ENV).endswith("bytes, more than the cap of 65536 bytes")
    many = "receivers:\n" + "".join(
        f"  - {{name: r{i}, kind: slack, url_env: ONCALL_HOOK_URL}}\n" for i in range(51)
    )
    assert _error(_file(tmp_path, many), ENV) == "receivers: 51 receivers, more than the cap of 50"
    fifty = "receivers:\n" + "".join(
        f"  - {{name: r{i}, kind: slack, url_env: ONCALL_HOOK_URL}}\n" for i in range(50)
    )
    assert len(load_receivers(_file(tmp_path, fifty), ENV)) == 50


def test_url_file_errors_name_the_file_never_its_content(tmp_path: Path) -> None:
    text = "receivers:\n  - name: team-slack\n    kind: slack\n    url_file: slack.url\n"
    path = _file(tmp_path, text)
    assert _error(path) == f"receivers[0].url_file: the file {tmp_path / 'slack.url'} does not exist"
    for content, problem in [
        (f"javascript:alert('{SECRET}')\n", "does not hold an http or https URL with a host"),
        (f"{HOOK}\n{HOOK}\n", "holds more than one line; expected one line with the URL"),
        ("\n\n", "is empty; expected one line with the URL"),
    ]:
        (tmp_path / "slack.url").write_text(content, encoding="utf-8")
        assert _error(path) == f"receivers[0].url_file: the file {tmp_path / 'slack.url'} {problem}"
    (tmp_path / "slack.url").write_bytes(b"https://hooks.example/\xff")
    assert _error(path) == f"receivers[0].url_file: the file {tmp_path / 'slack.url'} is not UTF-8 text"


def test_receivers_load_with_env_and_a_relative_url_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "etc"
    (conf / "secrets").mkdir(parents=True)
    slack_url = f"https://hooks.slack.com/services/T000/B000/{SECRET}"
    (conf / "secrets" / "slack.url").write_text(f"  {slack_url}\n", encoding="utf-8")
    text = (
        ONE + "  - name: team-slack\n    kind: slack\n    url_file: secrets/slack.url\n    timeout_s: 2.5\n"
    )
    path = _file(conf, text)
    monkeypatch.chdir(tmp_path)  # relative to the notifications file's folder, not the working one
    receivers = load_receivers(path, {"ONCALL_HOOK_URL": f" {HOOK}\n"})
    assert receivers == [
        Receiver(name="oncall-hook", kind="webhook", url=HOOK, timeout_s=10.0),
        Receiver(name="team-slack", kind="slack", url=slack_url, timeout_s=2.5),
    ]
    assert SECRET not in repr(receivers) and SECRET not in str(receivers[1])
    assert repr(receivers[1]) == "Receiver(name='team-slack', kind='slack', timeout_s=2.5)"


# -- real runs ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Runs:
    published_en: RunRecord
    published_zh: RunRecord
    fallback_en: RunRecord
    fallback_zh: RunRecord


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """Four real runs: pg-row-lock with evidence and an alert planted with Slack syntax
    (published, en and zh), and payment-timeout (a SAFE_FALLBACK, en and zh)."""
    folder = tmp_path_factory.mktemp("scenarios") / "pg-row-lock"
    shutil.copytree(Path(rootproof.scenarios.__file__).parent / "builtin" / "pg-row-lock", folder)
    snapshot = folder / "snapshot" / "tool_responses.yaml"
    text = snapshot.read_text(encoding="utf-8")
    assert "application_name: order-admin-console" in text
    snapshot.write_text(
        text.replace("application_name: order-admin-console", f"application_name: '{PLANTED_EVIDENCE}'", 1),
        encoding="utf-8",
    )
    alert = {
        "name": "OrdersApiLatencyHigh",
        "severity": "critical",
        "service": "order-service",
        "starts_at": "2026-08-03T09:40:00Z",
        "summary": PLANTED_SUMMARY,
        "labels": {"team": "orders <@U999>", "env": "prod"},
    }
    sink = MemoryTraceSink()
    h = Harness(
        Runtime.from_settings(
            load_settings(data_dir=tmp_path_factory.mktemp("home"), deadline_s=60), sink=sink
        )
    )
    hostile = load_scenario(folder)
    fallback = load_scenario("payment-timeout")
    outs = [
        h.diagnose("", scenario=hostile, alert=alert),
        h.diagnose("", scenario=hostile, alert=alert, language="zh"),
        h.diagnose("", scenario=fallback, language="en"),
        h.diagnose("", scenario=fallback),
    ]
    records = [sink.runs[o.run_id] for o in outs]
    assert [(r.release_outcome, r.language) for r in records] == [
        ("PUBLISHED", "en"),
        ("PUBLISHED", "zh"),
        ("FALLBACK", "en"),
        ("FALLBACK", "zh"),
    ]
    return Runs(*records)


WEBHOOK = Receiver(name="oncall-hook", kind="webhook", url=HOOK)
SLACK = Receiver(name="team-slack", kind="slack", url=f"https://hooks.slack.com/services/T0/B0/{SECRET}")


def _webhook(run: RunRecord, public_url: str | None = PUBLIC) -> tuple[dict[str, Any], dict[str, str]]:
    body, headers = render(WEBHOOK, build_notification(run, receiver=WEBHOOK, public_url=public_url))
    assert len(body) <= BODY_BYTES
    return json.loads(body), headers


def _slack(run: RunRecord, public_url: str | None = PUBLIC) -> dict[str, Any]:
    body, headers = render(SLACK, build_notification(run, receiver=SLACK, public_url=public_url))
    assert len(body) <= BODY_BYTES and headers["Content-Type"] == "application/json"
    assert (
        headers["Idempotency-Key"] == build_notification(run, receiver=SLACK, public_url=None).idempotency_key
    )
    data: dict[str, Any] = json.loads(body)
    return data


def _texts(slack: dict[str, Any]) -> list[str]:
    """Every text Slack parses: the top-level text, each section's and each context element's."""
    out = [slack["text"]]
    for block in slack["blocks"]:
        if block["type"] == "section":
            assert block["text"]["type"] == "mrkdwn" and len(block["text"]["text"]) <= 3000
            out.append(block["text"]["text"])
        else:
            assert block["type"] == "context"
            out += [e["text"] for e in block["elements"]]
    return out


def test_webhook_body_of_a_published_run(runs: Runs) -> None:
    run = runs.published_en
    assert run.content is not None
    body, headers = _webhook(run)
    report = run.content["report"]
    assert (
        headers["Content-Type"] == "application/json"
        and headers["Idempotency-Key"] == body["idempotency_key"]
    )
    assert len(body["idempotency_key"]) == 64
    assert {
        k: body[k]
        for k in (
            "version",
            "run_id",
            "session_id",
            "receiver",
            "status",
            "release_outcome",
            "fallback_type",
            "content_type",
            "language",
        )
    } == {
        "version": "1",
        "run_id": run.run_id,
        "session_id": run.session_id,
        "receiver": "oncall-hook",
        "status": "SUCCESS",
        "release_outcome": "PUBLISHED",
        "fallback_type": None,
        "content_type": "DIAGNOSIS_REPORT",
        "language": "en",
    }
    assert body["summary"] == report["summary"] and PLANTED_EVIDENCE in body["summary"]
    assert body["root_cause"] == "postgresql row lock contention: " + report["root_cause"]["culprit"]
    assert body["title"] == "Diagnosis published: OrdersApiLatencyHigh — postgresql row lock contention"
    assert body["alert"] == {
        "source": "plain",
        "name": "OrdersApiLatencyHigh",
        "status": "firing",
        "severity": "critical",
        "service": "order-service",
        "summary": PLANTED_SUMMARY,
        "starts_at": "2026-08-03T09:40:00Z",
        "labels": {"env": "prod", "team": "orders <@U999>"},
        "related_count": 0,
    }
    assert body["message"] is None and body["link"] == f"https://rootproof.example.com/runs/{run.run_id}"
    assert body["content"] == run.content and body["content_truncated"] is False
    assert _webhook(run, public_url=None)[0]["link"] is None


def test_webhook_body_of_a_fallback_run(runs: Runs) -> None:
    for run, message in (
        (runs.fallback_en, "The evidence could not be verified"),
        (runs.fallback_zh, "当前证据无法完成真实性校验"),
    ):
        assert run.content is not None
        body, _ = _webhook(run)
        fallback = run.content["fallback"]
        assert (
            body["release_outcome"] == "FALLBACK"
            and body["fallback_type"] == run.fallback_type == fallback["type"]
        )
        assert body["content_type"] == "SAFE_FALLBACK" and body["content"] == run.content
        assert body["message"] == fallback["message"] and body["message"].startswith(message)
        assert body["limitations"] == fallback["limitations"] and body["next_steps"] == fallback["next_steps"]
        assert body["summary"] is None and body["root_cause"] is None and body["alert"] is None
        assert body["language"] == run.language


def test_slack_published_run_in_en_and_zh(runs: Runs) -> None:
    en, zh = "\n".join(_texts(_slack(runs.published_en))), "\n".join(_texts(_slack(runs.published_zh)))
    for words in (
        "*Diagnosis published*",
        "*Summary*",
        "*Root cause*",
        "postgresql row lock contention: pid 4242",
        "*Alert*: OrdersApiLatencyHigh (firing, critical) · on order-service",
        "Run status: completed",
    ):
        assert words in en, words
    for words in (
        "*已发布诊断结论*",
        "*摘要*",
        "*根因*",
        "postgresql row lock contention：pid 4242",
        "*告警*：OrdersApiLatencyHigh（触发中，critical）",
        "运行状态：已完成",
    ):
        assert words in zh, words
    assert "*Root cause*" not in zh and "根因" not in en


def test_slack_fallback_run_in_en_and_zh(runs: Runs) -> None:
    en, zh = "\n".join(_texts(_slack(runs.fallback_en))), "\n".join(_texts(_slack(runs.fallback_zh)))
    assert (
        "*No diagnosis was published*" in en
        and "*Why*\nThe evidence could not be verified, so no root cause can be confirmed" in en
    )
    assert (
        "*Next steps*\n• Collect evidence in the current diagnosis scope again" in en
        and "EVIDENCE_VALIDATION_FAILED" in en
    )
    assert (
        "*未发布诊断结论*" in zh
        and "*原因*\n当前证据无法完成真实性校验，无法确认根因" in zh
        and "*后续步骤*\n• 重新收集" in zh
    )
    assert (
        "*局限*\n• 证据引用校验未通过" in zh
        and "Root cause" not in en
        and "根因" not in zh.replace("无法确认根因", "")
    )


def test_slack_escapes_planted_mentions_and_links(runs: Runs) -> None:
    for run in (runs.published_en, runs.published_zh):
        slack = _slack(run)
        texts = _texts(slack)
        joined = "\n".join(texts)
        for raw in (
            "<!channel>",
            "<@U123>",
            "<@U999>",
            "<https://evil.example|click>",
            "<https://x.example|y>",
        ):
            assert raw not in joined, raw
        # the evidence (summary, culprit) and the alert's summary arrive escaped, in that order (& first)
        assert "order-admin &lt;!channel&gt; &amp; &lt;https://evil.example|click&gt; &lt;@U123&gt;" in joined
        assert "p95 &lt;!channel&gt; &amp; &lt;https://x.example|y&gt; is high" in joined
        assert "&amp;lt;" not in joined  # escaped once
        # the only `<` Slack sees is the module's own link
        assert joined.count("<") == 1
        link = f"<https://rootproof.example.com/runs/{run.run_id}|"
        assert link in joined and texts[-2].startswith(link) and texts[-2].endswith(">")
        assert slack["unfurl_links"] is False and slack["unfurl_media"] is False


def test_slack_link_is_escaped_and_bad_public_urls_are_refused(runs: Runs) -> None:
    run = runs.fallback_en
    joined = "\n".join(_texts(_slack(run, public_url="https://rp.example.com/a&b/")))
    assert f"<https://rp.example.com/a&amp;b/runs/{run.run_id}|Open the run in rootproof>" in joined
    odd = dataclasses.replace(run, run_id="r|1>2 3")
    assert _webhook(odd)[0]["link"] == "https://rootproof.example.com/runs/r%7C1%3E2%203"
    for bad in (
        "https://rp.example.com/x|y",
        "https://rp.example.com/<x>",
        "javascript:alert(1)",
        "https://rp.example.com/?a=1",
        "rp.example.com",
        "https:///runs",
    ):
        with pytest.raises(ConfigError, match=r"^public_url: expected an http or https URL"):
            build_notification(run, receiver=SLACK, public_url=bad)


PLANTED = {
    "error": "PLANTED-ERROR db-7.corp.internal:5432 refused",
    "self_evaluation": {
        "semantic_guard": {"violations": ["PLANTED-VIOLATION"]},
        "reasoning": "PLANTED-REASONING",
    },
    "prompt_audit": {"prompts": ["PLANTED-PROMPT"]},
    "conclusion": {"component": "PLANTED-CONCLUSION", "mechanism": "x", "culprit": "PLANTED-CULPRIT"},
    "question": "PLANTED-QUESTION",
    "budget_usage": {"note": "PLANTED-BUDGET"},
    "targets_checksum": "sha256:PLANTED-CHECKSUM",
}


def test_nothing_but_the_released_content_reaches_a_body(runs: Runs) -> None:
    for run in (
        runs.published_en,
        runs.fallback_zh,
        dataclasses.replace(runs.fallback_en, status="FAILED", fallback_type="INTERNAL_ERROR"),
    ):
        planted = dataclasses.replace(run, **PLANTED)  # type: ignore[arg-type]
        for receiver in (WEBHOOK, SLACK):
            body, _ = render(receiver, build_notification(planted, receiver=receiver, public_url=PUBLIC))
            assert b"PLANTED" not in body and b"corp.internal" not in body
            assert body == render(receiver, build_notification(run, receiver=receiver, public_url=PUBLIC))[0]


def test_renders_are_deterministic_and_keys_stable_per_receiver(runs: Runs) -> None:
    run = runs.published_zh
    for receiver in (WEBHOOK, SLACK):
        first = render(receiver, build_notification(run, receiver=receiver, public_url=PUBLIC))
        again = render(
            receiver, build_notification(dataclasses.replace(run), receiver=receiver, public_url=PUBLIC)
        )
        assert first == again
    keys = {
        build_notification(run, receiver=r, public_url=None).idempotency_key
        for r in (WEBHOOK, WEBHOOK, SLACK)
    }
    assert len(keys) == 2
    other = build_notification(runs.published_en, receiver=WEBHOOK, public_url=None).idempotency_key
    assert other not in keys
    note = build_notification(run, receiver=WEBHOOK, public_url=None)
    with pytest.raises(ValueError, match="built for receiver 'oncall-hook'"):
        render(SLACK, note)


def test_every_text_is_bounded() -> None:
    huge_en, huge_zh = "<!channel> & " * 100_000, "证据" * 300_000
    content = {
        "content_type": "DIAGNOSIS_REPORT",
        "report": {
            "summary": huge_en,
            "root_cause": {"component": "postgresql", "mechanism": "row_lock_contention", "culprit": huge_zh},
            "claims": [{"id": f"c{i}", "text": huge_zh} for i in range(200)],
            "limitations": [huge_zh] * 100,
            "next_steps": [huge_en] * 100,
        },
        "verified_sources": [],
    }
    alert = {
        "source": "plain",
        "status": "firing",
        "primary": {
            "name": huge_en,
            "status": "firing",
            "summary": huge_zh,
            "labels": {f"k{i}": huge_zh for i in range(500)},
        },
    }
    run = RunRecord(
        run_id="r1",
        session_id="s1",
        question="q",
        language="zh",
        status="SUCCESS",
        release_outcome="PUBLISHED",
        content=content,
        alert=alert,
    )
    for receiver in (WEBHOOK, SLACK):
        note = build_notification(run, receiver=receiver, public_url=PUBLIC)
        assert note.summary is not None and len(note.summary) == FIELD_CHARS and note.summary.endswith("…")
        assert (
            note.content_truncated
            and len(note.limitations) == 5
            and note.alert is not None
            and len(note.alert["labels"]) == 20
        )
        body, _ = render(receiver, note)
        assert 1000 < len(body) <= BODY_BYTES
        data = json.loads(body)
        if receiver is SLACK:
            assert "<!channel>" not in "\n".join(_texts(data))
        else:
            assert data["content_truncated"] is True and data["summary"].startswith("<!channel> & ")


def test_a_large_content_is_clipped_before_it_is_left_out(runs: Runs) -> None:
    run = runs.published_en
    assert run.content is not None
    claims = [{"id": f"c{i}", "text": "evidence " * 400, "kind": "finding"} for i in range(60)]
    big = dataclasses.replace(
        run, content={**run.content, "report": {**run.content["report"], "claims": claims}}
    )
    body, _ = _webhook(big)
    assert body["content_truncated"] is True and body["content"]["content_type"] == "DIAGNOSIS_REPORT"
    kept = body["content"]["report"]["claims"]
    assert 5 <= len(kept) < 60 and all(len(c["text"]) < 3000 and c["text"].endswith("…") for c in kept)
    assert body["summary"] == run.content["report"]["summary"]  # the texts keep their full bound


def test_a_run_that_has_not_ended_is_refused() -> None:
    with pytest.raises(ValueError, match="has not ended"):
        build_notification(
            RunRecord(run_id="r", session_id="s", question="q"), receiver=WEBHOOK, public_url=None
        )


def test_a_hand_built_system_message_and_a_no_content_run() -> None:
    msg = RunRecord(
        run_id="r",
        session_id="s",
        question="q",
        status="SUCCESS",
        release_outcome="PUBLISHED",
        content={"content_type": "SYSTEM_MESSAGE", "message": "hello <!here>"},
    )
    note = build_notification(msg, receiver=SLACK, public_url=None)
    assert note.message == "hello <!here>" and note.title == "Message"
    assert "hello &lt;!here&gt;" in "\n".join(_texts(json.loads(render(SLACK, note)[0])))
    cancelled = RunRecord(
        run_id="r", session_id="s", question="q", status="CANCELLED", release_outcome="NONE", language="zh"
    )
    note = build_notification(cancelled, receiver=WEBHOOK, public_url=None)
    assert (note.title, note.content, note.message, note.release_outcome) == (
        "未发布诊断结论",
        None,
        None,
        "NONE",
    )


# -- delivery ------------------------------------------------------------------------------------
class _Hook(BaseHTTPRequestHandler):
    """Records each POST; `/code/NNN/...` answers NNN, `/flaky/...` 500 the first time then 200,
    `/slow/...` answers after 1 s, anything else 200."""

    server: _Server

    def do_POST(self) -> None:  # noqa: N802 - the http.server protocol
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.server.lock:
            self.server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            seen = sum(1 for r in self.server.requests if r["path"] == self.path)
        parts = self.path.strip("/").split("/")
        code = 200
        if parts[0] == "code":
            code = int(parts[1])
        elif parts[0] == "flaky" and seen == 1:
            code = 500
        elif parts[0] == "slow":
            time.sleep(1.0)
        self.send_response(code)
        if 300 <= code < 400:
            self.send_header("Location", "/elsewhere")
        answer = b"x" * 100_000
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        try:
            self.wfile.write(answer)
        except OSError:
            pass  # the client read a little and left, as it should

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server signature
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Hook)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []


@pytest.fixture(scope="module")
def hook() -> Iterator[_Server]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _receiver(
    server: _Server, path: str, kind: Literal["webhook", "slack"] = "webhook", timeout_s: float = 5.0
) -> Receiver:
    port = server.server_address[1]
    url = f"http://127.0.0.1:{port}{path}/{SECRET}"
    return Receiver(name=f"r-{kind}", kind=kind, url=url, timeout_s=timeout_s)


def _sent(server: _Server, path: str) -> list[dict[str, Any]]:
    with server.lock:
        return [r for r in server.requests if r["path"].startswith(path)]


def _note(run: RunRecord, receiver: Receiver) -> Notification:
    return build_notification(run, receiver=receiver, public_url=PUBLIC)


def test_delivery_ok_sends_the_rendered_body_and_the_key(
    hook: _Server, runs: Runs, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    kinds: tuple[Literal["webhook", "slack"], ...] = ("webhook", "slack")
    for kind in kinds:
        receiver = _receiver(hook, f"/ok-{kind}", kind)
        note = _note(runs.published_en, receiver)
        assert deliver(receiver, note) == Delivery(ok=True, status=200, retryable=False, detail="HTTP 200 OK")
        (sent,) = _sent(hook, f"/ok-{kind}/")
        body, headers = render(receiver, note)
        assert (
            sent["body"] == body
            and sent["headers"]["Idempotency-Key"] == note.idempotency_key == headers["Idempotency-Key"]
        )
        assert sent["headers"]["Content-Type"] == "application/json"
    messages = [r.getMessage() for r in caplog.records]
    assert any(r.name == "httpx" and "<receiver URL hidden>" in r.getMessage() for r in caplog.records), (
        messages
    )
    assert any("to receiver r-slack (slack): HTTP 200 OK" in m for m in messages)
    assert not any(SECRET in m for m in messages), messages


def test_a_500_is_retryable_and_the_retry_carries_the_same_key(hook: _Server, runs: Runs) -> None:
    receiver = _receiver(hook, "/flaky")
    note = _note(runs.fallback_zh, receiver)
    with httpx.Client() as client:
        first = deliver(receiver, note, client=client)
        second = deliver(receiver, note, client=client)
    assert first == Delivery(ok=False, status=500, retryable=True, detail="HTTP 500 Internal Server Error")
    assert second == Delivery(ok=True, status=200, retryable=False, detail="HTTP 200 OK")
    sent = _sent(hook, "/flaky/")
    assert len(sent) == 2 and sent[0]["body"] == sent[1]["body"]
    assert (
        sent[0]["headers"]["Idempotency-Key"] == sent[1]["headers"]["Idempotency-Key"] == note.idempotency_key
    )


@pytest.mark.parametrize(
    ("code", "retryable"),
    [
        (404, False),
        (400, False),
        (401, False),
        (302, False),
        (408, True),
        (425, True),
        (429, True),
        (502, True),
        (503, True),
    ],
)
def test_answers_other_than_2xx(hook: _Server, runs: Runs, code: int, retryable: bool) -> None:
    receiver = _receiver(hook, f"/code/{code}")
    result = deliver(receiver, _note(runs.fallback_en, receiver))
    assert (result.ok, result.status, result.retryable) == (False, code, retryable)
    assert result.detail.startswith(f"HTTP {code}") and SECRET not in result.detail
    assert len(_sent(hook, f"/code/{code}/")) == 1  # a redirect is not followed


def test_network_failures_are_retryable_and_never_show_the_url(
    hook: _Server, runs: Runs, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = Receiver(name="gone", kind="webhook", url=f"http://127.0.0.1:{port}/{SECRET}")
    assert deliver(refused, _note(runs.fallback_en, refused)) == Delivery(
        ok=False, status=None, retryable=True, detail="ConnectError"
    )
    slow = _receiver(hook, "/slow", timeout_s=0.5)
    assert deliver(slow, _note(runs.fallback_en, slow)) == Delivery(
        ok=False, status=None, retryable=True, detail="ReadTimeout"
    )
    wrong = Receiver(name="wrong", kind="webhook", url=f"ftp://127.0.0.1/{SECRET}")
    assert deliver(wrong, _note(runs.fallback_en, wrong)) == Delivery(
        ok=False, status=None, retryable=False, detail="UnsupportedProtocol"
    )
    assert not any(SECRET in r.getMessage() for r in caplog.records)
    assert any("to receiver gone (webhook): ConnectError" in r.getMessage() for r in caplog.records)
