"""The wording benchmark's questions: `--questions default` (the shipped list) or `--questions FILE`.

A file holds one question per line; blank lines and lines starting with `#` are skipped. The
questions are untrusted text: bounded in number and length, never executed. A diagnosis that
changes with the wording of a question that names no cause is a defect; `eval snapshot` and
`eval live` run every scenario once per question and report whether the published root cause
(or its absence) agrees with the one under the scenario's own question.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rootproof.errors import UsageError

if TYPE_CHECKING:
    from rootproof.eval.scoring import CaseObservation, CaseScore

__all__ = ["MAX_QUESTION_CHARS", "MAX_QUESTIONS", "QuestionRun", "agreement_summary", "load_questions"]

MAX_QUESTIONS = 50
MAX_QUESTION_CHARS = 2000
MAX_FILE_BYTES = 256 * 1024
DEFAULT = "default"


def load_questions(spec: str) -> list[str]:
    """The questions of `spec`: `default` or a file path. Raises `UsageError` naming `--questions`,
    the file and the line for anything it cannot use."""
    if spec == DEFAULT:
        text = resources.files(__package__).joinpath("default.txt").read_text(encoding="utf-8")
        where = "--questions default"
    else:
        path = Path(spec)
        where = f"--questions {path}"
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                raise UsageError(f"{where}: file over {MAX_FILE_BYTES // 1024} KiB")
            raw = path.read_bytes()
        except IsADirectoryError:
            raise UsageError(f"{where}: a folder, expected a file of questions (or `default`)") from None
        except FileNotFoundError:
            raise UsageError(f"{where}: no such file (give a file of questions, one per line, or `default`)") from None
        except OSError as exc:
            raise UsageError(f"{where}: {exc.strerror or exc}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    out: list[str] = []
    for n, line in enumerate(text.splitlines(), start=1):
        q = line.strip()
        if not q or q.startswith("#"):
            continue
        if len(q) > MAX_QUESTION_CHARS:
            raise UsageError(f"{where}: line {n}: question over {MAX_QUESTION_CHARS} characters")
        if any(ord(ch) < 32 and ch != "\t" for ch in q):
            raise UsageError(f"{where}: line {n}: control characters in the question")
        if q not in out:
            out.append(q)
    if not out:
        raise UsageError(f"{where}: no questions (one per line; `#` starts a comment)")
    if len(out) > MAX_QUESTIONS:
        raise UsageError(f"{where}: {len(out)} questions, at most {MAX_QUESTIONS}")
    return out


def _label(rc: dict[str, str] | None) -> str | None:
    return f"{rc['component']}/{rc['mechanism']}" if rc else None


@dataclass(frozen=True, kw_only=True)
class QuestionRun:
    """One scenario run under one question of the list."""

    question: str
    root_cause: dict[str, str] | None
    """The published root cause {component, mechanism}, or None (nothing published, or no root cause)."""
    own_root_cause: dict[str, str] | None
    """The published root cause under the scenario's own question."""
    false_confident: bool
    outcome: str | None
    run_id: str | None = None

    @classmethod
    def scored(cls, question: str, score: CaseScore, own: CaseScore | None, obs: CaseObservation) -> QuestionRun:
        """The run under `question` as the evaluator scored it, beside the own question's score."""
        return cls(
            question=question,
            root_cause=score.root_cause,
            own_root_cause=own.root_cause if own is not None else None,
            false_confident=score.false_confident,
            outcome=obs.release_outcome,
            run_id=obs.run_id,
        )

    @property
    def agrees(self) -> bool:
        """Whether the published root cause, or its absence, equals the one under the own question."""
        return _label(self.root_cause) == _label(self.own_root_cause)

    def as_dict(self) -> dict[str, Any]:
        """The report's `questions` row."""
        return {
            "question": self.question,
            "root_cause": self.root_cause,
            "agrees": self.agrees,
            "false_confident": self.false_confident,
            "outcome": self.outcome,
            "run_id": self.run_id,
        }


def agreement_summary(runs: list[QuestionRun], own_false_confident: int, own_runs: int) -> dict[str, Any]:
    """`question_agreement` (share of scenario × question runs that agree with the own question's
    root cause), `false_confident_rate` over every run (own questions and the list's) and the counts."""
    total = own_runs + len(runs)
    return {
        "questions": len({r.question for r in runs}),
        "question_runs": len(runs),
        "question_agreement": round(sum(1 for r in runs if r.agrees) / len(runs), 4) if runs else None,
        "false_confident_rate": round((own_false_confident + sum(1 for r in runs if r.false_confident)) / total, 4)
        if total
        else 0.0,
        "own_question_false_confident_rate": round(own_false_confident / own_runs, 4) if own_runs else 0.0,
    }
