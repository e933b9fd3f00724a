"""Link-centric ShaDowKHop sampler as one numba kernel over CSR arrays.

For a batch of links (u, v) the kernel, per link:
  1. grows a d-hop frontier from u and from v *separately*; every frontier entry (duplicates kept)
     takes all its neighbours when its degree is <= n, else n distinct ones uniformly at random
     (Floyd's algorithm: exactly n draws, no copy of the neighbour row);
  2. takes the union of both visited sets; local ids u -> 0, v -> 1, the rest in a seeded uniformly
     random order (or discovery order with shuffle=False);
  2b. with `closest` = K > 0 and more than K context nodes, keeps only the K - 2 structurally closest besides
     u and v (`_closest`): common neighbours of u and v first, then their other neighbours, then the rest,
     each tier by its links into the sampled context, ties in the local order of step 2; the kept nodes
     keep that order. Off (0), the output is the old view's, bit for bit;
  3. emits the node set only: the induced subgraph (minus the target edge u-v) is a pure function of
     it and the graph, recovered where it is consumed (common/induce.py; shard format v2).

A per-node marker array (global id -> local id, -1 outside the context) is shared by all links of a
call and reset after each link, so membership tests are O(1) and nothing is allocated per link.
The node budget N_max = 2 * sum n^k is implied by the semantics; the kernel checks it anyway.

Pure numpy/numba: no Ray, no I/O. The same (inputs, seed) always gives identical output.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from numba import njit

from common.induce import grow
from common.presets import n_max as budget


def derive_seed(*parts) -> int:
    """A 32-bit seed from any tuple of labels (seed, split, protocol, view, shard, block...).

    Hash-based, so a shard's randomness depends only on its identity, never on which worker
    ran it or in what order."""
    blob = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(blob, digest_size=4).digest(), "little")


@dataclass
class Subgraphs:
    """Sampled context of a batch of links: CSR-style offsets into one flat node array."""

    node_ptr: np.ndarray  # (B+1,) int64
    nodes: np.ndarray  # (sum N_b,) int64 global ids in local-id order

    def __len__(self) -> int:
        return int(self.node_ptr.shape[0] - 1)

    def link(self, i: int) -> np.ndarray:
        return self.nodes[self.node_ptr[i] : self.node_ptr[i + 1]]


class Scratch:
    """Work arrays sized by the graph, allocated once and reused by every call (they are left clean)."""

    def __init__(self, indptr: np.ndarray):
        num_nodes = indptr.shape[0] - 1
        max_deg = int(np.diff(indptr).max()) if num_nodes else 0
        self.mark = np.full(num_nodes, -1, dtype=np.int32)
        self.stamp = np.zeros(max(max_deg, 1), dtype=np.int64)
        self.tick = 0


def sample_subgraphs(
    indptr,
    indices,
    src,
    dst,
    d: int,
    n: int,
    seed: int,
    shuffle: bool = True,
    scratch: Scratch | None = None,
    link_seeds: np.ndarray | None = None,
    closest: int = 0,
) -> Subgraphs:
    """Sample the (d, n) link-centric subgraph of every link (src[i], dst[i]) on the CSR graph.

    link_seeds: optional (B,) uint64, one seed per link (the RNG restarts at every link), so a link's
    subgraph does not depend on which other links share the call (scoring engine: trainer/scoring.py);
    without it one stream from `seed` runs through the whole call, as the shard tasks use it.
    closest: at most this many context nodes per link (u and v included), the structurally closest; 0 = all."""
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    indices = np.ascontiguousarray(indices)
    src = np.ascontiguousarray(src, dtype=np.int64)
    dst = np.ascontiguousarray(dst, dtype=np.int64)
    num_nodes = indptr.shape[0] - 1
    if src.shape != dst.shape or src.ndim != 1:
        raise ValueError(f"src and dst must be 1-D arrays of equal length, got {src.shape} and {dst.shape}")
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= num_nodes):
        raise ValueError(f"link endpoints must lie in [0, {num_nodes})")
    if d < 1 or n < 1:
        raise ValueError(f"sampling (d, n) must be positive, got ({d}, {n})")
    if closest != 0 and closest < 3:
        raise ValueError(f"closest must be 0 (off) or at least 3 (u, v and one more node), got {closest}")
    if scratch is None:
        scratch = Scratch(indptr)
    if link_seeds is None:
        link_seeds = np.zeros(0, dtype=np.uint64)
    elif np.shape(link_seeds) != src.shape:
        raise ValueError(f"link_seeds must hold one seed per link ({src.shape[0]}), got shape {np.shape(link_seeds)}")
    link_seeds = np.ascontiguousarray(link_seeds, dtype=np.uint64)
    node_ptr, nodes, scratch.tick = _sample_kernel(
        indptr,
        indices,
        src,
        dst,
        d,
        n,
        budget(d, n),
        np.uint64(seed & 0xFFFFFFFFFFFFFFFF),
        shuffle,
        scratch.mark,
        scratch.stamp,
        scratch.tick,
        link_seeds,
        closest,
    )
    return Subgraphs(node_ptr=node_ptr, nodes=nodes[: node_ptr[-1]])


# ---------------------------------------------------------------------------- kernel
# Own RNG (splitmix64 + Lemire's unbiased bounded ints) instead of numba's np.random: ~10x faster
# per draw, and the stream is fixed by this file, not by the numba version.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_MASK32 = np.uint64(0xFFFFFFFF)


@njit(cache=True)
def _next64(state):
    state[0] += _GOLDEN
    z = state[0]
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def _randbelow(state, bound):
    """Uniform integer in [0, bound), bound < 2**32, exactly unbiased (Lemire 2019)."""
    b = np.uint64(bound)
    m = (_next64(state) >> np.uint64(32)) * b
    low = m & _MASK32
    if low < b:
        threshold = (np.uint64(2**32) - b) % b
        while low < threshold:
            m = (_next64(state) >> np.uint64(32)) * b
            low = m & _MASK32
    return np.int64(m >> np.uint64(32))


@njit(cache=True)
def _visit(w, ctx, k, mark, n_max):
    """Add node w to the context if new; returns the new context size."""
    if mark[w] < 0:
        if k >= n_max:
            raise RuntimeError("sampled context exceeds the N_max budget")
        mark[w] = k
        ctx[k] = w
        k += 1
    return k


@njit(cache=True)
def _expand_root(root, indptr, indices, d, n, n_max, ctx, k, mark, stamp, tick, frontier, nxt, rng):
    """d hops of ShaDowKHop from one root; the frontier keeps duplicates. Returns (k, tick)."""
    frontier[0] = root
    fsize = 1
    for hop in range(d):
        last = hop == d - 1  # the last hop's picks join the context but need no frontier
        nsize = 0
        for fi in range(fsize):
            f = frontier[fi]
            start = indptr[f]
            deg = indptr[f + 1] - start
            if deg <= n:
                for j in range(deg):
                    w = indices[start + j]
                    k = _visit(w, ctx, k, mark, n_max)
                    if not last:
                        nxt[nsize] = w
                        nsize += 1
            else:
                # Floyd's algorithm: a uniform n-subset of the row in n draws; `stamp` marks
                # picked row positions with a fresh tick, so it never needs clearing.
                tick += 1
                for j in range(deg - n, deg):
                    t = _randbelow(rng, j + 1)
                    if stamp[t] == tick:
                        t = j
                    stamp[t] = tick
                    w = indices[start + t]
                    k = _visit(w, ctx, k, mark, n_max)
                    if not last:
                        nxt[nsize] = w
                        nsize += 1
        if not last:
            frontier, nxt = nxt, frontier
            fsize = nsize
    return k, tick


@njit(cache=True)
def _closest(ctx, k, keep, u, v, indptr, indices, mark, score):
    """Keep ctx[2:keep] as the `keep - 2` closest of ctx[2:k] (the order among them unchanged); the dropped
    nodes' marks are cleared. A node's score: (links to u and v) * (k + 1) + (links into the context)."""
    for i in range(2, k):
        w = ctx[i]
        to_pair = 0
        inside = 0
        for j in range(indptr[w], indptr[w + 1]):
            x = indices[j]
            if x == u or x == v:
                to_pair += 1
            if mark[x] >= 0:
                inside += 1
        score[i - 2] = -(to_pair * (k + 1) + inside)  # negated: an ascending stable sort puts the best first
    order = np.argsort(score[: k - 2], kind="mergesort")
    for r in range(keep - 2, k - 2):
        mark[ctx[order[r] + 2]] = -2  # dropped (reset to -1 below)
    m = 2
    for i in range(2, k):
        w = ctx[i]
        if mark[w] == -2:
            mark[w] = -1
        else:
            ctx[m] = w
            mark[w] = m
            m += 1
    return m


@njit(cache=True)
def _sample_kernel(indptr, indices, src, dst, d, n, n_max, seed, shuffle, mark, stamp, tick, link_seeds, closest):
    rng = np.zeros(1, dtype=np.uint64)
    rng[0] = np.uint64(seed)
    _next64(rng)  # decorrelate neighbouring seeds
    num_links = src.shape[0]
    node_ptr = np.zeros(num_links + 1, dtype=np.int64)
    nodes = np.empty(max(64, num_links * 8), dtype=np.int64)
    ctx = np.empty(n_max, dtype=np.int64)
    half = n_max // 2 + 1  # one root's frontier never exceeds n^d < N_max / 2
    frontier = np.empty(half, dtype=np.int64)
    nxt = np.empty(half, dtype=np.int64)
    score = np.empty(n_max if closest > 0 else 0, dtype=np.int64)
    nn = 0
    per_link = link_seeds.shape[0] > 0
    for b in range(num_links):
        if per_link:
            rng[0] = link_seeds[b]
            _next64(rng)
        u = src[b]
        v = dst[b]
        self_loop = u == v
        mark[u] = 0
        ctx[0] = u
        ctx[1] = v  # for u == v, local 1 is a second copy of u (marker keeps pointing at 0)
        if not self_loop:
            mark[v] = 1
        k = 2
        k, tick = _expand_root(u, indptr, indices, d, n, n_max, ctx, k, mark, stamp, tick, frontier, nxt, rng)
        k, tick = _expand_root(v, indptr, indices, d, n, n_max, ctx, k, mark, stamp, tick, frontier, nxt, rng)
        if shuffle:  # Fisher-Yates over local ids 2..k-1; u and v stay at 0 and 1
            for i in range(k - 1, 2, -1):
                j = 2 + _randbelow(rng, i - 1)
                tmp = ctx[i]
                ctx[i] = ctx[j]
                ctx[j] = tmp
            for i in range(2, k):
                mark[ctx[i]] = i
        if closest > 0 and k > closest:
            k = _closest(ctx, k, closest, u, v, indptr, indices, mark, score)
        nodes = grow(nodes, nn + k)
        for i in range(k):
            nodes[nn + i] = ctx[i]
            mark[ctx[i]] = -1
        nn += k
        node_ptr[b + 1] = nn
    return node_ptr, nodes, tick
