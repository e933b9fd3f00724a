"""Streaming shards into token-budget micro-batches (issue #4 item 1; DESIGN.md §3, §6, §7).

The manifest is the shard list. One epoch is a webdataset pipeline per loader worker:

    units of view e mod V ─ shuffle(seed, epoch) ─ split_by_node ─ split_by_worker ─ open (gopen/fsspec)
      ─ blocks → samples ─ shuffle buffer(seed, epoch, rank, worker) ─ token-budget batches ─ relabel ─ pack

Decisions, and why:
- *Units.* A unit is a shard, or, when there are fewer than 4 shards per (rank, worker), one of P
  interleaved slices of a shard (sample i goes to slice i mod P). So no worker ever sits empty, even
  for a one-shard set, and loads balance; the price is that P readers decode the same small shard.
- *Explicit splitters.* split_by_node then split_by_worker, pure functions of (rank, world, worker,
  workers) with no hidden environment lookups; both balance tokens greedily (what the budget spends),
  and every worker gets at least one unit.
- *Equal batch counts.* Every rank takes exactly C batches per epoch, C computed from the manifest alone
  (no communication): the lower bound on batches for one pass over the view, divided by the world size.
  A worker whose units run out before its quota *cycles* (re-reads them, reshuffled); one with more
  data than its quota leaves the rest unread this epoch. Units are reshuffled every epoch, so what is
  repeated or skipped changes from epoch to epoch. No rank can hang DDP by running out early.
- *Order.* Loader worker j of W serves the rank's batch slots j, j+W, ...; DataLoader interleaves
  workers round-robin, so the batch sequence of a rank is a pure function of
  (seed, epoch, rank, world, W), whatever the timing.
- *Position.* (epoch, batches consumed). Resuming replays the epoch deterministically and skips the
  consumed batches before relabelling and packing (the cheap part is the decode); the worker-slot
  mapping is rotated so the first batch after a resume is slot `start`.
- *Relabelling.* In training, local ids 2..N-1 get a fresh uniform permutation per read (u = 0, v = 1
  stay), drawn from an RNG seeded by (seed, epoch, rank, slot): fresh every epoch, and reproducible on
  resume. Evaluation keeps the stored (seeded) order.
"""
from __future__ import annotations

import functools
import logging
import math
import random
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch
import webdataset as wds
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from common.shards import ShardError, decode_block, shard_entries

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
    """What one reader consumes: samples i of shard `url` with i % parts == part."""

    url: str
    part: int
    parts: int
    links: int
    tokens: int


def shard_url(manifest: dict, name: str) -> str:
    root = manifest["root"].rstrip("/")
    return f"{root}/{name}"


def make_units(manifest: dict, entries: list[dict], consumers: int) -> list[Unit]:
    if not entries:
        raise ShardError(f"{manifest['root']}: the manifest lists no shards for this split/view")
    parts = max(1, math.ceil(UNITS_PER_CONSUMER * consumers / len(entries)))
    return [Unit(shard_url(manifest, e["name"]), p, parts, _share(e["links"], p, parts), _share(e["tokens"], p, parts))
            for e in entries for p in range(parts)]


def _share(total: int, part: int, parts: int) -> int:
    return total // parts + (1 if part < total % parts else 0)


def balance(units: list[Unit], bins: int) -> list[list[Unit]]:
    """Greedy token balancing: each unit, in the given order, goes to the least-loaded bin (ties: lowest
    index). Empty bins load 0, so with len(units) >= bins every bin gets at least one unit, and loads
    differ by at most one unit's tokens."""
    out: list[list[Unit]] = [[] for _ in range(bins)]
    load = [0] * bins
    for u in units:
        i = min(range(bins), key=lambda b: (load[b], b))
        out[i].append(u)
        load[i] += max(1, u.tokens)
    return out


def split_by_node(units: list[Unit], rank: int, world_size: int, workers_per_rank: int = 1) -> list[Unit]:
    """Rank `rank`'s units: the union of its workers' token-balanced bins over all (rank, worker)
    consumers, so every rank holds at least one unit per worker and ranks differ by < one unit of tokens."""
    w = max(1, workers_per_rank)
    bins = balance(units, world_size * w)
    return [u for b in bins[rank * w:(rank + 1) * w] for u in b]


def split_by_worker(units: list[Unit], worker: int, num_workers: int) -> list[Unit]:
    """Loader worker `worker`'s share of its rank's units (token-balanced again within the rank)."""
    return balance(units, max(1, num_workers))[worker]


