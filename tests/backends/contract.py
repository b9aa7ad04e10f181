"""The backend contract: the same assertions for the snapshot backend and every live backend.

`check_result(case, tool, args, out)` holds for any call any backend answers:
- the canonical result is plain JSON, of the documented shape for the tool and kind
  (`tools.results`), and nothing else;
- every citable path's text recomputes (`tools.refs.ref_text`), and `$.no_evidence` is there
  exactly when nothing is citable;
- data sources are the backend's (`snapshot`/`mock`, or `live:<target>`);
- paged kinds return at most `limit` items, `total_matches` at least as many, every item of a
  non-empty query contains one of its terms, ordered by distinct terms matched;
- windows end at the run's clock and start `since` before it.
A case module (`cases_*.py`) gives a backend and the calls it must answer.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from rootproof.backends.query import fold, parse_query
from rootproof.scenarios.types import format_timestamp
from rootproof.tools.base import TOOLS, BackendResult, ToolBackend, window_start
from rootproof.tools.refs import NO_EVIDENCE_PATH, canonical_json, enumerate_ref_paths, ref_text
from rootproof.tools.results import ROW_KINDS, Window, result_type

__all__ = ["ContractCase", "check_result", "run_case"]


@dataclass(kw_only=True)
class ContractCase:
    """A backend and the calls it must answer (each with at least one citable item unless `empty`)."""

    name: str
    backend: ToolBackend
    calls: list[tuple[str, dict[str, Any]]]
    """`(tool, arguments)`; arguments as a model would send them."""
    data_sources: frozenset[str]
    """The data sources its refs may carry."""
    now: Callable[[], datetime]
    """The run's clock (a scenario's `now`, the wall clock live)."""
    empty_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """Calls that must find nothing (`$.no_evidence` only)."""


def _keys_of(shape: type) -> set[str]:
    names = {f.name for f in dataclasses.fields(shape)}
    return {n.rstrip("_") for n in names}


def _items(tool: str, data: dict[str, Any]) -> list[Any] | None:
    for key in ("entries", "lines", "rows"):
        if isinstance(data.get(key), list):
            return list(data[key])
    return None


def _item_text(tool: str, data: dict[str, Any], i: int) -> str:
    key = next(k for k in ("entries", "lines", "rows") if isinstance(data.get(k), list))
    return ref_text(tool, data, f"$.{key}[{i}]")


def check_result(case: ContractCase, tool: str, raw_args: dict[str, Any], out: BackendResult, *, now: datetime) -> list[str]:
    """Every contract assertion for one answered call; returns the citable paths."""
    args: BaseModel = TOOLS[tool].args_model.model_validate(raw_args)
    data = out.json()
    text = canonical_json(data)  # plain JSON: no datetimes, decimals, bytes
    assert json.loads(text) == data, f"{case.name} {tool}: result is not plain JSON"
    kind = getattr(args, "kind", None)
    shape = result_type(tool, kind)
    allowed = _keys_of(shape)
    assert set(data) <= allowed, f"{case.name} {tool} {kind}: keys {sorted(set(data) - allowed)} are not in {shape.__name__}"
    required = {f.name.rstrip("_") for f in dataclasses.fields(shape) if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    assert required <= set(data), f"{case.name} {tool} {kind}: missing {sorted(required - set(data))}"
    paths = enumerate_ref_paths(data)
    for path in paths:
        t = ref_text(tool, data, path)
        assert isinstance(t, str) and t.strip(), f"{case.name} {tool}: {path} has an empty text"
    assert ("no_evidence" in data) == (not paths), f"{case.name} {tool}: no_evidence must be there exactly when nothing is citable"
    if "no_evidence" in data:
        assert ref_text(tool, data, NO_EVIDENCE_PATH).strip()
    assert out.data_source in case.data_sources, f"{case.name} {tool}: data_source {out.data_source!r} not in {sorted(case.data_sources)}"
    for path, source in out.ref_sources.items():
        assert path in paths and source in case.data_sources | {"mock"}, f"{case.name} {tool}: ref source {path}={source}"
    if "window" in data:
        window = data["window"]
        assert set(window) == {"from", "to"}
        assert window["to"] == format_timestamp(now), f"{case.name} {tool}: window ends {window['to']}, not at the run's clock {format_timestamp(now)}"
        assert window["from"] == format_timestamp(window_start(now, str(getattr(args, "since", "30m"))))
    items = _items(tool, data)
    if items is not None and hasattr(args, "limit"):
        assert len(items) <= args.limit, f"{case.name} {tool}: {len(items)} items > limit {args.limit}"
        if "total_matches" in data:
            assert data["total_matches"] >= len(items) + (args.offset if items else 0) or not items
        query = parse_query(str(getattr(args, "query", "")))
        if not query.empty and tool != "inspect_nginx" or (tool == "inspect_nginx" and kind in ("error_log", "access_log") and not query.empty):
            scores = [query.score_folded(fold(_item_text(tool, data, i))) for i in range(len(items))]
            if kind not in ROW_KINDS.get(tool, ()):  # rows keep their order; other items are ordered by terms
                assert all(s > 0 for s in scores), f"{case.name} {tool}: an item matches none of {query.terms}"
                assert scores == sorted(scores, reverse=True), f"{case.name} {tool}: not ordered by terms matched"
    return paths


def run_case(case: ContractCase) -> Iterator[tuple[str, dict[str, Any], list[str]]]:
    """Run every call of a case through the contract; yields `(tool, args, paths)`."""
    for tool, raw in case.calls:
        now = case.now()
        args = TOOLS[tool].args_model.model_validate(raw)
        out = case.backend.call(tool, args, now=now, run_id="contract")
        paths = check_result(case, tool, raw, out, now=now)
        assert paths, f"{case.name} {tool} {raw}: found nothing citable (the case expects evidence)"
        yield tool, raw, paths
    for tool, raw in case.empty_calls:
        now = case.now()
        args = TOOLS[tool].args_model.model_validate(raw)
        out = case.backend.call(tool, args, now=now, run_id="contract")
        paths = check_result(case, tool, raw, out, now=now)
        assert not paths, f"{case.name} {tool} {raw}: expected nothing citable, got {paths[:3]}"


_ = Window  # the result shapes are the contract's vocabulary
