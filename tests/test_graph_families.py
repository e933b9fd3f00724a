"""bench.graph_families' power-grid-like family (`power`): exact counts and degrees on a tiny seed; a
connected, sparse graph with few triangles."""

import numpy as np
import pytest

from bench.graph_families import synthetic_edges
from bench.sparse_infra import member


def test_power_on_a_tiny_seed_has_its_exact_counts_and_degrees():
    e = synthetic_edges("power", seed=0, n=30)
    assert e.shape == (40, 2)  # round(2.7 * 30 / 2): the mean degree asked for
    assert len(np.unique(np.sort(e, 1), axis=0)) == 40 and (e[:, 0] != e[:, 1]).all()  # no repeats, no loops
    degree = np.bincount(e.ravel(), minlength=30)
    assert np.bincount(degree).tolist() == [0, 6, 8, 9, 4, 3]
    assert e[:5].tolist() == [[1, 10], [2, 13], [6, 26], [9, 23], [28, 18]]  # the 5 loads, each on one line
    assert (degree[e[:5, 0]] == 1).all()
    np.testing.assert_array_equal(e, synthetic_edges("power", seed=0, n=30))  # seeded


def test_power_is_connected_sparse_and_has_few_triangles():
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = 400
    e = synthetic_edges("power", seed=3, n=n)
    adj = coo_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(n, n)).tocsr()
    adj = adj + adj.T
    degree = np.asarray(adj.sum(1)).ravel()
    assert connected_components(adj)[0] == 1 and abs(degree.mean() - 2.7) < 0.01
    assert 0.2 < (degree == 1).mean() < 0.35  # a quarter of the nodes are loads on one line
    triangles = (adj @ adj).multiply(adj).sum() / 6
    assert 3 * triangles / (degree * (degree - 1) / 2).sum() < 0.1  # transitivity: the grid's 0.1 at most


def test_a_member_name_reads_as_family_seed_and_nodes():
    assert member("power-s2-3000") == ("power", 2, 3000)
    with pytest.raises(SystemExit, match="power-s0-2000"):
        member("power-3000")
