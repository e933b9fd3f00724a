"""Full filtered ranking of a typed run's triples over every entity (`pencil evaluate` on a knowledge graph).

For every triple (h, r, t) of a split, two queries, as the knowledge-graph literature ranks: t among all entities
for (h, r, ?) (side "tail") and h among all for (?, r, t) (side "head"). Filtered: every other entity e with a
known true triple (h, r, e) (or (e, r, t)) is no rival; known is train + valid for valid (what selection may see,
as the kg protocol's corruptions) and every split's triples for test. The anchor itself is no candidate (the graphs
hold no self-links); with node kinds, only the relation's kind competes (the user-item file's items for a user).

It goes through the retrieve-then-re-rank path, one (relation, side) group at a time: the typed retriever
(common.typed_retrieval) proposes a pool of M entities per anchor, PENCIL re-ranks it scoring each (anchor,
candidate) as a triple of r (the scoring engine, the run's typed inputs), and a target outside the pool takes the
expected rank of the rest (pipelines.recommend.ranking.ranked_positives, the rule of untyped full ranking: so
Hits@K <= recall@M for every ranker). Ties count half.

Reported per split: recall@M (the pool's reach), MRR and Hits@1/3/10 of the retriever alone, of PENCIL's re-ranking
(W = 0) and of the blend with the retriever's rank prior (W = --prior-weight; on valid a sweep, --choose-prior picks
W there for test), over both sides, per side and per relation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np

from common.metrics import ranking_metrics
from common.retrieval import Allowed
from common.typed_retrieval import frequent_ends, typed_retrieve
from pipelines.recommend.direction import known_links
from pipelines.recommend.engine import RecConfig, scorer_for
from pipelines.recommend.ranking import (
    PRIOR_GRID,
    RankedPositives,
    choose_weight,
    ranked_positives,
    ranking_line,
    sample_positives,
    sample_record,
)
from pipelines.recommend.relation import among, relation_kind, relation_links, run_triples, typed_inputs

log = logging.getLogger("pipelines.recommend")
SIDES = ("tail", "head")  # the end a query asks for
KS = (1, 3, 10)  # the knowledge-graph literature's Hits@K


class RelationScorer:
    """The scoring engine's logits of (anchor, candidate) pairs as triples of one relation: (anchor, r, candidate)
    for a tail query, (candidate, r, anchor) for a head query."""

    def __init__(self, scorer, relation: int, side: str):
        self.scorer, self.relation, self.side = scorer, int(relation), side

    def logits(self, pairs: np.ndarray) -> np.ndarray:
        pairs = np.asarray(pairs, dtype=np.int64)
        triples = pairs if self.side == "tail" else pairs[:, ::-1]
        return self.scorer.logits(triples, np.full(len(pairs), self.relation, dtype=np.int64))


@dataclass(frozen=True)
class TypedRanks:
    """Every query of a split: its relation and side, and its ranks (RankedPositives, concatenated over groups)."""

    relation: np.ndarray  # (Q,) int64
    side: np.ndarray  # (Q,) str
    ranked: RankedPositives


def known_triples(dataset, split: str) -> np.ndarray:
    """The true triples that filter `split`'s ranking: train + valid for valid, every split's for test."""
    parts = ("train", "valid") if split == "valid" else ("train", "valid", "test")
    rel = dataset.relations
    return np.concatenate([rel.triples(s, dataset.splits[s].pos) for s in parts if s in dataset.splits])


def rank_triples(
    dataset,
    split: str,
    triples: np.ndarray,
    cfg: RecConfig,
    scorer=None,
    *,
    weights=(),
    relation_pool: bool = False,
    neighbours: bool = False,
) -> TypedRanks:
    """Both sides of every triple (T, 3) of `split`, ranked group by group (module docstring). `scorer`: the scoring
    engine on the split's graph and typed inputs (None: the retriever alone); `weights`: the prior weights PENCIL is
    ranked at; `relation_pool`: each pool fused with the relation's ends (common.typed_retrieval)."""
    n, graph = dataset.num_nodes, dataset.graph_for(split)
    scored_on = run_triples(dataset, split)  # the triples of the split's graph: the links a pool never repeats
    known = known_triples(dataset, split)
    parts = []
    for r in np.unique(triples[:, 1]):
        t, kn = triples[triples[:, 1] == r], known[known[:, 1] == r]
        for side in SIDES:
            direction, anchor, end = ("out", 0, 2) if side == "tail" else ("in", 2, 0)
            positives, known_pairs = t[:, [anchor, end]], kn[:, [anchor, end]]
            links = known_links(relation_links(scored_on, int(r), n), direction)
            # the relation's node kind competes, where the set has kinds
            kind = relation_kind(dataset.relations, int(r), direction)
            allowed = Allowed(candidates=among(dataset.active_nodes(split), kind), known=links)
            ends = frequent_ends(scored_on, int(r), end, n) if relation_pool else None

            def pool_of(queries, allowed=allowed, ends=ends):
                return typed_retrieve(
                    graph, queries, cfg.retriever, cfg.pool, allowed=allowed, ends=ends, neighbours=neighbours
                )

            group = None if scorer is None else RelationScorer(scorer, r, side)
            got = ranked_positives(graph, positives, known_pairs, cfg, group, allowed, weights, pool_of)
            parts.append((np.full(len(t), r, dtype=np.int64), np.full(len(t), side), got))
    return TypedRanks(*concatenate(parts))


