"""The block-level steps of a loader worker's stream (trainer/data/stream.py): every one works on whole blocks of
links (common.shards.Block: columns plus node offsets), never on a Python object per link.

    open shard ─ decode + check each block ─ slice the reader's links (i % parts) ─ byte-sized shuffle
      pool ─ greedy token-budget cuts (numba) ─ relabel: segmented permutation of node ids (numba)
"""

from __future__ import annotations

import hashlib
from typing import Iterator

import numpy as np
import webdataset as wds
from numba import njit

from common.shards import Block, ShardError, check_block, iter_tar_blocks


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
    try:
        return wds.gopen(url.removeprefix("file://"), "rb")
    except FileNotFoundError:
        raise ShardError(f"{url}: shard file is missing; rerun preprocess to rebuild the set") from None


def block_slice(block: Block, lo: int, hi: int) -> Block:
    """Links lo..hi-1 of a block, as views (no copy of the node ids)."""
    ptr = block.node_ptr[lo : hi + 1]
    return Block(
        block.cid[lo:hi],
        block.src[lo:hi],
        block.dst[lo:hi],
        block.label[lo:hi],
        ptr - ptr[0],
        block.nodes[ptr[0] : ptr[-1]],
        None if block.rel is None else block.rel[lo:hi],
    )


class HashingReader:
    """A binary stream that hashes what is read from it: the shard's sha256, without a second read."""

    def __init__(self, f):
        self.f, self.sha = f, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.sha.update(data)
        return data

    def digest_to_end(self) -> str:
        """Read what the tar reader left (end-of-archive padding) and return the whole stream's sha256."""
        while self.read(1 << 20):
            pass
        return self.sha.hexdigest()

    def close(self) -> None:
        self.f.close()


def read_blocks(units: list, num_nodes: int, n_max: int, regression: bool = False) -> Iterator[Block]:
    """The checked blocks of the given units (trainer.data.stream.Unit: url, part, parts, first, sha256), each cut to
    its units' links (i % parts in the parts held). Checked: ranges and labels (check_block), that the shard
    holds the cids the manifest gives it (first, first + 1, ...): a renamed shard file fails; and, for units
    with a sha256, the whole file's digest when its last block has been read: an eval set's metrics are
    computed only after every block is scored, so a swapped or edited eval shard fails before they exist.
    Several units of one shard (a reader holding 2 of its 4 slices) are read in one pass over it, at the
    place of their first unit: decoding, not slicing, is what costs."""
    held: dict[str, np.ndarray] = {}  # url -> which of its `parts` slices these units include
    first, digest = {}, {}
    for u in units:
        held.setdefault(u.url, np.zeros(u.parts, dtype=bool))[u.part] = True
        first[u.url], digest[u.url] = u.first, getattr(u, "sha256", None)
    for url, own in held.items():
        parts, seen = len(own), 0  # seen: link index within the shard, for the i % parts slicing
        f = open_url(url)
        if digest[url] is not None:
            f = HashingReader(f)
        try:
            for k, block in enumerate(iter_tar_blocks(f, url)):
                where = f"{url}:{k:06d}.arrow"
                check_block(block, num_nodes, n_max, where, regression)
                n = len(block)
                if n and not np.array_equal(block.cid, np.arange(first[url] + seen, first[url] + seen + n)):
                    raise ShardError(
                        f"{where}: holds candidate ids {int(block.cid[0])}.., the manifest puts "
                        f"{first[url] + seen}.. in this shard (renamed or swapped shard file); "
                        "rerun preprocess to repair the set"
                    )
                if not own.all():
                    block = block.take(np.flatnonzero(own[(seen + np.arange(n)) % parts]))
                seen += n
                if len(block):
                    yield block
            if digest[url] is not None and (have := f.digest_to_end()) != digest[url]:
                raise ShardError(
                    f"{url}: checksum mismatch (manifest {digest[url][:12]}…, file {have[:12]}…): a "
                    "replaced, swapped or edited eval shard; rerun preprocess to repair the set"
                )
        finally:
            f.close()


def shuffle_pool(blocks: Iterator[Block], pool_bytes: int, rng: np.random.Generator) -> Iterator[Block]:
    """Byte-sized shuffle: pool blocks until `pool_bytes`, emit a random half of the pooled links, keep
    the other half; at the end, emit everything left in a random order."""
    pool: list[Block] = []
    size = 0
    for b in blocks:
        pool.append(b)
        size += b.nbytes
        if size < pool_bytes:
            continue
        cat = Block.concat(pool)
        perm = rng.permutation(len(cat))
        keep = len(cat) // 2
        pool = [cat.take(perm[:keep])]
        size = pool[0].nbytes
        yield cat.take(perm[keep:])
    if pool:
        cat = Block.concat(pool)
        if len(cat):
            yield cat.take(rng.permutation(len(cat)))


