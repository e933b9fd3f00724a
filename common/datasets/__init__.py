"""Dataset loaders. Every loader returns a `LinkDataset` (see base.py).

`load_dataset(name_or_path, ...)` is the single entry point the CLIs use:
  citeseer                  the shipped HeaRT split (features from a Planetoid raw dir if asked)
  cora                      Planetoid raw files + seeded 85/5/10 split with random negatives
  ogbl-collab|ppa|citation2|ddi   an already-downloaded OGB root, offline
  a directory               HeaRT format ({train,valid,test}_{pos,neg}.txt [+ heart_*_samples.npy])
  a .csv / .parquet file    a user's edge list (src,dst[,split])
  synthetic                 the latent-space graph of the paper's Appendix D.4
"""
from __future__ import annotations

from pathlib import Path

from common.datasets.base import PROTOCOLS, SPLITS, DatasetError, LinkDataset, Split

OGB_NAMES = ("ogbl-collab", "ogbl-ppa", "ogbl-citation2", "ogbl-ddi")


def load_dataset(name: str, *, data_dir: str | None = None, ogb_root: str | None = None,
                 planetoid_dir: str | None = None, features: bool = False, seed: int = 0) -> LinkDataset:
    """Resolve a dataset by name or path. Errors name the missing file/flag and the fix."""
    if data_dir is not None:
        from common.datasets.heart import load_heart_dir
        x = _planetoid_features(name, planetoid_dir) if features else None
        return load_heart_dir(data_dir, name=name, x=x, num_nodes=None if x is None else x.shape[0])
    if name == "citeseer":
        from common.datasets.heart import load_shipped
        return load_shipped("citeseer", x=_planetoid_features("citeseer", planetoid_dir) if features else None)
    if name == "cora":
        from common.datasets.planetoid import load_planetoid_random_split
        if planetoid_dir is None:
            raise DatasetError("cora needs --planetoid-dir pointing at the Planetoid raw files (ind.cora.*)")
        return load_planetoid_random_split("cora", planetoid_dir, seed=seed, features=features)
    if name in OGB_NAMES:
        from common.datasets.ogb import load_ogb
        if ogb_root is None:
            raise DatasetError(f"{name} needs --ogb-root: a folder holding an already-downloaded OGB dataset")
        return load_ogb(name, ogb_root)
    if name == "synthetic":
        from common.datasets.synthetic import load_latent_space
        return load_latent_space(seed=seed)
    path = Path(name)
    if path.name.lower().endswith((".csv", ".csv.gz", ".parquet", ".pq")):  # suffix alone misses .csv.gz
        from common.datasets.edgelist import load_edge_list
        return load_edge_list(path, seed=seed)
    if path.is_dir():
        from common.datasets.heart import load_heart_dir
        return load_heart_dir(path)
    raise DatasetError(
        f"unknown dataset '{name}': use citeseer, cora, {', '.join(OGB_NAMES)}, synthetic, "
        "a HeaRT-format directory, or a .csv/.parquet edge list")


def _planetoid_features(name: str, planetoid_dir: str | None):
    from common.datasets.planetoid import load_planetoid_features
    if planetoid_dir is None:
        raise DatasetError(f"features for {name} need --planetoid-dir pointing at the Planetoid raw files")
    return load_planetoid_features(name, planetoid_dir)


__all__ = ["load_dataset", "LinkDataset", "Split", "DatasetError", "PROTOCOLS", "SPLITS", "OGB_NAMES"]
