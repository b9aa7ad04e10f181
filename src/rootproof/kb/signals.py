"""Whether one evidence ref matches one card signal: the single test the offline planner and the
EvidenceGuard share (docs/knowledge-cards.md, "Signals").

`ref_matches(signal, tool, kind, raw_path, text, spans)` takes a ref as a model observation shows
it. The parts of the text an outsider controls (`spans`, half-open character offsets into
`text`: a request's URL, user agent, quoted body …) are blanked before testing, so a signal
whose only occurrence lies inside them is no match.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rootproof.kb.cards import Signal
from rootproof.tools.refs import fold_text

__all__ = ["ENDS_SHARE", "as_number", "compare", "norm", "ref_matches", "row_of", "trend_holds", "where_holds"]

Spans = Iterable[Sequence[int]]
"""Half-open `[start, end)` character offsets into a ref's text."""


def norm(text: str) -> str:
    """Folded text (`fold_text`) with runs of whitespace made one space: what signals compare.
    Texts up to `NORM_CACHED_CHARS` are remembered (every signal of every card tests the same
    refs and spellings)."""
    return _norm_cached(text) if len(text) <= NORM_CACHED_CHARS else _norm(text)


NORM_CACHED_CHARS = 8192


def _norm(text: str) -> str:
    return " ".join(fold_text(text).split())


_norm_cached = functools.lru_cache(maxsize=8192)(_norm)


def _blank(text: str, spans: Spans) -> str:
    """`text` with every span replaced by NUL characters (same length): like
    `rootproof.boundary.provenance.outside_spans`, but a span is a barrier rather than a space, so
    words on either side of it never join into a match."""
    out = text
    for span in spans:
        start, end = max(0, int(span[0])), min(len(text), int(span[1]))
        if start < end:
            out = out[:start] + "\x00" * (end - start) + out[end:]
    return out


_DURATION = re.compile(r"^(?:(\d+) days? )?(\d+):(\d{2}):(\d{2}(?:\.\d+)?)$")


def as_number(v: Any) -> float | None:
    """A number, a percentage, or a duration (`00:24:32.118`, `1 day 02:00:00`) in seconds."""
    text = str(v).strip()
    try:
        return float(text.rstrip("%"))
    except ValueError:
        pass
    m = _DURATION.match(text)
    if m:
        days = int(m.group(1) or 0)
        return days * 86400 + int(m.group(2)) * 3600 + int(m.group(3)) * 60 + float(m.group(4))
    return None


def compare(actual: Any, op: str, expected: Any) -> bool:
    """`actual OP expected`: numbers (and durations) numerically, else folded text."""
    a, e = as_number(actual), as_number(expected)
    if op == "contains":
        return norm(str(expected)) in norm(str(actual))
    if op in ("eq", "ne"):
        same = (a == e) if a is not None and e is not None else norm(str(actual)) == norm(str(expected))
        return same if op == "eq" else not same
    if a is None or e is None:
        return False
    return {"gt": a > e, "ge": a >= e, "lt": a < e, "le": a <= e}[op]


_WHERE_OPS = ((">=", "ge"), ("<=", "le"), ("!=", "ne"), (">", "gt"), ("<", "lt"))


def _share(have: Any, key: str, table: Sequence[Mapping[str, Any]] | None) -> float | None:
    """`have` as a percentage of the column `key` summed over the rows of its table."""
    a = as_number(have)
    if a is None or not table:
        return None
    total = sum(v for r in table if (v := as_number(r.get(key, ""))) is not None)
    return None if total <= 0 else 100.0 * a / total


_PATH_PART = re.compile(r"\.?([^.\[\]]+)|\[(\d+)\]")


def _lookup(row: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    """(found, value) of `key` in a row: a column, or a path into a nested value
    (`wait_events[0].name`: the name of the first wait event listed)."""
    if key in row:
        return True, row[key]
    cur: Any = row
    pos = 0
    for m in _PATH_PART.finditer(key):
        if m.start() != pos:
            return False, None
        pos = m.end()
        name, index = m.group(1), m.group(2)
        if name is not None and isinstance(cur, Mapping) and name in cur:
            cur = cur[name]
        elif index is not None and isinstance(cur, list) and int(index) < len(cur):
            cur = cur[int(index)]
        else:
            return False, None
    return (pos == len(key) and pos > 0), cur


def where_holds(row: Mapping[str, Any], cond: Mapping[str, Any], table: Sequence[Mapping[str, Any]] | None = None) -> bool:
    """Whether a table row satisfies every condition of a `where` test. A comparison whose value
    ends in `%` compares the row's share of its column's total over `table` (the rows of the same
    result); without the table it does not hold. `~text` holds when the value contains the text.
    A key may be a path into a nested value (`wait_events[0].name`)."""
    for key, want in cond.items():
        found, have = _lookup(row, key)
        if not found:
            return False
        if isinstance(want, list):
            if not any(compare(have, "eq", w) for w in want):
                return False
            continue
        if isinstance(want, str):
            w = want.strip()
            if w == "nonempty":
                if not have:
                    return False
                continue
            if w.startswith("~"):
                shown = have if isinstance(have, str) else json.dumps(have, ensure_ascii=False)
                if norm(w[1:]) not in norm(shown):
                    return False
                continue
            for op, name in _WHERE_OPS:
                if w.startswith(op):
                    rhs = w[len(op) :].strip()
                    if rhs.endswith("%") and as_number(rhs) is not None:
                        share = _share(have, key, table)
                        if share is None or not compare(share, name, rhs[:-1]):
                            return False
                    elif not compare(have, name, rhs):
                        return False
                    break
            else:
                if not compare(have, "eq", w):
                    return False
            continue
        if not compare(have, "eq", want):
            return False
    return True


def row_of(tool: str, text: str) -> dict[str, Any] | None:
    """The table row a ref's text shows: a JSON object, or Redis's `key=value` client line."""
    if text.startswith("{"):
        try:
            row = json.loads(text)
            return row if isinstance(row, dict) else None
        except json.JSONDecodeError:
            return None
    if tool == "inspect_redis":
        return dict(p.split("=", 1) for p in text.split() if "=" in p)
    return None


def _row_outside(tool: str, text: str, blanked: str, has_spans: bool) -> dict[str, Any] | None:
    """The row, without the string values an outsider wrote (those occurring only inside spans)."""
    row = row_of(tool, text)
    if row is None or not has_spans:
        return row
    kept: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, str) and value.strip() and value not in blanked:
            continue
        kept[key] = value
    return kept


