"""Dataset loaders: shipped citeseer, HeaRT dirs, Planetoid features/splits, OGB offline, edge lists,
the synthetic latent-space graph, and every DatasetError they promise."""

from __future__ import annotations

import builtins
import gzip
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from common.datasets import DatasetSpec, load_dataset
from common.datasets.base import DatasetError
from common.datasets.edgelist import load_edge_list
from common.datasets.heart import load_heart_dir
from common.datasets.negatives import sample_non_edges
from common.graph import Graph

# Real Planetoid/HeaRT files come from the `shared_data` fixture (tests/conftest.py): ../shared/data only,
# and a CI machine without it fails rather than skipping.


def keys(pairs, n):
    p = np.sort(np.asarray(pairs).reshape(-1, 2), axis=1)
    return p[:, 0] * n + p[:, 1]


def check_negatives(ds, full: Graph, protocol="original"):
    """Negatives: no self-loops, not edges of the full graph, distinct, valid/test disjoint."""
    seen = []
    for split in ("valid", "test"):
        neg = ds.splits[split].neg[protocol]
        assert neg.shape == ds.splits[split].pos.shape
        assert np.all(neg[:, 0] != neg[:, 1])
        assert not full.has_edge(neg[:, 0], neg[:, 1]).any()
        k = keys(neg, full.num_nodes)
        assert len(np.unique(k)) == len(k)
        seen.append(k)
    assert not np.isin(seen[0], seen[1]).any()


# ------------------------------------------------------------------------------ citeseer / HeaRT
@pytest.fixture(scope="module")
def citeseer():
    return load_dataset(DatasetSpec("citeseer"))


def test_shipped_citeseer_counts(citeseer):
    ds = citeseer
    assert ds.num_nodes == 3327
    assert [len(ds.splits[s].pos) for s in ("train", "valid", "test")] == [3918, 227, 455]
    assert ds.graph.num_edges == 3870  # 48 self-loops of train_pos dropped
    nodes = np.arange(ds.num_nodes)
    assert not ds.graph.has_edge(nodes, nodes).any()
    assert ds.splits["valid"].neg["heart"].shape == (227, 500, 2)
    assert ds.splits["test"].neg["heart"].shape == (455, 500, 2)
    assert ds.splits["valid"].neg["original"].shape == (227, 2)
    assert ds.splits["test"].neg["original"].shape == (455, 2)
    assert ds.protocols == ["original", "heart"] and ds.x is None and ds.test_graph is None


def test_heart_dir_matches_shipped_copy(citeseer):
    from tests.conftest import require_shared

    ds = load_heart_dir(require_shared("citeseer"))
    assert ds.fingerprint() == citeseer.fingerprint()
    assert ds.graph.fingerprint() == citeseer.graph.fingerprint()


def test_tiny_heart_dir(tmp_path):
    d = tmp_path / "tiny"
    d.mkdir()
    (d / "train_pos.txt").write_text("0\t1\n1\t2\n2\t2\n2\t3\n")
    (d / "valid_pos.txt").write_text("0\t2\n")
    (d / "test_pos.txt").write_text("1\t3\n0\t3\n")
    (d / "valid_neg.txt").write_text("0\t4\n")
    (d / "test_neg.txt").write_text("1\t4\n2\t4\n")
    np.save(d / "heart_test_samples.npy", np.array([[[1, 4], [0, 4]], [[0, 4], [2, 4]]], dtype=np.int64))
    ds = load_dataset(DatasetSpec(str(d)))
    assert ds.name == "tiny" and ds.num_nodes == 5
    assert ds.graph.edge_array().tolist() == [[0, 1], [1, 2], [2, 3]]
    assert ds.splits["test"].neg["heart"].shape == (2, 2, 2)
    assert "heart" not in ds.splits["valid"].neg
    (d / "valid_pos.txt").unlink()
    with pytest.raises(DatasetError, match="valid_pos.txt: missing"):
        load_dataset(DatasetSpec(str(d)))


