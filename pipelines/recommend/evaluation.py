"""Full-ranking evaluation of a run's recommendations, on its validation and test positives.

    pencil evaluate RUN [--pool 100] [--retriever ra] [--choose-prior] [--sample-positives N] --out metrics.json

For every positive (u, v) of a split, v's rank among ALL non-neighbours of u on the graph the split is
scored on (filtered: the split's other known positives of u, valid and test, are left out of u's list,
as OGB's full-ranking evaluations do). Two rankers share the retriever's pool of M candidates per u:

- the retriever alone ranks the pool by its own score;
- PENCIL re-ranks the same pool by its probability (the scoring engine, --orderings averaged);
- the blend re-ranks it by sigmoid(PENCIL logit + w * rank prior), the prior being -log of the
  candidate's rank in the retriever's pool (pipelines/recommend/engine.py), w = --prior-weight.

On the valid split the blend is also reported for every w of PRIOR_GRID (`prior_sweep`): the default
--prior-weight is chosen there, never on test. The test split gets w = 0 and w = --prior-weight only.

A target inside the pool takes its place there (ties count half: rank = 1 + #higher + #tied / 2, the
paper's rule). A target outside the pool ranks after the whole pool for both rankers, at the expected
place of a uniformly random order of the rest: rank = M_u + (R_u - M_u + 1) / 2, with M_u the pool's
size and R_u the number of u's rankable non-neighbours. Neither ranker can do better than the pool,
so Hits@K <= recall@M for both, and the comparison is at the same pool.
Reported per split: recall@M (target in the pool), Hits@K and MRR of each ranker.
--sample-positives N ranks a seeded uniform sample of N positives per split (sample_positives: the same
for every retriever and for the valid prior choice); the filter still leaves out every known positive.
A typed run's triples are ranked on both ends among every entity by pipelines/recommend/typed_ranking.py, with
these rules (ranked_positives) one (relation, side) at a time.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace

import numpy as np

from common.atomic import write_json_atomic
from common.cli import Parser, command, exit_process, summary
from common.datasets import DatasetError
from common.flags import FlagError, add_moved_dataset_flag, add_overwrite_flag
from common.outputs import OutputError, check_output, check_replacement, stamp
from common.retrieval import EVERY_NODE, Allowed, RetrievalError, retrieve
from pipelines.core.config import MovedDataset
from pipelines.core.runs import RunFolderError, load_run_model, run_dataset, run_inputs
from pipelines.recommend.direction import DirectionError, check_model_direction
from pipelines.recommend.engine import (
    RecConfig,
    RecommendError,
    add_engine_flags,
    probabilities,
    rank_prior,
    scorer_for,
)
from pipelines.recommend.relation import RelationError
from trainer.scoring import default_device

log = logging.getLogger("pipelines.recommend")
HITS_AT = (1, 10, 20, 50, 100)
PRIOR_GRID = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


def pool_ranks(scores: np.ndarray, valid: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Rank of column target[i] within row i's valid entries (ties count half); target[i] < 0 -> nan."""
    rows = np.flatnonzero(target >= 0)
    out = np.full(len(target), np.nan)
    s_t = scores[rows, target[rows]]
    s, ok = scores[rows], valid[rows]
    higher = ((s > s_t[:, None]) & ok).sum(1)
    tied = ((s == s_t[:, None]) & ok).sum(1) - 1
    out[rows] = 1.0 + higher + tied / 2.0
    return out


def metrics(ranks: np.ndarray, pool: int) -> dict:
    out = {"mrr": float(np.mean(1.0 / ranks)) if len(ranks) else 0.0}
    for k in HITS_AT:
        if k <= pool:
            out[f"hits@{k}"] = float(np.mean(ranks <= k)) if len(ranks) else 0.0
    return out


@dataclass(frozen=True)
class RankedPositives:
    """Per positive of a full ranking: whether its target is in the pool, and its rank by the retriever alone and by
    PENCIL at each prior weight asked (none without a scorer)."""

    in_pool: np.ndarray  # (P,) bool
    retriever: np.ndarray  # (P,) float64 ranks
    pencil: dict = field(default_factory=dict)  # prior weight -> (P,) ranks
    pairs_scored: int = 0
    probability: dict | None = None


