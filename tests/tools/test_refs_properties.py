"""Property tests: JSON paths round-trip, and scope keys ignore what the scope does not depend on."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import example, given
from hypothesis import strategies as st

from rootproof.boundary.boundary import scope_key
from rootproof.tools.base import QueryLogsArgs
from rootproof.tools.refs import enumerate_ref_paths, key_segment, parse_path, ref_text, resolve_path

NOW = datetime(2026, 7, 22, 17, 41, tzinfo=UTC)
keys = st.text(min_size=1, max_size=12).filter(lambda k: k.strip() != "")
scalars = st.one_of(st.integers(-10**6, 10**6), st.text(max_size=20), st.booleans(), st.floats(allow_nan=False, allow_infinity=False))


@given(st.dictionaries(keys, scalars, min_size=1, max_size=6), st.lists(st.dictionaries(keys, scalars, max_size=4), max_size=5))
def test_every_enumerated_path_resolves_and_renders(settings: dict[str, object], rows: list[dict[str, object]]) -> None:
    result = {"kind": "settings", "settings": settings, "rows": rows}
    for path in enumerate_ref_paths(result):
        assert parse_path(path) is not None
        resolve_path(result, path)  # raises KeyError if not
        ref_text("inspect_postgres", result, path)


@given(keys)
@example("\\")
@example("it's a \\'key'")
def test_key_segments_parse_back(key: str) -> None:
    segs = parse_path("$" + key_segment(key))
    assert segs == [key]


words = st.lists(st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,8}", fullmatch=True), min_size=1, max_size=5)


@given(words, st.integers(1, 200), st.integers(0, 100), st.randoms())
def test_scope_key_ignores_order_case_limit_offset(terms: list[str], limit: int, offset: int, rnd: object) -> None:
    shuffled = list(terms)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    a = QueryLogsArgs(query=" ".join(terms))
    b = QueryLogsArgs(query="  ".join(t.upper() for t in shuffled), limit=limit, offset=offset)
    assert scope_key("query_logs", a, NOW) == scope_key("query_logs", b, NOW)
    c = QueryLogsArgs(query=" ".join(terms), since="2h")
    assert scope_key("query_logs", a, NOW) != scope_key("query_logs", c, NOW)
