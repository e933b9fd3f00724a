"""The graph parts of PENCIL's forward pass, in the two forms a PackedBatch can carry.

    embed:  H0 += X~_adj W0[n : 2n]        token i gets Σ_{j ∈ N(i)} W0[n + j] (task tokens: their endpoint's)
            typed (K edge types, a directed set: K = 2): Σ_k Σ_{j ∈ N_k(i)} W0[n + k n + j]
    prop:   Â Z = D^-1 (A + I) Z           over context tokens; task tokens aggregate what their endpoint does

Sparse form (adj_src -> adj_dst message list): gathers plus index_add, one d-vector moved per message;
right for sparse subgraphs (citeseer (2,20): ~40 edges on ~40 nodes).
Dense form (adj_dense (B, Lc, Lc)): per-sample A @ W0[n : n + Lc] and A @ Z with bmm; right at ogbl-ddi
density (46 % of all pairs), where the scatter moves far more memory than the (Lc x Lc)(Lc x d) product.
Both forms compute the same numbers (parity tests in tests/test_model.py, float64): context tokens
are scattered into a zero-padded (B, Lc, d) view, and every token, task tokens included (local id 0 or
1), reads its result back from row (sample, local id).
"""

from __future__ import annotations

import torch

from trainer.data.packing import PackedBatch
from trainer.data.padded import token_sample


def _dense_rows(batch: PackedBatch) -> torch.Tensor:
    """(T,) row of each token in the flattened (B * Lc) dense view: sample * Lc + local id."""
    Lc = batch.adj_dense.shape[-1]
    return token_sample(batch) * Lc + batch.local_id


def adjacency_embedding(batch: PackedBatch, w0_adj: torch.Tensor) -> torch.Tensor:
    """(T, d): Σ_{j ∈ N(i)} w0_adj[j] for every token i (w0_adj = W0[n : 2n], rows by local id)."""
    T, d = batch.num_tokens, w0_adj.shape[1]
    if batch.dense:
        B, Lc, _ = batch.adj_dense.shape
        a = batch.adj_dense.to(w0_adj.dtype)
        out = torch.matmul(a, w0_adj[:Lc]).reshape(B * Lc, d)  # (B, Lc, d): row i = Σ_j A_ij W0[n + j]
        return out[_dense_rows(batch)]
    # token t gets w0_adj[local id of s] for every message s -> t
    return w0_adj.new_zeros(T, d).index_add_(0, batch.adj_dst, w0_adj[batch.local_id[batch.adj_src]])


def typed_embedding(batch: PackedBatch, w0_typed: torch.Tensor) -> torch.Tensor:
    """(T, d): Σ_k Σ_{j ∈ N_k(i)} w0_typed[k, j] for every token i (w0_typed (K, n, d): W0's typed blocks); the
    batch's typed adjacency (trainer/data/typed.py) in the form of its graph."""
    K, n, d = w0_typed.shape
    if batch.edge_types != K or (batch.typed_kind is None and batch.adj_typed is None):
        raise ValueError(
            f"the model reads {K} edge types but the batch carries {batch.edge_types if batch.edge_types > 1 else 'no'}"
            " typed adjacency; a directed model needs the batches of a directed shard set (--directed)"
        )
    if batch.dense:
        B, _, Lc, _ = batch.adj_typed.shape
        a = batch.adj_typed.to(w0_typed.dtype)
        out = torch.einsum("bkij,kjd->bid", a, w0_typed[:, :Lc]).reshape(B * Lc, d)  # row i: Σ_k A_k[i, :] W_k
        return out[_dense_rows(batch)]
    rows = batch.typed_kind * n + batch.local_id[batch.typed_src]
    return w0_typed.new_zeros(batch.num_tokens, d).index_add_(0, batch.typed_dst, w0_typed.reshape(K * n, d)[rows])


class Propagation:
    """Â Z with Â = D^-1 (A + I) over context tokens, the task-token rule included.

    Context token i: mean of Z over {i} ∪ N(i). Task token of endpoint e: the same mean as e's context
    token (its self term is e's context token, not itself). Nothing aggregates from a task token. One
    instance per forward: the degrees (and the dense matrix, per dtype) are shared by all layers.
    """

    def __init__(self, batch: PackedBatch):
        self.dense = batch.dense
        T, dev = batch.num_tokens, batch.local_id.device
        if self.dense:
            B, Lc, _ = batch.adj_dense.shape
            self.shape = (B, Lc)
            self.rows = _dense_rows(batch)  # (T,) where each token reads its result
            # Where each token writes Z into the padded view: context tokens their own slot, task tokens
            # an extra row that is dropped (no nonzero(): it would stall the host on every forward).
            self.write_rows = torch.where(batch.role == 0, self.rows, torch.full_like(self.rows, B * Lc))
            self.adj = batch.adj_dense
            self._adj: dict[torch.dtype, torch.Tensor] = {}
            deg = self.adj.sum(-1, dtype=torch.float32) + 1  # (B, Lc) 1 + |N(i)|, exact small integers
            self.deg = deg.reshape(-1)[self.rows][:, None]  # (T, 1)
            return
        anchor = torch.arange(T, device=dev)
        # task tokens' self term is their endpoint's context token: sample offset + local id (0 or 1)
        anchor[batch.task_index] = batch.cu_seqlens[:-1].long()[:, None] + torch.arange(2, device=dev)
        self.anchor = anchor  # (T,)
        self.src, self.dst = batch.adj_src, batch.adj_dst  # (E',)
        deg = torch.ones(T, device=dev).index_add_(0, self.dst, torch.ones_like(self.dst, dtype=torch.float))
        self.deg = deg[:, None]  # (T, 1)

    def _adj_as(self, dtype: torch.dtype) -> torch.Tensor:
        if dtype not in self._adj:
            self._adj[dtype] = self.adj.to(dtype)
        return self._adj[dtype]

    def __call__(self, z: torch.Tensor) -> torch.Tensor:  # (T, d) -> (T, d)
        if self.dense:
            B, Lc = self.shape
            # every real row has exactly one writer, so the sum is a copy; row B * Lc collects task tokens
            zc = z.new_zeros(B * Lc + 1, z.shape[1]).index_add(0, self.write_rows, z)[:-1]  # padded context
            zc3 = zc.view(B, Lc, -1)
            agg = torch.baddbmm(zc3, self._adj_as(zc.dtype), zc3)  # (A + I) Z per sample
            agg = agg.reshape(B * Lc, -1)[self.rows]
        else:
            agg = z[self.anchor].index_add(0, self.dst, z[self.src])  # self term + Σ_{j ∈ N(i)} z_j
        return agg / self.deg.to(agg.dtype)  # divide (not * 1/deg): exact in float64 tests, same cost
