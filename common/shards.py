"""The shard format: the only contract between preprocess/ (writer) and trainer/ (reader).

Layout of one dataset build, `<out>/<dataset>/<cache key>/`:

    train-v000-00000.tar ...        training shards of view 0 (independent negatives + subgraphs per view)
    valid-original-00000.tar ...    eval shards, one set per (split, protocol)
    valid-original-queries.npz      ranking structure of that eval set (pos_cid, neg_cid)
    graph-train-indptr.npy          the CSR graph the links were sampled on (and whose induced edges the
    graph-train-indices.npy         reader recovers); graph-test-* too when test links use another graph
    graph-train-times.npy           a temporal split's edge times, aligned with graph-train-indices (and -test)
    features.npy                    node features (N, F) float32, only when built with --features
    node_ids.parquet                the user's node ids (row i = node i), only for edge-list files
    manifest.json                   written last, atomically; its presence means "complete"

The manifest (schema and checksum: common/manifest.py) records every file the readers use with its
sha256: each shard in `shards`, every other file in `files`. Nothing outside the folder is ever read.

A shard is a WebDataset tar whose members are Arrow IPC streams, each one *block* of up to a few
hundred links (`<block:06d>.arrow`). Per-link tar members would cost a 512-byte header each, more
than the link itself. Columns of a block (FORMAT_VERSION 2):

    cid    int64         candidate id: index into this (split, protocol[, view]) candidate list
    src    int64         global id of u
    dst    int64         global id of v
    label  float32       1 / 0 (or a regression target)
    nodes  list<uint16|int32|int64>  global ids of the context nodes in local-id order (u = 0, v = 1)
    rel    int32         a typed set's (version 4) link relation id; absent from every other set's blocks

Version 2 stores no edges. The node set is the random, costly part of a sample; its induced edges are a
pure function of (node set, graph) and are recovered at load time (common/induce.py) from the graph
arrays that ship once with the set. Measured on real ogbl-ddi (1,350), the v1 edge lists were 98.8 % of
181 KB per link; citeseer's v1 links were 152 B. One form for every density: no second code path.

Eval sets carry `queries.npz`: `pos_cid` (P,) and `neg_cid` either (Q,) shared negatives or (P, K)
per-positive negatives (HeaRT, citation2); scores are looked up by cid, so a pair shared by several
queries is sampled and scored once.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass
from typing import BinaryIO, Iterable, Iterator

import numpy as np
import pyarrow as pa

# The manifest half of the format (names, versions, reading and writing manifest.json) is common/manifest.py;
# re-exported here so that this module stays the one place readers and writers import the format from.
from common.manifest import (  # noqa: F401
    DIRECTED_VERSION,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    REBUILD,
    TYPED_VERSION,
    Manifest,
    ShardError,
    file_record,
    parse_manifest,
    read_manifest,
    set_graph,
    shard_entries,
    stored_file_records,
    write_manifest,
)
from common.set_arrays import (  # noqa: F401  (the set's side arrays: re-exported, as the manifest's names)
    FEATURES,
    encode_array,
    encode_features,
    encode_queries,
    file_sha256,
    graph_entry,
    graph_names,
    load_edge_times,
    load_features,
    load_graph,
    load_out_graph,
    load_queries,
    load_rel_graph,
    rel_graph_names,
    times_name,
    verify_shard,
)
from common.storage import LocalStorage, StorageError, is_remote, join, local_file, open_storage, read_url  # noqa: F401

BLOCK_SUFFIX = "arrow"
COLUMNS = ("cid", "src", "dst", "label", "nodes")
REL = "rel"  # a typed set's column (format version 4): each link's relation id


# ---------------------------------------------------------------------------- naming
def train_shard_name(view: int, index: int) -> str:
    return f"train-v{view:03d}-{index:05d}.tar"


def eval_shard_name(split: str, protocol: str, index: int) -> str:
    return f"{split}-{protocol}-{index:05d}.tar"


def queries_name(split: str, protocol: str) -> str:
    return f"{split}-{protocol}-queries.npz"


def cache_key(parts: dict) -> str:
    """Hash of every input that determines the shards' content (plus the format version)."""
    blob = json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------- blocks
