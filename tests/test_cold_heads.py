"""Cold-head training views (trainer/data/cold.py): exact contexts, edges and degrees on a hand-made user-item graph,
the dense form against the sparse one, the choice of links, and the flag."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from common.shards import Block
from tests.test_degree_input import ratings_set  # noqa: F401  (the hand-made ratings file as a shard set)
from trainer.config import config_from_args
from trainer.config_sections import ConfigError
from trainer.data.cold import cold_context, cold_links, hide_head_edges
from trainer.data.degrees import TrainDegrees, edge_key
from trainer.data.packing import BatchPacker
from trainer.model.degree import DegreeInput

# test_user_item_typed's training pairs: users u1 u2 u3 = 0 1 2, items a..g = 4..10 (u4 = 3 and h = 11 have none)
PAIRS = [
    (0, 4), (0, 5), (1, 4), (1, 6), (2, 7), (0, 6), (1, 5), (2, 8), (2, 4), (0, 7), (1, 8), (2, 9), (0, 8), (1, 9),
    (2, 10), (0, 9), (1, 10),
]  # fmt: skip
N = 12


def csr(pairs, both: bool):
    e = np.array(pairs + ([(b, a) for a, b in pairs] if both else []))
    e = e[np.lexsort((e[:, 1], e[:, 0]))]
    return np.searchsorted(e[:, 0], np.arange(N + 1)).astype(np.int64), e[:, 1].copy()


def packer(depth: int, dense: bool = False) -> BatchPacker:
    indptr, indices = csr(PAIRS, both=True)
    t_ptr, t_idx = csr(PAIRS, both=False)
    rel = (t_ptr, t_idx, np.zeros(len(t_idx), np.int64))
    return BatchPacker(indptr, indices, 8, min_density=0.0 if dense else 1e9, rel_graph=rel, relations=1, depth=depth)


# u1 -> g (the valid pair's triple) with context u1, g, a, u3, u2, and u3 -> b with context u3, b, u1
BLOCK = Block(
    *(np.array(x) for x in ([7, 8], [0, 2], [10, 5], [1.0, 0.0], [0, 5, 8], [0, 10, 4, 2, 1, 2, 5, 0], [0, 0]))
)


def test_a_cold_context_keeps_u_and_what_v_reaches_without_u_within_d_hops():
    indptr, indices = csr(PAIRS, both=True)
    mark = np.full(N, -1, np.int32)
    both = np.array([True, True])
    # d = 1: g's raters u3, u2 stay; a (u1's item, two hops from g) goes. u3 -> b: b's raters are u1 and u2, and
    # u1 is in the context only through b, so it stays (one hop from v)
    ptr, nodes = cold_context(indptr, indices, BLOCK.node_ptr, BLOCK.nodes, both, 1, mark)
    assert ptr.tolist() == [0, 4, 7] and nodes.tolist() == [0, 10, 2, 1, 2, 5, 0]
    # d = 2: g -> u3 -> a reaches a again; the order of the kept nodes is the context's
    ptr, nodes = cold_context(indptr, indices, BLOCK.node_ptr, BLOCK.nodes, both, 2, mark)
    assert nodes.tolist() == [0, 10, 4, 2, 1, 2, 5, 0]
    # a warm link is copied as it is; the scratch is left clean
    ptr, nodes = cold_context(indptr, indices, BLOCK.node_ptr, BLOCK.nodes, np.array([False, True]), 1, mark)
    assert ptr.tolist() == [0, 5, 8] and nodes.tolist() == BLOCK.nodes.tolist()
    assert (mark == -1).all()


def test_hiding_the_heads_edges_drops_only_cold_samples_rows_at_local_zero():
    ptr = np.array([0, 3, 3, 5])
    rows = np.array([[0, 2], [1, 2], [2, 0], [0, 1], [1, 2]])
    new_ptr, kept = hide_head_edges(ptr, rows, np.array([True, True, False]))
    assert new_ptr.tolist() == [0, 1, 1, 3] and kept.tolist() == [[1, 2], [0, 1], [1, 2]]
    new_ptr, kept = hide_head_edges(ptr, rows, np.array([False, False, True]))
    assert new_ptr.tolist() == [0, 3, 3, 4] and kept.tolist() == [[0, 2], [1, 2], [2, 0], [1, 2]]


def adjacency(batch) -> list:
    """Every sample's undirected and typed edges as sets of local pairs (from either form)."""
    cu = batch.cu_seqlens.long()
    if batch.dense:
        und = [{(i, j) for i, j in zip(*np.nonzero(a.numpy())) if i < j} for a in batch.adj_dense]
        typ = [{(k, i, j) for k, i, j in zip(*np.nonzero(a.numpy()))} for a in batch.adj_typed]
        return list(zip(und, typ))
    out = []
    for b in range(len(cu) - 1):
        lo, hi = int(cu[b]), int(cu[b + 1])
        local = batch.local_id
        und = {
            tuple(sorted((int(local[s]), int(local[d]))))
            for s, d in zip(batch.adj_src.tolist(), batch.adj_dst.tolist())
            if lo <= s < hi and lo <= d < hi and batch.role[d] == 0
        }
        typ = {
            (int(k), int(local[d]), int(local[s]))
            for s, d, k in zip(batch.typed_src.tolist(), batch.typed_dst.tolist(), batch.typed_kind.tolist())
            if lo <= s < hi and lo <= d < hi and batch.role[d] == 0
        }
        out.append((und, typ))
    return out


