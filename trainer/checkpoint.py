"""Atomic checkpoints that let `--resume` continue exactly where a run stopped.

A checkpoint holds the model (unwrapped from DDP, frozen W0 included), the optimizer, the loop state
(step, epoch, batches consumed in the epoch, best metric so far), every rank's RNG states and the
resolved config. Everything in it is a tensor or plain Python data, so it loads with
`torch.load(weights_only=True)`: reading a checkpoint never executes pickled code.
Writes go to a temporary file that is fsync'ed and then renamed over the target, so a kill at any
moment leaves either the old or the new checkpoint, never half of one.
"""

from __future__ import annotations

import errno
import logging
import os
import random
from pathlib import Path

import numpy as np
import torch

from common.atomic import atomic_file

log = logging.getLogger(__name__)
LAST, BEST = "last.pt", "best.pt"


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or read; the message names the file and the fix."""


class _Writes:
    """The file torch.save writes to, remembering a failed write: torch reports one as a RuntimeError
    ("unexpected pos ...") that has lost the OSError and its errno (ENOSPC)."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.f.flush()


def save_atomic(obj: dict, path: str | os.PathLike) -> None:
    """Write `obj` to `path` through common.atomic. On any failure, a full disk, an exception or a
    KeyboardInterrupt, `path` keeps its old content and the error names `path`. (Only a SIGKILL mid-write can
    leave `.<name>.<pid>.*.tmp`; --overwrite removes it.)"""
    path = Path(path)
    w = None
    try:
        with atomic_file(path) as f:
            w = _Writes(f)
            torch.save(obj, w)
    except BaseException as err:
        err = w.error if w is not None and w.error is not None else err
        if isinstance(err, OSError) and err.errno is not None:  # ENOSPC, EDQUOT, EIO ...: the errno's hint
            raise OSError(err.errno, err.strerror or os.strerror(err.errno), str(path)) from err
        if isinstance(err, Exception):  # torch's writer reports a failed write as a RuntimeError
            raise CheckpointError(
                f"{path}: writing the checkpoint failed ({' '.join(str(err).split())[:300]}); "
                f"the previous {path.name}, if any, is kept; free space or write somewhere else"
            ) from err
        raise  # KeyboardInterrupt, SystemExit: propagate unchanged


def load(path: str | os.PathLike, fix: str = "delete it or restore it from a copy") -> dict:
    """The checkpoint at `path`. A damaged file (truncated, overwritten, not a checkpoint) is a
    CheckpointError naming it and `fix`; a missing or unreadable (permissions) one stays an OSError."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.EACCES, errno.EPERM, errno.EISDIR):
            raise
        raise _damaged(path, err, fix) from None
    except Exception as err:  # noqa: BLE001 - garbage reaches the unpickler, which raises whatever it trips
        # on (EOFError, UnpicklingError, RuntimeError, but also IndexError, KeyError, TypeError, ...)
        raise _damaged(path, err, fix) from None
    if not isinstance(ckpt, dict) or not {"model", "state", "config"} <= ckpt.keys():
        raise CheckpointError(f"{path}: not a trainer checkpoint (no model/state/config); {fix}")
    return ckpt


def _damaged(path, err: BaseException, fix: str) -> CheckpointError:
    if "Weights only load failed" in str(err):  # torch's long note on weights_only, not the user's problem
        return CheckpointError(
            f"{path}: not a readable checkpoint: it holds objects other than tensors and plain "
            f"data, which are never unpickled (another kind of file, or not this project's); {fix}"
        )
    reason = " ".join(str(err).split()).split(". ")[0]  # the first sentence, cut at a word
    if len(reason) > 160:
        reason = reason[:160].rsplit(" ", 1)[0] + " ..."
    return CheckpointError(
        f"{path}: not a readable checkpoint, damaged, truncated or another kind of file "
        f"({type(err).__name__}{': ' + reason if reason else ''}); {fix}"
    )


# ---------------------------------------------------------------------------- RNG states
def capture_rng() -> dict:
    """This process's RNG states as tensors and plain data (weights_only-loadable)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(state: dict) -> None:
    random.setstate(_tuplify(state["python"]))
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _tuplify(x):
    # random.setstate wants tuples; a round trip through some serialisers turns them into lists.
    return tuple(_tuplify(v) for v in x) if isinstance(x, (list, tuple)) else x


# ---------------------------------------------------------------------------- payload
def make_weights_payload(model: torch.nn.Module, state: dict, config: dict) -> dict:
    """best.pt: the weights and what scoring needs (config, where the best epoch was), no optimiser state
    or RNG (AdamW's moments are 2x the weights and are never read from best.pt)."""
    return {"model": model.state_dict(), "config": config, "state": dict(state)}


def make_payload(
    model: torch.nn.Module,
    optimizer,  # trainer.optim.adamw: CpuAdamW or torch.optim.AdamW; None for weights only
    state: dict,
    config: dict,
    rng_per_rank: list[dict] | None,
    world_size: int,
) -> dict:
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "state": dict(state),
        "config": config,
        "rng": rng_per_rank,
        "world_size": world_size,
    }
