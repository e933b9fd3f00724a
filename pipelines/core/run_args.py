"""The command line of `python -m pipelines.run`: its parser, and every check of its own flags before any
work (a typo must not cost a preprocessing run). The trainer flags it passes through (--train-arg) are
checked by pipelines.run.check_trainer_flags, once the preset is known.
"""
from __future__ import annotations

from pathlib import Path

from common.cli import Parser
from common.datasets import DatasetError
from common.datasets.fractions import parse_split
from common.flags import (add_dataset_flags, add_device_flag, add_num_cpus_flag, add_seeds_flag, add_shards_flag,
                          add_train_arg_flag)
from common.outputs import OutputError, check_output_folder
from common.storage import StorageError, is_remote, open_storage

PROG = "python -m pipelines.run"
# below this, --preset auto cannot build its shard sets and finish one epoch of each candidate on a small graph
# (the suite's smallest graphs took 2.3 minutes alone on 2 cores): refused before any work
MIN_BUDGET_MINUTES = 2.0
DESCRIPTION = """Train PENCIL on a dataset end to end: preprocess (embedded Ray, cached) -> train (per seed) -> evaluate ->
report. A dataset without a paper preset (your edge list) gets --preset auto: a configuration searched on
validation only. Results land in OUT/<dataset>/<preset>/."""


class RunError(ValueError):
    """A bad pipelines.run flag; the message names it and the fix."""


def build_parser(prog: str = PROG) -> Parser:
    p = Parser(prog=prog, description=DESCRIPTION)
    add_dataset_flags(p)
    p.add_argument("--preset", default=None,
                   help="default: the dataset's; auto for your graph")
    add_seeds_flag(p)
    p.add_argument("--out", default="results", help="results root (default results)")
    add_shards_flag(p)
    p.add_argument("--overwrite", action="store_true",
                   help="retrain seed folders holding runs on other data")
    p.add_argument("--budget-minutes", type=float, default=None, metavar="MIN",
                   help="--preset auto: an upper bound on the whole run's wall time (default 30)")
    p.add_argument("--protocol", default="original", choices=("original", "heart", "ogb", "both"),
                   help="evaluation protocol; both = every protocol the dataset has (default original)")
    add_device_flag(p)
    p.add_argument("--objective", default="link-prediction", choices=("link-prediction", "recommend"),
                   help="--preset auto: what the checkpoints are for (default link-prediction)")
    p.add_argument("--views", type=int, default=None, advanced=True,
                   help="training views to preprocess (default min(epochs, 20))")
    p.add_argument("--hard-neg-fraction", type=float, default=None, metavar="F", advanced=True,
                   help="fraction of each training view's negatives drawn as 2-hop non-edges of the training graph; "
                        "the rest uniform (as preprocess --hard-neg-fraction; default 0)")
    p.add_argument("--epochs", type=float, default=None, advanced=True, help="override the preset's epochs")
    add_num_cpus_flag(p)
    p.add_argument("--parallel-seeds", type=int, default=0, advanced=True,
                   help="seeds trained at once on CPU, each its own process (default 0 = one per CPU core; "
                        "GPU runs train seeds one after another)")
    p.add_argument("--features", action="store_true", advanced=True,
                   help="train with node features (the paper's 'PENCIL' rows; default: without, 'PENCIL w/o features')")
    add_train_arg_flag(p)
    return p


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        seeds = []
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise RunError(f"--seeds: expected distinct non-negative integers separated by commas (e.g. 0,1,2), got {text!r}")
    return seeds


def validate_args(args) -> None:
    """Every flag checked before any work: a typo must not cost a preprocessing run."""
    args.seed_list = parse_seeds(args.seeds)
    try:
        args.split_pct = None if args.split is None else parse_split(args.split)
    except DatasetError as err:
        raise RunError(str(err)) from None
    if args.views is not None and args.views < 1:
        raise RunError(f"--views: must be a positive integer, got {args.views}")
    if args.hard_neg_fraction is not None and not 0 <= args.hard_neg_fraction <= 1:
        raise RunError(f"--hard-neg-fraction: must be in [0, 1] (0 = uniform negatives only), "
                       f"got {args.hard_neg_fraction}")
    if args.budget_minutes is not None and not args.budget_minutes >= MIN_BUDGET_MINUTES:
        raise RunError(f"--budget-minutes {args.budget_minutes:g}: below the {MIN_BUDGET_MINUTES:g} minutes --preset "
                       "auto needs at least (its shard sets and a first epoch of each candidate come first); pass "
                       f"{MIN_BUDGET_MINUTES:g} or more")
    if args.epochs is not None and not args.epochs > 0:
        raise RunError(f"--epochs: must be positive, got {args.epochs}")
    if args.num_cpus is not None and args.num_cpus < 1:
        raise RunError(f"--num-cpus: must be a positive integer, got {args.num_cpus}")
    if args.parallel_seeds < 0:
        raise RunError(f"--parallel-seeds: must be >= 0 (0 = one per CPU core), got {args.parallel_seeds}")
    for arg in args.train_arg:
        if not arg.startswith("--"):
            raise RunError(f"--train-arg {arg!r}: expected a trainer flag such as --train-arg=--micro-batch=64")
    for flag, path in (("--out", args.out), ("--shards", args.shards)):
        if not is_remote(path):
            _check_folder(flag, Path(str(path).removeprefix("file://")))
            try:  # a results tree or shard set nested in a run folder, a results tree or a set mixes with it
                check_output_folder(path, flag)
            except OutputError as err:
                raise RunError(str(err)) from None
    if is_remote(args.shards):
        try:
            open_storage(args.shards).check_writable()  # a missing bucket fails here, not after loading data
        except StorageError as err:
            raise RunError(f"--shards: {err}") from None


def _check_folder(flag: str, path: Path) -> None:
    """A folder that exists as a file (or below one) fails here, not after preprocessing."""
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise RunError(f"{flag} {path}: {p} is a file, not a directory; choose another folder")
            return
