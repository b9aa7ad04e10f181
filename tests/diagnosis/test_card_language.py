"""An answer quotes knowledge cards in its own language only (issue 30, point 6): an English
answer once quoted a Chinese triage card as its "Knowledge card" claim."""

from __future__ import annotations

import re

from rootproof.harness import memory_harness
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings

_CARD = re.compile(r"^\[([a-z0-9][a-z0-9-]*)\]")


def _quoted_cards(question: str | None) -> tuple[str, set[str]]:
    h = memory_harness(load_settings())
    sc = load_scenario("live-pg-row-lock")
    out = h.diagnose(question or sc.question, scenario=sc)
    assert out.release_outcome == "PUBLISHED" and out.draft is not None, out.content
    seen = set()
    for claim in out.draft.claims:
        for c in claim.citations:
            if c.tool_name == "lookup_knowledge":
                m = _CARD.match(c.excerpt)
                assert m, c.excerpt
                seen.add(m.group(1))
    languages = {h.cards()[card].language for card in seen}
    return out.language, languages


def test_an_english_answer_quotes_no_chinese_card() -> None:
    # The scenario's own question: its lookups find a Chinese payment-timeout triage card first.
    lang, languages = _quoted_cards(None)
    assert lang == "en" and languages <= {"en"}, languages


def test_a_chinese_answer_may_quote_a_chinese_card() -> None:
    lang, languages = _quoted_cards("部分订单卡住然后失败，是什么原因？")
    assert lang == "zh" and languages == {"zh"}, languages
