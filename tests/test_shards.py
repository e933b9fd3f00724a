"""The shard format (common/shards.py): exact round trips, reader refusals that name the file, manifest rules."""
import io
import json

import numpy as np
import pytest

from common import shards
from common.shards import Block, ShardError


def _block(offset=0, big=False) -> Block:
    # link 0: u=10, v=11, no other context; link 1: u=12, v=13 + node 14
    base = 70_000 if big else 0  # ids past 2**16 need a wider column type
    return Block(cid=np.array([0, 1]) + offset, src=np.array([10, 12]) + base, dst=np.array([11, 13]) + base,
                 label=np.array([1.0, 0.0], np.float32), node_ptr=np.array([0, 2, 5]),
                 nodes=np.array([10, 11, 12, 13, 14]) + base)


def _same(a: Block, b: Block) -> bool:
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("cid", "src", "dst", "label", "node_ptr", "nodes"))


@pytest.mark.parametrize("big", [False, True])
def test_block_round_trip_is_exact(big):
    block = _block(big=big)
    b = shards.decode_block(shards.encode_block(block))
    assert _same(b, block)
    assert b.sizes.tolist() == [2, 3]
    assert b.tokens == 5 + 2 * 2  # context tokens + two task tokens per link


def test_block_take_and_concat():
    a, b = _block(), _block(offset=2)
    both = Block.concat([a, b])
    assert both.cid.tolist() == [0, 1, 2, 3] and both.node_ptr.tolist() == [0, 2, 5, 7, 10]
    picked = both.take(np.array([3, 0]))
    assert picked.cid.tolist() == [3, 0] and picked.node_ptr.tolist() == [0, 3, 5]
    assert picked.nodes.tolist() == [12, 13, 14, 10, 11]
    assert _same(Block.concat([both.take(np.array([0, 1])), both.take(np.array([2, 3]))]), both)


def test_check_block_catches_corrupt_ids():
    ok = _block()
    shards.check_block(ok, num_nodes=15, n_max=3, where="s.tar:0")
    with pytest.raises(ShardError, match=r"s.tar:0: corrupt block \(node id 14 outside \[0, 14\)\)"):
        shards.check_block(ok, num_nodes=14, n_max=3, where="s.tar:0")
    with pytest.raises(ShardError, match="context nodes, outside"):
        shards.check_block(ok, num_nodes=15, n_max=2, where="s.tar:0")
    swapped = _block()
    swapped.nodes = np.array([11, 10, 12, 13, 14])
    with pytest.raises(ShardError, match="not the link's endpoints"):
        shards.check_block(swapped, num_nodes=15, n_max=3, where="s.tar:0")
    negative = _block()
    negative.nodes = np.array([10, 11, 12, 13, -5])
    with pytest.raises(ShardError, match="node id -5"):
        shards.check_block(negative, num_nodes=15, n_max=3, where="s.tar:0")


def test_shard_file_round_trip_and_stats(tmp_path):
    data, stats = shards.pack_shard([_block(), _block(offset=2)])
    assert stats["links"] == 4 and stats["blocks"] == 2 and stats["tokens"] == 18 and stats["bytes"] == len(data)
    path = tmp_path / shards.train_shard_name(0, 0)
    shards.open_storage(tmp_path).write_atomic(path.name, data)
    assert [c for b in shards.read_shard(path) for c in b.cid.tolist()] == [0, 1, 2, 3]
    shards.verify_shard(path, stats["sha256"])
    # Reproducible bytes: the same blocks give the same shard (tar mtimes are fixed).
    assert shards.pack_shard([_block(), _block(offset=2)])[0] == data


def test_streaming_writer_equals_in_memory_pack(tmp_path):
    data, stats = shards.pack_shard([_block(), _block(offset=2)])
    storage = shards.open_storage(tmp_path)
    with storage.writer("s.tar") as f:
        w = shards.ShardWriter(f)
        w.add(_block())
        w.add(_block(offset=2))
        streamed = w.close()
    assert (tmp_path / "s.tar").read_bytes() == data and streamed == stats


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
    with pytest.raises(ShardError, match="shard format version 3 is not supported"):
        shards.read_manifest(tmp_path)
    body["version"] = 1
    (tmp_path / shards.MANIFEST).write_text(json.dumps(body))
    with pytest.raises(ShardError, match=r"version 1 \(stored edge lists\) is no longer read; rerun `python -m preprocess`"):
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


def test_graph_ships_with_the_set_and_is_checked(tmp_path):
    from common.graph import Graph
    g = Graph.from_edges(np.array([[0, 1], [1, 2], [2, 3]]), num_nodes=5)
    storage = shards.open_storage(tmp_path)
    for name, arr in zip(shards.graph_names("train"), (g.indptr, g.indices)):
        storage.write_atomic(name, shards.encode_array(arr))
    manifest = {"root": str(tmp_path), "graphs": {"train": shards.graph_entry("train", g.indptr, g.indices)}}
    indptr, indices = shards.load_graph(manifest, "train", verify=True)
    assert np.array_equal(indptr, g.indptr) and np.array_equal(indices, g.indices)
    with pytest.raises(ShardError, match="ships no 'test' graph"):
        shards.load_graph(manifest, "test")
    other = Graph.from_edges(np.array([[0, 1], [1, 3], [2, 3]]), num_nodes=5)  # same shapes, other edges
    storage.write_atomic(shards.graph_names("train")[1], shards.encode_array(other.indices))
    shards.load_graph(manifest, "train")  # shapes agree: the cheap check passes
    with pytest.raises(ShardError, match="does not match the shards' fingerprint"):
        shards.load_graph(manifest, "train", verify=True)


def test_shard_entries_filter_and_sort():
    m = {"shards": [{"name": "train-v001-00000.tar", "split": "train", "protocol": None, "view": 1},
                    {"name": "train-v000-00001.tar", "split": "train", "protocol": None, "view": 0},
                    {"name": "train-v000-00000.tar", "split": "train", "protocol": None, "view": 0},
                    {"name": "valid-heart-00000.tar", "split": "valid", "protocol": "heart", "view": None}]}
    assert [s["name"] for s in shards.shard_entries(m, "train", view=0)] == ["train-v000-00000.tar", "train-v000-00001.tar"]
    assert [s["name"] for s in shards.shard_entries(m, "valid", "heart")] == ["valid-heart-00000.tar"]
