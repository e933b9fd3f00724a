"""A trained run, loaded back: its checkpoint file, its model on a device and its shard set's manifest.

The one loader `pipelines.score`, `pipelines.recommend` (and the evaluation of recommendations) use.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from common.datasets import load_set_dataset
from common.datasets.tables import suffix_of
from common.manifest_record import Manifest
from common.node_ids import load_node_ids
from common.outputs import check_output
from common.presets import get_preset
from common.shards import MANIFEST, load_features, read_manifest
from common.storage import is_remote
from trainer import checkpoint
from trainer.config import TrainConfig
from trainer.run_folder import bound_data, data_label, same_data

if TYPE_CHECKING:
    from trainer.model.pencil import Pencil


class RunFolderError(ValueError):
    """A run folder or checkpoint that cannot be used; the message names it and the fix."""


def resolve_checkpoint(path: str, flag: str = "--checkpoint") -> Path:
    """A run folder's best.pt, else its last.pt (a run stopped early, e.g. a `--preset auto` final seed
    stopped by --stop-epoch, may have only that), or the .pt file given. A protocol folder
    (results/<dataset>/<preset>/<protocol>) is refused with the seed folders it holds."""
    p = Path(path)
    if p.is_dir():
        for name in (checkpoint.BEST, checkpoint.LAST):
            if (p / name).exists():
                return p / name
        seeds = sorted(
            d.name for d in p.glob("seed*") if (d / checkpoint.BEST).exists() or (d / checkpoint.LAST).exists()
        )
        hint = f"; it holds the runs {', '.join(seeds)}: pass one, e.g. {p / seeds[0]}" if seeds else ""
        raise RunFolderError(f"{flag} {p}: no {checkpoint.BEST} or {checkpoint.LAST} in this run folder{hint}")
    if not p.exists():
        raise RunFolderError(f"{flag} {p}: no such file")
    return p


# the fix a checkpoint that cannot be read names: the flag, never "delete it" (it may be the user's edge list)
CHECKPOINT_FIX = "pass a run folder, or its best.pt or last.pt, as --checkpoint"


def load_checkpoint(path: Path, flag: str = "--checkpoint") -> dict:
    return checkpoint.load(path, fix=CHECKPOINT_FIX.replace("--checkpoint", flag))


def load_model(ckpt: dict, manifest: Manifest, device: torch.device) -> "Pencil":
    from trainer.model.pencil import model_for_shards  # the model's modules load only where one is built

    config = TrainConfig.from_dict(ckpt["config"])
    model = model_for_shards(get_preset(config.preset), config.model.as_overrides(), manifest)
    model.load_state_dict(ckpt["model"])
    return model.to(device).eval()


def sampling_fields(manifest: Manifest) -> dict:
    """The engine settings a run's shard set fixes: its sampling (d, n) and node budget N_max."""
    pre = manifest.config
    return {"sampling": (pre["sampling"]["d"], pre["sampling"]["n"]), "n_max": manifest.n_max}


# how a command finds a run's shard set that moved (common.flags.add_moved_shards_flag)
SHARDS_FIX = "pass --shards DIR, the set's folder where it is now (it must hold the set the run was trained on)"


def run_manifest(ckpt: dict, path, shards: str | None = None) -> dict:
    """The manifest of the shard set a checkpoint was trained on, checked to be that set still. `shards`
    (--shards): where the set is now, when it moved; checked against the data the run recorded."""
    data = ckpt["config"]["data"]
    where = data["shards"] if shards is None else moved_set(shards, data)
    if shards is None:
        check_recorded_set(where, path)
    manifest = read_manifest(where)
    if not same_data(data, manifest, where):
        flag = f"--shards {shards}" if shards else where
        raise RunFolderError(
            f"{path}: was trained on {data_label(data)}, but {flag} holds "
            f"{data_label(bound_data(manifest))}; pass the set it was trained on, or retrain"
        )
    return manifest


def moved_set(shards: str, data: dict) -> str:
    """--shards DIR: the set itself, or a shard root (preprocess's --out) holding the run's set as
    <dataset>/<cache key>, found by the key the run recorded."""
    root = Path(shards.removeprefix("file://"))
    if is_remote(shards) or (root / MANIFEST).exists() or not data.get("shard_set"):
        return shards
    found = sorted(root.glob(f"*/{data['shard_set']}/{MANIFEST}"))
    return str(found[0].parent) if len(found) == 1 else shards


def check_recorded_set(where: str, path) -> None:
    """The set a run recorded, found where it says: a relative path (a run from before runs recorded absolute
    ones) is read from this folder only, and a set that moved is found with --shards."""
    if is_remote(where) or (Path(where.removeprefix("file://")) / MANIFEST).exists():
        return
    if not Path(where.removeprefix("file://")).is_absolute():
        raise RunFolderError(
            f"{path}: records its shard set as {where}, relative to the folder the run was started in, which is "
            f"not this one ({Path.cwd()}); run the command from that folder, or {SHARDS_FIX}"
        )
    if not Path(where.removeprefix("file://")).exists():
        raise RunFolderError(f"{path}: its shard set {where}: not found (moved or deleted); {SHARDS_FIX}")


