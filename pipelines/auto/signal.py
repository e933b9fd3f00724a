"""The validation signal every choice of `--preset auto` is made on, with its noise measured.

A run's saved validation logits give, per validation positive, its reciprocal rank, its hits at each K (rank
at most K) and its AUC share (the fraction of its negatives ranked below it, ties half): their means are the
run's MRR, Hits@K and AUC. Two runs
ranked the same positives, so a choice between them is judged on the per-positive differences: their mean
and its standard error (that of a bootstrap over the positives, in closed form). One wins only by more than
`margin_se` standard errors; otherwise the earlier (the default, the model alone) stays.

The signal is the metric the user reads (`pencil run --metric`, MRR by default); which metric was used is
recorded with every choice.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from common.eval_scores import read_scores, scores_path
from common.metrics import HITS_KS, rank_against_own, rank_against_shared
from common.shards import load_queries
from trainer.evaluate import eval_entry


def per_positive(manifest: dict, split: str, protocol: str, cid: np.ndarray, score: np.ndarray) -> dict:
    """{"mrr": (P,) reciprocal ranks, "auc": (P,) AUC shares} of one eval set's scores, looked up by cid."""
    entry = eval_entry(manifest, split, protocol)
    pos_cid, neg_cid = load_queries(f"{manifest['root']}/{entry['queries']}",
                                    sha256=manifest["files"][entry["queries"]]["sha256"])
    table = np.full(int(max(cid.max(initial=-1), pos_cid.max(initial=-1), neg_cid.max(initial=-1))) + 1, np.nan)
    table[cid] = score
    pos, neg = table[pos_cid], table[neg_cid]
    if np.isnan(pos).any() or np.isnan(neg).any():
        raise ValueError(f"{manifest['root']}: {split}/{protocol}: some queried candidates were not scored")
    return rank_values(pos, neg)


def rank_values(pos: np.ndarray, neg: np.ndarray) -> dict:
    """Per positive: 1 / its tie-averaged rank among its negatives (shared (Q,) or its own row of (P, K)), 1 where
    that rank is at most K (Hits@K, as common.metrics ranks them), and the share of them ranked below it (ties
    half): the means are MRR, Hits@K and AUC."""
    rank = rank_against_shared(pos, neg) if neg.ndim == 1 else rank_against_own(pos, neg)
    negatives = neg.shape[-1] if neg.ndim == 2 else len(neg)
    hits = {f"hits@{k}": (rank <= k).astype(np.float64) for k in HITS_KS}
    return {"mrr": 1.0 / rank, **hits, "auc": 1.0 - (rank - 1.0) / max(negatives, 1)}


def run_values(run_dir: Path, manifest: dict, protocol: str) -> dict:
    """Per-positive validation values of a run at the epoch its scores were saved (its best)."""
    cid, score, _ = read_scores(scores_path(run_dir, "valid", protocol))
    return per_positive(manifest, "valid", protocol, cid, score.astype(np.float64))


def paired(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of a - b over the positives."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if len(d) < 2:
        return float(d.mean()) if len(d) else 0.0, math.inf
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d)))


def choose(values: dict[str, np.ndarray], margin_se: float) -> dict:
    """The key with the best mean, if it beats the first key (the default) by more than margin_se standard
    errors of the paired difference; else the first key. Ties of the mean keep the earlier key."""
    keys = list(values)
    default = keys[0]
    best = max(keys, key=lambda k: (float(np.mean(values[k])), -keys.index(k)))
    means = {k: float(np.mean(v)) for k, v in values.items()}
    if best == default:
        return {"choice": default, "best": best, "means": means, "difference": 0.0, "se": 0.0,
                "reason": "the default is the best"}
    diff, se = paired(values[best], values[default])
    wins = diff > margin_se * se
    reason = (f"{best} beats {default} by {diff:.4f} > {margin_se:g} SE (SE {se:.4f})" if wins else
              f"{best} is ahead of {default} by {diff:.4f}, within {margin_se:g} SE (SE {se:.4f}): the default stays")
    return {"choice": best if wins else default, "best": best, "means": means, "difference": diff, "se": se,
            "reason": reason}
