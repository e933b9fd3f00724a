"""The validation signal every choice of `--preset auto` is made on, with its noise measured.

A run's saved validation logits give, per validation positive, its reciprocal rank, its hits at each K (rank
at most K) and its AUC share (the fraction of its negatives ranked below it, ties half): their means are the
run's MRR, Hits@K and AUC. Two runs
ranked the same positives, so a choice between them is judged on the per-positive differences: their mean
and its standard error. One wins only by more than `margin_se` standard errors; otherwise the earlier (the
default, the model alone) stays.

The standard error: the closed form over the positives holds the shared negatives fixed and leaves out the
noise of which negatives were drawn; on independent validation halves of 9 graphs its z-scores of an MRR
difference had a spread of 1.73 instead of 1 (experiments/own_graph_research/noise.py). The search's choice
therefore takes the SE of a paired bootstrap that resamples the positives and the shared negatives together
(`two_way_se`; spread 0.89 on the same halves); the blend, whose options share one model's scores, keeps the
closed form.

A validation set with a selection pool (preprocess --valid-pool) is read on the protocol's own negatives, except by
the blend (`pool=True`): there each positive's values are the expected ones at test's count of negatives, drawn
from all of them (common.metrics.expected_rank_values).

The signal is the metric the user reads (`pencil run --metric`, MRR by default); which metric was used is
recorded with every choice.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.eval_scores import read_scores, scores_path
from common.manifest_record import Manifest
from common.metrics import HITS_KS, expected_rank_values, rank_against_own, rank_against_shared, shared_rank_at
from common.shards import load_queries
from trainer.evaluate import eval_entry, protocol_negatives

BOOTSTRAPS = 200  # draws of two_way_se: its own relative error is about 1 / sqrt(2 * 200), 5 %


@dataclass(frozen=True)
class Signal:
    """A run's scores of the validation queries: pos (P,), and neg (Q,) shared by every positive or (P, K)."""

    pos: np.ndarray
    neg: np.ndarray
    at: int | None = None  # the negatives' count its ranks are estimated at (a selection pool); None: as ranked

    def values(self, ip: np.ndarray | None = None, iq: np.ndarray | None = None) -> dict:
        """rank_values on the positives ip and the shared negatives iq (None: all); a positive's own negatives
        go with it."""
        pos, neg = (
            (self.pos, self.neg) if ip is None else (self.pos[ip], self.neg if self.neg.ndim == 1 else self.neg[ip])
        )
        return rank_values(pos, neg if iq is None or neg.ndim == 2 else neg[iq], self.at)


def two_way_se(a: Signal, b: Signal, metric: str, draws: int = BOOTSTRAPS, seed: int = 0) -> float:
    """Standard error of the mean paired difference a - b of `metric`: a bootstrap that draws the positives and
    the shared negatives (the same draw for a and b, which stay paired), every positive re-ranked against the
    drawn negatives. Own negatives travel with their positive. Deterministic (seeded)."""
    p, q = len(a.pos), len(a.neg) if a.neg.ndim == 1 else 0
    if p < 2:
        return math.inf
    rng = np.random.default_rng(seed)
    reps = np.empty(draws)
    for k in range(draws):
        ip, iq = rng.integers(0, p, p), (rng.integers(0, q, q) if q else None)
        reps[k] = float(np.mean(a.values(ip, iq)[metric] - b.values(ip, iq)[metric]))
    return float(reps.std(ddof=1))


@functools.lru_cache(maxsize=32)
def _verified_queries(path: str, sha256: str | None) -> tuple[np.ndarray, np.ndarray]:
    pos_cid, neg_cid = load_queries(path, sha256=sha256)
    pos_cid.setflags(write=False), neg_cid.setflags(write=False)  # shared by every caller
    return pos_cid, neg_cid


def set_queries(manifest: Manifest, entry: dict) -> tuple[np.ndarray, np.ndarray]:
    """(pos_cid, neg_cid) of an eval set, read and checked against the manifest's sha256 once per driver: the search
    and the blend ask for the same few sets once per candidate, seed and key, and on an object store each read
    is a download (minutes in all on a cluster's s3:// sets)."""
    return _verified_queries(str(manifest.queries_path(entry)), manifest.queries_sha256(entry))


