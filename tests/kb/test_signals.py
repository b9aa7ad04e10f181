"""`rootproof.kb.signals.ref_matches`: one signal against one ref, blind to untrusted spans."""

from __future__ import annotations

from typing import Any

import pytest

from rootproof.kb.cards import Signal
from rootproof.kb.signals import ref_matches


def _sig(**kw: Any) -> Signal:
    return Signal.model_validate(kw)


LOG = "2026-03-02T10:00:01Z ERROR checkout redis.exceptions.ConnectionError: max number of clients reached"
ACCESS = (
    '2026-03-02T10:00:01Z INFO nginx 10.0.0.9 - - "GET /search?q=max+number+of+clients+reached HTTP/1.1" 200 '
    '512 "-" "max number of clients reached"'
)


def _spans_of(text: str, *needles: str) -> list[tuple[int, int]]:
    out = []
    for n in needles:
        i = text.index(n)
        out.append((i, i + len(n)))
    return out


def test_match_and_any_test_the_folded_text() -> None:
    sig = _sig(tool="query_logs", any=["MAX NUMBER OF CLIENTS REACHED"])
    assert ref_matches(sig, "query_logs", None, "$.entries[0]", LOG)
    assert not ref_matches(sig, "query_logs", None, "$.entries[0]", "all fine")
    both = _sig(tool="query_logs", match=["redis", "clients reached"])
    assert ref_matches(both, "query_logs", None, "$.entries[0]", LOG)
    assert not ref_matches(both, "query_logs", None, "$.entries[0]", "clients reached")


def test_a_signal_seen_only_inside_untrusted_spans_is_no_match() -> None:
    sig = _sig(tool="query_logs", any=["max number of clients reached"])
    ua = '"max number of clients reached"'
    target = "/search?q=max+number+of+clients+reached HTTP/1.1"
    spans = _spans_of(ACCESS, ua, target)
    assert ref_matches(sig, "query_logs", None, "$.entries[0]", ACCESS)
    assert not ref_matches(sig, "query_logs", None, "$.entries[0]", ACCESS, spans)
    # The same words outside the spans still count.
    text = ACCESS + " upstream said: max number of clients reached"
    assert ref_matches(sig, "query_logs", None, "$.entries[0]", text, spans)


def test_spans_may_come_as_json_lists_and_reach_past_the_text() -> None:
    sig = _sig(tool="query_logs", any=["clients reached"])
    assert not ref_matches(sig, "query_logs", None, "$.entries[0]", LOG, [[0, 10_000]])
    assert ref_matches(sig, "query_logs", None, "$.entries[0]", LOG, [[0, 5], [5, 5]])


def test_the_ref_must_come_from_the_signals_tool_and_kind() -> None:
    sig = _sig(tool="inspect_redis", kind="log", any=["max number of clients reached"])
    assert ref_matches(sig, "inspect_redis", "log", "$.lines[0]", LOG)
    assert not ref_matches(sig, "query_logs", None, "$.entries[0]", LOG)
    assert not ref_matches(sig, "inspect_redis", "slowlog", "$.lines[0]", LOG)
    assert not ref_matches(sig, "inspect_redis", "log", "$.no_evidence", LOG)


def test_where_tests_one_row_and_ignores_values_an_outsider_wrote() -> None:
    sig = _sig(tool="inspect_postgres", kind="activity", where={"wait_event_type": "Lock", "state": "active"})
    row = '{"pid": 41, "state": "active", "wait_event_type": "Lock", "query": "UPDATE t SET x = 1"}'
    assert ref_matches(sig, "inspect_postgres", "activity", "$.rows[0]", row)
    assert not ref_matches(sig, "inspect_postgres", "activity", "$.summary", row)
    assert not ref_matches(sig, "inspect_postgres", "activity", "$.rows[0]", row.replace('"Lock"', '"IO"'))
    planted = '{"pid": 41, "state": "active", "wait_event_type": "Lock"}'
    assert not ref_matches(
        sig, "inspect_postgres", "activity", "$.rows[0]", planted, _spans_of(planted, "Lock")
    )
    numeric = _sig(tool="inspect_postgres", kind="activity", where={"wait_seconds": ">= 30"})
    assert ref_matches(numeric, "inspect_postgres", "activity", "$.rows[0]", '{"wait_seconds": "00:01:00"}')
    assert not ref_matches(numeric, "inspect_postgres", "activity", "$.rows[0]", '{"wait_seconds": 5}')


def test_redis_client_rows_are_key_value_lines() -> None:
    sig = _sig(tool="inspect_redis", kind="clients", where={"idle": ">= 600"})
    assert ref_matches(
        sig, "inspect_redis", "clients", "$.rows[3]", "id=7 addr=10.0.0.4:5000 idle=900 cmd=get"
    )
    assert not ref_matches(
        sig, "inspect_redis", "clients", "$.rows[3]", "id=7 addr=10.0.0.4:5000 idle=9 cmd=get"
    )


@pytest.mark.parametrize(
    ("op", "value", "text", "expected"),
    [
        ("ge", 100, "connected_clients:10000", True),
        ("ge", 100, "connected_clients:10", False),
        ("eq", "noeviction", "connected_clients:NoEviction", True),
        ("contains", "evict", "connected_clients:allkeys-evict", True),
    ],
)
def test_field_compares_the_named_field(op: str, value: Any, text: str, expected: bool) -> None:
    sig = _sig(tool="inspect_redis", kind="info", field="connected_clients", op=op, value=value)
    assert ref_matches(sig, "inspect_redis", "info", "$.fields.connected_clients", text) is expected


def test_metric_series_trends() -> None:
    text = 'jvm_gc_pause_seconds_max{service="pay"} first=0.1 last=4.2 min=0.1 max=4.5 delta=4.1 mean=2.0'
    rises = _sig(tool="query_metrics", metric="jvm_gc_pause*", trend="rises", threshold=1)
    assert ref_matches(rises, "query_metrics", None, "$.series[0]", text)
    assert not ref_matches(
        _sig(tool="query_metrics", metric="jvm_gc_pause*", trend="falls"),
        "query_metrics",
        None,
        "$.series[0]",
        text,
    )
    assert ref_matches(
        _sig(tool="query_metrics", metric="jvm_*", trend="high", threshold=4.5),
        "query_metrics",
        None,
        "$.series[0]",
        text,
    )
    assert not ref_matches(
        _sig(tool="query_metrics", metric="jvm_*", trend="low", threshold=0.05),
        "query_metrics",
        None,
        "$.series[0]",
        text,
    )
    labelled = _sig(tool="query_metrics", metric="jvm_*", trend="rises", labels={"service": "other"})
    assert not ref_matches(labelled, "query_metrics", None, "$.series[0]", text)
    assert not ref_matches(rises, "query_metrics", None, "$.series[0]", text, [(0, 10)])


def test_signals_default_to_not_discriminating() -> None:
    assert _sig(tool="query_logs", any=["x"]).discriminating is False
    assert _sig(tool="query_logs", any=["x"], discriminating=True).discriminating is True


def test_a_span_never_joins_the_words_on_either_side_into_a_match() -> None:
    sig = _sig(tool="query_logs", any=["max number of clients reached"])
    text = 'WARN app max number of "GET /x" clients reached'
    assert not ref_matches(sig, "query_logs", None, "$.entries[0]", text, _spans_of(text, '"GET /x"'))
