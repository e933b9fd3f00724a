"""The temporal split of an edge list with a time column: hand-computed splits on a tiny graph, times of every
kind, ties at a boundary, and nothing from after a split's boundary reaching its graph, its negatives, the
heuristics or the sampled subgraphs (the last on the real collegemsg messages, through the Ray job)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from common.datasets import DatasetError, DatasetSpec, load_dataset
from common.heuristics import ranking_scores, score_split
from common.metrics import evaluate
from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig
from tests.conftest import cached_set, require_shared

# A ring of 12 people (times 10..120), then newcomers 13..16. Repeats, a reverse and a self-loop add no pair.
ROWS = (
    [(i, i % 12 + 1, 10 * i) for i in range(1, 13)]
    + [(13, 1, 130), (13, 2, 140), (3, 13, 150), (14, 3, 160)]  # valid at --split 60,20,20
    + [(14, 4, 170), (15, 5, 180), (15, 6, 190), (16, 13, 200)]  # test
    + [(2, 1, 15), (3, 2, 210), (1, 13, 175), (5, 5, 55)]
)  # repeat, repeat, valid repeat, self-loop
TRAIN = [(i, i % 12 + 1) for i in range(1, 12)] + [(1, 12)]
VALID, TEST = [(1, 13), (2, 13), (3, 13), (3, 14)], [(4, 14), (5, 15), (6, 15), (13, 16)]


def write(path: Path, rows, header="src,dst,time") -> str:
    path.write_text(header + "\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    return str(path)


def user_pairs(ds, split) -> set:
    """A split's positives in the file's ids, as undirected pairs."""
    return {tuple(sorted((int(ds.node_ids[u]), int(ds.node_ids[v])))) for u, v in ds.splits[split].pos}


def user_edges(graph, ds) -> set:
    return {tuple(sorted((int(ds.node_ids[u]), int(ds.node_ids[v])))) for u, v in graph.edge_array()}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = write(tmp_path_factory.mktemp("temporal") / "msgs.csv", ROWS)
    return load_dataset(DatasetSpec(path, split=(60, 20, 20)))


def test_hand_computed_temporal_split(tiny, caplog):
    assert user_pairs(tiny, "train") == set(TRAIN)
    assert user_pairs(tiny, "valid") == set(VALID) and user_pairs(tiny, "test") == set(TEST)
    assert tiny.split_info == {
        "kind": "temporal",
        "column": "time",
        "time_type": "integer",
        "valid_from": "130",
        "test_from": "170",
        "pairs": {"train": 12, "valid": 4, "test": 4},
        "negatives": "matched-newness",
        # valid: every pair names a newcomer (13 or 14); test: (4, 14) names none, the others 15 or 16 once
        "new_ends": {"valid": [0, 4, 0], "test": [1, 3, 0]},
    }
    # valid pairs are scored on the edges before 130, test pairs on those before 170 (train + valid)
    assert user_edges(tiny.graph_for("valid"), tiny) == set(TRAIN)
    assert user_edges(tiny.graph_for("test"), tiny) == set(TRAIN) | set(VALID)


def test_negatives_match_newness_and_name_no_node_of_a_later_split(tiny):
    from preprocess.plan import candidate_sets

    for split, old, new, counts in (
        ("valid", range(1, 13), {13, 14}, [0, 4, 0]),
        ("test", range(1, 15), {15, 16}, [1, 3, 0]),
    ):
        neg = tiny.node_ids[tiny.splits[split].neg["original"]]
        assert len(neg) == 4 and set(neg.ravel()) <= set(old) | new
        assert sorted(np.isin(neg, list(new)).sum(axis=1)) == sorted(np.repeat([0, 1, 2], counts))
    cfg = PreprocessConfig(
        data=DatasetSpec("msgs.csv"),
        sampling=SamplingConfig(1, 3),
        candidates=CandidateConfig(views=3, neg_ratio=1, protocols=("original",)),
    )
    for cs in candidate_sets(cfg, tiny, ["original"]):
        if cs.split == "train":  # training negatives too: no newcomer of valid or test
            neg = cs.cands.label == 0
            assert set(tiny.node_ids[cs.cands.src[neg]]) | set(tiny.node_ids[cs.cands.dst[neg]]) <= set(range(1, 13))
        assert cs.graph == ("test" if cs.split == "test" else "train")


def test_heuristics_see_only_edges_before_the_boundary(tiny):
    """CN from the rows before each boundary, by hand; a test edge in the graph would give (15, 5) the common
    neighbour 6."""

    def hand_cn(pairs, before):
        nbrs = {}
        for u, v, t in ROWS:
            if t < before and u != v:
                nbrs.setdefault(u, set()).add(v)
                nbrs.setdefault(v, set()).add(u)
        return np.array([len(nbrs.get(u, set()) & nbrs.get(v, set())) for u, v in pairs], dtype=float)

    test_pos = tiny.node_ids[tiny.splits["test"].pos]
    assert (
        hand_cn(test_pos, 170).tolist()
        == ranking_scores("cn", tiny.graph_for("test"), tiny.splits["test"].pos).tolist()
    )
    assert hand_cn([(15, 5)], 170).tolist() == [0.0] and hand_cn([(15, 5)], 1000).tolist() == [1.0]
    for split, before in (("valid", 130), ("test", 170)):
        s = tiny.splits[split]
        want = evaluate(
            "original", hand_cn(tiny.node_ids[s.pos], before), hand_cn(tiny.node_ids[s.neg["original"]], before)
        )
        assert score_split(tiny, split, ["original"], ["cn"])["original"]["cn"] == want


@pytest.mark.parametrize(
    "times, kind, valid_from",
    [
        ([f"2004-05-{d:02d}T10:00:00" for d in range(1, 21)], "timestamp", "2004-05-13T10:00:00"),
        ([f"2004-05-{d:02d}" for d in range(1, 21)], "timestamp", "2004-05-13T00:00:00"),
        ([f"2004-05-{d:02d}T10:00:00+02:00" for d in range(1, 21)], "timestamp", "2004-05-13T08:00:00"),
        ([f"{d / 4}" for d in range(1, 21)], "float", "3.25"),
    ],
)
def test_times_of_every_kind(tmp_path, times, kind, valid_from):
    rows = [(u, v, t) for (u, v, _), t in zip(ROWS[:20], times)]
    ds = load_dataset(DatasetSpec(write(tmp_path / "t.csv", rows), split=(60, 20, 20)))
    assert ds.split_info["time_type"] == kind and ds.split_info["valid_from"] == valid_from
    assert user_pairs(ds, "valid") == set(VALID) and user_pairs(ds, "test") == set(TEST)


def test_a_tie_at_a_boundary_stays_in_one_split(tmp_path):
    rows = [(u, v, min(t, 130)) for u, v, t in ROWS[:20]]  # 130..200 all at 130: valid and test collapse
    with pytest.raises(
        DatasetError,
        match=r"t.csv: 8 pairs first appear at time 130, so a temporal split at these "
        r"shares leaves valid empty .*--split random",
    ):
        load_dataset(DatasetSpec(write(tmp_path / "t.csv", rows), split=(60, 20, 20)))
    rows = [(u, v, 125 if t == 120 else 130 if t == 140 else t) for u, v, t in ROWS[:20]]  # 13-2 ties with 13-1
    ds = load_dataset(DatasetSpec(write(tmp_path / "t2.csv", rows), split=(60, 20, 20)))
    assert {(1, 13), (2, 13)} <= user_pairs(ds, "valid")


@pytest.mark.parametrize(
    "cells, match",
    [
        (["1"] * 19 + ["x"], r"column 'time' holds 'x' in data row 20, not a number like data row 1"),
        (["1"] * 19 + [""], r"column 'time' is empty in data row 20"),
        (["1"] * 19 + ["nan"], r"column 'time' holds nan in data row 20; times must be finite"),
        (
            ["2004-05-01"] * 19 + ["2004-05-01T00:00:00Z"],
            r"holds '2004-05-01T00:00:00Z' in data row 20, not an ISO-8601 "
            r"timestamp without a zone offset",
        ),
        (["yesterday"] + ["1"] * 19, r"holds 'yesterday' in data row 1, not an integer, a float or an ISO-8601"),
    ],
)
def test_bad_times_are_refused_in_one_line(tmp_path, cells, match):
    rows = [(u, v, c) for (u, v, _), c in zip(ROWS[:20], cells)]
    with pytest.raises(DatasetError, match=match) as err:
        load_dataset(DatasetSpec(write(tmp_path / "t.csv", rows)))
    assert "--ignore-columns time" in str(err.value) and "\n" not in str(err.value)


def test_random_split_and_split_column_set_the_time_aside_with_a_log_line(tmp_path, caplog):
    caplog.set_level("INFO")
    path = write(tmp_path / "t.csv", ROWS)
    ds = load_dataset(DatasetSpec(path, split=(60, 20, 20), split_kind="random"))
    assert ds.split_info is None and ds.test_graph is None
    assert "column 'time' is not used: the split is random (--split random)" in caplog.text
    given = write(
        tmp_path / "g.csv",
        [(u, v, t, "test" if t >= 170 else "train") for u, v, t in ROWS[:20]],
        header="src,dst,time,split",
    )
    with pytest.raises(DatasetError, match="valid"):  # no valid rows: the column is the user's split, used as given
        load_dataset(DatasetSpec(given))
    assert "column 'time' is not used: the split column fixes the split" in caplog.text
    with pytest.raises(DatasetError, match=r"--split temporal needs a column 'time'"):
        load_dataset(
            DatasetSpec(write(tmp_path / "e.csv", [r[:2] for r in ROWS], header="src,dst"), split_kind="temporal")
        )
    with pytest.raises(DatasetError, match=r"--split temporal: 'citeseer' has no times"):
        load_dataset(DatasetSpec("citeseer", split_kind="temporal"))


# ---------------------------------------------------------------------------- collegemsg, the real thing
@pytest.fixture(scope="module")
def collegemsg():
    path = require_shared("graphs", "collegemsg.csv.gz")
    return path, load_dataset(DatasetSpec(str(path)))


def first_times(path: Path) -> dict:
    """Each undirected pair's first time, read straight from the file (a second, plain reading)."""
    import gzip

    first = {}
    with gzip.open(path, "rt") as f:
        next(f)
        for line in f:
            u, v, t = (int(x) for x in line.split(","))
            key = (min(u, v), max(u, v))
            first[key] = min(first.get(key, t), t)
    return first


