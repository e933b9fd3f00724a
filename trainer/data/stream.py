"""Streaming shards into token-budget micro-batches, a block of links at a time.

One rank's training epoch, per loader worker, all array operations over blocks (never a Python object
per link):

    units of view e mod V ─ shuffle(seed, epoch) ─ split_by_node ─ split_by_worker ─ open (gopen/fsspec)
      ─ decode block, check it, slice its unit (link i % parts) ─ byte-sized shuffle pool ─ greedy
      token-budget cuts ─ relabel (segmented permutation) ─ induce edges from the shipped graph ─ pack

The block steps live in trainer/data/block_stream.py, inducing and packing in trainer/data/packing.py (BatchPacker), the
persistent DataLoaders that run the streams in trainer/data/loaders.py; this module plans epochs and splits the work
into streams.

Decisions, and why:
- *Units.* A unit is a shard, or, when there are fewer than 4 shards per (rank, worker), one of P
  interleaved slices of a shard (link i goes to slice i mod P). So no worker ever sits empty, even
  for a one-shard set, and loads balance; the price is that P readers decode the same small shard.
- *Explicit splitters.* split_by_node then split_by_worker, pure functions of (rank, world, worker,
  workers) with no hidden environment lookups; both balance tokens greedily (what the budget spends).
- *Equal batch counts.* Every rank takes exactly C batches per epoch, C computed from the manifest alone
  (no communication): the lower bound on batches for one pass over the view, divided by the world size.
  A worker whose units run out before its quota *cycles* (re-reads them, reshuffled); one with more
  data than its quota leaves the rest unread this epoch. No rank can hang DDP by running out early.
- *Shuffle.* A pool of decoded blocks fills to --shuffle-buffer-mb bytes (bytes, not links: a ddi link
  is 100x a citeseer link); then its links are permuted, half are emitted and half stay in the pool to
  mix with the next blocks. At the end of a pass the pool drains, so every link of the worker comes
  out once before any comes out twice. Seeded by (seed, epoch, rank, worker): deterministic.
- *Order.* Loader worker j of W serves the rank's batch slots j, j+W, ...; DataLoader interleaves
  workers round-robin, so the batch sequence of a rank is a pure function of
  (seed, epoch, rank, world, W), whatever the timing.
- *Position.* (epoch, batches consumed). Resuming replays the epoch's cheap part (decode, shuffle,
  cut) and skips the consumed batches before relabelling, inducing and packing; the worker-slot
  mapping is rotated so the first batch after a resume is slot `start`.
- *Relabelling.* In training, local ids 2..N-1 get a fresh uniform permutation per read (u = 0, v = 1
  stay), from an RNG seeded by (seed, epoch, rank, slot). Shards store node ids only and edges are
  induced *after* relabelling, so permuting each link's node ids is the whole relabelling.
  Evaluation keeps the stored (seeded) order. LRP-k (DataConfig.orderings = k > 1) feeds each link k
  times in a row, each copy with its own order: fresh per read in training; at evaluation copy 0 keeps
  the stored order and copy j a permutation fixed by (seed, cid, j).
- *Persistent workers.* One DataLoader per role (train, eval) lives for the whole run; its workers are
  forked once. What they should produce next (train epoch / start / batch count, or which eval set) is
  a small int64 tensor in shared memory, written by the main process before each iter(loader); a
  worker reads it when the DataLoader restarts it (persistent workers re-enter iter(dataset) then).
- *Memory.* Each worker keeps within --loader-memory-mb (what it allocates; the interpreter and its
  libraries, ~300 MB mostly shared with the parent after fork, are not counted): a training worker holds
  the shuffle pool (SHUFFLE_PEAK x its bytes while emitting) plus the batches in flight, whose number
  (the prefetch depth) is derived from what is left; a budget that cannot hold two training batches is a
  one-line error naming the flags. Eval workers hold no pool, and an eval token budget too large for
  the memory budget is lowered (batch grouping does not change scores).
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from common.manifest_record import Manifest
from common.shards import Block, ShardError, set_graph, shard_entries
from trainer.data.block_stream import (
    block_slice,
    read_blocks,
    relabel,
    replicate,
    seeded_orders,
    shuffle_pool,
    token_batches,
)
from trainer.data.clock import ARRIVAL
from trainer.data.cold import cold_links
from trainer.data.packing import BatchPacker, for_transfer

log = logging.getLogger(__name__)
# Salts that keep the independent random streams of one (seed, epoch) apart.
_UNITS, _BUFFER, _RELABEL, _CYCLE = 11, 12, 13, 14
# Shards are sliced until every (rank, worker) can get this many units: fine enough that greedy token
# balancing evens out a short last shard, coarse enough that a big set (many shards) is never sliced.
UNITS_PER_CONSUMER = 4


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([int(k) for k in key])


# ---------------------------------------------------------------------------- units and splitters
@dataclass(frozen=True)
class Unit:
    """What one reader consumes: links i of shard `url` with i % parts == part."""

    url: str
    part: int
    parts: int
    links: int
    tokens: int
    first: int = 0  # the shard's first candidate id: its links are cids first, first + 1, ... (checked on read)
    sha256: str | None = None  # the manifest's digest, checked as the shard is read (eval shards: always)


def shard_url(manifest: Manifest, name: str) -> str:
    root = manifest.root.rstrip("/")
    return f"{root}/{name}"


def make_units(manifest: Manifest, entries: list[dict], consumers: int, checksums: bool = False) -> list[Unit]:
    """Every shard of `entries` sliced for `consumers` readers; `checksums`: each reader checks the shard's sha256
    (eval sets, whose numbers select the model: a swapped or edited shard must not be scored)."""
    if not entries:
        raise ShardError(f"{manifest.root}: the manifest lists no shards for this split/view")
    parts = max(1, math.ceil(UNITS_PER_CONSUMER * consumers / len(entries)))
    # The shards of one candidate set hold its cids in name order: a renamed or swapped shard file is caught
    # by its first block, not trained on.
    first = np.cumsum([0] + [e["links"] for e in entries])
    return [
        Unit(
            shard_url(manifest, e["name"]),
            p,
            parts,
            _share(e["links"], p, parts),
            _share(e["tokens"], p, parts),
            int(first[i]),
            e["sha256"] if checksums else None,
        )
        for i, e in enumerate(entries)
        for p in range(parts)
    ]


def _share(total: int, part: int, parts: int) -> int:
    return total // parts + (1 if part < total % parts else 0)


def balance(units: list[Unit], bins: int) -> list[list[Unit]]:
    """Greedy token balancing: each unit, in the given order, goes to the least-loaded bin (ties: lowest
    index). Empty bins load 0, so with len(units) >= bins every bin gets at least one unit."""
    out: list[list[Unit]] = [[] for _ in range(bins)]
    load = [0] * bins
    for u in units:
        i = min(range(bins), key=lambda b: (load[b], b))
        out[i].append(u)
        load[i] += max(1, u.tokens)
    return out


def split_by_node(units: list[Unit], rank: int, world_size: int, workers_per_rank: int = 1) -> list[Unit]:
    """Rank `rank`'s units: the union of its workers' token-balanced bins over all (rank, worker) consumers."""
    w = max(1, workers_per_rank)
    bins = balance(units, world_size * w)
    return [u for b in bins[rank * w : (rank + 1) * w] for u in b]


def split_by_worker(units: list[Unit], worker: int, num_workers: int) -> list[Unit]:
    """Loader worker `worker`'s share of its rank's units (token-balanced again within the rank)."""
    return balance(units, max(1, num_workers))[worker]


# ---------------------------------------------------------------------------- epoch plan
@dataclass(frozen=True)
class EpochPlan:
    epoch: int
    view: int
    units: tuple[Unit, ...]  # shuffled for this epoch
    batches: int  # C: batches every rank takes this epoch


def plan_epoch(
    manifest: Manifest, epoch: int, world_size: int, num_workers: int, data_cfg, fraction: float = 1.0
) -> EpochPlan:
    """The epoch's view, shuffled units and per-rank batch count (identical on every rank), from the
    resolved DataConfig's token_budget, max_samples, seed and orderings (copies).

    C = ceil(max(tokens / budget, links / max_samples) / world), the lower bound of one pass split
    evenly; `fraction` < 1 cuts it (the last epoch of a fractional --epochs).
    """
    views = manifest.views
    view = epoch % views
    entries = shard_entries(manifest, "train", view=view)
    units = make_units(manifest, entries, world_size * max(1, num_workers))
    order = _rng(data_cfg.seed, epoch, _UNITS).permutation(len(units))
    links = sum(e["links"] for e in entries)
    tokens = sum(e["tokens"] for e in entries) * data_cfg.orderings  # LRP-k feeds every link k times
    per_rank = math.ceil(max(tokens / data_cfg.token_budget, links / data_cfg.max_samples) / world_size)
    batches = max(1, min(per_rank, math.ceil(per_rank * fraction)))
    return EpochPlan(epoch, view, tuple(units[i] for i in order), batches)


# ---------------------------------------------------------------------------- datasets
def _worker() -> tuple[int, int]:
    info = get_worker_info()
    return (info.id, info.num_workers) if info is not None else (0, 1)


class _Stream(IterableDataset):
    """Shared parts of the two roles: the job slot in shared memory and the per-process packers."""

    def __init__(self, manifest: Manifest, rank: int, world_size: int, collate: Callable | None):
        self.manifest, self.rank, self.world_size = manifest, rank, world_size
        self.n_max, self.num_nodes = manifest.n_max, manifest.num_nodes
        self.regression = bool(manifest.targets)  # labels: heuristic targets, else 0/1
        self.collate = collate  # None = induce + pack (BatchPacker); tests pass their own
        self.copies = 1  # labeled subgraphs per link (LRP-k, DataConfig.orderings)
        self.distances = False  # batches carry hop distances to u and v (DataConfig.distances)
        self.job = torch.zeros(4, dtype=torch.int64).share_memory_()  # before the workers fork
        self._packers: dict = {}

    def finish(self, batch: Block, graph: str, cold: np.ndarray | None = None, clock: str | None = None):
        """Pack a block sampled on `graph`; `clock`: when its links are asked (the time input), default the graph's
        end; the training stream asks each link at its head's arrival."""
        if self.collate is not None:
            return self.collate(batch)
        if graph not in self._packers:  # once per worker process: the graph is memory-mapped, shared
            self._packers[graph] = BatchPacker.for_set(self.manifest, graph, self.n_max, distances=self.distances)
        packed = self._packers[graph](batch, cold)
        packed.copies, packed.clock = self.copies, clock or graph
        return packed if get_worker_info() is None else for_transfer(packed)  # Loader._batches unwraps it

    def __getstate__(self):  # spawned workers build their own packers
        return {**self.__dict__, "_packers": {}}

    def warm(self) -> None:
        """Run a two-link batch through this stream's own steps (decode, cut, order, induce, pack) here, before
        the loader forks its workers: they then inherit pyarrow and the compiled numba kernels instead of each
        loading them at its first batch (1-3 s a worker, waited for at the run's first step and first
        evaluation). A throwaway RNG orders it; no job, position or training state is touched."""
        units, graph = self.warm_set()
        with contextlib.closing(read_blocks(units[:1], self.num_nodes, self.n_max, self.regression)) as blocks:
            block = next(blocks, None)
        if block is None or self.collate is not None:
            return
        for batch in token_batches(iter([block_slice(block, 0, min(2, len(block)))]), 1 << 30, 2, self.copies):
            ordered = relabel(replicate(batch, self.copies), np.random.default_rng(0))
            self.finish(seeded_orders(ordered, self.copies, self.seed), graph)


