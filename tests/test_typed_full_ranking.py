"""Full filtered ranking of a typed run's triples over every entity (pipelines/recommend/typed_ranking.py): both
sides of each triple, the filter of known triples (valid: train + valid; test: every split's), the pool's reach,
the expected rank of a target outside the pool, the relation's ends fused into the pool, and PENCIL's re-ranking
scored as triples of the query's relation. A hand-made graph with hand-computed values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from common.datasets import DatasetSpec, load_dataset
from common.retrieval import Allowed
from common.typed_retrieval import frequent_ends, typed_retrieve
from pipelines.recommend.engine import RecConfig, RecommendError
from pipelines.recommend.evaluation import EvaluateConfig, rank_splits
from pipelines.recommend.typed_ranking import rank_triples, split_report

ROOT = Path(__file__).resolve().parents[1]

# Entities e0..e6 are ids 0..6, relations r0 0 and r1 1. The training graph (either direction, every relation):
# 0-1, 1-2, 2-3, 3-4, 0-2, degrees 2, 2, 3, 2, 1; e5 and e6 are in no training triple.
TRAIN = [("e0", "r0", "e1"), ("e1", "r0", "e2"), ("e2", "r1", "e3"), ("e3", "r0", "e4"), ("e0", "r1", "e2")]
VALID = [("e0", "r0", "e3"), ("e5", "r1", "e6")]
TEST = [("e0", "r0", "e2"), ("e1", "r0", "e4")]  # 0 -r1-> 2 is a training triple: 2 stays a candidate for r0


@pytest.fixture(scope="module")
def kg(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kg") / "tiny"
    folder.mkdir()
    for name, rows in (("train", TRAIN), ("valid", VALID), ("test", TEST)):
        (folder / f"{name}.txt").write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in rows))
    return load_dataset(DatasetSpec(str(folder)))


def triples(ds, split):
    return ds.relations.triples(split, ds.splits[split].pos)


# PENCIL's logit of each triple (h, r, t) (others 0): it puts 0 -r0-> 4 above the target 0 -r0-> 2
LOGIT = {(0, 0, 4): 2.0, (0, 0, 2): 1.0, (0, 0, 3): 5.0, (4, 0, 2): -1.0, (3, 0, 2): -1.0, (1, 0, 4): 3.0}


class TripleScorer:
    """The scoring engine's interface: logits(pairs (h, t), rel) -> (orderings, P)."""

    def __init__(self):
        self.seen = []

    def logits(self, pairs, rel):
        self.seen += [(int(h), int(r), int(t)) for (h, t), r in zip(pairs, rel)]
        return np.array([[LOGIT.get((int(h), int(r), int(t)), 0.0) for (h, t), r in zip(pairs, rel)]], np.float32)


def test_both_sides_of_each_test_triple_rank_filtered_among_every_entity(kg):
    """Pools of 3 (RA on the untyped graph, never the anchor's own r0 links, topped up by popularity):
    (0, r0, ?): RA 2 (1/2), 3 (1/3), then 4; 3 is a valid r0 tail of 0: filtered, so 2 is first (rank 1).
    (?, r0, 2): RA 0 and 4 tie (1/2), then 3; 1 -r0-> 2 is known: 0 shares the first place (rank 1.5).
    (1, r0, ?): RA 0 and 3 tie (1/3), then 4 (rank 3). (?, r0, 4): RA 2 (1/2), then 0, 1 by popularity (rank 2.5)."""
    scorer = TripleScorer()
    cfg = RecConfig(k=1, pool=3, retriever="ra", prior_weight=1.0)
    ranks = rank_triples(kg, "test", triples(kg, "test"), cfg, scorer, weights=(0.0, 1.0))
    order = list(zip(ranks.relation.tolist(), ranks.side.tolist()))
    assert order == [(0, "tail"), (0, "tail"), (0, "head"), (0, "head")]  # group by group: r0 tails, r0 heads
    r = ranks.ranked
    np.testing.assert_array_equal(r.in_pool, [True, True, True, True])
    np.testing.assert_array_equal(r.retriever, [1.0, 3.0, 1.5, 2.5])  # (0,r0,2), (1,r0,4) tails; then heads
    # PENCIL: (0,r0,4) 2.0 beats (0,r0,2) 1.0 (3 is filtered despite 5.0); (1,r0,4) 3.0 beats 0; head side of
    # (0,r0,2): 1.0 beats -1, -1; of (1,r0,4): 3.0 beats (0,r0,4) 2.0 and (2,r0,4) 0
    np.testing.assert_array_equal(r.pencil[0.0], [2.0, 1.0, 1.0, 1.0])
    assert r.pairs_scored == 12 and {rel for _, rel, _ in scorer.seen} == {0}
    assert (4, 0, 2) in scorer.seen and (2, 0, 4) in scorer.seen  # head queries scored as (candidate, r, anchor)
    report = split_report(ranks, kg.relations.names, cfg, sweep=False, relation_pool=False)
    assert report["triples"] == 2 and report["recall@3"] == 1.0 and report["queries"] == 4
    assert report["retriever_alone"]["mrr"] == pytest.approx((1 + 1 / 3 + 1 / 1.5 + 1 / 2.5) / 4)
    assert report["pencil_rerank"]["mrr"] == pytest.approx((0.5 + 1 + 1 + 1) / 4)
    assert report["pencil_rerank"]["hits@1"] == 0.75 and report["pencil_rerank"]["hits@3"] == 1.0
    assert report["sides"]["head"]["retriever_alone"]["mrr"] == pytest.approx((1 / 1.5 + 1 / 2.5) / 2)
    assert report["relations"]["r0"]["queries"] == 4 and "r1" not in report["relations"]


