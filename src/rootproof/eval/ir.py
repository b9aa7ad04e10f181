"""Public IR check on a TREC collection (`rootproof eval ir --collection DIR`).

Reads `doc-text.trec`, `query-text.trec` and `qrels` (Vaswani's quirks included: upper-case
document tags and lower-case query tags on their own lines, no `Number:` prefix), ranks 1000
documents per query with the keyword channel exactly as `lookup_knowledge` configures it
(`text.tokenize` + `KeywordIndex` defaults) and with the hybrid, and evaluates both with
pytrec_eval.

The hybrid is the knowledge base's fusion: weighted reciprocal rank fusion (k = 60) of the
keyword and dense rankings, with the dense channel's weight calibrated on judged queries apart
from those it is reported on, as the knowledge base calibrates its weights on its calibration
split. A TREC collection has no split, so the weight is chosen by `FOLDS`-fold cross-validation:
each fold's queries are ranked with the grid weight (`IR_FUSION_GRID`) that gave the best MAP
on the other folds (ties to the weight nearest 1.0, equal weights). Out of domain the dense
model may be no better than chance; calibrated, the fusion then leans on the keyword channel
instead of halving its precision. The dense channel reads the text in its normalised form
(`text.normalize`: NFKC, lower case) on both sides, because TREC collections mix cases
(Vaswani's topics are upper case, its documents lower case) and the encoder is case-sensitive.
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
from rootproof.kb.channels import DenseIndex, KeywordIndex, encode, rrf_fuse, top_k
from rootproof.kb.text import normalize, tokenize

__all__ = [
    "FOLDS",
    "IR_FUSION_GRID",
    "MEASURES",
    "FusionCalibration",
    "TrecCollection",
    "evaluate_run",
    "ir_command",
    "rank_collection",
    "read_collection",
]

DEPTH = 1000
FOLDS = 5
"""Cross-validation folds of the hybrid's fusion weight (query i is in fold i mod FOLDS)."""
IR_FUSION_GRID = (0.0, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0)
"""Dense-channel RRF weights tried (the keyword channel weighs 1.0)."""
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


@dataclass(kw_only=True)
class FusionCalibration:
    """How the hybrid's dense weight was chosen."""

    folds: int
    grid: tuple[float, ...]
    fold_weights: list[float]
    """The dense weight each fold's queries were ranked with (chosen on the other folds)."""
    map_by_weight: dict[str, float]
    """MAP over all queries at each grid weight (a diagnostic: not how a weight is chosen)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "method": f"weighted RRF k=60, dense weight by {self.folds}-fold cross-validation on MAP",
            "folds": self.folds,
            "grid": list(self.grid),
            "fold_weights": self.fold_weights,
            "map_by_weight": self.map_by_weight,
        }


def _per_query_map(
    qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], qids: list[str]
) -> npt.NDArray[np.float64]:
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"map"})
    per_query = ev.evaluate({q: r for q, r in run.items() if r and q in qrels})
    return np.array([per_query[q]["map"] if q in per_query else 0.0 for q in qids], dtype=np.float64)


def _pick_weight(maps: dict[float, npt.NDArray[np.float64]], train: npt.NDArray[np.bool_]) -> float:
    return max(maps, key=lambda w: (round(float(maps[w][train].mean()), 9), -abs(w - 1.0)))


def rank_collection(
    col: TrecCollection,
    *,
    hybrid: bool = True,
    folds: int = FOLDS,
    grid: tuple[float, ...] = IR_FUSION_GRID,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, dict[str, dict[str, float]]], FusionCalibration | None]:
    """Runs (`keyword`, and `hybrid` when asked) of `DEPTH` documents per query, and how the
    hybrid's fusion weight was calibrated."""
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
    if not hybrid:
        return runs, None
    t0 = time.perf_counter()
    vecs = encode(
        [normalize(text) for _, text in col.docs],
        progress=lambda d, n: say(f"embedding {d}/{n}") if d % 2000 < 200 or d == n else None,
    )
    dense = DenseIndex(vecs)
    say(f"dense index in {time.perf_counter() - t0:.1f} s")
    qvecs = encode([normalize(text) for _, text in col.queries])
    d_rank = {
        qid: [int(i) for i in top_k(dense.scores(qv), DEPTH)]
        for (qid, _), qv in zip(col.queries, qvecs, strict=True)
    }
    by_weight: dict[float, dict[str, dict[str, float]]] = {}
    for w in grid:
        run: dict[str, dict[str, float]] = {}
        for qid, _ in col.queries:
            fused = rrf_fuse({"keyword": kw_rank[qid], "dense": d_rank[qid]}, weights={"dense": w})
            best = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:DEPTH]
            run[qid] = {docnos[i]: s for i, s in best}
        by_weight[w] = run
    qids = [q for q, _ in col.queries]
    maps = {w: _per_query_map(col.qrels, by_weight[w], qids) for w in grid}
    fold_of = np.arange(len(qids)) % max(1, folds)
    fold_weights: list[float] = []
    runs["hybrid"] = {}
    for f in range(max(1, folds)):
        train = fold_of != f
        if not train.any():
            train = np.ones(len(qids), dtype=bool)
        w = _pick_weight(maps, train)
        fold_weights.append(w)
        for i in np.nonzero(fold_of == f)[0]:
            runs["hybrid"][qids[i]] = by_weight[w][qids[i]]
    runs["hybrid_equal_weights"] = by_weight[1.0] if 1.0 in by_weight else {}
    judged = [i for i, q in enumerate(qids) if q in col.qrels]
    cal = FusionCalibration(
        folds=max(1, folds),
        grid=tuple(grid),
        fold_weights=fold_weights,
        map_by_weight={str(w): round(float(maps[w][judged].mean()), 4) if judged else 0.0 for w in grid},
    )
    say("hybrid dense weight per fold: " + ", ".join(str(w) for w in fold_weights))
    return runs, cal


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
        runs, cal = rank_collection(col, hybrid=not no_hybrid, progress=lambda m: print(m, file=sys.stderr))
        report: dict[str, Any] = {
            "collection": col.name,
            "documents": len(col.docs),
            "queries": len(col.queries),
            "depth": DEPTH,
        }
        for name, run in runs.items():
            report[name] = evaluate_run(col.qrels, run)
        if cal is not None:
            report["fusion"] = cal.as_dict()
        if json_file is not None:
            json_file.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        for name in runs:
            print(f"{name:20} " + " ".join(f"{m}={report[name][m]}" for m in MEASURES))

    run_cli(body)