def check_run_graph(manifest: Manifest, dataset, source: str) -> None:
    """The dataset as loaded again must be the one the run's set was built from: same fingerprint (its name
    aside: a moved or renamed file is the same data) or, for a set that records none, the same nodes and ids.
    `source`: what the user would fix (the edge list, or --dataset)."""
    fix = "restore it as it was, or score on today's graph with --graph FILE (its ids are mapped through the run's)"
    want = manifest.fingerprint
    if want is not None:
        have = replace(dataset, name=manifest.dataset or dataset.name).fingerprint()
        if have != want:
            raise RunFolderError(
                f"{source}: not the graph this run was trained on (fingerprint {have}, the run's "
                f"{want}: edited, or another graph); {fix}"
            )
        return
    ids = load_node_ids(manifest)
    if (
        dataset.num_nodes != manifest.num_nodes
        or (ids is None) != (dataset.node_ids is None)
        or (ids is not None and not np.array_equal(ids, dataset.node_ids))
    ):
        raise RunFolderError(
            f"{source}: not the graph this run was trained on ({dataset.num_nodes} nodes, the "
            f"run's {manifest.num_nodes}, or other node ids); {fix}"
        )


def reads_features(ckpt: dict, manifest: Manifest) -> bool:
    """Whether a run's model reads node features: its set ships them and it was not trained --no-features."""
    return bool(manifest.features) and (ckpt["config"].get("model") or {}).get("features") is not False


def check_node_features(reads: bool, trained_nodes: int, graph, node_ids, source: str) -> None:
    """A model that reads node features has them for the nodes it was trained on only (the set's table): a graph
    with more nodes (a snapshot's new ones) is refused in one line, never scored with features made up."""
    if not reads or graph.num_nodes <= trained_nodes:
        return
    first = trained_nodes if node_ids is None else node_ids[trained_nodes]
    raise RunFolderError(
        f"{source}: {graph.num_nodes - trained_nodes} node(s) are new since training (first: "
        f"{first}), and this model reads node features, which the run has for its own "
        f"{trained_nodes} nodes only; use a graph of the run's nodes (--graph all, train, valid, "
        "test, or a snapshot without new nodes), or serve the run and add each new node with its "
        "features (POST /edges)"
    )


def load_run_model(checkpoint_arg: str, device, flag: str = "--checkpoint", shards: str | None = None):
    """(model, its shard set's manifest, sampling fields, checkpoint digest): a run's model without its
    dataset, for a caller that holds the dataset already. `shards`: --shards, the set where it is now."""
    path = resolve_checkpoint(checkpoint_arg, flag)
    ckpt = load_checkpoint(path, flag)
    manifest = run_manifest(ckpt, path, shards)
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    return load_model(ckpt, manifest, device), manifest, sampling_fields(manifest), digest


def run_dataset(
    manifest: Manifest, dataset: str | None = None, data_dir: str | None = None, ogb_root: str | None = None
):
    """The dataset of a run's set (its split and node list), checked to be the graph the run was trained on.
    dataset (--dataset): where the run's edge list is now, when it moved; data_dir / ogb_root likewise."""
    pre = manifest.config
    if problem := run_edge_list_problem(manifest, dataset):
        raise RunFolderError(problem)
    x = load_features(manifest)
    if x is not None and pre.get("node_features"):  # the set's table: the user's file may have moved or changed
        pre = {**pre, "node_features": None, "fill_features": None}  # (a paper dataset's load as they shipped)
    loaded = load_set_dataset(pre, name=dataset, data_dir=data_dir, ogb_root=ogb_root)
    if x is not None:  # a typed set's table per node kind: its manifest names each kind's columns
        loaded = loaded.with_features(x, (manifest.features or {}).get("kinds"))
    check_run_graph(manifest, loaded, f"--dataset {dataset}" if dataset else pre["dataset"])
    return loaded


def run_edge_list_problem(manifest: Manifest, dataset: str | None = None, flag: str = "--dataset") -> str | None:
    """Why the run's edge list (or `dataset`, where it moved, given by `flag`) cannot be read, in one line; None
    when it is there or the run's dataset is not an edge list."""
    path = dataset or manifest.config["dataset"]
    if not suffix_of(path) or is_remote(path) or Path(path).is_file():
        return None
    if dataset:
        return f"{flag} {dataset}: file not found; pass the run's edge list where it is now"
    return (
        f"the run's edge list {path}: file not found (moved, renamed, or a path relative to another "
        "folder); pass --dataset PATH where it is now (checked against the run's fingerprint), or restore it"
    )


def load_run(
    checkpoint_arg: str,
    device,
    flag: str = "--checkpoint",
    out: str | None = None,
    dataset: str | None = None,
    shards: str | None = None,
):
    """(model, dataset, sampling fields, checkpoint digest) of a trained run; `flag` names it in errors.
    `out`: the command's output file, refused (common.outputs) when it is one of the run's inputs.
    `dataset`: --dataset, the run's edge list where it is now; `shards`: --shards, its shard set."""
    model, manifest, fields, digest = load_run_model(checkpoint_arg, device, flag, shards)
    if out is not None:
        files, folders = run_inputs(checkpoint_arg, manifest, flag)
        check_output(out, files={**files, "--dataset": dataset}, folders=folders)
    return model, run_dataset(manifest, dataset), fields, digest


def run_inputs(checkpoint_arg: str, manifest: Manifest, flag: str = "--checkpoint") -> tuple[dict, dict]:
    """What a command on a run reads, as common.outputs.check_output takes it: (files, folders). The run
    folder is the checkpoint's folder when one was given, or holds the run's other files."""
    path = resolve_checkpoint(checkpoint_arg, flag)
    folder = (
        path.parent
        if Path(checkpoint_arg).is_dir()
        or any((path.parent / name).exists() for name in ("config.json", "summary.json", "metrics.jsonl"))
        else None
    )
    pre = manifest.config
    files = {
        flag: path,
        "the run's edge list": pre["dataset"] if suffix_of(pre["dataset"]) else None,
        "the run's node list": pre.get("nodes"),
    }
    return files, {"the run folder": folder, "the run's shard set": manifest.root}
