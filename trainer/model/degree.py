"""The degree input (ModelConfig.degrees = D > 0): every token gets a learned vector of its node's bucketed degree in
the training graph (trainer/data/degrees.py), added to H0 like the hop distances. Task tokens take their endpoint's.

The counts are data, not weights: model_for_shards attaches the set's (non-persistent buffers, like the node
feature table), so a checkpoint holds only the embedding and a scorer rebuilds the same table from the same set.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from trainer.data.degrees import TrainDegrees, degree_bucket, edge_key
from trainer.data.packing import PackedBatch


class DegreeInput(nn.Module):
    """(D + 1)^k learned rows, k = 1 (undirected) or 2 (out, in; a directed or typed set), at W0's row scale."""

    def __init__(self, max_bucket: int, kinds: int, hidden: int, steps: int = 1):
        super().__init__()
        self.max_bucket, self.kinds, self.steps = int(max_bucket), int(kinds), int(steps)
        self.embedding = nn.Embedding((self.max_bucket + 1) ** self.kinds, hidden)
        nn.init.normal_(self.embedding.weight, std=hidden**-0.5)
        self.register_buffer("counts", None, persistent=False)
        self.register_buffer("keys", None, persistent=False)
        self.relations = 0

    def attach(self, degrees: TrainDegrees) -> "DegreeInput":
        if degrees.counts.ndim != 2 or degrees.counts.shape[1] != self.kinds:
            raise ValueError(f"degree input: expected (N, {self.kinds}) counts, got {degrees.counts.shape}")
        device = self.embedding.weight.device
        self.counts = torch.as_tensor(degrees.counts, dtype=torch.int64).to(device)
        self.keys = torch.as_tensor(degrees.keys, dtype=torch.int64).to(device)
        self.relations = degrees.relations
        return self

    def token_counts(self, batch: PackedBatch) -> torch.Tensor:
        """(T, k) each token's training-graph degree; a link that is itself a training edge (a training positive)
        has it taken off its endpoints, as the subgraph leaves it out. A node the graph does not hold (one a live
        service added) has degree 0, and so has a cold sample's head (batch.cold: shown with no history)."""
        if self.counts is None:
            raise ValueError("the model reads node degrees (degrees > 0) but none were attached (model_for_shards)")
        n = self.counts.shape[0]
        node = batch.node.to(self.counts.device)
        known = node < n
        counts = self.counts[node.clamp(max=n - 1)] * known[:, None]
        seqlens = (batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]).long().to(node.device)
        local = batch.local_id.to(node.device)
        if batch.cold is not None:
            cold_tok = torch.repeat_interleave(batch.cold.to(node.device), seqlens, output_size=batch.num_tokens)
            counts = counts * ~(cold_tok & (local == 0))[:, None]
        ends = node[batch.task_index]  # (B, 2) u, v of every sample
        key = edge_key(ends[:, 0], ends[:, 1], n, batch.relation, self.relations)
        at = torch.searchsorted(self.keys, key).clamp(max=max(len(self.keys) - 1, 0))
        own = (self.keys[at] == key) & (ends < n).all(1) if len(self.keys) else torch.zeros_like(key, dtype=torch.bool)
        own_tok = torch.repeat_interleave(own, seqlens.to(own.device), output_size=batch.num_tokens)
        if self.kinds == 1:  # undirected: the edge is one of u's and one of v's
            minus = (own_tok & (local < 2))[:, None]
        else:  # u -> v: one of u's out-edges and one of v's in-edges
            minus = torch.stack([own_tok & (local == 0), own_tok & (local == 1)], dim=1)
        return (counts - minus.long()).clamp(min=0)

    def forward(self, batch: PackedBatch) -> torch.Tensor:
        bucket = degree_bucket(self.token_counts(batch), self.max_bucket, self.steps)
        rows = bucket[:, 0] if self.kinds == 1 else bucket[:, 0] * (self.max_bucket + 1) + bucket[:, 1]
        return self.embedding(rows.to(self.embedding.weight.device))
