"""HeaRT-format directories: {train,valid,test}_{pos,neg}.txt and optional heart_{valid,test}_samples.npy.

Any directory in that layout loads (a user's own too). The project ships citeseer in this form as
`common/data/citeseer.npz` (same arrays, compressed) so the demo runs without network or shared/.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.datasets.base import DatasetError, LinkDataset, Split, check_pairs, training_graph

SHIPPED = Path(__file__).resolve().parent.parent / "data"


def _read_pairs(path: Path) -> np.ndarray:
    try:
        arr = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except ValueError as err:
        raise DatasetError(f"{path}: could not parse as whitespace-separated integer pairs ({err})") from None
    if arr.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if arr.shape[1] < 2:
        raise DatasetError(f"{path}: each line must hold two node ids 'u v', found {arr.shape[1]} column(s)")
    arr = arr[:, :2]
    if not np.all(arr == np.round(arr)):
        raise DatasetError(f"{path}: node ids must be integers")
    return arr.astype(np.int64)


def _arrays_from_dir(root: Path) -> dict[str, np.ndarray]:
    if not root.is_dir():
        raise DatasetError(f"{root}: not a directory; pass a HeaRT-format folder with train_pos.txt etc.")
    out = {}
    for split in ("train", "valid", "test"):
        for kind in ("pos", "neg"):
            f = root / f"{split}_{kind}.txt"
            if f.exists():
                out[f"{split}_{kind}"] = _read_pairs(f)
            elif kind == "pos":
                raise DatasetError(f"{f}: missing; a HeaRT-format folder needs {split}_pos.txt")
    for split in ("valid", "test"):
        f = root / f"heart_{split}_samples.npy"
        if f.exists():
            out[f"heart_{split}_samples"] = np.load(f)
    return out


# 0-based ids in this format mean num_nodes = max id + 1: refuse an id space this much wider than the ids
# that exist (one id of 2,147,483,653 among 1,500 edges once made preprocess allocate 24 GB and die).
MAX_SPARSITY = 100


def _check_dense(where: str, num_nodes: int, num_ids: int) -> None:
    if num_nodes > max(MAX_SPARSITY * num_ids, 1 << 20):
        raise DatasetError(
            f"{where}: node id {num_nodes - 1:,} makes {num_nodes:,} nodes for {num_ids:,} ids in "
            "the files; HeaRT-format ids must be 0-based and dense, so give the edges as an "
            "edge-list file (src,dst[,split] .csv/.parquet), whose ids of any size are mapped"
        )


def dataset_from_arrays(
    name: str, arrays: dict[str, np.ndarray], num_nodes: int | None = None, x=None, source: str = ""
) -> LinkDataset:
    """Build a LinkDataset from HeaRT-style arrays (keys as the file stems)."""
    where = source or name
    if num_nodes is None:
        num_nodes = x.shape[0] if x is not None else 1 + max(int(a.max()) for a in arrays.values() if a.size)
        _check_dense(where, num_nodes, sum(a.size for a in arrays.values()))
    splits = {}
    for split in ("train", "valid", "test"):
        pos = check_pairs(arrays[f"{split}_pos"], num_nodes, f"{where}/{split}_pos")
        neg = {}
        if f"{split}_neg" in arrays and split != "train":
            neg["original"] = check_pairs(arrays[f"{split}_neg"], num_nodes, f"{where}/{split}_neg")
        key = f"heart_{split}_samples"
        if key in arrays:
            hard = check_pairs(arrays[key], num_nodes, f"{where}/{key}.npy")
            if hard.ndim != 3 or hard.shape[0] != len(pos):
                raise DatasetError(
                    f"{where}/{key}.npy: expected shape ({len(pos)}, K, 2) matching {split}_pos, got {hard.shape}"
                )
            neg["heart"] = hard
        splits[split] = Split(pos=pos, neg=neg)
    graph = training_graph(splits["train"].pos, num_nodes, x=x)
    return LinkDataset(name=name, graph=graph, splits=splits, metric={"original": "mrr", "heart": "mrr"})


def load_heart_dir(root, name: str | None = None, num_nodes: int | None = None, x=None) -> LinkDataset:
    root = Path(root)
    return dataset_from_arrays(name or root.name, _arrays_from_dir(root), num_nodes=num_nodes, x=x, source=str(root))


def load_shipped(name: str, x=None) -> LinkDataset:
    path = SHIPPED / f"{name}.npz"
    if not path.exists():
        raise DatasetError(f"no shipped copy of '{name}' at {path}")
    with np.load(path) as z:
        arrays = {k: z[k].astype(np.int64) for k in z.files}
    num_nodes = {"citeseer": 3327}.get(name)
    return dataset_from_arrays(name, arrays, num_nodes=num_nodes, x=x, source=str(path))
