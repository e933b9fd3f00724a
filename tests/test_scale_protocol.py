"""The original protocol at scale (common.metrics.shared_rank_at): above SHARED_RANK_MAX shared negatives each
positive is ranked against that many of them at random, in expectation, for PENCIL and the heuristics alike;
below it, the numbers are those of the ranking against all of them, to the digit."""

from __future__ import annotations

import numpy as np
import pytest

import common.metrics as metrics
from bench.own_graph_scale import scale_edges
from common.datasets.edgelist import random_split_dataset
from common.datasets.pool import attach_valid_pool
from common.heuristics import split_scores
from common.metrics import (
    RANK_KEYS,
    classification_metrics,
    evaluate,
    expected_rank_values,
    rank_against_shared,
    ranking_metrics,
)
from pipelines.run import scale_notes


def tiny():
    edges = scale_edges(1500, 6.0, seed=0)
    return random_split_dataset("tiny", edges, int(edges.max()) + 1)


def cn(ds, split="test"):
    return split_scores(ds, split, ["original"], ["cn"])["original"]["cn"]


def old_path(pos, neg) -> dict:
    """The original protocol as it ranked before the rule: every positive against all shared negatives."""
    return {**ranking_metrics(rank_against_shared(pos, neg)), **classification_metrics(pos, neg)}


def test_the_paper_graphs_and_the_suite_keep_the_whole_ranking():
    # pubmed, the largest Planetoid graph under "original": 44,324 edges, 10% test; the suite: under 20,000 edges
    assert metrics.shared_rank_at("original", 4_432) is None and metrics.shared_rank_at("original", 2_000) is None
    assert metrics.shared_rank_at("original", 100_000) == metrics.SHARED_RANK_MAX
    assert metrics.shared_rank_at("ogb", 100_000) is None and metrics.shared_rank_at("heart", 100_000) is None


def test_below_the_threshold_nothing_changes():
    ds = tiny()
    pos, neg = cn(ds)
    assert len(neg) == 150 <= metrics.SHARED_RANK_MAX
    assert evaluate("original", pos, neg) == old_path(pos, neg)  # exact: the same digits
    assert scale_notes(ds, ["original"]) == []


def test_above_the_threshold_each_positive_meets_a_fixed_count(monkeypatch):
    ds = tiny()
    pos, neg = cn(ds)
    monkeypatch.setattr(metrics, "SHARED_RANK_MAX", 40)
    got = evaluate("original", pos, neg)
    want = {k: float(np.mean(v)) for k, v in expected_rank_values(pos, neg, 40).items() if k in RANK_KEYS}
    for k in RANK_KEYS:
        assert got[k] == pytest.approx(want[k], rel=1e-12)
    assert got["mrr"] > old_path(pos, neg)["mrr"]  # 40 negatives, not 150: fewer above each positive
    # AUC and AP still pool all negatives; the other protocols keep their own rules
    assert (got["auc"], got["ap"]) == (old_path(pos, neg)["auc"], old_path(pos, neg)["ap"])
    assert evaluate("ogb", pos, neg)["mrr"] == old_path(pos, neg)["mrr"]
    assert evaluate("pairs", pos, neg) == old_path(pos, neg)
    # in expectation: the mean over draws of 40 negatives per positive (with replacement) approaches it
    rng = np.random.default_rng(0)
    draws = [neg[rng.integers(0, len(neg), (len(pos), 40))] for _ in range(400)]
    sampled = np.mean([metrics.ranking_metrics(metrics.rank_against_own(pos, d))["hits@10"] for d in draws])
    assert sampled == pytest.approx(got["hits@10"], abs=0.01)
    # the report names it
    (note,) = scale_notes(ds, ["original"])
    assert "40 of the split's 150 shared negatives" in note


def test_the_blend_estimates_at_the_same_count(monkeypatch):
    monkeypatch.setattr(metrics, "SHARED_RANK_MAX", 40)
    assert attach_valid_pool(tiny(), 2).valid_pool["rank_at"] == 40  # test has 150: ranked against 40
    monkeypatch.undo()
    assert attach_valid_pool(tiny(), 2).valid_pool["rank_at"] == 150
