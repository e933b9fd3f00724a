"""Dataset loaders. Every loader returns a `LinkDataset` (see base.py).

`load_dataset(name_or_path, ...)` is the single entry point the CLIs use:
  citeseer                  the shipped HeaRT split (features from a Planetoid raw dir if asked)
  cora                      Planetoid raw files + seeded 85/5/10 split with random negatives
  ogbl-collab|ppa|citation2|ddi   an already-downloaded OGB root, offline
  a directory               HeaRT format ({train,valid,test}_{pos,neg}.txt [+ heart_*_samples.npy])
  an edge-list file         .csv, .csv.gz, .tsv, .tsv.gz, .parquet or .pq with columns src,dst[,split,time,
                            weight]; node ids of any kind (big, negative, strings) are mapped to 0..N-1
  synthetic                 the latent-space graph of the paper's Appendix D.4
"""

from __future__ import annotations

from pathlib import Path

from common.datasets.base import PROTOCOLS, SPLITS, DatasetError, LinkDataset, Split
from common.datasets.fractions import SPLIT_KINDS, split_fractions

OGB_NAMES = ("ogbl-collab", "ogbl-ppa", "ogbl-citation2", "ogbl-ddi")


def load_dataset(
    name: str,
    *,
    data_dir: str | None = None,
    ogb_root: str | None = None,
    planetoid_dir: str | None = None,
    features: bool = False,
    seed: int = 0,
    split: tuple[float, float, float] | None = None,
    nodes: str | None = None,
    split_kind: str | None = None,
    node_features: str | None = None,
    fill_features: str | None = None,
    ignore_columns: tuple[str, ...] = (),
    eval_pairs: str | None = None,
    train_negatives: str | None = None,
    valid_pool: int = 0,
    split_flag: str | None = "--split",
) -> LinkDataset:
    """Resolve a dataset by name or path. Errors name the missing file/flag and the fix.

    split: (train, valid, test) percentages of the split (--split) for the datasets split here (edge lists
    without a split column, cora); None = 85/5/10. A dataset with its own split refuses it.
    split_kind: "random" or "temporal" (--split random|temporal); None = temporal for an edge list with a time
    column, else random (common/datasets/temporal.py).
    nodes: a node-list file (edge lists only) declaring nodes, isolated ones included.
    node_features, fill_features, ignore_columns: an edge list's feature file (--node-features, with
    --fill-features zero|mean for nodes without a row) and the columns it ignores on purpose (--ignore-columns).
    eval_pairs, train_negatives: the user's labelled evaluation pairs and known training non-links, for any
    dataset (common/datasets/pairs.py).
    valid_pool: extra validation negatives per protocol negative, for selection (common/datasets/pool.py).
    split_flag: the command's flag of the split's shares, named in the fix of a split too small; None for a command
    without one (pencil heuristics), whose fix is a split column.
    """
    from common.datasets.tables import EDGE_LIST_SUFFIXES, suffix_of

    fracs = None if split is None else split_fractions(split)
    if split_kind is not None and split_kind not in SPLIT_KINDS:
        raise DatasetError(f"--split {split_kind}: unknown kind; use {' or '.join(SPLIT_KINDS)}")
    if suffix_of(name) is not None and data_dir is None:
        from common.datasets.edgelist import load_edge_list

        ds = _own(
            load_edge_list(
                Path(name),
                seed=seed,
                nodes=nodes,
                split_kind=split_kind,
                node_features=node_features,
                fill_features=fill_features,
                ignore_columns=tuple(ignore_columns),
                split_flag=split_flag,
                **_frac_kwargs(fracs),
            )
        )
    else:
        edge_list_only = {
            "--nodes": (nodes, "a node list"),
            "--node-features": (node_features, "a feature file"),
            "--fill-features": (fill_features, "filling features"),
            "--ignore-columns": (",".join(ignore_columns) or None, "ignoring columns"),
        }
        for flag, (value, what) in edge_list_only.items():
            if value is not None:  # a paper dataset's features come with --features
                raise DatasetError(
                    f"{flag} {value}: {what} applies to edge-list files only "
                    f"({', '.join(EDGE_LIST_SUFFIXES)}), not to '{name}'"
                )
        ds = _named(name, data_dir, ogb_root, planetoid_dir, features, seed, fracs, split_kind)
    if eval_pairs is not None or train_negatives is not None:
        from common.datasets.pairs import attach_user_pairs

        attach_user_pairs(ds, eval_pairs=eval_pairs, train_negatives=train_negatives, seed=seed, shares=split)
    if valid_pool:
        from common.datasets.pool import attach_valid_pool

        ds = attach_valid_pool(ds, valid_pool, seed=seed)
    return ds


