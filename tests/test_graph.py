"""Exact-value tests of the CSR Graph on hand-built graphs, and every validation error it raises."""

from __future__ import annotations

import numpy as np
import pytest

from common.graph import Graph, GraphError, as_edge_array

# 0-1, 1-2 (given twice and reversed), 2-3, a self-loop on 3, node 4 isolated.
EDGES = [[1, 0], [1, 2], [2, 1], [1, 2], [3, 2], [3, 3]]


@pytest.fixture
def g() -> Graph:
    return Graph.from_edges(EDGES, num_nodes=5)


def test_from_edges_exact_csr(g):
    assert g.indptr.dtype == np.int64
    assert g.indptr.tolist() == [0, 1, 3, 5, 6, 6]
    assert g.indices.tolist() == [1, 0, 2, 1, 3, 2]  # both directions, sorted, no loop, no duplicate
    assert g.indices.dtype == np.int32
    assert g.num_nodes == 5 and g.num_edges == 3
    assert g.degree.tolist() == [1, 2, 2, 1, 0]
    assert g.neighbors(1).tolist() == [0, 2] and g.neighbors(4).tolist() == []
    assert g.x is None
    assert repr(g) == "Graph(nodes=5, edges=3, features=none)"


def test_num_nodes_inferred_from_max_id_or_features():
    assert Graph.from_edges([[0, 6]]).num_nodes == 7
    x = np.ones((9, 2))
    gx = Graph.from_edges([[0, 6]], x=x)
    assert gx.num_nodes == 9 and gx.x.dtype == np.float32 and gx.x.shape == (9, 2)
    assert repr(gx) == "Graph(nodes=9, edges=1, features=2)"


def test_integral_floats_and_empty_edges_accepted():
    assert Graph.from_edges(np.array([[0.0, 2.0]]), num_nodes=3).edge_array().tolist() == [[0, 2]]
    for empty in ([], np.zeros((0, 2), dtype=np.int64)):
        e = Graph.from_edges(empty, num_nodes=3)
        assert e.num_edges == 0 and e.indptr.tolist() == [0, 0, 0, 0]
        assert e.has_edge([0, 1], [1, 2]).tolist() == [False, False]
    only_loops = Graph.from_edges([[1, 1], [2, 2]])
    assert only_loops.num_nodes == 3 and only_loops.num_edges == 0


def test_edge_array_each_edge_once_sorted(g):
    ea = g.edge_array()
    assert ea.dtype == np.int64
    assert ea.tolist() == [[0, 1], [1, 2], [2, 3]]


