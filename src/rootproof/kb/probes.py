"""Probe questions for measuring a channel's chance level on a pool.

The probes are the out-of-domain queries of the calibration split of the built-in labelled
queries (`eval_queries.yaml`): everyday questions (a recipe, a mountain, a sports final, a
poem, a planet) that no knowledge card answers and no technical collection is about. What a
channel gives them is what it gives a question with no answer in the pool; see
`channels.measured_chance`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from rootproof.errors import ConfigError

__all__ = ["calibration_probes", "probe_file"]


def probe_file() -> Path:
    """The built-in labelled queries (the calibration split's ood queries are the probes)."""
    return Path(__file__).resolve().parent / "eval_queries.yaml"


def calibration_probes(path: Path | None = None) -> tuple[str, ...]:
    """Texts of the queries with `kind: ood` and `split: calibration` in `path` (default: the
    built-in file, read once)."""
    return _read(path) if path is not None else _builtin()


@lru_cache(maxsize=1)
def _builtin() -> tuple[str, ...]:
    return _read(probe_file())


def _read(source: Path) -> tuple[str, ...]:
    try:
        raw = yaml.safe_load(source.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{source}: expected the labelled query file ({exc})") from None
    queries = raw.get("queries") if isinstance(raw, dict) else None
    if not isinstance(queries, list):
        raise ConfigError(f"{source}: field queries: expected a list")
    return tuple(
        str(q["query"])
        for q in queries
        if isinstance(q, dict)
        and q.get("kind") == "ood"
        and q.get("split") == "calibration"
        and q.get("query")
    )