def _named(name: str, data_dir, ogb_root, planetoid_dir, features: bool, seed: int, fracs, split_kind) -> LinkDataset:
    """A paper dataset, a HeaRT folder, OGB or the synthetic graph (everything but an edge-list file)."""
    if split_kind == "temporal":
        raise DatasetError(
            f"--split temporal: '{name}' has no times; a temporal split needs an edge list with a column 'time'"
        )
    if data_dir is not None:
        _own_split(name, fracs, split_kind)
        from common.datasets.heart import load_heart_dir

        x = _planetoid_features(name, planetoid_dir) if features else None
        return load_heart_dir(data_dir, name=name, x=x, num_nodes=None if x is None else x.shape[0])
    if name == "citeseer":
        _own_split(name, fracs, split_kind)
        from common.datasets.heart import load_shipped

        return load_shipped("citeseer", x=_planetoid_features("citeseer", planetoid_dir) if features else None)
    if name == "cora":
        from common.datasets.planetoid import load_planetoid_random_split

        if planetoid_dir is None:
            raise DatasetError("cora needs --planetoid-dir pointing at the Planetoid raw files (ind.cora.*)")
        return load_planetoid_random_split("cora", planetoid_dir, seed=seed, features=features, **_frac_kwargs(fracs))
    if name in OGB_NAMES:
        _own_split(name, fracs, split_kind)
        from common.datasets.ogb import load_ogb

        if ogb_root is None:
            raise DatasetError(f"{name} needs --ogb-root: a folder holding an already-downloaded OGB dataset")
        return load_ogb(name, ogb_root)
    if name == "synthetic":
        _own_split(name, fracs, split_kind)  # the paper's Appendix D.4 split
        from common.datasets.synthetic import load_latent_space

        return load_latent_space(seed=seed)
    path = Path(name)
    if path.is_dir():
        _own_split(name, fracs, split_kind)
        from common.datasets.heart import load_heart_dir

        return _own(load_heart_dir(path))
    from common.datasets.tables import EDGE_LIST_SUFFIXES

    raise DatasetError(
        f"unknown dataset '{name}': use citeseer, cora, {', '.join(OGB_NAMES)}, synthetic, "
        f"a HeaRT-format directory, or an edge-list file ({', '.join(EDGE_LIST_SUFFIXES)})"
    )


def load_set_dataset(
    config: dict, *, name: str | None = None, data_dir: str | None = None, ogb_root: str | None = None
) -> LinkDataset:
    """The dataset a shard set was built from, as its manifest's `config` (preprocess's flags) records it:
    the same seed, --split, --nodes and the graph's other inputs, so a run is scored, recommended and evaluated
    on the positives, graphs and features it was trained on, not on a default split or without its isolated
    nodes. name, data_dir and ogb_root override where the data is found (pipelines.score
    --dataset/--data-dir/--ogb-root)."""
    split = config.get("split")
    return load_dataset(
        name or config["dataset"],
        data_dir=data_dir or config.get("data_dir"),
        ogb_root=ogb_root or config.get("ogb_root"),
        planetoid_dir=config.get("planetoid_dir"),
        features=bool(config.get("features")),
        seed=config.get("seed", 0),
        split=None if split is None else tuple(split),
        nodes=config.get("nodes"),
        split_kind=config.get("split_kind"),
        node_features=config.get("node_features"),
        fill_features=config.get("fill_features"),
        ignore_columns=tuple(config.get("ignore_columns") or ()),
        eval_pairs=config.get("eval_pairs"),
        train_negatives=config.get("train_negatives"),
        valid_pool=config.get("valid_pool") or 0,
    )


def given_by_path(name: str, data_dir: str | None = None) -> bool:
    """Whether `load_dataset(name, data_dir=...)` loads a user's graph (`own`): an edge-list file or a folder given
    by path, never a paper dataset named by its name (with --data-dir, a paper dataset's HeaRT folder)."""
    from common.datasets.tables import suffix_of

    if data_dir is not None:
        return False
    return suffix_of(name) is not None or name not in ("citeseer", "cora", "synthetic", *OGB_NAMES)


def _own(dataset: LinkDataset) -> LinkDataset:
    """A dataset given by path is the user's, even when its file or folder is named like a paper dataset."""
    dataset.own = True
    return dataset


def _own_split(name: str, fracs, split_kind: str | None = None) -> None:
    """A dataset that ships its split refuses --split rather than ignore it."""
    if fracs is not None or split_kind is not None:
        raise DatasetError(
            f"--split: {name} comes with its own split; --split applies to edge lists without "
            "a split column and to cora"
        )


def _frac_kwargs(fracs: tuple[float, float] | None) -> dict:
    return {} if fracs is None else {"val_frac": fracs[0], "test_frac": fracs[1]}


def _planetoid_features(name: str, planetoid_dir: str | None):
    from common.datasets.planetoid import load_planetoid_features

    if planetoid_dir is None:
        raise DatasetError(f"features for {name} need --planetoid-dir pointing at the Planetoid raw files")
    return load_planetoid_features(name, planetoid_dir)


__all__ = [
    "load_dataset",
    "load_set_dataset",
    "given_by_path",
    "LinkDataset",
    "Split",
    "DatasetError",
    "PROTOCOLS",
    "SPLITS",
    "OGB_NAMES",
]
