"""SEAL (Zhang and Chen, 2018) as a baseline: a link's enclosing subgraph, its nodes labelled by DRNL
(double-radius node labelling), read by DGCNN, built from PyG's layers as PyG's SEAL example builds it.

It takes subgraphs as arrays, the form the project's sampler and inducer produce (node_ptr (B+1,), edge_ptr
(B+1,), local edges (E, 2) with u = local 0 and v = local 1, the target edge already removed), so the trainer
samples nothing itself: the caller does (bench/seal_baseline.py).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
from torch import nn

from common.metrics import evaluate
from trainer.data.distances import pair_distances

MAX_LABEL = 200  # DRNL labels above this share one embedding (far nodes of large subgraphs)


def drnl_labels(node_ptr: np.ndarray, edge_ptr: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(sum N_b,) DRNL label of every node of every subgraph: 1 for u and v, 1 + min(du, dv) + (d // 2) *
    (d // 2 + d % 2 - 1) for the others (d = du + dv, each distance taken without the other end:
    trainer.data.distances), 0 when unreachable from u or from v."""
    dist = pair_distances(node_ptr, edge_ptr, edges)
    du, dv = dist[:, 0], dist[:, 1]
    d, half = du + dv, (du + dv) // 2
    labels = np.where((du < 0) | (dv < 0), 0, np.minimum(1 + np.minimum(du, dv) + half * (half + d % 2 - 1), MAX_LABEL))
    labels[np.asarray(node_ptr[:-1], dtype=np.int64)] = 1  # u
    labels[np.asarray(node_ptr[:-1], dtype=np.int64) + 1] = 1  # v
    return labels.astype(np.int64)


class DGCNN(nn.Module):
    """PyG's SEAL example model: GCN layers over the DRNL embedding, SortAggregation to k nodes, two 1-D
    convolutions and an MLP to one logit."""

    def __init__(self, hidden: int = 32, num_layers: int = 3, k: int = 30):
        from torch_geometric.nn import GCNConv
        from torch_geometric.nn.aggr import SortAggregation

        super().__init__()
        self.k = max(10, int(k))
        self.embed = nn.Embedding(MAX_LABEL + 1, hidden)
        self.convs = nn.ModuleList([GCNConv(hidden, hidden) for _ in range(num_layers)] + [GCNConv(hidden, 1)])
        total = hidden * num_layers + 1
        self.sort_pool = SortAggregation(self.k)
        self.conv1 = nn.Conv1d(1, 16, total, total)
        self.conv2 = nn.Conv1d(16, 32, 5, 1)
        dense = ((self.k - 2) // 2 + 1 - 5 + 1) * 32
        self.mlp = nn.Sequential(nn.Linear(dense, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 1))

    def forward(self, z: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        x = self.embed(z)
        xs = []
        for conv in self.convs:
            x = torch.tanh(conv(x, edge_index))
            xs.append(x)
        x = self.sort_pool(torch.cat(xs, dim=-1), batch)  # (B, k * total)
        x = torch.relu(self.conv1(x.unsqueeze(1)))
        x = torch.relu(self.conv2(nn.functional.max_pool1d(x, 2, 2)))
        return self.mlp(x.flatten(1)).squeeze(-1)


def as_batch(node_ptr: np.ndarray, edge_ptr: np.ndarray, edges: np.ndarray, z: np.ndarray):
    """(z, edge_index with both directions in global numbering, batch vector) of a block of subgraphs."""
    sizes = np.diff(node_ptr)
    offset = np.repeat(node_ptr[:-1], np.diff(edge_ptr))
    e = edges.astype(np.int64) + offset[:, None]
    ei = np.concatenate([e, e[:, ::-1]]).T
    return (
        torch.from_numpy(z),
        torch.from_numpy(np.ascontiguousarray(ei)),
        torch.from_numpy(np.repeat(np.arange(len(sizes)), sizes)),
    )


def _logits(model: DGCNN, blocks: list) -> np.ndarray:
    model.eval()
    with torch.no_grad():
        return np.concatenate([model(*as_batch(*b[:3], b[3])).numpy() for b in blocks]) if blocks else np.zeros(0)


def fit(
    train_epoch,
    valid,
    test,
    seconds: float,
    seed: int = 0,
    lr: float = 1e-4,
    hidden: int = 32,
    layers: int = 3,
    k: int = 30,
    max_epochs: int = 1000,
) -> dict:
    """Train for at most `seconds` (whole epochs; at least one), evaluating after each epoch.

    train_epoch(epoch) -> list of blocks (node_ptr, edge_ptr, edges, z, label); valid and test: (blocks,
    protocol, n_pos, negatives shape) whose blocks hold the positives first, then the negatives; test None:
    validation only. Returns the test metrics at the best validation epoch (by the protocol's MRR), as every model
    of the project reports, and that epoch's logits per split ("logits": {split: array in the blocks' order})."""
    torch.manual_seed(seed)
    model = DGCNN(hidden, layers, k)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    t0, best, history = time.perf_counter(), None, []
    for epoch in range(max_epochs):
        model.train()
        for node_ptr, edge_ptr, edges, z, label in train_epoch(epoch):
            opt.zero_grad()
            loss = nn.functional.binary_cross_entropy_with_logits(
                model(*as_batch(node_ptr, edge_ptr, edges, z)), torch.from_numpy(label.astype(np.float32))
            )
            loss.backward()
            opt.step()
        v, v_logits = score(model, *valid)
        history.append({"epoch": epoch, "valid": v, "seconds": round(time.perf_counter() - t0, 1)})
        if best is None or v["mrr"] > best["valid"]["mrr"]:
            t, t_logits = score(model, *test) if test is not None else (None, None)
            best = {"epoch": epoch, "valid": v, "test": t}
            logits = {"valid": v_logits, "test": t_logits}
        elapsed = time.perf_counter() - t0
        if elapsed * (epoch + 2) / (epoch + 1) > seconds:  # another epoch of the mean length would overrun
            break
    took = round(time.perf_counter() - t0, 1)
    return {**best, "epochs": len(history), "seconds": took, "history": history, "logits": logits}


def score(model: DGCNN, blocks: list, protocol: str, n_pos: int, neg_shape: tuple) -> tuple[dict, np.ndarray]:
    """The protocol's metrics of the blocks' logits (positives first, then negatives), and the logits."""
    s = _logits(model, blocks)
    return evaluate(protocol, s[:n_pos], s[n_pos:].reshape(neg_shape)), s


def sort_pool_k(sizes: np.ndarray) -> int:
    """PyG's example: k is the 60th percentile of the subgraphs' sizes (at least 10)."""
    return max(10, int(math.ceil(np.percentile(sizes, 60)))) if len(sizes) else 10
