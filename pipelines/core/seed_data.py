"""A recipe's seed folder is bound to the data it was trained on.

A rerun reuses a finished seed and resumes an unfinished one, but only on the same data: the dataset's
fingerprint and the shard set's key that the trainer recorded in the folder (trainer.run_folder.bound_data)
must be the set's this run trains on. A folder trained on other data (an edited edge list, another --split,
--nodes or --views) is refused in one line before any trainer starts; with --overwrite it is cleared and
trained afresh on this data.
"""

from __future__ import annotations

import json
from pathlib import Path

from common.shards import read_manifest
from trainer import checkpoint
from trainer.run_folder import bound_data, data_label, same_data


class SeedDataError(ValueError):
    """A seed folder trained on other data; the message names it and the fix."""


def recorded_data(run_dir: Path) -> dict | None:
    """The data config of the run in `run_dir` (config.json, else a checkpoint's), or None when it holds none."""
    try:
        return json.loads((run_dir / "config.json").read_text())["data"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    for name in (checkpoint.LAST, checkpoint.BEST):
        if (run_dir / name).is_file():
            return checkpoint.load(run_dir / name)["config"]["data"]
    return None


def stale_seeds(opts, runs: dict[int, Path], shards: str) -> set[int]:
    """Seeds whose folder holds a run on other data than the set at `shards`: refused, or, with the recipe's
    --overwrite (opts: pipelines.core.config.TrainerOptions), returned to be cleared and retrained. The set's
    manifest is read only when some folder holds a run."""
    held = {seed: saved for seed, d in runs.items() if (saved := recorded_data(d)) is not None}
    if not held:
        return set()
    manifest = read_manifest(shards)
    stale = {seed for seed, saved in held.items() if not same_data(saved, manifest, shards)}
    if stale and not opts.overwrite:
        seed = min(stale)
        fix = (
            "pass --overwrite to retrain it on this data"
            if opts.offers_overwrite
            else "delete it to retrain it on this data"
        )
        raise SeedDataError(
            f"{runs[seed]}: holds a run trained on other data ({data_label(recorded_data(runs[seed]))}; "
            f"this run's: {data_label(bound_data(manifest))}); {fix}, or choose another --out"
        )
    return stale
