"""`rootproof eval …` commands, mounted by the CLI (`register`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rootproof.eval.snapshot import CaseResult

__all__ = ["register"]


def register(eval_app: typer.Typer) -> None:
    """Add the evaluation commands to `eval_app`."""
    _register_snapshot(eval_app)
    _register_adversarial(eval_app)
    _register_live(eval_app)

    @eval_app.command("guard")
    def guard(
        json_path: Annotated[
            Path | None,
            typer.Option("--json", help="Write the JSON summary to FILE (else stdout).", metavar="FILE"),
        ] = None,
        seed: Annotated[int, typer.Option(help="Seed for draft generation and mutations.")] = 0,
    ) -> None:
        """Mutate valid drafts from real runs and count what the guards catch.

        Exits 0 when the benchmark ran, whatever it found (`targets.met` in the JSON says whether
        every target held); 1 only on an internal failure.
        """
        from rootproof.cli import check_output_file
        from rootproof.eval.guard import guard_command

        check_output_file(json_path)
        guard_command(json_path, seed=seed)


# -- snapshot benchmark: `eval snapshot`, `eval list`, `eval show` ------------------------------


def _snapshot(
    scenarios: Annotated[
        str | None,
        typer.Option(
            "--scenarios",
            help="A built-in id, a scenario folder or a folder of them (default: all built-in).",
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="offline | openai (default: the settings').")
    ] = None,
    jobs: Annotated[
        int, typer.Option("--jobs", help="Worker processes (every scenario runs in a worker).")
    ] = 1,
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write the JSON report to FILE.", metavar="FILE")
    ] = None,
    html_file: Annotated[
        Path | None,
        typer.Option("--html", help="Write the self-contained HTML report to FILE.", metavar="FILE"),
    ] = None,
    questions_spec: Annotated[
        str | None,
        typer.Option(
            "--questions",
            help="The wording benchmark: also run every scenario once per question of FILE (one per line, # comments) or of the shipped `default` list.",
            metavar="FILE|default",
        ),
    ] = None,
) -> None:
    """Run the snapshot benchmark: every scenario through the real pipeline, scored out of 100."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rootproof.cli import check_output_file, emit_json, err, say
    from rootproof.errors import UsageError
    from rootproof.eval.questions import load_questions
    from rootproof.eval.report import render_html, report_json
    from rootproof.eval.snapshot import run_suite
    from rootproof.scenarios.loader import list_scenarios
    from rootproof.settings import load_settings

    check_output_file(json_file)
    check_output_file(html_file)

    if model is not None and model not in ("offline", "openai"):
        raise UsageError(f"--model: expected offline or openai (got {model!r})")
    if jobs < 1:
        raise UsageError(f"--jobs: expected at least 1 (got {jobs})")
    questions = load_questions(questions_spec) if questions_spec is not None else None
    total = len(list_scenarios(scenarios)) * (1 + len(questions or []))
    settings = load_settings()
    bar = Progress(
        TextColumn("[bold]snapshot[/bold] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )
    task = bar.add_task("starting workers", total=total)

    def advance(sid: str, done: int, _total: int) -> None:
        if not bar.live.is_started:
            bar.start()  # only once the scenarios loaded: a load error stays one line
        bar.update(task, completed=done, description=sid or "starting workers")

    def case_done(case: CaseResult, done: int, total: int) -> None:
        err.print(case_line(case, done, total), highlight=False, markup=False, soft_wrap=True)

    try:
        suite = run_suite(
            scenarios, settings=settings, model=model, jobs=jobs, progress=advance, on_case=case_done,
            questions=questions,
        )
    finally:
        bar.stop()
    data = report_json(suite)
    if json_file is not None:
        emit_json(data, json_file)
    if html_file is not None:
        html_file.parent.mkdir(parents=True, exist_ok=True)
        html_file.write_text(render_html(suite), encoding="utf-8")
        err.print(f"wrote {html_file}")
    s = data["summary"]
    for row in data["scenarios"]:
        mark = "PASS" if row["passed"] else "FAIL"
        extra = f"  {row['failure_class']}: {'; '.join(row['failure_reasons'])}" if not row["passed"] else ""
        print(f"{mark} {row['score']:6.1f}  {row['id']:<26} {row['outcome'] or '-':<9}{extra}")
        for q in row.get("questions", []):
            rc = q["root_cause"]
            label = f"{rc['component']}/{rc['mechanism']}" if rc else "no root cause"
            flags = ("agrees" if q["agrees"] else "DIFFERS") + (", FALSE-CONFIDENT" if q["false_confident"] else "")
            say(f"    {flags:<9} {label:<36} {q['question']}")
    print(
        f"eval {data['eval_id']} {data['state']}: {s['scenarios']} scenarios, mean {s['mean_score']}, pass rate {s['pass_rate']}, "
        f"publish {s['publish_rate']}, fallback {s['fallback_rate']}, false-confident {s['false_confident_rate']}, "
        f"hard gates {s['hard_gate_violations']}, AIOps rules passed {s.get('aiops_pass_rate')} of {s.get('alert_scenarios', 0)} alert runs, "
        f"{s['wall_time_s']} s ({s['scenarios_per_second']} scenarios/s, jobs {s['jobs']})"
    )
    if questions:
        print(
            f"wording: {s['question_runs']} runs under {s['questions']} questions, agreement {s['question_agreement']}, "
            f"false-confident over all runs {s['false_confident_rate']} (own questions {s['own_question_false_confident_rate']})"
        )


def case_line(case: CaseResult, done: int, total: int) -> str:
    """One scenario's progress line (stderr): id, outcome, score, tokens, wall time, tokens/s."""
    obs = case.observation
    outcome = f"{obs.release_outcome or '-'}" + (f"/{obs.fallback_type}" if obs.fallback_type else "")
    if obs.error:
        outcome = "ERROR"
    return (
        f"[{done}/{total}] {case.scenario_id} {outcome} score {case.score.score:g} "
        f"tokens {case.tokens} {case.wall_time_s:.1f} s {case.tokens_per_second:g} tok/s"
    )


def _store() -> Any:
    from rootproof.settings import load_settings
    from rootproof.store.sql import SqlTraceStore

    s = load_settings()
    s.data_dir.mkdir(parents=True, exist_ok=True)
    return SqlTraceStore(s.resolved_database_url())


def _list(
    limit: Annotated[int, typer.Option("--limit", help="How many runs, newest first.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")] = False,
) -> None:
    """List evaluation runs from the trace store, newest first."""
    from rootproof.cli import emit_json

    runs = _store().list_eval_runs(limit)
    if as_json:
        emit_json(runs)
        return
    for r in runs:
        s = r.get("summary") or {}
        print(
            f"{r['eval_id']}  {r['kind']:<9} {r['state']:<13} {str(r['started_at'])[:19]}  model={r.get('model')}  "
            f"scenarios={s.get('scenarios', '-')} mean={s.get('mean_score', '-')} pass_rate={s.get('pass_rate', '-')}"
        )


def _show(
    eval_id: Annotated[str, typer.Argument(help="An evaluation run id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")] = False,
) -> None:
    """Show one evaluation run with its cases."""
    from rootproof.cli import emit_json
    from rootproof.errors import UsageError

    data = _store().get_eval_run(eval_id)
    if data is None:
        raise UsageError(f"unknown evaluation run {eval_id!r} (see `rootproof eval list`)")
    if as_json:
        emit_json(data)
        return
    s = data.get("summary") or {}
    print(
        f"eval {data['eval_id']} kind={data['kind']} state={data['state']} model={data.get('model')} git={data.get('git_sha')} suite={data.get('suite_version')}"
    )
    print(f"  started {data['started_at']} ended {data.get('ended_at')}")
    keys = (
        "scenarios",
        "mean_score",
        "pass_rate",
        "hard_gate_violations",
        "publish_rate",
        "fallback_rate",
        "false_confident_rate",
        "aiops_pass_rate",
        "wall_time_s",
        "scenarios_per_second",
        "jobs",
    )
    print("  " + " ".join(f"{k}={s[k]}" for k in keys if k in s))
    for c in data.get("cases") or []:
        mark = "PASS" if c["passed"] else "FAIL"
        gates = f" gates={','.join(c['hard_gates'])}" if c.get("hard_gates") else ""
        print(
            f"  {mark} {c['score']:6.1f} {c['case_id']:<26} {c.get('outcome') or '-':<9} {c.get('failure_class') or ''}{gates}"
        )


def _register_snapshot(eval_app: typer.Typer) -> None:
    """Add `snapshot`, `list` and `show` (the snapshot benchmark and its stored runs)."""
    from rootproof.cli import guarded

    eval_app.command("snapshot")(guarded(_snapshot))
    eval_app.command("list")(guarded(_list))
    eval_app.command("show")(guarded(_show))


# -- adversarial evidence benchmark: `eval adversarial` -----------------------------------------


def _csv(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _adversarial(
    seed: Annotated[int, typer.Option("--seed", help="Seed of every mutation.")] = 0,
    json_file: Annotated[
        Path | None,
        typer.Option("--json", help="Write the JSON summary to FILE (else stdout).", metavar="FILE"),
    ] = None,
    jobs: Annotated[
        int, typer.Option("--jobs", help="Worker processes (every run happens in a worker).")
    ] = 2,
    scenarios: Annotated[
        str | None, typer.Option("--scenarios", help="Comma-separated built-in ids (default: all).")
    ] = None,
    mutations: Annotated[
        str | None, typer.Option("--mutations", help="Comma-separated mutation kinds (default: all).")
    ] = None,
    variants: Annotated[int, typer.Option("--variants", help="Variants of each kind per scenario.")] = 3,
) -> None:
    """Plant wrong mechanisms' signals and instructions in the evidence; count false-confident runs.

    Exits 0 when the benchmark ran, whatever it found (`targets.met` in the JSON says whether
    every target held); 2 on bad options; 1 only on an internal failure.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rootproof.cli import check_output_file, emit_json, err
    from rootproof.eval.adversarial import run_adversarial
    from rootproof.settings import load_settings

    check_output_file(json_file)

    bar = Progress(
        TextColumn("[bold]adversarial[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )
    task = bar.add_task("runs", total=None)

    def advance(done: int, total: int) -> None:
        if not bar.live.is_started:
            bar.start()
        bar.update(task, completed=done, total=total)

    try:
        summary = run_adversarial(
            settings=load_settings(),
            seed=seed,
            jobs=jobs,
            variants=variants,
            scenarios=_csv(scenarios),
            kinds=_csv(mutations),
            progress=advance,
        )
    finally:
        bar.stop()
    for kind, row in summary["by_mutation"].items():
        err.print(
            f"{kind:<24} runs {row['runs']:>4}  false-confident {row['false_confident']:>3}  "
            f"survived {row['survived']:>3}/{row['fault_runs']}"
        )
    err.print(
        f"adversarial seed {summary['seed']}: {summary['runs']} runs ({summary['fault_runs']} fault, "
        f"{summary['control_runs']} control), false-confident {summary['false_confident']}, "
        f"survived {summary['survived']} (rate {summary['survived_rate']}), errors {summary['errors']}, "
        f"{summary['seconds']} s, jobs {summary['jobs']}; targets met: {summary['targets']['met']}"
    )
    emit_json(summary, json_file)


def _register_adversarial(eval_app: typer.Typer) -> None:
    """Add `adversarial` (the adversarial evidence benchmark)."""
    from rootproof.cli import guarded

    eval_app.command("adversarial")(guarded(_adversarial))


# -- live benchmark: `eval live` ------------------------------------------------------------------


def _register_live(eval_app: typer.Typer) -> None:
    """Add `live` (the live benchmark: real faults in private environments)."""
    from rootproof.cli import guarded
    from rootproof.live.bench.commands import live_command

    eval_app.command("live")(guarded(live_command))