# ------------------------------------------------------------------------------ Planetoid
def test_citeseer_features_match_pyg(tmp_path, shared_data):
    from torch_geometric.datasets import Planetoid

    raw = tmp_path / "CiteSeer" / "raw"
    raw.mkdir(parents=True)
    for f in (shared_data / "planetoid").glob("ind.citeseer.*"):
        shutil.copy(f, raw / f.name)
    pyg = Planetoid(str(tmp_path), "CiteSeer")[0]  # processes the raw copy, offline
    ds = load_dataset(DatasetSpec("citeseer", planetoid_dir=str(shared_data / "planetoid"), features=True))
    assert ds.x.shape == (3327, 3703) and ds.x.dtype == np.float32
    ref = pyg.x.numpy()
    zero_rows = np.flatnonzero(ref.sum(1) == 0)
    assert len(zero_rows) > 0  # the padded isolated test nodes
    rows = np.r_[0, 1, 2, 1000, 2311, 3326, zero_rows[:3]]
    assert np.array_equal(ds.x[rows], ref[rows])
    assert np.array_equal(ds.x, ref)
    # HeaRT edges live on the PyG graph (same node ids): every positive is a PyG edge.
    pyg_graph = Graph.from_edges(pyg.edge_index.numpy().T, num_nodes=3327)
    for split in ("train", "valid", "test"):
        pos = ds.splits[split].pos
        pos = pos[pos[:, 0] != pos[:, 1]]
        assert pyg_graph.has_edge(pos[:, 0], pos[:, 1]).all()


@pytest.mark.parametrize("name, shape, edges", [("cora", (2708, 1433), 5278), ("citeseer", (3327, 3703), 4552)])
def test_numpy_reader_equals_pyg_reader(name, shape, edges, shared_data):
    from common.datasets.planetoid import read_planetoid

    x_pyg, e_pyg = read_planetoid(name, shared_data / "planetoid", use_pyg=True)
    x_np, e_np = read_planetoid(name, shared_data / "planetoid", use_pyg=False)
    assert x_pyg.shape == shape and np.array_equal(x_pyg, x_np)
    g_pyg, g_np = (Graph.from_edges(e, num_nodes=shape[0]) for e in (e_pyg, e_np))
    assert g_pyg.num_edges == edges and g_pyg.fingerprint() == g_np.fingerprint()


def test_cora_random_split(shared_data):
    from common.datasets.planetoid import load_planetoid_random_split, read_planetoid

    pdir = str(shared_data / "planetoid")
    ds = load_dataset(DatasetSpec("cora", planetoid_dir=pdir, seed=0))
    assert ds.num_nodes == 2708 and ds.x is None
    sizes = [len(ds.splits[s].pos) for s in ("train", "valid", "test")]
    assert sizes == [4488, 263, 527] and sum(sizes) == 5278
    assert ds.graph.num_edges == 4488 and ds.metric == {"original": "mrr"} and ds.protocols == ["original"]
    x, raw_edges = read_planetoid("cora", pdir)
    full = Graph.from_edges(raw_edges, num_nodes=2708)
    allpos = np.concatenate([ds.splits[s].pos for s in ("train", "valid", "test")])
    assert len(np.unique(keys(allpos, 2708))) == 5278 and full.has_edge(allpos[:, 0], allpos[:, 1]).all()
    check_negatives(ds, full)
    assert ds.fingerprint() == load_planetoid_random_split("cora", pdir, seed=0).fingerprint()
    other = load_planetoid_random_split("cora", pdir, seed=1, features=True)
    assert other.fingerprint() != ds.fingerprint() and other.x.shape == (2708, 1433)


def test_planetoid_errors(tmp_path):
    from common.datasets.planetoid import load_planetoid_features

    with pytest.raises(DatasetError, match="needs --planetoid-dir"):
        load_dataset(DatasetSpec("cora"))
    (tmp_path / "ind.cora.x").write_bytes(b"")
    with pytest.raises(DatasetError, match=str(tmp_path / "ind.cora.tx")):
        load_planetoid_features("cora", tmp_path)


