"""Planetoid raw files (ind.{name}.*): node features in PyG node order, and a seeded random split.

Node ids of the HeaRT citeseer split equal PyG's `Planetoid` node ids, so features must come out in
exactly PyG's order (citeseer: isolated test nodes padded with zero rows; test rows permuted so that
node `test.index[k]` gets the k-th row in sorted order). We call PyG's own reader
(`torch_geometric.io.planetoid.read_planetoid_data`, which only reads files, no network) and fall
back to a numpy mirror of the same steps when torch_geometric is not installed; a test checks that
the two agree.

Cora has no HeaRT split here, so `load_planetoid_random_split` rebuilds HeaRT's recipe: a seeded
85/5/10 split of the undirected edges with uniformly random non-edges as negatives.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np

from common.datasets.base import DatasetError, LinkDataset
from common.datasets.edgelist import random_split_dataset
from common.datasets.fractions import SplitSettings
from common.graph import Graph

RAW_PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


def _check_raw(name: str, planetoid_dir) -> Path:
    root = Path(planetoid_dir)
    missing = [
        str(root / f"ind.{name.lower()}.{part}")
        for part in RAW_PARTS
        if not (root / f"ind.{name.lower()}.{part}").is_file()
    ]
    if missing:
        raise DatasetError(
            f"Planetoid raw file(s) missing: {', '.join(missing)}; "
            f"point --planetoid-dir at a folder holding ind.{name.lower()}.*"
        )
    return root


def _read_with_pyg(name: str, root: Path) -> tuple[np.ndarray, np.ndarray]:
    from torch_geometric.io.planetoid import read_planetoid_data

    data = read_planetoid_data(str(root), name)
    x = data.x.numpy().astype(np.float32, copy=False)
    return x, data.edge_index.numpy().T.astype(np.int64)


def _read_numpy(name: str, root: Path) -> tuple[np.ndarray, np.ndarray]:
    """The steps of PyG's `read_planetoid_data` (x and edges only) in numpy."""
    prefix = name.lower()

    def load(part):
        with open(root / f"ind.{prefix}.{part}", "rb") as f, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy's "csr name is deprecated" from old pickles
            return pickle.load(f, encoding="latin1")

    def dense(m):
        return np.asarray(m.todense() if hasattr(m, "todense") else m, dtype=np.float32)

    tx, allx = dense(load("tx")), dense(load("allx"))
    graph = load("graph")
    test_index = np.loadtxt(root / f"ind.{prefix}.test.index", dtype=np.int64, ndmin=1)
    sorted_test = np.sort(test_index)
    if prefix == "citeseer":
        # Isolated citeseer nodes have no test row: pad the test block with zero rows.
        ext = np.zeros((int(test_index.max() - test_index.min()) + 1, tx.shape[1]), dtype=np.float32)
        ext[sorted_test - test_index.min()] = tx
        tx = ext
    x = np.concatenate([allx, tx], axis=0)
    x[test_index] = x[sorted_test]
    keys = np.fromiter(graph.keys(), dtype=np.int64, count=len(graph))
    lists = list(graph.values())
    src = np.repeat(keys, [len(v) for v in lists])
    dst = np.fromiter((n for v in lists for n in v), dtype=np.int64, count=len(src))
    return x, np.stack([src, dst], axis=1)


def read_planetoid(name: str, planetoid_dir, use_pyg: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(features (N, F) float32, raw directed edges (E, 2) int64) of a Planetoid dataset."""
    root = _check_raw(name, planetoid_dir)
    if use_pyg is None:
        try:
            import torch_geometric.io.planetoid  # noqa: F401

            use_pyg = True
        except ImportError:
            use_pyg = False
    try:
        return _read_with_pyg(name, root) if use_pyg else _read_numpy(name, root)
    except (pickle.UnpicklingError, EOFError, ValueError, KeyError) as err:
        raise DatasetError(f"{root}/ind.{name.lower()}.*: could not read the Planetoid files ({err})") from None


def load_planetoid_features(name: str, planetoid_dir) -> np.ndarray:
    """Node features (N, F) float32 in PyG's Planetoid node order (citeseer (3327, 3703), cora (2708, 1433))."""
    return read_planetoid(name, planetoid_dir)[0]


def load_planetoid_random_split(
    name: str, planetoid_dir, seed: int = 0, features: bool = False, val_frac: float = 0.05, test_frac: float = 0.10
) -> LinkDataset:
    """Seeded 85/5/10 split (val_frac / test_frac, --split) of the Planetoid graph's undirected edges with
    random non-edge negatives.

    The training graph holds the train edges only; valid/test negatives are uniform non-edges of
    the FULL graph (no self-loops), as many as the split's positives, under protocol "original".
    """
    x, edges = read_planetoid(name, planetoid_dir)
    full = Graph.from_edges(edges, num_nodes=x.shape[0])  # drops self-loops, merges duplicates
    return random_split_dataset(
        name,
        full.edge_array(),
        full.num_nodes,
        SplitSettings(val_frac, test_frac, seed),
        x=x if features else None,
        full_graph=full,
    )