# ---------------------------------------------------------------------------- reading
def open_url(url: str):
    """A binary stream for a shard: local paths and webdataset schemes (pipe:, http(s), gs, hf, ...) via
    wds.gopen; anything else with a scheme (s3://, ...) via fsspec when it is installed."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme and scheme not in wds.gopen_schemes and scheme != "file":
        try:
            import fsspec
        except ImportError:
            raise ShardError(f"{url}: no opener for '{scheme}://' (install fsspec and its {scheme} backend)") from None
        return fsspec.open(url, "rb").open()
    return wds.gopen(url.removeprefix("file://"), "rb")


def _tar_blocks(url: str) -> Iterator[object]:
    """Decode the Arrow blocks of one shard, streaming (the tar is never held whole in memory)."""
    import tarfile

    f = None
    try:
        f = open_url(url)
        with tarfile.open(fileobj=f, mode="r|") as tar:
            for member in tar:
                if member.isfile() and member.name.endswith(".arrow"):
                    data = tar.extractfile(member).read()
                    if len(data) != member.size:
                        raise ShardError(f"{url}: member {member.name} is truncated")
                    yield decode_block(data, f"{url}:{member.name}")
    except tarfile.TarError as err:
        raise ShardError(f"{url}: not a readable tar ({err}); the shard is truncated or corrupt") from None
    except FileNotFoundError:
        raise ShardError(f"{url}: shard file is missing; rerun preprocess to rebuild the set") from None
    finally:
        if f is not None:
            f.close()


def read_units(units: list[Unit]) -> Iterator[dict]:
    """Sample dicts (common.shards.block_samples layout) of the given units, in order."""
    for unit in units:
        seen = 0  # sample index within the shard, for the i % parts slicing
        for block in _tar_blocks(unit.url):
            n = len(block)
            for i in range((unit.part - seen) % unit.parts, n, unit.parts):
                yield {"cid": int(block.cid[i]), "src": int(block.src[i]), "dst": int(block.dst[i]),
                       "label": float(block.label[i]),
                       "nodes": block.nodes[block.node_ptr[i]:block.node_ptr[i + 1]],
                       "edges": block.edges[block.edge_ptr[i]:block.edge_ptr[i + 1]]}
            seen += n


def cycle_units(units: list[Unit], seed: int, epoch: int, rank: int, worker: int, buffer: int) -> Iterator[dict]:
    """Endless shuffled samples of `units`. Pass 0 reads them in the given order, later passes in a
    reshuffled one; the shuffle buffer drains at the end of every pass, so every sample of the worker
    comes out once before any comes out twice."""
    rng = random.Random(int(_rng(seed, epoch, rank, worker, _BUFFER).integers(1 << 62)))
    for cycle in range(1 << 62):
        order = units if cycle == 0 else [units[i] for i in _rng(seed, epoch, rank, worker, cycle, _CYCLE).permutation(len(units))]
        empty = True
        for s in shuffle_buffer(read_units(order), buffer, rng):
            empty = False
            yield s
        if empty:
            raise ShardError(f"rank {rank} worker {worker}: its units hold no samples ({[u.url for u in units]})")


def shuffle_buffer(samples: Iterator[dict], size: int, rng: random.Random) -> Iterator[dict]:
    """Reservoir-style shuffle: fill `size`, then emit a random element for each one read."""
    buf: list[dict] = []
    for s in samples:
        if len(buf) < size:
            buf.append(s)
            continue
        i = rng.randrange(size)
        buf[i], s = s, buf[i]
        yield s
    rng.shuffle(buf)
    yield from buf


def token_batches(samples: Iterator[dict], token_budget: int, max_samples: int) -> Iterator[list[dict]]:
    """Greedy batches: add samples while sum(N_b + 2) <= token_budget and count <= max_samples."""
    batch: list[dict] = []
    tokens = 0
    for s in samples:
        t = len(s["nodes"]) + 2
        if batch and (tokens + t > token_budget or len(batch) >= max_samples):
            yield batch
            batch, tokens = [], 0
        batch.append(s)
        tokens += t
    if batch:
        yield batch


def relabel(sample: dict, rng: np.random.Generator) -> dict:
    """Fresh uniform order of local ids 2..N-1 (u = 0, v = 1 fixed); nodes and edges remapped together."""
    nodes, edges = sample["nodes"], sample["edges"]
    n = len(nodes)
    if n <= 3:
        return sample
    new = np.arange(n)
    new[2:] = 2 + rng.permutation(n - 2)  # new[old local id] = new local id
    out_nodes = np.empty_like(nodes)
    out_nodes[new] = nodes
    return {**sample, "nodes": out_nodes, "edges": new[edges]}


# ---------------------------------------------------------------------------- epoch plan
@dataclass(frozen=True)
class EpochPlan:
    epoch: int
    view: int
    units: tuple[Unit, ...]  # shuffled for this epoch
    batches: int  # C: batches every rank takes this epoch


def plan_epoch(manifest: dict, epoch: int, world_size: int, num_workers: int, token_budget: int,
               max_samples: int, seed: int, fraction: float = 1.0) -> EpochPlan:
    """The epoch's view, shuffled units and per-rank batch count (identical on every rank).

    C = ceil(max(tokens / budget, links / max_samples) / world), the lower bound of one pass split
    evenly; `fraction` < 1 cuts it (the last epoch of a fractional --epochs).
    """
    views = int(manifest.get("views", 1))
    view = epoch % views
    entries = shard_entries(manifest, "train", view=view)
    units = make_units(manifest, entries, world_size * max(1, num_workers))
    order = _rng(seed, epoch, _UNITS).permutation(len(units))
    links = sum(e["links"] for e in entries)
    tokens = sum(e["tokens"] for e in entries)
    per_rank = math.ceil(max(tokens / token_budget, links / max_samples) / world_size)
    batches = max(1, min(per_rank, math.ceil(per_rank * fraction)))
    return EpochPlan(epoch, view, tuple(units[i] for i in order), batches)


# ---------------------------------------------------------------------------- datasets
def _worker() -> tuple[int, int]:
    info = get_worker_info()
    return (info.id, info.num_workers) if info is not None else (0, 1)


class TrainStream(IterableDataset):
    """Batches [start, plan.batches) of one rank's epoch. Picklable: plain data plus a module-level collate."""

    def __init__(self, plan: EpochPlan, rank: int, world_size: int, token_budget: int, max_samples: int,
                 shuffle_buffer: int, seed: int, collate: Callable[[list[dict]], object], start: int = 0):
        self.plan, self.rank, self.world_size = plan, rank, world_size
        self.token_budget, self.max_samples, self.buffer, self.seed = token_budget, max_samples, shuffle_buffer, seed
        self.collate, self.start = collate, start

    def __iter__(self):
        wid, W = _worker()
        lw = (wid + self.start) % W  # rotated so loader worker 0 serves slot `start` after a resume
        return self.logical_worker(lw, W)

    def logical_worker(self, lw: int, W: int) -> Iterator[object]:
        p = self.plan
        units = split_by_worker(split_by_node(list(p.units), self.rank, self.world_size, W), lw, W)
        pipeline = wds.DataPipeline(
            lambda: cycle_units(units, self.seed, p.epoch, self.rank, lw, self.buffer),
            lambda src: token_batches(src, self.token_budget, self.max_samples),
        )
        for j, batch in enumerate(pipeline):
            slot = lw + j * W
            if slot >= p.batches:
                return
            if slot < self.start:
                continue  # fast-forward after a resume: no relabel, no packing
            rng = _rng(self.seed, p.epoch, self.rank, slot, _RELABEL)
            yield self.collate([relabel(s, rng) for s in batch])


