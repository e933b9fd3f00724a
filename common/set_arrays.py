"""The arrays a shard set ships beside its shards (common/shards.py): the graphs its links were sampled on (CSR,
with a directed set's out-edges and a typed set's triples), each eval set's queries, the node features; and the
sha256 check every file of a set passes before it is read. Imported through common.shards, the format's one door.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import BinaryIO

import numpy as np

from common.manifest import Manifest, ShardError
from common.storage import is_remote, join, local_file, read_url


# ---------------------------------------------------------------------------- file names
def rel_graph_names(which: str) -> tuple[str, str, str]:
    """File names of a typed set's triple CSR of graph `which` (format version 4): row h holds every tail t of a
    triple (h, r, t), sorted by (t, r), with the relations r aligned (a pair may repeat with another relation)."""
    return tuple(f"graph-{which}-rel-{part}.npy" for part in ("indptr", "indices", "relation"))


def graph_names(which: str, out: bool = False) -> tuple[str, str]:
    """File names of the (indptr, indices) arrays of graph `which` ("train" or "test"); out=True: of its out-edge
    CSR (a directed set's, format version 3)."""
    tag = f"{which}-out" if out else which
    return f"graph-{tag}-indptr.npy", f"graph-{tag}-indices.npy"


def times_name(which: str) -> str:
    """File name of a temporal set's edge times of graph `which`: each CSR entry's first time (float64)."""
    return f"graph-{which}-times.npy"


# ---------------------------------------------------------------------------- integrity
def file_sha256(f: BinaryIO) -> str:
    return hashlib.file_digest(f, "sha256").hexdigest()


def verify_shard(path: str | os.PathLike, sha256: str) -> None:
    with open(path, "rb") as f:
        digest = file_sha256(f)
    if digest != sha256:
        raise ShardError(
            f"{path}: checksum mismatch (manifest {sha256[:12]}…, file {digest[:12]}…); rerun preprocess to rebuild it"
        )


# ---------------------------------------------------------------------------- graph (ships with the set)
def encode_array(x: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(x))
    return buf.getvalue()


def graph_entry(which: str, indptr: np.ndarray, indices: np.ndarray, out=None, rel=None, times=None) -> dict:
    """The manifest record of one shipped graph: file names and shapes (their sha256 are in `files`); `out`, a
    directed set's out-edge CSR (common.graph.DiGraph), adds its record under "out"; `times`, a temporal set's
    (edge times, end) (LinkDataset.edge_times), its file and the time the graph ends at under "times"."""
    ip, ix = graph_names(which)
    entry = {"indptr": ip, "indices": ix, "num_nodes": int(indptr.shape[0] - 1), "num_entries": int(indices.shape[0])}
    if out is not None:
        op, ox = graph_names(which, out=True)
        entry["out"] = {"indptr": op, "indices": ox, "num_entries": int(out.indices.shape[0])}
    if rel is not None:  # a typed set's triple CSR (indptr, indices, relation): rel_graph_names
        rp, rx, rr = rel_graph_names(which)
        entry["rel"] = {"indptr": rp, "indices": rx, "relation": rr, "num_entries": int(rel[1].shape[0])}
    if times is not None:
        entry["times"] = {"file": times_name(which), "end": float(times[1])}
    return entry


def load_graph(manifest: Manifest, which: str = "train", verify: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(indptr int64, indices) of a shipped graph, memory-mapped: loader workers share the page cache.

    Shapes are always checked against the manifest, and content against its sha256 unless verify=False
    (a caller that has just hashed the files): every subgraph of every split is induced from these arrays."""
    graphs = manifest.graphs
    if which not in graphs:
        raise ShardError(
            f"{manifest.root}: the manifest ships no '{which}' graph (has: "
            f"{', '.join(sorted(graphs)) or 'none'}); rerun preprocess to rebuild the set"
        )
    return _load_csr(manifest, which, graphs[which], graphs[which]["num_entries"], verify)


def load_out_graph(manifest: Manifest, which: str = "train", verify: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of a directed set's out-edge CSR of graph `which`, checked like load_graph's
    (common.graph.set_directed_graph wraps it)."""
    load_graph(manifest, which, verify=False)  # the same "no such graph" message
    out = manifest.graphs[which].get("out")
    if not manifest.directed or out is None:
        raise ShardError(f"{manifest.root}: an undirected set ships no out-edge graph; rebuild it with --directed")
    entry = {**out, "num_nodes": manifest.graphs[which]["num_nodes"]}
    return _load_csr(manifest, f"{which}-out", entry, out["num_entries"], verify)


def load_rel_graph(manifest: Manifest, which: str = "train", verify: bool = True) -> tuple[np.ndarray, ...]:
    """(indptr, indices, relation) of a typed set's triple CSR of graph `which`, checked like load_graph's."""
    load_graph(manifest, which, verify=False)  # the same "no such graph" message
    rel = manifest.graphs[which].get("rel")
    if not manifest.relations or rel is None:
        raise ShardError(f"{manifest.root}: an untyped set ships no relation graph; rebuild it from typed triples")
    entry = {**rel, "num_nodes": manifest.graphs[which]["num_nodes"]}
    indptr, indices = _load_csr(manifest, f"{which}-rel", entry, rel["num_entries"], verify)
    relation = _load_csr(manifest, f"{which}-rel", {**entry, "indices": rel["relation"]}, rel["num_entries"], verify)[1]
    return indptr, indices, relation


def load_edge_times(manifest: Manifest, which: str = "train", verify: bool = True) -> tuple[np.ndarray, float]:
    """(times aligned with graph `which`'s indices, the time the graph ends at) of a temporal set, checked like
    load_graph's; a set without them (no time column, or built before they shipped) is refused in one line."""
    load_graph(manifest, which, verify=False)  # the same "no such graph" message
    rec = manifest.graphs[which].get("times")
    if rec is None:
        raise ShardError(
            f"{manifest.root}: the set ships no edge times (its dataset has no time column, or preprocess predates "
            "them); rerun preprocess on a file with a `time` column, or drop --time-features"
        )
    entry = {"indptr": manifest.graphs[which]["indptr"], "indices": rec["file"], "num_nodes": manifest.num_nodes}
    return _load_csr(manifest, f"{which}-times", entry, manifest.graphs[which]["num_entries"], verify)[1], rec["end"]


def _load_csr(manifest: Manifest, which: str, entry: dict, entries: int, verify: bool):
    root = manifest.root
    try:  # a remote set's arrays are fetched once into the local cache, then memory-mapped
        paths = [local_file(join(root, entry[part])) for part in ("indptr", "indices")]
        records = manifest.files  # read_manifest's schema guarantees one per graph file
        for path, part in zip(paths, ("indptr", "indices")) if verify else ():
            if entry[part] in records:
                verify_shard(path, records[entry[part]]["sha256"])
        indptr, indices = (np.load(path, mmap_mode="r") for path in paths)
    except (OSError, ValueError) as err:
        raise ShardError(
            f"{root}: graph '{which}' is unreadable ({err}); rerun preprocess to rebuild the set"
        ) from None
    if indptr.shape != (entry["num_nodes"] + 1,) or indices.shape != (entries,):
        raise ShardError(
            f"{root}: graph '{which}' does not have the manifest's shape "
            "(replaced or corrupt graph file); rerun preprocess to rebuild the set"
        )
    return indptr, indices


# ---------------------------------------------------------------------------- queries (eval ranking structure)
def encode_queries(pos_cid: np.ndarray, neg_cid: np.ndarray, pos_rel: np.ndarray | None = None) -> bytes:
    """A typed set's queries (version 4) also hold `pos_rel`, each positive's relation (per-relation metrics);
    its neg_cid may hold -1: a padded corruption, no candidate."""
    buf = io.BytesIO()
    extra = {} if pos_rel is None else {"pos_rel": np.asarray(pos_rel, dtype=np.int64)}
    np.savez(buf, pos_cid=pos_cid.astype(np.int64), neg_cid=neg_cid.astype(np.int64), **extra)
    return buf.getvalue()


def load_queries(path: str | os.PathLike, sha256: str | None = None, relations: bool = False) -> tuple[np.ndarray, ...]:
    """pos_cid, neg_cid of one eval set; `path` is a local path or a URL (s3://...). With `sha256` (the
    manifest's) the bytes are checked first: the file is read whole anyway, so the check is always on.
    relations=True: also pos_rel (a typed set's), None for an untyped one."""
    try:  # remote: read the object itself, not a cached copy (a cache keyed by size could hide corruption)
        data = read_url(path) if is_remote(path) else Path(path).read_bytes()
        if sha256 is not None and (digest := hashlib.sha256(data).hexdigest()) != sha256:
            raise ShardError(
                f"{path}: checksum mismatch (manifest {sha256[:12]}…, file {digest[:12]}…); "
                "rerun preprocess to rewrite it"
            )
        with np.load(io.BytesIO(data)) as z:
            if relations:
                return z["pos_cid"], z["neg_cid"], (z["pos_rel"] if "pos_rel" in z.files else None)
            return z["pos_cid"], z["neg_cid"]
    except (OSError, KeyError, ValueError, EOFError) as err:
        raise ShardError(
            f"{path}: unreadable query file ({err}); rerun preprocess with --force to rebuild it"
        ) from None


# ---------------------------------------------------------------------------- node features
FEATURES = "features.npy"


def encode_features(x: np.ndarray) -> bytes:
    return encode_array(np.asarray(x, dtype=np.float32))


def load_features(manifest: Manifest) -> np.ndarray | None:
    """The shard set's node-feature table (N, F) float32, or None when it was built without features."""
    entry = manifest.features
    if not entry:
        return None
    path = join(manifest.root, entry["file"])
    try:
        x = np.load(local_file(path))
    except (OSError, ValueError) as err:
        raise ShardError(f"{path}: unreadable feature table ({err}); rebuild the shard set with --force") from None
    if x.shape != (manifest.num_nodes, entry["dim"]):
        raise ShardError(
            f"{path}: feature table has shape {x.shape}, the manifest says "
            f"({manifest.num_nodes}, {entry['dim']}); rebuild the shard set with --force"
        )
    return x
