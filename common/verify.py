"""Does a shard set on storage still match its manifest? One check, used by both sides.

preprocess runs it on a cache hit (a bad shard is removed and sampled again); the trainer runs it up
front with `--verify` (a bad set stops the run before any training, in one line). A shard is checked
by size (cheap, always) and by sha256 (`checksums=True`: reads every byte); the shipped graphs by
their shapes and, with checksums, their content fingerprint; the eval query files by presence and,
with checksums, a full load (citation2's are ~0.7 GB, so only on a full check).
"""
from __future__ import annotations

import hashlib

from common.shards import ShardError, load_graph, load_queries
from common.storage import open_storage


def shard_problem(storage, rec: dict, checksums: bool = True) -> str | None:
    """What is wrong with one manifest shard record on `storage`, or None."""
    size = storage.size(rec["name"])
    if size is None:
        return "missing"
    if size != rec["bytes"]:
        return f"size {size} bytes, the manifest says {rec['bytes']} (truncated or replaced)"
    if checksums:
        sha = hashlib.sha256()
        with storage.open_read(rec["name"]) as f:
            while chunk := f.read(1 << 20):
                sha.update(chunk)
        if sha.hexdigest() != rec["sha256"]:
            return f"checksum mismatch (manifest {rec['sha256'][:12]}…, file {sha.hexdigest()[:12]}…)"
    return None


def set_problems(manifest: dict, checksums: bool = True, storage=None) -> list[tuple[str, str, str]]:
    """Every mismatch between the set and its manifest, as (kind, file, problem); kind is "shard",
    "graph" or "queries". Empty when the set is whole."""
    storage = storage or open_storage(manifest["root"])
    out = []
    for rec in manifest.get("shards", []):
        if problem := shard_problem(storage, rec, checksums):
            out.append(("shard", storage.path(rec["name"]), problem))
    for which in manifest.get("graphs") or {}:
        try:
            load_graph(manifest, which, verify=checksums)
        except ShardError as err:
            out.append(("graph", which, _reason(err)))
    for entry in (manifest.get("eval") or {}).values():
        where = storage.path(entry["queries"])
        try:
            if checksums:
                load_queries(where)
            elif storage.size(entry["queries"]) is None:
                out.append(("queries", where, "missing"))
        except ShardError as err:
            out.append(("queries", where, _reason(err)))
    return out


def _reason(err: ShardError) -> str:
    return str(err).split("; rerun preprocess")[0]
