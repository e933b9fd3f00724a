"""Ranking metrics for the three evaluation protocols, vectorised.

- original (Planetoid): every positive against ALL of the split's negatives (shared, 1-D scores); above
  SHARED_RANK_MAX of them (a graph of more than 50,000 edges), against SHARED_RANK_MAX of them drawn at random,
  in expectation (shared_rank_at): against a million-edge graph's 100,000 every method's MRR is near 0;
- heart: every positive against its own hard negatives (per-positive, 2-D scores (P, K));
- ogb: `ogb.linkproppred.Evaluator` semantics — shared negatives give Hits@K where a positive counts
  only if strictly above the K-th best negative; per-positive negatives (citation2) give MRR;
- pairs: the user's labelled pairs (--eval-pairs), ranked as original: every link against all non-links;
- kg: a typed graph's triples, each against its own filtered corruptions of head and tail ((P, K) scores, -inf
  where a row was padded: never above nor tied with a positive, left out of AUC / AP); `relation_metrics` gives
  MRR and Hits@1/3/10 per relation beside;
- reverse: a directed graph's edges u -> v whose reverse is no edge, each against v -> u alone ((P, 1) scores);
  besides the usual keys, `reverse_acc`: the share of them scored above their reverse, ties counting half.

Ranks are tie-averaged: rank = 1 + (#neg > pos + #neg >= pos) / 2. A constant scorer therefore
gets the middle rank, not the best one (ogb 1.3.6's torch MRR path computes exactly this). Float32 scores (a
model's) tie within F32_TIE_RTOL * max(1, |pos|) of each other (tie_bounds), in every rank, AUC, AP and
accuracy below: identical subgraphs scored in different batches differ by float noise, not by structure; wider
scores (the heuristics' float64, integer counts) compare exactly.

Beside the ranking metrics, every protocol gets ROC-AUC and average precision (AP) of the positives
against the negatives POOLED (the numbers the subgraph link-prediction literature reports for a user's
own graph: held-out positives vs as many random negatives). Under HeaRT (and citation2) the pool is
every (positive, hard negative) row, P x K negatives, a pair repeated across rows counted each time:
AUC is then the chance that a positive outscores a random hard negative of any query (AUC does not
depend on the class ratio, so it stays comparable); AP does, its chance level is the positive share
P / (P + P * K) = 1 / (K + 1) there instead of 1/2 under 1:1 random negatives.

`evaluate(protocol, pos_scores, neg_scores)` is the one entry point the trainer and the reports use;
it always returns the same keys (METRIC_KEYS), as fractions in [0, 1].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

HITS_KS = (1, 3, 10, 20, 50, 100)
RANK_KEYS = ("mrr",) + tuple(f"hits@{k}" for k in HITS_KS)
CLASSIFICATION_KEYS = ("auc", "ap")
METRIC_KEYS = RANK_KEYS + CLASSIFICATION_KEYS
REVERSE_KEY = "reverse_acc"  # protocol reverse's own metric, beside METRIC_KEYS
# "original" ranks each positive against at most this many shared negatives (shared_rank_at): the test set of a
# 50,000-edge graph (10%), so every graph up to that size keeps its numbers to the digit: the own-graph suite (all
# under 20,000 edges) and the paper's Planetoid graphs (pubmed, the largest: 4,432 test negatives)
SHARED_RANK_MAX = 5000
# Float32 scores this close (relative, at least 1e-5 absolute) tie: the same subgraph scored in another batch moves by
# float noise (< 1e-5), and an eval set's positives share batches, so untied that noise ranked them systematically.
F32_TIE_RTOL = 1e-5
# Rows of (P, K) negatives compared per step: bounds the temporary bool matrix to ~64 MB.
_OWN_CHUNK_ELEMS = 1 << 26


class MetricsError(ValueError):
    """Bad scores for a metric; the message names the shape or value problem."""


# ---------------------------------------------------------------------------- input handling
def _as_scores(x, what: str) -> np.ndarray:
    """numpy view of scores; torch tensors (any device, bf16 included) are accepted."""
    if type(x).__module__.startswith("torch"):
        x = x.detach().to("cpu")
        if not x.dtype.is_floating_point or x.dtype.itemsize < 4:
            x = x.float()  # bf16/fp16 have no numpy dtype; fp32 holds them exactly
        x = x.numpy()
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiub":
        raise MetricsError(f"{what}: scores must be numeric, got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        # NaN compares False with everything and would silently rank first; refuse instead.
        raise MetricsError(f"{what}: contains NaN scores; the model or heuristic diverged")
    return arr


def _check_pos(pos: np.ndarray) -> np.ndarray:
    if pos.ndim != 1:
        raise MetricsError(f"pos_scores: expected shape (P,), got {pos.shape}")
    if pos.size == 0:
        raise MetricsError("pos_scores: empty; there must be at least one positive to rank")
    return pos


def tie_bounds(pos: np.ndarray, *others: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi), float64 per positive: a score in [lo, hi] ties it. Where pos or any of `others` is float32 (or
    narrower), [pos - tol, pos + tol] with tol = F32_TIE_RTOL * max(1, |pos|); otherwise lo = hi = pos (exact)."""
    p = pos.astype(np.float64)
    if not any(a.dtype.kind == "f" and a.dtype.itemsize <= 4 for a in (pos, *others)):
        return p, p
    tol = np.where(np.isfinite(p), F32_TIE_RTOL * np.maximum(1.0, np.abs(p)), 0.0)
    return p - tol, p + tol


