"""Node features travel with the shard set: preprocess --features writes them, the trainer attaches them."""

from pathlib import Path

import numpy as np
import pytest
import torch

from common.datasets.spec import DatasetSpec
from common.shards import FEATURES, Manifest, ShardError, load_features, read_manifest
from preprocess.config import CandidateConfig, ConfigError, PreprocessConfig, SamplingConfig
from preprocess.job import run
from tests.conftest import cached_set, require_shared
from trainer.config import config_for
from trainer.model.pencil import model_for_shards
from trainer.train import run as train


def _config(tmp_path, **data):
    """A small citeseer set; `data`: the DatasetSpec's fields (features, planetoid_dir)."""
    return PreprocessConfig(
        data=DatasetSpec("citeseer", **data),
        sampling=SamplingConfig(1, 3),
        num_cpus=2,
        out=str(tmp_path / "shards"),
        candidates=CandidateConfig(views=1, protocols=("original",)),
    )


@pytest.fixture(scope="module")
def feature_shards(shard_cache):
    # ../shared/data/planetoid only: skips without it, fails under CI
    planetoid = require_shared("planetoid", "ind.citeseer.x").parent
    # bench/gpu_bundle.sh leaves this set out (49 MB): without Ray it skips there
    return run(_config(cached_set(shard_cache, "features"), features=True, planetoid_dir=str(planetoid)))


def test_preprocess_writes_feature_table(feature_shards):
    manifest = read_manifest(feature_shards)
    assert manifest.features == {"file": FEATURES, "dim": 3703}
    x = load_features(manifest)
    assert x.shape == (3327, 3703) and x.dtype == np.float32
    assert np.all(x.sum(1)[:10] > 0)  # rows are real (binary bag-of-words) features


def test_trainer_attaches_features_and_checkpoints_without_them(feature_shards, tmp_path):
    """G = Linear(f, d) is trained: the same seed after 1 and after 3 steps holds different weights, and not
    merely rescaled ones (weight decay alone would only shrink a weight that gets no gradient)."""
    weights = []
    for steps in (1, 3):
        cfg = config_for(
            "tiny",
            str(feature_shards),
            str(tmp_path / f"run{steps}"),
            max_steps=steps,
            progress=False,
            eval_splits=("valid",),
            data={"num_workers": 0},
        )
        assert train(cfg)["steps"] == steps
        state = torch.load(tmp_path / f"run{steps}" / "last.pt", weights_only=True)["model"]
        assert "node_table" not in state  # the table is data: it ships with the shards, not the checkpoint
        weights.append(state["features.0.weight"].double())
    w1, w3 = weights
    assert w1.shape == (32, 3703)
    scaled = w1 * (w1 * w3).sum() / (w1 * w1).sum()  # the closest multiple of w1 to w3
    assert (w3 - scaled).abs().max() > 1e-6


def test_feature_table_changes_the_output(feature_shards):
    manifest = read_manifest(feature_shards)
    torch.manual_seed(0)
    model = model_for_shards("tiny", {"dropout": 0.0}, manifest).eval()
    from common.shards import Block, load_graph, read_shard, shard_entries
    from trainer.data.packing import BatchPacker

    entry = shard_entries(manifest, "valid", "original")[0]
    block = Block.concat(list(read_shard(Path(manifest.root) / entry["name"]))).take(np.arange(8))
    batch = BatchPacker(*load_graph(manifest), manifest.n_max)(block)
    with torch.no_grad():
        with_x = model(batch)
        zeroed = model(batch, torch.zeros_like(model.node_table))
    assert not torch.allclose(with_x, zeroed)


def test_features_flag_without_features_is_a_clear_error(tmp_path):
    config = PreprocessConfig(
        data=DatasetSpec(str(_edge_list(tmp_path)), features=True),
        sampling=SamplingConfig(1, 3),
        num_cpus=2,
        out=str(tmp_path / "shards"),
        candidates=CandidateConfig(views=1),
    )
    with pytest.raises(ConfigError, match="--features: dataset edges has no node features"):
        run(config)
    assert not (tmp_path / "shards").exists()  # refused before anything was written


def _edge_list(tmp_path) -> Path:
    path = tmp_path / "edges.csv"
    rng = np.random.default_rng(0)
    e = rng.integers(0, 60, size=(300, 2))
    path.write_text("src,dst\n" + "\n".join(f"{a},{b}" for a, b in e if a != b) + "\n")
    return path


def test_corrupt_feature_table_names_the_file(tmp_path):
    root = tmp_path / "set"
    root.mkdir()
    np.save(root / FEATURES, np.zeros((5, 2), np.float32))
    manifest = Manifest.from_dict({"root": str(root), "num_nodes": 6, "features": {"file": FEATURES, "dim": 2}})
    with pytest.raises(ShardError, match=f"{FEATURES}: feature table has shape"):
        load_features(manifest)


def test_no_features_trains_structure_only_on_a_featured_set(feature_shards, tmp_path):
    """--no-features: the set's table is not attached and G is not built, so one featured set serves both the
    'PENCIL' and the 'PENCIL w/o features' rows; the checkpoint records the choice and scoring rebuilds it."""
    from trainer.config import config_from_args

    manifest = read_manifest(feature_shards)
    bare = model_for_shards("tiny", {"features": False}, manifest)
    assert bare.features is None and bare.node_table is None and bare.cfg.num_features == 0
    args = [
        "--shards",
        str(feature_shards),
        "--preset",
        "tiny",
        "--out",
        str(tmp_path / "run"),
        "--no-features",
        "--max-steps",
        "1",
        "--device",
        "cpu",
        "--num-workers",
        "0",
        "--no-progress",
        "--eval-splits",
        "valid",
    ]
    cfg = config_from_args(args)
    with_features = config_from_args([a for a in args if a != "--no-features"])
    assert cfg.model.features is False and "features" not in with_features.model.as_overrides()
    train(cfg)
    state = torch.load(tmp_path / "run" / "best.pt", weights_only=True)
    assert not any(k.startswith("features.") for k in state["model"])
    saved = config_for("tiny", "s", "o", model={"features": False}).model.as_overrides()
    again = model_for_shards("tiny", saved, manifest)
    again.load_state_dict(state["model"])  # the same structure-only model, from the saved overrides
