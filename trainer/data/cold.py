"""Cold-head training views (DataConfig.cold_heads): a share of the training links is shown as if its head u had
no history, the view a temporal split's new users get at valid and test time, which training never shows otherwise
(every training pair's user has rated something before the split's boundary).

A cold link's view is what the sampler would have drawn had u no edges:
  - context: u, v and the context nodes within `depth` (the set's d) hops of v, walking the graph inside the
    context without passing through u; the nodes only u's side reached are dropped (`cold_context`);
  - edges: none at u (`hide_head_edges` and its typed and dense forms), so u is an isolated token;
  - degree input: u counts 0 edges (trainer/model/degree.py reads PackedBatch.cold).
u keeps its node features: attributes are what a new user brings.

Which links are cold is a pure function of (seed, candidate id): the same links every epoch, every worker and
every resume, and the copies of one link (LRP-k) agree.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from common.induce import grow

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def cold_links(cid: np.ndarray, share: float, seed: int) -> np.ndarray:
    """(B,) bool: the links shown cold, about `share` of them, chosen by a splitmix64 hash of (seed, cid)."""
    with np.errstate(over="ignore"):
        z = np.asarray(cid, dtype=np.int64).astype(np.uint64) + np.uint64(seed & 0xFFFFFFFF) * _GOLDEN + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53 < share


def cold_context(indptr, indices, node_ptr, nodes, cold, depth: int, mark) -> tuple[np.ndarray, np.ndarray]:
    """(node_ptr, nodes) with each cold link's context cut to u, v and what v reaches within `depth` hops without u
    (the kept nodes in their order); other links unchanged. `mark`: an int32 scratch of -1s, one per graph node
    (left clean)."""
    out_ptr, out_nodes = _cold_kernel(
        np.asarray(indptr, dtype=np.int64),
        np.asarray(indices),
        np.ascontiguousarray(node_ptr, dtype=np.int64),
        np.ascontiguousarray(nodes, dtype=np.int64),
        np.ascontiguousarray(cold, dtype=np.bool_),
        int(depth),
        mark,
    )
    return out_ptr, out_nodes[: out_ptr[-1]]


def sample_of(ptr: np.ndarray) -> np.ndarray:
    """Each row's sample, for rows grouped by the (B+1,) offsets `ptr`."""
    return np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))


def hide_head_edges(ptr: np.ndarray, rows: np.ndarray, cold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ptr, rows) without the rows of cold samples that touch local 0 (u); rows: (E, 2) pairs or (E, 3) triples
    whose first two columns are local ids."""
    at_u = (rows[:, 0] == 0) | (rows[:, 1] == 0)
    sample = sample_of(ptr)
    keep = ~(at_u & cold[sample])
    new_ptr = np.zeros(len(ptr), dtype=np.int64)
    np.cumsum(np.bincount(sample[keep], minlength=len(ptr) - 1), out=new_ptr[1:])
    return new_ptr, rows[keep]


def hide_head_dense(adj: np.ndarray, cold: np.ndarray) -> np.ndarray:
    """A dense (B, [K,] L, L) adjacency with local 0's row and column zeroed in cold samples (in place)."""
    adj[cold, ..., 0, :] = 0
    adj[cold, ..., :, 0] = 0
    return adj


@njit(cache=True)
def _cold_kernel(indptr, indices, node_ptr, nodes, cold, depth, mark):
    B = node_ptr.shape[0] - 1
    out_ptr = np.zeros(B + 1, dtype=np.int64)
    out = np.empty(max(16, nodes.shape[0]), dtype=np.int64)
    width = 2
    for b in range(B):
        width = max(width, node_ptr[b + 1] - node_ptr[b])
    hop = np.empty(width, dtype=np.int64)
    queue = np.empty(width, dtype=np.int64)
    m = 0
    for b in range(B):
        lo, hi = node_ptr[b], node_ptr[b + 1]
        k = hi - lo
        if not cold[b] or nodes[lo] == nodes[lo + 1]:  # a self-loop candidate has no head apart from its tail
            out = grow(out, m + k)
            for i in range(k):
                out[m + i] = nodes[lo + i]
            m += k
            out_ptr[b + 1] = m
            continue
        for i in range(k):
            mark[nodes[lo + i]] = i
            hop[i] = -1
        hop[1] = 0
        queue[0] = 1
        head, tail = 0, 1
        while head < tail:  # breadth first from v over the context's graph, never entering u (local 0)
            a = queue[head]
            head += 1
            if hop[a] == depth:
                continue
            x = nodes[lo + a]
            for j in range(indptr[x], indptr[x + 1]):
                c = mark[indices[j]]
                if c > 0 and hop[c] < 0:
                    hop[c] = hop[a] + 1
                    queue[tail] = c
                    tail += 1
        out = grow(out, m + k)
        out[m] = nodes[lo]
        m += 1
        for i in range(1, k):
            if hop[i] >= 0:
                out[m] = nodes[lo + i]
                m += 1
        for i in range(k):
            mark[nodes[lo + i]] = -1
        out_ptr[b + 1] = m
    return out_ptr, out
