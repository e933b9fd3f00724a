"""OGB link-prediction datasets (ogbl-collab, -ppa, -citation2, -ddi) from an already-downloaded root.

We go through the `ogb` package's own numpy dataset class (`ogb.linkproppred.LinkPropPredDataset`)
so raw-file parsing stays exactly OGB's, but these machines are offline and ogb was written for an
interactive shell, so three guards wrap it:
  * every file ogb needs is checked BEFORE ogb runs; a missing one is a DatasetError listing the
    paths (otherwise ogb would try to download, and for big files ask `input()`);
  * `builtins.input` raises while ogb runs, so nothing can ever block on a prompt (ogb also asks
    when RELEASE_v1.txt is missing: "has been updated, will you update?");
  * ogb's `torch.load` of its split/processed files fails under torch>=2.6 (weights_only=True
    default rejects the numpy arrays inside): for paths inside this dataset's folder only, we pass
    weights_only=False. These are the user's own local files, as trusted as the code reading them.
Layout (as ogb unpacks it): <root>/<name with '-' -> '_'>/{RELEASE_v1.txt, raw/*.csv.gz,
split/<type>/{train,valid,test}.pt, processed/data_processed (written by ogb on first load)}.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import sys
from pathlib import Path

import numpy as np

from common.datasets.base import DatasetError, LinkDataset, Split, check_pairs, training_graph

# Model-selection metric per dataset under protocol "ogb" (ogb's master.csv "eval metric").
OGB_METRIC = {"ogbl-collab": "hits@50", "ogbl-ppa": "hits@100", "ogbl-ddi": "hits@20", "ogbl-citation2": "mrr"}


def _meta(name: str):
    import ogb.linkproppred
    import pandas as pd

    master = Path(ogb.linkproppred.__file__).parent / "master.csv"
    return pd.read_csv(master, index_col=0, keep_default_na=False)[name]


def _dataset_dir(name: str, root) -> Path:
    """<root>/<dir_name>; a root that already is the dataset folder is accepted too."""
    root = Path(root)
    dir_name = name.replace("-", "_")
    if not (root / dir_name).is_dir() and root.name == dir_name:
        return root
    return root / dir_name


def required_files(name: str, folder: Path, meta) -> list[Path]:
    """Files ogb reads for `name` (raw files are not needed once processed/data_processed exists)."""
    need = [folder / f"RELEASE_v{meta['version']}.txt"]
    if not (folder / "processed" / "data_processed").is_file():
        raw = folder / "raw"
        need += [raw / "edge.csv.gz", raw / "num-node-list.csv.gz", raw / "num-edge-list.csv.gz"]
        for key in ("additional node files", "additional edge files"):
            if meta[key] != "None":
                need += [raw / f"{f}.csv.gz" for f in meta[key].split(",")]
    split = folder / "split" / meta["split"]
    if not (split / "split_dict.pt").is_file():
        need += [split / f"{s}.pt" for s in ("train", "valid", "test")]
    return need


def _no_prompt(prompt=""):
    raise DatasetError(
        f"ogb asked a question offline ({str(prompt).strip()!r}); "
        "check that the OGB folder is complete (RELEASE_v1.txt, raw/, split/)"
    )


@contextlib.contextmanager
def offline_ogb(folder: Path):
    """No prompts, trusted torch.load for files inside `folder`, ogb's chatter sent to stderr."""
    import torch

    real_load, real_input = torch.load, builtins.input
    inside = str(folder.resolve()) + os.sep

    def trusted_load(f, map_location=None, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)) and str(Path(f).resolve()).startswith(inside):
            kwargs["weights_only"] = False
            if map_location == "rb":  # ogb passes the file mode as map_location; it means nothing
                map_location = None
        return real_load(f, map_location, *args, **kwargs)

    torch.load, builtins.input = trusted_load, _no_prompt
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        torch.load, builtins.input = real_load, real_input


def _np(v) -> np.ndarray:
    return v.numpy() if hasattr(v, "numpy") else np.asarray(v)


