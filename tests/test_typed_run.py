"""`pencil run` on a typed graph (docs/own-graph.md#knowledge-graphs-and-relation-types): the heuristics' rows on
the same corruptions as the model (hand-computed on a five-node graph), the per-relation table, what stays refused,
and the search and a fixed preset end to end on a generated graph whose relation b is the reverse of relation a."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from common.datasets import DatasetSpec, load_dataset
from common.datasets.kg import KG, triples_dataset
from common.graph import Graph
from common.heuristics_typed import typed_scores, walks_of_three
from common.metrics import evaluate
from pipelines.auto.signal import rank_values
from pipelines.typed_report import relation_markdown, relation_rows
from pipelines.typed_rows import typed_heuristic_rows
from tests.conftest import needs_ray

ROOT = Path(__file__).resolve().parents[1]


def tiny_typed():
    """Five entities, relations a (0) and b (1); test triple 1 -a-> 2 against the head corruption 3 -a-> 2, the
    tail corruption 1 -a-> 4 and one padded slot."""
    train = np.array([[0, 0, 1], [0, 0, 2], [3, 0, 2], [1, 1, 0], [2, 1, 3], [4, 0, 2]])
    triples = {"train": train, "valid": np.array([[4, 1, 0]]), "test": np.array([[1, 0, 2]])}
    ds = triples_dataset("tiny", triples, 5, ("a", "b"), seed=0, per_side=2)
    ds.splits["test"].neg[KG] = np.array([[[3, 2], [1, 4], [-1, -1]]])
    return ds


def test_heuristics_score_the_same_corruptions_by_hand():
    scores = typed_scores(tiny_typed(), "test")
    # the undirected training graph: 0-1, 0-2, 2-3, 2-4; N(1) = {0}, N(2) = {0, 3, 4}, N(3) = N(4) = {2}
    pos, neg = scores["cn"]
    assert pos.tolist() == [1.0] and neg.tolist() == [[0.0, 0.0, -np.inf]]
    assert scores["ra"][0].tolist() == [1 / 2]  # the common neighbour 0 has degree 2
    # walks of length 3: none from 1 to 2 (N(0) and N(2) share nothing); 3-2-0-2, 3-2-3-2, 3-2-4-2; 1-0-2-4
    pos, neg = scores["l3"]
    assert pos.tolist() == [0.0] and neg.tolist() == [[3.0, 1.0, -np.inf]]
    # popularity under a: out_a(1) + in_a(2) = 0 + 3; out_a(3) + in_a(2) = 1 + 3; out_a(1) + in_a(4) = 0 + 0
    pos, neg = scores["popularity"]
    assert pos.tolist() == [3.0] and neg.tolist() == [[4.0, 0.0, -np.inf]]
    assert evaluate(KG, pos, neg)["mrr"] == 0.5  # second of three; the pad never counts
    rows, per_relation = typed_heuristic_rows(tiny_typed(), scores, None)
    by_model = {r["model"]: r for r in rows}
    assert by_model["CN"]["mrr"] == (100.0, 0.0) and by_model["popularity (per relation)"]["mrr"] == (50.0, 0.0)
    table = relation_rows([], per_relation, ("a", "b"))
    assert [(r["relation"], r["model"], r["triples"]) for r in table][-1] == ("a", "popularity (per relation)", 1)
    assert "| `a` | 1 | popularity (per relation) | 1 | 50.00 ± 0.00 |" in relation_markdown(table)


def test_walks_of_three_between_users_and_items_by_hand():
    # users 0, 1, 2 and items 3, 4, 5: 0 rated 3 and 4, 1 rated 3 and 5, 2 rated 4
    g = Graph.from_edges(np.array([[0, 3], [0, 4], [1, 3], [1, 5], [2, 4]]), 6)
    pairs = np.array([[0, 5], [2, 3], [2, 5], [0, 3], [5, 0]])
    # 0-3-1-5; 2-4-0-3; none from 2 to 5; 0-3-0-3, 0-3-1-3, 0-4-0-3 (an edge too); symmetric
    assert walks_of_three(g, pairs).tolist() == [1.0, 1.0, 0.0, 3.0, 1.0]
    assert walks_of_three(g, np.zeros((0, 2), np.int64)).shape == (0,)


def test_walks_of_three_match_the_cube_of_the_adjacency_whichever_end_is_walked_from():
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    edges = rng.integers(0, 200, size=(900, 2))
    g = Graph.from_edges(edges[edges[:, 0] != edges[:, 1]], 200)
    a = sp.csr_matrix((np.ones(len(g.indices)), g.indices, g.indptr), shape=(200, 200))
    cube = (a @ a @ a).toarray()
    # rows sharing a head, rows sharing a tail (as corruptions do), and random pairs
    shared_head = np.stack([np.full(50, 7), rng.integers(0, 200, 50)], 1)
    shared_tail = np.stack([rng.integers(0, 200, 50), np.full(50, 9)], 1)
    pairs = np.concatenate([shared_head, shared_tail, rng.integers(0, 200, size=(300, 2))])
    np.testing.assert_array_equal(walks_of_three(g, pairs), cube[pairs[:, 0], pairs[:, 1]])


def test_relation_rows_average_the_seeds_of_a_model():
    records = [
        {"protocol": KG, "model": "PENCIL", "seed": s, "test": {"mrr/a": v, "hits@1/a": v, "count/a": 4.0}}
        for s, v in ((0, 0.5), (1, 0.7))
    ]
    (row,) = relation_rows(records, [], ("a", "b"))
    assert row["seeds"] == [0, 1] and row["triples"] == 4 and row["mrr"][0] == pytest.approx(60.0)
    assert "hits@3" not in row  # a metric no record has is left out, shown as a dash
    assert "| `a` | 4 | PENCIL | 2 | 60.00 ± 14.14 | 60.00 ± 14.14 | – | – |" in relation_markdown([row])


def test_the_signal_counts_only_real_corruptions_in_its_auc_share():
    pos, neg = np.array([1.0, 1.0]), np.array([[0.0, 2.0, -np.inf, -np.inf], [0.0, 2.0, 0.0, 0.0]])
    values = rank_values(pos, neg)
    assert values["auc"].tolist() == [0.5, 0.75]  # 1 of 2 real corruptions below it; 3 of 4


def test_pencil_run_refuses_what_a_typed_graph_does_not_fit_yet(tmp_path):
    folder = write_reverse_kg(tmp_path / "kg")
    cmd = [sys.executable, "-m", "pipelines.run", "--dataset", str(folder), "--out", str(tmp_path / "out")]
    proc = subprocess.run([*cmd, "--objective", "recommend"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert (
        "--objective recommend: its training negatives are not drawn on a typed graph yet"
        in proc.stderr.strip().splitlines()[-1]
    )


def write_reverse_kg(folder: Path, n: int = 40, pairs: int = 150, seed: int = 0) -> Path:
    """Triples h -a-> t of random pairs and each one's reverse t -b-> h, split 80/10/10 at random: a test triple
    whose reverse is a training triple is learnable from its subgraph."""
    rng = np.random.default_rng(seed)
    forward = set()
    while len(forward) < pairs:
        h, t = rng.integers(0, n, 2).tolist()
        if h != t:
            forward.add((h, t))
    rows = [(f"e{h:02d}", "a", f"e{t:02d}") for h, t in sorted(forward)]
    rows += [(t, "b", h) for h, _, t in rows]
    order = rng.permutation(len(rows))
    cut = {"valid": order[: len(rows) // 10], "test": order[len(rows) // 10 : len(rows) // 5]}
    cut["train"] = order[len(rows) // 5 :]
    folder.mkdir(parents=True, exist_ok=True)
    for split, idx in cut.items():
        (folder / f"{split}.txt").write_text("".join("\t".join(rows[i]) + "\n" for i in sorted(idx)))
    return folder


def run_argv(folder: Path, tmp: Path, *more: str) -> list[str]:
    return [
        "--dataset",
        str(folder),
        "--seeds",
        "0",
        "--epochs",
        "2",
        "--out",
        str(tmp / "out"),
        "--shards",
        str(tmp / "shards"),
        "--num-cpus",
        "1",
        "--device",
        "cpu",
        "--train-arg=--hidden=32",
        "--train-arg=--ffn=64",
        "--train-arg=--heads=2",
        *more,
    ]


def check_report(out: Path, folder: Path) -> dict:
    """The report's rows: PENCIL and the five heuristics under kg, each heuristic's equal to its metrics on the
    loaded dataset's own corruptions, and a per-relation row of each model for both relations."""
    results = json.loads((out / "results.json").read_text())
    rows = {r["model"]: r for r in results["table"]}
    blended = {m for m in rows if m.startswith("PENCIL w/o features + ")}  # the search's blend, if any
    assert len(blended) <= 1
    heuristics = {"CN", "AA", "RA", "L3 (walks of length 3)", "popularity (per relation)"}
    assert set(rows) - blended == {"PENCIL w/o features"} | heuristics  # no features
    assert {r["protocol"] for r in rows.values()} == {KG}
    scores = typed_scores(load_dataset(DatasetSpec(str(folder))), "test")
    named = {"cn": "CN", "ra": "RA", "l3": "L3 (walks of length 3)", "popularity": "popularity (per relation)"}
    for name, label in named.items():
        expected = evaluate(KG, *scores[name])
        for m in ("mrr", "hits@1", "hits@3", "hits@10"):
            assert rows[label][m] == [pytest.approx(100.0 * expected[m]), 0.0]
    per = {(r["relation"], r["model"]) for r in results["relations"]}
    assert per == {(rel, m) for rel in ("a", "b") for m in rows}
    report = (out / "report.md").read_text()
    assert "| `b` |" in report and "popularity (per relation)" in report
    assert 0.0 <= rows["PENCIL w/o features"]["mrr"][0] <= 100.0
    return results


