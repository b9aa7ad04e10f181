"""Bounded input: hostile files, payloads and questions are refused or capped, never expanded."""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rootproof.alerts import load_alert_file, parse_alert
from rootproof.errors import AlertError, CardError, ScenarioError
from rootproof.harness import Harness
from rootproof.kb.cards import load_cards, parse_card
from rootproof.run.records import MemoryTraceSink
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario, scenario_folder, validate_scenario
from rootproof.scenarios.yamlio import parse_yaml
from rootproof.settings import Settings, load_settings
from tests.services import inherited_env

ROOT = Path(__file__).resolve().parents[1]
BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)
"""The classic "billion laughs": under 1 KB, 9**9 strings when expanded."""


def _limit_memory() -> None:  # the old code expanded the bomb until the kernel stopped it
    resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))


def rp(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = inherited_env()
    full.update(ROOTPROOF_HOME=str(home), **env)
    return subprocess.run(
        [sys.executable, "-m", "rootproof.cli", *args],
        capture_output=True,
        text=True,
        env=full,
        cwd=ROOT,
        timeout=120,
        preexec_fn=_limit_memory,
    )


def _copy(tmp_path: Path, sid: str = "pg-row-lock") -> Path:
    dest = tmp_path / sid
    shutil.copytree(scenario_folder(sid), dest)
    return dest


def test_alias_bomb_in_tool_responses_is_refused_naming_the_file(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    responses = folder / "snapshot" / "tool_responses.yaml"
    bomb = "".join(f"bomb_{line}\n" for line in BOMB.splitlines())
    responses.write_text(responses.read_text(encoding="utf-8") + bomb, encoding="utf-8")
    assert len(BOMB) < 1024
    p = rp("scenarios", "validate", str(folder), home=tmp_path / "home")
    assert p.returncode == 2, p.stderr[-500:]
    assert "pg-row-lock/snapshot/tool_responses.yaml: line" in p.stdout
    assert "YAML anchors (&a) are not accepted" in p.stdout
    d = rp("diagnose", "--scenario", str(folder), "--json", home=tmp_path / "home")
    assert d.returncode == 2 and d.stdout == ""
    assert d.stderr.strip().splitlines() == [
        line
        for line in d.stderr.strip().splitlines()
        if line.startswith("Error: pg-row-lock/snapshot/tool_responses.yaml: line")
    ]


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("a: 1\nb: *x\n", "line 2: b: YAML aliases (*x) are not accepted"),
        ("a: &x 1\n", "line 1: a: YAML anchors (&x) are not accepted"),
        ("a:\n  <<: {x: 1}\n", "line 2: a: YAML merge keys (<<) are not accepted"),
        ("a: " + "[" * 200 + "]" * 200 + "\n", "nested deeper than 64 levels"),
        ("a: !!set {x}\n", "tag 'tag:yaml.org,2002:set' is not accepted"),
    ],
)
def test_yaml_that_can_expand_or_nest_is_refused(text: str, what: str) -> None:
    with pytest.raises(ScenarioError, match="f.yaml: ") as err:
        parse_yaml(text, "f.yaml")
    assert what in str(err.value)


def test_builtin_scenarios_use_no_alias_and_still_load() -> None:
    for sid in ("pg-row-lock", "redis-maxclients", "nginx-upstream-timeout"):
        assert load_scenario(sid).id == sid
    assert all(not validate_scenario(sid) for sid in ("cert-expired", "payment-timeout"))


def test_lines_are_found_again_when_an_error_needs_them() -> None:
    doc = parse_yaml("a: 1\nb:\n  - x\n  - {c: 2,\n     d: 3}\n", "f.yaml")
    assert doc.line_of(("b", 1, "d")) == 5 and doc.line_of(("b", 0)) == 3 and doc.line_of(("a",)) == 1