class TrainStream(_Stream):
    """A rank's training batches; job = (epoch, start, batches C): batches [start, C) of that epoch."""

    def __init__(
        self, manifest: Manifest, rank: int, world_size: int, data_cfg, workers: int, collate: Callable | None = None
    ):
        super().__init__(manifest, rank, world_size, collate)
        self.workers, self.data_cfg = workers, data_cfg
        self.token_budget, self.max_samples = data_cfg.token_budget, data_cfg.max_samples
        self.pool_bytes, self.seed = data_cfg.shuffle_buffer_mb * 2**20, data_cfg.seed
        self.copies, self.distances = data_cfg.orderings, data_cfg.distances
        self.cold_heads = data_cfg.cold_heads or 0.0  # the share of links shown with a head of no history

    def set_job(self, epoch: int, start: int, batches: int) -> None:
        self.job.copy_(torch.tensor([epoch, start, batches, 0]))

    def warm_set(self) -> tuple[list[Unit], str]:
        return list(self.plan(int(self.job[0])).units), "train"

    def plan(self, epoch: int) -> EpochPlan:
        return plan_epoch(self.manifest, epoch, self.world_size, self.workers, self.data_cfg)

    def __iter__(self):
        return self.worker_iter(*_worker())

    def worker_iter(self, wid: int, W: int) -> Iterator[object]:
        """Loader worker `wid` of `W`'s batches of the current job (a process's, or one run inline)."""
        epoch, start, batches, _ = (int(x) for x in self.job)  # read now: the job of this iteration
        lw = (wid + start) % W  # rotated so loader worker 0 serves slot `start` after a resume
        return self.logical_worker(lw, W, epoch, start, batches)

    def logical_worker(self, lw: int, W: int, epoch: int, start: int, batches: int) -> Iterator[object]:
        units = split_by_worker(split_by_node(list(self.plan(epoch).units), self.rank, self.world_size, W), lw, W)
        stream = token_batches(self._cycle(units, epoch, lw), self.token_budget, self.max_samples, self.copies)
        for j, batch in enumerate(stream):
            slot = lw + j * W
            if slot >= batches:
                return
            if slot < start:
                continue  # fast-forward after a resume: no relabel, no induce, no pack
            # k copies of every link, each with its own fresh order (k = 1: PENCIL's one labeled subgraph)
            batch = relabel(replicate(batch, self.copies), _rng(self.seed, epoch, self.rank, slot, _RELABEL))
            cold = cold_links(batch.cid, self.cold_heads, self.seed) if self.cold_heads else None
            yield self.finish(batch, "train", cold, clock=ARRIVAL)

    def _cycle(self, units: list[Unit], epoch: int, lw: int) -> Iterator[Block]:
        """Endless shuffled blocks of `units`: pass 0 in the given order, later passes reshuffled."""
        rng = _rng(self.seed, epoch, self.rank, lw, _BUFFER)
        for cycle in range(1 << 62):
            order = (
                units
                if cycle == 0
                else [units[i] for i in _rng(self.seed, epoch, self.rank, lw, cycle, _CYCLE).permutation(len(units))]
            )
            empty = True
            for block in shuffle_pool(
                read_blocks(order, self.num_nodes, self.n_max, self.regression), self.pool_bytes, rng
            ):
                empty = False
                yield block
            if empty:
                raise ShardError(f"rank {self.rank} worker {lw}: its units hold no links ({[u.url for u in units]})")


