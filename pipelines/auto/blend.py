"""`--preset auto`'s blend: PENCIL's logit plus the search's runner-up and a weighted CN, AA or RA, one decision
per run.

    score(u, v) = logit(u, v) + p * partner(u, v) + w * log1p(h(u, v)),
                  p in {0} + PARTNER_WEIGHTS,  h in {cn, aa, ra},  w in WEIGHTS   (none: p = w = 0)

A model trained for minutes on a CPU ranks the top of a dense graph less sharply than exact common-neighbour
counts do; the heuristic, on the logit's log scale, adds them. The search's other converged candidate (its
`partner`: another view of the graph, already trained) sees what the chosen one misses: on validation halves
of 11 graphs adding it to the grid gained +0.24 MRR and +0.94 AUC on average, +9.7 AUC on the latent-space
graph, +2.3 MRR on facebook (research report, section 15). The decision is made once, on every final seed's
validation logits (the partner's one run beside each), against validation's negatives and its selection pool
(SearchConfig.valid_pool: ranks estimated at test's count of negatives, common/datasets/pool.py, so that a
heuristic's weight is judged against the rare pairs a model over-scores): each key's per-positive values
averaged over the seeds, the best kept only if it beats the model alone by more than `margin_se` standard
errors (pipelines.auto.signal). Then, as the search does, a tie on the metric is broken by the other of MRR / AUC
(`break_grid_tie`; section 14). `decide` sees validation arrays only; test is read in `apply`, after it (the
partner's test scores come from evaluating its run then). The model alone is always reported beside it.

On a typed graph (protocol kg: each triple against its own corruptions) h is the per-relation popularity prior
(common.heuristics_typed: w * log1p(h) adds w times the log-popularity gap of the end a corruption replaced, a
user-item file's item popularity), on a temporal split the recent popularity prior (the same of popularity
weighted by recency), or the l3 prior (the walks of length 3 between the ends: where a user has history, the users
who chose what it chose), CN / AA / RA being constant on a graph of two kinds; its blended scores are ranked as
float32, as the trainer ranks the model's (`ranked`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from common.eval_scores import read_scores, scores_path
from common.manifest_record import Manifest
from pipelines.auto.signal import choose, paired, set_queries, tie_break, tie_metric, typed_set
from preprocess.candidates import protocol_candidates
from preprocess.kg_candidates import typed_protocol_candidates
from trainer.evaluate import eval_entry, scores_to_metrics

log = logging.getLogger("pipelines.auto")

HEURISTICS = ("cn", "aa", "ra")
# Doubling up to 1024: at the top a log1p(h) step outweighs any logit gap, i.e. the heuristic ranks and the
# model breaks its ties, so the grid spans the model alone to the heuristic led by the model.
WEIGHTS = tuple(2.0**k for k in range(-2, 11))
NONE = "none"
GRID = [(NONE, 0.0)] + [(h, w) for h in HEURISTICS for w in WEIGHTS]
PARTNER_WEIGHTS = (0.25, 0.5, 1.0, 2.0, 4.0)  # logits of one scale: from a nudge to the partner leading
PARTNER = "runner-up"  # its name in a key


def grid(partner: bool, heuristics: tuple[str, ...] = HEURISTICS) -> list[tuple[float, str, float]]:
    """(partner weight, heuristic, weight) of every key, the model alone first; GRID's, or of `heuristics`."""
    rows = GRID if heuristics == HEURISTICS else [(NONE, 0.0)] + [(h, w) for h in heuristics for w in WEIGHTS]
    return [(p, h, w) for p in ((0.0, *PARTNER_WEIGHTS) if partner else (0.0,)) for h, w in rows]


class BlendError(ValueError):
    """The shard set and the dataset disagree; the message names them."""


def blend(logit: np.ndarray, heuristic: np.ndarray | None, weight: float) -> np.ndarray:
    """logit + weight * log1p(heuristic) in float64; weight 0 returns the logits untouched."""
    if not weight:
        return logit
    return np.asarray(logit, dtype=np.float64) + weight * np.log1p(np.asarray(heuristic, dtype=np.float64))


