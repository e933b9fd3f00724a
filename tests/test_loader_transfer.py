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


@pytest.mark.parametrize("start", [0, 3])
def test_workers_run_inline_give_the_worker_processes_batches_in_their_order(shard_set, start):  # noqa: F811
    """A CPU trainer runs its 2 loader workers inline (LoaderSettings.inline): the same training batches in the
    same order as 2 worker processes, from the first batch and after a resume at batch 3, and the same
    evaluation batches; no worker process is started."""

    def batches(inline: bool):
        s = loaders.LoaderSettings(cfg(num_workers=2, distances=True), inline=inline)
        loader, plan = loaders.train_loader(shard_set, 1, s, start=start)
        train = list(loader)
        ev = list(loaders.eval_loader(shard_set, "valid", "original", s))
        if inline:
            assert isinstance(loader.loader, loaders.Inline) and not hasattr(loader.loader, "_iterator")
        loaders.close_loaders()
        return train, ev, plan

    (train, ev, plan), (inline_train, inline_ev, _) = batches(False), batches(True)
    assert len(train) == plan.batches - start > 2 and len(ev) > 1
    assert len(inline_train) == len(train) and len(inline_ev) == len(ev)
    for a, b in [*zip(train, inline_train), *zip(ev, inline_ev)]:
        _same(a, b)


def test_a_cpu_trainer_runs_its_loader_workers_inline_and_a_gpu_one_forks_them():
    from types import SimpleNamespace

    rank = lambda kind: SimpleNamespace(rank=0, world_size=1, device=torch.device(kind))
    assert loaders.LoaderSettings.for_rank(cfg(num_workers=2), rank("cpu")).inline
    gpu = loaders.LoaderSettings.for_rank(cfg(num_workers=2), rank("meta"))
    assert not gpu.inline and not gpu.pin  # any device but the CPU forks (CUDA also pins)


def test_a_trainer_with_its_workers_inline_evaluates_to_the_digit_as_with_worker_processes(tmp_path, monkeypatch):
    """A real CPU training run (2 loader workers, 2 epochs) inline and with forked worker processes: every
    evaluation equal to the digit."""
    import json

    from tests.test_trainer_data import make_shard_set
    from trainer.config import config_for
    from trainer.train import run

    shards = make_shard_set(tmp_path / "set", eval_links=12)

    def evaluations(out):
        run(config_for("tiny", str(shards), str(out), epochs=2, device="cpu", progress=False, data={"num_workers": 2}))
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
        return [{k: v for k, v in r.items() if k not in ("time", "seconds")} for r in rows if r.get("event") == "eval"]

    inline = evaluations(tmp_path / "inline")
    forked = lambda cls, d, info: cls(d, info.rank, info.world_size)  # as before: worker processes on a CPU
    monkeypatch.setattr(loaders.LoaderSettings, "for_rank", classmethod(forked))
    assert len(inline) >= 2 and inline == evaluations(tmp_path / "forked")
