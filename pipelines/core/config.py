"""What the recipes are configured by, in parts every recipe shares: how the trainers run, how the shard sets
are built (where the dataset comes from is common.datasets.DatasetSpec, read by DatasetSpec.from_args). Each
is a frozen dataclass, built and checked once at a command's parser (its `from_args`); below the command line
nothing reads an argparse namespace.

A recipe's own configuration composes these parts (pipelines.core.run_config.RunConfig for `pencil run`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.flags import FlagError
from common.outputs import OutputError, check_output_folder
from common.storage import StorageError, is_remote, open_storage


@dataclass(frozen=True)
class MovedDataset:
    """Where a trained run's dataset is now, when it moved (--dataset, and --data-dir / --ogb-root where the
    command has them); None: where the run found it. Checked against the run's fingerprint
    (pipelines.core.runs.run_dataset). `shards` (--shards): its shard set, checked against the run's data
    (pipelines.core.runs.run_manifest)."""

    dataset: str | None = None
    data_dir: str | None = None
    ogb_root: str | None = None
    shards: str | None = None

    def fields(self) -> tuple[str | None, str | None, str | None]:
        return self.dataset, self.data_dir, self.ogb_root

    @classmethod
    def from_args(cls, args) -> "MovedDataset":
        return cls(
            getattr(args, "dataset", None),
            getattr(args, "data_dir", None),
            getattr(args, "ogb_root", None),
            getattr(args, "shards", None),
        )


@dataclass(frozen=True)
class TrainerOptions:
    """How a recipe runs its trainers (pipelines.core.trainers)."""

    device: str = "auto"
    epochs: float | None = None  # overrides the preset's
    train_args: tuple[str, ...] = ()  # the user's extra trainer flags (--train-arg), one token each
    parallel: int = 0  # trainers at once on CPU; 0: one per core
    overwrite: bool = False  # clear a seed folder that holds a run on other data (else it is refused)
    offers_overwrite: bool = True  # the recipe has an --overwrite flag to name in that refusal

    @classmethod
    def from_args(cls, args) -> "TrainerOptions":
        """From --device and, where the command has them, --train-arg (FLAG=VALUE split into tokens), --epochs,
        --parallel-seeds and --overwrite."""
        train_arg = getattr(args, "train_arg", [])
        for arg in train_arg:
            if not arg.startswith("--"):
                raise FlagError(f"--train-arg {arg!r}: expected a trainer flag such as --train-arg=--micro-batch=64")
        epochs, parallel = getattr(args, "epochs", None), getattr(args, "parallel_seeds", 0)
        if epochs is not None and not epochs > 0:
            raise FlagError(f"--epochs: must be positive, got {epochs}")
        if parallel < 0:
            raise FlagError(f"--parallel-seeds: must be >= 0 (0 = one per CPU core), got {parallel}")
        tokens = tuple(t for arg in train_arg for t in arg.split("=", 1))
        return cls(
            args.device,
            epochs,
            tokens,
            parallel,
            bool(getattr(args, "overwrite", False)),
            offers_overwrite=hasattr(args, "overwrite"),
        )


@dataclass(frozen=True)
class ShardOptions:
    """How a recipe builds its shard sets (pipelines.core.shard_sets)."""

    root: str = "shards"  # local folder or s3:// URL
    num_cpus: int | None = None  # of the embedded Ray; None: all
    views: int | None = None  # training views; None: one per epoch, at most 20
    features: bool = False  # node features in the set (and the model)
    hard_neg_fraction: float | None = None  # of each training view's negatives drawn as 2-hop non-edges; None: 0

    @classmethod
    def from_args(cls, args) -> "ShardOptions":
        """From --shards, --num-cpus and, where the command has them, --views, --features, --hard-neg-fraction."""
        views, fraction = getattr(args, "views", None), getattr(args, "hard_neg_fraction", None)
        if views is not None and views < 1:
            raise FlagError(f"--views: must be a positive integer, got {views}")
        if fraction is not None and not 0 <= fraction <= 1:
            raise FlagError(f"--hard-neg-fraction: must be in [0, 1] (0 = uniform negatives only), got {fraction}")
        if args.num_cpus is not None and args.num_cpus < 1:
            raise FlagError(f"--num-cpus: must be a positive integer, got {args.num_cpus}")
        if is_remote(args.shards):
            try:
                open_storage(args.shards).check_writable()  # a missing bucket fails here, not after loading data
            except StorageError as err:
                raise FlagError(f"--shards: {err}") from None
        else:
            check_folder("--shards", args.shards)
        return cls(args.shards, args.num_cpus, views, bool(getattr(args, "features", False)), fraction)


def check_folder(flag: str, path: str) -> None:
    """An output folder that exists as a file (or below one), or lies in a run folder, a results tree or a shard
    set (its files would mix with theirs: common.outputs), fails here, not after preprocessing."""
    folder = Path(str(path).removeprefix("file://"))
    for p in (folder, *folder.parents):
        if p.exists():
            if not p.is_dir():
                raise FlagError(f"{flag} {folder}: {p} is a file, not a directory; choose another folder")
            break
    try:
        check_output_folder(path, flag)
    except OutputError as err:
        raise FlagError(str(err)) from None


def parse_seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        seeds = []
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise FlagError(
            f"--seeds: expected distinct non-negative integers separated by commas (e.g. 0,1,2), got {text!r}"
        )
    return tuple(seeds)
