"""The shard format: the only contract between preprocess/ (writer) and trainer/ (reader).

Layout of one dataset build, `<out>/<dataset>/<cache key>/`:

    train-v000-00000.tar ...        training shards of view 0 (independent negatives + subgraphs per view)
    valid-original-00000.tar ...    eval shards, one set per (split, protocol)
    valid-original-queries.npz      ranking structure of that eval set (pos_cid, neg_cid)
    features.npy                    node features (N, F) float32, only when built with --features
    manifest.json                   written last, atomically; its presence means "complete"

A shard is a WebDataset tar whose members are Arrow IPC streams, each one *block* of up to a few
hundred links (`<block:06d>.arrow`). Per-link tar members would cost a 512-byte header each, more
than the link itself. Columns of a block (FORMAT_VERSION 1):

    cid    int64         candidate id: index into this (split, protocol[, view]) candidate list
    src    int64         global id of u
    dst    int64         global id of v
    label  float32       1 / 0 (or a regression target)
    nodes  list<int32|int64>  global ids of the context nodes in local-id order (u = 0, v = 1)
    edges  list<uint16|uint32> local undirected edge list, flattened (a0, b0, a1, b1, ...), each edge once

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
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa

FORMAT_NAME = "pencil-shards"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
BLOCK_SUFFIX = "arrow"


class ShardError(RuntimeError):
    """A shard or manifest that cannot be read; the message names the file."""


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
    """A batch of sampled links in columnar form (what the sampler produces)."""

    cid: np.ndarray  # (B,) int64
    src: np.ndarray  # (B,) int64
    dst: np.ndarray  # (B,) int64
    label: np.ndarray  # (B,) float32
    node_ptr: np.ndarray  # (B+1,) int64 offsets into `nodes`
    nodes: np.ndarray  # (sum N_b,) global ids, local-id order per link
    edge_ptr: np.ndarray  # (B+1,) int64 offsets (in edges, not ints) into `edges`
    edges: np.ndarray  # (sum E_b, 2) local ids

    def __len__(self) -> int:
        return int(self.cid.shape[0])

    @property
    def tokens(self) -> int:
        """Sequence tokens this block feeds the model: N_b context + 2 task tokens per link."""
        return int(self.node_ptr[-1]) + 2 * len(self)


def _edge_type(max_local: int):
    return pa.uint16() if max_local < 2**16 else pa.uint32()


def encode_block(block: Block) -> bytes:
    """Block -> Arrow IPC stream bytes (one tar member)."""
    nodes = np.ascontiguousarray(block.nodes)
    node_type = pa.int32() if (nodes.size == 0 or nodes.max() < 2**31) else pa.int64()
    edges = np.ascontiguousarray(block.edges).reshape(-1)
    etype = _edge_type(int(edges.max()) if edges.size else 0)
    node_col = pa.ListArray.from_arrays(
        pa.array(block.node_ptr.astype(np.int32)), pa.array(nodes.astype(node_type.to_pandas_dtype())))
    edge_col = pa.ListArray.from_arrays(
        pa.array((block.edge_ptr * 2).astype(np.int32)), pa.array(edges.astype(etype.to_pandas_dtype())))
    table = pa.record_batch(
        [pa.array(block.cid.astype(np.int64)), pa.array(block.src.astype(np.int64)),
         pa.array(block.dst.astype(np.int64)), pa.array(block.label.astype(np.float32)), node_col, edge_col],
        names=["cid", "src", "dst", "label", "nodes", "edges"])
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_batch(table)
    return sink.getvalue()


def decode_block(data: bytes, where: str = "<bytes>") -> Block:
    """Arrow IPC stream bytes -> Block; a corrupt member raises ShardError naming `where`."""
    try:
        with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
            batch = reader.read_all().combine_chunks().to_batches()[0]
        cols = {name: batch.column(name) for name in ("cid", "src", "dst", "label", "nodes", "edges")}
    except (pa.ArrowException, OSError, KeyError, IndexError, ValueError) as err:
        raise ShardError(f"{where}: corrupt block ({err}); delete the shard set and rerun preprocess") from None
    nodes, edges = cols["nodes"], cols["edges"]
    return Block(
        cid=cols["cid"].to_numpy(), src=cols["src"].to_numpy(), dst=cols["dst"].to_numpy(),
        label=cols["label"].to_numpy(),
        node_ptr=nodes.offsets.to_numpy().astype(np.int64), nodes=nodes.values.to_numpy().astype(np.int64),
        edge_ptr=edges.offsets.to_numpy().astype(np.int64) // 2,
        edges=edges.values.to_numpy().astype(np.int64).reshape(-1, 2))


def block_samples(block: Block) -> Iterator[dict]:
    """One dict per link: cid, src, dst, label, nodes (N,) int64, edges (E, 2) int64."""
    for i in range(len(block)):
        yield {
            "cid": int(block.cid[i]), "src": int(block.src[i]), "dst": int(block.dst[i]),
            "label": float(block.label[i]),
            "nodes": block.nodes[block.node_ptr[i]:block.node_ptr[i + 1]],
            "edges": block.edges[block.edge_ptr[i]:block.edge_ptr[i + 1]],
        }


# ---------------------------------------------------------------------------- storage
class LocalStorage:
    """Filesystem operations the writer needs. A remote backend (fsspec, pyarrow.fs) implements the
    same five methods; nothing in the sampler knows which one it writes to."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def path(self, name: str) -> str:
        return str(self.root / name)

    def exists(self, name: str) -> bool:
        return (self.root / name).exists()

    def write_atomic(self, name: str, data: bytes) -> None:
        """Write under a temporary name, fsync, then rename: readers never see half a file."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{name}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.root / name)

    def read(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def remove(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)


def open_storage(url: str | os.PathLike) -> LocalStorage:
    url = str(url)
    if "://" in url and not url.startswith("file://"):
        raise ShardError(f"{url}: remote output is not wired yet; only local paths (or file://) are supported")
    return LocalStorage(url.removeprefix("file://"))


# ---------------------------------------------------------------------------- shard files
def pack_shard(blocks: Iterable[Block]) -> tuple[bytes, dict]:
    """Blocks -> (tar bytes, stats). Members `<block:06d>.arrow`, mtime 0 so output is reproducible."""
    buf = io.BytesIO()
    stats = {"links": 0, "tokens": 0, "blocks": 0}
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i, block in enumerate(blocks):
            data = encode_block(block)
            info = tarfile.TarInfo(f"{i:06d}.{BLOCK_SUFFIX}")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
            stats["links"] += len(block)
            stats["tokens"] += block.tokens
            stats["blocks"] += 1
    data = buf.getvalue()
    stats["bytes"] = len(data)
    stats["sha256"] = hashlib.sha256(data).hexdigest()
    return data, stats


def iter_tar_blocks(fileobj, where: str) -> Iterator[Block]:
    """Yield the blocks of one shard tar stream; truncation or corruption names the shard."""
    try:
        with tarfile.open(fileobj=fileobj, mode="r|") as tar:
            for member in tar:
                if not member.isfile() or not member.name.endswith("." + BLOCK_SUFFIX):
                    continue
                f = tar.extractfile(member)
                data = f.read() if f is not None else b""
                if len(data) != member.size:
                    raise ShardError(f"{where}: member {member.name} is truncated")
                yield decode_block(data, f"{where}:{member.name}")
    except tarfile.TarError as err:
        raise ShardError(f"{where}: not a readable tar ({err}); the shard is truncated or corrupt") from None


def read_shard(path: str | os.PathLike) -> Iterator[dict]:
    """Yield the link samples of one local shard file."""
    path = str(path)
    if not os.path.exists(path):
        raise ShardError(f"{path}: shard file is missing; rerun preprocess to rebuild the set")
    with open(path, "rb") as f:
        for block in iter_tar_blocks(f, path):
            yield from block_samples(block)


def verify_shard(path: str | os.PathLike, sha256: str) -> None:
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    if digest != sha256:
        raise ShardError(f"{path}: checksum mismatch (manifest {sha256[:12]}…, file {digest[:12]}…); rebuild with --force")


# ---------------------------------------------------------------------------- queries (eval ranking structure)
def encode_queries(pos_cid: np.ndarray, neg_cid: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, pos_cid=pos_cid.astype(np.int64), neg_cid=neg_cid.astype(np.int64))
    return buf.getvalue()


def load_queries(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path) as z:
            return z["pos_cid"], z["neg_cid"]
    except (OSError, KeyError, ValueError) as err:
        raise ShardError(f"{path}: unreadable query file ({err}); rebuild the shard set with --force") from None


# ---------------------------------------------------------------------------- node features
FEATURES = "features.npy"


def encode_features(x: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(x, dtype=np.float32))
    return buf.getvalue()


def load_features(manifest: dict) -> np.ndarray | None:
    """The shard set's node-feature table (N, F) float32, or None when it was built without features."""
    entry = manifest.get("features")
    if not entry:
        return None
    path = Path(manifest["root"]) / entry["file"]
    try:
        x = np.load(path)
    except (OSError, ValueError) as err:
        raise ShardError(f"{path}: unreadable feature table ({err}); rebuild the shard set with --force") from None
    if x.shape != (manifest["num_nodes"], entry["dim"]):
        raise ShardError(f"{path}: feature table has shape {x.shape}, the manifest says "
                         f"({manifest['num_nodes']}, {entry['dim']}); rebuild the shard set with --force")
    return x