# ------------------------------------------------------------------------------ OGB (offline)
def _csv_gz(path: Path, arr):
    with gzip.open(path, "wt") as f:
        pd.DataFrame(np.asarray(arr)).to_csv(f, header=False, index=False)


def write_fake_ogb(root: Path, name: str, n: int = 30, seed: int = 0) -> dict:
    """A tiny dataset in OGB's on-disk layout (as the official zips unpack), split files saved the
    way OGB saves them (torch tensors for collab/ppa/ddi, numpy arrays for citation2)."""
    import torch

    rng = np.random.default_rng(seed)
    folder = root / name.replace("-", "_")
    raw = folder / "raw"
    raw.mkdir(parents=True)
    (folder / "RELEASE_v1.txt").write_text("v1\n")
    pairs = np.unique(np.sort(rng.integers(0, n, size=(120, 2)), axis=1), axis=0)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    train, valid, test = pairs[:-20], pairs[-20:-10], pairs[-10:]
    if name == "ogbl-collab":
        train = np.concatenate([train, train[:3]])  # collab repeats author pairs across years
    _csv_gz(raw / "edge.csv.gz", train)
    _csv_gz(raw / "num-node-list.csv.gz", [[n]])
    _csv_gz(raw / "num-edge-list.csv.gz", [[len(train)]])
    x = rng.standard_normal((n, 4)).astype(np.float32)
    if name != "ogbl-ddi":
        _csv_gz(raw / "node-feat.csv.gz", x)
    if name == "ogbl-collab":
        _csv_gz(raw / "edge_weight.csv.gz", np.ones((len(train), 1), dtype=np.int64))
        _csv_gz(raw / "edge_year.csv.gz", np.full((len(train), 1), 2010))
    if name == "ogbl-citation2":
        _csv_gz(raw / "node_year.csv.gz", np.full((n, 1), 2000))
    split_type = {"ogbl-collab": "time", "ogbl-citation2": "time", "ogbl-ppa": "throughput", "ogbl-ddi": "target"}
    sdir = folder / "split" / split_type[name]
    sdir.mkdir(parents=True)
    out = {"train": train, "valid": valid, "test": test, "x": x}
    for s, pos in (("train", train), ("valid", valid), ("test", test)):
        if name == "ogbl-citation2":
            d = {"source_node": pos[:, 0].copy(), "target_node": pos[:, 1].copy()}
            if s != "train":
                d["target_node_neg"] = rng.integers(0, n, size=(len(pos), 7))
                out[f"{s}_neg"] = d["target_node_neg"]
        else:
            d = {"edge": torch.from_numpy(pos)}
            if name == "ogbl-collab":
                d["weight"] = torch.ones(len(pos), dtype=torch.long)
                d["year"] = torch.full((len(pos),), 2010, dtype=torch.long)
            if s != "train":
                d["edge_neg"] = torch.from_numpy(rng.integers(0, n, size=(15, 2)))
                out[f"{s}_neg"] = d["edge_neg"].numpy()
        torch.save(d, sdir / f"{s}.pt")
    return out


