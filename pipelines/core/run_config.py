"""What `pencil run` is configured by: `RunConfig`, its parser, and every check of its flags before any work
(a typo must not cost a preprocessing run). The paper's recipes that train like `pencil run` (ablations,
latent space) build theirs here too. The trainer flags passed through (--train-arg) are checked against the
trainer's own parser by pipelines.core.seeds.check_trainer_flags, once the preset is known.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from common.cli import Parser
from common.datasets import DatasetSpec
from common.flags import (
    FlagError,
    add_dataset_flags,
    add_device_flag,
    add_graph_input_flags,
    add_num_cpus_flag,
    add_seeds_flag,
    add_shards_flag,
    add_train_arg_flag,
)
from common.storage import is_remote
from pipelines.core.config import ShardOptions, TrainerOptions, check_folder, parse_seeds

PROG = "python -m pipelines.run"
DESCRIPTION = """Train PENCIL on a dataset end to end: preprocess (embedded Ray, cached) -> train (per seed) ->
evaluate -> report. A dataset without a paper preset (your edge list) gets --preset auto: a configuration searched on
validation only. Results land in OUT/<dataset>/<preset>/."""
SEARCH = "auto"  # --preset auto: search a configuration on validation (pipelines.auto), not a preset's name
# below this, --preset auto cannot build its shard sets and finish one epoch of each candidate on a small graph
# (the suite's smallest graphs took 2.3 minutes alone on 2 cores): refused before any work
MIN_BUDGET_MINUTES = 2.0
PROTOCOL_CHOICES = ("original", "heart", "ogb", "pairs", "both")
NO_FEATURES = "--no-features"  # the trainer's flag: structure only, the 'PENCIL w/o features' row
PEER_FEATURES = "--peer-features"  # the trainer's flag that reads the table too: a 'w/o features' twin drops it
# what --preset auto chooses, stops and blends on, and what the report leads with (common.metrics.METRIC_KEYS)
METRICS = ("mrr", "hits@1", "hits@3", "hits@10", "hits@20", "hits@50", "hits@100", "auc")
OBJECTIVES = ("link-prediction", "recommend")


@dataclass(frozen=True)
class RunConfig:
    source: DatasetSpec
    preset: str | None = None  # None: the dataset's paper preset, else the search (SEARCH)
    seeds: tuple[int, ...] = (0,)
    out: str = "results"  # results root: OUT/<dataset>/<preset>/
    protocol: str = "original"  # or "both": every protocol the dataset has; "pairs": the user's (--eval-pairs)
    budget_minutes: float | None = None  # --preset auto: the whole run's wall-time bound; None: the search's default
    objective: str = "link-prediction"  # --preset auto: what the checkpoints are for
    metric: str = "mrr"  # the metric the user reads: the search and the blend decide on it, the report leads with it
    # --metric when given: every seed's best epoch (and early stop) under a fixed preset too; None: the data's
    # (mrr; OGB's own hits@K under --protocol ogb), so the paper's recipes keep the paper's selection
    select_on: str | None = None
    trainer: TrainerOptions = field(default_factory=TrainerOptions)
    shards: ShardOptions = field(default_factory=ShardOptions)

    def to_dict(self) -> dict:
        return asdict(self)

    def select_on_for(self, data_metric: str) -> str | None:
        """The trainer's --select-on: --metric when given and not the data's own metric, else None (the
        data's), so a seed trained without --metric is reused under the same choice of epoch."""
        return self.select_on if self.select_on != data_metric else None

    @property
    def ships_features(self) -> bool:
        """The shard sets carry node features (--features or --node-features): every seed trains twice, with
        them ('PENCIL') and without them on the same set ('PENCIL w/o features')."""
        return self.source.ships_features

    @classmethod
    def from_args(cls, args) -> "RunConfig":
        """The parsed flags of build_parser, checked; a bad one is a FlagError naming it."""
        if args.budget_minutes is not None and not args.budget_minutes >= MIN_BUDGET_MINUTES:
            raise FlagError(
                f"--budget-minutes {args.budget_minutes:g}: below the {MIN_BUDGET_MINUTES:g} minutes "
                "--preset auto needs at least (its shard sets and a first epoch of each candidate come "
                f"first); pass {MIN_BUDGET_MINUTES:g} or more"
            )
        if is_remote(args.out):  # Path() would fold s3://b into a local folder s3:/b
            raise FlagError(
                f"--out {args.out}: results are written to a filesystem path (on a Ray cluster, one every node "
                "mounts, e.g. NFS); pass such a path (shard sets may live on s3://: --shards)"
            )
        check_folder("--out", args.out)
        source, shards = DatasetSpec.from_args(args, features=bool(args.features)), ShardOptions.from_args(args)
        trainer = TrainerOptions.from_args(args)
        check_inputs(source, shards, trainer, args.protocol)
        return cls(
            source=source,
            preset=args.preset,
            seeds=parse_seeds(args.seeds),
            out=args.out,
            protocol=args.protocol,
            budget_minutes=args.budget_minutes,
            objective=args.objective,
            metric=args.metric or "mrr",
            select_on=args.metric,
            trainer=trainer,
            shards=shards,
        )


def check_inputs(source: DatasetSpec, shards: ShardOptions, trainer: TrainerOptions, protocol: str) -> None:
    """The graph's other inputs against the run's other flags, before any work."""
    if NO_FEATURES in trainer.train_args:
        raise FlagError(
            f"--train-arg {NO_FEATURES}: a run with node features trains both rows itself, 'PENCIL' and "
            "'PENCIL w/o features' on the same shard set, and a run without them reads none; drop it"
        )
    if protocol == "pairs" and source.eval_pairs is None:
        raise FlagError(
            "--protocol pairs: evaluates on your labelled pairs; pass --eval-pairs FILE (columns src,dst,label[,split])"
        )


def build_parser(prog: str = PROG) -> Parser:
    p = Parser(prog=prog, description=DESCRIPTION)
    add_dataset_flags(p, split_kinds=True)
    add_graph_input_flags(p)
    p.add_argument("--preset", default=None, help="default: the dataset's; auto (a search) for your graph")
    add_seeds_flag(p)
    p.add_argument("--out", default="results", help="results root (default results)")
    add_shards_flag(p)
    p.add_argument("--overwrite", action="store_true", help="retrain runs made otherwise; redo a finished report")
    p.add_argument(
        "--budget-minutes",
        type=float,
        default=None,
        metavar="MIN",
        help="--preset auto: a bound on its wall time (default 30)",
    )
    p.add_argument(
        "--protocol",
        default="original",
        choices=PROTOCOL_CHOICES,
        metavar="PROTOCOL",
        help="original (default), heart, ogb, both, all; pairs: only --eval-pairs, not random negatives",
    )
    add_device_flag(p)
    p.add_argument(
        "--metric",
        default=None,
        choices=METRICS,
        metavar="METRIC",
        help="mrr (default), auc or hits@K: picks best epochs and --preset auto's choices, leads the report",
    )
    p.add_argument(
        "--objective",
        default="link-prediction",
        choices=OBJECTIVES,
        metavar="GOAL",
        help="--preset auto trains for link-prediction (default) or recommend",
    )
    p.add_argument(
        "--views", type=int, default=None, advanced=True, help="training views to preprocess (default min(epochs, 20))"
    )
    p.add_argument(
        "--hard-neg-fraction",
        type=float,
        default=None,
        metavar="F",
        advanced=True,
        help="fraction of each training view's negatives drawn as 2-hop non-edges of the training graph; "
        "the rest uniform (as preprocess --hard-neg-fraction; default 0)",
    )
    p.add_argument("--epochs", type=float, default=None, advanced=True, help="override the preset's epochs")
    add_num_cpus_flag(p)
    p.add_argument(
        "--parallel-seeds",
        type=int,
        default=0,
        advanced=True,
        help="seeds trained at once on CPU, each its own process (default 0 = one per CPU core; "
        "GPU runs train seeds one after another)",
    )
    p.add_argument(
        "--features",
        action="store_true",
        advanced=True,
        help="a paper dataset's node features: 'PENCIL' beside 'PENCIL w/o features' (an edge list's: "
        "--node-features FILE)",
    )
    add_train_arg_flag(p)
    return p
