"""Public IR check on a TREC collection (`rootproof eval ir --collection DIR`).

Reads `doc-text.trec`, `query-text.trec` and `qrels` (Vaswani's quirks included: upper-case
document tags and lower-case query tags on their own lines, no `Number:` prefix), ranks 1000
documents per query with the keyword channel exactly as `lookup_knowledge` configures it
(`text.tokenize` + `KeywordIndex` defaults) and with the hybrid (keyword + dense, RRF k = 60),
and evaluates both with pytrec_eval.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pytrec_eval
import typer

from rootproof.errors import ConfigError
from rootproof.kb.channels import DenseIndex, KeywordIndex, encode, rrf_fuse, top_k
from rootproof.kb.text import tokenize

__all__ = ["MEASURES", "TrecCollection", "evaluate_run", "ir_command", "rank_collection", "read_collection"]

DEPTH = 1000
MEASURES = ("map", "ndcg", "ndcg_cut_10", "P_10", "recall_1000")

_DOC = re.compile(r"<DOC>(.*?)</DOC>", re.S | re.I)
_DOCNO = re.compile(r"<DOCNO>\s*(.*?)\s*</DOCNO>", re.S | re.I)
_TOP = re.compile(r"<top>(.*?)</top>", re.S | re.I)
_NUM = re.compile(r"<num>\s*(?:Number:)?\s*(\S+?)\s*(?:</num>|\n)", re.S | re.I)
_TITLE = re.compile(r"<title>\s*(.*?)\s*(?:</title>|<desc>|<narr>|$)", re.S | re.I)
_TAG = re.compile(r"<[^>]+>")


@dataclass(kw_only=True)
class TrecCollection:
    """Documents, queries and judgements of a TREC-format collection."""

    name: str
    docs: list[tuple[str, str]]
    queries: list[tuple[str, str]]
    qrels: dict[str, dict[str, int]]


def read_collection(folder: Path) -> TrecCollection:
    """Parse `doc-text.trec`, `query-text.trec` and `qrels` from `folder`."""
    paths = {n: folder / n for n in ("doc-text.trec", "query-text.trec", "qrels")}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise ConfigError(
            f"--collection {folder}: expected doc-text.trec, query-text.trec and qrels (missing {', '.join(missing)})"
        )
    docs: list[tuple[str, str]] = []
    for m in _DOC.finditer(paths["doc-text.trec"].read_text(encoding="utf-8", errors="replace")):
        inner = m.group(1)
        dn = _DOCNO.search(inner)
        if not dn:
            raise ConfigError(f"{paths['doc-text.trec']}: document {len(docs) + 1}: expected a <DOCNO>")
        docs.append((dn.group(1), _TAG.sub(" ", _DOCNO.sub(" ", inner)).strip()))
    queries: list[tuple[str, str]] = []
    for m in _TOP.finditer(paths["query-text.trec"].read_text(encoding="utf-8", errors="replace")):
        num, title = _NUM.search(m.group(1)), _TITLE.search(m.group(1))
        if not num or not title:
            raise ConfigError(
                f"{paths['query-text.trec']}: topic {len(queries) + 1}: expected <num> and <title>"
            )
        queries.append((num.group(1), _TAG.sub(" ", title.group(1)).strip()))
    qrels: dict[str, dict[str, int]] = {}
    for ln, line in enumerate(paths["qrels"].read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 4:
            raise ConfigError(f"{paths['qrels']}: line {ln}: expected 'qid iter docno rel'")
        qrels.setdefault(parts[0], {})[parts[2]] = int(parts[3])
    if not docs or not queries or not qrels:
        raise ConfigError(
            f"--collection {folder}: expected documents, topics and judgements (found {len(docs)}, {len(queries)}, {len(qrels)})"
        )
    return TrecCollection(name=folder.name, docs=docs, queries=queries, qrels=qrels)


def evaluate_run(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, float]:
    """Mean of each measure in `MEASURES` over the judged queries (pytrec_eval; a query with no
    results counts as 0)."""
    judged = {q: r for q, r in qrels.items()}
    full_run = {q: run.get(q) or {} for q in judged}
    ev = pytrec_eval.RelevanceEvaluator(judged, {"map", "ndcg", "ndcg_cut", "P", "recall"})
    per_query = ev.evaluate({q: r for q, r in full_run.items() if r})
    out: dict[str, float] = {}
    for m in MEASURES:
        vals = [per_query[q][m] if q in per_query else 0.0 for q in judged]
        out[m] = round(float(np.mean(vals)), 4)
    return out


def rank_collection(
    col: TrecCollection,
    *,
    hybrid: bool = True,
    progress: Callable[[str], None] | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    """Runs (`keyword`, and `hybrid` when asked) of `DEPTH` documents per query."""
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    kw = KeywordIndex([tokenize(text) for _, text in col.docs])
    say(f"keyword index: {len(col.docs)} documents in {time.perf_counter() - t0:.1f} s")
    docnos = [d for d, _ in col.docs]
    runs: dict[str, dict[str, dict[str, float]]] = {"keyword": {}}
    kw_rank: dict[str, list[int]] = {}
    for qid, text in col.queries:
        hits = kw.search(tokenize(text))
        ids = [int(i) for i in top_k(hits.scores, DEPTH) if hits.scores[i] > 0]
        kw_rank[qid] = ids
        runs["keyword"][qid] = {docnos[i]: float(hits.scores[i]) for i in ids}
    if hybrid:
        t0 = time.perf_counter()
        vecs = encode(
            [text for _, text in col.docs],
            progress=lambda d, n: say(f"embedding {d}/{n}") if d % 2000 < 200 or d == n else None,
        )
        dense = DenseIndex(vecs)
        say(f"dense index in {time.perf_counter() - t0:.1f} s")
        qvecs = encode([text for _, text in col.queries])
        runs["hybrid"] = {}
        for (qid, _), qv in zip(col.queries, qvecs, strict=True):
            d_rank = [int(i) for i in top_k(dense.scores(qv), DEPTH)]
            fused = rrf_fuse({"keyword": kw_rank[qid], "dense": d_rank})
            best = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:DEPTH]
            runs["hybrid"][qid] = {docnos[i]: s for i, s in best}
    return runs


def ir_command(
    collection: Annotated[
        Path, typer.Option("--collection", help="Folder with doc-text.trec, query-text.trec, qrels.")
    ],
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write the JSON report to this file.")
    ] = None,
    no_hybrid: Annotated[
        bool, typer.Option("--no-hybrid", help="Skip the dense channel (keyword only).")
    ] = False,
) -> None:
    """Evaluate the keyword channel (and the hybrid) on a public TREC collection."""
    from rootproof.kb.cli import run_cli

    def body() -> None:
        col = read_collection(collection)
        runs = rank_collection(col, hybrid=not no_hybrid, progress=lambda m: print(m, file=sys.stderr))
        report: dict[str, Any] = {
            "collection": col.name,
            "documents": len(col.docs),
            "queries": len(col.queries),
            "depth": DEPTH,
        }
        for name, run in runs.items():
            report[name] = evaluate_run(col.qrels, run)
        if json_file is not None:
            json_file.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        for name in runs:
            print(f"{name:8} " + " ".join(f"{m}={report[name][m]}" for m in MEASURES))

    run_cli(body)
