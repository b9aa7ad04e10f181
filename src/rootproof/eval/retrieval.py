"""Retrieval evaluation of the knowledge base over labelled queries (`rootproof eval retrieval`).

Query file (YAML, version 1): `queries[]` {id, query, language en|zh, kind answerable|ood,
relevant [card ids], forbidden [card ids], split calibration|test (default test)}.

Grades are calibrated on the `calibration` split and metrics reported on the `test` split:
hit@1, hit@3, MRR and nDCG@10 over answerable queries; forbidden top-1 rate; citation
completeness (share of returned results carrying card id, chunk id, a resolvable raw path and
text, computed on real `lookup_knowledge` results); out-of-domain rejection (share of ood
probes answered with no evidence). Ablations run the same queries with one channel at a time.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rootproof.errors import ConfigError
from rootproof.kb.backend import KnowledgeBackend
from rootproof.kb.cli import load_kb, run_cli
from rootproof.kb.index import CHANNELS, ChannelThresholds, KnowledgeBase, Thresholds
from rootproof.kb.thresholds import THRESHOLDS
from rootproof.tools.base import LookupKnowledgeArgs
from rootproof.tools.refs import enumerate_ref_paths, ref_text

__all__ = [
    "EvalQuery",
    "QueryFile",
    "calibrate",
    "default_queries_path",
    "evaluate",
    "load_queries",
    "retrieval_command",
    "save_thresholds",
]

EVAL_TOP_K = 10
FUSION_GRID = (0.5, 0.75, 1.0, 1.5, 2.0)
"""Keyword-channel RRF weights tried by `calibrate` (the dense channel weighs 1.0)."""
ABLATIONS: dict[str, tuple[str, ...]] = {"bm25": ("bm25",), "dense": ("dense",), "hybrid": CHANNELS}


class EvalQuery(BaseModel):
    """One labelled query."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    query: str = Field(min_length=1)
    language: Literal["en", "zh"]
    kind: Literal["answerable", "ood"]
    relevant: list[str] = Field(default_factory=list)
    forbidden: list[str] = Field(default_factory=list)
    split: Literal["calibration", "test"] = "test"

    @model_validator(mode="after")
    def _labels(self) -> EvalQuery:
        if self.kind == "answerable" and not self.relevant:
            raise ValueError("an answerable query needs at least one relevant card id")
        if self.kind == "ood" and self.relevant:
            raise ValueError("an ood query has no relevant card ids")
        return self


class QueryFile(BaseModel):
    """The query file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    queries: list[EvalQuery] = Field(min_length=1)


def default_queries_path() -> Path:
    """The labelled queries shipped with the package."""
    return Path(__file__).resolve().parent.parent / "kb" / "eval_queries.yaml"


def load_queries(path: Path, card_ids: set[str] | None = None) -> QueryFile:
    """Read and validate a query file; unknown card ids and duplicate query ids are errors."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: query file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: expected valid YAML ({exc})") from None
    try:
        qf = QueryFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise ConfigError(f"{path}: field {loc}: {err['msg']}") from None
    seen: set[str] = set()
    for i, q in enumerate(qf.queries):
        if q.id in seen:
            raise ConfigError(f"{path}: field queries.{i}.id: expected a unique id ({q.id!r} repeats)")
        seen.add(q.id)
        if card_ids is not None:
            for name in ("relevant", "forbidden"):
                for cid in getattr(q, name):
                    if cid not in card_ids:
                        raise ConfigError(
                            f"{path}: field queries.{i}.{name}: expected known card ids ({q.id}: {cid!r})"
                        )
    return qf