def eval_signal(
    manifest: Manifest, split: str, protocol: str, cid: np.ndarray, score: np.ndarray, pool: bool = False
) -> Signal:
    """One eval set's scores, looked up by cid, as the positives' and their negatives' scores: the protocol's
    negatives, or with `pool` the set's selection pool too, its ranks estimated at test's count of negatives
    (preprocess --valid-pool; a set without one: its negatives as ranked)."""
    entry = eval_entry(manifest, split, protocol)
    pos_cid, neg_cid = set_queries(manifest, entry)
    # a typed set's scores keep their float32 ties (common.metrics.tie_bounds), as the trainer ranked them
    dtype = score.dtype if typed_set(manifest) and score.dtype.kind == "f" else np.float64
    table = np.full(int(max(cid.max(initial=-1), pos_cid.max(initial=-1), neg_cid.max(initial=-1))) + 2, np.nan, dtype)
    table[cid] = score
    table[-1] = -np.inf  # a typed set's padded corruption (neg_cid -1): never above nor tied with a positive
    pos, neg = table[pos_cid], table[neg_cid]
    if np.isnan(pos).any() or np.isnan(neg).any():
        raise ValueError(f"{manifest.root}: {split}/{protocol}: some queried candidates were not scored")
    info = entry.get("valid_pool")
    if pool and info and neg.ndim == 1:
        return Signal(pos, neg, int(info["rank_at"]))
    neg = table[protocol_negatives(entry, neg_cid)]
    return Signal(pos, neg, shared_rank_at(protocol, len(neg)) if neg.ndim == 1 else None)  # the metrics' ranking


def per_positive(
    manifest: Manifest, split: str, protocol: str, cid: np.ndarray, score: np.ndarray, pool: bool = False
) -> dict:
    """{"mrr": (P,) reciprocal ranks, "auc": (P,) AUC shares, hits} of one eval set's scores, looked up by cid
    (`pool`: eval_signal's)."""
    return eval_signal(manifest, split, protocol, cid, score, pool).values()


def rank_values(pos: np.ndarray, neg: np.ndarray, at: int | None = None) -> dict:
    """Per positive: 1 / its tie-averaged rank among its negatives (shared (Q,) or its own row of (P, K)), 1 where
    that rank is at most K (Hits@K, as common.metrics ranks them), and the share of them ranked below it (ties
    half): the means are MRR, Hits@K and AUC. `at`: shared negatives that are a selection pool, the reciprocal
    rank and Hits@K expected against `at` of them (common.metrics.expected_rank_values)."""
    if at is not None and neg.ndim == 1:
        return expected_rank_values(pos, neg, at)
    rank = rank_against_shared(pos, neg) if neg.ndim == 1 else rank_against_own(pos, neg)
    # per row of own negatives, those that are real (-inf pads a typed set's short row)
    negatives = (neg > -np.inf).sum(axis=1) if neg.ndim == 2 else len(neg)
    hits = {f"hits@{k}": (rank <= k).astype(np.float64) for k in HITS_KS}
    return {"mrr": 1.0 / rank, **hits, "auc": 1.0 - (rank - 1.0) / np.maximum(negatives, 1)}


def run_signal(run_dir: Path, manifest: Manifest, protocol: str) -> Signal:
    """A run's validation scores at the epoch they were saved (its best)."""
    cid, score, _ = read_scores(scores_path(run_dir, "valid", protocol))
    return eval_signal(manifest, "valid", protocol, cid, score if typed_set(manifest) else score.astype(np.float64))


def typed_set(manifest) -> bool:
    """A typed set (relation types): its scores keep float32 ties. A stand-in manifest without the field: untyped."""
    return bool(getattr(manifest, "relations", None))


def paired(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of a - b over the positives."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if len(d) < 2:
        return float(d.mean()) if len(d) else 0.0, math.inf
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d)))


