"""The default split's most held-out edges (common.datasets.fractions.DEFAULT_VALID_MAX, DEFAULT_TEST_MAX): above
them validation and test hold that many of the split's permutation, the rest train; graphs below them are
untouched, shares given with --split other than the default are taken as given, and a set built before the caps
reloads without them."""

from __future__ import annotations

import argparse
from dataclasses import asdict

import numpy as np

from bench.own_graph_scale import scale_edges
from common.datasets import load_dataset
from common.datasets.edgelist import random_split_dataset
from common.datasets.fractions import DEFAULT_TEST_MAX, DEFAULT_VALID_MAX, SplitSettings
from common.datasets.spec import DatasetSpec
from pipelines.core.finished import run_identity

EDGES = scale_edges(1500, 6.0, seed=0)
NODES = int(EDGES.max()) + 1


def keys(pairs: np.ndarray) -> set:
    return set(map(tuple, np.sort(pairs, axis=1).tolist()))


def test_the_caps_move_the_rest_of_the_held_out_edges_to_train():
    whole = random_split_dataset("g", EDGES, NODES, SplitSettings())
    capped = random_split_dataset("g", EDGES, NODES, SplitSettings(valid_max=20, test_max=40))
    assert {s: len(capped.splits[s].pos) for s in ("valid", "test")} == {"valid": 20, "test": 40}
    assert {s: len(whole.splits[s].pos) for s in ("valid", "test")} == {"valid": 75, "test": 150}  # 5 %, 10 %
    assert len(capped.splits["valid"].neg["original"]) == 20 and len(capped.splits["test"].neg["original"]) == 40
    # the same permutation: test its first 40 edges, validation the next 20, training the rest
    np.testing.assert_array_equal(capped.splits["test"].pos, whole.splits["test"].pos[:40])
    np.testing.assert_array_equal(capped.splits["valid"].pos, whole.splits["test"].pos[40:60])
    held = keys(capped.splits["valid"].pos) | keys(capped.splits["test"].pos)
    train = keys(capped.splits["train"].pos)
    assert not held & train and held | train == keys(EDGES) and len(train) == 1500 - 60
    assert capped.graph.num_edges == 1500 - 60  # the training graph holds what the caps released


def test_only_the_validation_cap():
    whole = random_split_dataset("g", EDGES, NODES, SplitSettings())
    capped = random_split_dataset("g", EDGES, NODES, SplitSettings(valid_max=20))
    np.testing.assert_array_equal(capped.splits["test"].pos, whole.splits["test"].pos)
    np.testing.assert_array_equal(capped.splits["valid"].pos, whole.splits["valid"].pos[:20])
    assert keys(capped.splits["train"].pos) == keys(whole.splits["train"].pos) | keys(whole.splits["valid"].pos[20:])


def test_a_cap_above_the_share_changes_nothing():
    whole = random_split_dataset("g", EDGES, NODES, SplitSettings())
    same = random_split_dataset("g", EDGES, NODES, SplitSettings(valid_max=75, test_max=150))
    for split in ("train", "valid", "test"):
        np.testing.assert_array_equal(same.splits[split].pos, whole.splits[split].pos)
    np.testing.assert_array_equal(same.splits["valid"].neg["original"], whole.splits["valid"].neg["original"])
    np.testing.assert_array_equal(same.splits["test"].neg["original"], whole.splits["test"].neg["original"])


def test_an_edge_list_is_capped_as_its_spec_says(tmp_path):
    path = tmp_path / "g.csv"
    path.write_text("src,dst\n" + "\n".join(f"{u},{v}" for u, v in EDGES) + "\n")
    held = {}
    for caps in (None, (20, 40)):
        ds = load_dataset(DatasetSpec(str(path), held_out_max=caps))
        held[caps] = len(ds.splits["valid"].pos), len(ds.splits["test"].pos)
    assert held == {None: (75, 150), (20, 40): (20, 40)}


def test_the_command_line_caps_only_an_edge_list_at_the_default_shares():
    def spec(dataset, split=None, **fields):
        args = argparse.Namespace(dataset=dataset, data_dir=None, ogb_root=None, planetoid_dir=None, split=split)
        return DatasetSpec.from_args(args, **fields).held_out_max

    caps = (DEFAULT_VALID_MAX, DEFAULT_TEST_MAX)
    assert spec("g.csv") == caps and spec("g.csv", "85,5,10") == caps and spec("g.csv", "random") == caps
    assert spec("g.csv", "80,10,10") is None and spec("g.csv", "random,80,10,10") is None
    assert spec("citeseer") is None and spec("g.csv", split=None, features=False) == caps


def test_a_set_built_before_the_caps_reloads_without_them_and_the_run_identity_ignores_them():
    old = DatasetSpec("g.csv").to_dict()  # what every manifest before the caps holds: no such key
    assert "held_out_max" not in old and DatasetSpec.from_dict(old).held_out_max is None
    new = DatasetSpec("g.csv", held_out_max=(10, 20))
    assert DatasetSpec.from_dict(new.to_dict()) == new
    ident = [run_identity({"source": asdict(s)}, "data") for s in (DatasetSpec("g.csv"), new)]
    assert ident[0] == ident[1]  # the split they make reaches the identity through the data's fingerprint


def test_the_report_names_the_caps_when_they_held():
    from types import SimpleNamespace

    from pipelines.run import held_out_note

    capped = random_split_dataset("g", EDGES, NODES, SplitSettings(valid_max=20, test_max=40))
    run = SimpleNamespace(source=DatasetSpec("g.csv", held_out_max=(20, 40)))
    want = "held out: at most 20 valid and 40 test edges (the default split's); train / valid / test: 1,440 / 20 / 40"
    assert held_out_note(run, capped) == [want]
    assert held_out_note(run, random_split_dataset("g", EDGES, NODES, SplitSettings())) == []
    assert held_out_note(SimpleNamespace(source=DatasetSpec("g.csv")), capped) == []  # no caps asked
