"""`rootproof`: the command line (typer + rich).

Exit codes: 0 when the command did its job; 2 on bad input, usage or configuration (one
`Error: ...` line naming the variable, file or field); 1 on an internal failure; 130 / 143 when
SIGINT (Ctrl-C) / SIGTERM cancelled a `diagnose` run (persisted CANCELLED); 141 when the reader
of stdout went away (`rootproof trace RUN | head -1`), quietly. `--json` prints exactly one JSON
document on stdout; status lines go to stderr. Terminal output escapes control characters
(ESC, CR, C0 and C1 but newline and tab), so text from logs cannot drive the terminal.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape as markup_escape

from rootproof.agent.loop import ModelStepInfo
from rootproof.errors import ConfigError, ScenarioError, StoreOpenError, UsageError
from rootproof.kb.cli import kb_app
from rootproof.live.cli import live_app
from rootproof.run.context import RunCancellation
from rootproof.run.records import EventRecord
from rootproof.settings import load_settings
from rootproof.terminal import json_text_safe, one_line, terminal_safe

if TYPE_CHECKING:
    from rootproof.harness import Harness
    from rootproof.targets import LoadedTargets

__all__ = ["app", "main"]

EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: the reader of stdout closed it (as `git log | head` does)."""

app = typer.Typer(help="rootproof: incident diagnosis that publishes only what the evidence proves.", no_args_is_help=True, pretty_exceptions_enable=False)
tools_app = typer.Typer(help="Evidence tools.", no_args_is_help=True)
tool_app = typer.Typer(help="Run one tool call.", no_args_is_help=True)
db_app = typer.Typer(help="Trace store.", no_args_is_help=True)
scenarios_app = typer.Typer(help="Snapshot scenarios.", no_args_is_help=True)
eval_app = typer.Typer(help="Benchmarks: guard, snapshot, adversarial, retrieval, ir, live.", no_args_is_help=True)
app.add_typer(tools_app, name="tools")
app.add_typer(tool_app, name="tool")
app.add_typer(db_app, name="db")
app.add_typer(scenarios_app, name="scenarios")
app.add_typer(eval_app, name="eval")
app.add_typer(kb_app, name="kb")
app.add_typer(live_app, name="live")
err = Console(stderr=True, highlight=False)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


def say(*parts: object) -> None:
    """Print one line on stdout: terminal-safe, and a line break or tab inside it (text quoted from
    evidence, a question, a model's words) shown escaped, so that no value can lay out a line of
    its own; the labels of the line are the caller's."""
    print(one_line(" ".join(str(p) for p in parts)))


def status(text: str, style: str = "") -> None:
    """One status line on stderr (rich), one line whatever it quotes, and markup-escaped."""
    safe = markup_escape(one_line(text))
    err.print(f"[{style}]{safe}[/{style}]" if style else safe)


def _store_setting() -> str:
    """The variable that names the trace store, for messages."""
    try:
        configured = load_settings().database_url is not None
    except ConfigError:
        configured = bool(os.environ.get("ROOTPROOF_DATABASE_URL"))
    if configured:
        return "ROOTPROOF_DATABASE_URL"
    from rootproof.settings import data_dir_variable

    return f"{data_dir_variable()} (the trace store is rootproof.db in the data folder)"


def fail(exc: BaseException) -> None:
    """Map an error to one line and an exit code (2 bad input or configuration, 1 internal)."""
    if isinstance(exc, StoreOpenError):
        print(terminal_safe(f"Error: {_store_setting()}: {exc}"), file=sys.stderr)
        raise typer.Exit(2)
    if isinstance(exc, ConfigError | UsageError):
        print(terminal_safe(f"Error: {exc}"), file=sys.stderr)
        raise typer.Exit(2)
    if isinstance(exc, OSError) and exc.filename is not None:  # a file named on the command line (`--json FILE`)
        print(terminal_safe(f"Error: {exc.filename}: {exc.strerror or exc}"), file=sys.stderr)
        raise typer.Exit(2)
    name = type(exc).__name__
    print(terminal_safe(f"Error: internal failure: {name}: {exc}"), file=sys.stderr)
    raise typer.Exit(1)


