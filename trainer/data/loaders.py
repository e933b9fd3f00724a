"""The persistent DataLoaders that run trainer/data/stream.py's streams: one per role (train, eval), alive for the run,
its workers forked once; what they produce next is a job the main process writes before each iter(loader).
A worker's error arrives as one line (worker_error). The design and its reasons: trainer/data/stream.py's docstring.
"""

from __future__ import annotations

import functools
import os
import signal
from dataclasses import dataclass
from typing import Callable

import torch
from torch.utils.data import DataLoader, IterableDataset

from common import heap
from common.manifest_record import Manifest
from common.parent_death import die_with_parent
from trainer.config_sections import DataConfig
from trainer.data.loader_budget import eval_budget, prefetch_depth
from trainer.data.packing import WireBatch
from trainer.data.stream import EpochPlan, EvalStream, TrainStream, plan_epoch

# ---------------------------------------------------------------------------- persistent loaders
# One DataLoader per role, alive for the run: asking again with the same (set, rank, world, config,
# collate) only rewrites its job; anything else replaces it (and shuts the old workers down).
_LOADERS: dict[str, tuple[tuple, "Loader"]] = {}


@dataclass(frozen=True)
class LoaderSettings:
    """What a rank's loaders are built from: the resolved DataConfig, the rank's place, the collate
    (None = induce + pack; tests pass their own) and whether batches come in pinned memory (CUDA)."""

    data: DataConfig
    rank: int = 0
    world_size: int = 1
    collate: Callable | None = None
    pin: bool = False
    # run the --num-workers loader workers inside the trainer, merged as DataLoader merges its worker processes:
    # the same batches in the same order. On a CPU the workers' share of the work is about 1 % and the cores are
    # the trainers', while each forked worker holds ~100 MB of its own (docs/benchmarks/2026-12-05-dense-cost.md)
    inline: bool = False

    @classmethod
    def for_rank(cls, data_cfg: DataConfig, info) -> "LoaderSettings":
        """A trainer rank's settings (info: trainer.distributed.DistInfo): workers inline on a CPU."""
        cpu = info.device.type == "cpu"
        return cls(data_cfg, info.rank, info.world_size, pin=info.device.type == "cuda", inline=cpu)


def _loader_key(manifest: Manifest, s: LoaderSettings) -> tuple:
    d = s.data
    fields = (
        d.token_budget,
        d.eval_token_budget,
        d.max_samples,
        d.shuffle_buffer_mb,
        d.loader_memory_mb,
        d.num_workers,
        d.seed,
        d.orderings,
        d.distances,
    )
    return (manifest.root, manifest.key, s.rank, s.world_size, fields, id(s.collate), s.pin, s.inline)


def _persistent(role: str, key: tuple, make: Callable[[], "Loader"]) -> "Loader":
    held = _LOADERS.get(role)
    if held is not None and held[0] == key:
        return held[1]
    close_loaders(role)
    loader = make()
    _LOADERS[role] = (key, loader)
    return loader


def close_loaders(*roles: str) -> None:
    """Shut down the workers of the given roles' loaders (all when none is named)."""
    for role in roles or tuple(_LOADERS):
        held = _LOADERS.pop(role, None)
        it = getattr(held[1].loader, "_iterator", None) if held else None
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()


def worker_error(err: Exception) -> Exception | None:
    """A worker's exception as DataLoader re-raises it ("Caught ShardError in DataLoader worker process 0.
    Original Traceback ...", many lines) -> the same type with the worker's own one-line message, so a
    corrupt shard still reads as one line naming shard and member. None if not such a wrapper."""
    text = str(err)
    if not text.startswith("Caught ") or "DataLoader worker" not in text.split("\n", 1)[0]:
        return None
    head, sep, message = text.rstrip().splitlines()[-1].partition(": ")
    if not sep or head.rsplit(".", 1)[-1] != type(err).__name__:
        return None
    try:
        return type(err)(message)
    except Exception:  # an exception type that needs other constructor arguments: keep the original
        return None


