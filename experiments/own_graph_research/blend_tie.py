"""Does breaking the blend's tie on MRR with AUC pay? Validation halves over finished `pencil run` folders.

    python -m experiments.own_graph_research.blend_tie --runs suite/runs/auto

The blend (pipelines/auto/blend.py) picks one (heuristic, weight) on the final seeds' validation MRR. The rule
studied: among the grid's keys within `margin` closed-form SEs of that choice on MRR (either way), the best on
AUC replaces it when it beats it there by more than `margin` SEs, as the search breaks a tie
(pipelines.auto.signal.break_tie). Honest numbers: both rules choose on a random half of the validation
positives (and, in the second table, of the shared negatives) and are scored on the other half, 20 halvings.
Only validation scores are read: the test split's
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
from pipelines.auto.signal import Signal, choose, eval_signal
from pipelines.core.runs import run_dataset

PROTOCOL = "original"


def grid_signals(run: Path) -> dict[str, list[Signal]]:
    """{key: every seed's Signal of its blended validation scores}, over the blend's grid."""
    chosen = json.loads((run / "chosen.json").read_text())
    manifest = read_manifest(chosen["shards"])
    selection_view = run_dataset(manifest).without_test()  # the set's config names its source (cora's Planetoid folder)
    valid = split_scores(selection_view, "valid", [PROTOCOL], list(blend.HEURISTICS))[PROTOCOL]
    heur = blend.by_cid(selection_view, manifest, "valid", PROTOCOL, valid)
    seeds = sorted(run.glob("seed*/scores"))
    logits = [read_scores(scores_path(s.parent, "valid", PROTOCOL))[:2] for s in seeds]
    return {
        blend.key(h, w): [
            eval_signal(manifest, "valid", PROTOCOL, cid, blend.blend(lg, None if h == blend.NONE else heur[h][cid], w))
            for cid, lg in logits
        ]
        for h, w in blend.GRID
    }


def grid_values(signals: dict, ip: np.ndarray, iq: np.ndarray | None) -> dict[str, dict[str, np.ndarray]]:
    """{metric: {key: per-positive values on positives ip against negatives iq (None: all), seeds' mean}}."""
    out: dict[str, dict[str, np.ndarray]] = {"mrr": {}, "auc": {}}
    for k, per_seed in signals.items():
        vals = [s.values(ip, iq) for s in per_seed]
        for m in out:
            out[m][k] = np.mean([v[m] for v in vals], axis=0)
    return out


def study(signals: dict, blend_margin: float, margin: float, negatives: bool) -> dict:
    """Choose on half the positives (and, with `negatives`, half the shared negatives), score on the rest."""
    first = next(iter(signals.values()))[0]
    p, q = len(first.pos), len(first.neg)
    diffs, acts = {"mrr": [], "auc": []}, 0
    for (a, b), (qa, qb) in zip(halves(p), halves(q, seed=1)):
        qa, qb = (qa, qb) if negatives else (None, None)
        choose_on, score_on = grid_values(signals, a, qa), grid_values(signals, b, qb)
        base = choose(choose_on["mrr"], blend_margin)
        tie = blend.break_tie(base, choose_on, "mrr", margin)["choice"]
        acts += tie != base["choice"]
        for m in diffs:
            diffs[m].append(100 * (score_on[m][tie].mean() - score_on[m][base["choice"]].mean()))
    mean = {m: float(np.mean(d)) for m, d in diffs.items()}
    return {**mean, "acts": acts, "halvings": len(halves(p))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.own_graph_research.blend_tie")
    p.add_argument("--runs", required=True, help="a `pencil run --out` folder: its */auto/original runs are read")
    p.add_argument("--margins", default="1,2", help="the tie-break's margins in closed-form SEs")
    p.add_argument("--blend-margin", type=float, default=2.0, help="the blend's own margin (SearchConfig's)")
    args = p.parse_args(argv)
    margins = [float(m) for m in args.margins.split(",")]
    signals = {
        run.parts[-3]: grid_signals(run)
        for run in sorted(Path(args.runs).glob("*/auto/original"))
        if (run / "chosen.json").exists() and list(run.glob("seed*/scores"))
    }
    for negatives in (False, True):
        rows, sums = [], {m: [] for m in margins}
        for graph, sig in signals.items():
            row = [graph]
            for m in margins:
                r = study(sig, args.blend_margin, m, negatives)
                sums[m].append(r)
                row += [f"{r['mrr']:+.2f}", f"{r['auc']:+.2f}", f"{r['acts']}/{r['halvings']}"]
            rows.append(row)
        mean = ["**mean**"]
        for m in margins:
            mean += [f"**{np.mean([r[x] for r in sums[m]]):+.2f}**" for x in ("mrr", "auc")] + [""]
        header = ["graph"] + [f"{x} (margin {m:g})" for m in margins for x in ("MRR diff", "AUC diff", "acts")]
        print("halves of the positives and of the shared negatives" if negatives else "halves of the positives")
        print(table(header, rows + [mean]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
