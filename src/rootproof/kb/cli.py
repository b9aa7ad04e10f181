"""`rootproof kb ...`: search the knowledge base and build its index cache."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape as markup_escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from rootproof.errors import ConfigError, UsageError
from rootproof.kb.index import KnowledgeBase
from rootproof.settings import load_settings
from rootproof.terminal import json_text_safe, terminal_safe

__all__ = ["kb_app", "load_kb", "run_cli"]

kb_app = typer.Typer(help="Knowledge base: search cards, build the index.", no_args_is_help=True)
_err = Console(stderr=True)
T = TypeVar("T")

CardsOpt = Annotated[
    Path | None, typer.Option("--cards", help="A folder of extra cards (default: ROOTPROOF_CARDS_DIR).")
]


def run_cli(fn: Callable[[], T]) -> T:
    """Run a command body: bad input exits 2, anything unexpected exits 1, each with one `Error:` line."""
    try:
        return fn()
    except (ConfigError, UsageError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    except typer.Exit:
        raise
    except OSError as exc:
        if exc.filename is None:
            print(f"Error: internal failure: {type(exc).__name__}: {exc}", file=sys.stderr)
            raise typer.Exit(1) from None
        # a file the user named (`--json FILE`)
        print(f"Error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
        print(f"Error: internal failure: {type(exc).__name__}: {exc}", file=sys.stderr)
        raise typer.Exit(1) from None


def _shown(text: str) -> str:
    """Card text for the terminal: control characters escaped, rich markup inert."""
    return markup_escape(terminal_safe(text))


@contextmanager
def _progress(label: str, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=_err,
        transient=True,
        disable=not enabled,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def load_kb(cards: Path | None, *, show_progress: bool = True) -> KnowledgeBase:
    """The knowledge base as the CLI sees it: built-in cards, `--cards` or ROOTPROOF_CARDS_DIR, cached index."""
    settings = load_settings()
    extra = [p for p in (cards or settings.cards_dir,) if p is not None]
    for p in extra:
        if not p.is_dir():
            raise ConfigError(f"--cards {p}: expected an existing folder of .md cards")
    with _progress("indexing cards", show_progress) as update:
        return KnowledgeBase.load(
            extra, cache_dir=settings.resolved_kb_index_dir(), progress=update, max_card_bytes=settings.max_card_bytes
        )


@kb_app.command("search")
def search_command(
    query: Annotated[str, typer.Argument(help="What to look up.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=10, help="Results (1-10).")] = 5,
    cards: CardsOpt = None,
) -> None:
    """Search the knowledge base as lookup_knowledge does (without run de-duplication)."""

    def body() -> None:
        if not query.strip():
            raise UsageError("QUERY: expected a non-empty query")
        kb = load_kb(cards, show_progress=not as_json)
        t0 = time.perf_counter()
        resp = kb.search(query, top_k)
        ms = (time.perf_counter() - t0) * 1000
        if as_json:
            doc: dict[str, Any] = {
                "query": query,
                "layer": resp.layer,
                "l0_match_count": resp.l0_match_count,
                "l1_match_count": resp.l1_match_count,
                "l0_hint_cards": resp.l0_hint_cards,
                "results": [asdict(h) for h in resp.hits],
                "evidence_status": "EVIDENCE_FOUND" if resp.hits else "NO_EVIDENCE",
                "search_ms": round(ms, 2),
            }
            print(json_text_safe(json.dumps(doc, ensure_ascii=False, indent=2)))
            return
        out = Console()
        if not resp.hits:
            out.print(f"NO_EVIDENCE: no card above the relevance floor for {_shown(repr(query))}")
        for i, h in enumerate(resp.hits, start=1):
            ranks = " ".join(f"{ch}={v['rank']}" for ch, v in h.channels.items())
            out.print(f"{i}. [bold]{_shown(h.card_id)}[/bold] {h.grade} ({_shown(h.chunk_id)}; {ranks})", highlight=False)
            out.print(f"   {_shown(h.title)}", highlight=False)
        _err.print(f"layer {resp.layer}, {resp.l1_match_count} above floor, {ms:.1f} ms")

    run_cli(body)


@kb_app.command("index")
def index_command(cards: CardsOpt = None) -> None:
    """Build (or reuse) the index cache of the cards."""

    def body() -> None:
        kb = load_kb(cards)
        state = "reused" if kb.cache_hit else "built"
        print(f"{len(kb.cards)} cards, {len(kb.chunks)} chunks: index {state} in {kb.load_seconds:.2f} s")

    run_cli(body)