def test_scenario_file_above_the_cap_is_refused_unread(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    problems = validate_scenario(folder, max_file_bytes=4096)
    assert any(
        p.startswith("pg-row-lock/snapshot/tool_responses.yaml: ")
        and "ROOTPROOF_MAX_SCENARIO_FILE_BYTES" in p
        for p in problems
    )
    p = rp(
        "scenarios", "validate", str(folder), home=tmp_path / "home", ROOTPROOF_MAX_SCENARIO_FILE_BYTES="4096"
    )
    assert (
        p.returncode == 2
        and "more than the cap of 4096 bytes (ROOTPROOF_MAX_SCENARIO_FILE_BYTES)" in p.stdout
    )


def _webhook(summary: str, n: int = 1) -> dict[str, object]:
    alerts = [
        {
            "status": "firing",
            "labels": {
                "alertname": f"A{i}",
                "severity": "critical" if i == 0 else "warning",
                "service": "api",
            },
            "annotations": {"summary": summary if i == 0 else "noise"},
            "startsAt": "2026-08-03T09:40:00Z",
        }
        for i in range(n)
    ]
    return {"version": "4", "status": "firing", "alerts": alerts}


def test_alert_field_above_the_cap_is_refused_naming_the_field(tmp_path: Path) -> None:
    from rootproof.limits import InputLimits

    with pytest.raises(
        AlertError, match=r"^alerts\[0\]\.annotations\.summary: 9000 characters, more than the cap of 8192"
    ):
        parse_alert(_webhook("x" * 9000))
    with pytest.raises(
        AlertError, match=r"alerts: 3 alerts, more than the cap of 2 \(ROOTPROOF_MAX_ALERTS\)"
    ):
        parse_alert(_webhook("s", 3), limits=InputLimits(alerts=2))
    with pytest.raises(AlertError, match=r"\(payload\): more than the cap of 2048 bytes"):
        parse_alert(_webhook("s" * 100, 30), limits=InputLimits(alert_bytes=2048))
    payload = tmp_path / "big.json"
    payload.write_text(json.dumps(_webhook("y" * 50_000)), encoding="utf-8")
    p = rp("diagnose", "--scenario", "pg-row-lock", "--alert", str(payload), "--json", home=tmp_path / "home")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip() == (
        f"Error: {payload}: alerts[0].annotations.summary: 50000 characters, more than the cap of 8192 "
        "(ROOTPROOF_MAX_ALERT_FIELD_CHARS)"
    )
    p = rp(
        "diagnose",
        "--scenario",
        "pg-row-lock",
        "--alert",
        str(payload),
        home=tmp_path / "home",
        ROOTPROOF_MAX_ALERT_BYTES="4096",
    )
    assert (
        p.returncode == 2 and "bytes, more than the cap of 4096 bytes (ROOTPROOF_MAX_ALERT_BYTES)" in p.stderr
    )


def test_alert_yaml_with_aliases_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "alert.yaml"
    f.write_text(
        "name: Boom\nstarts_at: 2026-08-03T09:40:00Z\n" + BOMB.replace("a:", "labels_a:", 1), encoding="utf-8"
    )
    with pytest.raises(AlertError, match="YAML anchors"):
        load_alert_file(f)


def test_a_run_keeps_a_clipped_question_and_few_related_alerts(tmp_path: Path) -> None:
    sink = MemoryTraceSink()
    h = Harness(Runtime.from_settings(
        load_settings(data_dir=tmp_path, max_question_chars=1000, max_stored_related_alerts=5), sink=sink
    ))
    scenario = load_scenario("pg-row-lock")
    out = h.diagnose(
        "why is confirm slow? " + "details " * 20_000, scenario=scenario, alert=_webhook("p95 30s", 40)
    )
    record = sink.runs[out.run_id]
    assert len(record.question) <= 1000 and record.question.endswith("more characters not kept]")
    assert record.alert is not None
    assert len(record.alert["related"]) == 5 and record.alert["related_omitted"] == 34
    assert out.release_outcome in ("PUBLISHED", "FALLBACK")


def test_clip_text_keeps_short_text_whole() -> None:
    from rootproof.limits import clip_text

    assert clip_text("short", 100) == "short"
    clipped = clip_text("x" * 500, 100)
    assert len(clipped) == 100 and clipped.startswith("xxx") and "[" in clipped


def test_card_front_matter_aliases_and_big_cards_are_refused(tmp_path: Path) -> None:
    text = "---\nid: boom\ntitle: &t Boom\nsummary: *t\n---\nbody\n"
    with pytest.raises(CardError, match="anchors and aliases are not accepted"):
        parse_card(text, tmp_path / "boom.md")
    (tmp_path / "big.md").write_text("---\nid: big\n---\n" + "x" * 5000, encoding="utf-8")
    with pytest.raises(
        CardError, match=r"big\.md: field \(file\): expected at most 2048 bytes \(ROOTPROOF_MAX_CARD_BYTES\)"
    ):
        load_cards([tmp_path], builtin=False, max_bytes=2048)


def test_caps_are_settings_whose_defaults_are_the_loaders() -> None:
    from rootproof.limits import InputLimits

    assert Settings().input_limits() == InputLimits()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in Settings.model_fields:
        if name.startswith("max_") and name not in (
            "max_model_calls",
            "max_tool_calls",
            "max_calls_per_tool",
            "max_tokens",
        ):
            assert f"`{name.upper()}`" in readme, name


@pytest.mark.parametrize(
    ("edit", "what"),
    [
        (
            lambda t: t + "redis:\n  slowlog:\n  - {id: 1, timestamp: 1" + "0" * 30 + ", duration_us: 5}\n",
            "redis.slowlog[0].timestamp: expected unix seconds within years 1-9999",
        ),
        (
            lambda t: t.replace(
                "- metric: pg_locks_count\n",
                "- metric: huge\n  points: [['2026-08-03T09:50:00Z', 1"
                + "0" * 400
                + "]]\n- metric: pg_locks_count\n",
                1,
            ),
            "points[0][1]: expected a number a float can hold",
        ),
    ],
)
def test_numbers_too_large_for_time_or_floats_are_problems_not_crashes(
    tmp_path: Path, edit: Any, what: str
) -> None:
    folder = _copy(tmp_path)
    responses = folder / "snapshot" / "tool_responses.yaml"
    responses.write_text(edit(responses.read_text(encoding="utf-8")), encoding="utf-8")
    problems = validate_scenario(folder)
    assert any(what in p for p in problems), problems
