"""The default split's most held-out edges (common.datasets.fractions.DEFAULT_VALID_MAX, DEFAULT_TEST_MAX): above
them validation and test hold that many of the split's permutation, the rest train; graphs below them are
untouched, and shares given with --split other than the default are taken as given."""

from __future__ import annotations

import numpy as np

import common.datasets.edgelist as edgelist
from bench.own_graph_scale import scale_edges
from common.datasets import load_dataset
from common.datasets.edgelist import random_split_dataset
from common.datasets.fractions import SplitSettings
from common.datasets.spec import DatasetSpec

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


def test_an_edge_list_caps_only_the_default_shares(tmp_path, monkeypatch):
    path = tmp_path / "g.csv"
    path.write_text("src,dst\n" + "\n".join(f"{u},{v}" for u, v in EDGES) + "\n")
    monkeypatch.setattr(edgelist, "DEFAULT_VALID_MAX", 20)
    monkeypatch.setattr(edgelist, "DEFAULT_TEST_MAX", 40)
    held = {}
    for split in (None, (85, 5, 10), (80, 10, 10)):
        ds = load_dataset(DatasetSpec(str(path), split=split))
        held[split] = len(ds.splits["valid"].pos), len(ds.splits["test"].pos)
    assert held == {None: (20, 40), (85, 5, 10): (20, 40), (80, 10, 10): (150, 150)}


def test_the_report_names_the_caps_when_they_held(monkeypatch):
    import pipelines.run as run

    capped = random_split_dataset("g", EDGES, NODES, SplitSettings(valid_max=20, test_max=40))
    monkeypatch.setattr(run, "DEFAULT_VALID_MAX", 20)
    monkeypatch.setattr(run, "DEFAULT_TEST_MAX", 40)
    assert run.held_out_caps(capped) == "; at most 20 valid and 40 test edges, the rest train: 1,440 / 20 / 40"
    assert run.held_out_caps(random_split_dataset("g", EDGES, NODES, SplitSettings())) == ""
