"""Directed heuristics: exact values on a hand-drawn 5-node directed graph, and the symmetric-graph reductions.

The graph (out-neighbours; total degree = in + out):
    0 -> 1, 2        deg 3
    1 -> 2, 3        deg 5
    2 -> 1, 3        deg 4
    3 -> 0           deg 4
    4 -> 1, 3        deg 2
"""

from __future__ import annotations

from math import log
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from common.graph import Graph
from common.heuristics import common_neighbors, resource_allocation
from common.heuristics_directed import (
    DIRECTED,
    DirectedHeuristicError,
    directed_adamic_adar,
    directed_common_neighbors,
    directed_resource_allocation,
    reverse_edge,
)

EDGES = np.array([[0, 1], [0, 2], [1, 2], [1, 3], [2, 1], [2, 3], [3, 0], [4, 1], [4, 3]])


def out_csr(edges: np.ndarray, n: int) -> SimpleNamespace:
    a = sp.csr_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    return SimpleNamespace(indptr=a.indptr, indices=a.indices)


OUT = out_csr(EDGES, 5)
# (pair, dCN, dAA, dRA, reverse), each worked out by hand from the picture above
CASES = [
    ((0, 3), 2, 1 / log(5) + 1 / log(4), 1 / 5 + 1 / 4, 1),  # 0 -> 1 -> 3, 0 -> 2 -> 3; 3 -> 0 exists
    ((3, 0), 0, 0.0, 0.0, 0),  # 3's only out-neighbour is 0 itself; 0 -> 3 is no edge
    ((0, 1), 1, 1 / log(4), 1 / 4, 0),  # via 2
    ((1, 0), 1, 1 / log(4), 1 / 4, 1),  # via 3; 0 -> 1 exists
    ((4, 2), 1, 1 / log(5), 1 / 5, 0),  # via 1
    ((2, 4), 0, 0.0, 0.0, 0),  # 4 has no in-neighbour
    ((3, 1), 1, 1 / log(3), 1 / 3, 1),  # via 0; 1 -> 3 exists
]


@pytest.mark.parametrize(
    "col, fn",
    [(1, directed_common_neighbors), (2, directed_adamic_adar), (3, directed_resource_allocation), (4, reverse_edge)],
)
def test_hand_computed_values(col, fn):
    pairs = np.array([c[0] for c in CASES])
    want = np.array([c[col] for c in CASES], dtype=np.float64)
    np.testing.assert_allclose(fn(None, pairs, out=OUT), want, rtol=1e-12)
    # a block of one pair at a time gives the same numbers
    np.testing.assert_allclose(fn(None, pairs, out=OUT, batch=1), want, rtol=1e-12)


def test_order_matters():
    """The point of directed scores: (u, v) and (v, u) differ."""
    s = directed_common_neighbors(None, np.array([[0, 3], [3, 0]]), out=OUT)
    assert s[0] == 2 and s[1] == 0


def test_symmetric_graph_reduces_to_undirected():
    """With every edge both ways, dCN is CN and dRA is RA / 2 (total degree = twice the degree)."""
    und = Graph.from_edges(EDGES, num_nodes=5)
    both = und.edge_array()
    sym = out_csr(np.concatenate([both, both[:, ::-1]]), 5)
    pairs = np.stack(np.meshgrid(np.arange(5), np.arange(5), indexing="ij"), axis=-1).reshape(-1, 2)
    np.testing.assert_allclose(directed_common_neighbors(None, pairs, out=sym), common_neighbors(und, pairs))
    np.testing.assert_allclose(directed_resource_allocation(None, pairs, out=sym), resource_allocation(und, pairs) / 2)


def test_registry_and_bad_pairs():
    assert set(DIRECTED) == {"dcn", "daa", "dra", "reverse"}
    with pytest.raises(DirectedHeuristicError, match=r"\[0, 5\)"):
        reverse_edge(None, np.array([[0, 5]]), out=OUT)
    with pytest.raises(DirectedHeuristicError, match="shape"):
        directed_common_neighbors(None, np.array([0, 1]), out=OUT)


def test_split_scores_keep_each_pair_in_its_order():
    """The report's rows score (0, 3) and (3, 0) apart: the undirected dedup (min, max) gave both one score."""
    from common.datasets.base import LinkDataset, Split
    from common.graph import DiGraph
    from common.heuristics import split_scores

    out = DiGraph.from_edges(EDGES, 5)
    pos = np.array([[0, 3], [1, 0]])
    neg = np.array([[3, 0], [0, 1], [2, 4]])  # (3, 0) and (0, 1): the positives reversed
    ds = LinkDataset("hand", out.undirected(), {"test": Split(pos, {"original": neg})}, out_graphs={"train": out})
    got = split_scores(ds, "test", ["original"], ["cn", "dcn", "reverse"])["original"]
    np.testing.assert_array_equal(got["dcn"][0], [2, 1])
    np.testing.assert_array_equal(got["dcn"][1], [0, 1, 0])
    np.testing.assert_array_equal(got["reverse"][0], [1, 1])
    np.testing.assert_array_equal(got["reverse"][1], [0, 0, 0])
    assert got["cn"][0][0] == got["cn"][1][0]  # the undirected row: one score for both orders


def test_report_rows_carry_reverse_accuracy_only_when_directed():
    """pencil run's heuristic rows of a directed run: the reverse set's accuracy beside MRR / AUC, as the model's
    row; a table shows that column only when a row has it (an undirected report is as before)."""
    from pipelines.core.results import markdown
    from pipelines.run import heuristic_rows

    run = SimpleNamespace(source=SimpleNamespace(split_kind=None))
    ds = SimpleNamespace(name="hand", temporal=False, own=True)
    scores = {"reverse": (np.array([1.0, 0.0]), np.array([0.0, 1.0, 0.0]))}
    reverse = {"reverse": (np.array([1.0, 0.0, 0.0]), np.array([[0.0], [0.0], [1.0]]))}  # above, tied, below
    rows = heuristic_rows(run, ds, "original", scores, reverse)
    assert rows[0]["reverse_acc"] == (50.0, 0.0)  # (1 + 0.5 + 0) / 3
    assert "reverse_acc" in markdown(rows).splitlines()[0]
    plain = heuristic_rows(run, ds, "original", scores)
    assert "reverse_acc" not in plain[0] and "reverse_acc" not in markdown(plain)