@pytest.mark.parametrize("dense", [False, True])
def test_a_cold_sample_shows_u_alone_and_the_dense_form_agrees(dense):
    warm = adjacency(packer(1, dense)(BLOCK))
    cold = packer(1, dense)(BLOCK, np.array([True, False]))
    # warm u1 -> g: u1 - a (local 0 - 2), a - u3, a - u2, g - u3, g - u2; typed: 2r = 0 (i -> j), 1 (j -> i)
    assert warm[0][0] == {(0, 2), (2, 3), (2, 4), (1, 3), (1, 4)}
    assert (0, 0, 2) in warm[0][1] and (1, 2, 0) in warm[0][1]
    # cold: context u1, g, u3, u2 and no edge at u1; the warm second sample is untouched
    assert cold.cold.tolist() == [True, False] and cold.node[:4].tolist() == [0, 10, 2, 1]
    got = adjacency(cold)
    assert got[0][0] == {(1, 2), (1, 3)}
    assert got[0][1] == {(0, 2, 1), (0, 3, 1), (1, 1, 2), (1, 1, 3)}  # u3 -> g and u2 -> g, (type, at, neighbour)
    assert got[1] == warm[1]


def test_the_degree_input_gives_a_cold_head_no_edges_and_leaves_the_rest():
    e = np.array(PAIRS)
    counts = np.stack([np.bincount(e[:, 0], minlength=N), np.bincount(e[:, 1], minlength=N)], axis=1)
    deg = DegreeInput(16, 2, 8).attach(TrainDegrees(counts, np.sort(edge_key(e[:, 0], e[:, 1], N, 0, 1)), 1))
    warm = deg.token_counts(packer(1)(BLOCK)).tolist()
    cold = deg.token_counts(packer(1)(BLOCK, np.array([True, False]))).tolist()
    # warm sample 0: u1 6 out, g 2 in, a 3 in, u3 5 out, u2 6 out, then the task tokens u1, g
    assert warm[:7] == [[6, 0], [0, 2], [0, 3], [5, 0], [6, 0], [6, 0], [0, 2]]
    assert cold[:6] == [[0, 0], [0, 2], [5, 0], [6, 0], [0, 0], [0, 2]]
    assert cold[6:] == warm[7:]  # u3 -> b, a corruption, is warm in both


def test_the_cold_links_are_a_seeded_share_of_candidate_ids():
    cid = np.arange(20_000)
    pick = cold_links(cid, 0.3, seed=5)
    assert abs(pick.mean() - 0.3) < 0.02 and np.array_equal(pick, cold_links(cid, 0.3, seed=5))
    assert np.array_equal(pick[7:12], cold_links(cid[7:12], 0.3, seed=5))  # a link's fate is its own
    assert (pick != cold_links(cid, 0.3, seed=6)).any()
    assert not cold_links(cid, 0.0, 5).any() and cold_links(cid, 1.0, 5).all()


def test_the_flag_sets_the_field_and_bad_values_are_refused():
    argv = ["--shards", "s", "--preset", "tiny", "--out", "o"]
    assert config_from_args([*argv, "--cold-heads", "0.5"]).data.cold_heads == 0.5
    assert config_from_args(argv).data.cold_heads is None
    with pytest.raises(ConfigError, match=r"--cold-heads: must be in \[0, 1\], got 1.5"):
        config_from_args([*argv, "--cold-heads", "1.5"])


def test_without_cold_links_the_batch_is_the_one_packed_before():
    a, b = packer(1)(BLOCK), packer(1)(BLOCK, np.array([False, False]))
    assert b.cold is None and adjacency(a) == adjacency(b) and torch.equal(a.node, b.node)


def test_the_training_loader_shows_cold_heads_every_epoch_alike_and_evaluation_never(ratings_set):  # noqa: F811
    from tests.test_trainer_data import cfg
    from trainer.data import loaders

    _, manifest = ratings_set
    try:
        seen = []
        for epoch in (0, 0, 1):  # the same epoch twice: the same links cold; another epoch: each link keeps its fate
            s = loaders.LoaderSettings(cfg(cold_heads=0.5, num_workers=0))
            batches = list(loaders.train_loader(manifest, epoch, s)[0])
            cold = {int(c): bool(k) for b in batches for c, k in zip(b.cid, b.cold if b.cold is not None else [])}
            for b in batches:  # a cold sample's u (its first token) has no message in or out
                first = b.cu_seqlens[:-1].long()[b.cold] if b.cold is not None else []
                assert not any(int(t) in set(b.adj_src.tolist()) | set(b.adj_dst.tolist()) for t in first)
            seen.append(cold)
            loaders.close_loaders()
        assert seen[0] == seen[1] and 0 < sum(seen[0].values()) < len(seen[0])
        assert all(seen[2][c] == seen[0][c] for c in seen[2].keys() & seen[0].keys())
        ev = loaders.eval_loader(manifest, "valid", "kg", loaders.LoaderSettings(cfg(cold_heads=0.5)))
        assert all(b.cold is None for b in ev)
    finally:
        loaders.close_loaders()
