"""`rootproof eval …` commands, mounted by the CLI (`register`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]


def register(eval_app: typer.Typer) -> None:
    """Add the evaluation commands to `eval_app`."""

    @eval_app.command("guard")
    def guard(
        json_path: Annotated[Path | None, typer.Option("--json", help="Write the JSON summary to FILE (else stdout).", metavar="FILE")] = None,
        seed: Annotated[int, typer.Option(help="Seed for draft generation and mutations.")] = 0,
    ) -> None:
        """Mutate valid drafts from real runs and count what the guards catch (exit 1 if a target is missed)."""
        from rootproof.eval.guard import guard_command

        summary = guard_command(json_path, seed=seed)
        if not summary["targets"]["met"]:
            raise typer.Exit(1)
