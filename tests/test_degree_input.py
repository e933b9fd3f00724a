"""The degree input (--degree-features D; trainer/data/degrees.py, trainer/model/degree.py): each token's bucketed
degree in the training graph, every value worked out by hand: the buckets, the degrees of a real ratings set's
training graph (a valid or test edge never counts), a training positive's own edge taken off its endpoints, the
model without it bit-identical, and a checkpoint that round-trips (an older one, without the field, still loads)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from common.shards import Block, read_manifest
from tests.test_user_item_typed import write_ratings
from trainer.config import config_from_args
from trainer.config_sections import ConfigError
from trainer.data.degrees import TrainDegrees, degree_bucket, edge_key, train_degrees
from trainer.data.packing import BatchPacker, pack_samples
from trainer.model.degree import DegreeInput
from trainer.model.pencil import ModelConfig, Pencil

ROOT = Path(__file__).resolve().parents[1]


def test_buckets_are_floor_log2_of_one_plus_the_degree_clipped():
    deg = torch.tensor([0, 1, 2, 3, 4, 6, 7, 8, 14, 15, 1000, 2**40])
    assert degree_bucket(deg, 16).tolist() == [0, 1, 1, 2, 2, 2, 3, 3, 3, 4, 9, 16]
    assert degree_bucket(deg, 3).tolist() == [0, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3, 3]
    # 4 steps a doubling: floor(4 log2(1 + deg)); 1 + deg = 2^k lands on 4k exactly
    assert degree_bucket(deg, 200, 4).tolist() == [0, 4, 6, 8, 9, 11, 12, 12, 15, 16, 39, 160]


def undirected(edges, n) -> TrainDegrees:
    e = np.array(edges + [(b, a) for a, b in edges])
    return TrainDegrees(np.bincount(e[:, 0], minlength=n)[:, None], np.sort(edge_key(e[:, 0], e[:, 1], n)))


# training graph 0-1, 0-2, 0-3, 1-2; node 4 isolated: degrees 3, 2, 2, 1, 0
TRAIN = [(0, 1), (0, 2), (0, 3), (1, 2)]
SAMPLES = [
    {"nodes": [0, 1, 2, 3], "edges": [(0, 2), (0, 3), (1, 2)], "label": 1},  # a training positive: 0-1 taken off
    {"nodes": [3, 4, 0], "edges": [(0, 2)], "label": 0},  # a non-edge
    {"nodes": [2, 3, 0, 1], "edges": [(0, 2), (2, 3), (0, 3), (1, 2)], "label": 1},  # a held-out positive: kept
    {"nodes": [4, 7], "edges": [], "label": 0},  # node 7: not in the graph (a service's new node), degree 0
]


def test_each_token_gets_its_nodes_training_degree_and_a_training_positive_loses_its_own_edge():
    batch = pack_samples(SAMPLES, n_max=4)
    deg = DegreeInput(16, 1, 8).attach(undirected(TRAIN, 5))
    # context tokens in local order, then the u-task and v-task tokens (their endpoint's)
    want = [2, 1, 2, 1, 2, 1] + [1, 0, 3, 1, 0] + [2, 1, 3, 2, 2, 1] + [0, 0, 0, 0]
    assert deg.token_counts(batch)[:, 0].tolist() == want
    rows = deg.embedding.weight[degree_bucket(torch.tensor(want), 16)]
    assert torch.equal(deg(batch), rows)


def test_a_directed_graph_counts_out_and_in_apart_and_the_target_is_u_out_and_v_in():
    # 0 -> 1, 0 -> 2, 2 -> 1, 3 -> 0: out 2, 0, 1, 1; in 1, 2, 1, 0
    e = np.array([(0, 1), (0, 2), (2, 1), (3, 0)])
    counts = np.stack([np.bincount(e[:, 0], minlength=4), np.bincount(e[:, 1], minlength=4)], axis=1)
    deg = DegreeInput(2, 2, 8).attach(TrainDegrees(counts, np.sort(edge_key(e[:, 0], e[:, 1], 4))))
    batch = pack_samples([{"nodes": [0, 1], "edges": [], "label": 1}, {"nodes": [1, 0], "edges": [], "label": 0}], 2)
    # 0 -> 1 is a training edge: u = 0 has one out-edge fewer, v = 1 one in-edge fewer; 1 -> 0 is none
    want = [[1, 1], [0, 1], [1, 1], [0, 1]] + [[0, 2], [2, 1], [0, 2], [2, 1]]
    assert deg.token_counts(batch).tolist() == want
    # rows of the joint (out, in) table: bucket_out * 3 + bucket_in, buckets clipped to 2
    rows = [1 * 3 + 1, 0 * 3 + 1, 4, 1] + [0 * 3 + 1, 1 * 3 + 1, 1, 4]
    assert torch.equal(deg(batch), deg.embedding.weight[rows])


def test_without_the_degree_input_the_model_is_bit_identical():
    cfg = ModelConfig(n_max=4, hidden=16, layers=2, heads=2, ffn=32, dropout=0.0)
    torch.manual_seed(0)
    off = Pencil(cfg).eval()
    torch.manual_seed(0)
    on = Pencil(cfg.replace(degrees=3)).eval()
    assert off.degree is None and not any(k.startswith("degree") for k in off.state_dict())
    assert set(on.state_dict()) - set(off.state_dict()) == {"degree.embedding.weight"}
    # created last: every other weight is drawn as before; a zero embedding adds exactly nothing
    assert all(torch.equal(v, on.state_dict()[k]) for k, v in off.state_dict().items())
    on.degree.attach(undirected(TRAIN, 5))
    batch = pack_samples(SAMPLES, n_max=4)
    with torch.no_grad():
        assert not torch.equal(on(batch), off(batch))
        on.degree.embedding.weight.zero_()
        assert torch.equal(on(batch), off(batch))


def test_the_flag_sets_the_field_and_bad_values_are_refused():
    argv = ["--shards", "s", "--preset", "tiny", "--out", "o"]
    assert config_from_args([*argv, "--degree-features", "8"]).model.degrees == 8
    assert config_from_args(argv).model.degrees is None
    assert config_from_args([*argv, "--degree-features", "40", "--degree-steps", "4"]).model.degree_steps == 4
    with pytest.raises(ConfigError, match="--degree-steps: must be >= 1, got 0"):
        config_from_args([*argv, "--degree-steps", "0"])
    with pytest.raises(ConfigError, match="--degree-features: must be >= 0, got -1"):
        config_from_args([*argv, "--degree-features", "-1"])
    with pytest.raises(ValueError, match="degrees must be an integer >= 0"):
        ModelConfig(n_max=8, hidden=16, layers=1, heads=2, ffn=32, degrees=-2)


@pytest.fixture(scope="module")
def ratings_set(tmp_path_factory):
    """The hand-made ratings file of test_user_item_typed as a shard set."""
    tmp = tmp_path_factory.mktemp("degrees")
    cmd = [sys.executable, "-m", "preprocess", "--dataset", str(write_ratings(tmp)), "--sampling", "1,10"]
    proc = subprocess.run([*cmd, "--views", "1", "--out", str(tmp / "shards"), "-q"], cwd=ROOT, capture_output=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tmp, read_manifest(proc.stdout.decode().strip().splitlines()[-1].split()[-1])


def tiny_run(manifest, out: Path, *flags: str) -> dict:
    """A one-epoch `tiny` run of the trainer on the set with `flags`; its best checkpoint."""
    from pipelines.core.runs import load_checkpoint

    cmd = [sys.executable, "-m", "trainer", "--preset", "tiny", "--shards", str(manifest.root), "--device", "cpu"]
    proc = subprocess.run([*cmd, "--out", str(out), "--epochs", "1", *flags], cwd=ROOT, capture_output=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return load_checkpoint(out / "best.pt")


def test_degrees_come_from_the_training_graph_only(ratings_set):
    _, manifest = ratings_set
    got = train_degrees(manifest, 2)
    # users u1..u4 are nodes 0-3, items a..h nodes 4-11 (test_user_item_typed.ROWS): the 17 training pairs only.
    # The valid pair u1 -> g and the test pairs u4 -> a, u2 -> h never count: u1 rated 6 items in training, not 7;
    # g has 2 raters, not 3; u4 and h have none.
    assert got.counts[:, 0].tolist() == [6, 6, 5, 0] + [0] * 8
    assert got.counts[:, 1].tolist() == [0] * 4 + [3, 2, 2, 2, 3, 3, 2, 0]
    assert got.relations == 1 and len(got.keys) == 17 and edge_key(0, 10, 12, 0, 1) not in got.keys


def test_a_real_batch_of_the_typed_set_takes_off_only_a_training_triple(ratings_set):
    _, manifest = ratings_set
    packer = BatchPacker.for_set(manifest, "train", manifest.n_max)
    # u1 -> a (a training pair) and u1 -> g (the valid pair), each as its two endpoints alone
    block = Block(*(np.array(x) for x in ([0, 1], [0, 0], [4, 10], [1.0, 1.0], [0, 2, 4], [0, 4, 0, 10], [0, 0])))
    deg = DegreeInput(16, 2, 8).attach(train_degrees(manifest, 2))
    got = deg.token_counts(packer(block)).tolist()
    assert got == [[5, 0], [0, 2], [5, 0], [0, 2]] + [[6, 0], [0, 2], [6, 0], [0, 2]]


def test_a_checkpoint_round_trips_and_one_without_the_field_still_loads(ratings_set):
    from pipelines.core.runs import load_model

    tmp, manifest = ratings_set
    ckpt = tiny_run(manifest, tmp / "run", "--degree-features", "3")
    assert ckpt["config"]["model"]["degrees"] == 3 and ckpt["model"]["degree.embedding.weight"].shape[0] == 16
    model = load_model(ckpt, manifest, torch.device("cpu"))
    assert torch.equal(model.degree.embedding.weight, ckpt["model"]["degree.embedding.weight"])
    assert model.degree.counts.tolist() == train_degrees(manifest, 2).counts.tolist()
    # a run saved before the field existed: no "degrees" in its config, no degree weights
    ckpt["config"]["model"].pop("degrees")
    ckpt["model"] = {k: v for k, v in ckpt["model"].items() if not k.startswith("degree.")}
    assert load_model(ckpt, manifest, torch.device("cpu")).degree is None
