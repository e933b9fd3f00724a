"""The shard format (common/shards.py): exact round trips, reader refusals that name the file, manifest rules."""
import io
import json

import numpy as np
import pytest

from common import shards
from common.shards import Block, ShardError


def _block(offset=0) -> Block:
    # link 0: u=10, v=11, no context, no edges; link 1: u=12, v=13 + node 14, edges (0,2), (1,2)
    return Block(cid=np.array([0, 1]) + offset, src=np.array([10, 12]), dst=np.array([11, 13]),
                 label=np.array([1.0, 0.0], np.float32), node_ptr=np.array([0, 2, 5]),
                 nodes=np.array([10, 11, 12, 13, 14]), edge_ptr=np.array([0, 0, 2]), edges=np.array([[0, 2], [1, 2]]))


def test_block_round_trip_is_exact():
    b = shards.decode_block(shards.encode_block(_block()))
    samples = list(shards.block_samples(b))
    assert [s["cid"] for s in samples] == [0, 1]
    assert samples[1]["src"] == 12 and samples[1]["dst"] == 13 and samples[1]["label"] == 0.0
    assert samples[0]["nodes"].tolist() == [10, 11] and samples[0]["edges"].shape == (0, 2)
    assert samples[1]["nodes"].tolist() == [12, 13, 14]
    assert samples[1]["edges"].tolist() == [[0, 2], [1, 2]]
    assert b.tokens == 5 + 2 * 2  # context tokens + two task tokens per link


def test_shard_file_round_trip_and_stats(tmp_path):
    data, stats = shards.pack_shard([_block(), _block(offset=2)])
    assert stats["links"] == 4 and stats["blocks"] == 2 and stats["tokens"] == 18 and stats["bytes"] == len(data)
    path = tmp_path / shards.train_shard_name(0, 0)
    shards.open_storage(tmp_path).write_atomic(path.name, data)
    assert [s["cid"] for s in shards.read_shard(path)] == [0, 1, 2, 3]
    shards.verify_shard(path, stats["sha256"])
    # Reproducible bytes: the same blocks give the same shard (tar mtimes are fixed).
    assert shards.pack_shard([_block(), _block(offset=2)])[0] == data


def test_truncated_and_corrupt_shards_name_the_file(tmp_path):
    data, stats = shards.pack_shard([_block()])
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[:700])
    with pytest.raises(ShardError, match="cut.tar"):
        list(shards.read_shard(cut))
    bad = bytearray(data)
    bad[600:640] = b"\xff" * 40  # inside the Arrow payload of the first member
    broken = tmp_path / "broken.tar"
    broken.write_bytes(bytes(bad))
    with pytest.raises(ShardError, match=r"broken.tar:000000.arrow: corrupt block"):
        list(shards.read_shard(broken))
    with pytest.raises(ShardError, match="checksum mismatch"):
        shards.verify_shard(broken, stats["sha256"])
    with pytest.raises(ShardError, match="missing.tar: shard file is missing"):
        list(shards.read_shard(tmp_path / "missing.tar"))


def test_manifest_is_versioned_and_checked(tmp_path):
    storage = shards.open_storage(tmp_path)
    shards.write_manifest(storage, {"shards": [], "n_max": 42})
    m = shards.read_manifest(tmp_path)
    assert m["version"] == shards.FORMAT_VERSION and m["root"] == str(tmp_path)
    assert not list(tmp_path.glob(".*.tmp"))  # written through a temporary name, then renamed
    body = json.loads((tmp_path / shards.MANIFEST).read_text())
    body["version"] = shards.FORMAT_VERSION + 1
    (tmp_path / shards.MANIFEST).write_text(json.dumps(body))
    with pytest.raises(ShardError, match="shard format version 2 is not supported"):
        shards.read_manifest(tmp_path)
    with pytest.raises(ShardError, match="no manifest"):
        shards.read_manifest(tmp_path / "elsewhere")


def test_cache_key_depends_on_every_part():
    base = {"dataset": "citeseer", "sampling": [2, 20], "seed": 0}
    key = shards.cache_key(base)
    assert key == shards.cache_key(dict(reversed(list(base.items()))))  # order-free
    for change in ({"seed": 1}, {"sampling": [1, 20]}, {"dataset": "cora"}):
        assert shards.cache_key({**base, **change}) != key


def test_queries_round_trip(tmp_path):
    (tmp_path / "q.npz").write_bytes(shards.encode_queries(np.arange(3), np.arange(6).reshape(3, 2)))
    pos, neg = shards.load_queries(tmp_path / "q.npz")
    assert pos.tolist() == [0, 1, 2] and neg.shape == (3, 2)


def test_remote_urls_are_refused_clearly():
    with pytest.raises(ShardError, match="s3://bucket/x: remote output is not wired yet"):
        shards.open_storage("s3://bucket/x")


def test_shard_entries_filter_and_sort():
    m = {"shards": [{"name": "train-v001-00000.tar", "split": "train", "protocol": None, "view": 1},
                    {"name": "train-v000-00001.tar", "split": "train", "protocol": None, "view": 0},
                    {"name": "train-v000-00000.tar", "split": "train", "protocol": None, "view": 0},
                    {"name": "valid-heart-00000.tar", "split": "valid", "protocol": "heart", "view": None}]}
    assert [s["name"] for s in shards.shard_entries(m, "train", view=0)] == ["train-v000-00000.tar", "train-v000-00001.tar"]
    assert [s["name"] for s in shards.shard_entries(m, "valid", "heart")] == ["valid-heart-00000.tar"]
