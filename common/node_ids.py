"""The node-id mapping that ships with a shard set built from an edge-list file.

An edge list's node ids (integers of any size, or strings) are mapped to 0..N-1 when it is loaded
(common/datasets/ids.py); `node_ids[i]` is the user's id of node i. The set ships it as
`common.shards.NODE_IDS` (Parquet, one column `id`), listed in the manifest as
"node_ids": {"file", "count", "dtype"}, so outputs (pipelines.score) speak the user's ids.
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common.shards import NODE_IDS, Manifest, ShardError
from common.storage import is_remote, join, read_url


def encode_node_ids(node_ids: np.ndarray) -> bytes:
    """node_ids (N,) int64 / uint64 / str objects -> Parquet bytes with one column `id`."""
    arr = pa.array(node_ids, type=pa.string() if node_ids.dtype == object else None)
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": arr}), buf)
    return buf.getvalue()


def node_ids_entry(node_ids: np.ndarray) -> dict:
    """The manifest record of a shipped mapping."""
    return {
        "file": NODE_IDS,
        "count": int(len(node_ids)),
        "dtype": "string" if node_ids.dtype == object else str(node_ids.dtype),
    }


def load_node_ids(manifest: Manifest) -> np.ndarray | None:
    """The user's id of every node (index = node id in the shards), or None when the set ships none."""
    entry = manifest.node_ids
    if not entry:
        return None
    path = join(manifest.root, entry["file"])
    want = manifest.files.get(entry["file"], {}).get("sha256")
    try:  # read whole (it is small beside the graph) so the manifest's sha256 is always checked
        data = read_url(path) if is_remote(path) else open(path, "rb").read()
        if want is not None and (digest := hashlib.sha256(data).hexdigest()) != want:
            raise ShardError(
                f"{path}: checksum mismatch (manifest {want[:12]}…, file {digest[:12]}…); "
                "rerun preprocess to rewrite it"
            )
        ids = pq.read_table(io.BytesIO(data)).column("id").to_numpy(zero_copy_only=False)
    except (OSError, KeyError, pa.ArrowException) as err:
        raise ShardError(f"{path}: unreadable node-id file ({err}); rebuild the shard set with --force") from None
    if entry["dtype"] == "string":
        ids = ids.astype(object)
    if len(ids) != manifest.num_nodes or len(ids) != entry["count"]:
        raise ShardError(
            f"{path}: {len(ids)} node ids, the manifest says {manifest.num_nodes} nodes; "
            "rebuild the shard set with --force"
        )
    return ids
