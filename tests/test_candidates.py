"""Training views and evaluation candidate sets (preprocess/candidates.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from common.graph import Graph
from preprocess.candidates import eval_candidates, sample_negatives, training_positives, training_view
from preprocess.config import CandidateConfig


def graph_and_pos(num_nodes=60, edges=200, seed=0):
    rng = np.random.default_rng(seed)
    pos = rng.integers(0, num_nodes, (edges, 2))
    return Graph.from_edges(pos, num_nodes=num_nodes), pos


def test_no_training_negative_is_a_training_edge_or_self_loop():
    g, _ = graph_and_pos(30, 150)  # dense: many rejections
    neg = sample_negatives(g, 5000, np.random.default_rng(1))
    assert neg.shape == (5000, 2)
    assert not np.any(neg[:, 0] == neg[:, 1])
    assert not np.any(g.has_edge(neg[:, 0], neg[:, 1]))
    assert neg.min() >= 0 and neg.max() < 30


def test_negatives_fail_clearly_on_a_complete_graph():
    k = np.array([[i, j] for i in range(4) for j in range(4) if i < j])
    with pytest.raises(ValueError, match="no non-edges"):
        sample_negatives(Graph.from_edges(k, num_nodes=4), 1, np.random.default_rng(0))


def test_training_view_counts_labels_and_self_loops():
    g, pos = graph_and_pos()
    pos = np.concatenate([pos, [[3, 3]]])
    p = len(training_positives(pos))
    view = training_view(pos, g, CandidateConfig(percent=100.0, neg_ratio=2), np.random.default_rng(0))
    assert len(view) == 3 * p
    assert view.label.sum() == p
    is_pos = view.label == 1
    assert not np.any(view.src[is_pos] == view.dst[is_pos])
    assert np.all(g.has_edge(view.src[is_pos], view.dst[is_pos]))
    assert not np.any(g.has_edge(view.src[~is_pos], view.dst[~is_pos]))
    # Shuffled: the runs of equal labels are as many as in a random order (Wald-Wolfowitz runs test; a
    # [pos..., neg...] view has 2 runs, an alternating one far too many), and the positives left their input order.
    n_pos, n_neg = p, 2 * p
    runs = 1 + int(np.count_nonzero(np.diff(view.label)))
    mean = 1 + 2 * n_pos * n_neg / (n_pos + n_neg)
    var = (mean - 1) * (mean - 2) / (n_pos + n_neg - 1)
    assert abs(runs - mean) < 4 * np.sqrt(var), (runs, mean)
    in_order = training_positives(pos)
    assert not np.array_equal(np.stack([view.src[is_pos], view.dst[is_pos]], 1), in_order)


@pytest.mark.parametrize("seed", range(5))
def test_training_view_order_is_random_for_every_seed(seed):
    """The runs test above, over seeds: where the positives land is uniform (each third of the view holds about
    a third of them), so a view that keeps positives first, or last, fails."""
    g, pos = graph_and_pos(seed=seed)
    view = training_view(pos, g, CandidateConfig(percent=100.0, neg_ratio=2), np.random.default_rng(seed))
    where = np.flatnonzero(view.label == 1) / len(view)
    counts = np.histogram(where, bins=3, range=(0, 1))[0]
    expected = len(where) / 3
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 18.4, counts  # chi-square, 2 degrees of freedom: p < 1e-4


def test_percent_is_a_seeded_subset_per_view():
    g, pos = graph_and_pos()
    a = training_view(pos, g, CandidateConfig(percent=50.0, neg_ratio=1), np.random.default_rng(7))
    b = training_view(pos, g, CandidateConfig(percent=50.0, neg_ratio=1), np.random.default_rng(7))
    c = training_view(pos, g, CandidateConfig(percent=50.0, neg_ratio=1), np.random.default_rng(8))
    p = len(training_positives(pos))
    assert a.label.sum() == round(p * 0.5)
    assert np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst)
    key = lambda v: set(zip(v.src[v.label == 1].tolist(), v.dst[v.label == 1].tolist()))
    assert key(a) != key(c)  # independent views pick different halves


def test_original_protocol_shared_negatives():
    pos = np.array([[0, 1], [2, 3]])
    neg = np.array([[4, 5], [6, 7], [8, 9]])
    c = eval_candidates(pos, neg, canonical=False)
    assert c.kind == "shared"
    assert c.pos_cid.tolist() == [0, 1] and c.neg_cid.tolist() == [2, 3, 4]
    assert c.label.tolist() == [1, 1, 0, 0, 0]
    assert np.array_equal(np.stack([c.src, c.dst], 1)[c.neg_cid], neg)


def test_heart_protocol_dedups_canonical_pairs():
    pos = np.array([[0, 1], [2, 3]])
    neg = np.array([[[5, 4], [6, 7], [4, 5]], [[7, 6], [8, 9], [4, 5]]])
    c = eval_candidates(pos, neg, canonical=True)
    assert c.kind == "per_positive" and c.neg_cid.shape == (2, 3)
    assert len(c) == 2 + 3  # {4,5}, {6,7}, {8,9}
    pairs = np.stack([c.src, c.dst], 1)
    assert np.array_equal(pairs[c.neg_cid], np.sort(neg, axis=2))
    assert c.label[c.neg_cid].sum() == 0 and c.label[c.pos_cid].tolist() == [1, 1]


def test_per_positive_ogb_negatives_keep_direction():
    pos = np.array([[0, 1], [0, 2]])
    neg = np.array([[[0, 5], [5, 0]], [[0, 5], [0, 6]]])  # citation2-style: 2 per source
    c = eval_candidates(pos, neg, canonical=False)
    pairs = np.stack([c.src, c.dst], 1)
    assert np.array_equal(pairs[c.neg_cid], neg)
    assert len(c) == 2 + 3


def test_bad_negative_shape_is_rejected():
    with pytest.raises(ValueError, match="shape"):
        eval_candidates(np.array([[0, 1]]), np.zeros((2, 3, 2), dtype=int), canonical=True)


# ---------------------------------------------------------------------------- degenerate view sizes
def test_distinct_non_edges_counts_unordered_pairs():
    from preprocess.candidates import distinct_non_edges

    k4 = np.array([[i, j] for i in range(4) for j in range(4) if i < j])
    assert distinct_non_edges(Graph.from_edges(k4, num_nodes=4)) == 0
    assert distinct_non_edges(Graph.from_edges(k4[:2], num_nodes=5)) == 5 * 4 // 2 - 2


def test_negatives_beyond_the_distinct_non_edges_are_refused_with_the_numbers():
    from preprocess.candidates import check_view_size, distinct_non_edges
    from preprocess.config import ConfigError

    g, pos = graph_and_pos(100, 255)
    available = distinct_non_edges(g)
    num_pos = len(training_positives(pos))
    with pytest.raises(
        ConfigError,
        match=rf"--neg-ratio 1000: {num_pos * 1000:,} negatives per view but the graph "
        rf"has only {available:,} distinct non-edges.*--neg-ratio <= {available // num_pos}",
    ):
        check_view_size(num_pos, 100.0, 1000, g)
    check_view_size(num_pos, 100.0, available // num_pos, g)  # the largest ratio it suggests is accepted


def test_degenerate_views_are_named_in_warnings(caplog):
    from preprocess.candidates import check_view_size, distinct_non_edges

    g, pos = graph_and_pos(2000, 4000)
    num_pos = len(training_positives(pos))
    with caplog.at_level("WARNING", logger="preprocess.candidates"):
        check_view_size(num_pos, 100.0, 1, g)
    assert caplog.records == []  # an ordinary view says nothing
    with caplog.at_level("WARNING", logger="preprocess.candidates"):
        check_view_size(num_pos, 100.0, 0, g)
        check_view_size(num_pos, 0.001, 1, g)
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("--neg-ratio 0: training views hold only positives")
    assert messages[1].startswith(f"--percent 0.001: 1 training positive(s) per view (of {num_pos})")
    caplog.clear()
    small, small_pos = graph_and_pos(100, 100)
    n = len(training_positives(small_pos))
    ratio = distinct_non_edges(small) // n  # allowed, but a large share of all non-edges: many repeats
    with caplog.at_level("WARNING", logger="preprocess.candidates"):
        check_view_size(n, 100.0, ratio, small)
    assert re.match(
        rf"--neg-ratio {ratio}: [\d,]+ negatives per view from [\d,]+ distinct non-edges: about \d+% "
        "are repeats",
        caplog.records[0].getMessage(),
    )
