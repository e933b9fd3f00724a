"""Graph statistics the auto search reads, and HeaRT-style hard validation negatives.

`graph_stats(dataset, protocol)` measures the training graph (nodes, edges, degree mean / median /
90th percentile, density) and how easy the split's own validation negatives are: the fraction that
share at least one common neighbour with their pair. Random negatives on a sparse graph almost never
do, so every model ranks them below the positives and validation MRR saturates (BENCHMARKS.md: 0 of
citeseer's 227 validation negatives have one); such a split cannot tell configurations apart. What decides
it is how many such negatives a positive is ranked against (the fraction times the negatives per ranking:
the shared pool, or each positive's own list): below one, a positive with a common neighbour ranks first
under any model that sees common neighbours. On a denser graph the same random negatives are a fair
signal (ppi: 13% of 1,892 shared negatives, ~250 per ranking), and it is the test protocol's own.

`hard_negatives(...)` is the replacement signal: for each validation positive (u, v), the non-neighbours
of u (and of v) with the highest resource-allocation score on the TRAINING graph (HeaRT, Li et al. 2023:
2-hop non-edges ranked by a heuristic), topped up with seeded uniform non-edges where a node has too few
2-hop non-neighbours. Known pairs are never returned: training edges (they are neighbours), and every pair
the caller excludes (validation and test positives, test negatives). Deterministic for a seed.
Only arrays: one sparse product for the 2-hop scores, then sorts, no Python loop per node.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from common.graph import Graph
from common.heuristics import adjacency, common_neighbors

# A validation set where a positive is ranked against fewer than this many negatives that share a common
# neighbour with their pair (in expectation) is "too easy": every model that sees common neighbours ranks
# the positives that have one first, so validation MRR saturates whatever the configuration.
EASY_CN_NEGATIVES = 1.0


@dataclass(frozen=True)
class GraphStats:
    nodes: int
    edges: int  # undirected training edges
    mean_degree: float
    median_degree: float
    p90_degree: float
    density: float  # edges / (n (n - 1) / 2)
    valid_positives: int
    valid_negatives: int
    valid_neg_cn_fraction: float  # validation negatives with >= 1 common neighbour (training graph)
    valid_negatives_per_ranking: int  # negatives each positive is ranked against (shared pool or own list)

    @property
    def valid_cn_negatives_per_ranking(self) -> float:
        return self.valid_neg_cn_fraction * self.valid_negatives_per_ranking

    @property
    def easy_validation(self) -> bool:
        return self.valid_cn_negatives_per_ranking < EASY_CN_NEGATIVES

    def to_dict(self) -> dict:
        return {**asdict(self), "valid_cn_negatives_per_ranking": self.valid_cn_negatives_per_ranking,
                "easy_validation": self.easy_validation}


def degree_stats(graph: Graph) -> dict:
    deg = graph.degree.astype(np.float64)
    n = graph.num_nodes
    return {"nodes": n, "edges": graph.num_edges, "mean_degree": float(deg.mean()) if n else 0.0,
            "median_degree": float(np.median(deg)) if n else 0.0,
            "p90_degree": float(np.percentile(deg, 90)) if n else 0.0,
            "density": graph.num_edges / max(1, n * (n - 1) // 2)}


def graph_stats(dataset, protocol: str = "original") -> GraphStats:
    """Statistics of the training graph and of `protocol`'s validation negatives (never the test split)."""
    valid = dataset.splits.get("valid")
    neg = valid.neg.get(protocol) if valid is not None else None
    if neg is None or neg.size == 0:
        fraction, count, per_ranking = 0.0, 0, 0
    else:
        neg = np.asarray(neg, dtype=np.int64)
        pairs = neg.reshape(-1, 2)
        fraction, count = float(np.mean(common_neighbors(dataset.graph, pairs) > 0)), len(pairs)
        per_ranking = count if neg.ndim == 2 else int(neg.shape[1])  # (Q, 2) shared pool, (P, K, 2) own lists
    return GraphStats(**degree_stats(dataset.graph), valid_positives=0 if valid is None else len(valid.pos),
                      valid_negatives=count, valid_neg_cn_fraction=fraction, valid_negatives_per_ranking=per_ranking)


def _pair_keys(pairs: np.ndarray, n: int) -> np.ndarray:
    p = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return np.unique(np.minimum(p[:, 0], p[:, 1]) * n + np.maximum(p[:, 0], p[:, 1]))


