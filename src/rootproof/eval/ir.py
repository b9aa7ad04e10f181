"""Public IR check on a TREC collection (`rootproof eval ir --collection DIR`).

Reads `doc-text.trec`, `query-text.trec` and `qrels` (Vaswani's quirks included: upper-case
document tags and lower-case query tags on their own lines, no `Number:` prefix), ranks 1000
documents per query with the keyword channel exactly as `lookup_knowledge` configures it
(`text.tokenize` + `KeywordIndex` defaults) and with the hybrid, keyword + dense fused by
`channels.confidence_fuse` over every document as `lookup_knowledge` fuses them over every
card (the dense channel's chance level measured on this collection with the same probe
questions, `probes.calibration_probes`; the stored fusion priors), and evaluates both with
pytrec_eval.
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
import numpy.typing as npt
import pytrec_eval
import typer

from rootproof.errors import ConfigError
from rootproof.kb.channels import DenseIndex, KeywordIndex, confidence_fuse, encode, measured_chance, top_k
from rootproof.kb.index import Thresholds
from rootproof.kb.probes import calibration_probes
from rootproof.kb.text import tokenize
from rootproof.kb.thresholds import THRESHOLDS

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
    fusion_stats: dict[str, Any] | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    """Runs (`keyword`, and `hybrid` when asked) of `DEPTH` documents per query. With the
    hybrid, `fusion_stats` (when given) receives the dense channel's measured chance level
    and each channel's mean fusion weight."""
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    kw = KeywordIndex([tokenize(text) for _, text in col.docs])
    say(f"keyword index: {len(col.docs)} documents in {time.perf_counter() - t0:.1f} s")
    docnos = [d for d, _ in col.docs]
    runs: dict[str, dict[str, dict[str, float]]] = {"keyword": {}}
    kw_scores: dict[str, npt.NDArray[np.float32]] = {}
    for qid, text in col.queries:
        hits = kw.search(tokenize(text))
        ids = [int(i) for i in top_k(hits.scores, DEPTH) if hits.scores[i] > 0]
        kw_scores[qid] = hits.scores
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
        probes = calibration_probes()
        chance = {"dense": measured_chance(dense.scores(v) for v in encode(list(probes)))} if probes else {}
        stored = Thresholds.from_dict(THRESHOLDS)
        priors = {"keyword": stored.weight("bm25"), "dense": stored.weight("dense")}
        runs["hybrid"] = {}
        weights: dict[str, list[float]] = {"keyword": [], "dense": []}
        for (qid, _), qv in zip(col.queries, qvecs, strict=True):
            fusion = confidence_fuse(
                {"keyword": kw_scores[qid], "dense": dense.scores(qv)}, chance=chance, priors=priors
            )
            for ch, w in fusion.weights.items():
                weights[ch].append(w)
            best = top_k(fusion.scores, DEPTH)
            runs["hybrid"][qid] = {docnos[int(i)]: float(fusion.scores[i]) for i in best}
        dense_chance = chance.get("dense")
        stats: dict[str, Any] = {
            "dense_chance_level": None if dense_chance is None else round(dense_chance, 4),
            "mean_weights": {ch: round(float(np.mean(ws)), 4) for ch, ws in weights.items() if ws},
            "queries_with_dense_weight": sum(w > 0 for w in weights["dense"]),
        }
        say(f"hybrid fusion: {stats}")
        if fusion_stats is not None:
            fusion_stats.update(stats)
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
        stats: dict[str, Any] = {}
        runs = rank_collection(
            col, hybrid=not no_hybrid, progress=lambda m: print(m, file=sys.stderr), fusion_stats=stats
        )
        report: dict[str, Any] = {
            "collection": col.name,
            "documents": len(col.docs),
            "queries": len(col.queries),
            "depth": DEPTH,
        }
        for name, run in runs.items():
            report[name] = evaluate_run(col.qrels, run)
        if stats:
            report["hybrid_fusion"] = stats
        if json_file is not None:
            json_file.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        for name in runs:
            print(f"{name:8} " + " ".join(f"{m}={report[name][m]}" for m in MEASURES))

    run_cli(body)
