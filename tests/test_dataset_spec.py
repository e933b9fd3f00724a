"""DatasetSpec: one record of what the data is, checked once, read from the flags once, stored in a manifest's
`config` and read back from it (older manifests included)."""

from __future__ import annotations

import argparse

import pytest

from common.datasets import DatasetError, DatasetSpec, load_dataset, load_set_dataset
from common.flags import FlagError, add_dataset_flags, add_graph_input_flags
from preprocess.config import PreprocessConfig, SamplingConfig

# A manifest `config` as sets written before the spec (and before --split kinds, the user's pairs, --fill-features,
# --ignore-columns and the selection pool) recorded it: the preprocess options beside the data's fields, with keys
# missing and None where a list or a number is meant.
OLD_CONFIG = {
    "dataset": "citeseer",
    "sampling": {"d": 1, "n": 5, "n_max": 12},
    "candidates": {"views": 2, "percent": 100.0, "neg_ratio": 1, "splits": ["train", "valid", "test"]},
    "out": "/tmp/shards",
    "seed": 0,
    "data_dir": None,
    "ogb_root": None,
    "planetoid_dir": None,
    "features": False,
    "nodes": None,
    "split": None,
    "ignore_columns": None,
    "valid_pool": None,
    "num_cpus": 2,
    "links_per_shard": 8192,
    "links_per_block": 256,
    "force": False,
}


def parse(*argv):
    p = argparse.ArgumentParser()
    p.add_argument = _plain(p.add_argument)
    add_dataset_flags(p, split_kinds=True)
    add_graph_input_flags(p)
    return p.parse_args(list(argv))


def _plain(add):
    """argparse without the project's `advanced=` keyword (common.cli.Parser takes it)."""
    return lambda *a, advanced=False, **kw: add(*a, **kw)


def test_round_trip_and_plain_json():
    spec = DatasetSpec("g.csv", seed=3, split=(70, 10, 20), split_kind="random", ignore_columns=("w",), valid_pool=8)
    data = spec.to_dict()
    assert data["split"] == [70.0, 10.0, 20.0] and data["ignore_columns"] == ["w"]
    assert DatasetSpec.from_dict(data) == spec
    assert DatasetSpec.from_dict({**data, "sampling": {"d": 1}, "out": "x"}) == spec  # other keys are not the spec's


def test_an_old_manifest_config_reads_with_the_defaults():
    spec = DatasetSpec.from_dict(OLD_CONFIG)
    assert spec == DatasetSpec("citeseer")
    assert load_set_dataset(OLD_CONFIG).fingerprint() == load_dataset(DatasetSpec("citeseer")).fingerprint()


def test_the_manifest_config_holds_the_spec_where_it_always_did(tmp_path):
    edges = tmp_path / "g.csv"
    data = DatasetSpec(str(edges), seed=2, split=(80, 10, 10), eval_pairs=str(tmp_path / "p.csv"))
    config = PreprocessConfig(data=data, sampling=SamplingConfig(1, 5), out=str(tmp_path / "shards")).to_dict()
    assert "data" not in config and config["seed"] == 2 and config["split"] == [80.0, 10.0, 10.0]
    assert config["sampling"] == {"d": 1, "n": 5, "n_max": SamplingConfig(1, 5).n_max}
    assert DatasetSpec.from_dict(config) == data  # paths absolute already: they stay as given


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"fill_features": "zero"}, r"--fill-features zero: fills the rows a --node-features file lacks"),
        ({"fill_features": "max", "node_features": "x.csv"}, r"--fill-features max: choose one of zero, mean"),
        ({"split_kind": "sideways"}, r"--split sideways: unknown kind"),
        ({"split": (50, 50, 0)}, r"--split 50,50,0: valid and test must be above 0"),
        ({"seed": -1}, r"--seed: must be a non-negative integer"),
        ({"valid_pool": -2}, r"--valid-pool: must be a non-negative integer"),
        ({"features": True, "node_features": "x.csv"}, r"--features loads a paper dataset's node features"),
    ],
)
def test_each_field_is_checked_once_here(fields, match):
    with pytest.raises(DatasetError, match=match):
        DatasetSpec("g.csv", **fields)


def test_the_flags_build_the_spec_and_name_a_bad_flag():
    args = parse("--dataset", "g.csv", "--split", "temporal,80,10,10", "--ignore-columns", "w, t", "--nodes", "n.csv")
    assert DatasetSpec.from_args(args, seed=4) == DatasetSpec(
        "g.csv", seed=4, split=(80, 10, 10), split_kind="temporal", ignore_columns=("w", "t"), nodes="n.csv"
    )
    with pytest.raises(FlagError, match=r"--fill-features mean: fills the rows a --node-features file lacks"):
        DatasetSpec.from_args(parse("--dataset", "g.csv", "--fill-features", "mean"))
    with pytest.raises(FlagError, match=r"--split: unknown kind 'sideways'"):
        DatasetSpec.from_args(parse("--dataset", "g.csv", "--split", "sideways"))
