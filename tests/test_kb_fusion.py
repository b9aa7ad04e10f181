"""The hybrid's fusion (`channels.confidence_fuse`) on hand-made score pools."""

from __future__ import annotations

from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from rootproof.errors import ConfigError
from rootproof.kb.channels import (
    chance_level,
    confidence_fuse,
    measured_chance,
    standard_scores,
    standout,
)
from rootproof.kb.probes import calibration_probes

N = 2000


def _order(scores: np.ndarray) -> list[int]:
    return [int(i) for i in np.lexsort((np.arange(len(scores)), -scores))]


def _strong() -> np.ndarray:
    """A keyword-like channel: most items score 0, 40 share terms, 5 stand far out."""
    rng = np.random.default_rng(7)
    s = np.zeros(N)
    s[rng.choice(N, 40, replace=False)] = rng.uniform(0.5, 2.0, 40)
    s[[11, 22, 33, 44, 55]] = [9.0, 8.5, 8.0, 7.5, 7.0]
    return s


def test_chance_level_is_the_median_best_of_n_normals() -> None:
    assert chance_level(0) == chance_level(1) == 0.0
    assert chance_level(33) == pytest.approx(2.0378, abs=1e-4)
    assert chance_level(2) < chance_level(33) < chance_level(11429)
    rng = np.random.default_rng(0)
    for n in (33, 1000):
        best = [standout(rng.standard_normal(n)) for _ in range(600)]
        assert float(np.median(best)) == pytest.approx(chance_level(n), abs=0.12)


def test_flat_weak_channel_does_not_drag_down_a_strong_one() -> None:
    strong = _strong()
    # Flat: evenly spread scores, no item standing out (best standard score sqrt(3) < chance).
    flat = np.random.default_rng(1).permutation(np.linspace(0.30, 0.34, N))
    fusion = confidence_fuse({"keyword": strong, "dense": flat})
    assert fusion.confidence["dense"] == 0.0 and fusion.weights == {"keyword": 1.0, "dense": 0.0}
    assert _order(fusion.scores)[:45] == _order(strong)[:45]
    # What an unweighted sum of standard scores (or any equal-vote fusion) would do instead:
    plain = standard_scores(strong) + standard_scores(flat)
    assert _order(plain)[:45] != _order(strong)[:45]


def test_noise_channel_barely_above_its_tail_gets_little_weight() -> None:
    strong = _strong()
    noise = NormalDist().inv_cdf  # exact normal quantiles: a channel that knows nothing
    weak = np.random.default_rng(2).permutation([noise((i + 0.5) / N) for i in range(N)])
    fusion = confidence_fuse({"keyword": strong, "dense": weak})
    assert 0.0 <= fusion.weights["dense"] < 0.05 < fusion.weights["keyword"]
    assert _order(fusion.scores)[:5] == [11, 22, 33, 44, 55]


def test_two_confident_channels_still_fuse() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(0, 1, N), rng.normal(0, 1, N)
    # Each channel puts its own favourite first and item 7 second; neither puts 7 first.
    a[[100, 7]] = [9.0, 8.0]
    b[[200, 7]] = [9.0, 8.0]
    fusion = confidence_fuse({"keyword": a, "dense": b})
    assert fusion.weights["keyword"] == pytest.approx(0.5, abs=0.05)
    assert min(fusion.weights.values()) > 0.4
    assert _order(fusion.scores)[0] == 7
    assert _order(a)[0] == 100 and _order(b)[0] == 200


def test_measured_chance_silences_a_channel_that_probes_match() -> None:
    strong = _strong()
    rng = np.random.default_rng(4)
    weak = rng.normal(0, 1, N)
    weak[5] = 4.6  # stands above the Gaussian chance level (3.4 for 2000 items) ...
    assert confidence_fuse({"keyword": strong, "dense": weak}).weights["dense"] > 0.05
    # ... but questions with no answer in this pool stand out as far there.
    probes = []
    for i in range(5):
        p = rng.normal(0, 1, N)
        p[i] = 4.5 + 0.1 * i
        probes.append(p)
    level = measured_chance(probes)
    assert level == pytest.approx(standout(probes[2]))
    fusion = confidence_fuse({"keyword": strong, "dense": weak}, chance={"dense": level})
    assert fusion.weights["dense"] == 0.0 and fusion.confidence["dense"] == 0.0
    # A measured level below the Gaussian one does not lower it.
    low = confidence_fuse({"keyword": strong, "dense": weak}, chance={"dense": 0.0})
    assert low.confidence["dense"] == pytest.approx(standout(weak) - chance_level(N))
    assert measured_chance([]) is None


def test_priors_scale_confidences_and_stand_in_when_nothing_stands_out() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.normal(0, 1, N), rng.normal(0, 1, N)
    a[1], b[2] = 8.0, 6.0
    even = confidence_fuse({"a": a, "b": b})
    skewed = confidence_fuse({"a": a, "b": b}, priors={"a": 1.0, "b": 3.0})
    ratio = even.weights["b"] / even.weights["a"]
    assert skewed.weights["b"] / skewed.weights["a"] == pytest.approx(3 * ratio)
    flat = np.linspace(0, 1, N)
    fallback = confidence_fuse({"a": flat, "b": flat[::-1]}, priors={"a": 1.0, "b": 3.0})
    assert fallback.weights == {"a": 0.25, "b": 0.75}
    constant = confidence_fuse({"a": np.zeros(N), "b": b})
    assert constant.weights == {"a": 0.0, "b": 1.0}
    assert not np.any(standard_scores(np.zeros(N)))


def test_pools_must_match() -> None:
    with pytest.raises(ValueError, match="scores 3 items, expected 2"):
        confidence_fuse({"a": [1.0, 2.0], "b": [1.0, 2.0, 3.0]})
    empty = confidence_fuse({})
    assert empty.scores.shape == (0,) and empty.weights == {}


def test_calibration_probes(tmp_path: Path) -> None:
    built_in = calibration_probes()
    assert len(built_in) == 5 and "recipe for banana bread" in built_in
    qfile = tmp_path / "q.yaml"
    qfile.write_text(
        "version: 1\nqueries:\n"
        "  - {id: a, query: best pizza in Naples, language: en, kind: ood, split: calibration}\n"
        "  - {id: b, query: what is the capital of France, language: en, kind: ood}\n"
        "  - {id: c, query: Redis maxclients, language: en, kind: answerable, relevant: [x], split: calibration}\n",
        encoding="utf-8",
    )
    assert calibration_probes(qfile) == ("best pizza in Naples",)
    qfile.write_text("queries: {a: 1}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"q\.yaml: field queries: expected a list"):
        calibration_probes(qfile)
