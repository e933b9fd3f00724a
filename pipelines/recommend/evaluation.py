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
the same rules (pipelines/recommend/ranking.py: ranked_positives) one (relation, side) at a time.
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
from common.retrieval import Allowed, RetrievalError
from pipelines.core.config import MovedDataset
from pipelines.core.runs import RunFolderError, load_run_model, run_dataset, run_inputs
from pipelines.recommend.direction import DirectionError, check_model_direction
from pipelines.recommend.engine import RecConfig, RecommendError, add_engine_flags, scorer_for
from pipelines.recommend.ranking import choose_weight, full_ranking, log_split, sample_positives, sample_record
from pipelines.recommend.relation import RelationError
from pipelines.recommend.typed_ranking import rank_typed_splits
from trainer.scoring import default_device

log = logging.getLogger("pipelines.recommend")
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
    if dataset.typed:  # triples over every entity, both sides
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


if __name__ == "__main__":
    exit_process(main)
