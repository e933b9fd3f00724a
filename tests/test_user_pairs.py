"""The user's own pairs: labelled evaluation pairs (--eval-pairs, protocol "pairs") and known training non-links
(--train-negatives), checked like edge lists (each bad row refused in one line naming the file and the row),
carried into the candidate sets, the manifest and the trainer's evaluation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from common.datasets import DatasetError, DatasetSpec, load_dataset
from preprocess.candidates import KNOWN_NEG_SHARE, training_view
from preprocess.config import CandidateConfig
from tests.conftest import cached_set

# ids 100..129: a ring of train edges, held-out valid and test chords
TRAIN = [(100 + i, 100 + (i + 1) % 30) for i in range(30)]
VALID = [(100, 110), (101, 111), (102, 112)]
TEST = [(103, 113), (104, 114), (105, 115), (106, 116)]


def write(path: Path, header: str, rows) -> str:
    path.write_text(header + "\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    return str(path)


@pytest.fixture
def edges(tmp_path) -> str:
    rows = [(*e, "train") for e in TRAIN] + [(*e, "valid") for e in VALID] + [(*e, "test") for e in TEST]
    return write(tmp_path / "edges.csv", "src,dst,split", rows)


def user(ds, pairs) -> list:
    return sorted(tuple(sorted(int(x) for x in ds.node_ids[p])) for p in np.asarray(pairs))


GOOD = [
    (100, 110, 1, "valid"),
    (100, 120, 0, "valid"),
    (121, 101, 0, "valid"),
    (103, 113, 1, "test"),
    (105, 125, 0, "test"),
    (107, 127, 0, "test"),
    (108, 128, 1, "test"),
    (120, 100, 0, "valid"),
]  # a repeat, reversed: counts once


def test_eval_pairs_with_a_split_column(tmp_path, edges, caplog):
    caplog.set_level("INFO")
    ds = load_dataset(DatasetSpec(edges, eval_pairs=write(tmp_path / "p.csv", "src,dst,label,split", GOOD)))
    valid, test = ds.splits["valid"], ds.splits["test"]
    assert user(ds, valid.positives("pairs")) == [(100, 110)]
    assert user(ds, valid.negatives("pairs")) == [(100, 120), (101, 121)]
    assert user(ds, test.positives("pairs")) == [(103, 113), (108, 128)]  # a link outside the file's edges too
    assert user(ds, test.negatives("pairs")) == [(105, 125), (107, 127)]
    assert user(ds, valid.positives("original")) == sorted(VALID)  # the random-negative protocol is unchanged
    assert ds.protocols == ["original", "pairs"] and ds.selection_metric("pairs") == "mrr"
    assert "p.csv: 1 repeated row(s) count once" in caplog.text
    plain = load_dataset(DatasetSpec(edges))
    assert plain.fingerprint() != ds.fingerprint()
    assert np.array_equal(plain.splits["test"].neg["original"], test.neg["original"])


def test_heuristics_rank_the_file_s_links_under_pairs(tmp_path, edges):
    """On the training ring: (110, 112) has the common neighbour 111, (103, 113) none, the non-links none:
    ranks 1 and 1 + (0 + 2) / 2 = 2, MRR 0.75."""
    from common.heuristics import score_split

    rows = [
        (103, 113, 1, "test"),
        (110, 112, 1, "test"),
        (105, 125, 0, "test"),
        (107, 127, 0, "test"),
        (100, 120, 0, "valid"),
    ]
    ds = load_dataset(DatasetSpec(edges, eval_pairs=write(tmp_path / "p.csv", "src,dst,label,split", rows)))
    scored = score_split(ds, "test", ["original", "pairs"], ["cn"])
    assert scored["pairs"]["cn"]["mrr"] == 0.75 and scored["pairs"]["cn"]["hits@1"] == 0.5
    assert (
        scored["original"]["cn"]
        == score_split(load_dataset(DatasetSpec(edges)), "test", ["original"], ["cn"])["original"]["cn"]
    )


def test_only_non_links_rank_against_the_split_s_own_positives(tmp_path, edges):
    rows = [(100, 120, 0, "valid"), (105, 125, 0, "test"), (107, 127, 0, "test")]
    ds = load_dataset(DatasetSpec(edges, eval_pairs=write(tmp_path / "p.csv", "src,dst,label,split", rows)))
    assert ds.splits["test"].positives("pairs") is ds.splits["test"].pos
    assert user(ds, ds.splits["test"].negatives("pairs")) == [(105, 125), (107, 127)]


def test_without_a_split_column_held_out_edges_keep_theirs_and_the_rest_is_seeded(tmp_path, edges):
    rows = [(u, v, lab) for u, v, lab, _ in GOOD] + [(100 + i, 100 + (i + 7) % 30, 0) for i in range(20)]
    path = write(tmp_path / "p.csv", "src,dst,label", rows)
    a, b = load_dataset(DatasetSpec(edges, eval_pairs=path)), load_dataset(DatasetSpec(edges, eval_pairs=path))
    assert (100, 110) in user(a, a.splits["valid"].positives("pairs"))
    assert (103, 113) in user(a, a.splits["test"].positives("pairs"))
    negs = [user(a, a.splits[s].negatives("pairs")) for s in ("valid", "test")]
    assert not set(negs[0]) & set(negs[1]) and len(negs[0]) + len(negs[1]) == 24
    assert 3 <= len(negs[0]) <= 15  # about a third of them in valid, at 5 : 10
    assert negs == [user(b, b.splits[s].negatives("pairs")) for s in ("valid", "test")]  # seeded


@pytest.mark.parametrize(
    "rows, match",
    [
        ([(100, 999, 0, "valid")], r"data row 1: node id '999' \(dst\) is not a node of the graph"),
        ([(100, 100, 0, "valid")], r"data row 1 \(100, 100\): a pair of a node with itself"),
        (
            [(100, 120, 0, "valid"), (120, 100, 1, "valid")],
            r"data row 2 \(120, 100\): marked a link here and a non-link "
            r"in data row 1; a pair is one or the other",
        ),
        ([(100, 101, 0, "valid")], r"data row 1 \(100, 101\): labelled a non-link but it is a train edge of the graph"),
        ([(104, 114, 0, "valid")], r"labelled a non-link but it is a test edge of the graph"),
        ([(100, 101, 1, "valid")], r"labelled a link but it is a training edge: the model trains on it"),
        ([(100, 110, 1, "test")], r"marked test here but it is a valid edge of the graph; keep it in valid"),
        (
            [(100, 120, 0, "valid"), (100, 120, 0, "test")],
            r"data row 2 \(100, 120\): in test here and in valid in data "
            r"row 1; .*keep it in one split",
        ),
        ([(100, 120, 0, "train")], r"split 'train': evaluation pairs are valid or test"),
        ([(100, 120, "maybe", "valid")], r"label 'maybe' is not 1 \(link\) or 0 \(non-link\)"),
        ([(100, 120, 0, "valid")], r"no non-link \(label 0\) is in test; .*add some"),
    ],
)
def test_bad_eval_pairs_are_refused_in_one_line(tmp_path, edges, rows, match):
    path = write(tmp_path / "p.csv", "src,dst,label,split", rows)
    with pytest.raises(DatasetError, match=match) as err:
        load_dataset(DatasetSpec(edges, eval_pairs=path))
    assert str(err.value).startswith(f"--eval-pairs {path}: ") and "\n" not in str(err.value)


def test_eval_pairs_need_a_label_column(tmp_path, edges):
    path = write(tmp_path / "p.csv", "src,dst", [(100, 120)])
    with pytest.raises(
        DatasetError,
        match=r"no column 'label' \(found: src, dst\); --eval-pairs reads columns "
        r"src,dst,label\[,split\]",
    ):
        load_dataset(DatasetSpec(edges, eval_pairs=path))


# ---------------------------------------------------------------------------- --train-negatives
def test_train_negatives_are_checked_and_kept(tmp_path, edges, caplog):
    caplog.set_level("INFO")
    plain = load_dataset(DatasetSpec(edges))
    drawn = tuple(int(x) for x in plain.node_ids[plain.splits["valid"].neg["original"][0]])
    rows = [(100, 115), (115, 100), (101, 120), drawn]  # a repeat, and one of the random valid negatives
    ds = load_dataset(DatasetSpec(edges, train_negatives=write(tmp_path / "n.csv", "src,dst", rows)))
    assert user(ds, ds.train_negatives) == [(100, 115), (101, 120)]
    assert "1 known non-link(s) are random evaluation negatives of the dataset: left out of training" in caplog.text


@pytest.mark.parametrize(
    "rows, header, match",
    [
        ([(100, 101)], "src,dst", r"data row 1 \(100, 101\): a known non-link here but a train edge of the graph"),
        ([(113, 103)], "src,dst", r"a known non-link here but a test edge of the graph"),
        ([(100, 120, 1)], "src,dst,label", r"labelled 1 \(a link\); --train-negatives holds known non-links only"),
        ([(120, 100)], "src,dst", r"also a valid pair of --eval-pairs: training on it would leak its label"),
        ([(7, 100)], "src,dst", r"data row 1: node id '7' \(src\) is not a node of the graph"),
    ],
)
def test_bad_train_negatives_are_refused_in_one_line(tmp_path, edges, rows, header, match):
    path = write(tmp_path / "n.csv", header, rows)
    pairs = write(tmp_path / "p.csv", "src,dst,label,split", GOOD)
    with pytest.raises(DatasetError, match=match) as err:
        load_dataset(DatasetSpec(edges, eval_pairs=pairs, train_negatives=path))
    assert str(err.value).startswith(f"--train-negatives {path}: ")


def test_known_non_links_make_up_to_half_of_each_view(edges, tmp_path, caplog):
    caplog.set_level("INFO")
    ds = load_dataset(DatasetSpec(edges))
    pos, graph = ds.splits["train"].pos, ds.graph
    few = np.array([[0, 15], [1, 20]])
    for seed in range(3):
        v = training_view(
            pos, graph, CandidateConfig(percent=100.0, neg_ratio=1), np.random.default_rng(seed), known=few
        )
        neg = {tuple(sorted(p)) for p in zip(v.src[v.label == 0], v.dst[v.label == 0])}
        assert len(v) == 2 * len(pos) and {(0, 15), (1, 20)} <= neg
    many = np.array([[i, (i + 7) % 30] for i in range(30)])
    views = [
        training_view(pos, graph, CandidateConfig(percent=100.0, neg_ratio=1), np.random.default_rng(s), known=many)
        for s in range(2)
    ]
    known = {tuple(sorted(p)) for p in many}
    got = [{tuple(sorted(p)) for p in zip(v.src[v.label == 0], v.dst[v.label == 0])} & known for v in views]
    half = int(len(pos) * KNOWN_NEG_SHARE)  # 15 of 30 (a uniform draw may hit a known pair by chance too)
    assert all(half <= len(g) < len(known) for g in got) and got[0] != got[1]
    assert caplog.text.count(f"{len(pos)} negatives (0 of them 2-hop non-edges, {half} known non-links)") == 2
    bare = training_view(pos, graph, CandidateConfig(percent=100.0, neg_ratio=1), np.random.default_rng(0))
    again = training_view(pos, graph, CandidateConfig(percent=100.0, neg_ratio=1), np.random.default_rng(0), known=None)
    assert np.array_equal(bare.src, again.src) and np.array_equal(bare.dst, again.dst)


# ---------------------------------------------------------------------------- through preprocess and the trainer
def test_preprocess_flags_build_pairs_sets_the_trainer_evaluates(tmp_path, edges, shard_cache):
    from common.shards import load_queries, read_manifest
    from preprocess.__main__ import build_parser, config_from_args
    from preprocess.job import run

    pairs = write(tmp_path / "p.csv", "src,dst,label,split", GOOD)
    negatives = write(tmp_path / "n.csv", "src,dst", [(100, 115), (101, 120), (102, 125)])
    out = cached_set(shard_cache, "user-pairs")
    argv = [
        "--dataset",
        edges,
        "--eval-pairs",
        pairs,
        "--train-negatives",
        negatives,
        "--sampling",
        "1,3",
        "--views",
        "1",
        "--out",
        str(out),
        "--num-cpus",
        "2",
    ]
    cfg = config_from_args(build_parser().parse_args(argv))
    assert (cfg.data.eval_pairs, cfg.data.train_negatives) == (pairs, negatives)
    manifest = read_manifest(run(cfg))
    entry = manifest.eval["test/pairs"]
    assert (entry["positives"], entry["candidates"], entry["links"]) == (2, 4, "eval-pairs")
    assert manifest.eval["test/original"]["positives"] == len(TEST)
    from common.datasets import load_set_dataset

    again = load_set_dataset(manifest.config)  # what score / recommend / evaluate load: the same data
    assert again.fingerprint() == manifest.fingerprint and again.train_negatives is not None
    pos_cid, neg_cid = load_queries(Path(manifest.root) / entry["queries"])
    assert len(pos_cid) == 2 and neg_cid.shape == (2,)
    from common.node_ids import load_node_ids
    from common.shards import read_shard

    ids = load_node_ids(manifest)
    root = Path(manifest.root)
    train = [b for e in manifest.shards if e["split"] == "train" for b in read_shard(root / e["name"])]
    negatives = {
        tuple(sorted(int(x) for x in ids[[u, v]])) for b in train for u, v, y in zip(b.src, b.dst, b.label) if y == 0
    }
    assert {(100, 115), (101, 120), (102, 125)} <= negatives  # 3 known non-links, under half of 30 negatives
    alone = config_from_args(build_parser().parse_args(argv + ["--protocol", "pairs"]))
    assert alone.candidates.protocols == ("pairs",)
    from pipelines.core.shard_sets import shutdown_embedded_ray
    from trainer.config import config_for
    from trainer.train import run as train

    shutdown_embedded_ray()  # its workers would take the cores
    common = dict(max_steps=2, device="cpu", progress=False, data={"num_workers": 0})
    summary = train(config_for("tiny", str(manifest.root), str(tmp_path / "run"), protocol="pairs", **common))
    assert summary["config"]["protocol"] == "pairs" and "mrr" in summary["test"]
    # "beside": a run selected under original, its best weights then evaluated on the pairs
    train(config_for("tiny", str(manifest.root), str(tmp_path / "orig"), protocol="original", **common))
    beside = train(
        config_for(
            "tiny",
            str(manifest.root),
            str(tmp_path / "beside"),
            protocol="pairs",
            eval_weights=str(tmp_path / "orig" / "best.pt"),
            **common,
        )
    )
    assert beside["weights_from"] == str((tmp_path / "orig" / "best.pt").resolve()) and "mrr" in beside["test"]
