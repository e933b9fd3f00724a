"""The shard format (common/shards.py): exact round trips, reader refusals that name the file, manifest rules."""

import io
import json
import re

import numpy as np
import pytest

from common import manifest_schema, shards
from common.shards import Block, ShardError


def _block(offset=0, big=False) -> Block:
    # link 0: u=10, v=11, no other context; link 1: u=12, v=13 + node 14
    base = 70_000 if big else 0  # ids past 2**16 need a wider column type
    return Block(
        cid=np.array([0, 1]) + offset,
        src=np.array([10, 12]) + base,
        dst=np.array([11, 13]) + base,
        label=np.array([1.0, 0.0], np.float32),
        node_ptr=np.array([0, 2, 5]),
        nodes=np.array([10, 11, 12, 13, 14]) + base,
    )


def _same(a: Block, b: Block) -> bool:
    return all(
        np.array_equal(getattr(a, k), getattr(b, k)) for k in ("cid", "src", "dst", "label", "node_ptr", "nodes")
    )


@pytest.mark.parametrize("big", [False, True])
def test_block_round_trip_is_exact(big):
    block = _block(big=big)
    b = shards.decode_block(shards.encode_block(block))
    assert _same(b, block)
    assert b.sizes.tolist() == [2, 3]
    assert b.tokens == 5 + 2 * 2  # context tokens + two task tokens per link


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint16", "float32"])
def test_numpy_view_equals_pyarrows_to_numpy_on_slices(dtype):
    """numpy_view (no pandas import) against pyarrow's own to_numpy, on arrays and list offsets that start past
    their buffers' first element, as slices and a combined batch's columns do."""
    import pyarrow as pa

    values = pa.array(np.arange(20).astype(dtype))
    lists = pa.ListArray.from_arrays(pa.array([0, 2, 5, 9, 14, 20], pa.int32()), values)
    for arr in (values, values.slice(3, 9), lists.slice(2, 3).offsets, lists.slice(1).values):
        got = shards.numpy_view(arr)
        assert got.dtype == arr.to_numpy().dtype and np.array_equal(got, arr.to_numpy())
        assert not got.flags.writeable  # a view of Arrow's buffer, as to_numpy's
    for bad in (pa.array([1, None, 3]), pa.array([True, False])):  # nulls; bit-packed booleans
        with pytest.raises(ValueError, match="never null"):
            shards.numpy_view(bad)


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


def _small_set(tmp_path):
    from tests.test_trainer_data import make_shard_set

    return make_shard_set(tmp_path / "set", shard_links=(8, 8), views=1, eval_links=6)


def _edit(root, change, rehash=False) -> None:
    path = root / shards.MANIFEST
    body = json.loads(path.read_text())
    change(body)
    if rehash:  # a checksum recomputed after the edit must not hide a schema violation
        body["checksum"] = manifest_schema.checksum(body)
    path.write_text(json.dumps(body))


def test_manifest_is_versioned_and_checked(tmp_path):
    root = _small_set(tmp_path)
    m = shards.read_manifest(root)
    assert (
        m.to_dict()["version"] == shards.FORMAT_VERSION and m.root == str(root) and m.to_dict()["manifest_version"] == 2
    )
    assert m.checksum == manifest_schema.checksum(m.to_dict())  # over the canonical JSON, `root` excluded
    assert not list(root.glob(".*.tmp"))  # written through a temporary name, then renamed
    _edit(root, lambda b: b.update(version=shards.TYPED_VERSION + 1))
    with pytest.raises(ShardError, match="shard format version 5 is not supported"):
        shards.read_manifest(root)
    _edit(root, lambda b: b.update(version=shards.TYPED_VERSION))  # 4 is the typed sets' version only
    with pytest.raises(ShardError, match="shard format version 4 with relations=None"):
        shards.read_manifest(root)
    _edit(root, lambda b: b.update(version=shards.DIRECTED_VERSION))  # 3 is the directed sets' version only
    with pytest.raises(ShardError, match="shard format version 3 with directed=None"):
        shards.read_manifest(root)
    _edit(root, lambda b: b.update(version=1))
    with pytest.raises(
        ShardError, match=r"version 1 \(stored edge lists\) is no longer read; rerun `python -m preprocess`"
    ):
        shards.read_manifest(root)
    _edit(root, lambda b: (b.update(version=2), b.pop("manifest_version")))  # a set written before checksums
    with pytest.raises(
        ShardError,
        match=r"manifest_version 1 is not 2 .*rerun `python -m preprocess` with the "
        r"set's flags to upgrade it",
    ):
        shards.read_manifest(root)
    with pytest.raises(ShardError, match="no manifest"):
        shards.read_manifest(tmp_path / "elsewhere")


def _dup(b):
    b["shards"].append(dict(b["shards"][0]))


