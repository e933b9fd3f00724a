"""Finished seeds of a recipe: reused as they are, never relaunched.

A seed folder whose trainer ended training exactly the run this recipe would start there is finished: its
summary.json is the result. Relaunching it with --resume would train no step, yet rewrite last.pt,
summary.json and config.json, so a rerun of a finished recipe would not be a no-op. The run's identity
(pipelines.core.trainers.TrainerRun.identity: shards, preset, seed, epochs, overrides, ...) is kept beside
its files (RUN_FILE), written only after the trainer exited 0, and removed before any trainer starts there,
so a killed run never looks finished.
"""

from __future__ import annotations

import json
from pathlib import Path

from common.atomic import write_json_atomic

RUN_FILE = "trainer_run.json"


def finished_summary(run) -> dict | None:
    """The summary of `run` (a TrainerRun) when its folder holds that run, finished, else None."""
    run_dir = Path(run.run_dir)
    try:
        recorded = json.loads((run_dir / RUN_FILE).read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    whole = (run_dir / "last.pt").is_file() or summary.get("weights_from")  # --eval-weights writes no last.pt
    return summary if recorded == run.identity() and whole else None


def trained_otherwise(run) -> bool:
    """The folder of `run` holds a finished run of other flags (another --train-arg, epochs or candidate): a
    resume there would be refused by the trainer, so the recipe's --overwrite retrains it."""
    try:
        return json.loads((Path(run.run_dir) / RUN_FILE).read_text()) != run.identity()
    except (OSError, ValueError):
        return False


def forget(run_dir: Path) -> None:
    """Before a trainer starts in the folder: until it exits 0, the folder is not finished."""
    (run_dir / RUN_FILE).unlink(missing_ok=True)


def mark_finished(run) -> None:
    write_json_atomic(Path(run.run_dir) / RUN_FILE, run.identity())


def write_if_changed(path: Path, payload: dict) -> None:
    """Write the JSON unless the file already holds exactly that (a rerun leaves it untouched)."""
    try:
        if json.loads(path.read_text()) == json.loads(json.dumps(payload, default=float)):
            return
    except (OSError, ValueError):
        pass
    write_json_atomic(path, payload)