class EvalStream(IterableDataset):
    """One rank's share of an eval set, read once in stored order (no shuffle, no relabel)."""

    def __init__(self, units: list[Unit], rank: int, world_size: int, token_budget: int, max_samples: int,
                 collate: Callable[[list[dict]], object]):
        self.units, self.rank, self.world_size = units, rank, world_size
        self.token_budget, self.max_samples, self.collate = token_budget, max_samples, collate

    def __iter__(self):
        wid, W = _worker()
        units = split_by_worker(split_by_node(self.units, self.rank, self.world_size, W), wid, W)
        for batch in token_batches(read_units(units), self.token_budget, self.max_samples):
            yield self.collate(batch)


# ---------------------------------------------------------------------------- loaders
def _pack_collate(n_max: int):
    from trainer.packing import pack

    return functools.partial(pack, n_max=n_max)


def _loader(dataset: IterableDataset, num_workers: int, pin: bool) -> DataLoader:
    # Own generator: creating a loader iterator must not consume the global torch RNG (dropout), or a
    # resumed run would draw different dropout masks than the uninterrupted one.
    return DataLoader(dataset, batch_size=None, num_workers=num_workers, pin_memory=pin,
                      generator=torch.Generator(), persistent_workers=False,
                      prefetch_factor=4 if num_workers else None)


def train_loader(manifest: dict, epoch: int, rank: int, world_size: int, data_cfg, *, start: int = 0,
                 fraction: float = 1.0, collate=None, pin: bool = False) -> tuple[DataLoader, EpochPlan]:
    """(loader of this rank's batches start..C-1 of `epoch`, the epoch plan)."""
    plan = plan_epoch(manifest, epoch, world_size, data_cfg.num_workers, data_cfg.token_budget,
                      data_cfg.max_samples, data_cfg.seed, fraction)
    collate = collate or _pack_collate(int(manifest["n_max"]))
    ds = TrainStream(plan, rank, world_size, data_cfg.token_budget, data_cfg.max_samples, data_cfg.shuffle_buffer,
                     data_cfg.seed, collate, start=min(start, plan.batches))
    return _loader(ds, data_cfg.num_workers, pin), plan


def eval_loader(manifest: dict, split: str, protocol: str, rank: int, world_size: int, data_cfg, *,
                collate=None, pin: bool = False) -> DataLoader:
    entries = shard_entries(manifest, split, protocol=protocol)
    workers = data_cfg.num_workers
    units = make_units(manifest, entries, world_size * max(1, workers))
    collate = collate or _pack_collate(int(manifest["n_max"]))
    # No cap from the micro-batch at eval beyond the budget: no activations are kept for backward.
    ds = EvalStream(units, rank, world_size, data_cfg.eval_token_budget, 1 << 30, collate)
    return _loader(ds, workers, pin)


def view_stats(manifest: dict, view: int) -> tuple[int, int]:
    """(links, tokens) of one training view, from the manifest."""
    entries = shard_entries(manifest, "train", view=view)
    return sum(e["links"] for e in entries), sum(e["tokens"] for e in entries)
