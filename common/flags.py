"""The command-line flags several entry points share, each defined once with one default and one help text."""

from __future__ import annotations

from common.datasets.base import FILL_CHOICES

DATASET_HELP = (
    "your edge list (.csv, .tsv, .parquet, optionally .gz; columns src,dst[,split]), a paper dataset "
    "(citeseer, cora, ogbl-*) or a HeaRT-format folder"
)
DEVICES = ("auto", "cpu", "cuda")
DEVICE_HELP = "auto: a GPU when one is visible (default)"
MOVED_SHARDS_HELP = (
    "the run's shard set (its folder holding manifest.json) where it is now, if it moved (checked against the run)"
)
MOVED_DATASET_HELP = "the run's edge list where it is now, if it moved (checked against the run's fingerprint)"


def add_dataset_flags(
    p,
    required: bool = True,
    split: bool = True,
    nodes: bool = True,
    split_kinds: bool = False,
    help: str = DATASET_HELP,
) -> None:
    """--dataset and where its files are; --split and --nodes for edge lists. split_kinds: --split also takes
    random or temporal (common.datasets.fractions.parse_split_spec parses it)."""
    p.add_argument("--dataset", required=required, help=help)
    p.add_argument("--data-dir", default=None, advanced=True, help="a HeaRT-format folder to load the dataset from")
    p.add_argument("--ogb-root", default=None, advanced=True, help="a folder holding an already-downloaded OGB dataset")
    p.add_argument(
        "--planetoid-dir",
        default=None,
        advanced=True,
        help="the Planetoid raw files (ind.<name>.*): cora, and citeseer's node features",
    )
    if split and split_kinds:
        p.add_argument(
            "--split",
            default=None,
            metavar="[random|temporal,]TRAIN,VALID,TEST",
            help="85,5,10 by default; temporal with a time column, else random",
        )
    elif split:
        p.add_argument(
            "--split",
            default=None,
            metavar="TRAIN,VALID,TEST",
            help="percentages of the seeded random edge split (default 85,5,10)",
        )
    if nodes:
        p.add_argument(
            "--nodes", default=None, metavar="FILE", help="every node's id (column node or id), isolated ones too"
        )


def add_graph_input_flags(p) -> None:
    """An edge list's inputs beyond its edges: node features, ignored columns, the user's own pairs."""
    p.add_argument(
        "--node-features", default=None, metavar="FILE", help="node features (a table by node; KIND=FILE,.. per kind)"
    )
    p.add_argument(
        "--fill-features",
        default=None,
        choices=FILL_CHOICES,
        advanced=True,
        help="fill the nodes the feature file has no row for with zeros or the column means (default: "
        "such a gap is refused)",
    )
    p.add_argument(
        "--eval-pairs", default=None, metavar="FILE", help="your labelled pairs to test on (src,dst,label[,split])"
    )
    p.add_argument(
        "--train-negatives",
        default=None,
        metavar="FILE",
        advanced=True,
        help="known non-links (src,dst): up to half of every training view's negatives",
    )
    add_directed_flag(p)
    p.add_argument(
        "--relation",
        default=None,
        metavar="COLUMN",
        advanced=True,
        help="the edge list's relation column: typed links src -> dst, read as a knowledge graph",
    )
    p.add_argument(
        "--ignore-columns",
        default=None,
        metavar="COLS",
        advanced=True,
        help="edge-list columns to ignore, comma-separated (e.g. weight,time); other unknown columns are "
        "ignored with a warning",
    )


def add_directed_flag(p) -> None:
    """--directed, one definition for every command that reads an edge list (docs/own-graph.md#directed-graphs)."""
    p.add_argument("--directed", action="store_true", help="ordered edges: src -> dst is not dst -> src")


def add_moved_dataset_flag(p, advanced: bool = False) -> None:
    """--dataset of a command on a trained run: its edge list, moved (pipelines.core.runs.run_dataset); and
    --shards, its shard set, moved."""
    p.add_argument("--dataset", default=None, metavar="PATH", help=MOVED_DATASET_HELP, advanced=advanced)
    add_moved_shards_flag(p)


def add_moved_shards_flag(p) -> None:
    """--shards of a command on a trained run: its shard set where it is now (pipelines.core.runs.run_manifest)."""
    p.add_argument("--shards", default=None, metavar="DIR", help=MOVED_SHARDS_HELP, advanced=True)


def add_overwrite_flag(p, what: str = "--out", advanced: bool = False) -> None:
    p.add_argument(
        "--overwrite",
        action="store_true",
        advanced=advanced,
        help=f"replace an existing {what} that is not this command's result on the same data",
    )


def add_device_flag(p) -> None:
    p.add_argument("--device", default="auto", choices=DEVICES, help=DEVICE_HELP)


def add_num_cpus_flag(p) -> None:
    p.add_argument(
        "--num-cpus",
        type=int,
        default=None,
        advanced=True,
        help="CPUs of the embedded Ray (default: all; ignored on a cluster, RAY_ADDRESS set)",
    )


def add_seeds_flag(p, default: str = "0") -> None:
    p.add_argument("--seeds", default=default, help=f"comma-separated training seeds (default {default})")


def add_shards_flag(p) -> None:
    p.add_argument("--shards", default="shards", help="shard root, local or s3:// (default shards)")


def add_train_arg_flag(p) -> None:
    p.add_argument(
        "--train-arg",
        action="append",
        default=[],
        metavar="FLAG=VALUE",
        advanced=True,
        help="an extra trainer flag for every run, repeatable, e.g. --train-arg=--num-workers=0",
    )


class FlagError(ValueError):
    """A bad flag value; the message names the flag and what it takes."""


def comma_list(text: str, flag: str, cast=str, allowed=None, minimum=None) -> list:
    """'a,b,a' -> ['a', 'b']: the distinct values in order, each cast, among `allowed`, at least `minimum`."""
    try:
        values = list(dict.fromkeys(cast(t.strip()) for t in text.split(",") if t.strip()))
    except ValueError:
        values = []
    bad = [v for v in values if (allowed is not None and v not in allowed) or (minimum is not None and v < minimum)]
    if bad or not values:
        what = (
            f"a subset of {','.join(map(str, allowed))}"
            if allowed is not None
            else ("integers" if cast is int else "values") + (f" >= {minimum}" if minimum is not None else "")
        )
        unknown = f" (unknown {','.join(map(str, bad))})" if bad else ""
        raise FlagError(f"{flag}: expected a comma-separated list of {what}, got '{text}'{unknown}")
    return values


def experiment_preset_flag(experiment: str, preset: str, dataset: str | None = None) -> dict:
    """The `--preset` of one of the paper's experiments; a `--dataset` other than the preset's is a FlagError
    (each such preset is the paper's setting on one dataset: pass `dataset` only where that holds)."""
    from common.presets import experiment_preset

    try:
        spec = experiment_preset(experiment, preset)
    except ValueError as err:
        raise FlagError(f"--preset: {err}") from None
    if dataset and dataset != spec["dataset"]:
        raise FlagError(f"--dataset {dataset}: preset {preset} runs on {spec['dataset']}; leave --dataset out")
    return spec