def eval_sets(manifest: Manifest) -> list[tuple[str, str]]:
    return sorted({(s["split"], s["protocol"]) for s in manifest.shards if s["split"] != "train"})


class EvalStream(_Stream):
    """One rank's share of an eval set, read once in stored order (no shuffle, no relabel);
    job = (index into eval_sets(manifest),)."""

    def __init__(
        self,
        manifest: Manifest,
        rank: int,
        world_size: int,
        data_cfg,
        workers: int,
        collate: Callable | None = None,
        token_budget: int | None = None,
    ):
        super().__init__(manifest, rank, world_size, collate)
        self.workers, self.token_budget = workers, token_budget or data_cfg.eval_token_budget
        self.sets = eval_sets(manifest)
        self.copies, self.seed, self.distances = data_cfg.orderings, data_cfg.seed, data_cfg.distances

    def set_job(self, split: str, protocol: str) -> None:
        if (split, protocol) not in self.sets:
            raise ShardError(f"{self.manifest.root}: the manifest lists no shards for {split}/{protocol}")
        self.job.copy_(torch.tensor([self.sets.index((split, protocol)), 0, 0, 0]))

    def warm_set(self) -> tuple[list[Unit], str]:
        split, protocol = self.sets[int(self.job[0])]
        return self.units(split, protocol), set_graph(self.manifest, split)

    def units(self, split: str, protocol: str) -> list[Unit]:
        entries = shard_entries(self.manifest, split, protocol=protocol)
        return make_units(self.manifest, entries, self.world_size * max(1, self.workers), checksums=True)

    def __iter__(self):
        return self.worker_iter(*_worker())

    def worker_iter(self, wid: int, W: int) -> Iterator[object]:
        split, protocol = self.sets[int(self.job[0])]
        return self.read(split, protocol, wid, W)

    def read(self, split: str, protocol: str, wid: int, W: int) -> Iterator[object]:
        units = split_by_worker(split_by_node(self.units(split, protocol), self.rank, self.world_size, W), wid, W)
        graph = set_graph(self.manifest, split)
        # No cap from the micro-batch at eval beyond the budget: no activations are kept for backward.
        for batch in token_batches(
            read_blocks(units, self.num_nodes, self.n_max, self.regression), self.token_budget, 1 << 30, self.copies
        ):
            yield self.finish(seeded_orders(replicate(batch, self.copies), self.copies, self.seed), graph)


def view_stats(manifest: Manifest, view: int) -> tuple[int, int]:
    """(links, tokens) of one training view, from the manifest."""
    entries = shard_entries(manifest, "train", view=view)
    return sum(e["links"] for e in entries), sum(e["tokens"] for e in entries)
