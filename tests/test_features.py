"""Node features travel with the shard set: preprocess --features writes them, the trainer attaches them."""
from pathlib import Path

import numpy as np
import pytest
import torch

from common.shards import FEATURES, ShardError, load_features, read_manifest
from preprocess.config import CandidateConfig, ConfigError, PreprocessConfig, SamplingConfig
from preprocess.job import run
from trainer.config import config_for
from trainer.model import model_for_shards
from trainer.train import run as train
from tests.conftest import cached_set

ROOT = Path(__file__).resolve().parents[1]
# CI (and every session) has shared/ beside the clone; resolved relative to the repository, never absolute.
PLANETOID = next((p for p in (ROOT.parent / "shared" / "data" / "planetoid",) if (p / "ind.citeseer.x").exists()), None)
needs_planetoid = pytest.mark.skipif(PLANETOID is None, reason="Planetoid raw files (shared/data/planetoid) not found")


def _config(tmp_path, **kw):
    return PreprocessConfig(dataset="citeseer", sampling=SamplingConfig(1, 3), num_cpus=2, out=str(tmp_path / "shards"),
                            candidates=CandidateConfig(views=1, protocols=("original",)), **kw)


@pytest.fixture(scope="module")
def feature_shards(shard_cache):
    if PLANETOID is None:
        pytest.skip("Planetoid raw files not found")
    # bench/gpu_bundle.sh leaves this set out (49 MB): without Ray it skips there
    return run(_config(cached_set(shard_cache, "features"), features=True, planetoid_dir=str(PLANETOID)))


@needs_planetoid
def test_preprocess_writes_feature_table(feature_shards):
    manifest = read_manifest(feature_shards)
    assert manifest["features"] == {"file": FEATURES, "dim": 3703}
    x = load_features(manifest)
    assert x.shape == (3327, 3703) and x.dtype == np.float32
    assert np.all(x.sum(1)[:10] > 0)  # rows are real (binary bag-of-words) features


@needs_planetoid
def test_trainer_attaches_features_and_checkpoints_without_them(feature_shards, tmp_path):
    cfg = config_for("tiny", str(feature_shards), str(tmp_path / "run"), max_steps=3, progress=False,
                     eval_splits=("valid",), data={"num_workers": 0})
    summary = train(cfg)
    assert summary["steps"] == 3
    state = torch.load(tmp_path / "run" / "last.pt", weights_only=True)["model"]
    assert state["features.0.weight"].shape == (32, 3703)  # G = Linear(f, d) was trained
    assert "node_table" not in state  # the table is data: it ships with the shards, not the checkpoint


@needs_planetoid
def test_feature_table_changes_the_output(feature_shards):
    manifest = read_manifest(feature_shards)
    torch.manual_seed(0)
    model = model_for_shards("tiny", {"dropout": 0.0}, manifest).eval()
    from common.shards import Block, load_graph, read_shard, shard_entries
    from trainer.packing import BatchPacker
    entry = shard_entries(manifest, "valid", "original")[0]
    block = Block.concat(list(read_shard(Path(manifest["root"]) / entry["name"]))).take(np.arange(8))
    batch = BatchPacker(*load_graph(manifest), manifest["n_max"])(block)
    with torch.no_grad():
        with_x = model(batch)
        zeroed = model(batch, torch.zeros_like(model.node_table))
    assert not torch.allclose(with_x, zeroed)


def test_features_flag_without_features_is_a_clear_error(tmp_path):
    config = PreprocessConfig(dataset=str(_edge_list(tmp_path)), sampling=SamplingConfig(1, 3), num_cpus=2,
                              features=True, out=str(tmp_path / "shards"), candidates=CandidateConfig(views=1))
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
    manifest = {"root": str(root), "num_nodes": 6, "features": {"file": FEATURES, "dim": 2}}
    with pytest.raises(ShardError, match=f"{FEATURES}: feature table has shape"):
        load_features(manifest)