# (id, edit, text naming the field): each must be refused in one line naming the file, the field and the fix
SCHEMA_CASES = [
    ("no-shards", lambda b: b.pop("shards"), "field shards: missing or not a list"),
    ("empty-shards", lambda b: b.update(shards=[]), "field shards: the list is empty"),
    ("duplicate", _dup, r"field shards\[\d+\]\.name: \S+\.tar is listed twice"),
    ("dropped", lambda b: b["shards"].pop(), r"field shards: set test/original has 1 shard entries, sets\[\d\] says 2"),
    (
        "links-abc",
        lambda b: b["shards"][0].update(links="abc"),
        r"field shards\[0\] \(\S+\)\.links: 'abc' is not an integer",
    ),
    (
        "links-huge",
        lambda b: b["shards"][0].update(links=10**12),
        r"field shards\[0\] \(\S+\)\.links: 1000000000000 is outside \[1, 2147483648\]",
    ),
    (
        "evil-name",
        lambda b: b["shards"][0].update(name="../../evil.tar"),
        r"field shards\[0\]\.name: '\.\./\.\./evil\.tar' is not a plain \.tar file name inside the set",
    ),
    ("absolute-name", lambda b: b["shards"][0].update(name="/etc/evil.tar"), r"'/etc/evil\.tar' is not a plain"),
    (
        "no-queries-sha",
        lambda b: b["files"].pop("valid-original-queries.npz"),
        "field files: no sha256 for valid-original-queries.npz",
    ),
    ("bad-sha", lambda b: b["shards"][0].update(sha256="x"), r"\.sha256: 'x' is not a sha256"),
    ("views-missing-shards", lambda b: b.update(views=3), "no shard for training view 1"),
    ("num-nodes", lambda b: b.update(num_nodes=-5), r"field num_nodes: -5 is outside \[1, "),
]


@pytest.mark.parametrize("rehash", [False, True], ids=["edited", "edited-and-rehashed"])
@pytest.mark.parametrize("change,text", [c[1:] for c in SCHEMA_CASES], ids=[c[0] for c in SCHEMA_CASES])
def test_manifest_schema_errors_name_file_field_and_fix(tmp_path, change, text, rehash):
    root = _small_set(tmp_path)
    _edit(root, change, rehash)
    with pytest.raises(ShardError) as err:  # never a bare KeyError / TypeError
        shards.read_manifest(root)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{root / shards.MANIFEST}: "), line
    assert re.search(text, line) and line.endswith(shards.REBUILD), line


def test_manifest_checksum_catches_a_well_formed_edit(tmp_path):
    root = _small_set(tmp_path)
    _edit(
        root, lambda b: b["eval"]["valid/original"].update(metric="hits@50")
    )  # schema-valid, but not what was written
    with pytest.raises(
        ShardError,
        match=r"manifest\.json: checksum mismatch \(recorded [0-9a-f]{12}…, contents "
        r"[0-9a-f]{12}…\): the manifest was edited or is corrupt; rerun `python -m",
    ):
        shards.read_manifest(root)


def test_writer_refuses_a_malformed_manifest(tmp_path):
    with pytest.raises(ShardError, match=r"refusing to write a malformed manifest \(num_nodes: missing\)"):
        shards.write_manifest(shards.open_storage(tmp_path), {"shards": [], "n_max": 42})
    assert not (tmp_path / shards.MANIFEST).exists()


def test_unexpected_tar_member_is_an_error_naming_shard_and_member(tmp_path):
    import tarfile

    data, _ = shards.pack_shard([_block()])
    buf = io.BytesIO(data[:-1024])  # without the end-of-archive records: append one more member
    path = tmp_path / "train-v000-00000.tar"
    with (
        tarfile.open(fileobj=io.BytesIO(data), mode="r") as src,
        tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar,
    ):
        for m in src.getmembers():
            tar.addfile(m, src.extractfile(m))
        info = tarfile.TarInfo("notes.txt")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"hi!\n"))
    del buf
    with pytest.raises(
        ShardError, match=rf"{path}: unexpected member 'notes\.txt' \(a shard holds only \*\.arrow blocks\)"
    ):
        list(shards.read_shard(path))


@pytest.mark.parametrize(
    "label,regression,text",
    [
        (7.0, False, "label 7.0 is not 0 or 1"),
        (float("nan"), False, "label nan is not 0 or 1"),
        (float("nan"), True, "label nan is not finite"),
        (float("inf"), True, "label inf is not finite"),
    ],
)
def test_labels_are_range_checked_naming_the_shard(tmp_path, label, regression, text):
    from trainer.data.block_stream import read_blocks
    from trainer.data.stream import Unit

    b = _block()
    b.label[1] = label
    data, stats = shards.pack_shard([b])
    path = tmp_path / "train-v000-00000.tar"
    path.write_bytes(data)
    with pytest.raises(ShardError, match=rf"{path}:000000\.arrow: corrupt block \({text}\)"):
        list(read_blocks([Unit(str(path), 0, 1, 2, stats["tokens"])], 100, 8, regression))
    b.label[1] = 7.0 if regression else 1.0  # a regression target may be any finite value
    path.write_bytes(shards.pack_shard([b])[0])
    assert len(list(read_blocks([Unit(str(path), 0, 1, 2, stats["tokens"])], 100, 8, regression))) == 1


