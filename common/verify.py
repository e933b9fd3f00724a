"""Does a shard set on storage still match its manifest? One check, used by both sides.

preprocess runs it on a cache hit (a bad shard is removed and sampled again, a bad graph, queries or
features file written again); the trainer runs it up front, sizes always and sha256 with `--verify`
(a bad set stops the run before any training, in one line). Every file the loader reads is in the
manifest with its size and sha256: shards in `shards`, the rest in `files`. Size is cheap (a stat or a
HEAD per file); sha256 (`checksums=True`) reads every byte.
"""

from __future__ import annotations

import hashlib

from common.shards import Manifest, ShardError, load_graph
from common.storage import open_storage


def file_problem(storage, name: str, size: int, sha256: str, checksums: bool = True) -> str | None:
    """What is wrong with file `name` on `storage` against its recorded size and sha256, or None."""
    have = storage.size(name)
    if have is None:
        return "missing"
    if have != size:
        return f"size {have} bytes, the manifest says {size} (truncated or replaced)"
    if checksums:
        sha = hashlib.sha256()
        with storage.open_read(name) as f:
            while chunk := f.read(1 << 20):
                sha.update(chunk)
        if sha.hexdigest() != sha256:
            return f"checksum mismatch (manifest {sha256[:12]}…, file {sha.hexdigest()[:12]}…)"
    return None


def shard_problem(storage, rec: dict, checksums: bool = True) -> str | None:
    """What is wrong with one manifest shard record on `storage`, or None."""
    return file_problem(storage, rec["name"], rec["bytes"], rec["sha256"], checksums)


def set_problems(manifest: Manifest, checksums: bool = True, storage=None) -> list[tuple[str, str, str]]:
    """Every mismatch between the set and its (schema-checked) manifest, as (kind, file, problem); kind is
    "shard" or "file" (graphs, queries, features). Empty when the set is whole."""
    storage = storage or open_storage(manifest.root)
    out = []
    for rec in manifest.shards:
        if problem := shard_problem(storage, rec, checksums):
            out.append(("shard", storage.path(rec["name"]), problem))
    for name, rec in sorted(manifest.files.items()):
        if problem := file_problem(storage, name, rec["bytes"], rec["sha256"], checksums):
            out.append(("file", storage.path(name), problem))
    if not out:  # the graph files are whole: their shapes must still be the manifest's
        for which in manifest.graphs:
            try:
                load_graph(manifest, which, verify=False)  # shapes: the bytes were just hashed (or sized)
            except ShardError as err:
                out.append(("file", storage.path(manifest.graphs[which]["indptr"]), _reason(err)))
    return out


def _reason(err: ShardError) -> str:
    return str(err).split("; rerun preprocess")[0].split(": ", 1)[-1]
