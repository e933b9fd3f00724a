"""A typed graph's heuristics on the SAME corruptions the model ranks (protocol "kg", common/datasets/kg.py): each
triple against its own filtered corruptions of head and tail, a (-1, -1) pair padding a short row (scored -inf:
never above nor tied with a positive).

- cn / aa / ra: on the graph the split is scored on, relations ignored (its undirected union of triples);
- l3: the walks of length 3 between the two ends on that same union, (A^3)[h, t]. Between two kinds (a user and
  an item) CN / AA / RA are 0, and u - i' - u' - i walks, the users who chose what u chose choosing i, are what
  collaborative filtering reads; its prior is the same count, for a blend's w * log1p(l3);
- popularity: per relation, score(h, r, t) = out_r(h) + in_r(t), the head's and the tail's degree under r in the
  triples of that graph. A row's head corruptions share t and its tail corruptions share h, so the sum ranks
  every corruption exactly by the degree of the end it replaced (a user-item file's item popularity);
- popularity prior: (1 + out_r(h)) (1 + in_r(t)) - 1, the same ranking as a heuristic, shaped for a blend's
  w * log1p(h) (pipelines/auto/blend.py): that is w * (log1p(out_r(h)) + log1p(in_r(t))), so against each
  corruption the prior adds w * the log-popularity gap of the end it replaced, whatever the other end's degree;
- recent popularity (a temporal split: a user-item file): a(h) + a(t), a(z) the node's edge rows before the
  split's boundary each weighted exp(-age / tau) (common/heuristics_temporal.py, LinkDataset.recency), tau the
  fraction of the history's span under which this heuristic's validation MRR is best (`recency_choice`: chosen
  on validation, then read on test); its prior (1 + a(h)) (1 + a(t)) - 1 as the popularity prior's.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from common.datasets.kg import KG
from common.heuristics import ranking_scores
from common.metrics import unique_pairs

STRUCTURE = ("cn", "aa", "ra")  # read on the typed graph's undirected union, relations ignored
L3 = "l3"
L3_PRIOR = "l3 prior"
POPULARITY = "popularity"
POPULARITY_PRIOR = "popularity prior"
RECENT = "recent popularity"
RECENT_PRIOR = "recent popularity prior"
TYPED_HEURISTICS = (*STRUCTURE, L3, POPULARITY)


def typed_heuristics(dataset) -> tuple[str, ...]:
    """The heuristics of a typed graph's report: TYPED_HEURISTICS, and recent popularity on a temporal split."""
    return TYPED_HEURISTICS + ((RECENT,) if dataset.recency is not None else ())


def prior_names(dataset) -> tuple[str, ...]:
    """The priors of a typed graph's blend: popularity's, recent popularity's on a temporal split, then l3's."""
    return (POPULARITY_PRIOR,) + ((RECENT_PRIOR,) if dataset.recency is not None else ()) + (L3_PRIOR,)


def relation_degrees(dataset, split: str) -> tuple[tuple, tuple, int]:
    """(sorted keys r * N + node, their counts) as heads, then as tails, and N, of the triples on which `split` is
    scored: the training triples, and valid's too for test when the dataset has a test graph (a temporal split)."""
    rel = dataset.relations
    triples = rel.triples("train", dataset.splits["train"].pos)
    if split == "test" and dataset.test_graph is not None:
        triples = np.concatenate([triples, rel.triples("valid", dataset.splits["valid"].pos)])
    n = dataset.num_nodes
    heads, tails = triples[:, 1] * n + triples[:, 0], triples[:, 1] * n + triples[:, 2]
    return np.unique(heads, return_counts=True), np.unique(tails, return_counts=True), n


def lookup(table: tuple[np.ndarray, np.ndarray], keys: np.ndarray) -> np.ndarray:
    """Counts of `keys` in (sorted keys, counts); 0 for a key absent."""
    known, counts = table
    if not len(known):
        return np.zeros(keys.shape, dtype=np.float64)
    at = np.searchsorted(known, keys).clip(max=len(known) - 1)
    return np.where(known[at] == keys, counts[at], 0).astype(np.float64)


