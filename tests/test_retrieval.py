"""Candidate retrieval (common/retrieval.py): exact values on hand-built graphs, a slow reference, and the
rules every pool obeys (never the query, never a neighbour, only across sides on a bipartite graph)."""

import math

import numpy as np
import pytest

from common.graph import Graph
from common.retrieval import RRF_K, Allowed, RetrievalError, Tuning, ppr_push, retrieve

# 0-1, 1-2, 2-3, 1-4, 0-2: degrees 2, 3, 3, 1, 1
TINY = Graph.from_edges([(0, 1), (1, 2), (2, 3), (1, 4), (0, 2)], num_nodes=5)


def rows(pool):
    return [pool.cand[i, : pool.count[i]].tolist() for i in range(len(pool.queries))]


def test_ra_exact_values_on_a_tiny_graph():
    p = retrieve(TINY, [0, 3, 4], "ra", 5)
    # 0's neighbours 1 and 2 (1/3 each) lead to 4 and 3; 1 and 2 reach each other but are 0's neighbours.
    assert rows(p) == [[3, 4], [0, 1], [0, 2]]
    np.testing.assert_allclose(p.score[0, :2], [1 / 3, 1 / 3])
    assert p.count.tolist() == [2, 2, 2] and p.cand[0, 2:].tolist() == [-1, -1, -1]
    assert np.all(np.isneginf(p.score[0, 2:]))
    one = retrieve(TINY, [0], "ra", 1)  # a tie is broken by the smaller node id
    assert one.cand.tolist() == [[3]]


def test_aa_skips_degree_one_middles():
    # 3's only path of 2 hops goes through 2 (degree 3): AA = 1/log 3 to 0 and 1.
    p = retrieve(TINY, [3, 4], "aa", 3)
    assert rows(p) == [[0, 1], [0, 2]]
    np.testing.assert_allclose(p.score[0, :2], [1 / math.log(3)] * 2)
    # a star's leaves meet only through the centre; a path of length 2 through a degree-1 node is impossible
    path = Graph.from_edges([(0, 1), (1, 2)], num_nodes=3)
    assert rows(retrieve(path, [0], "aa", 2)) == [[2]]
    assert retrieve(path, [0], "aa", 2).score[0, 0] == pytest.approx(1 / math.log(2))


def exact_ppr(g: Graph, alpha: float) -> np.ndarray:
    """Dense exact PPR by a linear solve: row u = PPR of u (p = alpha e_u + (1 - alpha) A D^-1 p)."""
    n = g.num_nodes
    a = np.zeros((n, n))
    e = g.edge_array()
    a[e[:, 0], e[:, 1]] = a[e[:, 1], e[:, 0]] = 1
    walk = a / np.maximum(a.sum(0), 1)  # A D^-1
    return np.linalg.solve(np.eye(n) - (1 - alpha) * walk, alpha * np.eye(n)).T


def test_ppr_push_exact_values_on_a_path():
    # path 0-1-2-3, alpha 1/2, from 0 (solved by hand): p = (26, 14, 4, 1) / 45
    path = Graph.from_edges([(0, 1), (1, 2), (2, 3)], num_nodes=4)
    got = ppr_push(path, np.array([0]), alpha=0.5, eps=1e-14).toarray()
    np.testing.assert_allclose(got, [[26 / 45, 14 / 45, 4 / 45, 1 / 45]], atol=1e-13)
    p = retrieve(path, [0], "ppr", 5, tuning=Tuning(alpha=0.5, eps=1e-14))
    assert rows(p) == [[2, 3]]  # never 0 itself or its neighbour 1
    np.testing.assert_allclose(p.score[0, :2], [4 / 45, 1 / 45], atol=1e-13)