def test_a_target_outside_the_pool_takes_the_expected_rank_of_the_rest(kg):
    """Pools of 2: (1, r0, ?) holds 0, 3 (target 4 outside); its rivals are every entity but 1 (the anchor) and 2
    (1 -r0-> 2 is known): 0, 3, 4, 5, 6, so rank 2 + (5 - 2 + 1) / 2 = 4. (?, r0, 4) holds 2, 0: rivals 0, 1, 2, 5, 6
    (not 4, not 3 -r0-> 4): rank 4."""
    ranks = rank_triples(kg, "test", triples(kg, "test"), RecConfig(k=1, pool=2, retriever="ra"))
    np.testing.assert_array_equal(ranks.ranked.in_pool, [True, False, True, False])
    np.testing.assert_array_equal(ranks.ranked.retriever, [1.0, 4.0, 1.5, 4.0])
    assert not ranks.ranked.pencil  # the retriever alone


def test_valid_is_filtered_of_train_and_valid_only(kg):
    """(0, r0, 3) on valid: 0's test triple 0 -r0-> 2 is no known triple there, so 2 (RA 1/2) outranks the target
    3 (RA 1/3). (5, r1, 6): 5 and 6 have no training link; pools of 3 by popularity (2, 0, 1) miss the target, whose
    rivals are the 6 entities but the anchor: rank 3 + (6 - 3 + 1) / 2 = 5, on both sides."""
    ranks = rank_triples(kg, "valid", triples(kg, "valid"), RecConfig(k=1, pool=3, retriever="ra"))
    order = list(zip(ranks.relation.tolist(), ranks.side.tolist()))
    assert order == [(0, "tail"), (0, "head"), (1, "tail"), (1, "head")]
    np.testing.assert_array_equal(ranks.ranked.retriever[[0, 2, 3]], [2.0, 5.0, 5.0])


def test_the_relations_ends_fused_into_the_pool_reach_a_target_the_graph_misses(kg):
    """r0's training tails are 1, 2, 4 (once each), its heads 0, 1, 3. Pools of 2: for (1, r0, ?) the ends allowed
    are 4 (1 is the anchor, 2 a known tail); fused by reciprocal ranks with RA's 0, 3: 0 and 4 tie at 1/61, so the
    pool is 0, 4 and the target 4 is reached (rank 1.5). The other queries keep their places."""
    assert frequent_ends(triples(kg, "train"), 0, 2, kg.num_nodes).tolist() == [1, 2, 4]
    assert frequent_ends(triples(kg, "train"), 0, 0, kg.num_nodes).tolist() == [0, 1, 3]
    cfg = RecConfig(k=1, pool=2, retriever="ra")
    ranks = rank_triples(kg, "test", triples(kg, "test"), cfg, relation_pool=True)
    np.testing.assert_array_equal(ranks.ranked.in_pool, [True, True, True, False])
    np.testing.assert_array_equal(ranks.ranked.retriever, [1.0, 1.5, 1.0, 4.0])


def test_a_typed_pool_keeps_the_relations_node_kind_and_never_the_anchors_links(kg):
    from pipelines.recommend.direction import known_links
    from pipelines.recommend.relation import relation_links

    links = known_links(relation_links(triples(kg, "train"), 0, kg.num_nodes), "out")
    allowed = Allowed(candidates=np.array([3, 4, 5]), known=links)
    pool = typed_retrieve(kg.graph, np.array([0, 1]), "ra", 3, allowed=allowed, ends=np.array([4, 2, 1]))
    assert [set(row[row >= 0].tolist()) for row in pool.cand] == [{3, 4, 5}, {3, 4, 5}]
    free = typed_retrieve(kg.graph, np.array([0]), "ppr", 6, allowed=Allowed(known=links))
    assert 1 not in free.cand[0] and 0 not in free.cand[0] and 2 in free.cand[0]  # 0 -r0-> 1 known, 0 -r1-> 2 not