# ---------------------------------------------------------------------------- manifest
def write_manifest(storage: LocalStorage, manifest: dict) -> None:
    body = {"format": FORMAT_NAME, "version": FORMAT_VERSION, **manifest}
    storage.write_atomic(MANIFEST, json.dumps(body, indent=1, sort_keys=True).encode())


def read_manifest(shard_dir: str | os.PathLike) -> dict:
    """Load and check a manifest; accepts the shard directory or the manifest path itself."""
    path = Path(shard_dir)
    if path.is_dir():
        path = path / MANIFEST
    if not path.exists():
        raise ShardError(f"{path}: no manifest; the shard set is incomplete or the path is wrong "
                         "(pass OUT/<dataset>/<cache key> as written by preprocess)")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ShardError(f"{path}: manifest is not valid JSON ({err})") from None
    if manifest.get("format") != FORMAT_NAME:
        raise ShardError(f"{path}: not a {FORMAT_NAME} manifest")
    if manifest.get("version") != FORMAT_VERSION:
        raise ShardError(f"{path}: shard format version {manifest.get('version')} is not supported "
                         f"(this build reads version {FORMAT_VERSION}); rebuild the shards with this version")
    manifest["root"] = str(path.parent)
    return manifest


def shard_entries(manifest: dict, split: str, protocol: str | None = None, view: int | None = None) -> list[dict]:
    """Manifest shard records for one split (and protocol for eval, view for train)."""
    out = [s for s in manifest["shards"] if s["split"] == split
           and (protocol is None or s.get("protocol") == protocol)
           and (view is None or s.get("view") == view)]
    return sorted(out, key=lambda s: s["name"])