def key(h: str, w: float, p: float = 0.0) -> str:
    heuristic = NONE if h == NONE else f"{h} x {w:g}"
    return heuristic if not p else f"{PARTNER} x {p:g}" + ("" if h == NONE else f" + {heuristic}")


def with_partner(logit: np.ndarray, partner: np.ndarray | None, p: float) -> np.ndarray:
    """logit + p * partner in float64 (`partner`: its scores of the same pairs); p 0 returns the logits."""
    return logit if not p else np.asarray(logit, dtype=np.float64) + p * np.asarray(partner, dtype=np.float64)


def mix(cid: np.ndarray, logit: np.ndarray, p: float, h: str, w: float, partner, heuristics: dict) -> np.ndarray:
    """One seed's blended scores of the pairs `cid`; `partner` and `heuristics[h]`: their scores by cid."""
    return blend(with_partner(logit, partner[cid] if p else None, p), heuristics[h][cid] if h != NONE else None, w)


@dataclass(frozen=True)
class Blend:
    """The run's blend: the partner `partner` at weight p (0: without it) and heuristic h (NONE: without one)
    at weight w, chosen on validation `metric`."""

    heuristic: str
    weight: float
    metric: str
    decision: dict  # pipelines.auto.signal.choose's record: choice, best, means, difference, se, reason
    partner: str = ""  # the partner's candidate id
    partner_weight: float = 0.0

    @property
    def key(self) -> str:
        return key(self.heuristic, self.weight, self.partner_weight)

    def row_name(self, base: str) -> str:
        """'<base> + RA prior', '<base> + runner-up deep-d2n10 + RA prior'; '<base> + prior (none chosen)' when
        validation kept the model alone."""
        parts = [f"{PARTNER} {self.partner}"] if self.partner_weight else []
        if self.heuristic != NONE:
            parts.append(f"{self.heuristic.upper()} prior" if self.heuristic in HEURISTICS else self.heuristic)
        return f"{base} + {' + '.join(parts)}" if parts else f"{base} + prior (none chosen)"

    def to_dict(self) -> dict:
        return {
            "heuristic": self.heuristic,
            "weight": self.weight,
            "partner": self.partner if self.partner_weight else "",
            "partner_weight": self.partner_weight,
            "metric": self.metric,
            **self.decision,
        }


def by_cid(dataset, manifest: Manifest, split: str, protocol: str, scores: dict) -> dict[str, np.ndarray]:
    """{h: (C,) scores by cid} of an eval set, from `scores` = {h: (positives', negatives' scores)} of the split
    (common.heuristics.split_scores; a typed graph's: common.heuristics_typed.typed_scores); the set's queries must
    be the dataset's candidates (the same split of the same data)."""
    cands = (
        typed_protocol_candidates(dataset, split) if dataset.typed else protocol_candidates(dataset, split, protocol)
    )
    entry = eval_entry(manifest, split, protocol)
    pos_cid, neg_cid = set_queries(manifest, entry)
    if (
        len(cands) != entry["candidates"]
        or not np.array_equal(pos_cid, cands.pos_cid)
        or not np.array_equal(neg_cid, cands.neg_cid)
    ):
        raise BlendError(
            f"{manifest.root}: eval set {split}/{protocol} does not match dataset {dataset.name}; "
            "rerun the recipe to rebuild the shard set"
        )
    out = {}
    for h, (pos, neg) in scores.items():
        table = np.empty(len(cands), dtype=np.float64)
        table[cands.pos_cid] = pos
        if dataset.typed:  # a padded corruption (neg_cid -1) is no pair: its -inf stays out of the table
            real = cands.neg_cid >= 0
            table[cands.neg_cid[real]] = neg[real]
        else:
            table[cands.neg_cid] = neg  # a pair several queries share has one score: the same pair
        out[h] = table
    return out