def _read_with_ogb(name: str, folder: Path, meta):
    """(graph dict, split dict) through ogb; direct calls of ogb's readers if the folder is read-only."""
    from ogb.linkproppred import LinkPropPredDataset

    processed = folder / "processed"
    try:
        processed.mkdir(exist_ok=True)  # ogb saves data_processed there and does not create it
        writable = os.access(processed, os.W_OK)
    except OSError:
        writable = False
    if writable or (processed / "data_processed").is_file():
        ds = LinkPropPredDataset(name=name, root=str(folder.parent))
        return ds[0], ds.get_edge_split()
    # Read-only copy: the same reader ogb would call, without its save step.
    import torch
    from ogb.io.read_graph_raw import read_csv_graph_raw

    def files(key):
        return [] if meta[key] == "None" else meta[key].split(",")

    graph = read_csv_graph_raw(
        str(folder / "raw"),
        add_inverse_edge=meta["add_inverse_edge"] == "True",
        additional_node_files=files("additional node files"),
        additional_edge_files=files("additional edge files"),
    )[0]
    split = folder / "split" / meta["split"]
    if (split / "split_dict.pt").is_file():
        return graph, torch.load(split / "split_dict.pt")
    return graph, {s: torch.load(split / f"{s}.pt") for s in ("train", "valid", "test")}


def _split_of(name: str, part: dict, split: str, num_nodes: int, where: str) -> Split:
    try:
        if name == "ogbl-citation2":
            src, dst = _np(part["source_node"]).reshape(-1), _np(part["target_node"]).reshape(-1)
            pos = check_pairs(np.stack([src, dst], axis=1), num_nodes, f"{where}/{split} source/target_node")
            neg = {}
            if split != "train":
                tneg = _np(part["target_node_neg"])
                if tneg.ndim != 2 or tneg.shape[0] != len(pos):
                    raise DatasetError(f"{where}/{split}: target_node_neg must be ({len(pos)}, K), got {tneg.shape}")
                # Per-positive negatives (P, K, 2): the positive's source paired with each negative target.
                pairs = np.stack([np.broadcast_to(src[:, None], tneg.shape), tneg], axis=-1)
                neg["ogb"] = check_pairs(pairs, num_nodes, f"{where}/{split} target_node_neg")
            return Split(pos=pos, neg=neg)
        pos = check_pairs(_np(part["edge"]), num_nodes, f"{where}/{split} edge")
        neg = (
            {}
            if split == "train"
            else {"ogb": check_pairs(_np(part["edge_neg"]), num_nodes, f"{where}/{split} edge_neg")}
        )
        return Split(pos=pos, neg=neg)
    except KeyError as err:
        raise DatasetError(f"{where}/{split}: split file lacks key {err}; is this the right OGB dataset?") from None


def load_ogb(name: str, root) -> LinkDataset:
    """Load an already-downloaded OGB link dataset offline (never downloads, never prompts).

    Splits: collab/ppa/ddi 'edge' -> pos, 'edge_neg' -> neg["ogb"] (Q, 2) shared; citation2
    source/target -> pos (P, 2), target_node_neg -> neg["ogb"] (P, 1000, 2). Training graph = train
    positives (+ node features when the dataset has them); ogbl-collab tests on train + valid edges.
    """
    if name not in OGB_METRIC:
        raise DatasetError(f"unknown OGB dataset '{name}'; supported: {', '.join(OGB_METRIC)}")
    meta = _meta(name)
    folder = _dataset_dir(name, root)
    missing = [str(p) for p in required_files(name, folder, meta) if not p.is_file()]
    if missing:
        raise DatasetError(
            f"{name}: missing file(s) {', '.join(missing)}; download the dataset elsewhere "
            f"(ogb.linkproppred.LinkPropPredDataset('{name}')) and copy its folder under {root}"
        )
    with offline_ogb(folder):
        try:
            graph, split = _read_with_ogb(name, folder, meta)
        except DatasetError:
            raise
        except Exception as err:  # corrupt csv / pickle: one line naming the folder
            raise DatasetError(f"{folder}: ogb could not read the dataset ({type(err).__name__}: {err})") from None
    num_nodes = int(graph["num_nodes"])
    x = graph.get("node_feat")
    x = None if x is None else np.asarray(x, dtype=np.float32)
    splits = {s: _split_of(name, split[s], s, num_nodes, str(folder)) for s in ("train", "valid", "test")}
    train_graph = training_graph(splits["train"].pos, num_nodes, x=x)
    test_graph = train_graph.with_edges(splits["valid"].pos) if name == "ogbl-collab" else None
    return LinkDataset(
        name=name, graph=train_graph, splits=splits, test_graph=test_graph, metric={"ogb": OGB_METRIC[name]}
    )
