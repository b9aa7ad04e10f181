"""The wording benchmark: `eval snapshot --questions FILE|default`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rootproof.errors import UsageError
from rootproof.eval.questions import MAX_QUESTIONS, QuestionRun, agreement_summary, load_questions
from rootproof.taxonomy import BUILTIN_TAXONOMY
from tests.cli_support import run_cli

ROOT = Path(__file__).resolve().parents[2]
_ZH = re.compile(r"[\u4e00-\u9fff]")


def test_the_default_list_is_generic_in_both_languages() -> None:
    questions = load_questions("default")
    assert len(questions) >= 10
    zh = [q for q in questions if _ZH.search(q)]
    assert len(zh) >= 4 and len(questions) - len(zh) >= 4
    words = {c.replace("_", " ") for c in BUILTIN_TAXONOMY.components}
    words |= {m.replace("_", " ") for m in BUILTIN_TAXONOMY.mechanisms}
    words |= {"database", "cache", "proxy", "lock", "memory", "connection", "disk", "queue", "config", "deploy", "gc"}
    words |= {"数据库", "缓存", "锁", "内存", "连接", "磁盘", "队列", "配置", "发布"}
    for q in questions:
        named = [w for w in words if w.lower() in q.lower()]
        assert named == [], (q, named)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("# only a comment\n\n", "no questions"),
        ("x" * 2001 + "\n", "line 1: question over 2000 characters"),
        ("ok\nbad \x1b[2J question\n", "line 2: control characters"),
        ("".join(f"q{i}\n" for i in range(MAX_QUESTIONS + 1)), f"at most {MAX_QUESTIONS}"),
    ],
)
def test_a_bad_file_names_the_option_the_file_and_the_line(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "q.txt"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError) as exc:
        load_questions(str(f))
    assert str(exc.value).startswith(f"--questions {f}: ") and needle in str(exc.value)


def test_missing_folder_and_binary_files_are_refused(tmp_path: Path) -> None:
    for path, needle in ((tmp_path / "nope.txt", "no such file"), (tmp_path, "a folder")):
        with pytest.raises(UsageError, match=needle):
            load_questions(str(path))
    bad = tmp_path / "bin.txt"
    bad.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError, match="not UTF-8"):
        load_questions(str(bad))


def test_comments_blanks_and_repeats_are_skipped(tmp_path: Path) -> None:
    f = tmp_path / "q.txt"
    f.write_text("# header\n  What is wrong?  \n\nWhat is wrong?\n出什么事了？\n", encoding="utf-8")
    assert load_questions(str(f)) == ["What is wrong?", "出什么事了？"]


def test_agreement_counts_an_absent_root_cause_as_an_answer() -> None:
    rc = {"component": "postgresql", "mechanism": "row_lock_contention"}
    runs = [
        QuestionRun(question="a", root_cause=rc, own_root_cause=rc, false_confident=False, outcome="PUBLISHED"),
        QuestionRun(question="b", root_cause=None, own_root_cause=rc, false_confident=False, outcome="FALLBACK"),
        QuestionRun(question="c", root_cause=None, own_root_cause=None, false_confident=False, outcome="PUBLISHED"),
        QuestionRun(
            question="d",
            root_cause={"component": "redis", "mechanism": "memory_eviction"},
            own_root_cause=None,
            false_confident=True,
            outcome="PUBLISHED",
        ),
    ]
    assert [r.agrees for r in runs] == [True, False, True, False]
    s = agreement_summary(runs, own_false_confident=0, own_runs=2)
    assert s["question_agreement"] == 0.5 and s["question_runs"] == 4 and s["questions"] == 4
    assert s["false_confident_rate"] == round(1 / 6, 4) and s["own_question_false_confident_rate"] == 0.0


def test_eval_snapshot_runs_each_scenario_once_per_question(tmp_path: Path) -> None:
    qfile = tmp_path / "questions.txt"
    qfile.write_text("# two generic questions\nUsers are complaining. What is going on?\n线上好像出问题了，帮忙排查一下。\n", encoding="utf-8")
    out = tmp_path / "wording.json"
    p = run_cli(
        ["eval", "snapshot", "--scenarios", "pg-row-lock", "--questions", str(qfile), "--json", str(out)],
        env=_env() | {"ROOTPROOF_HOME": str(tmp_path / "home")},
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text(encoding="utf-8"))
    s = doc["summary"]
    assert s["questions"] == 2 and s["question_runs"] == 2 and 0.0 <= s["question_agreement"] <= 1.0
    assert {"false_confident_rate", "own_question_false_confident_rate"} <= s.keys()
    (row,) = doc["scenarios"]
    assert [q["question"] for q in row["questions"]] == ["Users are complaining. What is going on?", "线上好像出问题了，帮忙排查一下。"]
    for q in row["questions"]:
        assert set(q) == {"question", "root_cause", "agrees", "false_confident", "outcome", "run_id"}
        own = row["root_cause"]
        assert q["agrees"] == ((q["root_cause"] or {}).get("mechanism") == (own or {}).get("mechanism"))
        assert q["run_id"] and q["run_id"] != row["run_id"]
    assert "wording: 2 runs under 2 questions" in p.stdout


def test_eval_snapshot_refuses_a_bad_questions_file_before_running(tmp_path: Path) -> None:
    p = run_cli(
        ["eval", "snapshot", "--scenarios", "pg-row-lock", "--questions", str(tmp_path / "none.txt")],
        env=_env() | {"ROOTPROOF_HOME": str(tmp_path / "home")},
        cwd=ROOT,
    )
    assert p.returncode == 2 and p.stdout == ""
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("Error: --questions ") and "no such file" in line


def _env() -> dict[str, str]:
    from tests.services import inherited_env

    return inherited_env()
