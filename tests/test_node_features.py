"""Node features of a user's graph (--node-features): every file kind read into the graph's node order, every
bad input refused in one line naming the file and the row, and cora as an edge list plus its Planetoid features
giving the paper-dataset path's shard content and model inputs, down to equal training losses."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.datasets import DatasetError, DatasetSpec, load_dataset
from common.datasets.node_features import load_node_features
from common.graph import Graph, GraphError
from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig
from tests.conftest import cached_set, require_shared

ROOT = Path(__file__).resolve().parents[1]
IDS = np.array(["a", "b", "c", "d"], dtype=object)  # a graph's node ids, sorted as the mapping sorts them


def edges_csv(tmp_path: Path) -> Path:
    """A 30-node ring named n00..n29 plus a chord."""
    rows = [(f"n{i:02d}", f"n{(i + 1) % 30:02d}") for i in range(30)] + [("n00", "n15")]
    path = tmp_path / "edges.csv"
    path.write_text("src,dst\n" + "\n".join(f"{a},{b}" for a, b in rows) + "\n")
    return path


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# ---------------------------------------------------------------------------- what is read
def test_numeric_columns_in_any_row_order(tmp_path):
    f = write(tmp_path / "x.csv", "id,f1,f2\nc,3,0.5\na,1,-1e2\nd,4,0\nb,2, 7 \n")
    x = load_node_features(f, IDS, 4)
    assert x.dtype == np.float32 and x.tolist() == [[1, -100], [2, 7], [3, 0.5], [4, 0]]


@pytest.mark.parametrize("cell", ['"[1, 2, 3]"', '"1,2,3"', "1 2 3", "1;2;3", "[1 2 3]"])
def test_one_list_column_in_text(tmp_path, cell):
    f = write(tmp_path / "x.tsv", "node\temb\n" + "".join(f"{n}\t{cell}\n" for n in "abcd"))
    assert load_node_features(f, IDS, 4).tolist() == [[1, 2, 3]] * 4


def test_parquet_list_column_and_integer_ids(tmp_path):
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"node": [20, 10], "v": [[0.0, 2.0], [1.0, 3.0]]}), path)
    x = load_node_features(path, np.array([10, 20]), 2)
    assert x.tolist() == [[1, 3], [0, 2]]


def test_gzipped_csv(tmp_path):
    import gzip

    path = tmp_path / "x.csv.gz"
    path.write_bytes(gzip.compress(b"node,f\nb,2\na,1\nc,3\nd,4\n"))
    assert load_node_features(path, IDS, 4)[:, 0].tolist() == [1, 2, 3, 4]


def test_npy_needs_ids_zero_to_n(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(6, dtype=np.float64).reshape(3, 2))
    assert load_node_features(path, np.arange(3), 3).tolist() == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(
        DatasetError,
        match=r"x.npy: a .npy table's row i is node i, which needs the graph's ids to "
        r"be exactly 0..2; write a .csv or .parquet with a column node",
    ):
        load_node_features(path, np.array([1, 2, 3]), 3)
    with pytest.raises(DatasetError, match=r"3 rows for a graph of 2 nodes: rows 2 to 2 are not nodes"):
        load_node_features(path, np.arange(2), 2)


def test_edge_list_with_features_puts_them_on_the_graph(tmp_path):
    feats = write(tmp_path / "x.csv", "node,f\n" + "".join(f"n{i:02d},{i}\n" for i in range(30)))
    ds = load_dataset(DatasetSpec(str(edges_csv(tmp_path)), node_features=feats))
    assert ds.x.shape == (30, 1) and ds.x[:, 0].tolist() == list(range(30))  # ids n00..n29 sort as numbers do
    plain = load_dataset(DatasetSpec(str(edges_csv(tmp_path))))
    assert plain.x is None and plain.fingerprint() != ds.fingerprint()


# ---------------------------------------------------------------------------- what is refused, one line each
@pytest.mark.parametrize(
    "text, match",
    [
        ("node,f1,f2\na,1,2\nb,1,nan\nc,1,1\nd,1,1\n", r"data row 2, feature 2 holds nan and is not finite"),
        ("node,f1\na,1\nb,inf\nc,1\nd,1\n", r"data row 2, feature 1 holds inf and is not finite"),
        ("node,f1\na,1\nb,1e39\nc,1\nd,1\n", r"data row 2, feature 1 holds 1e\+39 and is beyond float32's range"),
        ("node,f1\na,1\nb,1\nc,x7\nd,1\n", r"column 'f1' holds 'x7' in data row 3, not a number"),
        ("node,f1\na,1\nb,\nc,1\nd,1\n", r"column 'f1' is empty in data row 2; fill the cell"),
        (
            'node,v\na,"1,2"\nb,"1,2"\nc,"1,2,3"\nd,"1,2"\n',
            r"data row 3 holds 3 values in column 'v', data row 1 holds 2",
        ),
        ('node,v\na,"1,2"\nb,"1,q"\nc,"1,2"\nd,"1,2"\n', r"column 'v' holds 'q' in data row 2, not a number"),
        (
            "node,f1\na,1\nb,1\nzz,1\nc,1\nd,1\n",
            r"data row 3: node id 'zz' is not a node of the graph \(1 such rows\); "
            r"declare such nodes with --nodes",
        ),
        ("node,f1\na,1\nb,1\na,2\nc,1\nd,1\n", r"node id 'a' has two rows \(data rows 1 and 3\)"),
        (
            "node,f1\na,1\nb,1\nd,1\n",
            r"1 of 4 nodes have no row \(first: node 'c'\); add the rows, or pass "
            r"--fill-features zero\|mean",
        ),
        ("name,f1\na,1\n", r"no column named node or id \(found: name, f1\)"),
        ("node\na\n", r"no feature column besides node"),
    ],
)
def test_bad_feature_files_are_refused_in_one_line(tmp_path, text, match):
    f = write(tmp_path / "bad.csv", text)
    with pytest.raises(DatasetError, match=match) as err:
        load_node_features(f, IDS, 4)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"--node-features {f}: ")


def test_bad_npy_is_refused(tmp_path):
    path = tmp_path / "x.npy"
    x = np.ones((3, 2))
    x[1, 1] = np.nan
    np.save(path, x)
    with pytest.raises(DatasetError, match=r"row 1 \(node 1\), feature 2 holds nan and is not finite"):
        load_node_features(path, None, 3)
    np.save(path, np.ones(3))
    with pytest.raises(DatasetError, match=r"expected a 2-D numeric array"):
        load_node_features(path, None, 3)


def test_fill_is_explicit_and_logged(tmp_path, caplog):
    f = write(tmp_path / "x.csv", "node,f1,f2\na,1,10\nc,3,20\n")
    caplog.set_level("INFO")
    assert load_node_features(f, IDS, 4, fill="zero").tolist() == [[1, 10], [0, 0], [3, 20], [0, 0]]
    assert "2 of 4 nodes had no feature row: filled with the zeros (--fill-features zero)" in caplog.text
    assert load_node_features(f, IDS, 4, fill="mean").tolist() == [[1, 10], [2, 15], [3, 20], [2, 15]]
    assert "filled with the column means (--fill-features mean)" in caplog.text


def test_feature_flags_on_a_paper_dataset_and_fill_without_a_file_are_refused(tmp_path):
    with pytest.raises(DatasetError, match=r"--node-features x.csv: a feature file applies to edge-list files only"):
        load_dataset(DatasetSpec("citeseer", node_features="x.csv"))
    with pytest.raises(DatasetError, match=r"--fill-features zero: fills the rows a --node-features file lacks"):
        PreprocessConfig(data=DatasetSpec("e.csv", fill_features="zero"), sampling=SamplingConfig(1, 3))
    with pytest.raises(DatasetError, match=r"--features loads a paper dataset's node features, --node-features"):
        PreprocessConfig(data=DatasetSpec("e.csv", features=True, node_features="x.csv"), sampling=SamplingConfig(1, 3))


def test_cli_refuses_a_nan_in_one_line_and_writes_nothing(tmp_path):
    feats = write(tmp_path / "x.csv", "node,f\n" + "".join(f"n{i:02d},{'nan' if i == 7 else i}\n" for i in range(30)))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "preprocess",
            "--dataset",
            str(edges_csv(tmp_path)),
            "--node-features",
            feats,
            "--out",
            str(tmp_path / "shards"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert errors == [
        f"python -m preprocess: error: --node-features {feats}: data row 8, feature 1 holds nan and is "
        "not finite; features must be finite numbers"
    ]
    assert not list(tmp_path.rglob("manifest.json"))


def test_a_featured_graph_takes_new_nodes_only_with_their_rows():
    g = Graph.from_edges([[0, 1], [1, 2]], num_nodes=3, x=np.eye(3))
    grown = g.edited(add=[[2, 3]], num_nodes=4, new_x=[[1, 1, 1]])
    assert grown.x.shape == (4, 3) and grown.x[3].tolist() == [1, 1, 1] and grown.has_edge([3], [2])[0]
    with pytest.raises(GraphError, match=r"1 new node\(s\) need their features, \(1, 3\) rows; got none"):
        g.edited(add=[[2, 3]], num_nodes=4)
    with pytest.raises(GraphError, match="NaN or infinite"):
        g.edited(num_nodes=4, new_x=[[np.nan, 0, 0]])


# ---------------------------------------------------------------------------- cora: edge list + feature file
def test_cora_edge_list_with_feature_file_equals_the_paper_path(cora_pair):
    from preprocess.plan import candidate_sets
    from preprocess.set_files import set_files

    paper, folder = cora_pair
    own = load_dataset(DatasetSpec(str(folder / "cora-edges.csv"), node_features=str(folder / "cora-features.csv")))
    assert np.array_equal(own.x, paper.x) and own.graph.fingerprint() == paper.graph.fingerprint()
    for s in ("train", "valid", "test"):
        assert np.array_equal(own.splits[s].pos, paper.splits[s].pos)
        assert all(np.array_equal(own.splits[s].neg[p], paper.splits[s].neg[p]) for p in paper.splits[s].neg)
    kw = dict(sampling=SamplingConfig(1, 3), candidates=CandidateConfig(views=2, protocols=("original",)))
    cfg_paper = PreprocessConfig(data=DatasetSpec("cora", features=True), **kw)
    cfg_own = PreprocessConfig(data=DatasetSpec(str(folder / "cora-edges.csv"), node_features="f.csv"), **kw)
    sets_paper, sets_own = candidate_sets(cfg_paper, paper, ["original"]), candidate_sets(cfg_own, own, ["original"])
    for a, b in zip(sets_paper, sets_own, strict=True):
        assert (a.split, a.protocol, a.view, a.graph) == (b.split, b.protocol, b.view, b.graph)
        assert all(np.array_equal(getattr(a.cands, k), getattr(b.cands, k)) for k in ("src", "dst", "label"))
    graphs = {"train": paper.graph}
    files_paper = dict(set_files(cfg_paper, paper, sets_paper, graphs))
    files_own = dict(set_files(cfg_own, own, sets_own, {"train": own.graph}))
    files_own.pop("node_ids.parquet")  # the edge list's ids (0..N-1 here) ship with it; the paper set has none
    assert files_own == files_paper  # features.npy, queries and graph arrays byte for byte


def test_cora_feature_file_gives_the_same_shards_and_losses(cora_pair, shard_cache, tmp_path):
    """Both sets built by the Ray job: the same blocks and feature table; the tiny preset trained 3 steps on CPU
    on each gives the same loss at every step."""
    from common.shards import load_features, read_manifest, read_shard
    from preprocess.job import run
    from tests.conftest import train_tiny_on_cpu

    paper, folder = cora_pair
    kw = dict(
        sampling=SamplingConfig(1, 3),
        num_cpus=2,
        candidates=CandidateConfig(views=1, percent=10.0, protocols=("original",)),
    )
    planetoid = str(require_shared("planetoid", "ind.cora.x").parent)
    set_paper = run(
        PreprocessConfig(
            data=DatasetSpec("cora", features=True, planetoid_dir=planetoid),
            out=str(cached_set(shard_cache, "cora-features")),
            **kw,
        )
    )
    set_own = run(
        PreprocessConfig(
            data=DatasetSpec(str(folder / "cora-edges.csv"), node_features=str(folder / "cora-features.csv")),
            out=str(cached_set(shard_cache, "cora-edge-list-features")),
            **kw,
        )
    )
    m_paper, m_own = read_manifest(set_paper), read_manifest(set_own)
    assert np.array_equal(load_features(m_paper), load_features(m_own))
    from common.datasets import load_set_dataset

    assert load_set_dataset(m_own.config).fingerprint() == m_own.fingerprint  # features reload with the run
    assert [s["sha256"] for s in m_paper.shards] == [s["sha256"] for s in m_own.shards]
    for entry in m_own.shards[:2]:
        a = list(read_shard(Path(set_paper) / entry["name"]))
        b = list(read_shard(Path(set_own) / entry["name"]))
        assert all(np.array_equal(x.nodes, y.nodes) and np.array_equal(x.label, y.label) for x, y in zip(a, b))
    losses = []
    for name, shards in (("paper", set_paper), ("own", set_own)):
        train_tiny_on_cpu(shards, tmp_path / name, max_steps=3)
        lines = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        losses.append([r["loss"] for r in lines if "loss" in r])
    assert len(losses[0]) >= 1 and losses[0] == losses[1]


# ---------------------------------------------------------------------------- the small trust fixes
@pytest.mark.parametrize("cell, shown", [("1e30", "1e+30"), ("-2.5e13", "-2.5e+13")])
def test_a_value_beyond_the_feature_bound_is_refused_naming_row_column_and_fix(tmp_path, cell, shown):
    f = write(tmp_path / "x.csv", f"node,f1,f2\na,1,2\nb,3,{cell}\nc,1,1\nd,1,1\n")
    with pytest.raises(DatasetError) as err:
        load_node_features(f, IDS, 4)
    assert str(err.value) == (
        f"--node-features {f}: data row 2, feature 2 holds {shown}, beyond the bound of +-1e+12 on a feature value "
        "(the model reads values as they are); standardise the column, or take log1p of counts"
    )
    path = tmp_path / "x.npy"
    x = np.ones((3, 2))
    x[2, 0] = float(cell)
    np.save(path, x)
    with pytest.raises(DatasetError, match=rf"row 2 \(node 2\), feature 1 holds {re.escape(shown)}, beyond"):
        load_node_features(path, None, 3)


def test_the_bound_itself_is_read_and_a_wide_column_is_logged(tmp_path, caplog):
    f = write(tmp_path / "x.csv", "node,f1,f2\na,1,1e12\nb,3,-5\nc,1,1\nd,1,1\n")
    caplog.set_level("WARNING")
    assert load_node_features(f, IDS, 4)[0, 1] == np.float32(1e12)
    assert "1 feature column(s) reach beyond +-1000 (feature 2: 1e+12)" in caplog.text
    caplog.clear()
    load_node_features(write(tmp_path / "y.csv", "node,f1\na,1\nb,-1000\nc,1\nd,1\n"), IDS, 4)
    assert not caplog.text  # unit-scale columns say nothing


def test_an_empty_feature_file_says_what_a_feature_file_holds(tmp_path):
    f = write(tmp_path / "x.csv", "")
    with pytest.raises(DatasetError) as err:
        load_node_features(f, IDS, 4)
    assert "one row per node: its id, then its feature values" in str(err.value)
    assert "edge" not in str(err.value)


def test_a_node_without_a_row_on_integer_ids_is_named_as_a_plain_number(tmp_path):
    f = write(tmp_path / "x.csv", "node,f1\n10,1\n20,2\n")
    with pytest.raises(DatasetError) as err:
        load_node_features(f, np.array([10, 20, 140]), 3)
    assert "(first: node 140)" in str(err.value) and "np." not in str(err.value)