_SERIES = re.compile(
    r"^(?P<metric>[^\s{]+)(?P<labels>\{[^}]*\})? first=(?P<first>\S+) last=(?P<last>\S+) "
    r"min=(?P<min>\S+) max=(?P<max>\S+) delta=(?P<delta>\S+) mean=(?P<mean>\S+)"
)


def _field_value(path: str, text: str) -> tuple[str, str] | None:
    name = path.rsplit(".", 1)[-1].strip("[]'")
    for sep in (" = ", ":", ": "):
        if text.startswith(name + sep):
            return name, text[len(name) + len(sep) :].strip()
    return None


def ref_matches(
    signal: Signal,
    tool: str,
    kind: str | None,
    raw_path: str,
    text: str,
    spans: Spans = (),
    table: Sequence[Mapping[str, Any]] | None = None,
) -> bool:
    """Whether the ref (`tool`/`kind` of the call that returned it, its `raw_path` and `text`)
    passes `signal`'s test, looking only outside the untrusted `spans` of `text`.

    The ref must come from the signal's tool (and kind, when the signal names one). `match`/`any`
    test the folded text; `where` one table row (string values that occur only inside spans are
    dropped; `table`, the rows of the same result, lets a condition compare a row's share of
    its column); `field` an `info`/`config`/`settings`/`status` field; `metric` a series
    summary. `$.no_evidence` is never a match.
    """
    if tool != signal.tool or raw_path == "$.no_evidence":
        return False
    if signal.kind is not None and kind != signal.kind:
        return False
    span_list = [(int(s[0]), int(s[1])) for s in spans]
    visible = _blank(text, span_list) if span_list else text
    test = signal.test
    if test == "match":
        nt = norm(visible)
        return all(any(norm(a) in nt for a in signal.spellings(s)) for s in signal.match or [])
    if test == "any":
        nt = norm(visible)
        return any(norm(a) in nt for s in signal.any_ or [] for a in signal.spellings(s))
    if test == "where":
        if not raw_path.startswith("$.rows["):
            return False
        row = _row_outside(tool, text, visible, bool(span_list))
        return row is not None and where_holds(row, dict(signal.where or {}), table)
    if test == "field":
        fv = _field_value(raw_path, visible)
        return (
            fv is not None
            and norm(fv[0]) == norm(signal.field or "")
            and signal.op is not None
            and compare(fv[1], signal.op, signal.value)
        )
    m = _SERIES.match(visible)
    if not m:
        return False
    name = norm(m.group("metric"))
    thresholds = [t for glob, t in signal.metric_names() if fnmatch.fnmatch(name, norm(glob))]
    if not thresholds:
        return False
    if signal.labels:
        labels = m.group("labels") or ""
        if not all(f'{k}="{v}"' in labels for k, v in signal.labels.items()):
            return False
    val = {k: as_number(m.group(k)) for k in ("first", "last", "delta", "max", "min")}
    # The first name that matches decides the threshold: the canonical glob, then the aliases in order.
    return trend_holds(signal.trend or "high", thresholds[0] or 0.0, val)


ENDS_SHARE = 0.25
"""`ends_high`/`ends_low`: the last value lies within this share of the range from its top/bottom."""


def trend_holds(trend: str, thr: float, val: Mapping[str, float | None]) -> bool:
    """Whether a series summary ({first, last, delta, max, min}) shows `trend` with threshold `thr`."""
    delta, hi, lo, last = val.get("delta"), val.get("max"), val.get("min"), val.get("last")
    if trend == "rises":
        return delta is not None and delta > thr
    if trend == "falls":
        return delta is not None and delta < -thr
    if trend == "high":
        return hi is not None and hi >= thr
    if trend == "low":
        return lo is not None and lo <= thr
    if trend == "stays_below":
        return hi is not None and hi < thr
    if trend == "stays_above":
        return lo is not None and lo > thr
    if hi is None or lo is None:
        return False
    span = hi - lo
    if trend == "flat":
        return span <= thr
    if last is None or span <= thr:
        return False
    if trend == "ends_high":
        return hi - last <= ENDS_SHARE * span
    return last - lo <= ENDS_SHARE * span
