"""Tokenisation for the keyword channel and the identifier index.

English (and any Latin-script text): NFKC, lower case, `[a-z0-9]+` words (an identifier joined
by `_` also yields the whole identifier), English stopwords removed, Snowball English stemming
(PyStemmer). CJK runs are segmented with jieba (its logger quieted), Chinese stopwords removed.
The same function tokenises documents and queries, so the keyword channel is symmetric.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from functools import lru_cache
from typing import Any

import Stemmer

__all__ = ["TOKENIZER_VERSION", "contains_identifier", "normalize", "tokenize"]

TOKENIZER_VERSION = "tok-2"
"""Bumped whenever tokenisation changes (part of the index cache key)."""

# A standard English function-word list (closed-class words: articles, pronouns, auxiliaries,
# prepositions, conjunctions, question words). Content words are never stopped.
_EN_STOP = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing done down during each either else
    ever every few for from further get gets got had has have having he her here hers herself
    him himself his how i if in into is it its itself just may me might more most must my
    myself neither no nor not now of off on once only or other ought our ours ourselves out
    over own same shall she should so some such than that the their theirs them themselves
    then there these they this those through to too under until up upon us very was we were
    what when where which while who whom whose why will with within without would yet you
    your yours yourself yourselves also per via s t d ll m o re ve y let lets
    """.split()
)
_ZH_STOP = frozenset(
    """
    的 了 是 在 和 与 及 或 也 都 就 还 又 而 但 呢 吗 吧 啊 呀 哦 嘛 么 什么 怎么 怎样 如何 为什么
    哪 哪些 哪个 这 那 这个 那个 这些 那些 我 我们 你 你们 他 她 它 他们 有 没有 会 能 可以 要 一个
    一下 一些 个 把 被 让 给 对 从 到 向 为 以 于 之 其 该 时 时候 后 前 中 上 下 里 请问 请 吧
    """.split()
)

_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_SPLIT = re.compile(rf"([{_CJK}]+)|([a-z0-9]+(?:_[a-z0-9]+)*)")
_STEMMER_LOCK = threading.Lock()
_stemmer: Any = None
_jieba_lock = threading.Lock()
_jieba: Any = None


def normalize(text: str) -> str:
    """NFKC + lower case: the form every comparison in the knowledge base uses."""
    return unicodedata.normalize("NFKC", text).lower()


def _stem(word: str) -> str:
    global _stemmer
    with _STEMMER_LOCK:
        if _stemmer is None:
            _stemmer = Stemmer.Stemmer("english")
        return str(_stemmer.stemWord(word))


@lru_cache(maxsize=200_000)
def _en_token(word: str) -> str | None:
    if word in _EN_STOP:
        return None
    return _stem(word)


def _segment(run: str) -> list[str]:
    global _jieba
    with _jieba_lock:
        if _jieba is None:
            import jieba

            jieba.setLogLevel(logging.WARNING)
            logging.getLogger("jieba").setLevel(logging.WARNING)
            _jieba = jieba
        return [w for w in _jieba.lcut(run, HMM=True) if w.strip()]


def tokenize(text: str) -> list[str]:
    """Tokens of `text` for BM25: stemmed English words, segmented CJK words, stopwords removed."""
    out: list[str] = []
    for m in _SPLIT.finditer(normalize(text)):
        cjk, word = m.group(1), m.group(2)
        if cjk:
            out.extend(w for w in _segment(cjk) if w not in _ZH_STOP)
            continue
        if "_" in word:
            out.append(word)  # the whole identifier (pg_locks_waiting) and its parts
            parts = word.split("_")
        else:
            parts = [word]
        for part in parts:
            tok = _en_token(part)
            if tok:
                out.append(tok)
    return out


def contains_identifier(normalized_query: str, normalized_identifier: str) -> bool:
    """True if the identifier occurs in the query, not glued to letters or digits on either side.

    Both arguments are already `normalize`d. The boundary check keeps `OOM` from matching
    inside `bedroom`; CJK identifiers match as plain substrings (CJK has no word spaces).
    """
    start = normalized_query.find(normalized_identifier)
    n = len(normalized_identifier)
    while start >= 0:
        before = normalized_query[start - 1] if start > 0 else " "
        after = normalized_query[start + n] if start + n < len(normalized_query) else " "
        first, last = normalized_identifier[0], normalized_identifier[-1]
        ok_before = not (_is_ascii_word(first) and _is_ascii_word(before))
        ok_after = not (_is_ascii_word(last) and _is_ascii_word(after))
        if ok_before and ok_after:
            return True
        start = normalized_query.find(normalized_identifier, start + 1)
    return False


def _is_ascii_word(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch == "_")
