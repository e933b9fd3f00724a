"""`pencil run` end to end on an edge list that carries more than edges: cora written as an edge list (its split
column the paper path's split) with its Planetoid features as a feature file gives the test numbers of `pencil run
--dataset cora --features` (the same model path: equal, not close), both PENCIL and PENCIL w/o features; a message
graph with times, weights, an extra column, node features and the user's pairs is reported on its temporal split,
with the weighted heuristics, its pairs beside the protocol or instead of it, and `--split random` in rows of its
own. Slow: each run preprocesses and trains a tiny preset on CPU (about a minute per run on 2 shared cores)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import needs_ray, require_shared, write_features

pytestmark = [pytest.mark.slow, needs_ray]
TINY = ["--preset", "tiny", "--seeds", "0", "--device", "cpu", "--num-cpus", "2", "--train-arg=--num-workers=0"]


def pencil_run(*argv) -> None:
    from pipelines.run import main

    assert main([*map(str, argv), *TINY]) == 0


def results(folder: Path) -> dict:
    return json.loads(next(folder.rglob("results.json")).read_text())


def test_cora_as_an_edge_list_with_its_feature_file_equals_the_paper_path(cora_pair, shard_cache, tmp_path):
    _, folder = cora_pair
    planetoid = require_shared("planetoid", "ind.cora.x").parent
    shards = shard_cache / "run-cora-features"  # both sets are cached: a rerun only trains
    common = ["--epochs", "0.05", "--shards", shards]
    pencil_run("--dataset", "cora", "--planetoid-dir", planetoid, "--features", "--out", tmp_path / "paper", *common)
    pencil_run(
        "--dataset",
        folder / "cora-edges.csv",
        "--node-features",
        folder / "cora-features.csv",
        "--out",
        tmp_path / "own",
        *common,
    )
    paper, own = results(tmp_path / "paper"), results(tmp_path / "own")
    by_model = {name: {r["model"]: r for r in got["runs"]} for name, got in (("paper", paper), ("own", own))}
    assert set(by_model["paper"]) == set(by_model["own"]) == {"PENCIL", "PENCIL w/o features"}
    for model, r in by_model["paper"].items():
        assert r["test"] == by_model["own"][model]["test"], model  # one model path: the same floats
        assert r["best_epoch"] == by_model["own"][model]["best_epoch"]
    assert by_model["own"]["PENCIL"]["test"] != by_model["own"]["PENCIL w/o features"]["test"]
    assert (tmp_path / "own" / "cora-edges" / "tiny" / "original" / "no-features" / "seed0" / "best.pt").is_file()


def message_graph(folder: Path) -> tuple[Path, Path, Path]:
    """Messages with a time, a weight and a column of no use, among 120 people; their features; labelled pairs:
    links first sent in the last 40 rows and non-links among the early senders."""
    rng = np.random.default_rng(0)
    rows, t = [], 0
    while len(rows) < 700:
        u, v = rng.integers(0, 120, 2)
        t += int(rng.integers(1, 5))
        if u != v:
            rows.append((f"p{u}", f"p{v}", t, round(float(rng.random()) + 0.1, 3)))
    edges = folder / "msgs.csv"
    edges.write_text("src,dst,time,weight,channel\n" + "".join(f"{a},{b},{t},{w},mail\n" for a, b, t, w in rows))
    features = write_features(folder / "people.csv", sorted({x for r in rows for x in r[:2]}), width=3)
    first: dict = {}
    for i, (a, b, _, _) in enumerate(rows):
        first.setdefault(tuple(sorted((a, b))), i)
    links = [p for p, i in first.items() if i >= len(rows) - 40]
    early = sorted({r[0] for r in rows[:400]} & {r[1] for r in rows[:400]})
    non_links: set = set()
    while len(non_links) < 60:
        p = tuple(sorted(rng.choice(early, 2)))
        if p[0] != p[1] and p not in first:
            non_links.add(p)
    pairs = folder / "pairs.csv"
    pairs.write_text(
        "src,dst,label\n"
        + "".join(f"{a},{b},1\n" for a, b in links)
        + "".join(f"{a},{b},0\n" for a, b in sorted(non_links))
    )
    return edges, features, pairs


def test_a_message_graph_is_reported_on_its_temporal_split_with_its_pairs_beside(tmp_path, caplog):
    import logging

    caplog.set_level(logging.INFO)
    edges, features, pairs = message_graph(tmp_path)
    shards = tmp_path / "shards"
    pencil_run(
        "--dataset",
        edges,
        "--node-features",
        features,
        "--eval-pairs",
        pairs,
        "--epochs",
        "1",
        "--out",
        tmp_path / "temporal",
        "--shards",
        shards,
    )
    got = results(tmp_path / "temporal")
    rows = {(r["protocol"], r.get("split"), r.get("selected_on"), r["model"]) for r in got["table"]}
    for model in ("PENCIL", "PENCIL w/o features"):
        assert ("original", "temporal", None, model) in rows
        assert ("pairs", "temporal", "original", model) in rows  # the same checkpoints on the user's pairs
    for h in ("CN", "AA", "RA", "WCN", "WAA", "WRA"):
        assert ("original", "temporal", None, h) in rows and ("pairs", "temporal", None, h) in rows
    report = (tmp_path / "temporal" / "msgs" / "tiny" / "report.md").read_text()
    assert "| msgs | original, temporal split | PENCIL |" in report
    assert "| msgs | pairs, temporal split, selected on original | PENCIL w/o features |" in report
    assert "- split: temporal, by column 'time'" in report and "tested on your pairs" in report
    assert "WCN / WAA / WRA" in report and "PENCIL w/o features: the same seeds" in report
    assert "split: temporal, by column 'time'" in caplog.text  # the log says it before any work
    assert "column(s) 'channel' ignored" in caplog.text  # no extra column dropped without a line
    beside = tmp_path / "temporal" / "msgs" / "tiny" / "original" / "pairs" / "seed0" / "summary.json"
    assert json.loads(beside.read_text())["weights_from"].endswith("original/seed0/best.pt")

    # the user's non-links instead of the random negatives, on a random split (a link of the file may be a
    # training edge there): ranked against the split's held-out positives, in rows of their own
    non_links = tmp_path / "non-links.csv"
    non_links.write_text("".join(line + "\n" for line in pairs.read_text().splitlines() if not line.endswith(",1")))
    pencil_run(
        "--dataset",
        edges,
        "--eval-pairs",
        non_links,
        "--protocol",
        "pairs",
        "--split",
        "random",
        "--ignore-columns",
        "channel",
        "--epochs",
        "1",
        "--out",
        tmp_path / "random",
        "--shards",
        shards,
    )
    got = results(tmp_path / "random")
    rows = {(r["protocol"], r.get("split"), r.get("selected_on"), r["model"]) for r in got["table"]}
    assert ("pairs", "random", None, "PENCIL w/o features") in rows and ("pairs", "random", None, "WRA") in rows
    assert not any(r[0] == "original" for r in rows)
    assert "protocol pairs: PENCIL selected and tested on your pairs" in " ".join(got["notes"])