def test_ppr_push_is_within_its_bound_of_the_linear_solve():
    g = Graph.from_edges([(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (1, 4)], num_nodes=7)  # node 6 isolated
    alpha = 0.2
    exact = exact_ppr(g, alpha)[:6]
    np.testing.assert_allclose(ppr_push(g, np.arange(6), alpha=alpha, eps=1e-14).toarray()[:, :7], exact, atol=1e-12)
    for eps in (1e-2, 1e-3):  # a coarse push: 0 <= exact - p <= eps * deg, and p is not already exact
        gap = exact - ppr_push(g, np.arange(6), alpha=alpha, eps=eps).toarray()
        assert np.all(gap >= -1e-15) and np.all(gap <= eps * g.degree[None, :]) and gap.max() > eps / 100
    p = retrieve(g, [0], "ppr", 10, tuning=Tuning(alpha=alpha, eps=1e-14))
    want = [v for v in np.argsort(-exact[0], kind="stable") if v not in (0, 1) and exact[0, v] > 0]
    assert rows(p) == [want]  # 2..5 reached (3 hops away too), never 6 (unreachable), 1 (neighbour) or 0
    iso = retrieve(g, [6], "ppr", 3)  # an isolated seed keeps its mass: nothing to propose
    assert iso.count.tolist() == [0]
    np.testing.assert_array_equal(ppr_push(g, np.array([6])).toarray(), [[0, 0, 0, 0, 0, 0, 1]])


# Recall of the push's top-M (default eps) against the exact top-M on a random graph: at least this fraction.
PPR_RECALL_FLOOR = 0.99


def test_ppr_push_top_m_recalls_the_exact_top_m_on_a_random_graph():
    rng = np.random.default_rng(7)
    g = Graph.from_edges(rng.integers(0, 400, size=(1600, 2)), num_nodes=400)
    exact = exact_ppr(g, 0.15)
    queries = np.flatnonzero(g.degree > 0)
    p = retrieve(g, queries, "ppr", 20)
    r, c, _ = p.pairs()
    assert np.all(r != c) and not g.has_edge(r, c).any()
    hits = total = 0
    for i, u in enumerate(queries):
        s = exact[u].copy()
        s[u] = 0.0
        s[g.neighbors(u)] = 0.0
        want = np.argsort(-s, kind="stable")[:20]
        want = want[s[want] > 0]
        hits += len(set(want.tolist()) & set(p.cand[i, : p.count[i]].tolist()))
        total += len(want)
    assert total > 0 and hits / total >= PPR_RECALL_FLOOR, hits / total


def test_mix_is_reciprocal_rank_fusion():
    ra, ppr = retrieve(TINY, [3], "ra", 4), retrieve(TINY, [3], "ppr", 4)
    fused = {}
    for pool in (ra, ppr):
        for k, v in enumerate(pool.cand[0, : pool.count[0]]):
            fused[int(v)] = fused.get(int(v), 0.0) + 1 / (RRF_K + k + 1)
    want = sorted(fused, key=lambda v: (-round(fused[v], 12), v))
    mix = retrieve(TINY, [3], "mix", 4)
    assert rows(mix) == [want]
    np.testing.assert_allclose(mix.score[0, : len(want)], [fused[v] for v in want])


def test_bipartite_pools_cross_sides_by_three_hop_paths():
    # users 0, 1, 2; items 3, 4, 5
    g = Graph.from_edges([(0, 3), (0, 4), (1, 4), (1, 5), (2, 5)], num_nodes=6)
    side = np.array([1, 1, 1, 0, 0, 0], bool)
    p = retrieve(g, [0, 2, 3], "ra", 5, allowed=Allowed(side=side))
    assert rows(p) == [[5], [4], [1]]  # 0-4-1-5: (1/2)(1/2)
    np.testing.assert_allclose(p.score[:, 0], [0.25, 0.25, 0.25])
    for method in ("ppr", "mix", "aa"):
        q = retrieve(g, np.arange(6), method, 6, allowed=Allowed(side=side))
        r, c, _ = q.pairs()
        assert np.all(side[r] != side[c]), method
        assert not g.has_edge(r, c).any()


# ---------------------------------------------------------------------------- slow reference
def reference(g: Graph, u: int, method: str, pool: int) -> list[int]:
    nbrs = set(g.neighbors(u).tolist())
    deg = g.degree
    score = {}
    for w in g.neighbors(u):
        wt = 1 / deg[w] if method == "ra" else (1 / math.log(deg[w]) if deg[w] > 1 else 0.0)
        for v in g.neighbors(w):
            score[int(v)] = score.get(int(v), 0.0) + wt
    cands = [v for v, s in score.items() if s > 0 and v != u and v not in nbrs]
    return sorted(cands, key=lambda v: (-float(f"{score[v]:.11e}"), v))[:pool]


@pytest.mark.parametrize("method", ["ra", "aa", "ppr", "mix"])
def test_blocks_match_a_slow_reference(method):
    rng = np.random.default_rng(3)
    g = Graph.from_edges(rng.integers(0, 60, size=(150, 2)), num_nodes=62)  # 60, 61 isolated
    queries = np.arange(62)
    whole = retrieve(g, queries, method, 8)
    blocked = retrieve(
        g, queries, method, 8, tuning=Tuning(block=7)
    )  # rows never interact: the same pools, bit for bit
    np.testing.assert_array_equal(whole.cand, blocked.cand)
    np.testing.assert_array_equal(whole.score, blocked.score)
    if method == "ppr":  # against the exact solve: the top-8 of exact PPR, up to near-ties the push may swap
        exact = exact_ppr(g, 0.15)
        for u in queries:
            s = np.where(np.isin(np.arange(62), [u, *g.neighbors(u)]), 0.0, exact[u])
            got = whole.cand[u, : whole.count[u]]
            np.testing.assert_allclose(s[got], whole.score[u, : len(got)], atol=1e-6 * g.degree.max())
            want = [v for v in np.argsort(-s, kind="stable")[:8] if s[v] > 0]
            assert (
                len(got) == len(want) and np.all(s[got] >= s[want[-1]] - 1e-6 * g.degree.max())
                if want
                else len(got) == 0
            ), u
        return
    if method == "mix":
        ra, ppr = (retrieve(g, queries, m, 8) for m in ("ra", "ppr"))
        for i in queries:
            fused = {}
            for pool in (ra, ppr):
                for k, v in enumerate(pool.cand[i, : pool.count[i]]):
                    fused[int(v)] = fused.get(int(v), 0.0) + 1 / (RRF_K + k + 1)
            want = sorted(fused, key=lambda v: (-round(fused[v], 12), v))[:8]
            assert rows(whole)[i] == want
        return
    for u in queries:
        assert rows(whole)[u] == reference(g, int(u), method, 8), u


@pytest.mark.parametrize("method", ["ra", "aa", "ppr", "mix"])
def test_never_proposes_the_query_or_a_neighbour_on_citeseer(method):
    from common.datasets import DatasetSpec, load_dataset

    g = load_dataset(DatasetSpec("citeseer")).graph
    q = np.arange(0, g.num_nodes, 37)
    p = retrieve(g, q, method, 50)
    r, c, s = p.pairs()
    assert len(r) > 0 and np.all(r != c) and not g.has_edge(r, c).any()
    assert np.all(c < g.num_nodes) and np.all(s > 0)
    assert np.all(np.diff(np.where(p.cand >= 0, p.score, -1e300), axis=1) <= 0)  # best first, padding last


def test_bad_input_names_the_flag():
    with pytest.raises(RetrievalError, match="--retriever: unknown retriever 'cn'"):
        retrieve(TINY, [0], "cn", 3)
    with pytest.raises(RetrievalError, match="--pool: must be >= 1"):
        retrieve(TINY, [0], "ra", 0)
    with pytest.raises(RetrievalError, match="PPR push threshold eps must lie in"):
        retrieve(TINY, [0], "ppr", 3, tuning=Tuning(eps=0))
    with pytest.raises(RetrievalError, match="query node 9 is not in the graph"):
        retrieve(TINY, [9], "ra", 3)


def test_a_short_pool_is_topped_up_by_popularity_in_the_component_then_the_graph():
    # a path 0-1-2-3, a star 4-(5, 6, 7), node 8 isolated
    g = Graph.from_edges(np.array([[0, 1], [1, 2], [2, 3], [4, 5], [4, 6], [4, 7]]), num_nodes=9)
    p = retrieve(g, [0, 5, 8], "ra", 4, fill=True)
    # 0: RA finds 2; its component adds 3 (1 is a neighbour); the graph adds its hub 4, then 5 (degree 1, id 5
    #    after 1 and 2 are taken or excluded); 5: RA finds 6, 7; its component has nothing left; the graph adds
    #    1 and 2; 8: nothing in its component; the graph's most connected: 4, 1, 2, 0
    assert p.cand.tolist() == [[2, 3, 4, 5], [6, 7, 1, 2], [4, 1, 2, 0]]
    assert p.score[:, 1:].tolist() == [[0.0] * 3, [1 / 3, 0.0, 0.0], [0.0] * 3] and p.count.tolist() == [4, 4, 4]
    assert retrieve(g, [0, 5, 8], "ra", 4).count.tolist() == [1, 2, 0]  # without fill: the retriever's own
    side = np.array([0, 1, 0, 1, 0, 1, 1, 1, 0], dtype=bool)
    both = retrieve(g, [0], "ra", 3, allowed=Allowed(side=side), fill=True)
    assert all(side[c] != side[0] for c in both.cand[0] if c >= 0)  # the fill keeps to the other kind
