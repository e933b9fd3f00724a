"""Direction in the model (docs/design.md#direction): typed adjacency rows, out- and in-neighbours in their own W0
blocks; the reverse metric; an undirected model built exactly as before. Hand-built samples, float64 on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from common.metrics import evaluate
from trainer.data.packing import pack_samples
from trainer.model.pencil import ModelConfig, Pencil
from trainer.model.propagation import typed_embedding

N_MAX = 6


def model(edge_types: int) -> Pencil:
    torch.manual_seed(0)
    cfg = ModelConfig(N_MAX, 16, 2, 2, 32, dropout=0.0, attention="reference", edge_types=edge_types)
    return Pencil(cfg).double().eval()


# The path u -> w -> v (global 10 -> 12 -> 11). Undirected, (u, v) and (v, u) see the same subgraph: a path
# through local 2 from local 0 to local 1. Directed they differ: for (u, v) local 0 -> 2 -> 1, for (v, u) (local
# v = 0, u = 1) 1 -> 2 -> 0.
FORWARD = {"cid": 0, "label": 1, "nodes": [10, 11, 12], "edges": [[0, 2], [2, 1]], "directed": [[0, 2], [2, 1]]}
BACKWARD = {"cid": 1, "label": 0, "nodes": [11, 10, 12], "edges": [[1, 2], [2, 0]], "directed": [[1, 2], [2, 0]]}


@pytest.mark.parametrize("dense", [False, True])
def test_a_directed_model_tells_a_pair_from_its_reverse_an_undirected_one_cannot(dense):
    undirected = [{k: v for k, v in s.items() if k != "directed"} for s in (FORWARD, BACKWARD)]
    same = model(1)(pack_samples(undirected, N_MAX, dense=dense))
    # the same inputs up to the order of the nodes: the path's direction is invisible (float64 sums taken in
    # another order may differ in the last bits, as on an AVX-512 CPU: equal to 1e-12, not bit for bit)
    assert torch.allclose(same[0], same[1], rtol=0, atol=1e-12)
    scores = model(2)(pack_samples([FORWARD, BACKWARD], N_MAX, dense=dense))
    assert not torch.isclose(scores[0], scores[1])
    sparse = model(2)(pack_samples([FORWARD, BACKWARD], N_MAX))
    assert torch.allclose(scores, sparse, rtol=0, atol=1e-12)  # the two forms compute the same numbers


@pytest.mark.parametrize("dense", [False, True])
def test_typed_rows_by_hand(dense):
    """H0's typed part of the forward sample: u (local 0) has out-neighbour 2; w (2) has in-neighbour 0 and
    out-neighbour 1; v (1) has in-neighbour 2; the task tokens copy their endpoint's rows."""
    m = model(2)
    batch = pack_samples([FORWARD], N_MAX, dense=dense)
    n, w0 = N_MAX, m.w0.detach()
    out, inn = w0[n : 2 * n], w0[2 * n : 3 * n]
    got = typed_embedding(batch, w0[n : 3 * n].view(2, n, -1))
    want = torch.stack([out[2], inn[2], inn[0] + out[1], out[2], inn[2]])  # tokens: 0, 1, 2, u-task, v-task
    assert torch.allclose(got, want, rtol=0, atol=1e-12)


def test_a_directed_model_refuses_batches_without_direction():
    with pytest.raises(ValueError, match="a directed model needs the batches of a directed shard set"):
        model(2)(pack_samples([{k: v for k, v in FORWARD.items() if k != "directed"}], N_MAX))


def test_an_undirected_model_is_built_as_before():
    """No parameter is added for direction (W0 keeps its 2n + 2 rows, the parameters their names and order), so the
    undirected path draws the same initial weights; an older checkpoint's config (no edge_types) reads as one type."""
    m = model(1)
    assert m.w0.shape == (2 * N_MAX + 2, 16)
    names = [name for name, _ in m.named_parameters()]
    assert names == [name for name, _ in model(2).named_parameters()] and names[0] == "w0"
    assert model(2).w0.shape == (3 * N_MAX + 2, 16)
    old = {k: v for k, v in vars(m.cfg).items() if k != "edge_types"}
    assert ModelConfig(**old).edge_types == 1


def test_reverse_accuracy_by_hand():
    # 3 > 1 wins, 1 == 1 ties (half), 2 < 5 loses: (1 + 0.5 + 0) / 3
    got = evaluate("reverse", np.array([3.0, 1.0, 2.0]), np.array([[1.0], [1.0], [5.0]]))
    assert got["reverse_acc"] == pytest.approx(0.5) and got["mrr"] == pytest.approx((1 + 1 / 1.5 + 0.5) / 3)