def concatenate(parts: list) -> tuple:
    """(relation, side, RankedPositives) of every group, one after the other."""
    ranked = [p[2] for p in parts]
    pencil = {w: np.concatenate([r.pencil[w] for r in ranked]) for w in ranked[0].pencil}
    return (
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        RankedPositives(
            np.concatenate([r.in_pool for r in ranked]),
            np.concatenate([r.retriever for r in ranked]),
            pencil,
            sum(r.pairs_scored for r in ranked),
        ),
    )


def summary_of(ranks: TypedRanks, mask: np.ndarray, cfg: RecConfig, sweep: bool = False) -> dict:
    """recall@M and each ranker's MRR, Hits@1/3/10 over the queries in `mask`."""
    r = ranks.ranked
    out = {"queries": int(mask.sum()), f"recall@{cfg.pool}": float(np.mean(r.in_pool[mask]))}
    out["retriever_alone"] = ranking_metrics(r.retriever[mask], KS)
    if r.pencil:
        out["pencil_rerank"] = ranking_metrics(r.pencil[0.0][mask], KS)
        blend = ranking_metrics(r.pencil[cfg.prior_weight][mask], KS)
        out["pencil_blend"] = {"prior_weight": cfg.prior_weight, **blend}
        if sweep:
            out["prior_sweep"] = {str(w): ranking_metrics(r.pencil[w][mask], KS) for w in PRIOR_GRID}
    return out


def split_report(ranks: TypedRanks, names: tuple, cfg: RecConfig, sweep: bool, relation_pool: bool) -> dict:
    """A split's JSON: the pool, every query, each side, each relation."""
    every = np.ones(len(ranks.relation), dtype=bool)
    res = {
        "triples": int(len(every) // 2),
        "pool": cfg.pool,
        "retriever": cfg.retriever,
        "relation_pool": relation_pool,
        **summary_of(ranks, every, cfg, sweep),
        "pairs_scored": ranks.ranked.pairs_scored,
    }
    res["sides"] = {s: summary_of(ranks, ranks.side == s, cfg) for s in SIDES}
    res["relations"] = {names[r]: summary_of(ranks, ranks.relation == r, cfg) for r in np.unique(ranks.relation)}
    return res


def rank_typed_splits(model, dataset, cfg: RecConfig, run, device) -> dict:
    """{"splits": each split's report[, "prior_weight_chosen_on_valid"]} of a typed run (`run`: EvaluateConfig)."""
    names, report = dataset.relations.names, {"splits": {}}
    for split in run.splits:
        graph = dataset.graph_for(split)
        typed = typed_inputs(run_triples(dataset, split), dataset.num_nodes, len(names))
        scorer = scorer_for(model, graph, cfg, device, dataset.out_graph_for(split), typed)
        every = dataset.relations.triples(split, dataset.splits[split].pos)
        triples = sample_positives(every, run.sample_positives, run.sample_seed)  # the filter keeps every triple
        sweep = split == "valid"
        weights = (0.0, cfg.prior_weight, *(PRIOR_GRID if sweep else ()))
        # the anchor's neighbours first: on WN18RR validation they took recall@100 from 21 % to 47 % (docs/benchmarks)
        how = {"weights": weights, "relation_pool": run.relation_pool, "neighbours": True}
        ranks = rank_triples(dataset, split, triples, cfg, scorer, **how)
        res = split_report(ranks, names, cfg, sweep, run.relation_pool)
        if run.sample_positives is not None:
            res["sample"] = sample_record(run, len(triples), len(every))
        if sweep and run.choose_prior:  # valid is ranked first: test then uses the chosen weight
            cfg = replace(cfg, prior_weight=choose_weight(res["prior_sweep"], at=10))
            res["pencil_blend"] = {"prior_weight": cfg.prior_weight, **res["prior_sweep"][str(cfg.prior_weight)]}
            report["prior_weight_chosen_on_valid"] = cfg.prior_weight
        report["splits"][split] = res
        log_typed_split(split, res, cfg)
    return report


def log_typed_split(split: str, res: dict, cfg: RecConfig) -> None:
    log.info("%s", ranking_line(f"{split} ({res['triples']} triples, both sides)", res, cfg, 10))