def full_ranking(
    graph,
    positives: np.ndarray,
    known: np.ndarray,
    cfg: RecConfig,
    scorer=None,
    allowed: Allowed = EVERY_NODE,
    sweep: bool = False,
) -> dict:
    """Metrics of the retriever alone and (with a scorer) of PENCIL re-ranking its pool (ranked_positives)."""
    weights = (0.0, cfg.prior_weight, *(PRIOR_GRID if sweep else ())) if scorer is not None else ()
    ranked = ranked_positives(graph, positives, known, cfg, scorer, allowed, weights)
    result = {
        "positives": int(len(positives)),
        "pool": cfg.pool,
        "retriever": cfg.retriever,
        f"recall@{cfg.pool}": float(np.mean(ranked.in_pool)),
        "retriever_alone": metrics(ranked.retriever, cfg.pool),
    }
    if scorer is not None:
        result["pencil_rerank"] = metrics(ranked.pencil[0.0], cfg.pool)
        result["pencil_blend"] = {
            "prior_weight": cfg.prior_weight,
            **metrics(ranked.pencil[cfg.prior_weight], cfg.pool),
        }
        if sweep:
            result["prior_sweep"] = {str(w): metrics(ranked.pencil[w], cfg.pool) for w in PRIOR_GRID}
        result["pairs_scored"] = ranked.pairs_scored
        result["probability"] = ranked.probability
    return result


def ranked_positives(
    graph,
    positives: np.ndarray,
    known: np.ndarray,
    cfg: RecConfig,
    scorer=None,
    allowed: Allowed = EVERY_NODE,
    weights=(),
    pool_of=None,
) -> RankedPositives:
    """Each positive's rank by the retriever alone and (with a scorer) by PENCIL at each prior weight in `weights`.
    `allowed.candidates`: the nodes that compete with a target (None: every node; under a temporal split, those that
    exist by the boundary); `allowed.known`: a directed run's out-edges (u's out-links are excluded, its in-links
    compete, and only u's own known positives u -> x are filtered). `pool_of(queries)`: the pool of each query node
    (common.retrieval.Pool; default: cfg.retriever's, topped up by popularity)."""
    side, candidates, directed = allowed.side, allowed.candidates, allowed.known
    u, v = positives[:, 0].astype(np.int64), positives[:, 1].astype(np.int64)
    queries = np.unique(u)
    if pool_of is None:
        pool = retrieve(graph, queries, cfg.retriever, cfg.pool, allowed=Allowed(side, candidates, directed), fill=True)
    else:
        pool = pool_of(queries)
    row = np.searchsorted(queries, u)
    cand = pool.cand[row]  # (P, M)
    n = graph.num_nodes
    # filtered: u's other known positives are not competitors
    both = known if directed is not None else np.concatenate([known, known[:, ::-1]])  # directed: u -> x only
    known_keys = np.unique(both[:, 0] * n + both[:, 1])
    keys = u[:, None] * n + np.maximum(cand, 0)
    other = np.isin(keys, known_keys) & (cand != v[:, None])
    valid = (cand >= 0) & ~other
    hit = (cand == v[:, None]) & valid
    target = np.where(hit.any(1), hit.argmax(1), -1)
    # rankable non-neighbours of u: the nodes (of the other kind, among the candidates) minus u, its neighbours
    # and its other positives (u's known positives that are not already its neighbours on this graph: valid
    # positives are edges of the test graph, counted once, as neighbours), plus v itself
    exists = np.ones(n, dtype=bool)
    if candidates is not None:
        exists[:] = False
        exists[candidates] = True
    linked = graph if directed is None else directed  # the links u already has (directed: its out-links)
    pk = np.unique(both.astype(np.int64), axis=0)
    pk = pk[~linked.has_edge(pk[:, 0], pk[:, 1]) & exists[pk[:, 1]]]
    partners = np.bincount(pk[:, 0], minlength=n)[u]
    if side is None:
        kind = exists.sum() - exists[u]
    else:
        kind = np.where(side[u], (~side & exists).sum(), (side & exists).sum())
    rankable = np.maximum(kind - linked.degree[u] - partners + 1, 1)
    size = valid.sum(1)
    outside = size + (rankable - size + 1) / 2.0
    retr = np.where(valid, pool.score[row], -np.inf)
    ranked = RankedPositives(target >= 0, np.where(target >= 0, pool_ranks(retr, valid, target), outside))
    if scorer is None:
        return ranked
    node, cnd, _ = pool.pairs()
    logits = scorer.logits(np.stack([node, cnd], axis=1))
    prior = rank_prior(pool.score)[pool.cand >= 0]  # pairs() is row-major over the valid entries
    pencil = {}
    for weight in weights:
        table = np.full(pool.cand.shape, -np.inf)
        table[pool.cand >= 0] = probabilities(logits, prior, weight)
        pen = np.where(valid, table[row], -np.inf)
        pencil[weight] = np.where(target >= 0, pool_ranks(pen, valid, target), outside)
    probability = probability_summary(logits, pool, row, valid, target)
    return replace(ranked, pencil=pencil, pairs_scored=int(len(node)), probability=probability)