# ---------------------------------------------------------------------------- ranks
def rank_against_shared(pos_scores, neg_scores) -> np.ndarray:
    """Tie-averaged rank of each positive among all Q shared negatives -> (P,) float64.

    Negatives are sorted once; two searchsorted calls count #neg > pos and #neg >= pos,
    so the cost is O((P + Q) log Q) instead of the O(P * Q) comparison matrix.
    """
    pos = _check_pos(_as_scores(pos_scores, "pos_scores"))
    neg = _as_scores(neg_scores, "neg_scores")
    if neg.ndim != 1:
        raise MetricsError(f"neg_scores: shared negatives must have shape (Q,), got {neg.shape}")
    lo, hi = tie_bounds(pos, neg)
    srt = np.sort(neg.astype(np.float64))
    q = srt.shape[0]
    n_greater = q - np.searchsorted(srt, hi, side="right")
    n_geq = q - np.searchsorted(srt, lo, side="left")
    return 1.0 + (n_greater + n_geq) / 2.0


def rank_against_own(pos_scores, neg_scores) -> np.ndarray:
    """Tie-averaged rank of positive i among its own negatives row neg_scores[i] -> (P,) float64."""
    pos = _check_pos(_as_scores(pos_scores, "pos_scores"))
    neg = _as_scores(neg_scores, "neg_scores")
    if neg.ndim != 2 or neg.shape[0] != pos.shape[0]:
        raise MetricsError(f"neg_scores: per-positive negatives must have shape ({pos.shape[0]}, K), got {neg.shape}")
    out = np.empty(pos.shape[0], dtype=np.float64)
    lo, hi = tie_bounds(pos, neg)
    step = max(1, _OWN_CHUNK_ELEMS // max(1, neg.shape[1]))
    # Chunked so a citation2-sized (86k x 1000) input never builds a full comparison matrix.
    for s in range(0, pos.shape[0], step):
        n = neg[s : s + step]
        out[s : s + step] = (
            1.0 + ((n > hi[s : s + step, None]).sum(axis=1) + (n >= lo[s : s + step, None]).sum(axis=1)) / 2.0
        )
    return out


RELATION_KEYS = ("mrr", "hits@1", "hits@3", "hits@10")  # per relation of a typed graph (the standard figures)


def relation_metrics(pos_scores, neg_scores, pos_rel, names: Sequence[str]) -> dict[str, float]:
    """Per relation of a typed graph: {"mrr/<name>", "hits@K/<name>" (K = 1, 3, 10), "count/<name>"} over the
    positives of that relation, each against its own negatives (-inf: padding, never counted); relations without
    a positive are left out."""
    ranks = rank_against_own(_as_scores(pos_scores, "pos_scores"), _as_scores(neg_scores, "neg_scores"))
    rel, out = np.asarray(pos_rel, dtype=np.int64), {}
    for r, name in enumerate(names):
        mask = rel == r
        if mask.any():
            got = ranking_metrics(ranks[mask], ks=(1, 3, 10))
            out.update({f"{k}/{name}": got[k] for k in RELATION_KEYS})
            out[f"count/{name}"] = float(mask.sum())
    return out


def ranking_metrics(ranks, ks: Sequence[int] = HITS_KS) -> dict[str, float]:
    """MRR and Hits@K (fraction of ranks <= K) from ranks."""
    r = np.asarray(ranks, dtype=np.float64)
    if r.ndim != 1 or r.size == 0:
        raise MetricsError(f"ranks: expected a non-empty 1-D array, got shape {r.shape}")
    out = {"mrr": float(np.mean(1.0 / r))}
    for k in ks:
        out[f"hits@{k}"] = float(np.mean(r <= k))
    return out


def ogb_hits(pos_scores, neg_scores, k: int) -> float:
    """OGB Hits@K with shared negatives: fraction of positives strictly above the K-th best negative.

    With fewer than K negatives ogb returns 1.0 (every positive is "in the top K"); so do we.
    """
    pos = _check_pos(_as_scores(pos_scores, "pos_scores"))
    neg = _as_scores(neg_scores, "neg_scores")
    if neg.ndim != 1:
        raise MetricsError(f"neg_scores: OGB Hits@K needs shared negatives of shape (Q,), got {neg.shape}")
    if k < 1:
        raise MetricsError(f"Hits@K needs K >= 1, got {k}")
    if neg.shape[0] < k:
        return 1.0
    # np.partition finds the K-th largest in O(Q) without a full sort.
    kth = np.partition(neg, neg.shape[0] - k)[neg.shape[0] - k]
    return float(np.mean(tie_bounds(pos, neg)[0] > kth))


def expected_reciprocal_rank(p: np.ndarray, at: int) -> np.ndarray:
    """E[1 / (1 + X)] for X ~ Binomial(at, p), per entry of p (each negative drawn above with chance p)."""
    q = 1.0 - p
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p > 0, (1.0 - q ** (at + 1)) / ((at + 1) * np.where(p > 0, p, 1.0)), 1.0)


