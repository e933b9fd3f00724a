"""bench.kg_peers and bench.user_item_peers on tiny hand-made files: the protocols' ranks by hand, a whole R-GCN
run end to end (seconds), PyKEEN's ComplEx where PyKEEN is installed, the user-item peers end to end."""

from __future__ import annotations

import gzip
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bench.kg_peers import by_relation, full_ranks, read_kg, run_peer, sampled_ranks, sampled_split
from bench.kg_peers_models import complex_peer, lcwa_chunks, reciprocal

TRIPLES = {  # 8 entities e0..e7, relations r0, r1
    "train": [("e0", "r0", "e1"), ("e1", "r0", "e2"), ("e2", "r0", "e3"), ("e3", "r1", "e4"), ("e4", "r1", "e5"),
              ("e5", "r1", "e6"), ("e6", "r0", "e7"), ("e7", "r1", "e0"), ("e0", "r1", "e2"), ("e1", "r1", "e3")],
    "valid": [("e2", "r1", "e4"), ("e3", "r0", "e5")],
    "test": [("e4", "r0", "e6"), ("e5", "r0", "e7")],
}  # fmt: skip


@pytest.fixture
def kg_folder(tmp_path):
    for split, rows in TRIPLES.items():
        with gzip.open(tmp_path / f"{split}.txt.gz", "wt") as f:
            f.writelines("\t".join(r) + "\n" for r in rows)
    return tmp_path


class SumScorer:
    """score(h, r, t) = h + t: every rank is countable by hand."""

    def reset(self):
        pass

    def score_triples(self, t):
        return (t[:, 0] + t[:, 2]).astype(np.float64)

    def score_all(self, q, side):
        return q[:, 2 - side, None] + np.arange(8)[None, :].astype(np.float64)


def test_read_kg_maps_names_in_sorted_order(kg_folder):
    kg = read_kg(kg_folder)
    assert kg["entities"].tolist() == [f"e{i}" for i in range(8)] and kg["relations"].tolist() == ["r0", "r1"]
    assert kg["triples"]["test"].tolist() == [[4, 0, 6], [5, 0, 7]]


def test_sampled_and_full_ranks_by_hand(kg_folder):
    kg = read_kg(kg_folder)
    known = np.concatenate(list(kg["triples"].values()))
    test = kg["triples"]["test"]
    split = sampled_split(test, known, 8)
    # (4, r0, 6): heads {0,1,2,3,5,6,7} (4 is the query), tails {0,1,2,3,4,5,7}: 14; (5, r0, 7): heads less the
    # known (6, r0, 7) and the query: 6, tails 7: 13; the rest of the 50 + 50 is padding
    assert (split["cand"][:, :, 0] >= 0).sum(axis=1).tolist() == [14, 13]
    ranks = sampled_ranks(SumScorer().score_triples, split)
    # (4, r0, 6) scores 10; above it: heads 5, 6, 7 (11, 12, 13) and tail 7 (11); no tie: rank 5
    assert ranks.tolist()[0] == 5.0
    tail = full_ranks(SumScorer().score_all, test, known, 8, side=2)
    # (4, r0, ?): scores 4..11, true 6 (10); above: 7 (11) -> rank 2; (5, r0, ?): true 7 is the best -> 1
    assert tail.tolist() == [2.0, 1.0]
    m = by_relation(tail, test[:, 1], kg["relations"])
    assert m["overall"]["mrr"] == pytest.approx(0.75) and m["r0"]["count"] == 2


def test_rgcn_peer_runs_end_to_end(kg_folder):
    res = run_peer(read_kg(kg_folder), "rgcn", minutes=0.02, patience=2, every=1, full=True, seed=0, dim=8)
    assert res["chosen"] in res["history"]
    assert set(res["test"]) == {"sampled", "full_tail", "full_head", "full_both"}
    assert res["test"]["sampled"]["overall"]["count"] == 2 and res["test"]["full_both"]["overall"]["count"] == 4
    assert 0 < res["test"]["sampled"]["overall"]["mrr"] <= 1


def test_pykeen_complex_peer_runs_end_to_end(kg_folder):
    pytest.importorskip("pykeen")
    res = run_peer(read_kg(kg_folder), "complex-slcwa", minutes=0.02, patience=1, every=1, full=True, seed=0, dim=4)
    assert 0 < res["test"]["full_tail"]["overall"]["mrr"] <= 1
    res = run_peer(read_kg(kg_folder), "complex-lcwa", minutes=0.02, patience=1, every=1, full=True, seed=0, chunks=2)
    assert res["settings"]["chunks"] == 2 and 0 < res["test"]["sampled"]["overall"]["mrr"] <= 1


