"""A user-item ratings file read by PENCIL as a typed graph (common/datasets/user_item.py, docs/own-graph.md): node
ids per kind, one relation user -> item, negatives that only join a user to an item, and valid/test negatives equal
to bench.user_item_peers' draw. A hand-made file with hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from bench.user_item_peers import eval_split
from common.datasets import DatasetError, DatasetSpec, load_dataset
from common.datasets.kg import triple_csr
from common.datasets.user_item import read_user_item, user_item_split
from preprocess.config import CandidateConfig
from preprocess.kg_candidates import typed_training_view

# (user, item, time): ids as text; users 'u1' < 'u2' < 'u3' < 'u4' are nodes 0-3, items 'a' < ... < 'h' nodes 4-11.
# 20 distinct pairs at times 1..20: train the first 17, valid the 18th, test the last 2 (85/5/10).
ROWS = [
    ("u1", "a"), ("u1", "b"), ("u2", "a"), ("u2", "c"), ("u3", "d"), ("u1", "c"), ("u2", "b"), ("u3", "e"),
    ("u3", "a"), ("u1", "d"), ("u2", "e"), ("u3", "f"), ("u1", "e"), ("u2", "f"), ("u3", "g"), ("u1", "f"),
    ("u2", "g"),
    ("u1", "g"),  # valid
    ("u4", "a"), ("u2", "h"),  # test: u4 is a new user
]  # fmt: skip


def write_ratings(tmp_path):
    path = tmp_path / "ratings.tsv"
    lines = ["user\titem\trating\ttime"] + [f"{u}\t{i}\t4\t{t}" for t, (u, i) in enumerate(ROWS, start=1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_ratings_file_reads_as_users_and_items_joined_by_one_relation(tmp_path):
    ds = load_dataset(DatasetSpec(str(write_ratings(tmp_path))))
    assert ds.name == "ratings" and ds.typed and ds.directed and ds.relations.names == ("user->item",)
    assert ds.node_ids.tolist() == ["u1", "u2", "u3", "u4", *"abcdefgh"]
    heads, tails = ds.relations.ends[0]
    assert heads.tolist() == [0, 1, 2, 3] and tails.tolist() == list(range(4, 12)) and ds.relations.sides == (2,)
    assert ds.splits["valid"].pos.tolist() == [[0, 10]] and ds.splits["test"].pos.tolist() == [[3, 4], [1, 11]]
    assert ds.protocols == ["kg"] and len(ds.splits["train"].pos) == 17
    # valid (u1, g) against every item u1 has in no train/valid pair: h only (u1 rated a-g); -1 pads the rest
    neg = ds.splits["valid"].neg["kg"]
    assert neg.shape == (1, 100, 2) and neg[0, 0].tolist() == [0, 11] and (neg[0, 1:] == -1).all()
    # test (u4, a): u4 rated nothing else -> b..h, 7 items; (u2, h): u2 rated a, b, c, e, f, g -> d only
    test = ds.splits["test"].neg["kg"]
    assert sorted(test[0, :7, 1].tolist()) == list(range(5, 12)) and (test[0, :7, 0] == 3).all()
    assert test[1, 0].tolist() == [1, 7] and (test[0, 7:] == -1).all() and (test[1, 1:] == -1).all()
    # test is sampled on train + valid (the temporal rule, as the peers score it): u1 -> g is in its triple CSR
    indptr, idx, _ = triple_csr(ds, "test")
    assert 10 in idx[indptr[0] : indptr[1]] and 10 not in triple_csr(ds, "train")[1][indptr[0] : indptr[1]]


def test_valid_and_test_negatives_are_the_peers_draw_on_a_larger_file(tmp_path):
    rng = np.random.default_rng(3)
    users, items = rng.integers(0, 30, 600), rng.integers(0, 400, 600)
    path = tmp_path / "r.csv"
    path.write_text("user,item,time\n" + "".join(f"{u},{i},{t}\n" for t, (u, i) in enumerate(zip(users, items))))
    ds = load_dataset(DatasetSpec(str(path)))
    g = read_user_item(path)
    peer = user_item_split(g)
    tr, va, te = (peer.splits[s].pos for s in ("train", "valid", "test"))
    u, i = g.nodes_of("user"), g.nodes_of("item")
    want = {
        "valid": eval_split(va, np.concatenate([tr, va]), g.num_nodes, u, i, peer.graph)["neg"],
        "test": eval_split(te, np.concatenate([tr, va, te]), g.num_nodes, u, i, peer.test_graph)["neg"],
    }
    for s in ("valid", "test"):
        neg = ds.splits[s].neg["kg"]
        assert np.array_equal(ds.splits[s].pos, peer.splits[s].pos) and np.array_equal(neg[..., 1], want[s])
        real = neg[..., 0] >= 0
        assert real.sum() > 0 and np.isin(neg[..., 0][real], u).all() and np.isin(neg[..., 1][real], i).all()
        assert (neg[..., 0][real] == np.broadcast_to(ds.splits[s].pos[:, :1], real.shape)[real]).all()


def test_training_negatives_keep_the_user_and_draw_another_item(tmp_path):
    ds = load_dataset(DatasetSpec(str(write_ratings(tmp_path))))
    view = typed_training_view(ds, CandidateConfig(neg_ratio=3), np.random.default_rng(0))
    neg = view.label == 0
    assert neg.sum() == 3 * 17 and (view.rel == 0).all()
    assert np.isin(view.src, range(4)).all() and np.isin(view.dst, range(4, 12)).all()  # never user-user nor item-item
    train = {tuple(p) for p in ds.splits["train"].pos.tolist()}
    assert not {(s, d) for s, d in zip(view.src[neg].tolist(), view.dst[neg].tolist())} & train  # filtered


def test_inputs_a_user_item_file_does_not_read_yet_are_refused_in_one_line(tmp_path):
    path = write_ratings(tmp_path)
    with pytest.raises(DatasetError, match=r"ratings.tsv: a user-item file takes no --directed yet; drop them"):
        load_dataset(DatasetSpec(str(path), directed=True))
    with pytest.raises(DatasetError, match=r"split by its time column; drop --split random"):
        load_dataset(DatasetSpec(str(path), split_kind="random"))


def test_pencil_scores_are_looked_up_by_their_pair_as_the_peers_rank_them(tmp_path):
    """bench.user_item_pencil maps each candidate id back to its (user, item): scores equal to the item's node id
    give PENCIL's row the ranks of the scorer 'item id' under the peers' own metrics."""
    from types import SimpleNamespace

    from bench.user_item_pencil import pair_scores
    from common.eval_scores import write_scores
    from common.shards import encode_queries
    from preprocess.kg_candidates import typed_protocol_candidates

    ds = load_dataset(DatasetSpec(str(write_ratings(tmp_path))))
    cands = typed_protocol_candidates(ds, "test")
    (tmp_path / "q.npz").write_bytes(encode_queries(cands.pos_cid, cands.neg_cid, cands.rel[cands.pos_cid]))
    (tmp_path / "run" / "scores").mkdir(parents=True)
    cid = np.arange(len(cands))[::-1]  # any order: looked up by id
    write_scores(tmp_path / "run" / "scores" / "test-kg.npz", cid, cands.dst[cid].astype(np.float32), 0)
    manifest = SimpleNamespace(eval={"test/kg": "q"}, queries_path=lambda q: tmp_path / f"{q}.npz")
    table = pair_scores(ds, manifest, str(tmp_path / "run"), "test")
    n = ds.num_nodes
    # test pairs (u4, a), (u2, h) and their negatives b..h of u4 and d of u2: each scored its item's node id
    want = {3 * n + i: float(i) for i in range(4, 12)} | {1 * n + 11: 11.0, 1 * n + 7: 7.0}
    assert table == want
