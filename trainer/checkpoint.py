"""Atomic checkpoints that let `--resume` continue exactly where a run stopped.

A checkpoint holds the model (unwrapped from DDP, frozen W0 included), the optimizer, the loop state
(step, epoch, batches consumed in the epoch, best metric so far), every rank's RNG states and the
resolved config. Everything in it is a tensor or plain Python data, so it loads with
`torch.load(weights_only=True)`: reading a checkpoint never executes pickled code.
Writes go to a temporary file that is fsync'ed and then renamed over the target, so a kill at any
moment leaves either the old or the new checkpoint, never half of one.
"""
from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import numpy as np
import torch

log = logging.getLogger(__name__)
LAST, BEST = "last.pt", "best.pt"


def save_atomic(obj: dict, path: str | os.PathLike) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(path: str | os.PathLike) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


# ---------------------------------------------------------------------------- RNG states
def capture_rng() -> dict:
    """This process's RNG states as tensors and plain data (weights_only-loadable)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(state: dict) -> None:
    random.setstate(_tuplify(state["python"]))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
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


def make_payload(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, state: dict,
                 config: dict, rng_per_rank: list[dict] | None, world_size: int) -> dict:
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "state": dict(state),
        "config": config,
        "rng": rng_per_rank,
        "world_size": world_size,
    }
