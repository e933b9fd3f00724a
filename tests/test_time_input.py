"""The time input (trainer/data/clock.py, trainer/model/time_input.py): edge times shipped with a temporal set, each
node's activity just before a link is asked, hand-computed on the ratings file of test_user_item_typed (pair k of
ROWS at time k, train 1-17, valid 18, test 19-20), and the flag's errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from common.datasets import DatasetSpec, load_dataset
from common.graph import Graph, edge_first_times
from common.manifest import ShardError
from common.manifest_schema import schema_problem
from common.shards import Block, load_edge_times
from tests.test_degree_input import ROOT, ratings_set, tiny_run  # noqa: F401  (the hand-made ratings file as a shard set)
from tests.test_user_item_typed import ROWS, write_ratings
from trainer.config import config_from_args
from trainer.data.clock import FRACTIONS, WIDTH, ClockTable, EdgeClock, edge_clocks
from trainer.data.packing import BatchPacker
from trainer.model.pencil import ModelConfig, Pencil
from trainer.model.time_input import TimeInput

ORIGIN, END, SPAN = 1.0, 18.0, 17.0  # the training history's first time, the valid boundary, their distance
NODE = {u: i for i, u in enumerate(["u1", "u2", "u3", "u4", "a", "b", "c", "d", "e", "f", "g", "h"])}


def times_of(node: str, upto: int) -> list[int]:
    """The times of a node's pairs among the first `upto` rows (row k at time k)."""
    return [t for t, pair in enumerate(ROWS[:upto], start=1) if node in pair]


def expected(node: str, now: float, upto: int = 17) -> list[float]:
    """log1p of the decayed sums and the count of the node's edges strictly before `now` (file units)."""
    before = [t for t in times_of(node, upto) if t < now]
    sums = [sum(math.exp(-(now - t) / (f * SPAN)) for t in before) for f in FRACTIONS]
    return [math.log1p(x) for x in [*sums, len(before)]]


def test_an_edges_time_is_its_first_row_on_both_directions():
    g = Graph.from_edges(np.array([[0, 1], [1, 2]]), num_nodes=3)
    rows = np.array([[1, 0], [0, 1], [2, 1], [0, 2]])  # (0, 1) twice, at 5 then 3; (0, 2) is no edge of g
    got = edge_first_times(g, rows, np.array([5.0, 3.0, 7.0, 1.0]))
    # CSR rows: 0 -> [1], 1 -> [0, 2], 2 -> [1]
    assert got.tolist() == [3.0, 3.0, 7.0, 7.0]


def test_a_temporal_split_keeps_each_graphs_edge_times_and_end(tmp_path):
    ds = load_dataset(DatasetSpec(str(write_ratings(tmp_path))))
    for which, graph, upto, end in (("train", ds.graph, 17, 18.0), ("test", ds.test_graph, 18, 19.0)):
        times, got_end = ds.edge_times[which]
        assert got_end == end and times.shape == graph.indices.shape
        first = {frozenset((NODE[u], NODE[i])): t for t, (u, i) in enumerate(ROWS[:upto], start=1)}
        rows = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
        assert times.tolist() == [first[frozenset((int(z), int(w)))] for z, w in zip(rows, graph.indices)]
    assert set(ds.without_test().edge_times) == {"train"}


def test_activity_counts_and_decays_only_the_edges_strictly_before_now():
    # one node, edges at 1, 3 and 9 (item a's raters), asked at the end, at 3 and at 1
    clock = EdgeClock.build(np.array([0, 3]), np.array([9.0, 1.0, 3.0]), END, ORIGIN, SPAN)
    table = ClockTable(clock)
    node = torch.zeros(3, dtype=torch.int64)
    now = (torch.tensor([18.0, 3.0, 1.0], dtype=torch.float64) - ORIGIN) / SPAN
    got = table.activity(node, now)
    for row, at in zip(got.tolist(), (18.0, 3.0, 1.0)):
        before = [t for t in (1, 3, 9) if t < at]
        want = [math.log1p(sum(math.exp(-(at - t) / (f * SPAN)) for t in before)) for f in FRACTIONS]
        assert row == pytest.approx([*want, math.log1p(len(before))], rel=1e-12, abs=1e-15)
    assert got[2].tolist() == [0.0] * WIDTH  # nothing before the first edge
    assert clock.arrival.tolist() == [0.0]  # the first time, in span units from the origin


