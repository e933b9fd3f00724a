"""The retriever's rank prior blended into PENCIL's re-ranking (--prior-weight): exact values of the prior,
of the blended probability, of the full-ranking metrics it gives and of the top-k a recommendation keeps."""

import math

import numpy as np
import pytest

from common.graph import Graph
from pipelines.recommend.engine import Prepared, RecConfig, RecommendError, finish_block, probabilities, rank_prior
from pipelines.recommend.ranking import PRIOR_GRID, full_ranking

INF = float("inf")


def test_rank_prior_is_minus_log_competition_rank():
    score = np.array(
        [[3.0, 2.0, 2.0, 1.0, -INF], [5.0, 5.0, 5.0, -INF, -INF], [0.1 + 0.2, 0.3, 0.25, -INF, -INF]]
    )  # 0.1 + 0.2 != 0.3 in binary, equal to 12 digits
    want = np.array(
        [
            [0.0, -math.log(2), -math.log(2), -math.log(4), -INF],
            [0.0, 0.0, 0.0, -INF, -INF],
            [0.0, 0.0, -math.log(3), -INF, -INF],
        ]
    )
    np.testing.assert_array_equal(rank_prior(score), want)
    assert rank_prior(np.zeros((0, 5))).shape == (0, 5)


def test_blended_probability_exact_values():
    logits = np.array([[0.5, -1.0, 2.0], [1.5, 0.0, -2.0]], dtype=np.float32)  # 2 orderings, 3 pairs
    prior = np.array([0.0, -math.log(2), -math.log(3)])
    sig = lambda z: 1 / (1 + math.exp(-z))
    want = [
        (sig(0.5) + sig(1.5)) / 2,
        (sig(-1.0 - 2 * math.log(2)) + sig(-2 * math.log(2))) / 2,
        (sig(2.0 - 2 * math.log(3)) + sig(-2.0 - 2 * math.log(3))) / 2,
    ]
    np.testing.assert_allclose(probabilities(logits, prior, 2.0), want, rtol=1e-12)
    np.testing.assert_allclose(probabilities(logits, prior, 0.0), probabilities(logits), rtol=0)
    with pytest.raises(RecommendError, match="--prior-weight"):
        RecConfig(prior_weight=-1.0)


# 0's neighbours 1 (degree 3) and 2 (degree 4). RA from 0: 3 = 1/3 + 1/4, 4 = 1/3, 5 = 6 = 1/4; 7-8 unreachable.
GRAPH = Graph.from_edges([(0, 1), (0, 2), (1, 3), (2, 3), (1, 4), (2, 5), (2, 6), (7, 8)], num_nodes=9)
LOGIT = {3: -5.0, 4: 2.0, 5: 3.0, 6: -10.0}  # PENCIL prefers 5 to the target 4; the retriever prefers 3


class FakeScorer:
    def logits(self, pairs):
        return np.array([[LOGIT[int(c)] for c in pairs[:, 1]]], dtype=np.float32)


def test_full_ranking_blend_exact_ranks():
    # positives (0, 4): in the pool at retriever rank 2; (0, 7): outside it.
    pos = np.array([[0, 4], [0, 7]])
    cfg = RecConfig(k=1, pool=4, retriever="ra", prior_weight=4.0)
    res = full_ranking(GRAPH, pos, pos, cfg, FakeScorer(), sweep=True)
    assert res["recall@4"] == 0.5
    # (0, 7): the pool without the other positive 4 holds 3, 5, 6; 0's rankable non-neighbours are 3..8 less
    # one other positive = 5, so the rank is 3 + (5 - 3 + 1) / 2 = 4.5 for every ranker.
    out = 1 / 4.5
    assert res["retriever_alone"] == {"mrr": (1 / 2 + out) / 2, "hits@1": 0.0}  # 3 first, then the target
    assert res["pencil_rerank"] == {"mrr": (1 / 2 + out) / 2, "hits@1": 0.0}  # 5 (logit 3) first
    # w = 4: target 2 - 4 log 2 = -0.77 beats 5's 3 - 4 log 3 = -1.39 and 3's -5: rank 1
    assert res["pencil_blend"] == {"prior_weight": 4.0, "mrr": (1 + out) / 2, "hits@1": 0.5}
    assert list(res["prior_sweep"]) == [str(w) for w in PRIOR_GRID]
    assert res["prior_sweep"]["1.0"]["hits@1"] == 0.0  # 2 - log 2 = 1.31 < 3 - log 3 = 1.90
    assert res["prior_sweep"]["4.0"] == {"mrr": (1 + out) / 2, "hits@1": 0.5}
    assert res["prior_sweep"]["0.0"] == res["pencil_rerank"]
    assert res["probability"]["targets"] == pytest.approx(1 / (1 + math.exp(-2.0)))
    # other candidates: 3, 5, 6 for (0, 4); 3, 5, 6 for (0, 7) (4, a known positive, is left out)
    others = [LOGIT[c] for c in (3, 5, 6)] * 2
    assert res["probability"]["other_candidates"] == pytest.approx(np.mean([1 / (1 + math.exp(-z)) for z in others]))