def _closed_pipe() -> None:
    """stdout's reader is gone: send what is left to /dev/null (no error at exit) and stop quietly."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    raise typer.Exit(EXIT_BROKEN_PIPE)


def guarded(fn: Any) -> Any:
    """Decorator: run a command body with the error mapping."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
            sys.stdout.flush()  # a closed pipe shows here, inside the mapping, not at exit
            return result
        except typer.Exit:
            raise
        except BrokenPipeError:
            _closed_pipe()
        except Exception as exc:
            fail(exc)

    return wrapper


@contextlib.contextmanager
def cancel_on_signals(cancellation: RunCancellation) -> Iterator[list[int]]:
    """SIGINT and SIGTERM cancel the run (it ends CANCELLED, persisted); a second signal stops at once.

    Yields the list of signals received (the first decides the exit code, 128 + its number).
    """
    received: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if received:
            raise KeyboardInterrupt
        received.append(signum)
        cancellation.cancel(f"{signal.Signals(signum).name} received")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def check_output_file(target: Path | None) -> None:
    """Refuse a `--json FILE` (or `--html FILE`) that cannot be written as a file before any work
    is done: a folder is `IsADirectoryError` naming it (one `Error:` line, exit 2)."""
    if target is not None and target.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(target))


def emit_json(data: Any, target: Path | None = None) -> None:
    """One JSON document: on stdout, or written to `target` (C1 and bidi controls as `\\uXXXX`)."""
    text = json.dumps(data, ensure_ascii=False, indent=2, default=str)
    # Same document, but nothing a terminal would act on (json.dumps leaves these raw).
    text = json_text_safe(text)
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text + "\n", encoding="utf-8")
        status(f"wrote {target}")
    else:
        sys.stdout.write(text + "\n")


@contextlib.contextmanager
def _harness() -> Iterator[Harness]:
    """A harness on this command's runtime (one per command), closed when the command ends."""
    from rootproof.harness import Harness
    from rootproof.runtime import Runtime

    with Runtime.from_settings(load_settings(), environ=os.environ) as runtime:
        yield Harness(runtime)


def _targets(path: Path | None, scenario: str | None) -> LoadedTargets | None:
    """The targets file of a live run: `--targets FILE`, else ROOTPROOF_TARGETS when no
    `--scenario` is given; both `--targets` and `--scenario` is a usage error."""
    if path is not None and scenario is not None:
        raise UsageError("--targets and --scenario exclude each other: a run reads either live targets or a scenario")
    from_setting = path is None and scenario is None
    if from_setting:
        path = load_settings().targets
    if path is None:
        return None
    from rootproof.targets import load_targets

    try:
        return load_targets(path)
    except ConfigError as exc:
        if from_setting:  # name where the file came from: the user typed no path
            raise ConfigError(f"ROOTPROOF_TARGETS: {exc}") from exc
        raise


def _scenario(ref: str | None) -> Any:
    if ref is None:
        return None
    from rootproof.scenarios.loader import load_scenario

    return load_scenario(ref, max_file_bytes=load_settings().max_scenario_file_bytes)


def _status_line(e: EventRecord) -> None:
    d = e.data
    if e.type == "metadata":
        status(f"run {d['run_id']} (session {d['session_id']})", "dim")
    elif e.type == "status":
        status(f"» {d['phase']}", "cyan")
    elif e.type == "tool":
        status(f"  tool {d['tool']} {d['status']}{' ' + str(d['code']) if d.get('code') else ''} {d.get('evidence_status') or ''} refs={d['evidence_count']} source={d.get('data_source')}")
    elif e.type == "content":
        status(f"» content {d.get('content_type')}", "bold")
    elif e.type == "done":
        status(f"» done {d['release_outcome']} status={d['status']} {d['duration_ms']} ms", "bold")


