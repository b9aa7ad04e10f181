"""`rootproof eval live`: the live benchmark from the command line (registered by
`rootproof.eval.commands.register`; docs/live-benchmark.md).

Progress goes to stderr, one bar per scenario advancing through its phases. `--json FILE`
writes the JSON report (`--json -`: one JSON document on stdout, the result lines then go to
stderr); `--html FILE` the HTML page. Exit codes as `eval snapshot`: 0 when the benchmark ran,
whatever it found; 2 on bad input (an unknown scenario, an unknown approval, a missing binary
or a bad live root is a case's `infra_invalid`, not an exit code); 1 on an internal failure;
130 / 143 when SIGINT / SIGTERM stopped it (the running scenario is cleaned up and audited, the
eval run recorded `cancelled`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rootproof.live.bench.runner import LiveCaseResult

__all__ = ["live_command"]


def case_line(c: LiveCaseResult) -> str:
    """One scenario's result line."""
    if c.infra_invalid is not None:
        return f"INFRA  {'-':>5}  {c.case_id:<30} {c.infra_invalid}"
    mark = "PASS" if c.passed else ("CANCEL" if c.cancelled else "FAIL")
    extra = (
        f"  {c.failure_class}: {'; '.join(c.failure_reasons)[:300]}"
        if not c.passed and c.failure_class
        else ""
    )
    return f"{mark:<6} {c.score:5.1f}  {c.case_id:<30}{extra}"


def live_command(
    scenario: Annotated[
        list[str] | None,
        typer.Option(
            "--scenario", help="A live scenario name (repeat for several; default: all five).", metavar="NAME"
        ),
    ] = None,
    approve: Annotated[
        str,
        typer.Option(
            "--approve",
            help="Recovery approval: none (record proposals only), listed (run what the scenario's contract lists), all (any whitelisted action).",
        ),
    ] = "none",
    json_file: Annotated[
        str | None,
        typer.Option("--json", help="Write the JSON report to FILE ('-': stdout).", metavar="FILE"),
    ] = None,
    html_file: Annotated[
        Path | None,
        typer.Option("--html", help="Write the self-contained HTML report to FILE.", metavar="FILE"),
    ] = None,
    record: Annotated[
        Path | None,
        typer.Option(
            "--record",
            help="Freeze each scenario's live evidence into DIR as a snapshot scenario.",
            metavar="DIR",
        ),
    ] = None,
    questions_spec: Annotated[
        str | None,
        typer.Option(
            "--questions",
            help="The wording benchmark: while each fault is injected, also diagnose it once per question of FILE (one per line, # comments) or of the shipped `default` list.",
            metavar="FILE|default",
        ),
    ] = None,
) -> None:
    """Run the live benchmark: each scenario's fault really happens in a fresh private
    environment, `rootproof diagnose` diagnoses it, recovery runs behind approval, and the
    phases, the score out of 100 and the audit are recorded."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    from rootproof.cli import emit_json, err
    from rootproof.errors import UsageError
    from rootproof.live.bench.recovery import APPROVALS
    from rootproof.live.bench.report import render_html, report_json
    from rootproof.live.bench.runner import Interrupted, resolve_scenarios, run_live
    from rootproof.settings import load_settings
    from rootproof.terminal import terminal_safe

    if approve not in APPROVALS:
        raise UsageError(f"--approve: expected one of {', '.join(APPROVALS)} (got {approve!r})")
    chosen = resolve_scenarios(scenario)  # an unknown name: one line naming it and the known ones (exit 2)
    from rootproof.eval.questions import load_questions

    questions = load_questions(questions_spec) if questions_spec is not None else None
    settings = load_settings()
    to_stdout = json_file == "-"
    if json_file is not None and not to_stdout:
        from rootproof.cli import check_output_file

        check_output_file(Path(json_file))
    out = sys.stderr if to_stdout else sys.stdout
    bar = Progress(
        TextColumn("[bold]live[/bold] {task.fields[name]:<24} {task.description:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )
    tasks: dict[str, TaskID] = {}

    def advance(name: str, phase: str, done: int, total: int) -> None:
        if not bar.live.is_started:
            bar.start()
        if name not in tasks:
            tasks[name] = bar.add_task(phase, total=total, name=name)
        bar.update(tasks[name], completed=done, description=phase or "done")

    def case_done(c: LiveCaseResult, done: int, total: int) -> None:
        err.print(
            f"[{done}/{total}] " + terminal_safe(case_line(c)), highlight=False, markup=False, soft_wrap=True
        )

    try:
        suite = run_live(
            [s.name for s in chosen],
            settings=settings,
            approval=approve,  # narrowed to an Approval by the APPROVALS check above
            record_dir=record,
            progress=advance,
            on_case=case_done,
            questions=questions,
        )
    except Interrupted as exc:
        bar.stop()
        print(
            f"Error: interrupted ({signal_name(exc.signum)}); the running scenario was cleaned up and the eval run recorded cancelled",
            file=sys.stderr,
        )
        raise typer.Exit(128 + exc.signum) from None
    except KeyboardInterrupt:
        bar.stop()
        print(
            "Error: interrupted (SIGINT); the running scenario was cleaned up and the eval run recorded cancelled",
            file=sys.stderr,
        )
        raise typer.Exit(130) from None
    finally:
        bar.stop()
    data = report_json(suite)
    if json_file is not None:
        emit_json(data, None if to_stdout else Path(json_file))
    if html_file is not None:
        html_file.parent.mkdir(parents=True, exist_ok=True)
        html_file.write_text(render_html(suite), encoding="utf-8")
        err.print(f"wrote {html_file}")
    if not to_stdout:  # with the JSON on stdout, stderr already has each case's line
        for c in suite.cases:
            print(terminal_safe(case_line(c)), file=out)
    s = data["summary"]
    print(
        terminal_safe(
            f"eval {suite.eval_id} {suite.state}: {s['scenarios']} scenarios (approval {suite.approval}), mean {s['mean_score']}, "
            f"pass rate {s['pass_rate']}, infra_invalid {s['infra_invalid']}, residue {s['residue']}, hard gates {s['hard_gate_violations']}, {s['wall_time_s']} s"
        ),
        file=out,
    )
    if "question_agreement" in s:
        for c in suite.cases:
            for q in c.questions:
                rc = q.root_cause
                label = f"{rc['component']}/{rc['mechanism']}" if rc else "no root cause"
                flags = ("agrees" if q.agrees else "DIFFERS") + (", FALSE-CONFIDENT" if q.false_confident else "")
                print(terminal_safe(f"  {c.case_id} {flags:<9} {label:<36} {q.question}"), file=out)
        print(
            f"wording: {s['question_runs']} runs under {s['questions']} questions, agreement {s['question_agreement']}, "
            f"false-confident over all runs {s['false_confident_rate']} (own questions {s['own_question_false_confident_rate']})",
            file=out,
        )


def signal_name(signum: int) -> str:
    import signal

    return signal.Signals(signum).name