def probability_summary(logits: np.ndarray, pool, row: np.ndarray, valid: np.ndarray, target: np.ndarray) -> dict:
    """Mean PENCIL probability of the in-pool targets and of the other pool candidates (a diagnosis: a model
    that gives the pool's hard candidates the targets' probability cannot re-rank them)."""
    table = np.full(pool.cand.shape, np.nan)
    table[pool.cand >= 0] = probabilities(logits)
    prob = table[row]
    inside = np.flatnonzero(target >= 0)
    is_target = np.zeros(valid.shape, dtype=bool)
    is_target[inside, target[inside]] = True
    others = prob[valid & ~is_target]
    return {
        "targets": float(np.mean(prob[is_target])) if inside.size else float("nan"),
        "other_candidates": float(np.mean(others)) if others.size else float("nan"),
    }


def choose_weight(sweep: dict, at: int = 20) -> float:
    """The prior weight of a valid sweep with the best Hits@at, then the best MRR; a tie keeps the smaller weight."""

    def key(w):
        m = sweep[w]
        return m.get(f"hits@{at}", 0.0), m["mrr"], -float(w)

    return float(max(sweep, key=key))


def sample_positives(positives: np.ndarray, n: int | None, seed: int) -> np.ndarray:
    """A uniform sample of n positives without replacement (all of them when n is None or >= their count),
    in their original order. A function of (positives, n, seed) only: every retriever, pool and prior
    weight ranked with the same n and seed sees the same positives."""
    if n is None or n >= len(positives):
        return positives
    rows = np.random.default_rng(seed).choice(len(positives), size=n, replace=False)
    return positives[np.sort(rows)]


def log_split(split: str, res: dict, cfg: RecConfig, total: int) -> None:
    log.info("%s", ranking_line(f"{split} ({res['positives']} of {total} positives)", res, cfg, 20))


def ranking_line(head: str, res: dict, cfg: RecConfig, at: int) -> str:
    """recall@M, then Hits@at and MRR of each ranker of a split's result, for the log."""
    rankers = (
        ("retriever", "retriever_alone"),
        ("PENCIL", "pencil_rerank"),
        (f"blend w={cfg.prior_weight:g}", "pencil_blend"),
    )
    reach = f"{head} {cfg.retriever} pool {cfg.pool}: recall@{cfg.pool} {res[f'recall@{cfg.pool}']:.4f}"
    at_k = f"hits@{at}"
    return " | ".join(
        [reach, *(f"{n} Hits@{at} {res[k].get(at_k, np.nan):.4f} MRR {res[k]['mrr']:.4f}" for n, k in rankers)]
    )


PROG = "python -m pipelines.recommend.evaluation"


def build_parser(prog: str = PROG) -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("run", metavar="RUN", help="a run folder (best.pt, else last.pt) or a .pt file")
    p.add_argument("--out", required=True, help="metrics .json (written atomically)")
    add_overwrite_flag(p)
    add_moved_dataset_flag(p)
    add_engine_flags(p)
    p.add_argument("--splits", default="valid,test", help="splits to rank (default valid,test)")
    p.add_argument(
        "--choose-prior",
        action="store_true",
        help="pick --prior-weight on the valid split (best Hits@20, then MRR, over PRIOR_GRID); test uses it",
    )
    p.add_argument(
        "--sample-positives",
        type=int,
        default=None,
        metavar="N",
        help="rank a seeded uniform sample of N positives per split (all when N >= their count; default: all)",
    )
    p.add_argument(
        "--sample-seed", type=int, default=0, metavar="S", advanced=True, help="seed of --sample-positives (default 0)"
    )
    p.add_argument(
        "--relation-pool",
        action="store_true",
        advanced=True,
        help="a typed run: fuse each pool with the entities most often the relation's tails (heads) in training",
    )
    return p


@dataclass(frozen=True)
class EvaluateConfig:
    run: str  # a run folder or a .pt file
    out: str
    overwrite: bool = False
    moved: MovedDataset = field(default_factory=MovedDataset)
    engine: RecConfig = field(default_factory=RecConfig)  # k at most the pool; the run's sampling filled in later
    device: str = "auto"
    splits: tuple[str, ...] = ("valid", "test")  # valid first: --choose-prior's weight serves test
    choose_prior: bool = False
    sample_positives: int | None = None
    sample_seed: int = 0
    relation_pool: bool = False  # a typed run's pools fused with the relation's ends (common.typed_retrieval)

    @classmethod
    def from_args(cls, args) -> "EvaluateConfig":
        if args.sample_positives is not None and args.sample_positives < 1:
            raise FlagError(
                f"--sample-positives: must be >= 1, got {args.sample_positives} (leave it out to rank every positive)"
            )
        requested = [s.strip() for s in args.splits.split(",") if s.strip()]
        if bad := [s for s in requested if s not in ("valid", "test")]:
            raise FlagError(f"--splits: no split {', '.join(bad)} to rank; use valid and/or test")
        splits = tuple(s for s in ("valid", "test") if s in requested)
        if args.choose_prior and "valid" not in splits:
            raise FlagError("--choose-prior: picks --prior-weight on the valid split; add valid to --splits")
        return cls(
            args.run,
            args.out,
            args.overwrite,
            MovedDataset.from_args(args),
            RecConfig.from_args(args, k=min(args.k, args.pool)),
            args.device,
            splits,
            args.choose_prior,
            args.sample_positives,
            args.sample_seed,
            args.relation_pool,
        )


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return command(build_parser, run_evaluation, argv, prog, config=EvaluateConfig.from_args)


