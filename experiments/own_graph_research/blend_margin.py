"""How large a lead should the blend need over the model alone? Validation halves over `pencil run` folders.

    python -m experiments.own_graph_research.blend_margin --runs suite/runs/auto

The blend (pipelines/auto/blend.py) keeps its best key only if it beats the model alone by more than its margin
(SearchConfig.blend_margin_se, 2 closed-form SEs over the positives), a tie on MRR broken by AUC with the same
margin. Each margin studied chooses that way, over the run's whole grid (the runner-up's column too, when the run
has one), on a random half of the validation positives and shared negatives, and is scored on the other half
(20 halvings): its MRR and AUC minus those of the 2-SE choice, and how often it lands below the best of CN / AA /
RA alone on the scoring half, on MRR and on AUC (the report's bar). Only validation scores are read; the
heuristics come from the dataset without its test split.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from common.heuristics import split_scores
from common.manifest import read_manifest
from experiments.own_graph_research.blend_tie import grid_signals, grid_values
from experiments.own_graph_research.pair_blend import pick, signals
from experiments.own_graph_research.redecide import recorded_choice
from experiments.own_graph_research.study import halves, table
from pipelines.auto import blend
from pipelines.auto.signal import eval_signal
from pipelines.core.runs import run_dataset

PROTOCOL = "original"
MARGINS = (0.0, 0.5, 1.0, 2.0)
REFERENCE = 2.0  # today's margin: the rows are differences from its choice


def heuristic_signals(shards: str) -> dict:
    """{h: [its Signal]} of CN, AA and RA alone on the validation set (one 'seed': a heuristic has no seed)."""
    manifest = read_manifest(shards)
    selection_view = run_dataset(manifest).without_test()
    valid = split_scores(selection_view, "valid", [PROTOCOL], list(blend.HEURISTICS))[PROTOCOL]
    heur = blend.by_cid(selection_view, manifest, "valid", PROTOCOL, valid)
    cids = np.arange(len(next(iter(heur.values()))))
    return {h.upper(): [eval_signal(manifest, "valid", PROTOCOL, cids, heur[h])] for h in blend.HEURISTICS}


def runs(root: Path):
    """(graph, its grid's signals, the heuristics' signals) of every finished `pencil run --preset auto`."""
    for run in sorted(root.glob("*/auto/original")):
        if not sorted(run.glob("seed*/scores")) or not (run / "search.json").exists():
            continue
        chosen = json.loads((run / "chosen.json").read_text())
        partner = recorded_choice(run)
        seeds = sorted(s.parent for s in run.glob("seed*/scores"))
        grid = signals(chosen["shards"], seeds, Path(partner.partner_dir)) if partner.partner else grid_signals(run)
        yield run.parts[-3], grid, heuristic_signals(chosen["shards"])


def study(grid: dict, heur: dict) -> dict:
    first = next(iter(grid.values()))[0]
    out = {m: {"mrr": [], "auc": [], "below_mrr": 0, "below_auc": 0, "blended": 0} for m in MARGINS}
    for (a, b), (qa, qb) in zip(halves(len(first.pos)), halves(len(first.neg), seed=1)):
        on, off, h_off = grid_values(grid, a, qa), grid_values(grid, b, qb), grid_values(heur, b, qb)
        bar = {m: max(float(v.mean()) for v in h_off[m].values()) for m in ("mrr", "auc")}
        ref = pick(on, list(grid), REFERENCE)
        for margin in MARGINS:
            got = pick(on, list(grid), margin)
            row = out[margin]
            row["blended"] += got != blend.NONE
            for m in ("mrr", "auc"):
                row[m].append(100 * (off[m][got].mean() - off[m][ref].mean()))
                row[f"below_{m}"] += off[m][got].mean() < bar[m]
    return {
        margin: {**{m: float(np.mean(r[m])) for m in ("mrr", "auc")}, **{k: r[k] for k in r if k not in ("mrr", "auc")}}
        for margin, r in out.items()
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.own_graph_research.blend_margin")
    p.add_argument("--runs", required=True, help="a `pencil run --out` folder: its */auto/original runs are read")
    args = p.parse_args(argv)
    rows, every = [], []
    for name, grid, heur in runs(Path(args.runs)):
        r = study(grid, heur)
        every.append(r)
        for margin in MARGINS:
            x = r[margin]
            rows.append(
                [name, f"{margin:g}", f"{x['mrr']:+.2f}", f"{x['auc']:+.2f}", f"{x['blended']}/20"]
                + [f"{x['below_mrr']}/20", f"{x['below_auc']}/20"]
            )
        print(" | ".join(map(str, rows[-1])), flush=True)
    for margin in MARGINS:
        got = [r[margin] for r in every]
        mean = [f"**{np.mean([g[m] for g in got]):+.2f}**" for m in ("mrr", "auc")]
        below = [f"{sum(g[k] for g in got)}/{20 * len(got)}" for k in ("blended", "below_mrr", "below_auc")]
        rows.append([f"**all ({len(got)})**", f"{margin:g}", *mean, *below])
    header = ["graph", "margin (SE)", "MRR minus 2 SE's", "AUC minus 2 SE's", "blended", "below best h, MRR", "AUC"]
    print(table(header, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
