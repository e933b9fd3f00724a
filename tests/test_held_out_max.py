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
from common.datasets.fractions import CAPPED_VALID_NEGATIVES, DEFAULT_TEST_MAX, DEFAULT_VALID_MAX, SplitSettings
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


def test_a_capped_validation_holds_more_negatives_than_edges_and_never_a_known_edge():
    capped = random_split_dataset("g", EDGES, NODES, SplitSettings(valid_max=20, test_max=40, capped_valid_negatives=4))
    valid, test = capped.splits["valid"], capped.splits["test"]
    neg = keys(valid.neg["original"])
    assert len(valid.pos) == 20 and len(valid.neg["original"]) == 80 and len(neg) == 80  # distinct pairs
    assert len(test.neg["original"]) == 40  # test keeps one per edge
    assert not neg & keys(EDGES) and not neg & keys(test.neg["original"])  # non-edges, disjoint from test's
    # the negatives only: the same permutation, so every positive is where it was with one per edge
    one = random_split_dataset("g", EDGES, NODES, SplitSettings(valid_max=20, test_max=40))
    for split in ("train", "valid", "test"):
        np.testing.assert_array_equal(capped.splits[split].pos, one.splits[split].pos)


def test_more_validation_negatives_only_where_the_validation_cap_holds():
    whole = random_split_dataset("g", EDGES, NODES, SplitSettings())
    uncapped = random_split_dataset("g", EDGES, NODES, SplitSettings(valid_max=75, capped_valid_negatives=4))
    np.testing.assert_array_equal(uncapped.splits["valid"].neg["original"], whole.splits["valid"].neg["original"])
    test_only = random_split_dataset("g", EDGES, NODES, SplitSettings(test_max=40, capped_valid_negatives=4))
    assert len(test_only.splits["valid"].neg["original"]) == 75


def test_a_near_complete_graph_keeps_room_for_tests_negatives():
    # 30 nodes, 435 pairs: 400 edges leave 35 non-edges; 20 valid at 4 per edge would take 80 of them
    pairs = np.array([(u, v) for u in range(30) for v in range(u + 1, 30)])[:400]
    ds = random_split_dataset("g", pairs, 30, SplitSettings(valid_max=5, test_max=10, capped_valid_negatives=4))
    # the valid negatives come from non-edges of train + valid: 35 + 10 test edges = 45, less test's 10, halved
    assert len(ds.splits["valid"].neg["original"]) == 17 and len(ds.splits["test"].neg["original"]) == 10


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
        made = DatasetSpec.from_args(args, **fields)
        assert made.capped_valid_negatives == (CAPPED_VALID_NEGATIVES if made.held_out_max else None)
        return made.held_out_max

    caps = (DEFAULT_VALID_MAX, DEFAULT_TEST_MAX)
    assert spec("g.csv") == caps and spec("g.csv", "85,5,10") == caps and spec("g.csv", "random") == caps
    assert spec("g.csv", "80,10,10") is None and spec("g.csv", "random,80,10,10") is None
    assert spec("citeseer") is None and spec("g.csv", split=None, features=False) == caps


def test_a_set_built_before_the_caps_reloads_without_them_and_the_run_identity_ignores_them():
    old = DatasetSpec("g.csv").to_dict()  # what every manifest before the caps holds: no such key
    assert "held_out_max" not in old and DatasetSpec.from_dict(old).held_out_max is None
    assert "capped_valid_negatives" not in old and DatasetSpec.from_dict(old).capped_valid_negatives is None
    new = DatasetSpec("g.csv", held_out_max=(10, 20), capped_valid_negatives=4)
    assert DatasetSpec.from_dict(new.to_dict()) == new
    last = new.to_dict()  # a set built with the caps before the negatives per edge: one per edge on reload
    del last["capped_valid_negatives"]
    assert DatasetSpec.from_dict(last) == DatasetSpec("g.csv", held_out_max=(10, 20))
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
    more = random_split_dataset("g", EDGES, NODES, SplitSettings(valid_max=20, test_max=40, capped_valid_negatives=4))
    assert held_out_note(run, more) == [want + "; validation ranks against 80 negatives (4 per edge), for a steadier choice"]


def test_a_bad_count_of_negatives_per_edge_is_refused_in_one_line():
    import pytest

    from common.datasets.base import DatasetError

    for bad in (0, -1, 2.5, True):
        with pytest.raises(DatasetError, match="capped_valid_negatives: must be a positive integer"):
            DatasetSpec("g.csv", capped_valid_negatives=bad)
