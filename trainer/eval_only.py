"""`--eval-weights PATH`: evaluate saved weights once, as the run that trained them would have at that epoch.

The auto search (pipelines.auto.search) trains seed 0 of the winner as a candidate: its best.pt holds the
weights at its best validation epoch, and a final seed 0 trained with the same flags up to that epoch reaches
the same weights (CPU training is deterministic per seed; evaluation consumes no training randomness). So
instead of training seed 0 again, the final seed evaluates those weights: valid and test once (with
--save-scores, the scores too), the summary at the weights' epoch. No last.pt is written: there is no
optimiser state to continue from, so a longer run of that folder starts afresh (--overwrite).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

from common.atomic import write_text_atomic
from trainer import checkpoint, distributed
from trainer.data import loaders
from trainer.run_summary import RunSummary, write_summary

log = logging.getLogger("trainer")


def evaluate_weights(trainer, path: str) -> RunSummary:
    """Load `path` (a best.pt) into the trainer's model, evaluate once at its epoch, write summary.json."""
    payload = checkpoint.load(path, fix="pass the best.pt of a finished run")
    saved = payload.get("state") or {}
    if saved.get("best_epoch") is None:
        raise checkpoint.CheckpointError(f"--eval-weights {path}: no best epoch recorded; pass a best.pt")
    trainer.core.load_state_dict(payload["model"])
    st, info = trainer.state, trainer.info
    st.step, st.epoch, st.batch = int(saved["best_step"]), int(saved["best_epoch"]) + 1, 0
    if info.is_main:
        trainer.out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(trainer.out / "config.json", json.dumps(trainer.config.to_dict(), indent=1))
    log.info("--eval-weights: evaluating %s (epoch %d, step %d) without training", path, st.epoch - 1, st.step)
    trainer.run_eval(final=True)
    summary = replace(trainer.summary(), weights_from=str(Path(path).resolve()))
    if info.is_main:
        write_summary(trainer.out, summary)
    trainer.metrics.close()
    loaders.close_loaders()
    distributed.barrier(info)
    return summary
