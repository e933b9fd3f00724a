"""Directed edge lists (--directed, docs/own-graph.md#directed-graphs): ordered rows, a split that keeps a pair and its
reverse apart, ordered negatives, the reverse protocol, the out-edge CSR in the shard set (format version 3) and the
induced ordered edges of a subgraph. Expected values are worked out by hand in the comments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from common.datasets import DatasetError, DatasetSpec, load_dataset
from common.graph import DiGraph, set_directed_graph
from common.induce import Inducer
from common.manifest_record import Manifest
from common.shards import load_queries, read_manifest

ROOT = Path(__file__).resolve().parents[1]


def write_csv(path: Path, rows, header: str = "src,dst") -> Path:
    path.write_text(header + "\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    return path


def pairs(a) -> set:
    return {tuple(map(int, p)) for p in np.asarray(a).reshape(-1, 2)}


def given_split_rows() -> list:
    """A ring 0 -> 1 -> ... -> 29 -> 0 to train on; 2 -> 1 (the reverse of the train edge 1 -> 2) and 20 -> 5 to test;
    5 -> 4 (reverse of 4 -> 5) and 9 -> 15 to validate."""
    ring = [(i, (i + 1) % 30, "train") for i in range(30)]
    return ring + [(2, 1, "test"), (20, 5, "test"), (5, 4, "valid"), (9, 15, "valid")]


def test_a_pair_and_its_reverse_are_two_edges_in_two_splits(tmp_path):
    path = write_csv(tmp_path / "d.csv", given_split_rows(), "src,dst,split")
    with pytest.raises(DatasetError, match="marked both train and test"):  # undirected: 1,2 and 2,1 are one edge
        load_dataset(DatasetSpec(str(path)))
    ds = load_dataset(DatasetSpec(str(path), directed=True))
    assert (1, 2) in pairs(ds.splits["train"].pos) and (2, 1) in pairs(ds.splits["test"].pos)
    assert pairs(ds.splits["test"].pos) == {(2, 1), (20, 5)} and pairs(ds.splits["valid"].pos) == {(5, 4), (9, 15)}
    out = ds.out_graphs["train"]  # the ring's 30 ordered edges; the sampler's graph is their undirected union
    assert out.num_edges == 30 and out.has_edge([1, 2], [2, 1]).tolist() == [True, False]
    assert ds.graph.num_edges == 30 and ds.graph.has_edge([1, 2], [2, 1]).tolist() == [True, True]
    # reverse protocol: 2 -> 1 and 5 -> 4 have their reverse as an edge (train), so only 20 -> 5 and 9 -> 15 count
    for split, edge in (("test", (20, 5)), ("valid", (9, 15))):
        s = ds.splits[split]
        assert pairs(s.positives("reverse")) == {edge}
        assert s.negatives("reverse").tolist() == [[[edge[1], edge[0]]]]
    # negatives are ordered non-edges of the whole graph (the reverse of one may be an edge)
    full = DiGraph.from_edges(np.concatenate([s.pos for s in ds.splits.values()]), ds.num_nodes)
    neg = ds.splits["test"].negatives("original")
    assert not full.has_edge(neg[:, 0], neg[:, 1]).any()


def test_random_split_splits_each_direction_on_its_own(tmp_path):
    # 60 reciprocal pairs i <-> i + 1: 120 ordered edges, each in exactly one split; undirected, 60 edges
    rows = [(i, i + 1) for i in range(60)] + [(i + 1, i) for i in range(60)] + [(3, 4), (7, 7)]
    path = write_csv(tmp_path / "r.csv", rows)
    ds = load_dataset(DatasetSpec(str(path), directed=True))
    held = [pairs(ds.splits[s].pos) for s in ("train", "valid", "test")]
    assert sum(map(len, held)) == 120 and set().union(*held) == {(i, i + 1) for i in range(60)} | {
        (i + 1, i) for i in range(60)
    }
    assert len(ds.splits["test"].pos) == 12 and len(ds.splits["valid"].pos) == 6  # floor(10 %), floor(5 %) of 120
    assert len(ds.splits["test"].positives("reverse")) == 0  # every reverse is an edge: nothing to rank against it
    assert load_dataset(DatasetSpec(str(path))).graph.num_edges + 6 + 3 == 60  # undirected: 60 pairs, 9 held out


def test_a_time_column_dates_each_direction_by_its_own_first_row(tmp_path):
    # a ring i -> i + 1 at time i (40 edges); 1 -> 0 first appears at time 45: the latest pair, so a test edge,
    # while 0 -> 1 (time 0) trains. Undirected, 1,0 repeats the pair 0,1 first seen at time 0.
    rows = [(i, (i + 1) % 40, i) for i in range(40)] + [(1, 0, 45)]
    path = write_csv(tmp_path / "t.csv", rows, "src,dst,time")
    ds = load_dataset(DatasetSpec(str(path), directed=True))
    assert ds.temporal and (1, 0) in pairs(ds.splits["test"].pos) and (0, 1) in pairs(ds.splits["train"].pos)
    assert ds.out_graphs["test"].num_edges == len(ds.splits["train"].pos) + len(ds.splits["valid"].pos)
    # test: the latest 4 of 41 pairs (floor 10 %), 37 -> 38, 38 -> 39, 39 -> 0 and 1 -> 0; the reverse protocol
    # keeps the three whose reverse is no edge (0 -> 1 is one)
    assert pairs(ds.splits["test"].pos) == {(37, 38), (38, 39), (39, 0), (1, 0)}
    assert pairs(ds.splits["test"].positives("reverse")) == {(37, 38), (38, 39), (39, 0)}
    assert (0, 1) not in pairs(load_dataset(DatasetSpec(str(path))).splits["test"].pos)


def test_directed_applies_to_edge_lists_only():
    with pytest.raises(DatasetError, match="--directed .*edge-list files only"):
        load_dataset(DatasetSpec("citeseer", directed=True))


def test_induced_ordered_edges_of_a_four_node_subgraph():
    # global edges 10 -> 11 (the target u -> v), 11 -> 10 (its reverse), 10 -> 12, 12 -> 13, 13 -> 11, 12 -> 10
    out = DiGraph.from_edges([(10, 11), (11, 10), (10, 12), (12, 13), (13, 11), (12, 10)], 14)
    # link 1: u = 10, v = 11, context 13, 12 -> local 10 = 0, 11 = 1, 13 = 2, 12 = 3
    # link 2: u = 12, v = 10, context 11 -> local 12 = 0, 10 = 1, 11 = 2
    node_ptr, nodes = np.array([0, 4, 7]), np.array([10, 11, 13, 12, 12, 10, 11])
    ptr, edges = Inducer(out.indptr, out.indices).ordered_edges(node_ptr, nodes)
    assert ptr.tolist() == [0, 5, 8]
    # 0 -> 1 hidden; 11 -> 10 = 1 -> 0, 10 -> 12 = 0 -> 3, 12 -> 13 = 3 -> 2, 13 -> 11 = 2 -> 1, 12 -> 10 = 3 -> 0
    assert pairs(edges[:5]) == {(1, 0), (0, 3), (3, 2), (2, 1), (3, 0)}
    # 12 -> 10 = 0 -> 1 hidden; 10 -> 12 = 1 -> 0, 10 -> 11 = 1 -> 2, 11 -> 10 = 2 -> 1
    assert pairs(edges[5:]) == {(1, 0), (1, 2), (2, 1)}
    dense = Inducer(out.indptr, out.indices).dense(node_ptr, nodes, ordered=True)
    want = np.zeros((2, 4, 4), np.uint8)
    for b, lo, hi in ((0, 0, 5), (1, 5, 8)):
        want[b, edges[lo:hi, 0], edges[lo:hi, 1]] = 1
    assert (dense == want).all()
    union = out.undirected()  # the sampler's graph: the union, u - v hidden both ways, each edge once (a < b)
    uptr, uedges = Inducer(union.indptr, union.indices).edges(node_ptr, nodes)
    assert pairs(uedges[: uptr[1]]) == {(0, 3), (2, 3), (1, 2)} and pairs(uedges[uptr[1] :]) == {(1, 2)}


def test_old_manifests_read_as_undirected():
    m = Manifest.from_dict({"root": "x", "version": 2})  # a set built before direction existed
    assert m.directed is False and set_directed_graph(m) is None
    assert DatasetSpec.from_dict({"dataset": "e.csv"}).directed is False  # its config: undirected
    assert "directed" not in DatasetSpec("e.csv").to_dict()  # an undirected set's config is as it always was


@pytest.fixture(scope="module")
def directed_set(tmp_path_factory):
    """A directed set of the given split's graph, built by the real preprocess (embedded Ray, one CPU)."""
    tmp = tmp_path_factory.mktemp("directed")
    path = write_csv(tmp / "d.csv", given_split_rows(), "src,dst,split")
    cmd = [sys.executable, "-m", "preprocess", "--dataset", str(path), "--directed", "--sampling", "1,10"]
    proc = subprocess.run(
        [*cmd, "--out", str(tmp / "shards"), "--num-cpus", "1", "-q"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return read_manifest(proc.stdout.strip().splitlines()[-1].split()[-1])


@pytest.mark.slow  # a preprocess run: Ray's start-up alone is 10-35 s on a shared 2-core machine
def test_the_shard_set_ships_direction_and_the_reverse_queries(directed_set):
    m = directed_set
    body = json.loads((Path(m.root) / "manifest.json").read_text())
    assert body["version"] == 3 and m.directed and body["config"]["directed"] is True
    assert m.graphs["train"]["out"]["num_entries"] == 30 and m.graphs["train"]["num_entries"] == 60  # union: 2 x 30
    out = set_directed_graph(m)
    assert out.num_edges == 30 and out.has_edge([1, 2], [2, 1]).tolist() == [True, False]
    # test/reverse: one positive, 20 -> 5 (ids 0..29 are already the node numbers), against its reverse 5 -> 20
    entry = m.eval["test/reverse"]
    pos_cid, neg_cid = load_queries(m.queries_path(entry))
    assert entry["positives"] == 1 and entry["kind"] == "per_positive" and neg_cid.shape == (1, 1)
    assert pos_cid.tolist() == [0] and neg_cid.tolist() == [[1]]


@pytest.mark.slow  # one trainer run
def test_the_trainer_reads_direction_and_reports_reverse_accuracy(directed_set, tmp_path):
    cmd = [sys.executable, "-m", "trainer", "--preset", "tiny", "--shards", directed_set.root, "--out", str(tmp_path)]
    proc = subprocess.run([*cmd, "--epochs", "1", "--device", "cpu"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    # one test edge against its reverse: the share ranked above it is 0, 1/2 (a tie) or 1
    assert summary["test"]["reverse_acc"] in (0.0, 0.5, 1.0) and 0 <= summary["test"]["mrr"] <= 1
    state = torch.load(tmp_path / "best.pt", weights_only=True)
    n_max = directed_set.n_max
    assert state["model"]["w0"].shape[0] == 3 * n_max + 2  # typed rows: ids, out, in, two roles


def test_a_directed_training_view_holds_its_positives_turned_round():
    from preprocess.candidates import training_view
    from preprocess.config import CandidateConfig

    # a ring i -> i + 1 of 20 nodes: no edge has its reverse. 20 positives, 20 negatives: half of them (10) are
    # positives turned round, i + 1 -> i; uniform pairs would hold about one (20 of 360 ordered non-edges)
    edges = np.array([(i, (i + 1) % 20) for i in range(20)])
    graph = DiGraph.from_edges(edges, 20)
    view = training_view(edges, graph, CandidateConfig(), np.random.default_rng(0))
    neg = np.stack([view.src, view.dst], axis=1)[view.label == 0]
    assert len(neg) == 20 and len(pairs(neg) & pairs(edges[:, ::-1])) >= 10
    assert not graph.has_edge(neg[:, 0], neg[:, 1]).any()
