"""Validation's selection pool (common/datasets/pool.py) and the ranks estimated from it
(common.metrics.expected_rank_values): hand-computed values, an exhaustive reference, and what reads which
negatives (the trainer and the search the protocol's, the blend the pool)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from common.datasets.base import DatasetError
from common.datasets.edgelist import random_split_dataset
from common.datasets.fractions import SplitSettings
from common.datasets.pool import attach_valid_pool
from common.datasets.spec import DatasetSpec
from common.graph import Graph
from common.metrics import MetricsError, expected_rank_values, rank_against_shared
from pipelines.auto.signal import Signal


def test_expected_ranks_by_hand():
    # one negative of four above the positive: each draw is above it with chance 1/4
    v = expected_rank_values(np.array([1.0]), np.array([2.0, 0.0, 0.0, 0.0]), at=1)
    assert v["mrr"][0] == pytest.approx(0.75 * 1 + 0.25 * 0.5)
    assert v["hits@1"][0] == pytest.approx(0.75)
    assert v["auc"][0] == pytest.approx(0.75)
    # two draws: P(X=0, 1, 2) = 9/16, 6/16, 1/16
    v = expected_rank_values(np.array([1.0]), np.array([2.0, 0.0, 0.0, 0.0]), at=2)
    assert v["mrr"][0] == pytest.approx(9 / 16 + 6 / 16 / 2 + 1 / 16 / 3)
    assert v["hits@1"][0] == pytest.approx(9 / 16)
    assert v["hits@3"][0] == pytest.approx(1.0)
    # above every negative: rank 1 at any count; a tied negative counts as half a negative above (the estimate's
    # rule; the exact tie-averaged mean here is 1/2 * 1 + 1/2 * 2/3)
    assert expected_rank_values(np.array([5.0]), np.zeros(3), at=50)["mrr"][0] == 1.0
    tie = expected_rank_values(np.array([1.0]), np.array([1.0, 0.0]), at=1)
    assert tie["mrr"][0] == pytest.approx(0.75 * 1 + 0.25 * 0.5)


def test_expected_ranks_equal_the_mean_over_every_draw_with_replacement():
    rng = np.random.default_rng(0)
    pos, neg, at = rng.normal(size=6), np.round(rng.normal(size=5), 1), 3
    neg[1] = pos[0]  # a tie
    draws = [neg[list(ix)] for ix in itertools.product(range(len(neg)), repeat=at)]
    ranks = np.array([rank_against_shared(pos, d) for d in draws])  # tie-averaged, as the protocol ranks
    got = expected_rank_values(pos, neg, at)
    # exact where no negative ties the positive; a tie (positive 0) is estimated as half a negative above
    free = np.arange(1, len(pos))
    np.testing.assert_allclose(got["mrr"][free], (1.0 / ranks).mean(0)[free], rtol=1e-12)
    for k in (1, 3):
        np.testing.assert_allclose(got[f"hits@{k}"][free], (ranks <= k).mean(0)[free], rtol=1e-12)
    assert got["mrr"][0] == pytest.approx((1.0 / ranks).mean(0)[0], abs=0.05)


def test_expected_ranks_refuse_what_they_cannot_rank():
    with pytest.raises(MetricsError, match="at:"):
        expected_rank_values(np.ones(2), np.ones(3), at=0)
    with pytest.raises(MetricsError, match="shape"):
        expected_rank_values(np.ones(2), np.ones((2, 3)), at=2)


def _dataset(seed: int = 0):
    rng = np.random.default_rng(seed)
    n = 200
    edges = np.unique(np.sort(rng.integers(0, n, (900, 2)), axis=1), axis=0)
    edges = edges[edges[:, 0] != edges[:, 1]]
    return random_split_dataset("pool", edges, n, SplitSettings(seed=seed))


def test_the_pool_follows_the_protocols_negatives_and_is_drawn_like_them():
    ds = _dataset()
    neg = ds.splits["valid"].neg["original"]
    pooled = attach_valid_pool(ds, 4)
    got = pooled.splits["valid"].neg["original"]
    assert ds.splits["valid"].neg["original"] is neg and ds.valid_pool is None  # the input is unchanged
    assert len(got) == 5 * len(neg) and np.array_equal(got[: len(neg)], neg)
    info = pooled.valid_pool
    assert info == {
        "protocol": "original",
        "negatives": len(neg),
        "pool": 4 * len(neg),
        "rank_at": len(ds.splits["test"].neg["original"]),
    }
    keys = got[:, 0] * ds.num_nodes + got[:, 1]
    assert len(np.unique(keys)) == len(keys) and (got[:, 0] < got[:, 1]).all()
    known = Graph.from_edges(np.concatenate([ds.splits["train"].pos, ds.splits["valid"].pos]), ds.num_nodes)
    assert not known.has_edge(got[:, 0], got[:, 1]).any()
    np.testing.assert_array_equal(attach_valid_pool(_dataset(), 4).splits["valid"].neg["original"], got)
    assert pooled.fingerprint() != ds.fingerprint()  # a pooled shard set is another set
    assert np.array_equal(pooled.splits["test"].neg["original"], ds.splits["test"].neg["original"])


def test_a_dataset_without_shared_validation_negatives_is_refused():
    ds = _dataset()
    ds.splits["valid"].neg = {"heart": np.zeros((len(ds.splits["valid"].pos), 3, 2), dtype=np.int64)}
    with pytest.raises(DatasetError, match="--valid-pool: pool has no shared validation negatives"):
        attach_valid_pool(ds, 2)
    assert attach_valid_pool(ds, 0) is ds


def test_a_signal_on_a_pool_ranks_at_tests_count():
    pos, neg = np.array([1.0, 3.0]), np.array([2.0, 0.0, 0.0, 0.0])
    plain, pooled = Signal(pos, neg).values(), Signal(pos, neg, at=2).values()
    np.testing.assert_allclose(plain["mrr"], [1 / 2, 1.0])
    np.testing.assert_allclose(pooled["mrr"], [9 / 16 + 6 / 16 / 2 + 1 / 16 / 3, 1.0])
    np.testing.assert_allclose(plain["auc"], pooled["auc"])


def test_a_pooled_set_scores_its_protocol_negatives_for_the_trainer_and_the_pool_for_the_blend(tmp_path):
    from common.datasets import load_set_dataset
    from common.manifest import read_manifest
    from common.metrics import evaluate
    from common.shards import load_queries
    from pipelines.auto import blend
    from pipelines.auto.signal import eval_signal, per_positive
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig
    from preprocess.job import run_job
    from tests.conftest import bipartite_rows, write_edges
    from trainer.evaluate import scores_to_metrics

    edges = write_edges(tmp_path / "shop.csv", bipartite_rows())
    cfg = PreprocessConfig(
        data=DatasetSpec(str(edges), valid_pool=3),
        sampling=SamplingConfig(1, 3),
        out=str(tmp_path / "shards"),
        candidates=CandidateConfig(views=1),
        num_cpus=1,
    )
    manifest = read_manifest(str(run_job(cfg).path))
    entry, test = manifest.eval["valid/original"], manifest.eval["test/original"]
    q = entry["valid_pool"]["negatives"]
    assert entry["valid_pool"] == {"protocol": "original", "negatives": q, "pool": 3 * q, "rank_at": q * 2}
    assert entry["candidates"] == entry["positives"] + 4 * q and "valid_pool" not in test
    pos_cid, neg_cid = load_queries(f"{manifest.root}/{entry['queries']}")
    score = np.random.default_rng(0).normal(size=entry["candidates"])
    cid = np.arange(entry["candidates"])
    assert scores_to_metrics(manifest, "valid", "original", cid, score) == evaluate(
        "original", score[pos_cid], score[neg_cid[:q]]
    )
    plain = eval_signal(manifest, "valid", "original", cid, score)
    pooled = eval_signal(manifest, "valid", "original", cid, score, pool=True)
    assert len(plain.neg) == q and plain.at is None and len(pooled.neg) == 4 * q and pooled.at == 2 * q
    expected = expected_rank_values(score[pos_cid], score[neg_cid], 2 * q)
    np.testing.assert_allclose(
        per_positive(manifest, "valid", "original", cid, score, pool=True)["mrr"], expected["mrr"]
    )
    # the set's dataset, reloaded from its manifest, holds the same pool: the blend's heuristics line up with it
    reloaded = load_set_dataset(manifest.config)
    assert reloaded.valid_pool == entry["valid_pool"]
    blend.by_cid(reloaded, manifest, "valid", "original", {"cn": (np.zeros(len(pos_cid)), np.zeros(4 * q))})


def test_a_graph_with_few_pairs_left_gets_a_smaller_pool():
    n = 20
    ds = random_split_dataset("dense", np.stack(np.triu_indices(n, 1), 1)[:150], n)  # 150 of 190 pairs
    neg = ds.splits["valid"].neg["original"]
    known = Graph.from_edges(np.concatenate([ds.splits["train"].pos, ds.splits["valid"].pos]), n)
    left = n * (n - 1) // 2 - known.num_edges - len(neg)  # pairs that are neither edges nor validation negatives
    pooled = attach_valid_pool(ds, 8)
    assert 0 < pooled.valid_pool["pool"] == left // 2 < 8 * len(neg)


def test_the_search_reads_an_eval_sets_queries_once(tmp_path, monkeypatch):
    # the search and the blend ask for the same sets once per candidate, seed and key: on an s3:// set each read
    # was a download (9 of a cluster run's 12 minutes, docs/benchmarks/2026-12-05-cluster.md)
    from common.manifest import read_manifest
    from pipelines.auto import signal
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig
    from preprocess.job import run_job
    from tests.conftest import bipartite_rows, write_edges

    edges = write_edges(tmp_path / "shop.csv", bipartite_rows())
    cfg = PreprocessConfig(
        data=DatasetSpec(str(edges)),
        sampling=SamplingConfig(1, 3),
        out=str(tmp_path / "shards"),
        candidates=CandidateConfig(views=1),
        num_cpus=1,
    )
    manifest = read_manifest(str(run_job(cfg).path))
    reads, load = [], signal.load_queries
    monkeypatch.setattr(signal, "load_queries", lambda path, sha256: reads.append(path) or load(path, sha256=sha256))
    signal._verified_queries.cache_clear()
    entry = manifest.eval["valid/original"]
    cid = np.arange(entry["candidates"])
    first = signal.eval_signal(manifest, "valid", "original", cid, np.arange(len(cid), dtype=float))
    again = signal.eval_signal(manifest, "valid", "original", cid, -np.arange(len(cid), dtype=float))
    assert len(reads) == 1 and first.values()["mrr"].mean() < again.values()["mrr"].mean()  # each its own scores
    with pytest.raises(ValueError):  # the shared arrays are read-only: no caller can change another's
        signal.set_queries(manifest, entry)[0][0] = 7
