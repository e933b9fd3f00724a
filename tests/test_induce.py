"""common.induce against a brute-force reference: the induced graph of random node sets on random
graphs, target edge removed, u == v candidates, both output forms and the bit-matrix path."""

import numpy as np
import pytest

from common.induce import BitMatrix, Inducer


def random_graph(n: int, p: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, indices, dense 0/1 matrix): undirected, no self-loops, sorted rows."""
    rng = np.random.default_rng(seed)
    a = np.triu(rng.random((n, n)) < p, 1)
    a = (a | a.T).astype(np.uint8)
    indptr = np.concatenate([[0], np.cumsum(a.sum(1))]).astype(np.int64)
    return indptr, np.nonzero(a)[1].astype(np.int32), a


def random_links(n: int, sizes, seed: int, self_loop_every: int = 0):
    rng = np.random.default_rng(seed)
    nodes = []
    for b, k in enumerate(sizes):
        ids = rng.choice(n, k, replace=False)
        if self_loop_every and b % self_loop_every == 0:
            ids[1] = ids[0]  # a u == v candidate: local 1 is a second copy of u
        nodes.append(ids)
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), np.concatenate(nodes).astype(np.int64)


def reference(a: np.ndarray, node_ptr, nodes, L: int) -> np.ndarray:
    """A[i, j] = graph edge between the link's i-th and j-th node; target entries (0, 1) cleared."""
    B = len(node_ptr) - 1
    out = np.zeros((B, L, L), np.uint8)
    for b in range(B):
        ids = nodes[node_ptr[b] : node_ptr[b + 1]]
        k = len(ids)
        out[b, :k, :k] = a[np.ix_(ids, ids)]
        out[b, 0, 1] = out[b, 1, 0] = 0
    return out


@pytest.mark.parametrize("p", [0.02, 0.3, 0.9])
def test_edges_dense_and_bits_equal_the_reference(p):
    indptr, indices, a = random_graph(120, p, seed=int(p * 100))
    node_ptr, nodes = random_links(120, [2, 3, 17, 40, 9, 2, 60], seed=1, self_loop_every=3)
    L = int(np.diff(node_ptr).max())
    want = reference(a, node_ptr, nodes, L)
    ind = Inducer(indptr, indices)
    assert np.array_equal(ind.dense(node_ptr, nodes), want)
    assert np.array_equal(BitMatrix(indptr, indices).dense(node_ptr, nodes), want)
    wide = BitMatrix(indptr, indices).dense(node_ptr, nodes, width=L + 5)
    assert np.array_equal(wide[:, :L, :L], want) and not wide[:, L:].any() and not wide[:, :, L:].any()
    edge_ptr, edges = ind.edges(node_ptr, nodes)
    got = np.zeros_like(want)
    seg = np.repeat(np.arange(len(node_ptr) - 1), np.diff(edge_ptr))
    assert (edges[:, 0] < edges[:, 1]).all()  # each undirected edge once, a < b
    got[seg, edges[:, 0], edges[:, 1]] = 1
    got[seg, edges[:, 1], edges[:, 0]] = 1
    assert np.array_equal(got, want) and len(edges) == want.sum() // 2


def test_entry_bound_bounds_the_entries():
    indptr, indices, a = random_graph(200, 0.2, seed=3)
    node_ptr, nodes = random_links(200, [5, 30, 80, 2], seed=4)
    dense = Inducer(indptr, indices).dense(node_ptr, nodes)
    bound = Inducer(indptr, indices).entry_bound(node_ptr, nodes)
    assert (dense.reshape(len(bound), -1).sum(1) <= bound).all()


def test_bit_matrix_size_limit():
    assert BitMatrix.fits(4_267) and not BitMatrix.fits(235_868)  # ogbl-ddi yes, ogbl-collab no
    with pytest.raises(ValueError, match="width"):
        BitMatrix(*random_graph(10, 0.5, 0)[:2]).dense(np.array([0, 5]), np.arange(5), width=3)