@needs_ray
@pytest.mark.slow  # the search's three shard sets and trainers, then a rerun
def test_the_search_runs_a_typed_graph_end_to_end_and_a_rerun_reuses_it(tmp_path, caplog):
    from common.manifest import read_manifest
    from pipelines.auto.signal import run_signal
    from pipelines.run import main

    folder = write_reverse_kg(tmp_path / "kg")
    argv = run_argv(folder, tmp_path)
    assert main(argv) == 0
    out = tmp_path / "out" / "kg" / "auto"
    check_report(out, folder)
    record = json.loads((out / KG / "search.json").read_text())
    # the blend, decided on validation with the per-relation popularity prior, beside the model alone
    assert record["blend"]["heuristic"] in ("none", "popularity prior", "l3 prior")
    assert (out / KG / "seed0" / "blend").exists()
    # the search's signal is the trainer's own validation metric: padded corruptions never count, ties stay ties
    chosen = Path(record["chosen"]["run_dir"])
    summary = json.loads((chosen / "summary.json").read_text())
    manifest = read_manifest(record["chosen"]["shards"])
    assert run_signal(chosen, manifest, KG).values()["mrr"].mean() == pytest.approx(summary["valid"]["mrr"])
    report = (out / "report.md").read_text()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert main(argv) == 0
    assert "reused as it is" in caplog.text and (out / "report.md").read_text() == report


@needs_ray
@pytest.mark.slow  # a shard set and a trainer
def test_a_fixed_preset_runs_a_typed_graph_end_to_end(tmp_path):
    from pipelines.run import main

    folder = write_reverse_kg(tmp_path / "kg")
    assert main(run_argv(folder, tmp_path, "--preset", "general")) == 0
    check_report(tmp_path / "out" / "kg" / "general", folder)