def test_reader_catches_a_shard_holding_other_cids(tmp_path):
    from trainer.data.block_stream import read_blocks
    from trainer.data.stream import Unit

    path = tmp_path / "train-v000-00001.tar"
    path.write_bytes(shards.pack_shard([_block()])[0])  # cids 0, 1: the first shard's, under the second's name
    with pytest.raises(
        ShardError,
        match=rf"{path}:000000\.arrow: holds candidate ids 0\.\., the manifest puts 2\.\. "
        r"in this shard \(renamed or swapped shard file\)",
    ):
        list(read_blocks([Unit(str(path), 0, 1, 2, 9, first=2)], 100, 8))


def test_cache_key_depends_on_every_part():
    base = {"dataset": "citeseer", "sampling": [2, 20], "seed": 0}
    key = shards.cache_key(base)
    assert key == shards.cache_key(dict(reversed(list(base.items()))))  # order-free
    for change in ({"seed": 1}, {"sampling": [1, 20]}, {"dataset": "cora"}):
        assert shards.cache_key({**base, **change}) != key


def test_queries_round_trip(tmp_path):
    data = shards.encode_queries(np.arange(3), np.arange(6).reshape(3, 2))
    (tmp_path / "q.npz").write_bytes(data)
    pos, neg = shards.load_queries(tmp_path / "q.npz", sha256=shards.file_record(data)["sha256"])
    assert pos.tolist() == [0, 1, 2] and neg.shape == (3, 2)
    swapped = shards.encode_queries(np.array([0, 1, 3]), np.array([[2, 4], [5, 6], [7, 8]]))  # same size
    (tmp_path / "q.npz").write_bytes(swapped)
    assert len(swapped) == len(data)
    with pytest.raises(ShardError, match=r"q\.npz: checksum mismatch \(manifest [0-9a-f]{12}…, file [0-9a-f]{12}…\)"):
        shards.load_queries(tmp_path / "q.npz", sha256=shards.file_record(data)["sha256"])


def test_graph_ships_with_the_set_and_is_checked(tmp_path):
    from common.graph import Graph

    g = Graph.from_edges(np.array([[0, 1], [1, 2], [2, 3]]), num_nodes=5)
    storage = shards.open_storage(tmp_path)
    for name, arr in zip(shards.graph_names("train"), (g.indptr, g.indices)):
        storage.write_atomic(name, shards.encode_array(arr))
    graphs = {"train": shards.graph_entry("train", g.indptr, g.indices)}
    manifest = shards.Manifest.from_dict({"root": str(tmp_path), "graphs": graphs})
    indptr, indices = shards.load_graph(manifest, "train")
    assert np.array_equal(indptr, g.indptr) and np.array_equal(indices, g.indices)
    with pytest.raises(ShardError, match="ships no 'test' graph"):
        shards.load_graph(manifest, "test")
    other = Graph.from_edges(np.array([[0, 1], [1, 3]]), num_nodes=5)  # other shape (content: sha256, common.verify)
    storage.write_atomic(shards.graph_names("train")[1], shards.encode_array(other.indices))
    with pytest.raises(ShardError, match="graph 'train' does not have the manifest's shape"):
        shards.load_graph(manifest, "train")


def test_shard_entries_filter_and_sort():
    m = shards.Manifest.from_dict(
        {
            "shards": [
                {"name": "train-v001-00000.tar", "split": "train", "protocol": None, "view": 1},
                {"name": "train-v000-00001.tar", "split": "train", "protocol": None, "view": 0},
                {"name": "train-v000-00000.tar", "split": "train", "protocol": None, "view": 0},
                {"name": "valid-heart-00000.tar", "split": "valid", "protocol": "heart", "view": None},
            ]
        }
    )
    assert [s["name"] for s in shards.shard_entries(m, "train", view=0)] == [
        "train-v000-00000.tar",
        "train-v000-00001.tar",
    ]
    assert [s["name"] for s in shards.shard_entries(m, "valid", "heart")] == ["valid-heart-00000.tar"]


def test_epoch_tokens_sums_the_first_training_views_shards():
    from common.manifest import epoch_tokens

    m = shards.Manifest.from_dict(
        {
            "shards": [
                {"name": "train-v000-00000.tar", "split": "train", "view": 0, "links": 100, "tokens": 2500},
                {"name": "train-v000-00001.tar", "split": "train", "view": 0, "links": 50, "tokens": 1000},
                {"name": "train-v001-00000.tar", "split": "train", "view": 1, "links": 300, "tokens": 9500},
                {
                    "name": "valid-original-00000.tar",
                    "split": "valid",
                    "protocol": "original",
                    "links": 10,
                    "tokens": 900,
                },
            ]
        }
    )
    assert epoch_tokens(m) == 3500 and epoch_tokens(shards.Manifest.from_dict({"shards": []})) == 0  # no view: unknown