def test_has_edge_matches_brute_force():
    rng = np.random.default_rng(0)
    n = 40
    edges = rng.integers(0, n, size=(150, 2))
    g = Graph.from_edges(edges, num_nodes=n)
    dense = np.zeros((n, n), dtype=bool)
    dense[edges[:, 0], edges[:, 1]] = dense[edges[:, 1], edges[:, 0]] = True
    np.fill_diagonal(dense, False)
    u, v = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    assert np.array_equal(g.has_edge(u.ravel(), v.ravel()).reshape(n, n), dense)
    assert np.array_equal(g.has_edge(u, v), dense)  # shape preserved
    assert g.num_edges == int(dense.sum() // 2)
    # Scalars and empty queries.
    assert bool(g.has_edge(int(edges[0, 0]), int(edges[0, 1]))) == bool(dense[edges[0, 0], edges[0, 1]])
    assert g.has_edge([], []).shape == (0,)


def test_with_edges_adds_and_keeps_features():
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    g = Graph.from_edges([[0, 1]], num_nodes=4, x=x)
    h = g.with_edges([[2, 3], [1, 0], [3, 3]])
    assert h.edge_array().tolist() == [[0, 1], [2, 3]]
    assert h.num_nodes == 4 and np.array_equal(h.x, x)
    assert g.edge_array().tolist() == [[0, 1]]  # original untouched
    with pytest.raises(GraphError, match="out of range for num_nodes=4"):
        g.with_edges([[0, 4]])
    with pytest.raises(GraphError, match=r"extra edges: expected shape \(E, 2\)"):
        g.with_edges([0, 1, 2])


def test_edited_equals_a_rebuild_of_the_edited_edge_list():
    rng = np.random.default_rng(0)
    for _ in range(100):
        n = int(rng.integers(2, 30))
        edges = rng.integers(0, n, (int(rng.integers(0, 60)), 2))
        g = Graph.from_edges(edges, num_nodes=n)
        n2 = n + int(rng.integers(0, 5))
        add = rng.integers(0, n2, (int(rng.integers(0, 10)), 2))
        remove = np.concatenate([rng.integers(0, n2, (3, 2)), g.edge_array()[:2]])
        kept = {tuple(e) for e in np.sort(np.concatenate([edges, add]), 1) if e[0] != e[1]}
        kept -= {tuple(e) for e in np.sort(remove, 1)}
        want = Graph.from_edges(np.array(sorted(kept), dtype=np.int64).reshape(-1, 2), num_nodes=n2)
        got = g.edited(add, remove, n2)
        assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
        assert got.indices.dtype == want.indices.dtype


def test_edited_refuses_fewer_nodes_and_out_of_range_ids(g):
    assert g.edited().fingerprint() == g.fingerprint()
    with pytest.raises(GraphError, match="below the graph's 5"):
        g.edited(num_nodes=4)
    with pytest.raises(GraphError, match="node id 5 is out of range for num_nodes=5"):
        g.edited(add=[[0, 5]])


def test_fingerprint_stable_and_sensitive(g):
    same = Graph.from_edges([[0, 1], [2, 1], [2, 3]], num_nodes=5)
    assert g.fingerprint() == same.fingerprint() and len(g.fingerprint()) == 16
    assert Graph.from_edges([[0, 1], [2, 1]], num_nodes=5).fingerprint() != g.fingerprint()  # edge removed
    assert Graph.from_edges([[0, 1], [2, 1], [2, 3]], num_nodes=6).fingerprint() != g.fingerprint()  # extra node
    x = np.zeros((5, 2))
    with_x = Graph.from_edges(EDGES, num_nodes=5, x=x)
    assert with_x.fingerprint() != g.fingerprint()
    x2 = x.copy()
    x2[4, 1] = 1.0
    assert Graph.from_edges(EDGES, num_nodes=5, x=x2).fingerprint() != with_x.fingerprint()


@pytest.mark.parametrize(
    "edges, match",
    [
        ([0, 1, 2], r"edges: expected shape \(E, 2\), got \(3,\)"),
        ([[0, 1, 2]], r"expected shape \(E, 2\), got \(1, 3\)"),
        (np.zeros((2, 2, 2), dtype=int), r"expected shape \(E, 2\), got \(2, 2, 2\)"),
        ([[0.5, 1.0]], "node ids must be integers, got dtype float64"),
        ([[np.nan, 1.0]], "node ids must be integers"),
        ([[np.inf, 1.0]], "node ids must be integers"),
        ([["a", "b"]], "node ids must be integers"),
        ([[True, False]], "node ids must be integers, got dtype bool"),
        ([[0, -1]], "negative node id -1"),
    ],
)
def test_edge_validation_errors(edges, match):
    with pytest.raises(GraphError, match=match):
        Graph.from_edges(edges, num_nodes=3)


def test_as_edge_array_names_the_argument():
    with pytest.raises(GraphError, match="^train edges: negative node id -2"):
        as_edge_array([[-2, 0]], "train edges")
    assert as_edge_array([[1, 2]]).dtype == np.int64


def test_graph_level_validation_errors():
    with pytest.raises(GraphError, match="empty graph: no edges and no num_nodes"):
        Graph.from_edges(np.zeros((0, 2), dtype=np.int64))
    with pytest.raises(GraphError, match="empty graph: num_nodes=0"):
        Graph.from_edges([[0, 1]], num_nodes=0)
    with pytest.raises(GraphError, match="empty graph: num_nodes=-3"):
        Graph.from_edges(np.zeros((0, 2), dtype=np.int64), num_nodes=-3)
    with pytest.raises(GraphError, match="node id 5 is out of range for num_nodes=5"):
        Graph.from_edges([[0, 5]], num_nodes=5)
    with pytest.raises(GraphError, match=r"node features: expected 5 rows \(one per node\), got shape \(4, 3\)"):
        Graph.from_edges([[0, 1]], num_nodes=5, x=np.zeros((4, 3)))
    with pytest.raises(GraphError, match=r"node features: expected 5 rows .* got shape \(5,\)"):
        Graph.from_edges([[0, 1]], num_nodes=5, x=np.zeros(5))
    with pytest.raises(GraphError, match="node id 3 is out of range for num_nodes=2"):
        Graph.from_edges([[0, 3]], x=np.zeros((2, 1)))  # node count taken from the features


@pytest.mark.parametrize("u, v", [([0], [5]), ([-1], [0]), ([5], [0]), ([0], [-1])])
def test_has_edge_out_of_range(g, u, v):
    with pytest.raises(GraphError, match=r"has_edge: node ids must lie in \[0, 5\)"):
        g.has_edge(u, v)