def test_reciprocal_triples_and_chunks_by_hand():
    train = np.array([[0, 0, 1], [0, 0, 2], [1, 1, 2]])
    both = reciprocal(train, num_rel=2)
    assert both[3:].tolist() == [[1, 2, 0], [2, 2, 0], [2, 3, 1]]
    parts = lcwa_chunks(both, 3, seed=0)
    assert sorted(map(tuple, np.concatenate(parts).tolist())) == sorted(map(tuple, both.tolist()))
    # every tail of a (head, relation) row is in one part: (0, 0) -> {1, 2} is never split
    assert sum(((p[:, 0] == 0) & (p[:, 1] == 0)).any() for p in parts) == 1


def test_pykeen_scores_use_our_ids_and_both_directions(kg_folder):
    """ComplEx by hand from the model's own embeddings, indexed by our entity and relation ids: the harness's
    triples mean to PyKEEN what they mean to us, and a reciprocal model scores s(h, r, t) + s(t, r + R, h)."""
    pytest.importorskip("pykeen")
    kg = read_kg(kg_folder)
    train = kg["triples"]["train"]
    model, step, scorer = complex_peer(train, 8, 2, loop="lcwa", dim=3, seed=0, chunks=2)
    step(), step()  # a whole epoch, in its two parts: the embeddings move off their init
    ent = model.entity_representations[0](indices=None).detach()
    rel = model.relation_representations[0](indices=None).detach()

    def by_hand(h, r, t):
        return float(torch.real((ent[h] * rel[r] * torch.conj(ent[t])).sum()))

    q = kg["triples"]["test"]  # (4, r0, 6), (5, r0, 7)
    want = [by_hand(h, r, t) + by_hand(t, r + 2, h) for h, r, t in q]
    assert scorer.score_triples(q) == pytest.approx(want, rel=1e-5)
    for side in (0, 2):  # each query's own entity, read off its full row, scores as the triple does
        rows = scorer.score_all(q, side)
        assert rows.shape == (2, 8) and rows[[0, 1], q[:, side]] == pytest.approx(want, rel=1e-5)
    assert scorer.score_all(q[:1], 2)[0, 5] == pytest.approx(by_hand(4, 0, 5) + by_hand(5, 2, 4), rel=1e-5)


def test_pykeen_lcwa_learns_its_training_triples(kg_folder):
    """The signal check a peer at chance needs: after 5 epochs the 1-N model ranks every training triple's tail
    first among the 8 (filtered). The sLCWA run with PyKEEN's defaults (unit normal init) is at a mean rank of 3.6
    after 5 epochs and 3.0 after 30 on this graph."""
    pytest.importorskip("pykeen")
    kg = read_kg(kg_folder)
    train = kg["triples"]["train"]
    _, step, scorer = complex_peer(train, 8, 2, loop="lcwa", dim=8, seed=0, lr=0.05)
    for _ in range(5):
        step()
    ranks = full_ranks(scorer.score_all, train, train, 8, side=2)
    assert ranks.mean() < 1.5


def test_user_item_peers_end_to_end(tmp_path):
    from bench.user_item_peers import peers

    rng = np.random.default_rng(0)
    rows = {(int(u), int(i)) for u, i in rng.integers(0, [30, 40], size=(400, 2))}
    path = tmp_path / "r.tsv"
    lines = [f"u{u}\ti{i}\t3\t{t}\n" for t, (u, i) in enumerate(sorted(rows, key=lambda p: rng.random()))]
    path.write_text("user\titem\trating\ttime\n" + "".join(lines))
    args = SimpleNamespace(data=path, dim=4, lr=0.01, l2=1e-4, batch=64, epochs=3, patience=2, minutes=1.0, seed=0)
    res = peers(args)
    assert set(res["test"]) == {"popularity", "paths3", "ra3", "aa3", "user-cf", "item-cf", "bpr"}
    assert all(0 < m["mrr"] <= 1 for m in res["test"].values())
    assert res["bpr"]["chosen"]["epoch"] <= 3
    # a returning user is one with an edge in the graph the split is scored on
    assert 0 < res["test"]["paths3"]["returning_count"] <= res["pairs"]["test"]
