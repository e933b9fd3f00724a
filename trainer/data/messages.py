"""A batch's message lists: which flat token sends to which (trainer/data/packing.py's PackedBatch.adj_src /
adj_dst, and the typed messages of trainer/data/typed.py), built from per-sample local edge lists and checked
against each sample's context size. Its own module so that packing and typed both read it without a circle."""

from __future__ import annotations

import numpy as np


def fail_sample(what: str, cid: np.ndarray, sample: int, detail: str):
    raise ValueError(f"pack: sample {sample} (cid {int(cid[sample])}): {what}: {detail}")


def edge_messages(edge_ptr, edges, n, cu, n_max, cid, strict, one_way: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Flat (adj_src, adj_dst): context edges both ways, then task tokens receiving from their
    endpoint's neighbours; validated against N_b. one_way: each edge (s, r) is one message s -> r (typed rows),
    then the task token of r < 2 hearing it too."""
    B = len(n)
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    e = np.diff(edge_ptr)  # (B,) undirected edges per sample
    if edge_ptr.shape != (B + 1,) or edge_ptr[-1] - edge_ptr[0] != len(edges):
        raise ValueError(f"pack: edge_ptr {edge_ptr.shape} does not match {B} samples and {len(edges)} edges")
    eseg = np.repeat(np.arange(B), e)  # (E,) sample of each edge
    a, b = edges[:, 0], edges[:, 1]
    bad = np.flatnonzero((a < 0) | (b < 0) | (a >= n_max) | (b >= n_max))
    if bad.size:
        fail_sample(
            "edge local id out of range",
            cid,
            eseg[bad[0]],
            f"edge ({a[bad[0]]}, {b[bad[0]]}) has a local id outside [0, n_max = {n_max})",
        )
    ne = n[eseg]
    if (bad := np.flatnonzero((a >= ne) | (b >= ne))).size:
        fail_sample(
            "edge refers to a node that is not in the context",
            cid,
            eseg[bad[0]],
            f"edge ({a[bad[0]]}, {b[bad[0]]}) with N = {n[eseg[bad[0]]]}",
        )
    if (bad := np.flatnonzero(a == b)).size:
        fail_sample("self-loop in the local edge list", cid, eseg[bad[0]], f"edge ({a[bad[0]]}, {b[bad[0]]})")
    if strict and len(edges):
        key = eseg * (n_max * n_max) + np.minimum(a, b) * n_max + np.maximum(a, b)
        uniq, first, counts = np.unique(key, return_index=True, return_counts=True)
        if (dup := np.flatnonzero(counts > 1)).size:
            i = first[dup[0]]
            fail_sample("duplicate edge", cid, eseg[i], f"edge ({a[i]}, {b[i]}) appears more than once")
    base = cu[eseg]  # (E,) token offset of each edge's sample
    fa, fb = base + a, base + b  # flat token index of each endpoint's context token
    task_of = cu[1:] - 2  # (B,) flat index of the u-task token; v-task is +1
    if one_way:
        to = b < 2
        return np.concatenate([fa, fa[to]]), np.concatenate([fb, task_of[eseg[to]] + b[to]])
    to_b, to_a = b < 2, a < 2  # edges whose other end is u or v: the task token hears them too
    adj_src = np.concatenate([fa, fb, fa[to_b], fb[to_a]])
    adj_dst = np.concatenate([fb, fa, task_of[eseg[to_b]] + b[to_b], task_of[eseg[to_a]] + a[to_a]])
    return adj_src, adj_dst
