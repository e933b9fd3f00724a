"""`--objective recommend`: the training-negatives stage (pipelines.auto.negatives) judges its two arms by
VALIDATION full ranking, the metric a recommendation job ships, instead of the link-prediction protocols.

Why an objective and not one rule for both: on validation, hard training views (2-hop non-edges as
negatives) rank RA's pool of 2-hop candidates better (wikipedia: Hits@20 11.3 against 10.1-10.3 for uniform
views, facebook 75.0 against 74.8; BENCHMARKS.md, Recommendations), while on the link-prediction protocols,
whose negatives are uniform random pairs, they cost validation AUC (wikipedia 93.2 -> 91.4), so the
link-prediction stage keeps uniform views. One checkpoint cannot serve both; the user says which it is for.

What an arm is judged on (what `pipelines.recommend --evaluate RUN --choose-prior` reports, with the
defaults a recommendation job uses): for a seeded sample of JUDGE_POSITIVES validation positives (u, v), v's
rank among u's non-neighbours on the training graph (the graph validation is scored on), the pool being
u's top JUDGE_POOL non-neighbours by JUDGE_RETRIEVER, re-ranked by PENCIL blended with the retriever's rank
prior; the prior weight is the best of pipelines.recommend.evaluation.PRIOR_GRID on this same sample (as
--choose-prior picks it). The arm's value is that blend's Hits@20, then its MRR.

Test is never read: the filter leaves out only u's other VALIDATION positives (a test positive is, at
selection time, a non-edge like any other), and nothing here opens a test shard or a query file (only the
run's checkpoint and its shard set's manifest, for the model's shape).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from pipelines.recommend.evaluation import choose_weight, full_ranking, sample_positives
from pipelines.core.runs import load_run_model
from pipelines.recommend.engine import RecConfig, scorer_for

JUDGE_POOL = 100  # pipelines.recommend's default --pool
JUDGE_RETRIEVER = "ra"  # its default --retriever
JUDGE_POSITIVES = 500  # the sample size of BENCHMARKS.md's full-ranking tables (a Hits@20 near 10 %: +-1.3)
JUDGE_SAMPLE_SEED = 0
JUDGE_AT = 20


def ranking_values(run_dir: Path, dataset, device: torch.device) -> dict:
    """One arm's validation full-ranking numbers: `selection` (the best blend's Hits@20), `mrr` (its MRR),
    `prior_weight`, and for context the retriever alone's Hits@20 and the pool's recall."""
    t0 = time.time()
    model, _, fields, _ = load_run_model(str(run_dir), device, "training-negatives stage run")
    cfg = RecConfig(k=JUDGE_AT, pool=JUDGE_POOL, retriever=JUDGE_RETRIEVER, prior_weight=0.0, **fields)
    graph = dataset.graph_for("valid")
    valid = np.asarray(dataset.splits["valid"].pos, dtype=np.int64)
    positives = sample_positives(valid, JUDGE_POSITIVES, JUDGE_SAMPLE_SEED)
    res = full_ranking(graph, positives, valid, cfg, scorer_for(model, graph, cfg, device), sweep=True)
    weight = choose_weight(res["prior_sweep"], JUDGE_AT)
    best = res["prior_sweep"][str(weight)]
    return {"selection": best[f"hits@{JUDGE_AT}"], "mrr": best["mrr"], "prior_weight": weight,
            "retriever_alone": res["retriever_alone"][f"hits@{JUDGE_AT}"], f"recall@{JUDGE_POOL}": res[f"recall@{JUDGE_POOL}"],
            "positives": res["positives"], "seconds": round(time.time() - t0, 1)}


def ranking_judge(dataset, device: torch.device):
    """The stage's judge for --objective recommend: run folder -> ranking_values."""
    return lambda run_dir: ranking_values(Path(run_dir), dataset, device)


def better(hard: dict, uniform: dict) -> bool:
    """Hard views only when their Hits@20 is strictly higher, or equal with a strictly higher MRR: a tie keeps
    uniform views, the recipe's default."""
    return (hard["selection"], hard["mrr"]) > (uniform["selection"], uniform["mrr"])


def describe() -> str:
    return (f"valid full ranking: {JUDGE_RETRIEVER} pool {JUDGE_POOL}, {JUDGE_POSITIVES} positives (seed "
            f"{JUDGE_SAMPLE_SEED}), best prior blend's Hits@{JUDGE_AT} then MRR")