def decide(
    valid: dict[str, tuple[np.ndarray, np.ndarray]],
    heuristics: dict[str, np.ndarray],
    values_of: Callable[[np.ndarray, np.ndarray], dict],
    metric: str,
    margin_se: float,
    partner: tuple[str, np.ndarray] | None = None,
    names: tuple[str, ...] = HEURISTICS,
) -> Blend:
    """One (p, h, w) for the run from `valid` = {seed: (cid, logit)} of the validation set, its heuristics by cid,
    `partner` = (its name, its validation scores by cid) or None, and values_of(cid, scores) -> {metric: the
    per-positive values} of the validation queries (pipelines.auto.signal.per_positive): chosen on `metric`, a
    tie there broken by tie_metric(metric). `names`: the heuristics of the grid (a typed graph's:
    common.heuristics_typed.prior_names)."""
    values: dict[str, dict[str, np.ndarray]] = {metric: {}, tie_metric(metric): {}}
    name, by_pair = partner or ("", None)
    keys = {key(h, w, p): (p, h, w) for p, h, w in grid(partner is not None, names)}
    for k, (p, h, w) in keys.items():
        per_seed = [
            values_of(cid, mix(cid, logit.astype(np.float64), p, h, w, by_pair, heuristics))
            for cid, logit in valid.values()
        ]
        for m, table in values.items():
            table[k] = np.mean([v[m] for v in per_seed], axis=0)
    decision = break_grid_tie(choose(values[metric], margin_se), values, metric, margin_se)
    p, h, w = keys[decision["choice"]]
    log.info("blend: %s (%s)", decision["choice"], decision["reason"])
    means = {k: round(v, 6) for k, v in decision["means"].items()}
    return Blend(h, w, metric, {**decision, "means": means}, name, p)


def partner_table(cid: np.ndarray, score: np.ndarray) -> np.ndarray:
    """The partner's scores indexed by cid, NaN where it scored nothing (pipelines.auto.recipe.partner_scores
    refuses a partner with a pair missing)."""
    table = np.full(int(cid.max(initial=-1)) + 1, np.nan)
    table[cid] = score
    return table


def break_grid_tie(decision: dict, values: dict[str, dict[str, np.ndarray]], metric: str, margin_se: float) -> dict:
    """The search's tie-break (pipelines.auto.signal.break_tie) on the blend's grid, from any choice, with the
    closed-form SE over the positives, as the blend's margin. `values`: {metric: {key: per-positive values}} for
    both metrics, keys in GRID order."""
    base = decision["choice"]

    def diff_se(k: str, m: str) -> tuple[float, float]:
        return paired(values[m][k], values[m][base])

    def mean(k: str, m: str) -> float:
        return float(np.mean(values[m][k]))

    return tie_break(decision, list(values[metric]), diff_se, mean, metric, margin_se)


def valid_logits(runs: dict[int, Path], protocol: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {str(seed): read_scores(scores_path(d, "valid", protocol))[:2] for seed, d in runs.items()}


def apply(
    run_dir: Path,
    choice: Blend,
    heuristics: dict[str, np.ndarray],
    manifest: Manifest,
    protocol: str,
    partner: np.ndarray | None = None,
) -> dict:
    """Test metrics of the chosen blend for one seed (its test file is opened here, after the decision);
    `partner`: the partner's test scores by cid, when the blend uses it."""
    cid, logit, _ = read_scores(scores_path(run_dir, "test", protocol))
    scores = mix(cid, logit, choice.partner_weight, choice.heuristic, choice.weight, partner, heuristics)
    return scores_to_metrics(manifest, "test", protocol, cid, ranked(manifest, scores))


def ranked(manifest: Manifest, scores: np.ndarray) -> np.ndarray:
    """The scores as the set ranks a model's: a typed set's blend cast back to float32, whose near-ties are ties
    (common.metrics.tie_bounds), so its model-alone key is the trainer's own metric and the float noise between
    identical subgraphs scored in other batches never orders two pairs the prior ties; others as they are."""
    return np.asarray(scores, dtype=np.float32) if typed_set(manifest) else scores