def end_degrees(dataset, split: str, pairs: np.ndarray, rel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(out_r(h), in_r(t)) of every [head, tail] pair of `pairs` (..., 2) with relations `rel` (its leading shape)."""
    out_deg, in_deg, n = relation_degrees(dataset, split)
    return lookup(out_deg, rel * n + pairs[..., 0]), lookup(in_deg, rel * n + pairs[..., 1])


def popularity(dataset, split: str, pairs: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """out_r(h) + in_r(t) of every pair, float64 (module docstring)."""
    head, tail = end_degrees(dataset, split, pairs, rel)
    return head + tail


def popularity_prior(dataset, split: str, pairs: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """(1 + out_r(h)) (1 + in_r(t)) - 1 of every pair, float64: log1p of it is the sum of the two ends' log1p."""
    head, tail = end_degrees(dataset, split, pairs, rel)
    return (1.0 + head) * (1.0 + tail) - 1.0


def recent_ends(dataset, split: str, pairs: np.ndarray, tau: int) -> tuple[np.ndarray, np.ndarray]:
    """(a(h), a(t)) of every [head, tail] pair of `pairs`, a the decayed activity of tau index `tau`."""
    a = dataset.recency[split][tau]
    return a[pairs[..., 0]], a[pairs[..., 1]]


def recency_choice(dataset) -> int:
    """The index into RECENCY_FRACTIONS whose recent popularity ranks validation's triples best (MRR; the first
    of a tie): validation alone decides it, for the row and the prior alike."""
    from common.metrics import evaluate

    data = dataset.splits["valid"]
    pos, neg = data.pos, data.negatives(KG)
    real = neg[..., 0] >= 0
    safe = np.where(real[..., None], neg, 0)
    best, choice = -1.0, 0
    for tau in range(len(dataset.recency["valid"])):
        mrr = evaluate(KG, sum(recent_ends(dataset, "valid", pos, tau)),
                       np.where(real, sum(recent_ends(dataset, "valid", safe, tau)), -np.inf))["mrr"]  # fmt: skip
        if mrr > best:
            best, choice = mrr, tau
    return choice


def typed_scores(dataset, split: str, names=None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{heuristic: (positives' scores (P,), corruptions' scores (P, K), -inf where a row is padded)} of `split`'s
    triples, each scored on the graph `split` is scored on; names: typed_heuristics(dataset) by default."""
    data = dataset.splits[split]
    pos, neg = data.pos, data.negatives(KG)
    real = neg[..., 0] >= 0
    rel = dataset.relations.pos[split]
    flat = np.concatenate([pos, neg[real]])
    flat_rel = np.concatenate([rel, np.broadcast_to(rel[:, None], real.shape)[real]])
    uniq, inverse = unique_pairs(flat)
    graph = dataset.graph_for(split)
    names = typed_heuristics(dataset) if names is None else names
    tau = recency_choice(dataset) if {RECENT, RECENT_PRIOR} & set(names) else None
    walks = walks_of_three(graph, flat) if {L3, L3_PRIOR} & set(names) else None
    out = {}
    for name in names:
        if name == POPULARITY:
            scores = popularity(dataset, split, flat, flat_rel)
        elif name == POPULARITY_PRIOR:
            scores = popularity_prior(dataset, split, flat, flat_rel)
        elif name in (RECENT, RECENT_PRIOR):
            head, tail = recent_ends(dataset, split, flat, tau)
            scores = head + tail if name == RECENT else (1.0 + head) * (1.0 + tail) - 1.0
        elif name in (L3, L3_PRIOR):
            scores = walks
        else:
            scores = ranking_scores(name, graph, uniq)[inverse]
        rows = np.full(real.shape, -np.inf)
        rows[real] = scores[len(pos) :]
        out[name] = (scores[: len(pos)].astype(np.float64), rows)
    return out


def walks_of_three(graph, pairs: np.ndarray) -> np.ndarray:
    """(A^3)[u, v] of every [u, v] row of `pairs` (M, 2), float64, A the graph's symmetric CSR (an entry repeated
    is an edge counted twice, as CN counts it). Each pair is walked from its end that more pairs share (a row of
    corruptions shares one), so the 2-hop counts of a node are gathered once for all its pairs; memory O(N)."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if not len(pairs):
        return np.zeros(0)
    nodes, counts = np.unique(pairs, return_counts=True)
    shared = counts[np.searchsorted(nodes, pairs)]  # (M, 2): how many pairs hold each end
    flip = shared[:, 1] > shared[:, 0]
    src, far = np.where(flip, pairs[:, 1], pairs[:, 0]), np.where(flip, pairs[:, 0], pairs[:, 1])
    order = np.argsort(src, kind="stable")
    sources, starts = np.unique(src[order], return_index=True)
    starts = np.append(starts, len(order)).astype(np.int64)
    out = np.empty(len(pairs))
    indptr, indices = np.asarray(graph.indptr, dtype=np.int64), np.asarray(graph.indices, dtype=np.int64)
    out[order] = _walks_kernel(indptr, indices, sources, starts, far[order])
    return out


@njit(cache=True)
def _walks_kernel(indptr, indices, sources, starts, far):
    """Per source s: acc[b] = the walks s - a - b (2 hops), then each of its far ends v sums acc over N(v)."""
    acc = np.zeros(len(indptr) - 1)
    out = np.empty(len(far))
    for i in range(len(sources)):
        s = sources[i]
        for e in range(indptr[s], indptr[s + 1]):
            a = indices[e]
            for f in range(indptr[a], indptr[a + 1]):
                acc[indices[f]] += 1.0
        for j in range(starts[i], starts[i + 1]):
            v, total = far[j], 0.0
            for e in range(indptr[v], indptr[v + 1]):
                total += acc[indices[e]]
            out[j] = total
        for e in range(indptr[s], indptr[s + 1]):  # clear only what this source touched
            a = indices[e]
            for f in range(indptr[a], indptr[a + 1]):
                acc[indices[f]] = 0.0
    return out
