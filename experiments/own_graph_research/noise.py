"""How noisy is a validation difference of MRR (or AUC) between two options, and is its standard error right?

Two estimates of the standard error of a paired difference d = mean_i (x_i - y_i) over validation positives:

  positives   the closed form the search uses (pipelines.auto.signal.paired): the positives' spread / sqrt(P);
              it holds the shared negatives fixed, so it leaves out the noise of which negatives were drawn;
  two-way     a bootstrap that resamples the positives and the shared negatives together (the same draw for
              both options, which stay paired), every positive re-ranked against the resampled negatives.

Calibration on independent halves: split the positives AND the negatives into halves A and B; each half gives
d and its SE; if the SE is right, z = (d_A - d_B) / sqrt(SE_A^2 + SE_B^2) is standard normal (std 1, |z| > 1.96
in 5 % of halvings). A std above 1 says the SE is too small and a margin of k SE is really fewer.
"""

from __future__ import annotations

import math

import numpy as np

from common.metrics import rank_against_shared

BOOTSTRAPS = 200


def values(pos: np.ndarray, neg: np.ndarray, metric: str) -> np.ndarray:
    rank = rank_against_shared(pos, neg)
    return 1.0 / rank if metric == "mrr" else 1.0 - (rank - 1.0) / len(neg)


def diff_positives(x: tuple, y: tuple, metric: str) -> tuple[float, float]:
    """(d, SE) with the closed-form SE over the positives; x, y = (pos (P,), neg (Q,)) scores of two options."""
    d = values(*x, metric) - values(*y, metric)
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d)))


def diff_two_way(
    x: tuple, y: tuple, metric: str, rng: np.random.Generator, b: int = BOOTSTRAPS, negatives_only: bool = False
) -> tuple[float, float]:
    """(d, SE) with the SE of a bootstrap over positives and negatives together (or the negatives alone)."""
    d0 = float((values(*x, metric) - values(*y, metric)).mean())
    p, q = len(x[0]), len(x[1])
    reps = np.empty(b)
    for k in range(b):
        ip = np.arange(p) if negatives_only else rng.integers(0, p, p)
        iq = rng.integers(0, q, q)
        reps[k] = (values(x[0][ip], x[1][iq], metric) - values(y[0][ip], y[1][iq], metric)).mean()
    return d0, float(reps.std(ddof=1))


def split(option: tuple, rows: np.ndarray, cols: np.ndarray) -> tuple:
    return option[0][rows], option[1][cols]


def calibration(pairs: list[tuple[tuple, tuple]], metric: str, halvings: int = 10, seed: int = 0) -> dict:
    """z-scores of d_A - d_B over independent halves (positives and negatives split) for both SE estimates, and
    the share of the two-way variance that the negatives carry, over every (x, y) pair of options."""
    rng = np.random.default_rng(seed)
    z = {"positives": [], "two-way": []}
    neg_share = []
    for x, y in pairs:
        p, q = len(x[0]), len(x[1])
        for _ in range(halvings):
            pp, qq = rng.permutation(p), rng.permutation(q)
            ha = (pp[: p // 2], qq[: q // 2])
            hb = (pp[p // 2 :], qq[q // 2 :])
            xa, ya, xb, yb = split(x, *ha), split(y, *ha), split(x, *hb), split(y, *hb)
            for name, fn in (
                ("positives", lambda u, v: diff_positives(u, v, metric)),
                ("two-way", lambda u, v: diff_two_way(u, v, metric, rng)),
            ):
                (da, sa), (db, sb) = fn(xa, ya), fn(xb, yb)
                if sa + sb > 0:
                    z[name].append((da - db) / math.sqrt(sa * sa + sb * sb))
        _, s_all = diff_two_way(x, y, metric, rng)
        _, s_neg = diff_two_way(x, y, metric, rng, negatives_only=True)
        if s_all > 0:
            neg_share.append(min(1.0, (s_neg / s_all) ** 2))
    out = {}
    for name, zs in z.items():
        zs = np.array(zs)
        out[name] = {"n": len(zs), "z_std": float(zs.std()), "outside_1.96": float((np.abs(zs) > 1.96).mean())}
    out["negatives_share_of_variance"] = float(np.mean(neg_share)) if neg_share else math.nan
    return out


def margin_rules(
    default: tuple, other: tuple, metric: str, halvings: int = 20, seed: int = 0, margins=(0.0, 1.0, 2.0)
) -> dict:
    """Half-B gain over the default of choosing `other` on half A when it is ahead by more than k SE (each SE
    estimate), positives and negatives split into independent halves; mean over halvings, and how often it
    switched."""
    rng = np.random.default_rng(seed)
    p, q = len(default[0]), len(default[1])
    gain = {(name, k): [] for name in ("positives", "two-way") for k in margins}
    switched = {key: 0 for key in gain}
    for _ in range(halvings):
        pp, qq = rng.permutation(p), rng.permutation(q)
        ha, hb = (pp[: p // 2], qq[: q // 2]), (pp[p // 2 :], qq[q // 2 :])
        da, xa = split(default, *ha), split(other, *ha)
        b_gain = float(values(*split(other, *hb), metric).mean() - values(*split(default, *hb), metric).mean())
        se = {"positives": diff_positives(xa, da, metric), "two-way": diff_two_way(xa, da, metric, rng, b=100)}
        for (name, k), got in gain.items():
            d, s = se[name]
            take = d > k * s
            got.append(b_gain if take else 0.0)
            switched[(name, k)] += int(take)
    return {
        f"{name} {k:g} SE": {"gain": float(np.mean(v)), "switched": switched[(name, k)] / halvings}
        for (name, k), v in gain.items()
    }