@njit(cache=True)
def _greedy_ends(tokens, budget, cap):
    """End index of every greedy batch: add links while sum(tokens) <= budget and count <= cap (a link
    alone over the budget forms its own batch). The last batch may be incomplete."""
    ends = np.empty(tokens.shape[0], dtype=np.int64)
    k, total, count = 0, 0, 0
    for i in range(tokens.shape[0]):
        t = tokens[i]
        if count > 0 and (total + t > budget or count >= cap):
            ends[k] = i
            k += 1
            total, count = 0, 0
        total += t
        count += 1
    ends[k] = tokens.shape[0]
    return ends[: k + 1]


def token_batches(blocks: Iterator[Block], token_budget: int, max_samples: int, copies: int = 1) -> Iterator[Block]:
    """Greedy batches over a stream of blocks: sum(copies x (N_b + 2)) <= token_budget and count <= max_samples
    links (each link will be fed `copies` times, see `replicate`); the incomplete last batch of a block
    carries over to the next one."""
    pending: Block | None = None
    for b in blocks:
        if pending is not None:
            b = Block.concat([pending, b])
        ends = _greedy_ends((b.sizes + 2) * copies, token_budget, max_samples)
        lo = 0
        for hi in ends[:-1]:
            yield block_slice(b, lo, int(hi))
            lo = int(hi)
        pending = block_slice(b, lo, len(b))
    if pending is not None and len(pending):
        yield pending


@njit(cache=True)
def _shuffle_segments(node_ptr, nodes, keys):
    """In place: Fisher-Yates over positions 2..N_b-1 of every segment, driven by uniform keys in [0, 1)."""
    for b in range(node_ptr.shape[0] - 1):
        lo = node_ptr[b] + 2
        for i in range(node_ptr[b + 1] - 1, lo, -1):
            j = lo + int(keys[i] * (i - lo + 1))
            nodes[i], nodes[j] = nodes[j], nodes[i]


def relabel(block: Block, rng: np.random.Generator) -> Block:
    """Fresh uniform order of local ids 2..N-1 of every link (u = 0, v = 1 fixed): a segmented
    permutation of the node ids. Edges are induced afterwards, so nothing else needs remapping."""
    nodes = block.nodes.copy()
    _shuffle_segments(np.ascontiguousarray(block.node_ptr, dtype=np.int64), nodes, rng.random(len(nodes)))
    return Block(block.cid, block.src, block.dst, block.label, block.node_ptr, nodes, block.rel)


# ---------------------------------------------------------------------------- LRP-k: k labeled subgraphs per link
def replicate(block: Block, copies: int) -> Block:
    """Every link `copies` times in a row (link i -> rows i*k .. i*k+k-1), as one new block; the copies then
    get their own local orders (`relabel` in training, `seeded_orders` at evaluation)."""
    return block if copies == 1 else block.take(np.repeat(np.arange(len(block)), copies))


@njit(cache=True)
def _mix(x):
    """splitmix64 finaliser: a well-spread 64-bit hash of x (uint64 arithmetic wraps)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True)
def _seeded_keys(node_ptr, cid, copies, seed, keys):
    """keys[i] in [0, 1) for node position i: a hash of (seed, cid, copy, position in the link)."""
    for b in range(node_ptr.shape[0] - 1):
        h = _mix(np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(cid[b]))
        h = _mix(h + np.uint64(b % copies))
        for i in range(node_ptr[b], node_ptr[b + 1]):
            keys[i] = (_mix(h + np.uint64(i - node_ptr[b])) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


def seeded_orders(block: Block, copies: int, seed: int) -> Block:
    """Evaluation orders of a replicated block: copy 0 of every link keeps the stored (seeded) order, copy j >= 1
    gets a permutation that depends only on (seed, cid, j), so scores do not depend on how links are batched."""
    if copies == 1:
        return block
    ptr = np.ascontiguousarray(block.node_ptr, dtype=np.int64)
    keys = np.empty(len(block.nodes), dtype=np.float64)
    _seeded_keys(ptr, np.ascontiguousarray(block.cid, dtype=np.int64), copies, seed, keys)
    nodes = block.nodes.copy()
    keep = np.repeat(np.arange(len(block)) % copies == 0, np.diff(ptr))
    shuffled = nodes.copy()
    _shuffle_segments(ptr, shuffled, keys)
    nodes[~keep] = shuffled[~keep]
    return Block(block.cid, block.src, block.dst, block.label, block.node_ptr, nodes, block.rel)