def expected_rank_values(pos_scores, neg_scores, at: int, ks: Sequence[int] = HITS_KS) -> dict[str, np.ndarray]:
    """Per positive, its expected reciprocal rank and Hits@K against `at` negatives drawn from the M shared ones
    (neg (M,)), and its AUC share: a selection pool's estimate of the ranks a test set of `at` negatives gives
    (common/datasets/pool.py). Each draw is above the positive with chance p = (#greater + #equal / 2) / M (the
    tie-averaged rank's share), independently (with replacement: M is several times `at`, and every option
    compared is estimated alike), so the number above is X ~ Binomial(at, p):
    E[1 / (1 + X)] = (1 - (1 - p)^(at + 1)) / ((at + 1) p), Hits@K = P(X <= K - 1)."""
    pos = _check_pos(_as_scores(pos_scores, "pos_scores"))
    neg = _as_scores(neg_scores, "neg_scores")
    if neg.ndim != 1 or not len(neg):
        raise MetricsError(f"neg_scores: a pool of shared negatives must have shape (M,), M > 0, got {neg.shape}")
    if not isinstance(at, (int, np.integer)) or at < 1:
        raise MetricsError(f"at: the number of negatives to rank against must be a positive integer, got {at!r}")
    p = (rank_against_shared(pos, neg) - 1.0) / len(neg)
    q = 1.0 - p
    out = {"mrr": expected_reciprocal_rank(p, at)}
    pmf, cdf = q**at, np.zeros_like(p)
    for k in range(max(ks, default=0)):  # cdf after step k: P(X <= k); pmf(k + 1) from pmf(k)
        cdf = cdf + pmf
        if k + 1 in ks:
            out[f"hits@{k + 1}"] = np.minimum(cdf, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            pmf = np.where(q > 0, pmf * (at - k) / (k + 1) * p / np.where(q > 0, q, 1.0), (at == k + 1) * 1.0)
        pmf = np.where(k + 1 > at, 0.0, pmf)
    out["auc"] = 1.0 - p
    return out


def shared_rank_at(protocol: str, negatives: int) -> int | None:
    """The count of shared negatives a positive is ranked against, where it is fewer than all `negatives`: under
    "original", SHARED_RANK_MAX drawn at random (MRR and Hits@K in expectation, expected_rank_values: exact, no
    sampling noise, the same for every method), once there are more. None: ranked against all of them. A fixed
    count keeps MRR informative as a graph grows (OGB's citation2 ranks against 1,000 random negatives per
    positive); AUC and AP still pool all negatives. The other protocols fix their negatives themselves."""
    return SHARED_RANK_MAX if protocol == "original" and negatives > SHARED_RANK_MAX else None


def ranking_note(protocol: str, negatives: int) -> str | None:
    """The report's line naming the ranking where shared_rank_at changes it; None where it does not."""
    at = shared_rank_at(protocol, negatives)
    if at is None:
        return None
    return (
        f"protocol {protocol} at scale: each test positive is ranked against {at:,} of the split's {negatives:,} "
        "shared negatives drawn at random (MRR and Hits@K in expectation: exact, no sampling noise), for PENCIL "
        "and the heuristics alike; AUC and AP against all of them"
    )


# ---------------------------------------------------------------------------- AUC and AP
def classification_metrics(pos_scores, neg_scores) -> dict[str, float]:
    """ROC-AUC and average precision of positives (P,) against negatives of any shape, pooled.

    Same values as sklearn's roc_auc_score / average_precision_score on labels 1/0:
    - AUC = Mann-Whitney U / (P * Q): each (positive, negative) pair counts 1 if the positive is above,
      1/2 on a tie (the rank-sum formula with average ranks for ties);
    - AP = sum over distinct score thresholds t, descending, of (R(t) - R(previous t)) * precision(t),
      step-wise without interpolation; tied scores pass a threshold together. Recall only moves at a
      threshold that holds a positive, so the sum runs over the distinct positive scores.
    Both come from one sort of the negatives plus searchsorted counts, O((P + Q) log Q) time and one
    copy of the negatives, never a (P, Q) matrix or a concatenated, argsorted score vector.
    """
    pos = _check_pos(_as_scores(pos_scores, "pos_scores"))
    neg = _as_scores(neg_scores, "neg_scores").reshape(-1)
    if neg.size == 0:
        raise MetricsError("neg_scores: empty; AUC and AP need at least one negative")
    lo, hi = tie_bounds(np.sort(pos), neg)  # compare in float64 (int counts vs float scores)
    pos, srt = np.sort(pos.astype(np.float64)), np.sort(neg.astype(np.float64))
    n_pos, n_neg = pos.size, srt.size
    # AUC: #neg strictly below each positive plus half the ties, summed in exact integers.
    below = np.searchsorted(srt, lo, side="left").sum(dtype=np.int64)
    below_or_tied = np.searchsorted(srt, hi, side="right").sum(dtype=np.int64)
    auc = float(below + below_or_tied) / (2.0 * n_pos * n_neg)
    # AP: at each distinct positive score t, tp = #pos >= t, fp = #neg >= t, and recall rises by #pos == t.
    first = np.flatnonzero(np.r_[True, pos[1:] != pos[:-1]])  # start of each run of equal positives
    tp = n_pos - first
    fp = n_neg - np.searchsorted(srt, lo[first], side="left")
    gained = np.diff(np.r_[first, n_pos])
    ap = float(np.sum(gained * (tp / (tp + fp)))) / n_pos
    return {"auc": auc, "ap": ap}


def evaluate(protocol: str, pos_scores, neg_scores) -> dict[str, float]:
    """All metrics (METRIC_KEYS, fractions) for one protocol; dispatch on protocol and neg shape.

    original / heart: tie-averaged ranks (shared if neg is 1-D, own if 2-D) -> MRR, Hits@K; original above
    SHARED_RANK_MAX shared negatives: MRR and Hits@K expected against that many of them (shared_rank_at).
    ogb, 1-D negatives (collab/ppa/ddi): Hits@K by the OGB evaluator's strict rule, MRR from ranks.
    ogb, 2-D negatives (citation2): MRR and Hits@K from per-positive tie-averaged ranks, which is
    what ogb's evaluator computes for MRR and hits@1/3/10.
    pairs (the user's labelled pairs, --eval-pairs): as original, every link against the split's non-links.
    Every protocol: AUC and AP of the positives against all negatives pooled (classification_metrics).
    """
    neg = _as_scores(neg_scores, "neg_scores")
    if protocol not in ("original", "heart", "ogb", "pairs", "reverse", "kg"):
        raise MetricsError(f"unknown protocol '{protocol}'; use original, heart, ogb, pairs, reverse or kg")
    pos = _as_scores(pos_scores, "pos_scores")
    if protocol == "kg":
        if neg.ndim != 2:
            raise MetricsError(f"kg: expected per-positive negatives, (P, K) scores, got {neg.shape}")
        real = neg[neg > -np.inf]  # -inf: a padded corruption (fewer candidates than asked)
        return {**ranking_metrics(rank_against_own(pos, neg)), **classification_metrics(pos, real)}
    if protocol == "reverse":
        if neg.shape != (pos.shape[0], 1):
            raise MetricsError(f"reverse: expected one negative per positive, (P, 1) scores, got {neg.shape}")
        (lo, hi), q = tie_bounds(pos, neg), neg[:, 0].astype(np.float64)
        acc = float(np.mean((lo > q) + 0.5 * ((q >= lo) & (q <= hi))))
        return {**ranking_metrics(rank_against_own(pos, neg)), **classification_metrics(pos, neg), REVERSE_KEY: acc}
    if neg.ndim == 2:
        return {**ranking_metrics(rank_against_own(pos, neg)), **classification_metrics(pos, neg)}
    if neg.ndim != 1:
        raise MetricsError(f"neg_scores: expected shape (Q,) or (P, K), got {neg.shape}")
    if (at := shared_rank_at(protocol, len(neg))) is not None:
        out = {k: float(np.mean(v)) for k, v in expected_rank_values(pos, neg, at).items() if k in RANK_KEYS}
        return {**out, **classification_metrics(pos, neg)}
    out = ranking_metrics(rank_against_shared(pos, neg))
    if protocol == "ogb":
        out.update({f"hits@{k}": ogb_hits(pos, neg, k) for k in HITS_KS})
    return {**out, **classification_metrics(pos, neg)}


# ---------------------------------------------------------------------------- regression and selection
# Selection metrics where smaller is better (heuristic estimation selects the lowest validation RMSE).
SMALLER_IS_BETTER = ("rmse", "mae")


def regression_metrics(pred, target) -> dict[str, float]:
    """RMSE and MAE of predictions against targets (same shape, finite)."""
    pred, target = _as_scores(pred, "pred"), _as_scores(target, "target")
    if pred.shape != target.shape or pred.size == 0:
        raise MetricsError(f"pred {pred.shape} and target {target.shape}: expected the same non-empty shape")
    err = pred.astype(np.float64) - target.astype(np.float64)
    return {"rmse": float(np.sqrt(np.mean(err**2))), "mae": float(np.mean(np.abs(err)))}


def improves(metric: str, value: float, best: float | None) -> bool:
    """Whether `value` beats `best` for selection (no finite best yet: anything does)."""
    if best is None or not np.isfinite(best):
        return True
    return value < best if metric in SMALLER_IS_BETTER else value > best


# ---------------------------------------------------------------------------- candidate dedup
def unique_pairs(pairs) -> tuple[np.ndarray, np.ndarray]:
    """Distinct undirected pairs and how to scatter their scores back.

    Returns (uniq (U, 2) int64 with uniq[:, 0] <= uniq[:, 1], inverse with shape pairs.shape[:-1])
    such that scores_of(uniq)[inverse] gives one score per input pair. HeaRT's 500 hard negatives
    per positive repeat many pairs; every distinct one is scored once (and symmetric scorers give
    (u, v) and (v, u) the same value, so canonicalising loses nothing).
    """
    arr = np.asarray(pairs)
    if arr.ndim < 1 or arr.shape[-1] != 2:
        raise MetricsError(f"pairs: expected shape (..., 2), got {arr.shape}")
    lead = arr.shape[:-1]
    flat = arr.reshape(-1, 2).astype(np.int64, copy=False)
    if flat.size and flat.min() < 0:
        raise MetricsError("pairs: node ids must be non-negative")
    lo, hi = np.minimum(flat[:, 0], flat[:, 1]), np.maximum(flat[:, 0], flat[:, 1])
    n = int(hi.max()) + 1 if hi.size else 1
    if n < 3_000_000_000:  # a scalar key (lo * n + hi) fits int64; 1-D unique is much faster
        keys, inverse = np.unique(lo * n + hi, return_inverse=True)
        uniq = np.stack([keys // n, keys % n], axis=1)
    else:
        uniq, inverse = np.unique(np.stack([lo, hi], axis=1), axis=0, return_inverse=True)
    return uniq.astype(np.int64, copy=False), inverse.reshape(lead)


# ---------------------------------------------------------------------------- formatting
def as_percent(metrics: Mapping[str, float]) -> dict[str, float]:
    """Same keys, values x 100 (reports quote percentages, code keeps fractions)."""
    return {k: 100.0 * float(v) for k, v in metrics.items()}


def _cell(value, floatfmt: str) -> str:
    if isinstance(value, (float, np.floating)):
        return floatfmt.format(float(value))
    return "" if value is None else str(value)


def format_table(
    rows: Sequence[Mapping], columns: Sequence[str], headers: Sequence[str] | None = None, floatfmt: str = "{:.2f}"
) -> str:
    """Plain-text table with aligned columns: text left-aligned, numbers right-aligned."""
    headers = list(headers) if headers is not None else [str(c) for c in columns]
    if len(headers) != len(columns):
        raise ValueError(f"format_table: {len(headers)} headers for {len(columns)} columns")
    cells = [[_cell(row.get(c), floatfmt) for c in columns] for row in rows]
    numeric = [all(isinstance(row.get(c), (int, float, np.number)) for row in rows) and bool(rows) for c in columns]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values):
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep] + [line(r) for r in cells])


__all__ = [
    "HITS_KS",
    "RANK_KEYS",
    "CLASSIFICATION_KEYS",
    "METRIC_KEYS",
    "MetricsError",
    "rank_against_shared",
    "shared_rank_at",
    "ranking_note",
    "SHARED_RANK_MAX",
    "rank_against_own",
    "tie_bounds",
    "F32_TIE_RTOL",
    "ranking_metrics",
    "ogb_hits",
    "classification_metrics",
    "evaluate",
    "unique_pairs",
    "as_percent",
    "format_table",
]
