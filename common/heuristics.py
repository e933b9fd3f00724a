"""Classical link heuristics on the training graph (paper Appendix E.1), sparse and batched.

All scorers take a `Graph` and integer pairs of shape (M, 2) and return (M,) float64; pairs are
processed in batches so millions of candidates never build more than one batch of temporaries.

- cn / aa / ra: common neighbours, Adamic-Adar (sum of 1/log deg w), resource allocation (1/deg w)
  over w in N(u) ∩ N(v): row u of A times row v of A elementwise, then a weighted row sum.
- katz: sum_{l>=1} beta^l (A^l)_{uv}, by power iteration from the distinct source nodes.
- spd: unweighted shortest-path distance (np.inf when disconnected).
- pr: PageRank product p_u * p_v.
- wcn / waa / wra (WEIGHTED, an edge list's weight column): sum over common neighbours z of
  (w(u, z) + w(v, z)) times 1, 1 / log(1 + s(z)) or 1 / s(z), s(z) the sum of z's edge weights; weights whose
  sums would overflow are divided by a power of two first, which keeps every ranking (scaled_weights).
- edgebank / rpa (TEMPORAL, a temporal split): common/heuristics_temporal.py.
- dcn / daa / dra / reverse (DIRECTED, a --directed dataset): common/heuristics_directed.py.

`score_pairs(name, graph, pairs)` accepts any (..., 2) array and returns scores of shape (...).
Conventions for degenerate inputs: for u == v, N(u) ∩ N(u) = N(u), so CN(u, u) = deg(u) and
SPD(u, u) = 0; isolated nodes score 0 (inf for SPD). A common neighbour of degree 1 (only possible
when u == v) gets AA weight 0 instead of 1/log(1) = inf, as the HeaRT reference code does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from common.graph import Graph, node_pairs
from common.heuristics_directed import DIRECTED, unique_ordered
from common.heuristics_directed import LABELS as DIRECTED_LABELS
from common.heuristics_temporal import edgebank, recent_pa
from common.metrics import evaluate, unique_pairs

log = logging.getLogger(__name__)

DEFAULT_BATCH = 100_000
# Dense (N, b) float64 blocks used by Katz and SPD are capped at this many bytes (each).
_BLOCK_BYTES = 256 << 20


class HeuristicError(ValueError):
    """Bad heuristic input; the message names the problem and the fix."""


# ---------------------------------------------------------------------------- helpers
def adjacency(graph: Graph, weights: np.ndarray | None = None) -> sp.csr_matrix:
    """Symmetric (N, N) CSR adjacency from the graph's arrays; entry (i, j) = weights[j] if given."""
    n = graph.num_nodes
    data = np.ones(graph.indices.shape[0]) if weights is None else weights[graph.indices]
    return sp.csr_matrix((data, graph.indices, graph.indptr), shape=(n, n))


def _check(graph: Graph, pairs) -> np.ndarray:
    return node_pairs(pairs, graph.num_nodes, repr(graph), HeuristicError)