class Loader:
    """A persistent DataLoader (see module docstring) whose worker errors arrive as one line."""

    def __init__(self, loader: DataLoader):
        self.loader = loader

    @property
    def dataset(self):
        return self.loader.dataset

    def __iter__(self):
        return self._batches(iter(self.loader))  # iter() now: the workers pick up the current job

    @staticmethod
    def _batches(it):
        while True:
            try:
                batch = next(it)
            except StopIteration:
                return
            except Exception as err:
                clean = worker_error(err)
                if clean is None:
                    raise
                raise clean from None
            yield batch.unwrap() if isinstance(batch, WireBatch) else batch


class Inline:
    """`workers` loader workers run in this process: round robin from worker 0, an exhausted one skipped, as
    DataLoader takes its worker processes' batches (each worker's stream is a pure function of its index)."""

    def __init__(self, dataset: IterableDataset, workers: int):
        self.dataset, self.workers = dataset, workers

    def __iter__(self):
        live, end = [self.dataset.worker_iter(w, self.workers) for w in range(self.workers)], object()
        while live:
            for it in list(live):
                batch = next(it, end)
                if batch is end:
                    live.remove(it)
                else:
                    yield batch


def _dataloader(dataset: IterableDataset, num_workers: int, pin: bool, prefetch: int, inline: bool = False) -> Loader:
    if num_workers > 0 and inline:
        return Loader(Inline(dataset, num_workers))
    if num_workers > 0:
        dataset.warm()  # the workers fork with the loader's libraries and kernels loaded (_Stream.warm)
        if not pin:  # CPU: workers forked from glibc's freed pages keep them alive (copy-on-write); see
            heap.trim_before_fork()  # docs/benchmarks/2026-12-05-trainer-memory.md
    # Own generator: creating a loader iterator must not consume the global torch RNG (dropout), or a
    # resumed run would draw different dropout masks than the uninterrupted one.
    return Loader(
        DataLoader(
            dataset,
            batch_size=None,
            num_workers=num_workers,
            pin_memory=pin,
            generator=torch.Generator(),
            persistent_workers=num_workers > 0,
            prefetch_factor=prefetch if num_workers else None,
            worker_init_fn=functools.partial(_die_with_trainer, os.getpid()),
        )
    )


def _die_with_trainer(trainer: int, worker_id: int) -> None:
    # a persistent worker outlived a trainer killed by SIGKILL (the out-of-memory killer), holding its memory
    die_with_parent(signal.SIGKILL, trainer)


def train_loader(
    manifest: Manifest, epoch: int, s: LoaderSettings, *, start: int = 0, fraction: float = 1.0
) -> tuple[Loader, EpochPlan]:
    """(this rank's persistent training loader, set to batches start..C-1 of `epoch`; the epoch plan).
    Call iter() on the loader after this and before asking for another job."""
    data_cfg, workers = s.data, s.data.num_workers
    prefetch = prefetch_depth(manifest.n_max, data_cfg.token_budget, data_cfg)
    plan = plan_epoch(manifest, epoch, s.world_size, workers, data_cfg, fraction)

    def make() -> Loader:
        stream = TrainStream(manifest, s.rank, s.world_size, data_cfg, workers, s.collate)
        stream.set_job(epoch, min(start, plan.batches), plan.batches)  # what warm() reads
        return _dataloader(stream, workers, s.pin, prefetch, s.inline)

    loader = _persistent("train", _loader_key(manifest, s), make)
    loader.dataset.set_job(epoch, min(start, plan.batches), plan.batches)
    return loader, plan


def eval_loader(manifest: Manifest, split: str, protocol: str, s: LoaderSettings) -> Loader:
    """This rank's persistent eval loader, set to the (split, protocol) eval set."""
    data_cfg, workers = s.data, s.data.num_workers
    budget, prefetch = eval_budget(manifest.n_max, data_cfg)

    def make() -> Loader:
        stream = EvalStream(manifest, s.rank, s.world_size, data_cfg, workers, s.collate, budget)
        stream.set_job(split, protocol)  # warm() reads this set, never another split
        return _dataloader(stream, workers, s.pin, prefetch, s.inline)

    loader = _persistent("eval", _loader_key(manifest, s), make)
    loader.dataset.set_job(split, protocol)
    return loader
