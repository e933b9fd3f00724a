"""A refusal's hint names a value the same command accepts : `pencil preprocess` on a graph too
small for the default split suggests a --split its parser takes and the split then works; `pencil heuristics`, whose
--split names the split it scores, suggests a split column, and the file with one is scored; a --neg-ratio or
--percent too large for a dense graph is answered with flags that preprocess accepts and that pass the check."""

from __future__ import annotations

import itertools
import random
import re
from pathlib import Path

import pytest

from common.datasets import DatasetError, DatasetSpec, load_dataset
from common.graph import Graph
from preprocess.config import ConfigError

SMALL = [(i, (i + 1) % 12) for i in range(12)]  # 12 edges: 5% valid holds none


def write(path: Path, rows, split=None) -> Path:
    head = "src,dst" + (",split" if split else "")
    path.write_text(
        head
        + "\n"
        + "".join(
            f"{a},{b}" + (f",{s}" if split else "") + "\n"
            for (a, b), s in zip(rows, split or [None] * len(rows), strict=True)
        )
    )
    return path


def hinted(message: str) -> list[str]:
    """The flags and values a message suggests (`pass --a 1 --b 2`, `at most --percent X` is not one: see below)."""
    return re.findall(r"(--[a-z-]+) ([0-9][0-9.,]*[0-9]|[0-9])", message)


def preprocess_args(tmp_path: Path, *flags):
    from preprocess.__main__ import build_parser, config_from_args

    argv = ["--dataset", str(tmp_path / "g.csv"), "--out", str(tmp_path / "shards"), *flags]
    return config_from_args(build_parser().parse_args(argv))


def test_preprocess_suggests_a_split_it_accepts(tmp_path):
    edges = write(tmp_path / "g.csv", SMALL)
    with pytest.raises(DatasetError) as err:
        load_dataset(DatasetSpec(str(edges)))
    (flag, value), *_ = hinted(str(err.value))
    assert flag == "--split", str(err.value)
    cfg = preprocess_args(tmp_path, flag, value)  # the parser and the config take it
    ds = load_dataset(DatasetSpec(str(edges), split=cfg.data.split))  # and the split it makes has valid and test edges
    assert len(ds.splits["valid"].pos) and len(ds.splits["test"].pos)


def test_too_few_edges_for_any_split_suggests_only_more_edges(tmp_path):
    with pytest.raises(DatasetError, match=r"add edges \(2 cannot make a train, a valid and a test edge\)"):
        load_dataset(DatasetSpec(str(write(tmp_path / "g.csv", [(0, 1), (1, 2)]))))


def test_heuristics_suggests_a_split_column_and_scores_the_file_with_one(tmp_path):
    from pipelines.heuristics import main

    edges = write(tmp_path / "g.csv", SMALL)
    with pytest.raises(DatasetError) as err:
        load_dataset(DatasetSpec(str(edges)), split_flag=None)  # what pencil heuristics loads with
    assert "--split" not in str(err.value) and "split column" in str(err.value)
    write(edges, SMALL, ["train"] * 8 + ["valid"] * 2 + ["test"] * 2)  # the hint followed
    assert main(["--dataset", str(edges), "--out", str(tmp_path / "h.json")]) == 0


def dense_graph() -> Graph:
    """71 of the 91 pairs of 14 nodes: 61 training positives against 30 non-edges."""
    pairs = list(itertools.combinations(range(14), 2))
    random.Random(0).shuffle(pairs)
    import numpy as np

    return Graph.from_edges(np.array(pairs[:61]), num_nodes=14)


@pytest.mark.parametrize("neg_ratio", [2, 3, 40])
def test_a_view_too_large_is_answered_with_flags_preprocess_accepts(tmp_path, neg_ratio):
    from preprocess.candidates import check_view_size

    graph, positives = dense_graph(), 61
    with pytest.raises(ConfigError) as err:
        check_view_size(positives, 100.0, neg_ratio, graph)
    message = str(err.value)
    given = {"--neg-ratio": str(neg_ratio), "--percent": "100"}
    if m := re.search(r"--neg-ratio <= (\d+)", message):
        given["--neg-ratio"] = m.group(1)
    if m := re.search(r"--percent to at most ([0-9.e-]+)", message):
        given["--percent"] = m.group(1)
    given.update(dict(hinted(message)))
    assert given != {"--neg-ratio": str(neg_ratio), "--percent": "100"}, message
    write(tmp_path / "g.csv", SMALL)
    cfg = preprocess_args(tmp_path, *(t for kv in given.items() for t in kv))  # the parser and the config take them
    check_view_size(positives, cfg.candidates.percent, cfg.candidates.neg_ratio, graph)  # and the check passes


def test_a_temporal_split_too_small_suggests_a_split_it_accepts(tmp_path):
    """The temporal path's own refusal (a time column) names a --split the parser takes, and that split works."""
    path = tmp_path / "g.csv"
    path.write_text("src,dst,time\n" + "".join(f"{a},{b},{t}\n" for t, (a, b) in enumerate(SMALL)))
    with pytest.raises(DatasetError) as err:
        load_dataset(DatasetSpec(str(path)))
    (flag, value), *_ = hinted(str(err.value))
    assert flag == "--split", str(err.value)
    cfg = preprocess_args(tmp_path, flag, value)
    ds = load_dataset(DatasetSpec(str(path), split=cfg.data.split))
    assert ds.split_info["kind"] == "temporal"
    assert ds.splits["test"].pos.tolist() == [[0, 11]]  # the last pair in time, (11, 0), alone in test
