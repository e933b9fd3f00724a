"""Does blending the chosen candidate with the search's runner-up pay? Validation halves over `pencil run` folders.

    python -m experiments.own_graph_research.pair_blend --runs suite/runs/auto

The search trains two candidates to convergence (the default and the best alternative) and keeps one; the
other's run, with its validation scores at its best epoch, is already on disk. The arm studied adds it to each
final seed's logit, `logit + w * partner_logit`, as one more column of the blend's grid (pipelines/auto/blend.py),
alone (`pair`) and crossed with every heuristic key (`cross`). Each arm chooses as the blend does (the best
mean MRR if it beats the model alone by more than the blend's margin, a tie broken by AUC) on a random half of
the validation positives and shared negatives, and is scored on the other half; 20 halvings. The rows are the
arm minus today's blend. Only validation scores are read; the heuristics come from the dataset without its
test split.
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
from experiments.own_graph_research.blend_tie import grid_values
from experiments.own_graph_research.redecide import recorded_choice
from experiments.own_graph_research.study import halves, table
from pipelines.auto import blend
from pipelines.auto.signal import choose, eval_signal
from pipelines.core.runs import run_dataset

PROTOCOL = "original"


def signals(shards: str, seeds: list[Path], partner: Path) -> dict[str, list]:
    """{key: every seed's Signal}: today's grid, partner weights alone, and partner weights x the heuristic grid.
    `seeds`: run folders with their validation scores; `shards`: their set."""
    manifest = read_manifest(shards)
    selection_view = run_dataset(manifest).without_test()
    valid = split_scores(selection_view, "valid", [PROTOCOL], list(blend.HEURISTICS))[PROTOCOL]
    heur = blend.by_cid(selection_view, manifest, "valid", PROTOCOL, valid)
    pcid, pscore, _ = read_scores(scores_path(partner, "valid", PROTOCOL))
    ptable = blend.partner_table(pcid, pscore.astype(np.float64))
    logits = [read_scores(scores_path(d, "valid", PROTOCOL))[:2] for d in seeds]
    return {
        blend.key(h, w, p): [
            eval_signal(manifest, "valid", PROTOCOL, cid, blend.mix(cid, lg.astype(np.float64), p, h, w, ptable, heur))
            for cid, lg in logits
        ]
        for p, h, w in blend.grid(True)
    }


def suite(args):
    """(graph, chosen, (runner-up, its run), shard set, seed folders) of every finished `pencil run`."""
    for run in sorted(Path(args.runs).glob("*/auto/original")):
        seeds = sorted(s.parent for s in run.glob("seed*/scores"))
        recorded = recorded_choice(run) if (run / "search.json").exists() and seeds else None
        if recorded is not None and recorded.partner is not None:
            chosen = json.loads((run / "chosen.json").read_text())
            partner = (recorded.partner.cid, Path(recorded.partner_dir))
            yield run.parts[-3], chosen["cid"], partner, chosen["shards"], seeds


def research(args):
    """The same from research folders: OUT/<graph>/<variant>/s<seed> (experiments/own_graph_research/run.py)."""
    chosen, partner = args.research.split(":")
    for graph in sorted(Path(args.runs).iterdir()):
        seeds = sorted(d for d in (graph / chosen).glob("s[0-9]*") if (d / "scores").is_dir())
        other = graph / partner / "s0"
        if seeds and (other / "scores").is_dir():
            shards = json.loads((seeds[0] / "config.json").read_text())["data"]["shards"]
            yield graph.name, chosen, (partner, other), shards, seeds


def pick(values: dict, keys: list[str], margin: float) -> str:
    sub = {m: {k: values[m][k] for k in keys} for m in values}
    return blend.break_grid_tie(choose(sub["mrr"], margin), sub, "mrr", margin)["choice"]


def study(sig: dict, margin: float) -> dict:
    first = next(iter(sig.values()))[0]
    today = [blend.key(h, w) for h, w in blend.GRID]
    arms = {"pair": today + [blend.key(blend.NONE, 0.0, p) for p in blend.PARTNER_WEIGHTS], "cross": list(sig)}
    out = {a: {"mrr": [], "auc": [], "acts": 0} for a in arms}
    for (a, b), (qa, qb) in zip(halves(len(first.pos)), halves(len(first.neg), seed=1)):
        on, off = grid_values(sig, a, qa), grid_values(sig, b, qb)
        base = pick(on, today, margin)
        for arm, keys in arms.items():
            got = pick(on, keys, margin)
            out[arm]["acts"] += got != base
            for m in ("mrr", "auc"):
                out[arm][m].append(100 * (off[m][got].mean() - off[m][base].mean()))
    return {arm: {**{m: float(np.mean(r[m])) for m in ("mrr", "auc")}, "acts": r["acts"]} for arm, r in out.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.own_graph_research.pair_blend")
    p.add_argument("--runs", required=True, help="a `pencil run --out` folder: its */auto/original runs are read")
    p.add_argument("--margin", type=float, default=2.0, help="the blend's margin in closed-form SEs")
    p.add_argument(
        "--research",
        metavar="CHOSEN:PARTNER",
        help="read `run.py` research folders instead (--runs is then its --out): every seed of variant CHOSEN "
        "with seed 0 of variant PARTNER, each at its best validation epoch",
    )
    args = p.parse_args(argv)
    rows, sums = [], {"pair": [], "cross": []}
    for name, cid, partner, shards, seeds in research(args) if args.research else suite(args):
        r = study(signals(shards, seeds, partner[1]), args.margin)
        row = [name, cid, partner[0]]
        for arm in sums:
            sums[arm].append(r[arm])
            row += [f"{r[arm]['mrr']:+.2f}", f"{r[arm]['auc']:+.2f}", f"{r[arm]['acts']}/20"]
        rows.append(row)
        print(" | ".join(map(str, row)), flush=True)
    mean = ["**mean**", "", ""]
    for arm in sums:
        mean += [f"**{np.mean([r[m] for r in sums[arm]]):+.2f}**" for m in ("mrr", "auc")] + [""]
    header = ["graph", "chosen", "partner"] + [f"{arm}: {x}" for arm in sums for x in ("MRR diff", "AUC diff", "acts")]
    print(table(header, rows + [mean]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
