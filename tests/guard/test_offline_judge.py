"""The offline judge on single claims: quoted phrases, and near-copies of JSON rows."""

from __future__ import annotations

import pytest

from rootproof.agent.draft import Claim
from rootproof.guard.semantic import OfflineCode, OfflineJudge

ROW = '{"application_name":"order-service","client_addr":"10.20.3.14","pid":5301,"query":"UPDATE merchant_balances SET pending_cents = pending_cents + $1 WHERE'
LOG = "2026-09-14T10:22:40.002Z ERROR report-worker [report-worker.log] export job 8812 failed: OSError: [Errno 28] No space left on device"


def _judge(text: str, premise: str) -> tuple[str, str | None]:
    v = OfflineJudge().judge(Claim(id="c1", text=text, kind="finding"), [premise], {"mechanisms": {"disk_full"}, "vocabulary": set(), "tools": set()})
    return v.verdict, v.code


def test_a_quoted_phrase_from_the_excerpt_counts_as_verbatim() -> None:
    claim = 'report-worker logs "export job 8812 failed: OSError: [Errno 28] No space left on device"'
    assert _judge(claim, LOG) == ("SUPPORTED", None)


@pytest.mark.parametrize("swap", ["coredns", "billing-api", "payment-gateway"])
def test_a_json_row_copied_with_an_entity_swapped_is_unsupported(swap: str) -> None:
    claim = "Observed: " + ROW.replace("order-service", swap)
    verdict, code = _judge(claim, ROW)
    assert verdict == "UNSUPPORTED", code
    assert code in {OfflineCode.ALTERED_COPY, OfflineCode.IDENTIFIER_NOT_IN_EVIDENCE, OfflineCode.QUOTE_NOT_IN_EVIDENCE}


SERIES = 'node_filesystem_avail_bytes{device="/dev/nvme1n1",fstype="ext4",instance="pg-ledger-1",mountpoint="/var/lib/postgresql"} first=11596411699 last=0 min=0 max=11596411699 delta=-11596411699 mean=1985383269.39 unit=bytes window=2026-04-27T22:18:00.000Z..2026-04-27T22:48:00.000Z'


@pytest.mark.parametrize("swap", ["coredns", "billing-api"])
def test_a_metric_series_quoted_with_a_label_swapped_is_unsupported(swap: str) -> None:
    """The label quotes cut the quoted series into pieces; its unchanged tail is no licence for
    the swapped label value (found by `eval guard`: a swapped `instance` label was published)."""
    claim = "根因证据（disk 磁盘满）：“" + SERIES.replace("pg-ledger-1", swap) + "”"
    verdict, code = _judge(claim, SERIES)
    assert verdict == "UNSUPPORTED", code
    assert _judge("根因证据（disk 磁盘满）：“" + SERIES + "”", SERIES) == ("SUPPORTED", None)