def test_the_relation_pool_flag_on_an_untyped_run_is_one_line(tmp_path):
    from tests.test_blend import GRAPH

    class Untyped:
        typed, graph = False, GRAPH

    run = EvaluateConfig(run="r", out=str(tmp_path / "o.json"), relation_pool=True)
    with pytest.raises(RecommendError, match=r"^--relation-pool: RUN r is untyped \(its links have no relation\)"):
        rank_splits(None, Untyped(), RecConfig(), run, "cpu")


def test_the_anchors_neighbours_by_other_relations_head_the_pool(kg):
    """4's only neighbour is 3 (3 -r0-> 4): no r1 link, so for (4, r1, ?) it comes first, before RA's 2 (1/2 via 3).
    For (?, r0, 2) the neighbours 0 and 3 (both of degree 2; 1 -r0-> 2 is known) come first, then RA's 4."""
    from pipelines.recommend.direction import known_links
    from pipelines.recommend.relation import relation_links

    def links(r, direction):
        return known_links(relation_links(triples(kg, "train"), r, kg.num_nodes), direction)

    r1 = Allowed(known=links(1, "out"))
    assert typed_retrieve(kg.graph, np.array([4]), "ra", 1, allowed=r1).cand.tolist() == [[2]]
    assert typed_retrieve(kg.graph, np.array([4]), "ra", 1, allowed=r1, neighbours=True).cand.tolist() == [[3]]
    heads = typed_retrieve(kg.graph, np.array([2]), "ra", 3, allowed=Allowed(known=links(0, "in")), neighbours=True)
    assert heads.cand.tolist() == [[0, 3, 4]] and heads.score.tolist() == [[4.0, 4.0, 0.5]]


def test_a_pool_of_every_entity_gives_the_exact_filtered_ranks_of_the_scoring_engine(kg):
    """A real (untrained) typed model through the real scoring engine: with M above the entity count every rival is
    in the pool, so PENCIL's full ranking is the filtered rank among every entity (common.datasets.corruptions's
    filter: every known triple of the anchor and relation, and the anchor itself), on both sides."""
    import torch

    from common.datasets.corruptions import filtered_ranks, known_partners
    from pipelines.recommend.engine import scorer_for
    from pipelines.recommend.relation import run_triples, typed_inputs
    from trainer.model.pencil import ModelConfig, Pencil

    torch.manual_seed(0)
    names, n = kg.relations.names, kg.num_nodes
    cfg_model = ModelConfig(42, 16, 1, 2, 32, dropout=0.0, attention="reference", edge_types=4, relations=len(names))
    model = Pencil(cfg_model).eval()
    cfg = RecConfig(k=1, pool=10, retriever="ra", sampling=(1, 20), n_max=42)
    typed = typed_inputs(run_triples(kg, "test"), n, len(names))
    scorer = scorer_for(model, kg.graph_for("test"), cfg, torch.device("cpu"), kg.out_graph_for("test"), typed)
    t = triples(kg, "test")
    got = rank_triples(kg, "test", t, cfg, scorer, weights=(0.0,), neighbours=True)
    assert got.ranked.in_pool.all()
    known = np.concatenate([triples(kg, s) for s in ("train", "valid", "test")])
    want = []
    for anchor, end in ((0, 2), (2, 0)):  # tails, then heads: the order of rank_triples for one relation
        scores = np.full((len(t), n), -np.inf)
        for i, tri in enumerate(t):
            rivals = np.setdiff1d(np.arange(n), [tri[anchor]])  # the anchor is never scored
            cand = np.tile(tri, (len(rivals), 1))
            cand[:, end] = rivals
            scores[i, rivals] = scorer.logits(cand[:, [0, 2]], cand[:, 1]).mean(0)
        rows, ents = known_partners(t, known, n, end)
        mask = np.zeros((len(t), n), dtype=bool)
        mask[rows, ents] = True
        mask[np.arange(len(t)), t[:, anchor]] = True
        want.append(filtered_ranks(scores[np.arange(len(t)), t[:, end]], scores, mask))
    np.testing.assert_allclose(got.ranked.pencil[0.0], np.concatenate(want))