def _block_cols(num_nodes: int, batch: int) -> int:
    """Columns of a dense (N, b) block that fit the memory cap (at least one)."""
    return max(1, min(batch, _BLOCK_BYTES // (8 * max(1, num_nodes))))


def _sources_first(pairs: np.ndarray) -> np.ndarray:
    """Swap columns so column 0 has the fewer distinct nodes: SPD is symmetric and exact (integer
    distances), and its cost grows with the number of distinct sources."""
    if len(np.unique(pairs[:, 1])) < len(np.unique(pairs[:, 0])):
        return pairs[:, ::-1]
    return pairs


def _per_source(
    pairs: np.ndarray, cols: int, block_fn: Callable[[np.ndarray], np.ndarray], reorient: bool = True
) -> np.ndarray:
    """Run block_fn on batches of distinct sources; block_fn(src) -> (N, len(src)) values;
    pick entry [v, column of u] for every pair (u, v)."""
    if reorient:
        pairs = _sources_first(pairs)
    out = np.empty(pairs.shape[0], dtype=np.float64)
    sources, src_idx = np.unique(pairs[:, 0], return_inverse=True)
    # Pairs grouped by source once, so each block finds its pairs by slicing, not an O(M) mask.
    order = np.argsort(src_idx, kind="stable")
    grouped = src_idx[order]
    for s in range(0, len(sources), cols):
        block = block_fn(sources[s : s + cols])
        lo, hi = np.searchsorted(grouped, [s, s + cols])
        sel = order[lo:hi]
        out[sel] = block[pairs[sel, 1], src_idx[sel] - s]
    return out


# ---------------------------------------------------------------------------- local overlap
def _weighted_overlap(graph: Graph, pairs, node_weight: np.ndarray, batch: int) -> np.ndarray:
    """sum_{w in N(u) ∩ N(v)} node_weight[w], batched over pairs."""
    p = _check(graph, pairs)
    a = adjacency(graph)
    aw = adjacency(graph, node_weight)
    out = np.empty(p.shape[0], dtype=np.float64)
    for s in range(0, p.shape[0], batch):
        u, v = p[s : s + batch, 0], p[s : s + batch, 1]
        # a[u] and aw[v] are (b, N) sparse; their product keeps only the common neighbours.
        out[s : s + batch] = np.asarray(a[u].multiply(aw[v]).sum(axis=1)).ravel()
    return out


def common_neighbors(graph: Graph, pairs, batch: int = DEFAULT_BATCH) -> np.ndarray:
    """CN(u, v) = |N(u) ∩ N(v)|."""
    return _weighted_overlap(graph, pairs, np.ones(graph.num_nodes), batch)


def adamic_adar(graph: Graph, pairs, batch: int = DEFAULT_BATCH) -> np.ndarray:
    """AA(u, v) = sum over common neighbours w of 1 / log(deg w) (weight 0 where deg w <= 1)."""
    deg = graph.degree.astype(np.float64)
    w = np.zeros_like(deg)
    big = deg > 1
    w[big] = 1.0 / np.log(deg[big])
    return _weighted_overlap(graph, pairs, w, batch)


def resource_allocation(graph: Graph, pairs, batch: int = DEFAULT_BATCH) -> np.ndarray:
    """RA(u, v) = sum over common neighbours w of 1 / deg w."""
    deg = graph.degree.astype(np.float64)
    w = np.zeros_like(deg)
    w[deg > 0] = 1.0 / deg[deg > 0]
    return _weighted_overlap(graph, pairs, w, batch)


# ---------------------------------------------------------------------------- weighted local overlap
def scaled_weights(weight: np.ndarray) -> tuple[np.ndarray, int]:
    """(weight / 2^e, e): e = 0 (the weights as they are) unless twice their total overflows float64, then 2^e is
    the power of two just above the largest weight, so every sum of weights stays finite (weights near 1e308
    overflowed each score to inf, one value for all). A power of two only moves exponent bits: sums and ratios
    are the exact ones scaled, so WCN and WRA rank exactly as unscaled."""
    weight = np.asarray(weight, dtype=np.float64)
    if weight.size and not np.isfinite(weight).all():
        raise HeuristicError("weights: not all finite; divide the weight column by a constant")
    with np.errstate(over="ignore"):  # an overflow here is the question asked, not a warning
        fits = np.isfinite(2 * weight.sum())
    if fits:
        return weight, 0
    exp = int(np.frexp(weight.max())[1])
    return np.ldexp(weight, -exp), exp


def strength(graph: Graph, weight: np.ndarray) -> np.ndarray:
    """s(z): the sum of the weights of z's edges (`weight` aligned with graph.indices)."""
    return np.bincount(np.repeat(np.arange(graph.num_nodes), graph.degree), weights=weight, minlength=graph.num_nodes)


def _log1p_scaled(s: np.ndarray, exp: int) -> np.ndarray:
    """log(1 + s * 2^exp) without overflow: log1p where s * 2^exp is finite (the unscaled value, bit for bit),
    else exp * log 2 + log(s + 2^-exp)."""
    with np.errstate(over="ignore"):  # inf marks the strengths taken the other way
        full = np.ldexp(s, exp)
    out = np.log1p(full, where=np.isfinite(full), out=np.zeros_like(s))
    big = ~np.isfinite(full)
    out[big] = exp * np.log(2.0) + np.log(s[big] + np.ldexp(1.0, -exp))
    return out


def _weighted_pair_overlap(graph: Graph, pairs, weight: np.ndarray, node_weight: np.ndarray, batch: int) -> np.ndarray:
    """sum_{z in N(u) ∩ N(v)} (w(u, z) + w(v, z)) * node_weight[z], batched over pairs."""
    p = _check(graph, pairs)
    weight = np.asarray(weight, dtype=np.float64)
    if weight.shape != graph.indices.shape:
        raise HeuristicError(f"weights: expected one per CSR entry ({graph.indices.shape[0]}), got {weight.shape}")
    n = graph.num_nodes
    a = adjacency(graph)
    wg = sp.csr_matrix((weight * node_weight[graph.indices], graph.indices, graph.indptr), shape=(n, n))
    out = np.empty(p.shape[0], dtype=np.float64)
    for s in range(0, p.shape[0], batch):
        u, v = p[s : s + batch, 0], p[s : s + batch, 1]
        both = wg[u].multiply(a[v]) + a[u].multiply(wg[v])  # only common neighbours survive either product
        out[s : s + batch] = np.asarray(both.sum(axis=1)).ravel()
    return out


def weighted_common_neighbors(graph: Graph, pairs, weight: np.ndarray, batch: int = DEFAULT_BATCH) -> np.ndarray:
    """WCN(u, v) = sum over common neighbours z of w(u, z) + w(v, z) (Murata and Moriyasu 2007); divided by
    scaled_weights' power of two where the weights would overflow (the same ranking)."""
    weight, _ = scaled_weights(weight)
    return _weighted_pair_overlap(graph, pairs, weight, np.ones(graph.num_nodes), batch)


def weighted_adamic_adar(graph: Graph, pairs, weight: np.ndarray, batch: int = DEFAULT_BATCH) -> np.ndarray:
    """WAA(u, v) = sum over common neighbours z of (w(u, z) + w(v, z)) / log(1 + s(z)), s the strength; where the
    weights would overflow, divided by scaled_weights' power of two, the logarithm still of the unscaled s(z)."""
    weight, exp = scaled_weights(weight)
    s = strength(graph, weight)
    g = np.zeros_like(s)
    g[s > 0] = 1.0 / _log1p_scaled(s[s > 0], exp)
    return _weighted_pair_overlap(graph, pairs, weight, g, batch)


def weighted_resource_allocation(graph: Graph, pairs, weight: np.ndarray, batch: int = DEFAULT_BATCH) -> np.ndarray:
    """WRA(u, v) = sum over common neighbours z of (w(u, z) + w(v, z)) / s(z) (scale-free: exact, scaled or not)."""
    weight, _ = scaled_weights(weight)
    s = strength(graph, weight)
    g = np.zeros_like(s)
    g[s > 0] = 1.0 / s[s > 0]
    return _weighted_pair_overlap(graph, pairs, weight, g, batch)


# ---------------------------------------------------------------------------- global scores
def _katz_terms(a: sp.csr_matrix, beta: float, max_iter: int, tol: float) -> int:
    """Number of terms L after which every new term is below tol, for every source at once.

    (beta A)^l 1 bounds (beta A)^l e_u entrywise (A >= 0), so one vector fixes L for the whole
    graph; a per-block stopping rule would make a pair's value depend on the other pairs in its
    block, and ties between equal-Katz negatives would then break differently run to run.
    """
    y = np.ones(a.shape[0])
    for length in range(1, max_iter + 1):
        y = beta * (a @ y)
        top = float(y.max()) if y.size else 0.0
        if not np.isfinite(top):
            raise HeuristicError(f"katz: series diverged (beta={beta} too large for this graph)")
        if top < tol:
            return length
    log.warning(
        "katz: not converged after %d terms (last term bound %.3g); beta=%g may be too large "
        "for this graph's spectral radius, the sum is truncated",
        max_iter,
        top,
        beta,
    )
    return max_iter


def katz(
    graph: Graph, pairs, beta: float = 0.005, max_iter: int = 100, tol: float = 1e-12, batch: int = 1024
) -> np.ndarray:
    """Katz(u, v) = sum_{l>=1} beta^l (A^l)_{uv}.

    For each block of distinct sources, x_1 = beta * A e_u and x_{l+1} = beta * A x_l are summed
    for a graph-wide number of terms, chosen so the last term is below tol everywhere (the series
    converges iff beta * lambda_max(A) < 1; otherwise a warning says it was truncated at max_iter).
    The source of a pair is always min(u, v), so a pair's value is bit-identical whatever else is
    scored with it. Cost: one sparse-times-dense product per term per block of sources.
    """
    p = _check(graph, pairs)
    if not 0 < beta < 1:
        raise HeuristicError(f"katz: beta must lie in (0, 1), got {beta}")
    a = adjacency(graph)
    n = graph.num_nodes
    terms = _katz_terms(a, beta, max_iter, tol)

    def block(src: np.ndarray) -> np.ndarray:
        x = np.zeros((n, len(src)))
        x[src, np.arange(len(src))] = 1.0
        acc = np.zeros_like(x)
        for _ in range(terms):
            x = beta * (a @ x)
            acc += x
        return acc

    canon = np.stack([p.min(axis=1), p.max(axis=1)], axis=1)
    return _per_source(canon, _block_cols(n, batch), block, reorient=False)


def shortest_path(graph: Graph, pairs, max_dist: int | None = None, batch: int = 1024) -> np.ndarray:
    """Unweighted shortest-path distance; np.inf if disconnected (or farther than max_dist).

    Exact distances cost one whole-graph search per distinct source (about 0.25 s per source on a
    1M-edge graph on a small CPU); on OGB-sized candidate sets pass max_dist, which stops every
    search at that depth and is orders of magnitude cheaper.
    """
    p = _check(graph, pairs)
    a = adjacency(graph)
    limit = np.inf if max_dist is None else float(max_dist) + 0.5

    def block(src: np.ndarray) -> np.ndarray:
        # One BFS per source in C; `limit` stops each search early when a cutoff is wanted.
        # directed=True: A is already symmetric, and this skips csgraph's symmetrising copy.
        return csgraph.dijkstra(a, directed=True, unweighted=True, indices=src, limit=limit).T

    return _per_source(p, _block_cols(graph.num_nodes, batch), block)


def pagerank(graph: Graph, alpha: float = 0.85, tol: float = 1e-10, max_iter: int = 1000) -> np.ndarray:
    """PageRank stationary distribution (N,): uniform teleport; dangling (isolated) nodes' mass
    is spread uniformly, so the result always sums to 1."""
    n = graph.num_nodes
    deg = graph.degree.astype(np.float64)
    dangling = deg == 0
    inv = np.zeros(n)
    inv[~dangling] = 1.0 / deg[~dangling]
    at = adjacency(graph)  # symmetric, so A^T = A: (A^T D^-1 p)_j = sum_i A_ij p_i / deg_i
    p = np.full(n, 1.0 / n)
    for _ in range(max_iter):
        nxt = alpha * (at @ (p * inv) + p[dangling].sum() / n) + (1.0 - alpha) / n
        if np.abs(nxt - p).sum() < tol:
            return nxt
        p = nxt
    log.warning("pagerank: not converged to tol=%g after %d iterations", tol, max_iter)
    return p


def pagerank_pair(graph: Graph, pairs, alpha: float = 0.85) -> np.ndarray:
    """PR(u, v) = p_u * p_v."""
    p = _check(graph, pairs)
    pr = pagerank(graph, alpha=alpha)
    return pr[p[:, 0]] * pr[p[:, 1]]


# ---------------------------------------------------------------------------- registry
HEURISTICS: dict[str, Callable[..., np.ndarray]] = {
    "cn": common_neighbors,
    "aa": adamic_adar,
    "ra": resource_allocation,
    "katz": katz,
    "spd": shortest_path,
    "pr": pagerank_pair,
}


# Heuristics of a weighted graph: they take `weight=` (LinkDataset.weight_for(split)) beside graph and pairs.
WEIGHTED: dict[str, Callable[..., np.ndarray]] = {
    "wcn": weighted_common_neighbors,
    "waa": weighted_adamic_adar,
    "wra": weighted_resource_allocation,
}

# Time-aware baselines of a temporal split (common/heuristics_temporal.py); rpa takes `activity=`
# (LinkDataset.activity_for(split)).
TEMPORAL: dict[str, Callable[..., np.ndarray]] = {"edgebank": edgebank, "rpa": recent_pa}
# Every heuristic by name, and each one's row label where it is not the name in capitals.
# Directed heuristics take `out=` (LinkDataset.out_graph_for(split)).
ALL = {**HEURISTICS, **WEIGHTED, **TEMPORAL, **DIRECTED}
LABELS = {"edgebank": "EdgeBank", "rpa": "recent PA", **DIRECTED_LABELS}


def label(name: str) -> str:
    """A heuristic's name in a report's row."""
    return LABELS.get(name, name.upper())


def extra_inputs(ds, split: str, name: str) -> dict:
    """What heuristic `name` reads beyond graph and pairs on `split` of dataset `ds` ({} for most)."""
    if name in WEIGHTED:
        return {"weight": ds.weight_for(split)}
    if name in DIRECTED:
        return {"out": ds.out_graph_for(split)}
    return {"activity": ds.activity_for(split)} if name == "rpa" else {}


# Heuristics where a smaller value means "more likely a link"; negate them before ranking.
LOWER_IS_BETTER = frozenset({"spd"})


def ranking_scores(name: str, graph: Graph, pairs, **kwargs) -> np.ndarray:
    """score_pairs oriented so that larger always ranks higher (SPD negated; inf -> -inf, last)."""
    s = score_pairs(name, graph, pairs, **kwargs)
    return -s if name in LOWER_IS_BETTER else s


def score_pairs(name: str, graph: Graph, pairs, **kwargs) -> np.ndarray:
    """Score pairs of shape (..., 2) with heuristic `name`; returns float64 of shape (...). The weighted ones
    (WEIGHTED) need `weight=`: the graph's edge weights aligned with its indices."""
    fn = ALL.get(name)
    if fn is None:
        raise HeuristicError(f"unknown heuristic '{name}'; available: {', '.join(ALL)}")
    if name in WEIGHTED and kwargs.get("weight") is None:
        raise HeuristicError(
            f"heuristic {name} needs edge weights (an edge list's weight column); use {name[1:]} on an unweighted graph"
        )
    if name in DIRECTED and kwargs.get("out") is None:
        raise HeuristicError(f"heuristic {name} needs a directed graph (an edge list read with --directed)")
    if name == "rpa" and kwargs.get("activity") is None:
        raise HeuristicError("heuristic rpa needs a temporal split (an edge list's time column)")
    arr = np.asarray(pairs)
    if arr.ndim < 1 or arr.shape[-1] != 2:
        raise HeuristicError(f"pairs: expected shape (..., 2), got {arr.shape}")
    flat = arr.reshape(-1, 2)
    if flat.shape[0] == 0:
        return np.zeros(arr.shape[:-1], dtype=np.float64)
    return fn(graph, _check(graph, flat), **kwargs).reshape(arr.shape[:-1])


def split_scores(ds, split: str, protocols: list[str], heuristics: list[str]) -> dict:
    """{protocol: {heuristic: (positives' scores (P,), negatives' scores (Q,) or (P, K))}} of a dataset's split,
    oriented so larger ranks higher, each pair scored on the graph a model sees for that split; the weighted
    heuristics (WEIGHTED) on that graph's weights. Each protocol ranks its own positives (the user's links
    under "pairs"). Every distinct pair of every protocol is scored once per heuristic (HeaRT repeats pairs)."""
    graph = ds.graph_for(split)
    data = ds.splits[split]
    # one part per distinct positives array, then one per protocol's negatives
    positives = {id(data.positives(p)): data.positives(p) for p in protocols} or {id(data.pos): data.pos}
    pos_part = {p: list(positives).index(id(data.positives(p))) for p in protocols}
    parts = list(positives.values()) + [data.negatives(p) for p in protocols]
    flat = [a.reshape(-1, 2) for a in parts]
    uniq, inverse = unique_pairs(np.concatenate(flat))
    ordered = unique_ordered(np.concatenate(flat)) if set(heuristics) & set(DIRECTED) else None
    bounds = np.cumsum([0] + [len(f) for f in flat])
    log.info("%s/%s: %d candidate pairs, %d distinct, graph %r", ds.name, split, bounds[-1], len(uniq), graph)
    results: dict[str, dict] = {p: {} for p in protocols}
    for name in heuristics:
        t0 = time.perf_counter()
        pairs, back = ordered if name in DIRECTED else (uniq, inverse)  # directed: (u, v) is not (v, u)
        scores = ranking_scores(name, graph, pairs, **extra_inputs(ds, split, name))
        per_part = [scores[back[bounds[i] : bounds[i + 1]]] for i in range(len(parts))]
        for i, proto in enumerate(protocols, start=len(positives)):
            results[proto][name] = (per_part[pos_part[proto]], per_part[i].reshape(parts[i].shape[:-1]))
        log.info("%s scored in %.2fs", name, time.perf_counter() - t0)
    return results


def score_split(ds, split: str, protocols: list[str], heuristics: list[str]) -> dict:
    """{protocol: {heuristic: metrics (fractions)}} of a dataset's split: what the heuristic rows of every
    report rank."""
    return {
        proto: {name: evaluate(proto, pos, neg) for name, (pos, neg) in by_h.items()}
        for proto, by_h in split_scores(ds, split, protocols, heuristics).items()
    }
