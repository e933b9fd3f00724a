"""bench.degree_sweep (issue 21's synthetic degree sweep): the graphs it writes, the pipelines.run command
it would run, and its summary of a results.json. Nothing here trains."""
from __future__ import annotations

import gzip
from argparse import Namespace
from pathlib import Path

import numpy as np
import pandas as pd

from bench import degree_sweep as sweep
from common.datasets import load_dataset


def test_graphs_have_the_requested_degree_and_large_distinct_ids(tmp_path, capsys):
    out = tmp_path / "graphs"
    argv = ["--out", str(out), "--degrees", "4,12", "--nodes", "300", "--seed", "3", "--results", str(tmp_path / "r")]
    assert sweep.main(argv) == 0
    printed = capsys.readouterr().out
    assert not (tmp_path / "r").exists()  # no --run: nothing trains
    assert sorted(p.name for p in out.iterdir()) == ["latent-d12-n300-s3.csv.gz", "latent-d12-n300-s3.nodes.csv.gz",
                                                     "latent-d4-n300-s3.csv.gz", "latent-d4-n300-s3.nodes.csv.gz"]
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    for degree in (4, 12):
        edges = pd.read_csv(out / f"latent-d{degree}-n300-s3.csv.gz", dtype=np.int64).to_numpy()
        nodes = pd.read_csv(out / f"latent-d{degree}-n300-s3.nodes.csv.gz", dtype=np.int64)["node"].to_numpy()
        assert len(nodes) == 300 and len(np.unique(nodes)) == 300  # distinct
        assert nodes.min() >= sweep.ID_LOW and nodes.max() < sweep.ID_HIGH  # large: no dense or table mapping
        assert np.isin(edges, nodes).all() and (edges[:, 0] != edges[:, 1]).all()
        pairs = np.sort(edges, axis=1)
        assert len(np.unique(pairs, axis=0)) == len(edges)  # each undirected edge once
        assert not (edges[:, 0] < edges[:, 1]).all()  # endpoints in random order, not (min, max)
        mean = 2 * len(edges) / 300
        assert abs(mean - degree) / degree < 0.15, mean
        assert f"| latent-d{degree}-n300-s3.csv.gz | 300 |" in printed and f"| {len(edges):,} | {degree} | {mean:.2f} |" in printed
        # the file as pipelines.run --nodes loads it: every node, in sorted order of the user's ids
        ds = load_dataset(str(out / f"latent-d{degree}-n300-s3.csv.gz"),
                          nodes=str(out / f"latent-d{degree}-n300-s3.nodes.csv.gz"))
        assert ds.name == f"latent-d{degree}-n300-s3" and ds.num_nodes == 300
        assert np.array_equal(ds.node_ids, np.sort(nodes))
        assert sum(len(ds.splits[s].pos) for s in ("train", "valid", "test")) == len(edges)
    assert sweep.main(argv) == 0  # the same seed writes the same bytes (gzip without a timestamp)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first
    assert all(gzip.decompress(b) for b in first.values())


def test_run_command_passes_the_node_list_and_the_auto_preset(tmp_path):
    g = sweep.Written(tmp_path / "latent-d5-n10-s0.csv.gz", tmp_path / "latent-d5-n10-s0.nodes.csv.gz", 5.0, 10, 9, 25)
    args = Namespace(seeds="0,1,2", results="res", shards="sh", budget_minutes=12.5, num_cpus=None)
    assert sweep.run_command(g, args)[1:] == [
        "-m", "pipelines.run", "--dataset", str(g.path), "--nodes", str(g.nodes_path), "--preset", "auto",
        "--seeds", "0,1,2", "--out", "res", "--shards", "sh", "--budget-minutes", "12.5"]
    assert g.dataset == "latent-d5-n10-s0" and g.mean_degree == 5.0


def test_summary_sets_every_pencil_row_beside_the_best_heuristic():
    def row(model, protocol, mrr, auc=None):
        r = {"dataset": "g", "protocol": protocol, "model": model, "seeds": [0], "mrr": mrr}
        return r if auc is None else {**r, "auc": auc}

    results = {"table": [
        row("PENCIL w/o features", "original", [40.0, 1.5], [90.0, 0.5]),
        row("CN", "original", [30.0, 0.0], [85.0, 0.0]),
        row("AA", "original", [45.0, 0.0], [80.0, 0.0]),
        row("RA", "original", [44.0, 0.0], [88.0, 0.0]),
        row("PENCIL w/o features", "heart", [12.0, 2.0]),
        row("CN", "heart", [20.0, 0.0]), row("AA", "heart", [21.0, 0.0]), row("RA", "heart", [19.0, 0.0]),
        row("AA", "ogb", [99.0, 0.0], [99.0, 0.0]),  # another protocol's heuristics never count
    ]}
    rows = sweep.summary_rows("g", 4.0, results)
    assert [(r["protocol"], r["best_mrr"], r["delta_mrr"], r["best_auc"], r["delta_auc"]) for r in rows] == [
        ("original", ("AA", 45.0), -5.0, ("RA", 88.0), 2.0), ("heart", ("AA", 21.0), -9.0, None, None)]
    table = sweep.summary_table(rows, ["latent-d40-n10-s0"])
    assert "| g | 4.00 | original | PENCIL w/o features | 40.00 ± 1.50 | 45.00 (AA) | -5.00 | 90.00 ± 0.50 | " \
           "88.00 (RA) | +2.00 |" in table
    assert "| g | 4.00 | heart | PENCIL w/o features | 12.00 ± 2.00 | 21.00 (AA) | -9.00 | – | – | – |" in table
    assert "| latent-d40-n10-s0 | – | – | failed (see its log) |" in table