def choose(values: dict[str, np.ndarray], margin_se: float, se_of: Callable[[str, str], float] | None = None) -> dict:
    """The key with the best mean, if it beats the first key (the default) by more than margin_se standard
    errors of the paired difference (se_of(best, default); None: the closed form over the positives); else the
    first key. Ties of the mean keep the earlier key."""
    keys = list(values)
    default = keys[0]
    best = max(keys, key=lambda k: (float(np.mean(values[k])), -keys.index(k)))
    means = {k: float(np.mean(v)) for k, v in values.items()}
    if best == default:
        return {
            "choice": default,
            "best": best,
            "means": means,
            "difference": 0.0,
            "se": 0.0,
            "reason": "the default is the best",
        }
    diff, se = paired(values[best], values[default])
    if se_of is not None:
        se = se_of(best, default)
    wins = diff > margin_se * se
    reason = (
        f"{best} beats {default} by {diff:.4f} > {margin_se:g} SE (SE {se:.4f})"
        if wins
        else f"{best} is ahead of {default} by {diff:.4f}, within {margin_se:g} SE (SE {se:.4f}): the default stays"
    )
    return {
        "choice": best if wins else default,
        "best": best,
        "means": means,
        "difference": diff,
        "se": se,
        "reason": reason,
    }


def trails(own: Signal, base: Signal, metric: str, margin_se: float) -> dict | None:
    """When `own` is behind `base` on `metric` by more than margin_se two-way SEs and not ahead of it by more than
    that on tie_metric(metric) (where a tie-break could still choose it): each metric's difference and SE;
    else None. The search's gate after the grace period."""
    lead = {}
    for m in (metric, tie_metric(metric)):
        lead[f"{m}_difference"] = float(np.mean(own.values()[m] - base.values()[m]))
        lead[f"{m}_se"] = two_way_se(own, base, m)
    other = tie_metric(metric)
    behind = lead[f"{metric}_difference"] < -margin_se * lead[f"{metric}_se"]
    return lead if behind and lead[f"{other}_difference"] <= margin_se * lead[f"{other}_se"] else None


def tie_metric(metric: str) -> str:
    """The metric that breaks a tie on `metric`: AUC, or MRR when the search decides on AUC."""
    return "mrr" if metric == "auc" else "auc"


def break_tie(decision: dict, signals: dict[str, Signal], metric: str, margin_se: float) -> dict:
    """When the default stayed because no alternative beat it on `metric` by more than margin_se SE, an alternative
    within margin_se SE of it there, either way (a tie), replaces it if it beats it on tie_metric(metric) by more
    than margin_se SE: where the lead metric cannot tell them apart (an MRR at chance), the other one decides.
    `signals`: the default's first. Differences and SEs as `choose` with the two-way bootstrap."""
    keys = list(signals)
    default = keys[0]
    if decision["choice"] != default or len(keys) < 2:
        return decision
    values = {k: s.values() for k, s in signals.items()}

    def diff_se(k: str, m: str) -> tuple[float, float]:
        return float(np.mean(values[k][m] - values[default][m])), two_way_se(signals[k], signals[default], m)

    return tie_break(decision, keys, diff_se, lambda k, m: float(np.mean(values[k][m])), metric, margin_se)


def tie_break(
    decision: dict,
    keys: list[str],
    diff_se: Callable[[str, str], tuple[float, float]],
    mean: Callable[[str, str], float],
    metric: str,
    margin_se: float,
) -> dict:
    """The tie-break itself, for the search and the blend alike: of `keys`, those within margin_se SE of
    decision["choice"] on `metric`, either way, are tied with it; the best of them on tie_metric(metric)
    replaces it when better there by more than margin_se SE. diff_se(k, m): the mean difference of k minus the
    choice on m and its SE; mean(k, m): k's mean on m. Ties of the mean keep the earlier key."""
    base, other = decision["choice"], tie_metric(metric)
    lead = {k: diff_se(k, metric) for k in keys if k != base}
    tied = [k for k, (d, se) in lead.items() if abs(d) <= margin_se * se]
    if not tied:
        return decision
    best = max(tied, key=lambda k: (mean(k, other), -keys.index(k)))
    diff, se = diff_se(best, other)
    record = {"candidate": best, "metric": other, "difference": diff, "se": se}
    record.update({f"{metric}_difference": lead[best][0], f"{metric}_se": lead[best][1]})
    if diff <= margin_se * se:
        return {**decision, "tie_break": record}
    reason = (
        f"{best} ties with {base} on {metric} (within {margin_se:g} SE) and beats it on {other} by "
        f"{diff:.4f} > {margin_se:g} SE (SE {se:.4f})"
    )
    return {**decision, "choice": best, "tie_break": record, "reason": reason}