@pytest.fixture
def no_prompt(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError(f"prompted: {args}")

    monkeypatch.setattr(builtins, "input", fail)


@pytest.mark.parametrize("name", ["ogbl-collab", "ogbl-ppa", "ogbl-ddi"])
def test_ogb_edge_datasets(tmp_path, name, no_prompt):
    import torch

    real_load = torch.load
    fake = write_fake_ogb(tmp_path, name)
    ds = load_dataset(DatasetSpec(name, ogb_root=str(tmp_path)))
    assert torch.load is real_load and builtins.input.__name__ == "fail"  # patches undone
    assert ds.num_nodes == 30 and ds.protocols == ["ogb"]
    assert ds.metric == {"ogb": {"ogbl-collab": "hits@50", "ogbl-ppa": "hits@100", "ogbl-ddi": "hits@20"}[name]}
    for s in ("train", "valid", "test"):
        assert np.array_equal(ds.splits[s].pos, fake[s])
    for s in ("valid", "test"):
        assert np.array_equal(ds.splits[s].neg["ogb"], fake[f"{s}_neg"]) and ds.splits[s].neg["ogb"].shape == (15, 2)
    assert ds.graph.fingerprint() == Graph.from_edges(fake["train"], num_nodes=30, x=ds.x).fingerprint()
    if name == "ogbl-ddi":
        assert ds.x is None
    else:
        assert np.allclose(ds.x, fake["x"], atol=1e-6)
    if name == "ogbl-collab":
        assert len(ds.splits["train"].pos) == len(fake["train"])  # repeated train edges kept as given
        expect = Graph.from_edges(np.concatenate([fake["train"], fake["valid"]]), num_nodes=30, x=ds.x)
        assert ds.graph_for("test").fingerprint() == expect.fingerprint()
        assert ds.graph_for("valid") is ds.graph
    else:
        assert ds.test_graph is None
    # Second load reads ogb's processed/data_processed (another torch.load ogb makes).
    assert (tmp_path / name.replace("-", "_") / "processed" / "data_processed").is_file()
    assert load_dataset(DatasetSpec(name, ogb_root=str(tmp_path))).fingerprint() == ds.fingerprint()


def test_ogb_citation2_per_positive_negatives(tmp_path, no_prompt):
    from common.datasets.ogb import load_ogb

    fake = write_fake_ogb(tmp_path, "ogbl-citation2")
    ds = load_ogb("ogbl-citation2", tmp_path / "ogbl_citation2")  # the dataset folder itself works too
    assert ds.metric == {"ogb": "mrr"} and ds.x.shape == (30, 4)
    for s in ("valid", "test"):
        pos, neg = ds.splits[s].pos, ds.splits[s].neg["ogb"]
        assert np.array_equal(pos, fake[s]) and neg.shape == (len(pos), 7, 2)
        assert np.array_equal(neg[:, :, 0], np.repeat(pos[:, :1], 7, axis=1))
        assert np.array_equal(neg[:, :, 1], fake[f"{s}_neg"])
    assert ds.graph.num_edges == len(fake["train"])


def test_ogb_read_only_folder_falls_back_to_ogb_reader(tmp_path, monkeypatch, no_prompt):
    import common.datasets.ogb as ogb_mod

    write_fake_ogb(tmp_path, "ogbl-collab")
    first = ogb_mod.load_ogb("ogbl-collab", tmp_path)
    shutil.rmtree(tmp_path / "ogbl_collab" / "processed")
    monkeypatch.setattr(ogb_mod.os, "access", lambda *a, **k: False)
    assert ogb_mod.load_ogb("ogbl-collab", tmp_path).fingerprint() == first.fingerprint()
    assert not (tmp_path / "ogbl_collab" / "processed" / "data_processed").exists()


def test_ogb_missing_files_raise_without_prompt(tmp_path, no_prompt):
    from common.datasets.ogb import load_ogb

    with pytest.raises(DatasetError, match="needs --ogb-root"):
        load_dataset(DatasetSpec("ogbl-collab"))
    with pytest.raises(DatasetError, match="unknown OGB dataset 'ogbl-wikikg2'"):
        load_ogb("ogbl-wikikg2", tmp_path)
    with pytest.raises(DatasetError, match=r"missing file\(s\) .*ogbl_ddi/RELEASE_v1.txt.*raw/edge.csv.gz"):
        load_ogb("ogbl-ddi", tmp_path)  # nothing there at all
    write_fake_ogb(tmp_path, "ogbl-collab")
    folder = tmp_path / "ogbl_collab"
    (folder / "RELEASE_v1.txt").unlink()  # ogb would ask "update the dataset now?"
    with pytest.raises(DatasetError, match=str(folder / "RELEASE_v1.txt")):
        load_ogb("ogbl-collab", tmp_path)
    (folder / "RELEASE_v1.txt").write_text("v1\n")
    (folder / "raw" / "edge_year.csv.gz").unlink()
    (folder / "split" / "time" / "test.pt").unlink()
    with pytest.raises(DatasetError, match=r"edge_year.csv.gz, .*split/time/test.pt"):
        load_ogb("ogbl-collab", tmp_path)


def test_ogb_never_prompts_even_if_ogb_asks(tmp_path, monkeypatch):
    """If ogb reaches input() anyway (a case our file checks missed), it is an error, not a hang."""
    import common.datasets.ogb as ogb_mod

    write_fake_ogb(tmp_path, "ogbl-ddi")
    monkeypatch.setattr(ogb_mod, "required_files", lambda *a: [])
    (tmp_path / "ogbl_ddi" / "RELEASE_v1.txt").unlink()
    with pytest.raises(DatasetError, match="ogb asked a question offline"):
        ogb_mod.load_ogb("ogbl-ddi", tmp_path)


# ------------------------------------------------------------------------------ edge lists
EDGE_ROWS = [
    (0, 1),
    (1, 2),
    (2, 0),
    (2, 3),
    (3, 4),
    (4, 5),
    (5, 6),
    (6, 7),
    (7, 8),
    (8, 9),
    (9, 0),
    (1, 5),
    (2, 6),
    (3, 7),
    (4, 8),
    (5, 9),
    (6, 0),
    (7, 1),
    (8, 2),
    (9, 3),
    (1, 0),
    (4, 4),
]


@pytest.mark.parametrize("ext", [".csv", ".parquet"])
def test_edge_list_random_split(tmp_path, ext):
    df = pd.DataFrame(EDGE_ROWS, columns=["src", "dst"])
    path = tmp_path / f"mine{ext}"
    df.to_csv(path, index=False) if ext == ".csv" else df.to_parquet(path)
    ds = load_edge_list(DatasetSpec(str(path), seed=3, split=(70, 10, 20)))
    full = Graph.from_edges(np.array(EDGE_ROWS), num_nodes=10)  # 20 edges: duplicate (1,0) and loop merged away
    assert ds.name == "mine" and ds.num_nodes == 10 and full.num_edges == 20
    assert [len(ds.splits[s].pos) for s in ("train", "valid", "test")] == [14, 2, 4]
    assert ds.graph.num_edges == 14 and ds.metric == {"original": "mrr"}
    allpos = np.concatenate([ds.splits[s].pos for s in ("train", "valid", "test")])
    assert np.array_equal(np.sort(keys(allpos, 10)), np.sort(keys(full.edge_array(), 10)))
    check_negatives(ds, full)
    assert load_edge_list(DatasetSpec(str(path), seed=3, split=(70, 10, 20))).fingerprint() == ds.fingerprint()
    assert load_edge_list(DatasetSpec(str(path), seed=4, split=(70, 10, 20))).fingerprint() != ds.fingerprint()
    assert load_dataset(DatasetSpec(str(path))).splits["test"].pos.shape == (2, 2)  # default 5/10 split


def test_split_flag_sets_the_fractions(tmp_path):
    """--split 70,10,20 (percent) reaches the random split: floor(10% of 20) = 2 valid, floor(20%) = 4 test."""
    path = tmp_path / "mine.csv"
    pd.DataFrame(EDGE_ROWS, columns=["src", "dst"]).to_csv(path, index=False)
    ds = load_dataset(DatasetSpec(str(path), seed=3, split=(70, 10, 20)))
    assert [len(ds.splits[s].pos) for s in ("train", "valid", "test")] == [14, 2, 4]
    assert ds.fingerprint() == load_edge_list(DatasetSpec(str(path), seed=3, split=(70, 10, 20))).fingerprint()
    assert (
        load_dataset(DatasetSpec(str(path), split=(85, 5, 10))).fingerprint()
        == load_dataset(DatasetSpec(str(path))).fingerprint()
    )
    assert load_dataset(DatasetSpec(str(path), split=(50, 25, 25))).splits["valid"].neg["original"].shape == (5, 2)


def test_a_shard_sets_dataset_has_the_sets_split_and_nodes(tmp_path):
    """pipelines.score and pipelines.recommend load a run's dataset from its shard set's manifest config
    (load_set_dataset): a set built with --split 50,25,25 --nodes FILE --seed 3 gets that split and node list
    back, not the default 85,5,10 split without the isolated nodes."""
    import json

    from common.datasets import load_set_dataset
    from preprocess.config import PreprocessConfig, SamplingConfig

    path, nodes = tmp_path / "mine.csv", tmp_path / "nodes.csv"
    pd.DataFrame(EDGE_ROWS, columns=["src", "dst"]).to_csv(path, index=False)
    pd.DataFrame({"node": [*range(10), 10, 11]}).to_csv(nodes, index=False)  # 10 and 11: isolated
    config = PreprocessConfig(
        data=DatasetSpec(str(path), split=(50, 25, 25), nodes=str(nodes), seed=3), sampling=SamplingConfig(1, 5)
    ).to_dict()
    config = json.loads(json.dumps(config))  # as the manifest stores it: the split is a list
    ds = load_set_dataset(config)
    want = load_dataset(DatasetSpec(str(path), split=(50, 25, 25), nodes=str(nodes), seed=3))
    assert ds.num_nodes == 12 and [len(ds.splits[s].pos) for s in ("train", "valid", "test")] == [10, 5, 5]
    for s in ("train", "valid", "test"):
        np.testing.assert_array_equal(ds.splits[s].pos, want.splits[s].pos)
    assert ds.fingerprint() == want.fingerprint() != load_dataset(DatasetSpec(str(path), seed=3)).fingerprint()
    # the flags pipelines.score takes to find the data elsewhere override the recorded ones
    other = tmp_path / "other.csv"
    pd.DataFrame(EDGE_ROWS[:12], columns=["src", "dst"]).to_csv(other, index=False)
    assert (
        load_set_dataset({**config, "nodes": None}, name=str(other)).fingerprint()
        == load_dataset(DatasetSpec(str(other), split=(50, 25, 25), seed=3)).fingerprint()
    )


@pytest.mark.parametrize(
    "text, match",
    [
        ("85,5", "expected three percentages"),
        ("a,b,c", "expected three"),
        ("85,5,10,0", "expected three"),
        ("-5,55,50", "expected three"),
        ("nan,50,50", "expected three"),
        ("80,10,20", "sum to 110, not 100"),
        ("90,10,0", "valid and test must be above 0"),
        ("90,0,10", "valid and test must be above 0"),
    ],
)
def test_split_flag_errors(text, match):
    from common.datasets.fractions import parse_split

    with pytest.raises(DatasetError, match=match) as err:
        parse_split(text)
    assert str(err.value).startswith("--split") and "\n" not in str(err.value)


def test_split_flag_refused_where_the_dataset_has_its_own_split(tmp_path):
    with pytest.raises(DatasetError, match="--split: citeseer comes with its own split"):
        load_dataset(DatasetSpec("citeseer", split=(80, 10, 10)))
    with pytest.raises(DatasetError, match="--split: synthetic comes with its own split"):
        load_dataset(DatasetSpec("synthetic", split=(80, 10, 10)))
    path = tmp_path / "given.csv"
    pd.DataFrame(EDGE_ROWS, columns=["src", "dst"]).assign(split="train").to_csv(path, index=False)
    with pytest.raises(DatasetError, match=r"given.csv: --split: the file's split column fixes the split"):
        load_dataset(DatasetSpec(str(path), split=(80, 10, 10)))


@pytest.mark.parametrize("ext", [".csv", ".parquet"])
def test_edge_list_with_split_column(tmp_path, ext):
    split = ["train"] * 14 + ["valid"] * 3 + ["test"] * 5
    df = pd.DataFrame(EDGE_ROWS, columns=["src", "dst"]).assign(split=split)
    df.loc[0, "split"] = " Train "  # whitespace and case are forgiven
    path = tmp_path / f"given{ext}"
    write = lambda frame: frame.to_csv(path, index=False) if ext == ".csv" else frame.to_parquet(path)
    write(df)
    # (1, 0) is marked test while (0, 1) is a train edge: a test positive inside the training graph
    with pytest.raises(DatasetError, match=r"1 edge\(s\) are marked both train and test .*first: 0,1"):
        load_edge_list(DatasetSpec(str(path)))
    df = df.drop(index=20)
    write(df)
    ds = load_edge_list(DatasetSpec(str(path)))
    assert ds.splits["train"].pos.tolist()[:3] == [[0, 1], [1, 2], [0, 2]]
    assert len(ds.splits["train"].pos) == 14
    assert ds.splits["valid"].pos.tolist() == [[4, 8], [5, 9], [0, 6]]
    assert ds.splits["test"].pos.tolist() == [[1, 7], [2, 8], [3, 9]]  # (4, 4) dropped: a self-loop
    check_negatives(ds, Graph.from_edges(np.array(EDGE_ROWS), num_nodes=10))
    assert ds.fingerprint() == load_edge_list(DatasetSpec(str(path))).fingerprint()


@pytest.mark.parametrize(
    "content, match",
    [
        ("a,b\n1,2\n", r"missing column\(s\) src, dst \(found: a, b\)"),
        ("src,target\n1,2\n", r"missing column\(s\) dst \(found: src, target\)"),
        ("src,dst\n1,\n", "column 'dst' has an empty node id in data row 1"),
        ("src,dst,split\n1,2,train\n2,3,val\n3,4,holdout\n", "unknown split value\\(s\\) 'holdout', 'val'"),
        ("", "empty file"),
        ("src,dst\n", r"empty file \(header only\)"),
        ("src,dst,split\n1,2,test\n2,3,valid\n", "no train edges"),
        ("src,dst,split\n1,1,train\n2,3,valid\n", "no train edges"),
        ("src,dst\n1,1\n2,2\n", "no train edges"),
        # a set with no valid/test links used to be written, and only the trainer failed, later
        (
            "src,dst,split\n1,2,train\n2,3,train\n3,4,train\n",
            r"no valid and no test edges \(train 3, valid 0, test 0\)",
        ),
        ("src,dst,split\n1,2,train\n2,3,test\n", r"no valid edges \(train 1, valid 0, test 1\)"),
    ],
)
def test_edge_list_errors(tmp_path, content, match):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(DatasetError, match=match) as err:
        load_edge_list(DatasetSpec(str(path)))
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_edge_list_file_errors(tmp_path):
    with pytest.raises(DatasetError, match="nope.csv: file not found"):
        load_edge_list(DatasetSpec(str(tmp_path / "nope.csv")))
    (tmp_path / "edges.txt").write_text("src,dst\n1,2\n")
    with pytest.raises(DatasetError, match="edges.txt: unknown extension; use .csv"):
        load_edge_list(DatasetSpec(str(tmp_path / "edges.txt")))
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(DatasetError, match="broken.parquet: could not read"):
        load_edge_list(DatasetSpec(str(tmp_path / "broken.parquet")))
    (tmp_path / "ok.csv").write_text("src,dst\n0,1\n")
    with pytest.raises(DatasetError, match="--split: expected three percentages train,valid,test, each above 0"):
        load_edge_list(DatasetSpec(str(tmp_path / "ok.csv"), split=(-10, 60, 50)))


def test_sample_non_edges_refuses_impossible_requests():
    complete = Graph.from_edges(np.array([[0, 1], [0, 2], [1, 2]]))
    with pytest.raises(
        DatasetError,
        match=r"needs 1 node pairs that are not edges, but the graph \(3 nodes, 3 "
        r"edges\) has only 0 left",
    ):
        sample_non_edges(complete, 1, np.random.default_rng(0))
    sparse = Graph.from_edges(np.array([[0, 1]]), num_nodes=4)
    with pytest.raises(DatasetError, match="found only 0 of 2 acceptable"):
        sample_non_edges(sparse, 2, np.random.default_rng(0), accept=lambda q: np.zeros(len(q), bool))


# ------------------------------------------------------------------------------ synthetic latent space
def test_latent_space_graph_degree_and_determinism():
    """Its speed is bench/sampler.py's to report (it times the generation of this very graph)."""
    from common.datasets.synthetic import latent_space_graph

    g = latent_space_graph(10_000, 15.0, seed=0)
    assert g.num_nodes == 10_000 and abs(2 * g.num_edges / g.num_nodes - 15.0) < 1.5
    small = latent_space_graph(1200, 8.0, seed=1, s=2.0)
    assert abs(2 * small.num_edges / 1200 - 8.0) < 0.8
    assert small.fingerprint() == latent_space_graph(1200, 8.0, seed=1, s=2.0).fingerprint()
    assert small.fingerprint() != latent_space_graph(1200, 8.0, seed=2, s=2.0).fingerprint()


def test_load_latent_space_dataset():
    from common.datasets.synthetic import LatentSpace, load_latent_space, sample_latent_space

    ds = load_latent_space(0, LatentSpace(num_nodes=1500, p=16, avg_degree=12.0))
    _, z, edges, _ = sample_latent_space(1500, 12.0, 0)
    full = Graph.from_edges(edges, num_nodes=1500)
    assert abs(2 * full.num_edges / 1500 - 12.0) < 1.2
    n_test = int(round(0.1 * len(edges)))
    n_valid = int(round(0.05 * (len(edges) - n_test)))
    assert [len(ds.splits[s].pos) for s in ("test", "valid", "train")] == [
        n_test,
        n_valid,
        len(edges) - n_test - n_valid,
    ]
    assert ds.x.shape == (1500, 16) and ds.x.dtype == np.float32 and ds.name == "synthetic"
    check_negatives(ds, full)
    d2 = lambda q: np.sum((z[q[:, 0]] - z[q[:, 1]]) ** 2, axis=1)
    threshold = np.quantile(d2(edges), 0.9)
    for s in ("valid", "test"):
        assert np.all(d2(ds.splits[s].neg["original"]) > threshold)  # far apart in latent space
    assert ds.fingerprint() == load_latent_space(0, LatentSpace(num_nodes=1500, p=16, avg_degree=12.0)).fingerprint()
    with pytest.raises(DatasetError, match="avg_degree=3000"):
        load_latent_space(params=LatentSpace(num_nodes=100, avg_degree=3000))
    with pytest.raises(DatasetError, match="num_nodes=1"):
        load_latent_space(params=LatentSpace(num_nodes=1))


@pytest.mark.parametrize("column, row", [("src", 0), ("dst", 4), ("dst", 7)])
def test_an_empty_string_id_names_its_column_and_row(tmp_path, column, row):
    """Names in a Parquet file of several row groups (chunks, as read): an empty id is found among the
    distinct ids and reported with its column and first data row (1-based), in whichever chunk it is."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = {k: [f"{k}{i}" for i in range(8)] for k in ("src", "dst")}
    names[column][row] = ""
    path = tmp_path / "names.parquet"
    pq.write_table(pa.table(names), path, row_group_size=3)
    with pytest.raises(DatasetError, match=f"column '{column}' has an empty node id in data row {row + 1};") as err:
        load_edge_list(DatasetSpec(str(path)))
    assert "\n" not in str(err.value) and str(path) in str(err.value)
