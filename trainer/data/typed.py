"""The typed adjacency of a batch: K edge types whose rows the model's input embedding reads apart.

Direction (a --directed set) is K = 2: OUT (j is an out-neighbour of i, i -> j) and IN (j -> i); relation
types (a typed set, R relations) are K = 2R the same way: type 2r (i -> j of relation r) and 2r + 1 (j -> i of
relation r). Sparse form: TypedEdges rows (a, b, k), "b is a type-k neighbour of a";
dense form: (B, K, L, L) uint8, [b, k, i, j] = 1 iff j is a type-k neighbour of i. trainer/data/packing.py turns
either into the PackedBatch's typed fields; trainer/model/propagation.py typed_embedding reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from trainer.data.messages import edge_messages

OUT, IN = 0, 1  # a directed set's edge types: j is an out-neighbour (i -> j) or an in-neighbour (j -> i) of i
DIRECTED_TYPES = 2


@dataclass(frozen=True)
class TypedEdges:
    """A batch's typed adjacency as rows (a, b, k) of (E, 3), `ptr` (B+1,) offsets: b is a type-k neighbour of a
    (local ids), one of `types` types."""

    ptr: np.ndarray
    rows: np.ndarray
    types: int


def directed_types(ptr: np.ndarray, pairs: np.ndarray) -> TypedEdges:
    """Ordered local edges a -> b (common.induce.Inducer.ordered_edges) as typed rows: b is an out-neighbour of a
    and a an in-neighbour of b (two rows per edge, kept per sample)."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    rows = np.empty((2 * len(pairs), 3), dtype=np.int64)
    rows[0::2, 0], rows[0::2, 1], rows[0::2, 2] = pairs[:, 0], pairs[:, 1], OUT
    rows[1::2, 0], rows[1::2, 1], rows[1::2, 2] = pairs[:, 1], pairs[:, 0], IN
    return TypedEdges(2 * np.asarray(ptr, dtype=np.int64), rows, DIRECTED_TYPES)


def relation_types(ptr: np.ndarray, rows: np.ndarray, relations: int) -> TypedEdges:
    """Typed local triples (a, b, r) (common.induce.Inducer.typed_edges) as typed rows: b is a type-2r neighbour of a
    (a -> b of relation r) and a a type-(2r + 1) neighbour of b; K = 2R."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
    out = np.empty((2 * len(rows), 3), dtype=np.int64)
    out[0::2, 0], out[0::2, 1], out[0::2, 2] = rows[:, 0], rows[:, 1], 2 * rows[:, 2] + OUT
    out[1::2, 0], out[1::2, 1], out[1::2, 2] = rows[:, 1], rows[:, 0], 2 * rows[:, 2] + IN
    return TypedEdges(2 * np.asarray(ptr, dtype=np.int64), out, 2 * int(relations))


def typed_dense(B: int, L: int, typed: TypedEdges) -> np.ndarray:
    """(B, K, L, L) uint8 dense form of typed rows: [b, k, a, c] = 1 for each row (a, c, k) of sample b."""
    adj = np.zeros((B, typed.types, L, L), np.uint8)
    seg = np.repeat(np.arange(B), np.diff(typed.ptr))
    adj[seg, typed.rows[:, 2], typed.rows[:, 0], typed.rows[:, 1]] = 1
    return adj


def directed_dense(out: np.ndarray) -> np.ndarray:
    """(B, 2, L, L) typed dense adjacency of an ordered one out[b, i, j] = i -> j: [OUT] = out, [IN] = its transpose."""
    return np.ascontiguousarray(np.stack([out, out.transpose(0, 2, 1)], axis=1))


def dense_of(B: int, L: int, ptr: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(B, L, L) uint8 with [b, a, c] = 1 for each edge (a, c) of sample b, and each edge's sample."""
    adj = np.zeros((B, L, L), np.uint8)
    seg = np.repeat(np.arange(B), np.diff(ptr))
    adj[seg, edges[:, 0], edges[:, 1]] = 1
    return adj, seg


def typed_fields(typed, adj_dense, n, cu, n_max, cid) -> dict:
    """The PackedBatch fields of a typed adjacency, in the batch's form (trainer.data.packing.pack)."""

    t = torch.from_numpy
    if isinstance(typed, TypedEdges) == (adj_dense is not None):
        raise ValueError(
            "pack: the typed adjacency must take the graph's form (TypedEdges with LocalEdges, else dense)"
        )
    if adj_dense is not None:
        B, Lc = adj_dense.shape[0], adj_dense.shape[-1]
        typed = np.asarray(typed)
        if typed.ndim != 4 or typed.shape[0] != B or typed.shape[2] < Lc or typed.shape[2] != typed.shape[3]:
            raise ValueError(
                f"pack: typed dense adjacency must be (B = {B}, K, L, L) with L >= {Lc}, got {typed.shape}"
            )
        return {
            "adj_typed": t(np.ascontiguousarray(typed[:, :, :Lc, :Lc], dtype=np.uint8)),
            "edge_types": typed.shape[1],
        }
    rows, K = np.asarray(typed.rows, dtype=np.int64).reshape(-1, 3), int(typed.types)
    a, b, k = rows[:, 0], rows[:, 1], rows[:, 2]
    if ((k < 0) | (k >= K)).any():
        raise ValueError(f"pack: typed edge kinds must lie in [0, {K})")
    ptr = np.asarray(typed.ptr, dtype=np.int64)
    src, dst = edge_messages(ptr, np.stack([b, a], axis=1), n, cu, n_max, cid, strict=False, one_way=True)
    kind = np.concatenate([k, k[a < 2]])  # the messages' order: one per row, then the task tokens' copies
    return {"typed_src": t(src), "typed_dst": t(dst), "typed_kind": t(kind), "edge_types": K}
