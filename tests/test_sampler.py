"""Semantics of the link-centric ShaDowKHop sampler on hand-built graphs.

The sampler emits node sets; the edges a model sees are induced from them by common.induce (shard
format v2). `sample()` below composes the two, so these tests pin the semantics of the whole
subgraph a link gets, exactly as the loader builds it."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from common.graph import Graph
from common.induce import Inducer
from common.presets import n_max
from preprocess.sampler import Scratch, derive_seed, sample_subgraphs


class Sampled:
    """Sampled node sets plus their induced local edges (what a loader recovers from a v2 shard)."""

    def __init__(self, g: Graph, sub):
        self.node_ptr, self.nodes = sub.node_ptr, sub.nodes
        self.edge_ptr, self.edges = Inducer(g.indptr, g.indices).edges(sub.node_ptr, sub.nodes)

    def link(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return (
            self.nodes[self.node_ptr[i] : self.node_ptr[i + 1]],
            self.edges[self.edge_ptr[i] : self.edge_ptr[i + 1]],
        )


def sample(g: Graph, links, d, n, seed=0, shuffle=True) -> Sampled:
    links = np.asarray(links, dtype=np.int64).reshape(-1, 2)
    return Sampled(g, sample_subgraphs(g.indptr, g.indices, links[:, 0], links[:, 1], d, n, seed, shuffle=shuffle))


def induced(g: Graph, nodes: np.ndarray) -> set[tuple[int, int]]:
    """Brute force: local edges (a < b) of the induced subgraph on `nodes`, minus the target 0-1."""
    k = len(nodes)
    a, b = np.triu_indices(k, 1)
    keep = g.has_edge(nodes[a], nodes[b]) & ~((a == 0) & (b == 1))
    return set(zip(a[keep].tolist(), b[keep].tolist()))


def reference_context(g: Graph, u, v, d, n, rng) -> set[int]:
    """Straightforward per-link ShaDowKHop: the semantics the kernel must reproduce in distribution."""
    seen = {u, v}
    for root in (u, v):
        frontier = [root]
        for _ in range(d):
            nxt = []
            for f in frontier:
                nb = g.neighbors(f)
                take = nb if len(nb) <= n else rng.choice(nb, size=n, replace=False)
                nxt.extend(int(x) for x in take)
            seen.update(nxt)
            frontier = nxt
    return seen


def star(leaves: int, extra_edges=()) -> Graph:
    """Node 0 joined to leaves 1..leaves; node leaves+1 isolated (plus extra edges)."""
    edges = [[0, i] for i in range(1, leaves + 1)] + list(extra_edges)
    return Graph.from_edges(edges, num_nodes=leaves + 2)


def random_graph(num_nodes=300, avg_degree=8, seed=0) -> Graph:
    rng = np.random.default_rng(seed)
    return Graph.from_edges(rng.integers(0, num_nodes, (num_nodes * avg_degree // 2, 2)), num_nodes=num_nodes)


def test_degree_at_most_n_takes_all_neighbours():
    g = star(5)
    iso = 6
    for seed in range(20):
        nodes, _ = sample(g, [[0, iso]], 1, 5, seed).link(0)
        assert sorted(nodes.tolist()) == [0, 1, 2, 3, 4, 5, 6]


def test_degree_above_n_takes_n_distinct_uniformly():
    g = star(10)
    iso = 11
    counts = np.zeros(12)
    for seed in range(3000):
        nodes, _ = sample(g, [[0, iso]], 1, 3, seed).link(0)
        assert len(nodes) == 2 + 3 and len(set(nodes.tolist())) == 5
        counts[nodes[2:]] += 1
    freq = counts[1:11] / 3000  # each leaf with probability 3/10
    assert np.all(np.abs(freq - 0.3) < 0.04), freq
    assert chisquare(counts[1:11]).pvalue > 1e-4


def test_frontier_keeps_duplicates():
    # u=0 -> a=1, b=2; both reach c=3, so with duplicates c is expanded twice at hop 3 and can bring
    # up to 2n distinct of its leaves; a deduplicated frontier would bring at most n.
    leaves = list(range(4, 14))
    edges = [[0, 1], [0, 2], [1, 3], [2, 3]] + [[3, x] for x in leaves]
    g = Graph.from_edges(edges, num_nodes=15)
    most = 0
    for seed in range(200):
        nodes, _ = sample(g, [[0, 14]], 3, 2, seed).link(0)
        most = max(most, len(set(nodes.tolist()) & set(leaves)))
    assert most > 2


def test_matches_reference_distribution():
    g = random_graph(120, 10, seed=3)
    u, v, d, n = 5, 17, 2, 4
    rng = np.random.default_rng(0)
    trials = 1500
    ref = np.zeros(g.num_nodes)
    for _ in range(trials):
        ref[list(reference_context(g, u, v, d, n, rng))] += 1
    ours = np.zeros(g.num_nodes)
    links = np.tile([[u, v]], (trials, 1))
    sub = sample(g, links, d, n, seed=1)
    for i in range(trials):
        ours[sub.link(i)[0]] += 1
    assert np.max(np.abs(ours - ref)) / trials < 0.07


def test_edges_between_ego_nets_are_induced_and_target_removed():
    # path u=0 - a=1 - b=2 - v=3 plus the target edge 0-3: with d=1 a is only in u's net, b only in v's.
    g = Graph.from_edges([[0, 1], [1, 2], [2, 3], [0, 3]], num_nodes=4)
    nodes, edges = sample(g, [[0, 3]], 1, 5, seed=0).link(0)
    local = {int(x): i for i, x in enumerate(nodes)}
    es = {tuple(e) for e in edges.tolist()}
    assert (min(local[1], local[2]), max(local[1], local[2])) in es
    assert (0, 1) not in es
    assert len(es) == 3  # 0-a, a-b, b-1


def test_induced_subgraph_exact_and_target_absent_on_random_graph():
    g = random_graph(400, 12, seed=1)
    rng = np.random.default_rng(5)
    pos = g.edge_array()[rng.integers(0, g.num_edges, 60)]
    neg = rng.integers(0, g.num_nodes, (60, 2))
    links = np.concatenate([pos, neg])
    for d, n in [(1, 3), (2, 3), (2, 20)]:
        sub = sample(g, links, d, n, seed=7)
        for i, (u, v) in enumerate(links):
            nodes, edges = sub.link(i)
            assert nodes[0] == u and nodes[1] == v
            assert len(nodes) <= n_max(d, n)
            assert np.all(edges[:, 0] < edges[:, 1])
            es = {tuple(e) for e in edges.tolist()}
            assert len(es) == len(edges)  # each undirected edge once
            if u != v:
                assert len(set(nodes.tolist())) == len(nodes)
                assert es == induced(g, nodes)


def test_isolated_endpoints_and_self_pair():
    g = Graph.from_edges([[0, 1], [1, 2]], num_nodes=5)
    nodes, edges = sample(g, [[3, 4]], 2, 5).link(0)
    assert nodes.tolist() == [3, 4] and len(edges) == 0
    nodes, edges = sample(g, [[3, 1]], 1, 5).link(0)
    assert nodes[:2].tolist() == [3, 1] and sorted(nodes[2:].tolist()) == [0, 2]
    assert {tuple(e) for e in edges.tolist()} == {(1, 2), (1, 3)}
    # u == v: local 1 is a copy of u with the same adjacency (never produced by our candidates).
    nodes, edges = sample(g, [[1, 1]], 1, 5).link(0)
    assert nodes[:2].tolist() == [1, 1]
    es = {tuple(e) for e in edges.tolist()}
    assert {(0, 2), (0, 3), (1, 2), (1, 3)} == es


def test_non_endpoint_order_is_uniform():
    g = star(6)  # link (0, 7): context = 0, 7 and leaves 1..6, always all of them
    trials = 3000
    counts = np.zeros((6, 6))
    sub = sample(g, np.tile([[0, 7]], (trials, 1)), 1, 10, seed=11)
    for i in range(trials):
        nodes, _ = sub.link(i)
        assert nodes[:2].tolist() == [0, 7]
        counts[nodes[2:] - 1, np.arange(6)] += 1
    for row in counts:
        assert chisquare(row).pvalue > 1e-4, counts
    assert chisquare(counts.ravel()).pvalue > 1e-4


def test_unshuffled_order_is_discovery_order():
    g = star(4)
    nodes, _ = sample(g, [[0, 5]], 1, 10, shuffle=False).link(0)
    assert nodes.tolist() == [0, 5, 1, 2, 3, 4]


def test_deterministic_for_a_seed():
    g = random_graph(500, 20, seed=2)
    links = np.random.default_rng(0).integers(0, 500, (200, 2))
    a, b = sample(g, links, 2, 5, seed=42), sample(g, links, 2, 5, seed=42)
    c = sample(g, links, 2, 5, seed=43)
    for x in ("node_ptr", "nodes", "edge_ptr", "edges"):
        assert np.array_equal(getattr(a, x), getattr(b, x))
    assert not np.array_equal(a.nodes, c.nodes)


def test_scratch_is_reusable_and_left_clean():
    g = random_graph(200, 10, seed=4)
    links = np.random.default_rng(1).integers(0, 200, (50, 2))
    scratch = Scratch(g.indptr)
    first = sample_subgraphs(g.indptr, g.indices, links[:, 0], links[:, 1], 2, 3, 9, scratch=scratch)
    assert np.all(scratch.mark == -1)
    again = sample_subgraphs(g.indptr, g.indices, links[:, 0], links[:, 1], 2, 3, 9, scratch=scratch)
    assert np.array_equal(first.nodes, again.nodes) and np.array_equal(first.node_ptr, again.node_ptr)


def test_budget_holds_for_dense_graph():
    g = random_graph(2000, 60, seed=5)
    links = np.random.default_rng(2).integers(0, 2000, (100, 2))
    for d, n in [(1, 20), (2, 5), (3, 3)]:
        sub = sample(g, links, d, n)
        assert np.diff(sub.node_ptr).max() <= n_max(d, n)


def test_read_only_inputs_are_accepted():
    # Ray hands workers read-only zero-copy arrays.
    g = random_graph(100, 6)
    indptr, indices = g.indptr.copy(), g.indices.copy()
    indptr.flags.writeable = False
    indices.flags.writeable = False
    sub = sample_subgraphs(indptr, indices, np.array([1, 2]), np.array([3, 4]), 2, 4, 0)
    assert len(sub) == 2


def test_bad_input_is_rejected():
    g = random_graph(10, 2)
    with pytest.raises(ValueError, match="endpoints"):
        sample(g, [[0, 10]], 1, 2)
    with pytest.raises(ValueError, match="positive"):
        sample(g, [[0, 1]], 0, 2)


def test_derive_seed_depends_on_every_part():
    base = derive_seed(0, "train", None, 1, 3)
    assert base == derive_seed(0, "train", None, 1, 3)
    assert (
        len(
            {
                base,
                derive_seed(1, "train", None, 1, 3),
                derive_seed(0, "valid", None, 1, 3),
                derive_seed(0, "train", None, 2, 3),
                derive_seed(0, "train", None, 1, 4),
            }
        )
        == 5
    )