def test_an_old_rows_tiny_sums_stay_exact_behind_a_busy_row():
    # row 0 holds 10,000 recent edges, row 1 two edges at the very start, asked just after them: their weights at
    # the end are about exp(-16) at tau = 1/16, which a cumulative sum across rows would blur against row 0's total
    busy = np.linspace(0.9, 1.0, 10_000, endpoint=False)
    clock = EdgeClock.build(np.array([0, 10_000, 10_002]), np.concatenate([busy, [0.0, 0.0005]]), 1.0, 0.0, 1.0)
    got = ClockTable(clock).activity(torch.tensor([1]), torch.tensor([0.001], dtype=torch.float64))
    want = [math.log1p(math.exp(-0.001 / f) + math.exp(-0.0005 / f)) for f in FRACTIONS]
    assert got[0, : len(FRACTIONS)].tolist() == pytest.approx(want, rel=1e-12)


def test_the_set_ships_its_clock_and_a_batch_is_asked_at_its_heads_arrival_or_the_graphs_end(ratings_set):
    _, manifest = ratings_set
    times, end = load_edge_times(manifest, "train")
    assert end == 18.0 and len(times) == 34 and load_edge_times(manifest, "test")[1] == 19.0
    clocks = edge_clocks(manifest)
    assert clocks["train"].end == 1.0 and clocks["test"].end == pytest.approx(18 / 17)  # train span units
    time = TimeInput(8).attach(clocks)
    # u2 -> a (its own training pair, at 3, when u2 arrived) and u1 -> g, each as its two endpoints alone: tokens
    # u2, a, then the task tokens u2, a; then u1, g, u1, g
    block = Block(*(np.array(x) for x in ([0, 1], [1, 0], [4, 10], [1.0, 1.0], [0, 2, 4], [1, 4, 0, 10], [0, 0])))
    batch = BatchPacker.for_set(manifest, "train", manifest.n_max)(block)
    head = [0.0] * WIDTH
    batch.clock = "arrival"  # u2's link at 3: a was rated by u1 at 1, and its own edge (at 3) is not before it
    got = time.activity(batch).tolist()
    assert got[0] == got[2] == head and got[1] == got[3] == pytest.approx(expected("a", 3.0))
    assert expected("a", 3.0)[-1] == math.log1p(1)
    assert got[5] == got[7] == head  # u1 arrived at 1: nothing was rated before
    batch.clock = "train"  # every link at the valid boundary: a's raters at 1, 3, 9; g's at 15 and 17
    got = time.activity(batch).tolist()
    assert got[1] == pytest.approx(expected("a", 18.0)) and got[5] == pytest.approx(expected("g", 18.0))
    assert got[0] == head and got[4] == head
    batch.clock = None  # a scoring batch: the newest graph, train + valid, at the test boundary (u1 -> g at 18)
    assert time.activity(batch).tolist()[5] == pytest.approx(expected("g", 19.0, upto=18))


def test_the_training_loader_asks_at_arrival_and_evaluation_at_the_graphs_end(ratings_set):  # noqa: F811
    from tests.test_trainer_data import cfg
    from trainer.data import loaders

    _, manifest = ratings_set
    try:
        batches = list(loaders.train_loader(manifest, 0, loaders.LoaderSettings(cfg(num_workers=0)))[0])
        assert batches and all(b.clock == "arrival" for b in batches)
        for split, graph in (("valid", "train"), ("test", "test")):
            ev = list(loaders.eval_loader(manifest, split, "kg", loaders.LoaderSettings(cfg(num_workers=0))))
            assert ev and all(b.clock == graph for b in ev)
    finally:
        loaders.close_loaders()


