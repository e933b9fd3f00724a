"""Heuristics against dense brute force on small random graphs (isolated nodes and u == v included)."""

from __future__ import annotations

import numpy as np
import pytest

from common.graph import Graph
from common.heuristics import (
    HEURISTICS,
    HeuristicError,
    adamic_adar,
    common_neighbors,
    katz,
    pagerank,
    pagerank_pair,
    ranking_scores,
    resource_allocation,
    score_pairs,
    shortest_path,
)


def random_graph(seed: int, n: int = 30, m: int = 45, isolated: int = 4) -> Graph:
    """Random graph whose last `isolated` nodes have no edges (and usually several components)."""
    rng = np.random.default_rng(seed)
    edges = rng.integers(0, n - isolated, (m, 2))
    return Graph.from_edges(edges, num_nodes=n)


def dense(graph: Graph) -> np.ndarray:
    a = np.zeros((graph.num_nodes, graph.num_nodes))
    for u, v in graph.edge_array():
        a[u, v] = a[v, u] = 1.0
    return a


def all_pairs(n: int) -> np.ndarray:
    """Every ordered pair, u == v included."""
    return np.stack(np.meshgrid(np.arange(n), np.arange(n), indexing="ij"), axis=-1).reshape(-1, 2)


GRAPHS = [random_graph(s) for s in range(3)]


@pytest.mark.parametrize("g", GRAPHS)
def test_local_overlap_scores_match_dense(g):
    a = dense(g)
    deg = a.sum(1)
    with np.errstate(divide="ignore"):
        w_aa = np.where(deg > 1, 1.0 / np.log(np.maximum(deg, 2)), 0.0)
        w_ra = np.where(deg > 0, 1.0 / np.maximum(deg, 1), 0.0)
    p = all_pairs(g.num_nodes)
    u, v = p[:, 0], p[:, 1]
    np.testing.assert_allclose(common_neighbors(g, p), (a @ a)[u, v])
    np.testing.assert_allclose(adamic_adar(g, p), (a @ np.diag(w_aa) @ a)[u, v])
    np.testing.assert_allclose(resource_allocation(g, p), (a @ np.diag(w_ra) @ a)[u, v])


def test_overlap_degenerate_pairs():
    # path 0-1-2, node 3 isolated
    g = Graph.from_edges([[0, 1], [1, 2]], num_nodes=4)
    p = np.array([[0, 2], [1, 1], [0, 0], [3, 3], [3, 0]])
    assert common_neighbors(g, p).tolist() == [1.0, 2.0, 1.0, 0.0, 0.0]  # CN(u, u) = deg(u)
    # AA(0, 0): the only neighbour (1) has degree 2; AA(1, 1): neighbours 0, 2 have degree 1 -> weight 0
    np.testing.assert_allclose(adamic_adar(g, p), [1 / np.log(2), 0.0, 1 / np.log(2), 0.0, 0.0])
    np.testing.assert_allclose(resource_allocation(g, p), [0.5, 2.0, 0.5, 0.0, 0.0])


@pytest.mark.parametrize("beta", [0.005, 0.05])
@pytest.mark.parametrize("g", GRAPHS)
def test_katz_matches_matrix_inverse(g, beta):
    a = dense(g)
    n = g.num_nodes
    want = np.linalg.inv(np.eye(n) - beta * a) - np.eye(n)  # sum_{l>=1} (beta A)^l
    p = all_pairs(n)
    np.testing.assert_allclose(katz(g, p, beta=beta), want[p[:, 0], p[:, 1]], rtol=1e-9, atol=1e-15)


def test_katz_value_independent_of_orientation_and_batch():
    g = GRAPHS[0]
    p = all_pairs(g.num_nodes)
    full = katz(g, p, beta=0.05)
    np.testing.assert_array_equal(full, katz(g, p[:, ::-1], beta=0.05))  # bit-identical, symmetric
    np.testing.assert_array_equal(full, katz(g, p, beta=0.05, batch=3))
    np.testing.assert_array_equal(full[:50], katz(g, p[:50], beta=0.05))


