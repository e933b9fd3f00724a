"""bench.directed_peers' R-GCN inputs on the hand-drawn directed graph of tests/test_heuristics_directed.py: its
relations, its degree inputs, its negatives (half reverses of one-way edges, all ordered non-edges), and that its
decoder tells (u, v) from (v, u)."""

from __future__ import annotations

import numpy as np
import torch

from bench.directed_peers import DirectedGNN, negatives, relations
from common.graph import DiGraph

EDGES = np.array([[0, 1], [0, 2], [1, 2], [1, 3], [2, 1], [2, 3], [3, 0], [4, 1], [4, 3]])
HAND = DiGraph.from_edges(EDGES, 5)
# the reverses of the one-way edges: 1 -> 2 and 2 -> 1 are both edges, so neither reverse is here
REVERSES = {(1, 0), (2, 0), (3, 1), (3, 2), (0, 3), (1, 4), (3, 4)}


def test_relations_are_both_directions_typed():
    edge_index, edge_type, deg = relations(HAND)
    fwd = {tuple(e) for e, t in zip(edge_index.T.tolist(), edge_type.tolist(), strict=True) if t == 0}
    bwd = {tuple(e) for e, t in zip(edge_index.T.tolist(), edge_type.tolist(), strict=True) if t == 1}
    assert fwd == {tuple(e) for e in EDGES.tolist()} and bwd == {(b, a) for a, b in EDGES.tolist()}
    # in-degrees 1, 3, 2, 3, 0 and out-degrees 2, 2, 2, 1, 2
    np.testing.assert_allclose(deg[:, 0].numpy(), np.log1p([1, 3, 2, 3, 0]), rtol=1e-6)
    np.testing.assert_allclose(deg[:, 1].numpy(), np.log1p([2, 2, 2, 1, 2]), rtol=1e-6)


def test_negatives_are_half_reverses_and_never_edges():
    neg = negatives(HAND, 8, np.random.default_rng(0))
    assert neg.shape == (8, 2)
    assert {tuple(p) for p in neg[:4].tolist()} <= REVERSES
    assert not HAND.has_edge(neg[:, 0], neg[:, 1]).any() and (neg[:, 0] != neg[:, 1]).all()


def test_the_decoder_is_not_symmetric():
    torch.manual_seed(0)
    model = DirectedGNN(5, dim=8)
    torch.nn.init.normal_(model.emb.weight)  # trained embeddings differ per node
    h = model.encode(*relations(HAND))
    s = model.decode(h, torch.tensor([[0, 3], [3, 0]]))
    assert s[0] != s[1]
