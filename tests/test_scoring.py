"""The scoring engine (trainer/scoring.py): a pair's score does not depend on its batch, orderings differ,
and the full-ranking metrics built on it (pipelines/recommend/evaluation.py) are exact on a hand-built case."""

import functools

import numpy as np
import pytest
import torch

from common.graph import Graph
from preprocess.sampler import Scratch, sample_subgraphs
from trainer.model.pencil import ModelConfig, Pencil
from trainer.scoring import PairSampler, PairScorer, pair_seeds


@pytest.fixture(scope="module")
def citeseer():
    from common.datasets import DatasetSpec, load_dataset

    return load_dataset(DatasetSpec("citeseer"))


def scorer(graph, **kw):
    torch.manual_seed(0)
    model = Pencil(ModelConfig(n_max=12, hidden=16, layers=1, heads=2, ffn=32, dropout=0.0)).eval()
    sample = functools.partial(sample_subgraphs, scratch=Scratch(graph.indptr))
    seed = kw.pop("seed", 0)
    sampler = PairSampler(graph.indptr, graph.indices, (1, 5), sample, seed)
    return PairScorer(model, sampler, 12, device=torch.device("cpu"), **kw)


def test_a_pairs_score_does_not_depend_on_its_batch(citeseer):
    g = citeseer.graph
    pairs = np.asarray(citeseer.splits["test"].pos[:40], dtype=np.int64)
    full = scorer(g, orderings=2).logits(pairs)
    assert full.shape == (2, 40) and np.isfinite(full).all()
    small = scorer(g, orderings=2, max_pairs=3, token_budget=60).logits(pairs[::-1][:17])
    np.testing.assert_allclose(small, full[:, ::-1][:, :17], atol=1e-5)
    assert not np.allclose(full[0], full[1])  # orderings draw independent subgraphs


def test_an_undirected_run_scores_both_orders_of_a_pair_alike(citeseer):
    # docs/own-graph.md: edges are undirected, so (u, v) and (v, u) are one link with one score; before, u was
    # always local 0, and a model trained on (min, max) positives gave the two orders different scores
    g = citeseer.graph
    pairs = np.asarray(citeseer.splits["test"].pos[:30], dtype=np.int64)
    s = scorer(g, orderings=2)
    forward, backward = s.logits(pairs), s.logits(pairs[:, ::-1])
    np.testing.assert_array_equal(forward, backward)
    assert not np.allclose(forward[0], forward[0, 0])  # the pairs themselves still differ


def test_pair_seeds_are_a_function_of_the_pair():
    a = pair_seeds(0, 0, np.array([1, 2, 3]), np.array([4, 5, 6]))
    b = pair_seeds(0, 0, np.array([3, 1]), np.array([6, 4]))
    assert a[[2, 0]].tolist() == b.tolist()
    assert pair_seeds(0, 1, np.array([1]), np.array([4]))[0] != a[0]
    assert pair_seeds(0, 0, np.array([4]), np.array([1]))[0] != a[0]  # (u, v) and (v, u) are different draws


class FixedScorer:
    """A stand-in model: logit = the candidate id (higher id ranks higher)."""

    def logits(self, pairs):
        return pairs[:, 1][None, :].astype(np.float32)


def test_full_ranking_exact_on_a_tiny_graph():
    from pipelines.recommend.engine import RecConfig
    from pipelines.recommend.ranking import full_ranking

    # 0-1, 1-2, 1-3, 1-4, 5-6: RA pool of 0 = {2, 3, 4} all tied at 1/4; 5 and 6 unreachable from 0
    g = Graph.from_edges([(0, 1), (1, 2), (1, 3), (1, 4), (5, 6)], num_nodes=7)
    cfg = RecConfig(k=1, pool=3, retriever="ra", n_max=12, sampling=(1, 5))
    pos = np.array([[0, 3], [0, 5]])
    res = full_ranking(g, pos, known=pos, cfg=cfg, scorer=FixedScorer())
    # (0, 3): 3 ties with 2 and 4 for the retriever: rank 1 + 0 + 2/2 = 2. PENCIL (by id): 4 beats it -> 2.
    # (0, 5): outside the pool; 3 is 0's other positive, filtered: the rankable list is {2, 4, 5, 6}, the pool
    # keeps {2, 4}, and 5 takes the mean place of a random order of {5, 6} after it: 2 + (4 - 2 + 1) / 2 = 3.5
    assert res["recall@3"] == 0.5
    assert res["retriever_alone"]["mrr"] == pytest.approx((1 / 2 + 1 / 3.5) / 2)
    assert res["pencil_rerank"]["mrr"] == pytest.approx((1 / 2 + 1 / 3.5) / 2)
    assert res["retriever_alone"]["hits@1"] == 0.0 and res["pairs_scored"] == 3
    res = full_ranking(g, np.array([[0, 4]]), known=np.array([[0, 4]]), cfg=cfg, scorer=FixedScorer())
    assert res["pencil_rerank"]["hits@1"] == 1.0 and res["retriever_alone"]["mrr"] == pytest.approx(1 / 2)