def test_recommendations_follow_the_blend():
    prior = np.array([0.0, -math.log(2), -math.log(3), -math.log(3)])
    prep = Prepared(
        0, np.array([0]), np.zeros(4, np.int64), np.array([3, 4, 5, 6]), np.array([7, 4, 3, 3]) / 12, prior, []
    )
    logits = np.array([[LOGIT[c] for c in (3, 4, 5, 6)]], dtype=np.float32)
    alone = finish_block(prep, logits, RecConfig(k=2, pool=4, prior_weight=0.0)).to_pydict()
    assert alone["candidate"] == [5, 4] and alone["rank"] == [1, 2]
    blend = finish_block(prep, logits, RecConfig(k=2, pool=4, prior_weight=4.0)).to_pydict()
    assert blend["candidate"] == [4, 5]
    np.testing.assert_allclose(
        blend["score"],
        [1 / (1 + math.exp(-(2 - 4 * math.log(2)))), 1 / (1 + math.exp(-(3 - 4 * math.log(3))))],
        rtol=1e-12,
    )


def test_native_full_ranking_filters_and_ties_exactly():
    from pipelines.recommend.native_ranking import native_full_ranking

    row = np.array([9.0, 9.0, 9.0, 1.0, 2.0, 3.0, 0.5, 2.0, -1.0])  # 0 itself, its neighbours 1, 2: not ranked
    pos = np.array([[0, 4], [0, 7]])
    for block in (1, 512):
        res = native_full_ranking(GRAPH, pos, pos, lambda q: np.tile(row, (len(q), 1)), block=block)
        # 4 and 7 tie at 2.0 but each is the other's known positive, so filtered: only 5 (3.0) is higher
        assert res == {"positives": 2, "mrr": 0.5, "hits@1": 0.0}
    res = native_full_ranking(GRAPH, pos[:1], pos[:1], lambda q: np.tile(row, (len(q), 1)))
    assert res["mrr"] == 1 / 2.5  # unfiltered: the tie with 7 counts half


def test_choose_weight_prefers_hits_then_mrr_then_the_smaller_weight():
    from pipelines.recommend.ranking import choose_weight

    sweep = {
        "0.0": {"hits@20": 0.30, "mrr": 0.10},
        "0.5": {"hits@20": 0.32, "mrr": 0.11},
        "1.0": {"hits@20": 0.32, "mrr": 0.12},
        "2.0": {"hits@20": 0.32, "mrr": 0.12},
    }
    assert choose_weight(sweep) == 1.0
    assert choose_weight({"0.0": {"hits@20": 0.3, "mrr": 0.1}, "4.0": {"hits@20": 0.3, "mrr": 0.1}}) == 0.0


def test_a_known_positive_that_is_already_an_edge_is_not_removed_twice():
    # 0's non-neighbours are 3..8; the known positive (0, 1) is already a neighbour (as valid edges are on
    # a test graph that holds them). Target 7 lies outside the pool {3, 4, 5, 6}: rank 4 + (6 - 4 + 1) / 2.
    pos = np.array([[0, 7]])
    res = full_ranking(GRAPH, pos, np.array([[0, 7], [0, 1]]), RecConfig(k=1, pool=4, retriever="ra"))
    assert res["retriever_alone"]["mrr"] == 1 / 5.5