def test_without_the_time_input_the_model_is_as_before_and_with_it_only_a_linear_is_added():
    cfg = ModelConfig(n_max=4, hidden=16, layers=1, heads=2, ffn=32, dropout=0.0)
    torch.manual_seed(0)
    off = Pencil(cfg)
    torch.manual_seed(0)
    on = Pencil(cfg.replace(time_features=True))
    assert off.time is None and set(on.state_dict()) - set(off.state_dict()) == {
        "time.linear.weight",
        "time.linear.bias",
    }
    assert all(torch.equal(v, on.state_dict()[k]) for k, v in off.state_dict().items())


def test_the_flag_and_a_set_without_times_are_refused_in_one_line(ratings_set, tmp_path):
    argv = ["--shards", "s", "--preset", "tiny", "--out", "o"]
    assert config_from_args([*argv, "--time-features"]).model.time_features is True
    assert config_from_args(argv).model.time_features is None
    _, manifest = ratings_set
    bare = replace(
        manifest, graphs={k: {f: v for f, v in g.items() if f != "times"} for k, g in manifest.graphs.items()}
    )
    with pytest.raises(ShardError, match="ships no edge times .* drop --time-features"):
        load_edge_times(bare, "train")
    edges = tmp_path / "edges.csv"  # no time column: its set ships no clock, and the trainer says so in one line
    edges.write_text("src,dst\n" + "".join(f"{i},{(i * 7 + 1) % 30}\n" for i in range(30)))
    pre = [sys.executable, "-m", "preprocess", "--dataset", str(edges), "--out", str(tmp_path / "s"), "-q"]
    proc = subprocess.run(pre, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shards = proc.stdout.strip().splitlines()[-1].split()[-1]
    cmd = [sys.executable, "-m", "trainer", "--preset", "tiny", "--shards", shards, "--out", str(tmp_path / "r")]
    proc = subprocess.run([*cmd, "--device", "cpu", "--time-features"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "ships no edge times" in proc.stderr.strip().splitlines()[-1]


def test_the_manifest_schema_checks_the_times_record(ratings_set):
    _, manifest = ratings_set
    raw = json.loads((Path(manifest.root) / "manifest.json").read_text())
    assert schema_problem(raw) is None
    raw["graphs"]["train"]["times"]["end"] = "soon"
    assert schema_problem(raw) == "graphs.train.times.end: 'soon' is not a finite number"
    raw["graphs"]["train"]["times"] = {"file": "times.npy", "end": 1.0}
    assert "graph-train-times.npy" in schema_problem(raw)


def test_a_checkpoint_round_trips_with_the_sets_clocks_and_one_without_the_field_still_loads(ratings_set):
    from pipelines.core.runs import load_model

    tmp, manifest = ratings_set
    ckpt = tiny_run(manifest, tmp / "time-run", "--time-features")
    assert ckpt["config"]["model"]["time_features"] is True and not any(
        k.startswith("time.clock") for k in ckpt["model"]
    )
    model = load_model(ckpt, manifest, torch.device("cpu"))
    assert torch.equal(model.time.linear.weight, ckpt["model"]["time.linear.weight"])
    assert set(model.time.clocks) == {"train", "test"}
    assert model.time.clocks["test"].keys.tolist() == ClockTable(edge_clocks(manifest)["test"]).keys.tolist()
    # a run saved before the field existed: no "time_features" in its config, no time weights
    ckpt["config"]["model"].pop("time_features")
    ckpt["model"] = {k: v for k, v in ckpt["model"].items() if not k.startswith("time.")}
    assert load_model(ckpt, manifest, torch.device("cpu")).time is None
