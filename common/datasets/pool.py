"""A selection pool: more random validation negatives, drawn the way the protocol draws its own, so that a choice
made on validation sees the rare high-scoring negatives that a test set of twice as many negatives holds.

MRR against shared negatives is decided by the few negatives a model scores highest: one of them above most
positives halves every positive's reciprocal rank. Validation holds as many negatives as positives (about 100
on a small graph), so whether it holds such a pair is luck; test holds twice as many. The pool adds `per_negative`
negatives for each of the protocol's validation negatives, at most POOL_MAX (non-edges of the training and
validation edges, from their own seeded stream, never one of the protocol's); the blend's ranks are then
estimated at the test's number of negatives from the whole set (common.metrics.expected_rank_values). Only
shared-negative protocols ("original") get a pool; nothing here reads test but its number of negatives.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from common.datasets.base import DatasetError, LinkDataset
from common.datasets.negatives import free_pairs, sample_non_edges
from common.datasets.temporal import matched_negatives
from common.graph import DiGraph, Graph
from common.metrics import shared_rank_at

POOL_PROTOCOL = "original"
# at most this many pool negatives: the pool matters where validation is small (about 100 negatives); a dense
# graph's validation of thousands is scored every epoch, and 8x as many more would cost more than training
# (docs/benchmarks/2026-12-02-own-graph-pool.md)
POOL_MAX = 2000


def can_pool(ds: LinkDataset) -> bool:
    """Whether the dataset's validation has shared negatives under POOL_PROTOCOL, and no pool yet."""
    valid = ds.splits.get("valid")
    neg = None if valid is None else valid.neg.get(POOL_PROTOCOL)
    return neg is not None and neg.ndim == 2 and ds.valid_pool is None


def pool_frame(ds: LinkDataset):
    """(validation split, its shared negatives, test's count of them, the training and validation edges as a
    graph, the nodes negatives are drawn among) of a dataset that can_pool."""
    valid = ds.splits["valid"]
    neg = np.asarray(valid.neg[POOL_PROTOCOL], dtype=np.int64)
    test = ds.splits.get("test")
    test_neg = None if test is None else test.neg.get(POOL_PROTOCOL)
    rank_at = len(neg) if test_neg is None or test_neg.ndim != 2 else len(test_neg)
    rank_at = shared_rank_at(POOL_PROTOCOL, rank_at) or rank_at  # test's ranks at scale (common/metrics.py)
    edges = np.concatenate([ds.splits["train"].pos, valid.pos])  # directed: ordered, so the pool's pairs are too
    known = (DiGraph if ds.directed else Graph).from_edges(edges, num_nodes=ds.num_nodes)
    return valid, neg, rank_at, known, ds.active_nodes("valid")


def attach_valid_pool(ds: LinkDataset, per_negative: int, seed: int = 0, cap: int = POOL_MAX) -> LinkDataset:
    """`ds` with its validation's shared negatives followed by per_negative x as many pool negatives, at most
    `cap` and half the pairs left (a new dataset; `ds` is unchanged); its valid_pool records the counts. 0, or no
    pair left: `ds` itself."""
    if not per_negative:
        return ds
    if isinstance(per_negative, bool) or not isinstance(per_negative, int) or per_negative < 0:
        raise DatasetError(f"--valid-pool: must be a non-negative integer, got {per_negative!r}")
    if not can_pool(ds):
        raise DatasetError(
            f"--valid-pool: {ds.name} has no shared validation negatives under '{POOL_PROTOCOL}' to pool "
            "(or has a pool already); drop --valid-pool"
        )
    valid, neg, rank_at, known, nodes = pool_frame(ds)
    # a graph nearly complete has few pairs left: the pool takes at most half of them (rejection sampling stays
    # quick), none when nothing is left, rather than failing the run
    count = min(per_negative * len(neg), cap, max(0, free_pairs(known, nodes) - len(neg)) // 2)
    if not count:
        return ds
    rng, what = np.random.default_rng([seed, 7]), f"{ds.name} validation pool ({per_negative} per validation negative)"
    if ds.temporal:  # drawn as the split draws its own: the positives' shares of new nodes (temporal.py)
        extra = matched_negatives(known, valid.pos, nodes, rng, exclude=neg, what=what, pool=count)
    else:  # the split's streams are [seed, 1] and [seed, 2]
        extra = sample_non_edges(known, count, rng, exclude=neg, what=what, nodes=nodes)
    pooled = replace(valid, neg={**valid.neg, POOL_PROTOCOL: np.concatenate([neg, extra])})
    info = {"protocol": POOL_PROTOCOL, "negatives": len(neg), "pool": len(extra), "rank_at": rank_at}
    return replace(ds, splits={**ds.splits, "valid": pooled}, valid_pool=info)
