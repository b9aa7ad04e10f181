"""Retrieval evaluation and the TREC check, on small hand-made data."""

from __future__ import annotations

from pathlib import Path

import pytest

from rootproof.errors import ConfigError
from rootproof.eval.ir import evaluate_run, rank_collection, read_collection
from rootproof.eval.retrieval import evaluate, load_queries
from rootproof.kb.index import KnowledgeBase

DATA = Path(__file__).parents[1] / "data"


def test_pytrec_eval_map_hand_checked() -> None:
    qrels = {"1": {"a": 1, "c": 1}, "2": {"x": 1}}
    run = {"1": {"a": 3.0, "b": 2.0, "c": 1.0}, "2": {"y": 2.0, "x": 1.0}}
    # q1: AP = (1/1 + 2/3) / 2 = 0.8333; q2: AP = 1/2; MAP = 0.6667
    out = evaluate_run(qrels, run)
    assert out["map"] == pytest.approx(0.6667, abs=1e-4)
    assert out["recall_1000"] == 1.0
    # A judged query without results counts as 0.
    assert evaluate_run(qrels, {"1": run["1"]})["map"] == pytest.approx(0.4167, abs=1e-4)


def test_trec_fixture_keyword_run() -> None:
    col = read_collection(DATA / "trec")
    assert [d for d, _ in col.docs] == ["1", "2", "3", "4", "5", "6", "7", "8"]
    assert col.queries == [("1", "APPLE BANANA"), ("2", "CHERRY FESTIVAL")]
    runs, _ = rank_collection(col, hybrid=False)
    assert list(runs["keyword"]["1"])[:2] == ["1", "2"]
    assert evaluate_run(col.qrels, runs["keyword"])["map"] == 1.0


def test_trec_missing_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="expected doc-text.trec"):
        read_collection(tmp_path)


QUERIES = """
version: 1
queries:
  - {id: c1, query: "Redis ERR max number of clients reached", language: en, kind: answerable, relevant: [redis-maxclients], split: calibration}
  - {id: c2, query: "证书过期", language: zh, kind: answerable, relevant: [tls-cert-expired], split: calibration}
  - {id: c3, query: "nginx 504 upstream timed out", language: en, kind: answerable, relevant: [nginx-upstream-timeout], split: calibration}
  - {id: c4, query: "best pizza in Naples", language: en, kind: ood, split: calibration}
  - {id: t1, query: "PostgreSQL still waiting for ShareLock", language: en, kind: answerable, relevant: [pg-lock-contention], forbidden: [redis-maxclients]}
  - {id: t2, query: "GC 日志出现 Pause Full 接口超时", language: zh, kind: answerable, relevant: [jvm-gc-pause]}
  - {id: t3, query: "how do I bake bread", language: en, kind: ood}
"""


def test_retrieval_eval_on_fixtures(tmp_path: Path) -> None:
    kb = KnowledgeBase.load([DATA / "cards"], builtin=False)
    qfile = tmp_path / "q.yaml"
    qfile.write_text(QUERIES, encoding="utf-8")
    qf = load_queries(qfile, set(kb.cards))
    report = evaluate(kb, list(qf.queries))
    m = report["metrics"]
    assert report["queries"] == 3
    assert m["hit@1"] == 1.0 and m["mrr"] == 1.0 and m["ood_rejection_rate"] == 1.0
    assert m["forbidden_top1_rate"] == 0.0 and m["citation_completeness"] == 1.0
    assert set(report["ablations"]) == {"bm25", "dense", "hybrid"}
    assert report["calibration"]["queries"] == 4
    row = report["rows"][0]
    assert row["top"][0] == "pg-lock-contention" and row["rank_of_first_relevant"] == 1
    assert (
        row["evidence_status"] == "EVIDENCE_FOUND" and report["rows"][2]["evidence_status"] == "NO_EVIDENCE"
    )


def test_query_file_unknown_card(tmp_path: Path) -> None:
    qfile = tmp_path / "q.yaml"
    qfile.write_text(QUERIES.replace("relevant: [jvm-gc-pause]", "relevant: [nope]"), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"queries\.5\.relevant: expected known card ids"):
        load_queries(
            qfile, {"redis-maxclients", "tls-cert-expired", "nginx-upstream-timeout", "pg-lock-contention"}
        )


def test_ir_fusion_weight_is_chosen_on_the_other_folds() -> None:
    import numpy as np

    from rootproof.eval.ir import _pick_weight

    # Dense weight 0.5 is best on queries 0-3, weight 0.0 on query 4 alone.
    maps = {
        0.0: np.array([0.2, 0.2, 0.2, 0.2, 0.9]),
        0.5: np.array([0.6, 0.6, 0.6, 0.6, 0.1]),
        1.0: np.array([0.5, 0.5, 0.5, 0.5, 0.1]),
    }
    train_without_4 = np.array([True, True, True, True, False])
    assert _pick_weight(maps, train_without_4) == 0.5
    only_4 = np.array([False, False, False, False, True])
    assert _pick_weight(maps, only_4) == 0.0
    # Ties go to the weight nearest 1.0 (equal weights).
    tied = {0.0: np.array([0.5]), 1.0: np.array([0.5]), 2.0: np.array([0.5])}
    assert _pick_weight(tied, np.array([True])) == 1.0


def test_ir_hybrid_reports_its_calibration() -> None:
    col = read_collection(DATA / "trec")
    runs, cal = rank_collection(col, folds=2)
    assert cal is not None and len(cal.fold_weights) == 2
    assert all(w in cal.grid for w in cal.fold_weights)
    assert set(runs) == {"keyword", "hybrid", "hybrid_equal_weights"}
    assert set(runs["hybrid"]) == {"1", "2"}
    # Each query is ranked with its own fold's weight.
    fold_of = {"1": 0, "2": 1}
    for qid, fold in fold_of.items():
        w = cal.fold_weights[fold]
        assert runs["hybrid"][qid], (qid, w)
    assert cal.as_dict()["method"].startswith("weighted RRF")
