"""The command line of `python -m pipelines.run`: its parser, and every check of its own flags before any
work (a typo must not cost a preprocessing run). The trainer flags it passes through (--train-arg) are
checked by pipelines.run.check_trainer_flags, once the preset is known.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from common.cli import add_debug_flag, one_line_errors
from common.datasets import DatasetError
from common.datasets.fractions import parse_split
from common.presets import PRESETS
from common.storage import StorageError, is_remote, open_storage

# the first line of pipelines.run's docstring: what --help (and the README's CLI reference) says it does
DESCRIPTION = "End-to-end recipe: preprocess (embedded Ray, cached) → train (per seed) → evaluate → report."


class RunError(ValueError):
    """A bad pipelines.run flag; the message names it and the fix."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipelines.run", description=DESCRIPTION)
    p.add_argument("--dataset", required=True, help="dataset name or path, as `python -m preprocess --dataset`")
    p.add_argument("--protocol", default="original", choices=("original", "heart", "ogb", "both"),
                   help="evaluation protocol; both = every protocol the dataset has (default original)")
    p.add_argument("--preset", default=None,
                   help="model/optimiser preset (default: <dataset>-small on CPU, <dataset> on GPU; auto for a dataset "
                        f"without one: a configuration searched on validation): {', '.join(sorted(PRESETS))}")
    p.add_argument("--budget-minutes", type=float, default=None,
                   help="--preset auto: wall time for the search and the final seeds (default 30)")
    p.add_argument("--seeds", default="0", help="comma-separated training seeds (default 0)")
    p.add_argument("--split", default=None, metavar="TRAIN,VALID,TEST",
                   help="percentages of the seeded random edge split of an edge list (no split column) or cora "
                        "(default 85,5,10)")
    p.add_argument("--out", default="results", help="results root; this writes OUT/<dataset>/<preset>/ (default results)")
    p.add_argument("--shards", default="shards", help="shard root for preprocess --out (default shards)")
    p.add_argument("--views", type=int, default=None, help="training views to preprocess (default min(epochs, 20))")
    p.add_argument("--hard-neg-fraction", type=float, default=None, metavar="F",
                   help="fraction of each training view's negatives drawn as 2-hop non-edges of the training graph; "
                        "the rest uniform (as preprocess --hard-neg-fraction; default 0, and with --preset auto "
                        "0 or 0.5, chosen on validation)")
    p.add_argument("--objective", default="link-prediction", choices=("link-prediction", "recommend"),
                   help="--preset auto: what the checkpoints are for; it decides the training negatives stage "
                        "on the link-prediction protocols' validation, or (recommend) on validation full ranking "
                        "of RA pools, as pipelines.recommend uses them (default link-prediction)")
    p.add_argument("--epochs", type=float, default=None, help="override the preset's epochs")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of the embedded Ray (default: all)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--parallel-seeds", type=int, default=0,
                   help="seeds trained at once on CPU, each its own process (default 0 = one per CPU core; "
                        "GPU runs train seeds one after another)")
    p.add_argument("--data-dir", default=None, help="HeaRT-format folder (as preprocess --data-dir)")
    p.add_argument("--ogb-root", default=None, help="already-downloaded OGB root (as preprocess --ogb-root)")
    p.add_argument("--planetoid-dir", default=None, help="Planetoid raw files (cora; features of citeseer/cora)")
    p.add_argument("--nodes", default=None, metavar="FILE",
                   help="edge lists only: a file of node ids (column node or id) declaring every node, isolated ones "
                        "included, so they can be scored (as preprocess --nodes)")
    p.add_argument("--features", action="store_true",
                   help="train with node features (the paper's 'PENCIL' rows; default: without, 'PENCIL w/o features')")
    p.add_argument("--train-arg", action="append", default=[], metavar="FLAG=VALUE",
                   help="extra trainer flag, repeatable, e.g. --train-arg=--micro-batch=64")
    add_debug_flag(p)
    return one_line_errors(p)


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
    if args.budget_minutes is not None and not args.budget_minutes > 0:
        raise RunError(f"--budget-minutes: must be positive, got {args.budget_minutes}")
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
