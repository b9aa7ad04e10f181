"""`rootproof live up|status|down`: the live environment by hand (docs/live-benchmark.md).

`up` starts a detached environment (it stays after the command exits) and prints its run id,
folder and targets file; `status` checks each component of one run or of every run (exit 1
when one is not healthy); `down` stops a run (or `--all`) by its pidfiles and removes its
folder, listing anything left behind (exit 1 when the residue is not empty). The runs live
under `ROOTPROOF_LIVE_ROOT` (default `<data dir>/live`). Exit codes as everywhere: 2 for bad
input or configuration (a missing binary, an unknown run id), 1 when the environment failed
(a component that did not start, residue), 130 / 143 when SIGINT / SIGTERM stopped `up` (what
it had started is stopped first). `--json` prints one JSON document on stdout; progress goes
to stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from rootproof.errors import ConfigError, LiveEnvironmentError, UsageError
from rootproof.terminal import json_text_safe, one_line, terminal_safe

if TYPE_CHECKING:
    from rootproof.live.env import RunStatus

__all__ = ["live_app"]

live_app = typer.Typer(help="The live benchmark's private environment: up, status, down.", no_args_is_help=True)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
T = TypeVar("T")


def _say(text: str) -> None:
    print(one_line(text))


def _progress(text: str) -> None:
    print(terminal_safe(text), file=sys.stderr, flush=True)


def _emit(doc: Any) -> None:
    sys.stdout.write(json_text_safe(json.dumps(doc, ensure_ascii=False, indent=2, default=str)) + "\n")


def _run(fn: Callable[[], T]) -> T:
    """A command body: bad input or configuration exits 2, an environment failure 1, each one `Error:` line."""
    try:
        return fn()
    except typer.Exit:
        raise
    except (ConfigError, UsageError) as exc:  # MissingBinary and LiveConfigError are ConfigErrors
        print(terminal_safe(f"Error: {exc}"), file=sys.stderr)
        raise typer.Exit(2) from None
    except LiveEnvironmentError as exc:
        print(terminal_safe(f"Error: live environment: {exc}"), file=sys.stderr)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        print("Error: interrupted (SIGINT); what was started is stopped", file=sys.stderr)
        raise typer.Exit(130) from None
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
        print(terminal_safe(f"Error: internal failure: {type(exc).__name__}: {exc}"), file=sys.stderr)
        raise typer.Exit(1) from None


def _root() -> Path:
    from rootproof.settings import load_settings

    return load_settings().resolved_live_root()


@live_app.command("up")
def up(as_json: JsonOpt = False) -> None:
    """Start a private environment and leave it running; print its run id, folder and targets file."""

    def body() -> None:
        from rootproof.live.env import LiveEnvironment
        from rootproof.live.layout import LiveConfig

        env = LiveEnvironment(LiveConfig(root=_root()), progress=_progress)
        env.install_signal_handlers()  # SIGINT/SIGTERM while starting: stop what was started, then exit
        try:
            report = env.preflight()
            _progress(f"run {report.run_id} in {report.folder}")
            env.start(detach=True)
        finally:
            env.restore_signal_handlers()
        status = env.status()
        doc = {
            "run_id": env.run_id,
            "folder": str(env.folder),
            "targets_file": str(env.targets_file),
            "urls": env.urls(),
            "healthy": status.healthy,
            "components": [{"name": c.name, "pid": c.pid, "ports": c.ports, "healthy": c.healthy} for c in status.components],
            "cleaned": [c.run_id for c in report.cleaned],
        }
        if as_json:
            _emit(doc)
            return
        _say(f"run {env.run_id}")
        _say(f"folder: {env.folder}")
        _say(f"targets: {env.targets_file}")
        for name, url in env.urls().items():
            _say(f"  {name}: {url}")
        _progress(f"diagnose it: rootproof diagnose --targets {env.targets_file} \"why do orders fail?\"")
        _progress(f"stop it: rootproof live down {env.run_id}")

    _run(body)


def _print_status(st: RunStatus) -> None:
    owner = "detached" if st.detached else f"owner pid {st.owner_pid}"
    _say(f"run {st.run_id} ({st.state}, {owner}): {'healthy' if st.healthy else 'NOT HEALTHY'}")
    for c in st.components:
        ports = ",".join(str(p) for p in c.ports.values()) or "-"
        _say(f"  {c.name:<18} pid {c.pid or '-':<8} ports {ports:<12} {'ok  ' if c.healthy else 'FAIL'} {c.detail}")


@live_app.command("status")
def status(
    run_id: Annotated[str | None, typer.Argument(help="A run id (default: every run).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Each component of a run: its process alive, its ports listened on, its health check. Exit 1 when one is not healthy."""

    def body() -> int:
        from rootproof.live.env import LiveEnvironment
        from rootproof.live.runs import list_runs

        root = _root()
        runs = [r for r in list_runs(root) if run_id is None or r.run_id == run_id]
        if run_id is not None and not runs:
            LiveEnvironment.attach(root, run_id)  # raises the UsageError naming the known runs
        docs: list[dict[str, Any]] = []
        healthy = True
        for info in runs:
            if info.state is None:
                docs.append({"run_id": info.run_id, "folder": str(info.folder), "state": None, "healthy": False, "stale": info.stale, "components": []})
                healthy = False
                if not as_json:
                    _say(f"run {info.run_id}: {info.stale}")
                continue
            st = LiveEnvironment.attach(root, info.run_id).status()
            healthy = healthy and st.healthy
            docs.append({**st.as_dict(), "stale": info.stale})
            if not as_json:
                _print_status(st)
                if info.stale:
                    _say(f"  stale: {info.stale} (the next preflight removes it)")
        if as_json:
            _emit({"root": str(root), "runs": docs})
        elif not runs:
            _say(f"no live runs under {root}")
        return 0 if healthy else 1

    code = _run(body)
    if code:
        raise typer.Exit(code)


@live_app.command("down")
def down(
    run_id: Annotated[str | None, typer.Argument(help="A run id (default: the only run).")] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Stop every run under the live root.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Stop a run by its pidfiles and remove its folder; list anything left (exit 1 when something is)."""

    def body() -> int:
        from rootproof.live.runs import list_runs, run_folder, stop_run

        if run_id is not None and all_runs:
            raise UsageError("give a RUN_ID or --all, not both")
        root = _root()
        ids = [r.run_id for r in list_runs(root)]
        if run_id is not None:
            run_folder(root, run_id)  # an unknown run id is an error before anything is printed
            chosen = [run_id]
        elif all_runs or len(ids) <= 1:
            chosen = ids
        else:
            raise UsageError(f"{len(ids)} live runs under {root}: name one ({', '.join(ids)}) or give --all")
        reports = []
        for rid in chosen:
            _progress(f"stopping run {rid}")
            report = stop_run(root, rid)
            for name, outcome in report.stopped.items():
                _progress(f"  {name}: {outcome.replace('_', ' ')}")
            reports.append(report)
        residue = [f"{r.run_id}: {item}" for r in reports for item in r.residue]
        if as_json:
            _emit({"root": str(root), "runs": [r.as_dict() for r in reports], "residue": residue})
        else:
            if not reports:
                _say(f"no live runs under {root}")
            for r in reports:
                _say(f"run {r.run_id}: stopped {len(r.stopped)} process(es), folder {'removed' if r.folder_removed else 'KEPT'}")
            for item in residue:
                _say(f"  residue: {item}")
        return 1 if residue else 0

    code = _run(body)
    if code:
        raise typer.Exit(code)