@dataclass
class Block:
    """A batch of sampled links in columnar form (what the sampler produces and the loader consumes)."""

    cid: np.ndarray  # (B,) int64
    src: np.ndarray  # (B,) int64
    dst: np.ndarray  # (B,) int64
    label: np.ndarray  # (B,) float32
    node_ptr: np.ndarray  # (B+1,) int64 offsets into `nodes`
    nodes: np.ndarray  # (sum N_b,) global ids, local-id order per link
    rel: np.ndarray | None = None  # (B,) relation ids of a typed set's links (format version 4); None: untyped

    def __len__(self) -> int:
        return int(self.cid.shape[0])

    @property
    def sizes(self) -> np.ndarray:
        """(B,) context nodes N_b per link."""
        return np.diff(self.node_ptr)

    @property
    def tokens(self) -> int:
        """Sequence tokens this block feeds the model: N_b context + 2 task tokens per link."""
        return int(self.node_ptr[-1] - self.node_ptr[0]) + 2 * len(self)

    @property
    def nbytes(self) -> int:
        extra = 0 if self.rel is None else self.rel.nbytes
        return extra + sum(a.nbytes for a in (self.cid, self.src, self.dst, self.label, self.node_ptr, self.nodes))

    def take(self, index: np.ndarray) -> "Block":
        """The links at `index` (any order), as a new contiguous block: one vectorised gather."""
        index = np.asarray(index, dtype=np.int64)
        lo, sizes = self.node_ptr[index], self.sizes[index]
        ptr = np.zeros(len(index) + 1, np.int64)
        np.cumsum(sizes, out=ptr[1:])
        # position of every output node in the input: its link's start + its offset inside the link
        offs = np.arange(int(ptr[-1]), dtype=np.int64) - np.repeat(ptr[:-1], sizes)
        return Block(
            self.cid[index],
            self.src[index],
            self.dst[index],
            self.label[index],
            ptr,
            self.nodes[np.repeat(lo, sizes) + offs],
            None if self.rel is None else self.rel[index],
        )

    @staticmethod
    def concat(blocks: list["Block"]) -> "Block":
        if len(blocks) == 1:
            return blocks[0]
        ptrs, base = [np.zeros(1, np.int64)], 0
        for b in blocks:
            ptrs.append(b.node_ptr[1:] - b.node_ptr[0] + base)
            base += int(b.node_ptr[-1] - b.node_ptr[0])
        return Block(
            *(np.concatenate([getattr(b, k) for b in blocks]) for k in ("cid", "src", "dst", "label")),
            np.concatenate(ptrs),
            np.concatenate([b.nodes[b.node_ptr[0] : b.node_ptr[-1]] for b in blocks]),
            None if blocks[0].rel is None else np.concatenate([b.rel for b in blocks]),
        )


def _node_type(nodes: np.ndarray):
    top = int(nodes.max()) if nodes.size else 0
    return pa.uint16() if top < 2**16 else pa.int32() if top < 2**31 else pa.int64()


def encode_block(block: Block) -> bytes:
    """Block -> Arrow IPC stream bytes (one tar member), zstd-compressed."""
    nodes = np.ascontiguousarray(block.nodes)
    ntype = _node_type(nodes)
    node_col = pa.ListArray.from_arrays(
        pa.array((block.node_ptr - block.node_ptr[0]).astype(np.int32)), pa.array(nodes.astype(ntype.to_pandas_dtype()))
    )
    cols = [
        pa.array(block.cid.astype(np.int64)),
        pa.array(block.src.astype(np.int64)),
        pa.array(block.dst.astype(np.int64)),
        pa.array(block.label.astype(np.float32)),
        node_col,
    ]
    typed = block.rel is not None  # only a typed set's blocks carry the column: every other block stays as it was
    table = pa.record_batch(
        cols + ([pa.array(block.rel.astype(np.int32))] if typed else []), names=list(COLUMNS) + ([REL] if typed else [])
    )
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_batch(table)
    return sink.getvalue()


def numpy_view(arr: pa.Array) -> np.ndarray:
    """A null-free primitive Arrow array as a read-only NumPy view of its buffer, what pyarrow's to_numpy gives,
    without its first call's import of pandas (0.6 s of every trainer's start: it decodes a block before it forks
    its loader workers)."""
    if arr.null_count or not (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)):
        raise ValueError(f"a {arr.type} column with {arr.null_count} null(s): blocks hold numbers, never null")
    dtype = np.dtype(arr.type.to_pandas_dtype())
    view = np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)
    view.flags.writeable = False  # Arrow's memory, as to_numpy's view
    return view


def decode_block(data: bytes, where: str = "<bytes>") -> Block:
    """Arrow IPC stream bytes -> Block; a corrupt member raises ShardError naming `where`."""
    try:
        with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
            batch = reader.read_all().combine_chunks().to_batches()[0]
        cols = {name: batch.column(name) for name in COLUMNS}
        nodes = cols["nodes"]
        return Block(
            cid=numpy_view(cols["cid"]),
            src=numpy_view(cols["src"]),
            dst=numpy_view(cols["dst"]),
            label=numpy_view(cols["label"]),
            node_ptr=numpy_view(nodes.offsets).astype(np.int64),
            nodes=numpy_view(nodes.values).astype(np.int64),
            rel=numpy_view(batch.column(REL)).astype(np.int64) if REL in batch.schema.names else None,
        )
    except (pa.ArrowException, OSError, KeyError, IndexError, ValueError) as err:
        raise ShardError(f"{where}: corrupt block ({err}); rerun preprocess to rebuild this shard") from None