def _quantile(values: list[float], q: float) -> float:
    vs = sorted(values)
    if len(vs) == 1:
        return vs[0]
    pos = q * (len(vs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return vs[lo] + (vs[hi] - vs[lo]) * (pos - lo)


@dataclass(kw_only=True)
class Calibration:
    """Calibrated thresholds and the statistics they came from."""

    thresholds: Thresholds
    report: dict[str, Any]


def _split_mrr(kb: KnowledgeBase, queries: list[EvalQuery], th: Thresholds) -> float:
    """Hybrid MRR of the answerable `queries` searched with thresholds `th`."""
    saved = kb.thresholds
    kb.thresholds = th
    try:
        rr: list[float] = []
        for q in queries:
            if q.kind != "answerable":
                continue
            top = [h.card_id for h in kb.search(q.query, EVAL_TOP_K).hits]
            first = next((i for i, c in enumerate(top, start=1) if c in q.relevant), None)
            rr.append(1.0 / first if first else 0.0)
    finally:
        kb.thresholds = saved
    return sum(rr) / len(rr) if rr else 0.0


def calibrate(kb: KnowledgeBase, queries: list[EvalQuery]) -> Calibration:
    """Per channel: floor halfway between the highest out-of-domain score and the 10th
    percentile of relevant-card scores (at least 0.02 above the highest ood score);
    HIGHLY_RELEVANT at the median and PRECISE at the 75th percentile of relevant-card scores.
    A channel without both kinds of calibration queries keeps the stored thresholds.
    Then the keyword channel's RRF weight (dense weighs 1.0): the value of `FUSION_GRID` with
    the best hybrid MRR on the calibration split, ties going to the weight nearest 1.0 (plain
    RRF); with no answerable calibration query the stored weights stay."""
    stored = Thresholds.from_dict(THRESHOLDS)
    cal = [q for q in queries if q.split == "calibration"]
    channels: dict[str, ChannelThresholds] = {}
    stats: dict[str, Any] = {}
    for ch in CHANNELS:
        pos: list[float] = []
        neg: list[float] = []
        for q in cal:
            sc = kb.card_scores(q.query, (ch,)).scores[ch]
            if q.kind == "answerable":
                pos.append(max(sc.get(c, 0.0) for c in q.relevant))
            else:
                neg.append(max(sc.values(), default=0.0))
        if not pos or not neg:
            channels[ch] = stored.channels[ch]
            stats[ch] = {"positives": len(pos), "ood": len(neg), "note": "kept stored thresholds"}
            continue
        hi_neg, p10 = max(neg), _quantile(pos, 0.10)
        floor = max(hi_neg + 0.5 * (p10 - hi_neg), hi_neg + 0.02)
        hr = max(floor, _quantile(pos, 0.5))
        precise = max(hr, _quantile(pos, 0.75))
        channels[ch] = ChannelThresholds(
            precise=round(precise, 4), highly_relevant=round(hr, 4), reference=round(floor, 4)
        )
        stats[ch] = {
            "positives": len(pos),
            "ood": len(neg),
            "max_ood_score": round(hi_neg, 4),
            "relevant_p10": round(p10, 4),
            "relevant_median": round(statistics.median(pos), 4),
        }
    fusion = dict(stored.fusion)
    answerable = [q for q in cal if q.kind == "answerable"]
    if answerable:
        grid: dict[float, float] = {}
        for w in FUSION_GRID:
            trial = Thresholds(channels=channels, fusion={"bm25": w, "dense": 1.0})
            grid[w] = round(_split_mrr(kb, answerable, trial), 4)
        best = max(FUSION_GRID, key=lambda w: (grid[w], -abs(math.log(w))))
        fusion = {"bm25": best, "dense": 1.0}
        stats["fusion"] = {
            "objective": "calibration hybrid mrr",
            "bm25_weight_mrr": {str(w): m for w, m in grid.items()},
        }
    derivation = (
        f"calibrated {datetime.now(UTC).date().isoformat()} on the calibration split "
        f"({len(cal)} queries: {sum(q.kind == 'answerable' for q in cal)} answerable, "
        f"{sum(q.kind == 'ood' for q in cal)} ood) over {len(kb.cards)} cards; floor halfway between the "
        "highest ood score and the 10th percentile of relevant-card scores (>= ood max + 0.02), "
        "HIGHLY_RELEVANT = median, PRECISE = 75th percentile of relevant-card scores; "
        f"keyword RRF weight from {list(FUSION_GRID)} by calibration mrr (ties to 1.0)"
    )
    th = Thresholds(channels=channels, fusion=fusion, version=stored.version + 1, derivation=derivation)
    return Calibration(
        thresholds=th, report={"split": "calibration", "queries": len(cal), "statistics": stats}
    )


def _ndcg10(top: list[str], relevant: set[str]) -> float:
    dcg = sum(1.0 / math.log2(i + 2) for i, c in enumerate(top[:10]) if c in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), 10)))
    return dcg / ideal if ideal else 0.0