def run_evaluation(cfg: EvaluateConfig) -> int:
    try:
        return evaluate_run(cfg)
    except (
        RecommendError,
        RunFolderError,
        RetrievalError,
        DatasetError,
        OutputError,
        DirectionError,
        RelationError,
    ) as err:
        raise FlagError(str(err)) from None


def load_evaluated_run(run: EvaluateConfig, device):
    """(model, dataset, sampling fields, data fingerprint) of RUN, --out checked before the dataset is loaded."""
    model, manifest, fields, _ = load_run_model(run.run, device, "RUN", run.moved.shards)
    files, folders = run_inputs(run.run, manifest, "RUN")
    check_output(run.out, files={**files, "--dataset": run.moved.dataset}, folders=folders)
    check_replacement(run.out, "evaluate", manifest.fingerprint, run.overwrite, what="evaluation")
    return model, run_dataset(manifest, run.moved.dataset), fields, manifest.fingerprint


def evaluate_run(run: EvaluateConfig) -> int:
    """The full-ranking table of a trained run on its valid and test splits."""
    device = default_device(run.device)
    model, dataset, fields, fingerprint = load_evaluated_run(run, device)
    check_model_direction(model, dataset.out_graph_for("test"), f"RUN {run.run}")  # as the set says, or refused
    cfg = replace(run.engine, **fields)  # the run's sampling
    if bad := [s for s in run.splits if s not in dataset.splits]:
        raise RecommendError(f"--splits: no split {', '.join(bad)} to rank; use valid and/or test")
    report = {"dataset": dataset.name, "run": run.run, "splits": {}, **stamp("evaluate", fingerprint)}
    if dataset.typed:  # triples over every entity, both sides; imported here: it builds on this module's rules
        from pipelines.recommend.typed_ranking import rank_typed_splits

        report.update(rank_typed_splits(model, dataset, cfg, run, device))
    else:
        report.update(rank_splits(model, dataset, cfg, run, device))
    write_json_atomic(run.out, report)
    print(json.dumps(report, indent=2))
    return 0


def rank_splits(model, dataset, cfg: RecConfig, run: EvaluateConfig, device) -> dict:
    """{"splits": each split's full ranking[, "prior_weight_chosen_on_valid"]} of an untyped run."""
    if run.relation_pool:
        raise RecommendError(f"--relation-pool: RUN {run.run} is untyped (its links have no relation); drop the flag")
    known = np.concatenate([dataset.splits[s].pos for s in ("valid", "test") if s in dataset.splits])
    report = {"splits": {}}
    for split in run.splits:
        graph = dataset.graph_for(split)
        scorer = scorer_for(model, graph, cfg, device, dataset.out_graph_for(split))  # a directed run's model reads it
        every = np.asarray(dataset.splits[split].pos, dtype=np.int64)
        positives = sample_positives(every, run.sample_positives, run.sample_seed)  # known stays whole: the filter
        # a directed run ranks each positive u -> v among u's out-links (direction from the run's dataset)
        allowed = Allowed(candidates=dataset.active_nodes(split), known=dataset.out_graph_for(split))
        res = full_ranking(graph, positives, known, cfg, scorer, allowed, sweep=split == "valid")
        if run.sample_positives is not None:
            res["sample"] = sample_record(run, len(positives), len(every))
        if split == "valid" and run.choose_prior:  # valid is ranked first: test then uses the chosen weight
            cfg = replace(cfg, prior_weight=choose_weight(res["prior_sweep"]))
            res["pencil_blend"] = {"prior_weight": cfg.prior_weight, **res["prior_sweep"][str(cfg.prior_weight)]}
            report["prior_weight_chosen_on_valid"] = cfg.prior_weight
        report["splits"][split] = res
        log_split(split, res, cfg, len(every))
    return report


def sample_record(run: EvaluateConfig, sampled: int, of: int) -> dict:
    """What --sample-positives ranked, for the JSON."""
    return {"sample_positives": run.sample_positives, "sample_seed": run.sample_seed, "sampled": sampled, "of": of}


if __name__ == "__main__":
    exit_process(main)