def test_katz_rejects_bad_beta_and_warns_when_truncated(caplog):
    g = Graph.from_edges([[0, 1], [1, 2], [2, 0]], num_nodes=3)  # lambda_max = 2
    with pytest.raises(HeuristicError, match="beta"):
        katz(g, [[0, 1]], beta=1.5)
    with caplog.at_level("WARNING"):
        katz(g, [[0, 1]], beta=0.6, max_iter=5)
    assert "not converged" in caplog.text


def floyd_warshall(a: np.ndarray) -> np.ndarray:
    d = np.where(a > 0, 1.0, np.inf)
    np.fill_diagonal(d, 0.0)
    for k in range(len(a)):
        d = np.minimum(d, d[:, [k]] + d[[k], :])
    return d


@pytest.mark.parametrize("g", GRAPHS)
def test_shortest_path_matches_floyd_warshall(g):
    want = floyd_warshall(dense(g))
    p = all_pairs(g.num_nodes)
    got = shortest_path(g, p)
    np.testing.assert_array_equal(got, want[p[:, 0], p[:, 1]])
    assert np.isinf(got).any()  # isolated nodes are disconnected
    np.testing.assert_array_equal(shortest_path(g, p, batch=2), got)
    cut = shortest_path(g, p, max_dist=2)
    np.testing.assert_array_equal(cut, np.where(got <= 2, got, np.inf))


def dense_pagerank(a: np.ndarray, alpha: float) -> np.ndarray:
    """Solve p = alpha (A D^-1 p + dangling mass / n) + (1 - alpha) / n directly."""
    n = len(a)
    deg = a.sum(1)
    dangling = (deg == 0).astype(float)
    walk = a / np.where(deg > 0, deg, 1.0)[None, :]  # column j = transitions out of j
    m = walk + np.outer(np.ones(n), dangling) / n
    return np.linalg.solve(np.eye(n) - alpha * m, np.full(n, (1 - alpha) / n))


@pytest.mark.parametrize("g", GRAPHS)
def test_pagerank_matches_dense_solve(g):
    want = dense_pagerank(dense(g), 0.85)
    got = pagerank(g, alpha=0.85)
    np.testing.assert_allclose(got, want, rtol=1e-8)
    assert got.sum() == pytest.approx(1.0)
    p = all_pairs(g.num_nodes)
    np.testing.assert_allclose(pagerank_pair(g, p), want[p[:, 0]] * want[p[:, 1]], rtol=1e-8)


@pytest.mark.parametrize("fn", [common_neighbors, adamic_adar, resource_allocation])
def test_overlap_batching_gives_identical_results(fn):
    g = GRAPHS[1]
    p = all_pairs(g.num_nodes)
    np.testing.assert_array_equal(fn(g, p, batch=7), fn(g, p))


def test_score_pairs_shapes_and_errors():
    g = GRAPHS[0]
    rng = np.random.default_rng(9)
    pairs = rng.integers(0, g.num_nodes, (4, 5, 2))
    for name in HEURISTICS:
        out = score_pairs(name, g, pairs)
        assert out.shape == (4, 5)
        np.testing.assert_array_equal(out.ravel(), score_pairs(name, g, pairs.reshape(-1, 2)))
    assert score_pairs("cn", g, np.zeros((0, 2), dtype=np.int64)).shape == (0,)
    with pytest.raises(HeuristicError, match="available"):
        score_pairs("jaccard", g, pairs)
    with pytest.raises(HeuristicError, match="lie in"):
        score_pairs("cn", g, [[0, g.num_nodes]])


def test_ranking_scores_orients_spd():
    g = Graph.from_edges([[0, 1], [1, 2]], num_nodes=4)
    p = np.array([[0, 1], [0, 2], [0, 3]])
    assert ranking_scores("spd", g, p).tolist() == [-1.0, -2.0, -np.inf]  # closer ranks higher
    assert ranking_scores("cn", g, p).tolist() == score_pairs("cn", g, p).tolist()
