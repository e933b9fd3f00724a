"""What a model that learned nothing scores, computed from the very queries a test evaluates on.

End-to-end tests assert their trained metric against these, not against 0 <= mrr <= 1: a model whose
scores are random (or constant) stays below them. The ranking here is written out independently of
common.metrics (which the tests check), with continuous random scores, so ties never happen.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def chance_mrr(pos_cid, neg_cid, quantile: float = 0.999, draws: int = 2000, seed: int = 0) -> float:
    """The `quantile` of the MRR that i.i.d. random scores (one per candidate id) get on these queries:
    neg_cid (Q,) shared by every positive or (P, K) per positive. Simulated, because positives that share
    negatives have correlated ranks (the spread is wider than P independent ranks would give)."""
    pos_cid, neg_cid = np.asarray(pos_cid, np.int64), np.asarray(neg_cid, np.int64)
    n = int(max(pos_cid.max(), neg_cid.max())) + 1
    rng = np.random.default_rng(seed)
    mrr = np.empty(draws)
    for i in range(0, draws, 100):  # 100 draws at a time: (100, P, Q) booleans stay small
        k = min(100, draws - i)
        scores = rng.random((k, n))
        pos = scores[:, pos_cid]  # (k, P)
        neg = scores[:, neg_cid]  # (k, Q) or (k, P, K)
        if neg_cid.ndim == 1:
            ranks = 1 + (neg[:, None, :] > pos[:, :, None]).sum(-1)
        else:
            ranks = 1 + (neg > pos[:, :, None]).sum(-1)
        mrr[i : i + k] = (1.0 / ranks).mean(1)
    return float(np.quantile(mrr, quantile))


def expected_random_mrr(num_negatives: int) -> float:
    """Exact E[1 / rank] of one positive among `num_negatives` negatives under random scores:
    the rank is uniform on 1..Q+1, so the mean is H(Q+1) / (Q+1)."""
    q = num_negatives + 1
    return float(np.sum(1.0 / np.arange(1, q + 1)) / q)


def chance_mrr_of_set(shards: str | Path, split: str = "test", protocol: str = "original", **kw) -> float:
    """chance_mrr of a shard set's eval queries file ({split}-{protocol}-queries.npz, via its manifest)."""
    from common.shards import read_manifest

    manifest = read_manifest(shards)
    name = manifest.eval[f"{split}/{protocol}"]["queries"]
    with np.load(Path(manifest.root) / name) as q:
        return chance_mrr(q["pos_cid"], q["neg_cid"], **kw)