def model_step_line(info: ModelStepInfo) -> None:
    """A status line per agent model step: tokens in and out, time to first token, tokens/s."""
    what = "draft" if info.draft else f"{info.calls} call(s)" if info.calls else "no call"
    first = f", first token {info.first_token_s:.1f} s" if info.first_token_s is not None else ""
    est = " (estimated)" if info.estimated else ""
    if info.input_tokens == 0 and info.output_tokens == 0 and not info.estimated:
        # The offline planner reads no tokens: its step has a time and a decision, nothing more.
        status(f"  planner step {info.step_index} [{info.mode}]: {info.seconds:.2f} s → {what}", "dim")
        return
    status(
        f"  model step {info.step_index} [{info.mode}]: {info.input_tokens} in + {info.output_tokens} out tokens{est}, "
        f"{info.seconds:.1f} s{first}, {info.tokens_per_s:.1f} tok/s → {what}",
        "dim",
    )
    if info.note:
        status(f"  model: {info.note}", "yellow")


_CARD_LABELS = {
    "en": {"root": "root cause", "contributing": "contributing cause", "culprit": "culprit"},
    "zh": {"root": "根因", "contributing": "促成原因", "culprit": "具体对象"},
}
"""The report card's labels per language (the report itself is in the run's language)."""


def _cause_line(label: str, cause: Any, culprit: str) -> str:
    return f"  {label}: {cause.get('component')} / {cause.get('mechanism')}  {culprit}: {cause.get('culprit', '')}"


def _print_content(content: dict[str, Any] | None, language: str = "en") -> None:
    if content is None:
        say("(no content: the run was cancelled)")
        return
    kind = content.get("content_type")
    if kind == "SAFE_FALLBACK":
        fb = content["fallback"]
        say(f"SAFE_FALLBACK {fb['type']}: {fb['message']}")
        for x in fb["limitations"]:
            say(f"  limitation: {x}")
        for x in fb["next_steps"]:
            say(f"  next step: {x}")
        return
    if kind == "SYSTEM_MESSAGE":
        say(content["message"])
        return
    body = content.get("report") or content.get("answer") or {}
    say(f"{kind}: {body.get('summary', '')}")
    labels = _CARD_LABELS.get(language, _CARD_LABELS["en"])
    rc = body.get("root_cause")
    if rc:
        say(_cause_line(labels["root"], rc, labels["culprit"]))
    for cause in body.get("contributing_causes") or []:
        say(_cause_line(labels["contributing"], cause, labels["culprit"]))
    for c in body.get("claims", []):
        say(f"  [{c['kind']}] {c['text'][:200]}")
    for r in body.get("recovery", []):
        say(f"  recovery: {r['action']} (risk {r['risk']}, approval {'required' if r['requires_approval'] else 'not required'}) — {r['verification'][:120]}")
    say(f"  verified sources: {len(content.get('verified_sources', []))}")