def test_collegemsg_is_split_by_time_by_default(collegemsg):
    path, ds = collegemsg
    assert ds.temporal and ds.num_nodes == 1899
    first = first_times(path)
    t = {s: [first[p] for p in user_pairs(ds, s)] for s in ("train", "valid", "test")}
    assert sum(map(len, t.values())) == len(first)  # every distinct undirected pair once
    assert max(t["train"]) < min(t["valid"]) and max(t["valid"]) < min(t["test"])
    assert str(min(t["valid"])) == ds.split_info["valid_from"] and str(min(t["test"])) == ds.split_info["test_from"]
    assert [len(t[s]) for s in ("valid", "test")] == [int(0.05 * len(first)), int(0.10 * len(first))]


def test_collegemsg_subgraphs_hold_no_edge_from_after_the_boundary(collegemsg, shard_cache):
    """Every edge of every sampled subgraph (recovered from the shards and the graph shipped with them, as the
    trainer recovers it) first appeared before the boundary of its link's split."""
    from common.induce import Inducer
    from common.shards import load_graph, read_manifest, read_shard, set_graph
    from preprocess.job import run

    path, ds = collegemsg
    first = first_times(path)
    ids = ds.node_ids
    bound = {
        "train": int(ds.split_info["valid_from"]),
        "valid": int(ds.split_info["valid_from"]),
        "test": int(ds.split_info["test_from"]),
    }
    cfg = PreprocessConfig(
        data=DatasetSpec(str(path)),
        sampling=SamplingConfig(1, 8),
        num_cpus=2,
        out=str(cached_set(shard_cache, "collegemsg-temporal")),
        candidates=CandidateConfig(views=1, percent=10.0, protocols=("original",)),
    )
    manifest = read_manifest(run(cfg, ds))
    assert manifest.split == ds.split_info and set(manifest.graphs) == {"train", "test"}
    from common.datasets import load_set_dataset

    assert load_set_dataset(manifest.config).fingerprint() == manifest.fingerprint
    seen = 0
    for entry in manifest.shards:
        split = entry["split"]
        inducer = Inducer(*load_graph(manifest, set_graph(manifest, split)))
        for block in read_shard(Path(manifest.root) / entry["name"]):
            ptr, local = inducer.edges(block.node_ptr, block.nodes)
            for b in range(len(block)):
                nodes = block.nodes[block.node_ptr[b] : block.node_ptr[b + 1]]
                edges = ids[nodes[local[ptr[b] : ptr[b + 1]]]]
                latest = max((first[(min(u, v), max(u, v))] for u, v in edges), default=0)
                assert latest < bound[split], (split, latest)
                seen += len(edges)
    assert seen > 1000
