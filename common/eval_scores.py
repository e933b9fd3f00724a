"""Per-candidate scores of an evaluation, as files (trainer --save-scores writes, pipelines read).

One file per evaluated (split, protocol): RUN_DIR/scores/<split>-<protocol>.npz holding `cid` (int64, the
eval set's candidate ids, as in its queries file) and `score` (float32, the model's logit, fp32 as the
metrics saw it), plus the 0-based `epoch` it was scored at. Written under a temporary name in the same
folder and renamed, so a reader never sees half a file and a killed write leaves only a dot-file behind.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from common.atomic import atomic_file

SCORES_DIR = "scores"


def scores_path(run_dir: str | os.PathLike, split: str, protocol: str) -> Path:
    return Path(run_dir) / SCORES_DIR / f"{split}-{protocol}.npz"


def epoch_scores_path(run_dir: str | os.PathLike, split: str, protocol: str, epoch: int) -> Path:
    """Where trainer --save-epoch-scores keeps every evaluation's scores (per-epoch curves, selection studies)."""
    return Path(run_dir) / SCORES_DIR / "epochs" / f"{split}-{protocol}-e{epoch:03d}.npz"


def write_scores(path: Path, cid: np.ndarray, score: np.ndarray, epoch: int) -> None:
    with atomic_file(path) as f:
        np.savez(
            f, cid=np.asarray(cid, dtype=np.int64), score=np.asarray(score, dtype=np.float32), epoch=np.int64(epoch)
        )


def read_scores(path: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """(cid, score, epoch) of one scores file; a missing or unreadable one fails in one line naming it."""
    try:
        with np.load(path) as z:
            return z["cid"], z["score"], int(z["epoch"])
    except (OSError, KeyError, ValueError, EOFError) as err:
        raise ValueError(
            f"{path}: no readable scores file ({err}); rerun the seed (the trainer's --save-scores writes it)"
        ) from None