def check_block(block: Block, num_nodes: int, n_max: int, where: str, regression: bool = False) -> None:
    """Range checks that catch a corrupt block before it reaches the model (cheap, vectorised):
    offsets monotone from 0, 2 <= N_b <= n_max, ids in [0, num_nodes), nodes[0] = src, nodes[1] = dst,
    labels 0 or 1 (a regression set's: finite)."""
    ptr, n = block.node_ptr, block.sizes

    def bad(what: str):
        raise ShardError(f"{where}: corrupt block ({what}); rerun preprocess to rebuild this shard")

    if ptr.shape[0] != len(block) + 1 or ptr[0] != 0 or ptr[-1] != block.nodes.shape[0]:
        bad("node offsets do not match the node column")
    if len(block) and (n.min() < 2 or n.max() > n_max):
        bad(f"a link has {int(n.min()) if n.min() < 2 else int(n.max())} context nodes, outside [2, N_max = {n_max}]")
    ids = block.nodes
    if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
        bad(f"node id {int(ids.min()) if ids.min() < 0 else int(ids.max())} outside [0, {num_nodes})")
    if len(block) and not (np.array_equal(ids[ptr[:-1]], block.src) and np.array_equal(ids[ptr[:-1] + 1], block.dst)):
        bad("local ids 0 and 1 are not the link's endpoints")
    label = block.label
    if regression and not np.isfinite(label).all():
        bad(f"label {label[~np.isfinite(label)][0]} is not finite")
    if not regression and not ((label == 0) | (label == 1)).all():
        bad(f"label {label[(label != 0) & (label != 1)][0]} is not 0 or 1")


# ---------------------------------------------------------------------------- shard files
class _Hashing:
    """A write-only file wrapper that counts and hashes what passes through (tarfile needs tell())."""

    def __init__(self, f: BinaryIO):
        self.f, self.sha, self.count = f, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.sha.update(data)
        self.count += len(data)
        return self.f.write(data)

    def tell(self) -> int:
        return self.count


class ShardWriter:
    """Streams blocks into one shard tar as they are produced, so a shard task holds one block at a time.
    Members `<block:06d>.arrow`, mtime 0: the bytes depend only on the blocks (reproducible)."""

    def __init__(self, f: BinaryIO):
        self._out = _Hashing(f)
        self._tar = tarfile.open(fileobj=self._out, mode="w", format=tarfile.USTAR_FORMAT)
        self.stats = {"links": 0, "tokens": 0, "blocks": 0}

    def add(self, block: Block) -> None:
        data = encode_block(block)
        info = tarfile.TarInfo(f"{self.stats['blocks']:06d}.{BLOCK_SUFFIX}")
        info.size, info.mtime, info.mode = len(data), 0, 0o644
        self._tar.addfile(info, io.BytesIO(data))
        self.stats["links"] += len(block)
        self.stats["tokens"] += block.tokens
        self.stats["blocks"] += 1

    def close(self) -> dict:
        self._tar.close()
        return {**self.stats, "bytes": self._out.count, "sha256": self._out.sha.hexdigest()}


def pack_shard(blocks: Iterable[Block]) -> tuple[bytes, dict]:
    """Blocks -> (tar bytes, stats): the in-memory form of ShardWriter (tests, small sets)."""
    buf = io.BytesIO()
    writer = ShardWriter(buf)
    for block in blocks:
        writer.add(block)
    stats = writer.close()  # before reading the buffer: close() writes the end-of-archive records
    return buf.getvalue(), stats


def iter_tar_blocks(fileobj, where: str) -> Iterator[Block]:
    """Yield the blocks of one shard tar stream; truncation or corruption names the shard."""
    try:
        with tarfile.open(fileobj=fileobj, mode="r|") as tar:
            for member in tar:
                # Every member is a block: skipping an unknown one would silently drop its links.
                if not member.isfile() or not member.name.endswith("." + BLOCK_SUFFIX):
                    raise ShardError(
                        f"{where}: unexpected member {member.name!r} (a shard holds only "
                        f"*.{BLOCK_SUFFIX} blocks); rerun preprocess to rebuild it"
                    )
                f = tar.extractfile(member)
                data = f.read() if f is not None else b""
                if len(data) != member.size:
                    raise ShardError(f"{where}: member {member.name} is truncated; rerun preprocess to rebuild it")
                yield decode_block(data, f"{where}:{member.name}")
    except tarfile.TarError as err:
        raise ShardError(
            f"{where}: not a readable tar ({err}); the shard is truncated or corrupt, rerun preprocess to rebuild it"
        ) from None


def read_shard(path: str | os.PathLike) -> Iterator[Block]:
    """Yield the blocks of one local shard file."""
    path = str(path)
    if not os.path.exists(path):
        raise ShardError(f"{path}: shard file is missing; rerun preprocess to rebuild the set")
    with open(path, "rb") as f:
        yield from iter_tar_blocks(f, path)


# ---------------------------------------------------------------------------- node ids (edge lists: user ids)
# The set file holding an edge list's user ids (row i = node i); read and written by common/node_ids.py.
# Manifest entry "node_ids": {"file", "count", "dtype"}, like "features"; absent without a mapping.
NODE_IDS = "node_ids.parquet"
