"""common/heap.py: a CPU trainer gives glibc's freed memory back (malloc_trim) from a forward pre-hook, a no-op
without glibc and on CUDA, and trimming never changes a digit (bench/cpu_allocator.py on a tiny shard set)."""

from __future__ import annotations

import re

import pytest

from bench import cpu_allocator
from common import heap
from tests.test_trainer_data import make_shard_set
from trainer.config import config_for
from trainer.train import run

glibc_only = pytest.mark.skipif(heap.glibc() is None, reason="malloc_trim is glibc's")


def train_counting_trims(monkeypatch, shards, out, growth: int = -1, workers: int = 0) -> list:
    """Train the tiny preset 3 steps in this process on CPU, every trim the trainer asks for recorded. `growth`
    -1: due at every forward, so the policy must be hooked in to count any."""
    trims = []
    monkeypatch.setattr(heap, "trim", lambda: trims.append(1) or True)
    monkeypatch.setattr(heap, "GROWTH", growth)
    monkeypatch.delenv(heap.BENCH_SWITCH, raising=False)
    data = {"num_workers": workers}
    run(config_for("tiny", str(shards), str(out), max_steps=3, device="cpu", progress=False, data=data))
    return trims


@glibc_only
def test_a_cpu_trainer_trims_the_heap(tmp_path, monkeypatch):
    shards = make_shard_set(tmp_path / "set", eval_links=12)
    assert len(train_counting_trims(monkeypatch, shards, tmp_path / "run")) >= 3  # one a training forward at least
    assert heap.trim.__name__ == "<lambda>" and heap.rss_bytes() > 0


def test_a_loader_trims_before_its_workers_fork(tmp_path, monkeypatch):
    """A CPU loader that forks its workers trims once, before forking; a CPU trainer runs them inline
    (LoaderSettings.for_rank), so its loaders fork nothing and trim nothing (no forward's trim is due)."""
    from common.manifest import read_manifest
    from tests.test_trainer_data import cfg
    from trainer.data import loaders

    shards = make_shard_set(tmp_path / "set", eval_links=12)
    assert len(train_counting_trims(monkeypatch, shards, tmp_path / "run", growth=1 << 50, workers=1)) == 0
    trims = []
    monkeypatch.setattr(heap, "trim", lambda: trims.append(1) or True)
    for inline, forks in ((True, 0), (False, 1)):
        trims.clear()
        s = loaders.LoaderSettings(cfg(num_workers=1), inline=inline)
        assert list(loaders.train_loader(read_manifest(shards), 0, s)[0])
        loaders.close_loaders()
        assert len(trims) == forks


def test_without_glibc_the_policy_is_a_no_op(tmp_path, monkeypatch):
    monkeypatch.setattr(heap, "glibc", lambda: None)  # musl, macOS, Windows
    assert heap.policy("cpu") is None and heap.heap_stats() is None
    shards = make_shard_set(tmp_path / "set", eval_links=12)
    assert train_counting_trims(monkeypatch, shards, tmp_path / "run") == []


def test_cuda_and_the_bench_switch(monkeypatch):
    assert heap.policy("cuda", {}) is None  # CUDA's caching allocator is not malloc's
    if heap.glibc() is None:
        return
    assert heap.policy("cpu", {}).growth == heap.GROWTH
    assert heap.policy("cpu", {heap.BENCH_SWITCH: "off"}) is None
    assert heap.policy("cpu", {heap.BENCH_SWITCH: "every:10"}).every == 10
    assert heap.policy("cpu", {heap.BENCH_SWITCH: "grow:64"}).growth == 64 * heap.MiB
    assert heap.trim() in (True, False) and heap.heap_stats()["in_use"] > 0


@glibc_only
def test_trimming_keeps_every_evaluation_to_the_digit(tmp_path, capsys):
    """Real trainer processes: glibc's plain behaviour, the shipped policy, and a trim before every forward."""
    shards = make_shard_set(tmp_path / "set", eval_links=12)
    cpu_allocator.main(["--shards", str(shards), "--epochs", "2", "--settings", "plain,default,trim-every-1"])
    out = capsys.readouterr().out
    rows = {r[0]: r for r in (re.split(r"\s{2,}", line.strip()) for line in out.splitlines())}
    assert rows["default"][-2] == rows["trim-every-1"][-2] == "yes"  # same evaluations
    assert int(rows["trim-every-1"][-1]) > 0 and rows["plain"][-1] == "0"  # trims made, none in plain
