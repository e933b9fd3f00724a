"""The recommendation quality table of BENCHMARKS.md from `pipelines.recommend --evaluate` outputs.

    python -m experiments.full_ranking_table.table --dir runs/fr --datasets citeseer,cora [--gnn citeseer=gnn.json]

Reads DIR/<dataset>_s<seed>_<retriever>.json (one evaluation per seed and retriever, run with
--splits valid,test --choose-prior) and prints, per dataset, split and retriever, mean ± std over seeds (%)
of recall@M, the retriever alone, PENCIL re-ranking (w = 0) and the blend (w chosen on valid per run),
then the valid sweep averaged over every run (what the default --prior-weight is chosen on), and the
GNN full-ranking rows (pipelines.paper.gnn_full_ranking outputs).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

RETRIEVERS = ("ra", "ppr", "mix")


def fmt(values) -> str:
    v = 100 * np.asarray(values, dtype=float)
    return f"{v.mean():.1f} ± {v.std(ddof=1) if len(v) > 1 else 0.0:.1f}"


def load(folder: Path, dataset: str) -> dict:
    runs = defaultdict(list)
    for r in RETRIEVERS:
        for path in sorted(folder.glob(f"{dataset}_s*_{r}.json")):
            runs[r].append(json.loads(path.read_text()))
    return runs


def table(dataset: str, runs: dict) -> list[str]:
    lines = [
        f"| {dataset} split | retriever | seeds | recall@M | retriever H@20 / MRR | PENCIL H@20 / MRR | "
        "PENCIL + prior H@20 / MRR | w (valid) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for split in ("valid", "test"):
        for r, reports in runs.items():
            res = [rep["splits"][split] for rep in reports]
            cells = [fmt([x[f"recall@{x['pool']}"] for x in res])]
            for ranker in ("retriever_alone", "pencil_rerank", "pencil_blend"):
                cells.append(f"{fmt([x[ranker]['hits@20'] for x in res])} / {fmt([x[ranker]['mrr'] for x in res])}")
            ws = ",".join(f"{rep['prior_weight_chosen_on_valid']:g}" for rep in reports)
            lines.append(f"| {split} | {r} | {len(res)} | " + " | ".join(cells) + f" | {ws} |")
    return lines


def sweep(all_runs: list[dict]) -> list[str]:
    """The valid split's Hits@20 / MRR for every prior weight, averaged over every run given."""
    grids = [rep["splits"]["valid"]["prior_sweep"] for rep in all_runs]
    lines = ["| w | valid H@20 | valid MRR |", "|---|---|---|"]
    for w in grids[0]:
        lines.append(f"| {w} | {fmt([g[w]['hits@20'] for g in grids])} | {fmt([g[w]['mrr'] for g in grids])} |")
    return lines


def gnn_rows(dataset: str, path: Path) -> list[str]:
    rep = json.loads(path.read_text())
    lines = []
    for model in dict.fromkeys(r["model"] for r in rep["runs"]):
        rs = [r for r in rep["runs"] if r["model"] == model]
        for split in ("valid", "test"):
            lines.append(
                f"| {dataset} | {split} | {model.upper()} (dot, features) | {len(rs)} | "
                f"{fmt([r[split]['hits@20'] for r in rs])} | {fmt([r[split]['mrr'] for r in rs])} |"
            )
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m experiments.full_ranking_table.table", description=__doc__.splitlines()[0]
    )
    p.add_argument("--dir", required=True)
    p.add_argument("--datasets", required=True)
    p.add_argument("--gnn", action="append", default=[], metavar="DATASET=FILE")
    args = p.parse_args(argv)
    everything = []
    for ds in args.datasets.split(","):
        runs = load(Path(args.dir), ds)
        if runs:
            print("\n".join(table(ds, runs)) + "\n")
            everything += [rep for reps in runs.values() for rep in reps]
    if everything:
        print("\n".join(sweep(everything)) + "\n")
    if args.gnn:
        print("| dataset | split | model | seeds | Hits@20 | MRR |\n|---|---|---|---|---|---|")
        for item in args.gnn:
            ds, path = item.split("=", 1)
            print("\n".join(gnn_rows(ds, Path(path))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