def _top_two_hop(graph: Graph, sources: np.ndarray, k: int, banned: np.ndarray) -> tuple[np.ndarray, ...]:
    """(row, node) of up to k best non-neighbours per source by RA (ties: lower node id), as flat arrays
    with row = index into `sources`."""
    n = graph.num_nodes
    deg = graph.degree.astype(np.float64)
    inv = np.divide(1.0, deg, out=np.zeros_like(deg), where=deg > 0)
    a = adjacency(graph)
    ra = (adjacency(graph, inv)[sources] @ a).tocoo()  # (S, N): sum over w of a_uw / deg(w) * a_wx, sparse
    row, col, val = ra.row.astype(np.int64), ra.col.astype(np.int64), ra.data
    src = sources[row]
    ok = (col != src) & ~graph.has_edge(src, col)
    ok &= ~np.isin(np.minimum(src, col) * n + np.maximum(src, col), banned)
    row, col, val = row[ok], col[ok], val[ok]
    order = np.lexsort((col, -val, row))
    row, col = row[order], col[order]
    start = np.searchsorted(row, row, side="left")
    keep = (np.arange(len(row)) - start) < k
    return row[keep], col[keep]


def _fill_random(graph: Graph, sources: np.ndarray, have_row: np.ndarray, have_col: np.ndarray, k: int,
                 banned: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Top up each source's list to k distinct non-neighbours with seeded uniform draws."""
    n = graph.num_nodes
    rows, cols = have_row, have_col
    for _ in range(100):
        count = np.bincount(rows, minlength=len(sources))
        need = np.maximum(0, k - count)
        if not need.any():
            break
        r = np.repeat(np.arange(len(sources)), need * 2 + 1)
        c = rng.integers(0, n, size=len(r))
        s = sources[r]
        ok = (c != s) & ~graph.has_edge(s, c)
        ok &= ~np.isin(np.minimum(s, c) * n + np.maximum(s, c), banned)
        ok &= ~np.isin(r * n + c, rows * n + cols)
        r, c = r[ok], c[ok]
        _, first = np.unique(r * n + c, return_index=True)  # distinct within a source, first draw kept
        first = np.sort(first)
        r, c = r[first], c[first]
        rank = np.arange(len(r)) - np.searchsorted(r, r, side="left")  # r stays sorted by construction
        keep = rank < need[r]
        rows, cols = np.concatenate([rows, r[keep]]), np.concatenate([cols, c[keep]])
    order = np.argsort(rows, kind="stable")
    return rows[order], cols[order]


def hard_negatives(graph: Graph, pos: np.ndarray, k: int, exclude: list[np.ndarray], seed: int = 0,
                   max_positives: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(positives, negatives (P, k, 2)) for ranking: per positive (u, v), ceil(k/2) pairs (u, x) with x among
    u's top-RA non-neighbours and floor(k/2) pairs (y, v) likewise, all canonical (min, max).

    `exclude`: pair arrays never to return (valid/test positives, test negatives). `max_positives`: a seeded
    subset of the positives (evaluation cost grows with P x k). Raises if a node has fewer than k non-edges."""
    n = graph.num_nodes
    pos = np.asarray(pos, dtype=np.int64).reshape(-1, 2)
    rng = np.random.default_rng(seed)
    if max_positives is not None and len(pos) > max_positives:
        pos = pos[np.sort(rng.choice(len(pos), size=max_positives, replace=False))]
    half = (k + 1) // 2
    if n - 1 - int(graph.degree.max(initial=0)) < half:
        raise ValueError(f"hard negatives: some node has fewer than {half} non-neighbours; the graph is too dense "
                         f"for {k} negatives per positive")
    banned = np.unique(np.concatenate([_pair_keys(e, n) for e in exclude] + [_pair_keys(pos, n)]))
    sources = np.unique(pos)
    row, col = _top_two_hop(graph, sources, half, banned)
    row, col = _fill_random(graph, sources, row, col, half, banned, rng)
    table = col.reshape(len(sources), half)  # every source now holds exactly `half`, rows sorted
    u_side = table[np.searchsorted(sources, pos[:, 0])]  # (P, half): partners of u
    v_side = table[np.searchsorted(sources, pos[:, 1])][:, : k - half]
    u = np.broadcast_to(pos[:, :1], u_side.shape)
    v = np.broadcast_to(pos[:, 1:], v_side.shape)
    pairs = np.concatenate([np.stack([u, u_side], -1), np.stack([v_side, v], -1)], axis=1)
    return pos, np.sort(pairs, axis=-1)
