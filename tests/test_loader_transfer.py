"""How a loader worker's batches reach the training process: before the workers fork, the stream runs one batch
through its own steps (they inherit the loaded kernels); a small batch then travels as numpy arrays pickled by
value (trainer.data.packing.WireBatch), a large one as tensors, and the training process sees the same PackedBatch."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import torch

from tests.test_distances import _links
from tests.test_trainer_data import cfg, shard_set  # noqa: F401  (fixture)
from trainer.data import loaders, packing
from trainer.data.packing import PackedBatch, WireBatch, for_transfer, pack_samples


def _same(a: PackedBatch, b: PackedBatch) -> None:
    for f in fields(PackedBatch):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and torch.equal(x, y), f.name
        else:
            assert x == y, f.name


def _batch() -> PackedBatch:
    _, _, _, sizes, edges = _links()
    samples = [
        {"cid": i, "label": 0.5 * i, "nodes": np.arange(10 * i, 10 * i + n), "edges": e}
        for i, (n, e) in enumerate(zip(sizes, edges))
    ]
    batch = pack_samples(samples, n_max=8, distances=True)
    batch.copies = 1
    return batch


def test_a_small_batch_travels_as_arrays_and_unwraps_to_the_same_batch():
    batch = _batch()
    wire = for_transfer(batch)
    assert isinstance(wire, WireBatch) and all(not isinstance(v, torch.Tensor) for v in wire.arrays.values())
    _same(wire.unwrap(), batch)


def test_a_large_batch_travels_as_tensors(monkeypatch):
    monkeypatch.setattr(packing, "BY_VALUE_MAX_BYTES", 16)
    batch = _batch()
    assert for_transfer(batch) is batch


@pytest.mark.parametrize("workers", [1, 2])
def test_batches_from_worker_processes_equal_the_in_process_ones(shard_set, workers):  # noqa: F811
    """num_workers = W processes and the in-process loader over the same W logical workers give equal batches."""

    def batches(num_workers):
        c = cfg(num_workers=num_workers, distances=True)
        loader, plan = loaders.train_loader(shard_set, 0, loaders.LoaderSettings(c))
        got = list(loader)
        loaders.close_loaders()
        return got, plan

    by_process, plan = batches(workers)
    assert len(by_process) == plan.batches and all(
        isinstance(b, PackedBatch) and b.dist is not None for b in by_process
    )
    if workers == 1:  # one worker process and the training process read the same single logical worker
        in_process, _ = batches(0)
        assert len(in_process) == len(by_process)
        for a, b in zip(by_process, in_process):
            _same(a, b)
    ev = list(loaders.eval_loader(shard_set, "valid", "original", loaders.LoaderSettings(cfg(num_workers=workers))))
    assert ev and all(isinstance(b, PackedBatch) for b in ev)
    loaders.close_loaders()