@app.command()
@guarded
def diagnose(
    question: Annotated[str | None, typer.Argument(help="The question (else --alert, else the scenario's question).")] = None,
    scenario: Annotated[str | None, typer.Option("--scenario", help="Built-in scenario id or a scenario folder.")] = None,
    alert: Annotated[Path | None, typer.Option("--alert", help="An alert payload file (YAML or JSON).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="offline | openai")] = None,
    targets: Annotated[Path | None, typer.Option("--targets", help="A targets file: diagnose the live systems it names (default ROOTPROOF_TARGETS).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Diagnose an incident; print the published report or the safe fallback."""
    if model is not None and model not in ("offline", "openai"):
        raise UsageError(f"--model: expected offline or openai (got {model!r})")
    live = _targets(targets, scenario)
    sc = _scenario(scenario)
    from rootproof.alerts import load_alert_file

    payload = load_alert_file(alert, load_settings().input_limits()) if alert is not None else None
    # QUESTION, else the alert (the harness builds the question from the primary alert), else the scenario's.
    text = question if question else "" if alert is not None else sc.question if sc is not None else None
    if text is None:
        raise UsageError("no question: give QUESTION, --alert FILE or a --scenario with a question")
    if sc is None and live is None:
        from rootproof.agent.router import Route, offline_route

        if payload is not None or offline_route(text, incident_scope=False) is Route.DIAGNOSIS:
            raise UsageError("diagnosis needs evidence: give --scenario ID|DIR or --targets FILE (no live backend is configured)")
    cancellation = RunCancellation()
    # Without --alert, a scenario's own alert is the context (as in `eval snapshot`).
    with _harness() as h, cancel_on_signals(cancellation) as received:
        out = h.diagnose(
            text,
            scenario=sc,
            targets=live,
            alert=payload or (sc.alert if sc is not None else None),
            model=model,
            listeners=[_status_line],
            cancellation=cancellation,
            on_model_step=model_step_line,
        )
    if out.status == "CANCELLED":
        if as_json:
            emit_json(out.public())
        why = signal.Signals(received[0]).name if received else "cancelled"
        print(f"Error: run {out.run_id} cancelled ({why}); it is recorded CANCELLED: rootproof trace {out.run_id}", file=sys.stderr)
        raise typer.Exit(128 + received[0] if received else 1)
    if as_json:
        emit_json(out.public())
    else:
        _print_content(out.content, out.language)
        ai = out.aiops_rule_evaluation
        if ai is not None:
            failed = [f"{c['rule']} ({c['detail']})" for c in ai["checks"] if not c["passed"]]
            say("  AIOps rules: " + ("passed" if ai["passed"] else "FAILED " + "; ".join(failed)))
        err.print(f"[dim]trace: rootproof trace {out.run_id}[/dim]")


@app.command()
@guarded
def demo(as_json: JsonOpt = False) -> None:
    """Run a published diagnosis and the seed's payment-timeout fallback on the embedded default."""
    results = []
    with _harness() as h:
        for sid, q in (("pg-row-lock", None), ("payment-timeout", "支付接口最近出现超时")):
            sc = _scenario(sid)
            err.print(f"\n[bold]== scenario {sid}[/bold]")
            out = h.diagnose(q or sc.question, scenario=sc, listeners=[] if as_json else [_status_line])
            results.append({"scenario": sid, **out.public()})
            if not as_json:
                print()
                say(f"# {sid}: {q or sc.question}")
                _print_content(out.content, out.language)
                say(f"  status={out.status} release_outcome={out.release_outcome} run_id={out.run_id}")
    if as_json:
        emit_json({"runs": results})


@tools_app.command("list")
@guarded
def tools_list(as_json: JsonOpt = False) -> None:
    """List the evidence tools and their argument schemas."""
    from rootproof.tools.base import TOOLS

    data = [{"name": t.name, "description": t.description, "read_only": t.read_only, "parameters": t.json_schema()} for t in TOOLS.values()]
    if as_json:
        emit_json(data)
        return
    for t in data:
        say(f"{t['name']:<18} {t['description']}")


@tool_app.command("call")
@guarded
def tool_call(
    name: Annotated[str, typer.Argument(help="Tool name.")],
    scenario: Annotated[str | None, typer.Option("--scenario", help="Built-in scenario id or folder.")] = None,
    args: Annotated[str, typer.Option("--args", help="Arguments as a JSON object.")] = "{}",
    targets: Annotated[Path | None, typer.Option("--targets", help="A targets file: call the live system it names (default ROOTPROOF_TARGETS).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run one call through the full boundary (a one-step run); print observation and invocation."""
    from rootproof.tools.base import TOOLS

    if name not in TOOLS:
        raise UsageError(f"unknown tool {name!r} (expected one of {', '.join(TOOLS)})")
    try:
        parsed = json.loads(args)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--args: not valid JSON ({exc.msg} at position {exc.pos})") from None
    except (ValueError, RecursionError):  # a number of thousands of digits, or arrays nested thousands deep
        raise UsageError("--args: not usable JSON (a number too long or nesting too deep)") from None
    if not isinstance(parsed, dict):
        raise UsageError("--args: expected a JSON object")
    live = _targets(targets, scenario)
    if TOOLS[name].backend != "knowledge" and scenario is None and live is None:
        raise UsageError(f"{name} needs --scenario ID|DIR or --targets FILE (no live backend is configured)")
    sc = _scenario(scenario)
    with _harness() as h:
        outcome, ctx = h.tool_call(name, parsed, scenario=sc, targets=live)
    inv = outcome.invocation
    doc = {
        "run_id": ctx.run_id,
        "invocation": {
            "invocation_id": inv.invocation_id,
            "tool_name": inv.tool_name,
            "status": str(inv.status),
            "refusal_code": inv.refusal_code,
            "message": inv.message,
            "evidence_status": inv.evidence_status,
            "data_source": inv.data_source,
            "scope_key": inv.scope_key,
            "arguments": inv.arguments,
            "evidence_refs": [r.as_dict() for r in inv.evidence_refs],
            "duration_ms": inv.duration_ms,
            "result_bytes": inv.result_bytes,
        },
        "observation": outcome.observation,
    }
    if as_json:
        emit_json(doc)
        return
    say(f"{inv.tool_name} {inv.status} {inv.evidence_status or inv.refusal_code} source={inv.data_source} ({inv.duration_ms} ms)")
    for r in outcome.observation.get("refs", []):
        say(f"  {r['raw_path']}: {r['text'][:160]}")
    if outcome.observation.get("omitted"):
        say(f"  … {outcome.observation['omitted']} omitted: {outcome.observation['hint']}")


@app.command()
@guarded
def trace(run_id: Annotated[str, typer.Argument(help="A run id.")], as_json: JsonOpt = False) -> None:
    """Show what a run did, what it cost, where it stopped and what the user received."""
    with _harness() as h:
        data = h.reader().trace(run_id)
    if data is None:
        raise UsageError(f"unknown run id {run_id!r}")
    if as_json:
        emit_json(data)
        return
    run = data["run"]
    say(f"run {run['run_id']} route={run['route']} model={run['model']} status={run['status']} release_outcome={run['release_outcome']} fallback={run['fallback_type']} {run['duration_ms']} ms tokens={run['tokens']}")
    say(f"question: {run['question']}")
    if run.get("error"):
        say(f"error: {run['error']}")
    for s in data["steps"]:
        say(f"  step {s['step_index']}: tool_call={s['has_tool_call']} {s['duration_ms']} ms out: {s['model_output'][:120]}")
    for i in data["invocations"]:
        say(f"  {i['invocation_id']} step {i['step_index']} {i['tool_name']} {i['status']} {i['refusal_code'] or i['evidence_status']} source={i['data_source']}")
    se = run.get("self_evaluation") or {}
    if run.get("alert"):
        p = run["alert"]["primary"]
        say(f"  alert ({run['alert']['source']}): {p['name']} {p['severity']} service={p['service']} related={len(run['alert']['related'])}")
    ev, sem = se.get("evidence_guard"), se.get("semantic_guard")
    if se.get("rule_set_version") and not ev:
        say(f"  guard rule set: {se['rule_set_version']} (the guards did not run)")
    if ev:
        say(f"  evidence guard: passed={ev['passed']} codes={ev['codes']} rules={len(ev['rules'])} rule_set_version={ev['rule_set_version']}")
    if sem:
        failed = sorted({v["code"] for v in sem["verdicts"] if v.get("code")})
        say(f"  semantic guard: judge={sem['judge']} supported={sem['supported']} failed={failed} rule_set_version={sem['rule_set_version']}")
    for t in se.get("tool_trace_summary") or []:
        say(f"    {t['tool']} {t['status']} {t['evidence_status']} refs={t['evidence_count']} cited={len(t['cited_paths'])}")
    ai = se.get("aiops_rule_evaluation")
    if ai:
        say(f"  aiops rules ({ai['rule_set_version']}): passed={ai['passed']}")
        for c in ai["checks"]:
            say(f"    {'ok  ' if c['passed'] else 'FAIL'} {c['rule']}: {c['detail']}")
    say("  events: " + " → ".join(e["type"] + (f"({e['data'].get('phase')})" if e["type"] == "status" else "") for e in data["events"]))


@app.command()
@guarded
def audit(
    run_id: Annotated[str | None, typer.Argument(help="A run id (default: the newest runs).")] = None,
    limit: Annotated[int, typer.Option("--limit", help="How many recent runs to audit.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Re-verify published runs from the trace store, independently of the release path."""
    from rootproof.audit import audit_run

    findings = []
    with _harness() as h:
        store = h.reader()
        ids = [run_id] if run_id else [r.run_id for r in store.list_runs(limit)]
        for rid in ids:
            data = store.trace(rid)
            if data is None:
                raise UsageError(f"unknown run id {rid!r}")
            findings.append(audit_run(data))
    published = [f for f in findings if f.release_outcome == "PUBLISHED"]
    doc = {"runs": len(findings), "published": len(published), "ok": all(f.ok for f in findings), "findings": [f.as_dict() for f in findings]}
    if as_json:
        emit_json(doc)
    else:
        for f in findings:
            say(f"{f.run_id} {f.release_outcome or '-':9} {'ok' if f.ok else 'PROBLEMS'} citations={f.checked_citations}")
            for p in f.problems:
                say(f"  {p}")
    if not doc["ok"]:
        raise typer.Exit(1)


@db_app.command("upgrade")
@guarded
def db_upgrade() -> None:
    """Create or migrate the trace store schema to the newest revision."""
    from rootproof.store.sql import upgrade

    s = load_settings()
    s.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(s.resolved_database_url())
    err.print("trace store is at the newest revision")


@scenarios_app.command("list")
@guarded
def scenarios_list(ref: Annotated[str | None, typer.Argument(help="A folder of scenarios (default: built-in).")] = None, as_json: JsonOpt = False) -> None:
    """List scenarios."""
    from rootproof.scenarios.loader import list_scenarios, load_scenario

    rows = []
    for folder in list_scenarios(ref):
        sc = load_scenario(folder)
        rows.append({"id": sc.id, "language": sc.language, "title": sc.title, "allowed_tools": list(sc.allowed_tools)})
    if as_json:
        emit_json(rows)
        return
    for r in rows:
        say(f"{r['id']:<28} {r['language']}  {r['title']}")


@scenarios_app.command("validate")
@guarded
def scenarios_validate(ref: Annotated[str | None, typer.Argument(help="A scenario folder or a folder of them.")] = None) -> None:
    """Check every file of every scenario; print each problem with file and field."""
    from rootproof.kb.cards import taxonomy_for
    from rootproof.scenarios.loader import list_scenarios, validate_scenario

    settings = load_settings()
    taxonomy = taxonomy_for(settings.cards_dir)  # ground truth may use the cards' namespaced labels
    problems: list[str] = []
    for folder in list_scenarios(ref):
        problems.extend(validate_scenario(folder, taxonomy, max_file_bytes=settings.max_scenario_file_bytes))
    for p in problems:
        say(p)
    if problems:
        raise ScenarioError(f"{len(problems)} problem(s) found")
    err.print("all scenarios valid")


import_app = typer.Typer(help="Import other projects' incident cases as scenario folders.", no_args_is_help=True)
app.add_typer(import_app, name="import")


@import_app.command("opensre")
@guarded
def import_opensre(
    src: Annotated[Path, typer.Argument(help="An OpenSRE case folder (tests/synthetic/rds_postgres/<case>), or a folder of them.")],
    out: Annotated[Path, typer.Argument(help="Where to write one scenario folder per case (opensre-<case>).")],
    base: Annotated[Path | None, typer.Option("--base", help="Where base cases (scenario.yml `base:`) are looked up (default: next to each case).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace scenario folders that already exist in OUT.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Convert OpenSRE's synthetic RDS cases into scenario folders (docs/importing.md)."""
    from rootproof.scenarios.importers import ImportLimits
    from rootproof.scenarios.importers import import_opensre as run_import

    limits = ImportLimits(file_bytes=load_settings().max_scenario_file_bytes)
    result = run_import(src, out, base_dir=base, force=force, limits=limits)
    if as_json:
        emit_json(result.as_dict())
        return
    for c in result.cases:
        counts = ", ".join(f"{n} {k}" for k, n in c.counts.items() if n)
        inherits = f" (base {', '.join(c.bases)})" if c.bases else ""
        say(f"{c.id}: from {c.case}{inherits}: {counts or 'no evidence'}")
    for w in result.warnings:  # one line each, unwrapped
        print(terminal_safe(f"warning: {w}"), file=sys.stderr)
    status(f"{len(result.cases)} case(s) converted into {result.out}")


targets_app = typer.Typer(help="Targets files: what a live run may look at.", no_args_is_help=True)
app.add_typer(targets_app, name="targets")


@targets_app.command("check")
@guarded
def targets_check(
    file: Annotated[Path, typer.Argument(help="A targets file (YAML, or TOML by its .toml suffix).")], as_json: JsonOpt = False
) -> None:
    """Check every target: reachable, read-only, what is missing. Exit 0 all usable, 1 one is not, 2 bad file."""
    from rootproof.targets_check import check_command

    code = check_command(file, as_json=as_json, environ=os.environ)
    if code:
        raise typer.Exit(code)


models_app = typer.Typer(help="Model servers: what the OpenAI-compatible server can do.", no_args_is_help=True)
app.add_typer(models_app, name="models")


@models_app.command("check")
@guarded
def models_check(as_json: JsonOpt = False) -> None:
    """Probe the ROOTPROOF_OPENAI_* server: its quirks, and whether a run can work. Exit 0 it can, 1 not, 2 bad setting."""
    from rootproof.models_check import check_command

    code = check_command(load_settings(), as_json=as_json)
    if code:
        raise typer.Exit(code)


GRACEFUL_SHUTDOWN_S = 10
"""`serve` on SIGTERM: open streams get this long to end; then their runs are cancelled (a
client's disconnect) and every run still executing reaches its terminal state before exit."""


@app.command()
@guarded
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to bind (default loopback).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, help="Worker processes (uvicorn).")] = 1,
    no_auth: Annotated[bool, typer.Option("--no-auth", help="Serve without API keys (loopback only; every request is admin).")] = False,
) -> None:
    """Run the team service: HTTP API with SSE, alert webhooks, traces (docs/service.md)."""
    from rootproof.service.auth import is_loopback, service_keys

    if no_auth and not is_loopback(host):
        raise UsageError(f"--no-auth binds to loopback only; --host {host} is not a loopback address")
    settings = load_settings()
    service_keys(settings, no_auth=no_auth)  # the keys, before the web stack is imported
    from rootproof.service.app import create_app

    create_app(settings, no_auth=no_auth)  # the keys and settings are checked before binding
    if settings.targets is not None:  # and the targets file
        from rootproof.targets import load_targets

        try:
            load_targets(settings.targets)
        except ConfigError as exc:
            raise ConfigError(f"ROOTPROOF_TARGETS: {exc}") from exc
    if settings.notifications is not None:  # and the notification receivers (their URLs are read, never shown)
        from rootproof.service.notify import load_receivers

        load_receivers(settings.notifications, os.environ)
    from rootproof.service.server import run, serve_config

    status(f"rootproof serve on http://{host}:{port} ({workers} worker{'s' if workers > 1 else ''}{', no auth' if no_auth else ''})", "dim")
    # uvicorn's h11 protocol with the header deadline, idle deadline and connection cap it lacks
    # (service/server.py); the key gate and the body deadline are the app's (service/limits.py).
    options: dict[str, Any] = {"host": host, "port": port, "log_level": "warning", "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_S}
    if workers > 1:
        os.environ["ROOTPROOF_SERVE_NO_AUTH"] = "1" if no_auth else "0"
        run(serve_config("rootproof.service.app:app_from_environment", settings, factory=True, workers=workers, **options))
    else:
        run(serve_config(create_app(settings, no_auth=no_auth), settings, **options))


@app.command("hash-key")
@guarded
def hash_key_command(role: Annotated[str, typer.Argument(help="operator, auditor or admin.")]) -> None:
    """Read an API key on stdin; print its ROOTPROOF_API_KEYS_FILE line (`sha256:<hex>:<role>`)."""
    from rootproof.service.auth import ROLES, hash_key

    if role not in ROLES:
        raise UsageError(f"ROLE: unknown role {role!r} (expected one of {', '.join(ROLES)})")
    key = sys.stdin.readline().strip()
    if len(key) < 16:
        raise UsageError("stdin: expected an API key of at least 16 characters")
    print(f"{hash_key(key)}:{role}")


def _mount_eval() -> None:
    from rootproof.eval.ir import ir_command
    from rootproof.eval.retrieval import retrieval_command

    eval_app.command("retrieval")(retrieval_command)
    eval_app.command("ir")(ir_command)
    try:
        from rootproof.eval import commands
    except ImportError:
        return
    commands.register(eval_app)


_mount_eval()


def main() -> None:
    """Entry point. Errors that escape a command body (the `eval` commands are not `guarded`)
    get the same mapping as inside one: one line and an exit code, never a traceback."""
    try:
        try:
            app()
        except BrokenPipeError:
            _closed_pipe()
        except Exception as exc:  # noqa: BLE001 - mapped to one line and an exit code
            fail(exc)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
