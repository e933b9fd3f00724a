"""A trained run, loaded back: its checkpoint file, its model on a device and its shard set's manifest.

The one loader `pipelines.score`, `pipelines.recommend` (and the evaluation of recommendations) use.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from common.datasets import load_set_dataset
from common.presets import get_preset
from common.shards import read_manifest
from trainer import checkpoint
from trainer.config import TrainConfig
from trainer.model import Pencil, model_for_shards


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
        seeds = sorted(d.name for d in p.glob("seed*")
                       if (d / checkpoint.BEST).exists() or (d / checkpoint.LAST).exists())
        hint = f"; it holds the runs {', '.join(seeds)}: pass one, e.g. {p / seeds[0]}" if seeds else ""
        raise RunFolderError(f"{flag} {p}: no {checkpoint.BEST} or {checkpoint.LAST} in this run folder{hint}")
    if not p.exists():
        raise RunFolderError(f"{flag} {p}: no such file")
    return p


def load_model(ckpt: dict, manifest: dict, device: torch.device) -> Pencil:
    config = TrainConfig.from_dict(ckpt["config"])
    model = model_for_shards(get_preset(config.preset), config.model.as_overrides(), manifest)
    model.load_state_dict(ckpt["model"])
    return model.to(device).eval()


def sampling_fields(manifest: dict) -> dict:
    """The engine settings a run's shard set fixes: its sampling (d, n) and node budget N_max."""
    pre = manifest["config"]
    return {"sampling": (pre["sampling"]["d"], pre["sampling"]["n"]), "n_max": int(manifest["n_max"])}


def load_run_model(checkpoint_arg: str, device, flag: str = "--checkpoint"):
    """(model, its shard set's manifest, sampling fields, checkpoint digest): a run's model without its
    dataset, for a caller that holds the dataset already."""
    path = resolve_checkpoint(checkpoint_arg, flag)
    ckpt = checkpoint.load(path)
    manifest = read_manifest(ckpt["config"]["data"]["shards"])
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    return load_model(ckpt, manifest, device), manifest, sampling_fields(manifest), digest


def load_run(checkpoint_arg: str, device, flag: str = "--checkpoint"):
    """(model, dataset, sampling fields, checkpoint digest) of a trained run; `flag` names it in errors."""
    model, manifest, fields, digest = load_run_model(checkpoint_arg, device, flag)
    return model, load_set_dataset(manifest["config"]), fields, digest  # the set's own split and node list
