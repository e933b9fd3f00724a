"""A shard set's manifest.json: names, versions, reading and writing (the rules it must obey:
common/manifest_schema.py).

The manifest is written last, atomically: its presence means "complete". It records every file the readers
use with its sha256 (each shard in `shards`, every other file in `files`) and a `checksum` of its own
contents, so an edit by hand, a swapped file or a renamed shard is caught and named. common/shards.py
re-exports this API: it is the one format module readers and writers import.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable

from common import manifest_schema as schema
from common.manifest_record import Manifest
from common.storage import LocalStorage, is_remote, open_storage

FORMAT_NAME = "pencil-shards"
FORMAT_VERSION = 2
# Version 3 = version 2 + direction (docs/shard-format.md): `directed: true` and each graph's out-edge CSR. Only a
# directed set is written as 3, so an undirected set stays byte-identical to before (same cache key, still read by
# older builds), and an older build refuses a directed set in one line naming the version rather than read it
# as undirected.
DIRECTED_VERSION = 3
# Version 4 = version 3 + relation types (a typed set: knowledge graph): `relations` (names in id order), each
# graph's triple CSR with its relation array, a `rel` column in every block, `pos_rel` in the queries. Written only
# for typed sets (always directed), so every other set keeps its version, bytes and key.
TYPED_VERSION = 4
READ_VERSIONS = (FORMAT_VERSION, DIRECTED_VERSION, TYPED_VERSION)
MANIFEST = "manifest.json"
# What every manifest problem tells the user to do: a rerun repairs the set, --force rebuilds it from scratch.
REBUILD = "rerun `python -m preprocess` with the set's flags to repair it (--force rebuilds it from scratch)"


class ShardError(RuntimeError):
    """A shard or manifest that cannot be read; the message names the file."""


# ---------------------------------------------------------------------------- manifest
def file_record(data: bytes) -> dict:
    """The `files` entry of a file with these bytes."""
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def stored_file_records(storage, names: Iterable[str]) -> dict:
    """`files` entries of files already on `storage` (hashed by reading them back)."""
    out = {}
    for name in names:
        with storage.open_read(name) as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        out[name] = {"bytes": storage.size(name), "sha256": digest}
    return out


def write_manifest(storage: LocalStorage, manifest: dict) -> None:
    """Write the manifest last, atomically, with its checksum. `files` (sha256 of every non-shard file) is
    taken from `manifest` when given (preprocess hashes what it writes), else read back from `storage`.
    A manifest that breaks the schema is a bug of the writer: refused here, never written."""
    version = (
        TYPED_VERSION if manifest.get("relations") else DIRECTED_VERSION if manifest.get("directed") else FORMAT_VERSION
    )
    body = {"format": FORMAT_NAME, "version": version, "manifest_version": schema.MANIFEST_VERSION, **manifest}
    if body.get("files") is None:
        body["files"] = stored_file_records(storage, schema.set_files(body))
    body[schema.CHECKSUM] = schema.checksum(body)
    if problem := schema.schema_problem(body):
        raise ShardError(f"{storage.path(MANIFEST)}: refusing to write a malformed manifest ({problem})")
    storage.write_atomic(MANIFEST, json.dumps(body, indent=1, sort_keys=True).encode())


def parse_manifest(text: str, where: str, root: str) -> Manifest:
    """Check a manifest's format, versions, schema and checksum; the record of it, with `root` (the set's
    directory or URL). Every failure is one line naming the file, the field and the fix."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError as err:
        raise ShardError(f"{where}: manifest is not valid JSON ({err}); {REBUILD}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT_NAME:
        raise ShardError(f"{where}: not a {FORMAT_NAME} manifest")
    version = body.get("version")
    if version == 1:
        raise ShardError(
            f"{where}: shard format version 1 (stored edge lists) is no longer read; rerun "
            f"`python -m preprocess` with the same flags to rebuild it as version {FORMAT_VERSION}"
        )
    if version not in READ_VERSIONS:
        raise ShardError(
            f"{where}: shard format version {version} is not supported "
            f"(this build reads versions {', '.join(map(str, READ_VERSIONS))}); rebuild the shards with this version"
        )
    if (version == TYPED_VERSION) != bool(body.get("relations")):
        raise ShardError(
            f"{where}: shard format version {version} with relations={body.get('relations')!r} (version "
            f"{TYPED_VERSION} is exactly the typed sets); {REBUILD}"
        )
    if (version in (DIRECTED_VERSION, TYPED_VERSION)) != (body.get("directed") is True):
        raise ShardError(
            f"{where}: shard format version {version} with directed={body.get('directed')!r} (version "
            f"{DIRECTED_VERSION} is exactly the directed sets); {REBUILD}"
        )
    if body.get("manifest_version", 1) != schema.MANIFEST_VERSION:
        raise ShardError(
            f"{where}: manifest_version {body.get('manifest_version', 1)!r} is not "
            f"{schema.MANIFEST_VERSION} (older manifests carry no checksums); rerun `python -m preprocess` "
            "with the set's flags to upgrade it (its shards are checked and kept)"
        )
    if problem := schema.schema_problem(body):
        raise ShardError(f"{where}: field {problem}; {REBUILD}")
    if (digest := schema.checksum(body)) != body[schema.CHECKSUM]:
        raise ShardError(
            f"{where}: checksum mismatch (recorded {body[schema.CHECKSUM][:12]}…, contents "
            f"{digest[:12]}…): the manifest was edited or is corrupt; {REBUILD}"
        )
    return Manifest.from_dict(body, root)


def read_manifest(shard_dir: str | os.PathLike) -> Manifest:
    """Load and check a manifest; accepts the shard directory or the manifest path itself, local or a URL."""
    if is_remote(shard_dir):
        return _read_remote_manifest(str(shard_dir).rstrip("/"))
    path = Path(shard_dir)
    if path.is_dir():
        path = path / MANIFEST
    if not path.exists():
        raise ShardError(
            f"{path}: no manifest; the shard set is incomplete or the path is wrong "
            "(pass OUT/<dataset>/<cache key> as written by preprocess)"
        )
    return parse_manifest(path.read_text(), str(path), str(path.parent))


def _read_remote_manifest(url: str) -> Manifest:
    root = url.removesuffix("/" + MANIFEST)
    storage = open_storage(root)
    try:
        text = storage.read(MANIFEST).decode(errors="replace")
    except FileNotFoundError:
        raise ShardError(
            f"{storage.path(MANIFEST)}: no manifest; the shard set is incomplete or the URL is wrong "
            "(pass OUT/<dataset>/<cache key> as written by preprocess)"
        ) from None
    return parse_manifest(text, storage.path(MANIFEST), storage.url)


def shard_entries(manifest: Manifest, split: str, protocol: str | None = None, view: int | None = None) -> list[dict]:
    """Manifest shard records for one split (and protocol for eval, view for train)."""
    out = [
        s
        for s in manifest.shards
        if s["split"] == split
        and (protocol is None or s.get("protocol") == protocol)
        and (view is None or s.get("view") == view)
    ]
    return sorted(out, key=lambda s: s["name"])


def epoch_tokens(manifest: Manifest) -> int:
    """Tokens of the set's first training view: what an epoch trains, and near enough what it costs."""
    return sum(s["tokens"] for s in shard_entries(manifest, "train", view=0))


def set_graph(manifest: Manifest, split: str) -> str:
    """Which shipped graph ("train" / "test") the links of `split` were sampled on."""
    for s in manifest.sets:
        if s["split"] == split:
            return s["graph"]
    return "train"
