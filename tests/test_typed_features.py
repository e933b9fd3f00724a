"""Node features of a typed graph (common/datasets/typed_features.py): one table keyed by entity ids, or one table
per node kind placed in its own columns; hand-made files, hand-computed tables, every refusal in one line, and a
real preprocess and trainer reading them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from common.datasets import DatasetError, DatasetSpec, load_dataset
from common.datasets.typed_features import kind_files
from tests.test_typed_run import write_reverse_kg
from tests.test_user_item_typed import write_ratings

ROOT = Path(__file__).resolve().parents[1]
# write_ratings' nodes: users u1..u4 are nodes 0-3, items a..h nodes 4-11


def kind_tables(tmp_path: Path, users: str = "node,age,f\nu1,1,0\nu2,2,1\nu3,3,0\nu4,4,1\n") -> str:
    (tmp_path / "users.csv").write_text(users)
    (tmp_path / "items.csv").write_text("node,year\n" + "".join(f"{c},{k / 10}\n" for k, c in enumerate("abcdefgh")))
    return f"user={tmp_path / 'users.csv'},item={tmp_path / 'items.csv'}"


def test_the_flag_reads_one_table_or_a_table_per_kind():
    assert kind_files("feats.csv") is None
    assert kind_files("user=u.csv, item = i.parquet") == {"user": "u.csv", "item": "i.parquet"}
    with pytest.raises(DatasetError, match="'i.csv' names no kind; give every table as KIND=FILE"):
        kind_files("user=u.csv,i.csv")
    with pytest.raises(DatasetError, match="kind 'user' is given twice"):
        kind_files("user=u.csv,user=v.csv")


def test_each_kind_gets_its_own_columns_and_zeros_in_the_others(tmp_path):
    ds = load_dataset(DatasetSpec(str(write_ratings(tmp_path)), node_features=kind_tables(tmp_path)))
    expected = np.zeros((12, 3), np.float32)
    expected[:4, 0], expected[:4, 1] = [1, 2, 3, 4], [0, 1, 0, 1]  # users: age, f; the item column 0
    expected[4:, 2] = np.arange(8) / 10  # items: year; the user columns 0
    np.testing.assert_array_equal(ds.x, expected)
    np.testing.assert_array_equal(ds.graph_for("test").x, expected)  # test's graph (train + valid) has them too


def test_a_kind_without_a_table_is_zeros_and_fill_works_within_a_kind(tmp_path):
    (tmp_path / "users.csv").write_text("node,age\nu1,1\nu2,3\n")  # u3, u4 lack a row
    spec = dict(node_features=f"user={tmp_path / 'users.csv'}")
    with pytest.raises(DatasetError, match="--fill-features zero|mean"):
        load_dataset(DatasetSpec(str(write_ratings(tmp_path)), **spec))
    ds = load_dataset(DatasetSpec(str(write_ratings(tmp_path)), **spec, fill_features="mean"))
    # the mean of the kind's own rows (1 and 3), not of every node's; items have no table: zeros
    assert ds.x[:, 0].tolist() == [1, 3, 2, 2] + [0] * 8


def test_bad_kind_tables_are_refused_in_one_line(tmp_path):
    ratings = str(write_ratings(tmp_path))
    tables = kind_tables(tmp_path)
    with pytest.raises(DatasetError, match=r"user and item ids are two id spaces .* --node-features user=FILE,item="):
        load_dataset(DatasetSpec(ratings, node_features=str(tmp_path / "users.csv")))
    with pytest.raises(DatasetError, match=r"no node kind 'film' in this graph \(its kinds: user, item\)"):
        load_dataset(DatasetSpec(ratings, node_features=f"film={tmp_path / 'items.csv'}"))
    with pytest.raises(DatasetError, match="data row 1: node id 'u1' is not a node of the graph"):
        load_dataset(DatasetSpec(ratings, node_features=tables.replace("items.csv", "users.csv")))  # users as items
    folder = write_reverse_kg(tmp_path / "kg")
    with pytest.raises(DatasetError, match="this graph has no node kinds; give one table"):
        load_dataset(DatasetSpec(str(folder), node_features=f"user={tmp_path / 'users.csv'}"))


def test_a_knowledge_graph_reads_one_table_by_entity_or_one_per_kind(tmp_path):
    folder = write_reverse_kg(tmp_path / "kg", n=10, pairs=30)
    plain = load_dataset(DatasetSpec(str(folder)))
    ids = plain.node_ids.tolist()
    table = tmp_path / "entities.csv"
    table.write_text("node,v\n" + "".join(f"{e},{int(e[1:])}\n" for e in reversed(ids)))  # any row order
    ds = load_dataset(DatasetSpec(str(folder), node_features=str(table)))
    assert ds.x[:, 0].tolist() == [int(e[1:]) for e in ids]
    # kinds from --nodes: a relation r from kind p (p0-p3) to kind q (q0-q3); the q table alone, the p rows zeros
    kinds = tmp_path / "pq"
    kinds.mkdir()
    for split, pairs in (("train", [(0, 0), (0, 1), (1, 1), (1, 2), (2, 2), (2, 3), (3, 0)]), ("valid", [(3, 1)]),
                         ("test", [(3, 2)])):  # fmt: skip
        (kinds / f"{split}.txt").write_text("".join(f"p{h}\tr\tq{t}\n" for h, t in pairs))
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("node,type\n" + "".join(f"{k}{i},{k}\n" for k in "pq" for i in range(4)))
    (tmp_path / "q.csv").write_text("node,w\n" + "".join(f"q{i},{10 * i + 5}\n" for i in range(4)))
    ds = load_dataset(DatasetSpec(str(kinds), nodes=str(nodes), node_features=f"q={tmp_path / 'q.csv'}"))
    assert ds.node_ids.tolist() == [f"{k}{i}" for k in "pq" for i in range(4)]
    assert ds.x[:, 0].tolist() == [0, 0, 0, 0, 5, 15, 25, 35]


def test_the_command_line_refuses_a_single_table_on_a_ratings_file_in_one_line(tmp_path):
    ratings = write_ratings(tmp_path)
    kind_tables(tmp_path)
    cmd = [sys.executable, "-m", "preprocess", "--dataset", str(ratings), "--out", str(tmp_path / "shards")]
    proc = subprocess.run([*cmd, "--node-features", str(tmp_path / "users.csv")], cwd=ROOT, capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "two id spaces" in last and "--node-features user=FILE,item=FILE" in last


@pytest.mark.slow  # a preprocess run and two trainer runs
def test_a_typed_set_ships_the_kind_tables_and_the_trainer_reads_them(tmp_path):
    rng = np.random.default_rng(0)
    users, items = rng.integers(0, 20, 400), rng.integers(0, 30, 400)
    ratings = tmp_path / "r.csv"
    ratings.write_text("user,item,time\n" + "".join(f"{u},{i},{t}\n" for t, (u, i) in enumerate(zip(users, items))))
    (tmp_path / "u.csv").write_text("node,a,b\n" + "".join(f"{u},{u % 3},{u % 2}\n" for u in range(20)))
    (tmp_path / "i.csv").write_text("node,c\n" + "".join(f"{i},{i / 30}\n" for i in range(30)))
    cmd = [sys.executable, "-m", "preprocess", "--dataset", str(ratings), "--sampling", "1,10", "--views", "1"]
    cmd += ["--node-features", f"user={tmp_path / 'u.csv'},item={tmp_path / 'i.csv'}"]
    proc = subprocess.run([*cmd, "--out", str(tmp_path / "s"), "--num-cpus", "1", "-q"], cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    shards = proc.stdout.strip().splitlines()[-1].split()[-1]
    features = json.loads((Path(shards) / "manifest.json").read_text())["features"]
    assert features["dim"] == 3 and features["kinds"] == {"user": [0, 2], "item": [2, 3]}
    from common.manifest import read_manifest
    from pipelines.core.runs import run_dataset

    assert run_dataset(read_manifest(shards)).feature_kinds == {"user": (0, 2), "item": (2, 3)}  # serve reads it
    from common.manifest_schema import schema_problem

    body = json.loads((Path(shards) / "manifest.json").read_text())
    body["features"]["kinds"]["item"] = [2, 4]  # beyond the table's 3 columns
    assert schema_problem(body) == "features.kinds.item: expected [start, stop] columns within 0..3, got [2, 4]"
    for name, extra in (("with", []), ("without", ["--no-features"])):
        cmd = [sys.executable, "-m", "trainer", "--preset", "tiny", "--shards", shards, "--out", str(tmp_path / name)]
        proc = subprocess.run([*cmd, "--epochs", "1", "--device", "cpu", "--protocol", "kg", *extra], cwd=ROOT,
                              capture_output=True, text=True)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        assert summary["node_features"] is (name == "with") and 0 < summary["test"]["mrr"] <= 1
    state = torch.load(tmp_path / "with" / "best.pt", weights_only=True)["model"]
    assert state["features.0.weight"].shape[1] == 3  # user a, b and item c, each kind in its columns


def test_a_served_new_node_may_bring_its_kinds_row_alone(tmp_path):
    from pipelines.serve.state import ServeError, serving_state

    ds = load_dataset(DatasetSpec(str(write_ratings(tmp_path)), node_features=kind_tables(tmp_path)))
    assert ds.feature_kinds == {"user": (0, 2), "item": (2, 3)}
    state, _ = serving_state(ds, "all", 10, features=True)
    # a new user (columns 0-1) and a new item (column 2), each with its kind's row alone; the rest zeros
    record = state.edit_record({"add": [["u9", "z", "user->item"]], "features": {"u9": [7, 1], "z": [0.5]}})
    assert dict(map(tuple, [(n, tuple(r)) for n, r in record["features"]])) == {
        "u9": (7.0, 1.0, 0.0),
        "z": (0.0, 0.0, 0.5),
    }
    whole = state.edit_record({"add": [["u8", "a", "user->item"]], "features": {"u8": [1, 2, 3]}})  # the whole row
    assert whole["features"] == [["u8", [1.0, 2.0, 3.0]]]
    with pytest.raises(ServeError, match=r"expected 3 finite numbers, .* \(or the 2 of its kind's own columns\)"):
        state.edit_record({"add": [["u7", "a", "user->item"]], "features": {"u7": [1]}})
