"""Does breaking the blend's tie on MRR with AUC pay? Validation halves over finished `pencil run` folders.

    python -m experiments.own_graph_research.blend_tie --runs suite/runs/auto

The blend (pipelines/auto/blend.py) picks one (heuristic, weight) on the final seeds' validation MRR. The rule
studied: among the grid's keys within `margin` closed-form SEs of that choice on MRR (either way), the best on
AUC replaces it when it beats it there by more than `margin` SEs, as the search breaks a tie
(pipelines.auto.signal.break_tie). Honest numbers: both rules choose on a random half of the validation
positives and are scored on the other half, 20 halvings. Only validation scores are read: the test split's
files are never opened, and the heuristics are computed on the dataset without its test split.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from common.eval_scores import read_scores, scores_path
from common.heuristics import split_scores
from common.manifest import read_manifest
from experiments.own_graph_research.study import halves, table
from pipelines.auto import blend
from pipelines.auto.signal import choose, per_positive
from pipelines.core.runs import run_dataset

PROTOCOL = "original"


def grid_values(run: Path) -> dict[str, dict[str, np.ndarray]]:
    """{metric: {key: (P,) per-positive validation values, averaged over the seeds}} for mrr and auc."""
    chosen = json.loads((run / "chosen.json").read_text())
    manifest = read_manifest(chosen["shards"])
    blind = run_dataset(manifest).without_test()  # the set's config names its source (cora's Planetoid folder)
    valid = split_scores(blind, "valid", [PROTOCOL], list(blend.HEURISTICS))[PROTOCOL]
    heur = blend.by_cid(blind, manifest, "valid", PROTOCOL, valid)
    seeds = sorted(run.glob("seed*/scores"))
    logits = [read_scores(scores_path(s.parent, "valid", PROTOCOL))[:2] for s in seeds]
    out: dict[str, dict[str, np.ndarray]] = {"mrr": {}, "auc": {}}
    for h, w in blend.GRID:
        per_seed = [
            per_positive(
                manifest, "valid", PROTOCOL, cid, blend.blend(lg, heur[h][cid] if h != blend.NONE else None, w)
            )
            for cid, lg in logits
        ]
        for m in out:
            out[m][blend.key(h, w)] = np.mean([v[m] for v in per_seed], axis=0)
    return out


def with_tie_break(values: dict, rows: np.ndarray, base: str, margin: float) -> str:
    """The key the blend's tie-break (pipelines.auto.blend.break_tie) picks on `rows`, from the choice `base`."""
    on_rows = {m: {k: v[rows] for k, v in table.items()} for m, table in values.items()}
    return blend.break_tie({"choice": base}, on_rows, "mrr", margin)["choice"]


def study(values: dict, blend_margin: float, margin: float) -> dict:
    p = len(values["mrr"][blend.NONE])
    diffs, acts = {"mrr": [], "auc": []}, 0
    for a, b in halves(p):
        base = choose({k: v[a] for k, v in values["mrr"].items()}, blend_margin)["choice"]
        tie = with_tie_break(values, a, base, margin)
        acts += tie != base
        for m in diffs:
            diffs[m].append(100 * (values[m][tie][b].mean() - values[m][base][b].mean()))
    return {
        "mrr": float(np.mean(diffs["mrr"])),
        "auc": float(np.mean(diffs["auc"])),
        "acts": acts,
        "halvings": len(halves(p)),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.own_graph_research.blend_tie")
    p.add_argument("--runs", required=True, help="a `pencil run --out` folder: its */auto/original runs are read")
    p.add_argument("--margins", default="1,2", help="the tie-break's margins in closed-form SEs")
    p.add_argument("--blend-margin", type=float, default=2.0, help="the blend's own margin (SearchConfig's)")
    args = p.parse_args(argv)
    margins = [float(m) for m in args.margins.split(",")]
    rows, sums = [], {m: [] for m in margins}
    for run in sorted(Path(args.runs).glob("*/auto/original")):
        if not (run / "chosen.json").exists() or not list(run.glob("seed*/scores")):
            continue
        values = grid_values(run)
        row = [run.parts[-3]]
        for m in margins:
            r = study(values, args.blend_margin, m)
            sums[m].append(r)
            row += [f"{r['mrr']:+.2f}", f"{r['auc']:+.2f}", f"{r['acts']}/{r['halvings']}"]
        rows.append(row)
        print(" | ".join(row), file=sys.stderr, flush=True)
    mean = ["**mean**"]
    for m in margins:
        mean += [
            f"**{np.mean([r['mrr'] for r in sums[m]]):+.2f}**",
            f"**{np.mean([r['auc'] for r in sums[m]]):+.2f}**",
            "",
        ]
    header = ["graph"] + [f"{x} (margin {m:g})" for m in margins for x in ("MRR diff", "AUC diff", "acts")]
    print(table(header, rows + [mean]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