def _metrics(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    ans = [r for r in rows if r["kind"] == "answerable"]
    ood = [r for r in rows if r["kind"] == "ood"]

    def mean(xs: list[float]) -> float | None:
        return round(sum(xs) / len(xs), 4) if xs else None

    ranks = [r["rank_of_first_relevant"] for r in ans]
    return {
        "hit@1": mean([1.0 if k == 1 else 0.0 for k in ranks]),
        "hit@3": mean([1.0 if k is not None and k <= 3 else 0.0 for k in ranks]),
        "mrr": mean([1.0 / k if k else 0.0 for k in ranks]),
        "ndcg@10": mean([_ndcg10(r["top"], set(r["relevant"])) for r in ans]),
        "forbidden_top1_rate": mean(
            [1.0 if r["top"] and r["top"][0] in r["forbidden"] else 0.0 for r in rows]
        ),
        "ood_rejection_rate": mean([1.0 if not r["top"] else 0.0 for r in ood]),
        "answerable_no_evidence_rate": mean([1.0 if not r["top"] else 0.0 for r in ans]),
    }


def _row(
    q: EvalQuery, top: list[str], ranks: dict[str, dict[str, int | None]], status: str
) -> dict[str, Any]:
    first = next((i for i, c in enumerate(top, start=1) if c in q.relevant), None)
    return {
        "id": q.id,
        "query": q.query,
        "language": q.language,
        "kind": q.kind,
        "relevant": q.relevant,
        "forbidden": q.forbidden,
        "top": top,
        "rank_of_first_relevant": first,
        "channel_ranks": ranks,
        "evidence_status": status,
    }


def evaluate(
    kb: KnowledgeBase, queries: list[EvalQuery], channels: list[str] | None = None
) -> dict[str, Any]:
    """Calibrate on the calibration split, then measure the test split (see module docstring)."""
    calibration = calibrate(kb, queries)
    kb.thresholds = calibration.thresholds
    test = [q for q in queries if q.split == "test"]
    wanted = channels or list(ABLATIONS)
    ablations: dict[str, Any] = {}
    for name in wanted:
        rows = []
        for q in test:
            resp = kb.search(q.query, EVAL_TOP_K, channels=ABLATIONS[name])
            rows.append(
                _row(q, [h.card_id for h in resp.hits], {}, "EVIDENCE_FOUND" if resp.hits else "NO_EVIDENCE")
            )
        ablations[name] = _metrics(rows)
    backend = KnowledgeBackend(kb)
    rows = []
    results = complete = 0
    now = datetime.now(UTC)
    for q in test:
        br = backend.call(
            "lookup_knowledge",
            LookupKnowledgeArgs(query=q.query, top_k=EVAL_TOP_K),
            now=now,
            run_id=str(uuid.uuid4()),
        )
        res = br.json()
        for path in enumerate_ref_paths(res):
            if not path.startswith("$.results["):
                continue
            results += 1
            item = res["results"][int(path[len("$.results[") : -1])]
            try:
                text_ok = bool(item.get("text")) and ref_text("lookup_knowledge", res, path).endswith(
                    item["text"]
                )
            except KeyError:
                text_ok = False
            if item.get("card_id") and item.get("chunk_id") and text_ok:
                complete += 1
        ranks = {
            r["card_id"]: {ch: r.get(ch) for ch in ("bm25", "dense", "l0")}
            for r in br.details["channel_ranks"]
        }
        status = br.evidence_status or ("EVIDENCE_FOUND" if res["results"] else "NO_EVIDENCE")
        rows.append(_row(q, [r["card_id"] for r in res["results"]], ranks, status))
    metrics = _metrics(rows)
    metrics["citation_completeness"] = round(complete / results, 4) if results else None
    by_language = {
        lang: _metrics([r for r in rows if r["language"] == lang])
        for lang in sorted({r["language"] for r in rows})
    }
    return {
        "queries": len(test),
        "cards": len(kb.cards),
        "metrics": metrics,
        "by_language": by_language,
        "ablations": ablations,
        "rows": rows,
        "calibration": {
            **calibration.report,
            "thresholds": calibration.thresholds.as_dict(),
            "stored": THRESHOLDS,
        },
    }


def save_thresholds(th: Thresholds, path: Path | None = None) -> Path:
    """Write calibrated thresholds into `kb/thresholds.py` (the versioned constant)."""
    target = path or Path(__file__).resolve().parent.parent / "kb" / "thresholds.py"
    text = target.read_text(encoding="utf-8")
    head = text[: text.index("THRESHOLDS: dict[str, Any] = ")]
    body = json.dumps(th.as_dict(), indent=4, ensure_ascii=False)
    target.write_text(f"{head}THRESHOLDS: dict[str, Any] = {body}\n", encoding="utf-8")
    return target


def retrieval_command(
    queries: Annotated[
        Path | None, typer.Option("--queries", help="Labelled query file (default: the built-in one).")
    ] = None,
    channels: Annotated[
        str, typer.Option("--channels", help="Ablations to run: bm25,dense,hybrid.")
    ] = "bm25,dense,hybrid",
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write the JSON report to this file.")
    ] = None,
    cards: Annotated[Path | None, typer.Option("--cards", help="A folder of extra cards.")] = None,
    save: Annotated[
        bool, typer.Option("--save-thresholds", help="Store the calibrated thresholds in the package.")
    ] = False,
) -> None:
    """Evaluate knowledge retrieval on labelled queries (calibration split → test split)."""

    def body() -> None:
        from rootproof.cli import check_output_file

        check_output_file(json_file)
        wanted = [c.strip() for c in channels.split(",") if c.strip()]
        bad = [c for c in wanted if c not in ABLATIONS]
        if bad or not wanted:
            raise ConfigError(f"--channels: expected a comma list of bm25, dense, hybrid (got {channels!r})")
        kb = load_kb(cards)
        qf = load_queries(queries or default_queries_path(), set(kb.cards))
        report = evaluate(kb, list(qf.queries), wanted)
        if save:
            path = save_thresholds(Thresholds.from_dict(report["calibration"]["thresholds"]))
            print(f"thresholds saved to {path}", file=sys.stderr)
        if json_file is not None:
            json_file.write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        m = report["metrics"]
        print(f"{report['queries']} test queries over {report['cards']} cards")
        print("hybrid " + " ".join(f"{k}={v}" for k, v in m.items()))
        for name, am in report["ablations"].items():
            print(
                f"{name:6} hit@1={am['hit@1']} hit@3={am['hit@3']} mrr={am['mrr']} ood_rejection={am['ood_rejection_rate']}"
            )

    run_cli(body)


eval_app = typer.Typer(
    help="Evaluation: knowledge retrieval and public IR collections.", no_args_is_help=True
)
eval_app.command("retrieval")(retrieval_command)


def _register_ir() -> None:
    from rootproof.eval.ir import ir_command

    eval_app.command("ir")(ir_command)


_register_ir()
