"""Hop distances to the two targets (trainer/data/distances.py), the packer that carries them, the model's embedding
of them (--distance-features) and SEAL's DRNL labels built on them, every value worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench.seal import drnl_labels
from common.shards import Block
from trainer.config import config_from_args
from trainer.config_sections import ConfigError
from trainer.data.distances import pair_distances
from trainer.data.packing import BatchPacker, pack_samples
from trainer.model.pencil import ModelConfig, Pencil, distance_rows
from trainer.resolve import resolve

# Link A: u=0, v=1; path u-2-3-v, 4 hangs off 2, 5 is isolated, 6 hangs off v only.
EDGES_A = [(0, 2), (2, 3), (3, 1), (2, 4), (1, 6)]
# du never enters v, dv never enters u; u and v carry the u-v distance without the target edge (0-2-3-1: 3).
DIST_A = [(0, 3), (3, 0), (1, 2), (2, 1), (2, 3), (-1, -1), (-1, 1)]
# Link B: a common neighbour (u-2-v). Link C: u and v alone, no edge.
EDGES_B = [(2, 0), (1, 2)]
DIST_B = [(0, 2), (2, 0), (1, 1)]
DIST_C = [(0, -1), (-1, 0)]


def _links():
    sizes = [7, 3, 2]
    edges = [np.array(EDGES_A), np.array(EDGES_B), np.zeros((0, 2), np.int64)]
    node_ptr = np.concatenate([[0], np.cumsum(sizes)])
    edge_ptr = np.concatenate([[0], np.cumsum([len(e) for e in edges])])
    return node_ptr, edge_ptr, np.concatenate(edges), sizes, edges


def test_distances_from_edges_by_hand():
    node_ptr, edge_ptr, edges, _, _ = _links()
    assert pair_distances(node_ptr, edge_ptr, edges).tolist() == [list(d) for d in DIST_A + DIST_B + DIST_C]


def test_distances_from_the_dense_form_equal_the_edge_form_and_ignore_the_target_entry():
    node_ptr, _, _, _, edges = _links()
    adj = np.zeros((3, 7, 7), np.uint8)
    for b, e in enumerate(edges):
        adj[b, e[:, 0], e[:, 1]] = adj[b, e[:, 1], e[:, 0]] = 1
    adj[:, 0, 1] = adj[:, 1, 0] = 1  # a set target entry must not shorten anything
    assert pair_distances(node_ptr, dense=adj).tolist() == [list(d) for d in DIST_A + DIST_B + DIST_C]


def test_a_path_only_through_the_other_target_does_not_count():
    # u-2-v and 3 hangs off v: du(3) would be 2 through v; DRNL's convention says no path (-1)
    got = pair_distances(np.array([0, 4]), np.array([0, 3]), np.array([[0, 2], [2, 1], [1, 3]]))
    assert got.tolist() == [[0, 2], [2, 0], [1, 1], [-1, 1]]


def test_distances_refuse_bad_input():
    with pytest.raises(ValueError, match="either as edges"):
        pair_distances(np.array([0, 2]))
    with pytest.raises(ValueError, match="at least its two targets"):
        pair_distances(np.array([0, 1]), np.array([0, 0]), np.zeros((0, 2), np.int64))


def test_drnl_labels_by_hand():
    node_ptr, edge_ptr, edges, _, _ = _links()
    # A: 2 and 3 (1, 2) / (2, 1): d = 3 -> 1 + 1 + 1 * 1 = 3; 4 (2, 3): d = 5 -> 1 + 2 + 2 * 2 = 7; 5, 6: 0.
    # B: the common neighbour (1, 1): d = 2 -> 1 + 1 + 1 * 0 = 2. u and v are always 1.
    assert drnl_labels(node_ptr, edge_ptr, edges).tolist() == [1, 1, 3, 3, 7, 0, 0] + [1, 1, 2] + [1, 1]


def test_pack_spreads_distances_to_tokens_task_tokens_copy_their_endpoint():
    _, _, _, sizes, edges = _links()
    samples = [
        {"cid": i, "label": 1.0, "nodes": np.arange(100 * i, 100 * i + n), "edges": e}
        for i, (n, e) in enumerate(zip(sizes, edges))
    ]
    for dense in (False, True):
        b = pack_samples(samples, n_max=8, dense=dense, distances=True)
        want = DIST_A + [DIST_A[0], DIST_A[1]] + DIST_B + [DIST_B[0], DIST_B[1]] + DIST_C + DIST_C
        assert b.dist.tolist() == [list(d) for d in want]
    assert pack_samples(samples, n_max=8).dist is None


def test_batch_packer_induces_then_measures_on_a_graph():
    # graph 0-1 (the target), 0-2, 2-3, 3-1, 4-1: link (0, 1) sees the 4-cycle 0-2-3-1 and the leaf 4
    pairs = np.array([[0, 1], [0, 2], [2, 3], [3, 1], [4, 1]])
    both = np.concatenate([pairs, pairs[:, ::-1]])
    order = np.lexsort((both[:, 1], both[:, 0]))
    indptr = np.searchsorted(both[order, 0], np.arange(6)).astype(np.int64)
    indices = both[order, 1].astype(np.int64)
    block = Block(
        np.array([5]),
        np.array([0]),
        np.array([1]),
        np.array([1.0], np.float32),
        np.array([0, 5]),
        np.array([0, 1, 2, 3, 4]),
    )
    for density in (2.0, 0.0):  # the sparse and the dense form
        b = BatchPacker(indptr, indices, 6, min_density=density, distances=True)(block)
        assert b.dense == (density == 0.0)
        assert b.dist.tolist() == [[0, 3], [3, 0], [1, 2], [2, 1], [-1, 1], [0, 3], [3, 0]]
    assert BatchPacker(indptr, indices, 6)(block).dist is None


def test_distance_rows_clip_and_give_no_path_its_own_row():
    dist = torch.tensor([[0, 3], [3, 0], [1, 2], [-1, 1], [-1, -1], [7, 2]])
    # D = 2: width 4; 3 and 7 clip to 2, -1 becomes 3
    assert distance_rows(dist, 2).tolist() == [0 * 4 + 2, 2 * 4 + 0, 1 * 4 + 2, 3 * 4 + 1, 3 * 4 + 3, 2 * 4 + 2]


def test_model_adds_one_learned_vector_per_distance_pair_to_h0():
    _, _, _, sizes, edges = _links()
    samples = [
        {"cid": i, "label": 1.0, "nodes": np.arange(100 * i, 100 * i + n), "edges": e}
        for i, (n, e) in enumerate(zip(sizes, edges))
    ]
    batch = pack_samples(samples, n_max=8, distances=True)
    torch.manual_seed(0)
    plain = Pencil(ModelConfig(n_max=8, hidden=16, layers=1, heads=2, ffn=32, dropout=0.0))
    torch.manual_seed(0)
    model = Pencil(ModelConfig(n_max=8, hidden=16, layers=1, heads=2, ffn=32, dropout=0.0, distances=2))
    assert model.distance.weight.shape == (16, 16) and plain.distance is None
    with torch.no_grad():
        delta = model.embed(batch) - plain.embed(batch)  # W0 is drawn first, so both models share it
    rows = distance_rows(batch.dist, 2)
    torch.testing.assert_close(delta, model.distance.weight[rows].detach(), rtol=0, atol=1e-6)
    assert model(batch).shape == (3,)
    with pytest.raises(ValueError, match="carries none"):
        model(pack_samples(samples, n_max=8))


def test_distance_features_flag_reaches_model_and_loader():
    cfg = resolve(
        config_from_args(["--shards", "s", "--preset", "tiny", "--out", "o", "--distance-features", "3"]),
        n_max=12,
        world_size=1,
    )
    assert cfg.model.distances == 3 and cfg.data.distances is True
    off = resolve(config_from_args(["--shards", "s", "--preset", "tiny", "--out", "o"]), n_max=12, world_size=1)
    assert off.model.distances is None and off.data.distances is False
    with pytest.raises(ConfigError, match="--distance-features"):
        config_from_args(["--shards", "s", "--preset", "tiny", "--out", "o", "--distance-features", "-1"])
    with pytest.raises(ValueError, match="distances must be an integer >= 0"):
        ModelConfig(n_max=8, hidden=16, layers=1, heads=2, ffn=32, distances=-2)


def test_training_with_distance_features_end_to_end(tmp_path):
    """Through the real loader (worker processes, warmed before they fork): the batches carry distances, the model
    learns above chance, the checkpoint holds the embedding, and every evaluation's scores are kept on request."""
    from common.eval_scores import epoch_scores_path, read_scores
    from tests.chance import chance_mrr_of_set
    from tests.test_trainer_data import make_shard_set
    from trainer.checkpoint import load
    from trainer.config import config_for
    from trainer.train import run

    torch.set_num_threads(1)
    shards = make_shard_set(tmp_path / "shards", shard_links=(64, 32), eval_links=150)
    summary = run(
        config_for(
            "tiny",
            str(shards),
            str(tmp_path / "run"),
            epochs=3,
            device="cpu",
            progress=False,
            save_epoch_scores=True,
            data={"num_workers": 1},
            model={"distances": 3},
        )
    )
    assert summary["test"]["mrr"] > chance_mrr_of_set(shards)
    assert summary["config"]["data"]["distances"] is True and summary["config"]["model"]["distances"] == 3
    assert load(tmp_path / "run" / "best.pt")["model"]["distance.weight"].shape[0] == 25
    for epoch in range(3):
        cid, score, at = read_scores(epoch_scores_path(tmp_path / "run", "valid", "original", epoch))
        assert at == epoch and len(cid) == len(score) > 0


def test_scoring_pairs_with_a_distance_model():
    """pipelines.score packs the distances a --distance-features checkpoint reads (the one scoring engine)."""
    from common.datasets import DatasetSpec, load_dataset
    from pipelines.score import Scoring, score_pairs

    ds = load_dataset(DatasetSpec("citeseer"))
    torch.manual_seed(0)
    model = Pencil(ModelConfig(n_max=12, hidden=16, layers=1, heads=2, ffn=32, dropout=0.0, distances=3)).eval()
    pairs = np.asarray(ds.splits["test"].pos[:20], dtype=np.int64)
    args = (model, ds.graph, pairs, Scoring((1, 5), 12, 0, 1, 8), torch.device("cpu"))
    got = score_pairs(*args)
    assert got.shape == (1, 20) and np.isfinite(got).all()
    np.testing.assert_array_equal(got, score_pairs(*args))
