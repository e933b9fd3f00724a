"""Dataset loaders. Every loader returns a `LinkDataset` (see base.py).

`load_dataset(DatasetSpec(name_or_path, ...))` is the single entry point the CLIs use:
  citeseer                  the shipped HeaRT split (features from a Planetoid raw dir if asked)
  cora                      Planetoid raw files + seeded 85/5/10 split with random negatives
  ogbl-collab|ppa|citation2|ddi   an already-downloaded OGB root, offline
  a directory               HeaRT format ({train,valid,test}_{pos,neg}.txt [+ heart_*_samples.npy]), or a
                            knowledge graph ({train,valid,test}.txt[.gz] of head<TAB>relation<TAB>tail; kg.py)
  an edge-list file         .csv, .csv.gz, .tsv, .tsv.gz, .parquet or .pq with columns src,dst[,split,time,
                            weight]; node ids of any kind (big, negative, strings) are mapped to 0..N-1
  synthetic                 the latent-space graph of the paper's Appendix D.4
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from common.datasets.base import PROTOCOLS, SPLITS, DatasetError, LinkDataset, Split
from common.datasets.fractions import split_fractions
from common.datasets.spec import DatasetSpec

OGB_NAMES = ("ogbl-collab", "ogbl-ppa", "ogbl-citation2", "ogbl-ddi")


def load_dataset(spec: DatasetSpec, *, split_flag: str | None = "--split") -> LinkDataset:
    """Resolve a dataset by name or path (spec.dataset) with every input the spec names (common/datasets/spec.py).
    Errors name the missing file/flag and the fix. A dataset with its own split refuses spec.split.

    split_flag: the command's flag of the split's shares, named in the fix of a split too small; None for a command
    without one (pencil heuristics), whose fix is a split column.
    """
    from common.datasets.tables import EDGE_LIST_SUFFIXES, suffix_of

    name, seed, split = spec.dataset, spec.seed, spec.split
    fracs = None if split is None else split_fractions(split)
    if suffix_of(name) is not None and spec.data_dir is None:
        from common.datasets.edgelist import load_edge_list

        if spec.relation is not None:  # typed links: a knowledge graph (common/datasets/kg.py)
            from common.datasets.kg import load_kg_edge_list

            return load_kg_edge_list(spec)
        from common.datasets.user_item import is_user_item, load_user_item

        if is_user_item(name):  # a ratings file: users and items, two node kinds (common/datasets/user_item.py)
            return load_user_item(spec)
        ds = _own(load_edge_list(spec, split_flag=split_flag))
    else:
        kg = spec.data_dir is None and Path(name).is_dir() and _kg_files(Path(name)) is not None
        edge_list_only = {
            "--nodes": (None if kg else spec.nodes, "a node list"),  # a knowledge graph's: node kinds
            "--node-features": (None if kg else spec.node_features, "a feature file"),
            "--fill-features": (None if kg else spec.fill_features, "filling features"),
            "--ignore-columns": (",".join(spec.ignore_columns) or None, "ignoring columns"),
            "--directed": (spec.directed or None, "reading edges as ordered pairs"),
            "--relation": (spec.relation, "a relation column"),
        }
        for flag, (value, what) in edge_list_only.items():
            if value is not None:  # a paper dataset's features come with --features
                raise DatasetError(
                    f"{flag} {value}: {what} applies to edge-list files only "
                    f"({', '.join(EDGE_LIST_SUFFIXES)}), not to '{name}'"
                )
        ds = _named(spec, fracs)
    if spec.eval_pairs is not None or spec.train_negatives is not None:
        from common.datasets.pairs import attach_user_pairs

        attach_user_pairs(ds, eval_pairs=spec.eval_pairs, train_negatives=spec.train_negatives, seed=seed, shares=split)
    if spec.valid_pool:
        from common.datasets.pool import attach_valid_pool

        ds = attach_valid_pool(ds, spec.valid_pool, seed=seed)
    return ds


def _named(spec: DatasetSpec, fracs) -> LinkDataset:
    """A paper dataset, a HeaRT folder, OGB or the synthetic graph (everything but an edge-list file)."""
    name, data_dir, planetoid_dir, features, split_kind = (
        spec.dataset,
        spec.data_dir,
        spec.planetoid_dir,
        spec.features,
        spec.split_kind,
    )
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
        return load_planetoid_random_split(
            "cora", planetoid_dir, seed=spec.seed, features=features, **_frac_kwargs(fracs)
        )
    if name in OGB_NAMES:
        _own_split(name, fracs, split_kind)
        from common.datasets.ogb import load_ogb

        if spec.ogb_root is None:
            raise DatasetError(f"{name} needs --ogb-root: a folder holding an already-downloaded OGB dataset")
        return load_ogb(name, spec.ogb_root)
    if name == "synthetic":
        _own_split(name, fracs, split_kind)  # the paper's Appendix D.4 split
        from common.datasets.synthetic import load_latent_space

        return load_latent_space(seed=spec.seed)
    path = Path(name)
    if path.is_dir() and (triples := _kg_files(path)) is not None:  # a knowledge graph: its files' split
        _own_split(name, fracs, split_kind)
        from common.datasets.kg import load_kg_folder

        return load_kg_folder(path, triples, spec.seed, spec.nodes, spec.node_features, spec.fill_features)
    if path.is_dir():
        _own_split(name, fracs, split_kind)
        from common.datasets.heart import load_heart_dir

        return _own(load_heart_dir(path))
    from common.datasets.tables import EDGE_LIST_SUFFIXES

    raise DatasetError(
        f"unknown dataset '{name}': use citeseer, cora, {', '.join(OGB_NAMES)}, synthetic, "
        f"a HeaRT-format directory, or an edge-list file ({', '.join(EDGE_LIST_SUFFIXES)})"
    )


def _kg_files(path: Path):
    from common.datasets.kg import kg_files

    return kg_files(path)


def load_set_dataset(
    config: dict, *, name: str | None = None, data_dir: str | None = None, ogb_root: str | None = None
) -> LinkDataset:
    """The dataset a shard set was built from, as its manifest's `config` records its spec (DatasetSpec.from_dict):
    the same seed, --split, --nodes and the graph's other inputs, so a run is scored, recommended and evaluated
    on the positives, graphs and features it was trained on, not on a default split or without its isolated
    nodes. name, data_dir and ogb_root override where the data is found (pipelines.score
    --dataset/--data-dir/--ogb-root)."""
    spec = DatasetSpec.from_dict(config)
    moved = {"dataset": name, "data_dir": data_dir, "ogb_root": ogb_root}
    return load_dataset(replace(spec, **{k: v for k, v in moved.items() if v}))


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
    "DatasetSpec",
    "load_set_dataset",
    "given_by_path",
    "LinkDataset",
    "Split",
    "DatasetError",
    "PROTOCOLS",
    "SPLITS",
    "OGB_NAMES",
]
