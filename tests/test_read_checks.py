"""What decides model selection is checked on every read, without --verify: eval shards (their sha256 as they
stream), query files and the shipped graph arrays. Two tampered sets a size check lets through: valid and
test shards swapped (equal sizes, the same candidate ids), and one flipped byte in a graph array."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.manifest import write_manifest
from common.shards import ShardError, load_graph, read_manifest
from common.storage import LocalStorage
from tests.test_trainer_data import make_shard_set

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
VALID, TEST = "valid-original-00000.tar", "test-original-00000.tar"


def trainer(shards: Path, out: Path, *extra) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "trainer",
        "--shards",
        str(shards),
        "--preset",
        "tiny",
        "--out",
        str(out),
        "--device",
        "cpu",
        "--num-workers",
        "0",
        "--no-progress",
        "--threads",
        "1",
        "--max-steps",
        "2",
        *extra,
    ]
    return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)


def one_error(proc) -> str:
    errors = [line for line in proc.stderr.splitlines() if " error: " in line]
    assert proc.returncode != 0 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return errors[0]


def swap_valid_and_test(root: Path) -> None:
    """Exchange the first valid and test shards and make the manifest's sizes follow them: the size check
    passes, and both shards hold candidate ids 0.. of their set, so only their content tells them apart."""
    a, b = (root / VALID).read_bytes(), (root / TEST).read_bytes()
    (root / VALID).write_bytes(b)
    (root / TEST).write_bytes(a)
    manifest = json.loads((root / "manifest.json").read_text())
    for rec in manifest["shards"]:
        if rec["name"] in (VALID, TEST):
            rec["bytes"] = (root / rec["name"]).stat().st_size
    for field in ("checksum", "format", "version", "manifest_version"):
        manifest.pop(field)
    write_manifest(LocalStorage(root), manifest)


def test_swapped_valid_and_test_shards_stop_the_run(tmp_path):
    shards = make_shard_set(tmp_path / "set", shard_links=(48,), eval_links=30)
    assert trainer(shards, tmp_path / "clean").returncode == 0  # the untampered set trains
    swap_valid_and_test(shards)
    proc = trainer(shards, tmp_path / "run")
    line = one_error(proc)
    assert f"{shards / VALID}: checksum mismatch" in line and "swapped or edited eval shard" in line, line
    assert not (tmp_path / "run" / "summary.json").exists()  # no metrics of a swapped set are reported


def test_a_flipped_byte_in_a_graph_array_stops_the_run(tmp_path):
    shards = make_shard_set(tmp_path / "set", shard_links=(48,), eval_links=30)
    path = shards / "graph-train-indices.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # in the array's data: the header and the shape stay as they were
    path.write_bytes(bytes(data))
    manifest = read_manifest(shards)
    with pytest.raises(ShardError, match=r"graph-train-indices.npy: checksum mismatch"):
        load_graph(manifest, "train")
    assert load_graph(manifest, "train", verify=False)[1].shape[0] > 0  # the shape alone would pass
    assert f"{path}: checksum mismatch" in one_error(trainer(shards, tmp_path / "run"))
