"""Two pooled variants, each decided the default's way, on the same validation halves (validation only).

    python -m experiments.own_graph_research.versus --out runs/research --variants base-pool8,nr3-pool8

Per graph and halving (experiments/own_graph_research/pool.py's, the same positives and negatives for both
variants), each run picks its epoch on half A's protocol negatives and its blend on half A's pool, as
`--preset auto` does (the "pool-blend" rule), and is scored on half B against all of B's negatives at test's count
(the quantity the report's test MRR estimates) and on AUC. The table gives the second variant minus the first.

The rule that adopts the second variant, fixed before its runs finished: over the graphs, its mean MRR difference
is positive, its mean AUC difference is at least -0.1, the graphs it loses by more than 0.5 MRR do not outnumber
those it gains by more than 0.5, and its wall time is at most 1.1x the first's (geometric mean).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from experiments.own_graph_research.pool import study_run
from experiments.own_graph_research.study import runs, table

RULE = "pool-blend"


def decided(run_dir: Path, pool_max: int) -> dict:
    """Mean over halvings of the default's decision on half B: MRR at test's count, AUC, blended share."""
    rows = study_run(run_dir, pool_max)["rows"]
    return {
        "mrr": 100 * float(np.mean([r[RULE]["mrr_at_test"] for r in rows])),
        "auc": 100 * float(np.mean([r[RULE]["auc"] for r in rows])),
        "heuristic": 100 * float(np.mean([r["heuristic"]["mrr_at_test"] for r in rows])),
        "below": float(np.mean([r[RULE]["mrr_at_test"] < r["heuristic"]["mrr_at_test"] for r in rows])),
    }


def wall(run_dir: Path) -> float:
    return float(json.loads((run_dir / "result.json").read_text())["wall_s"])


def versus(out: Path, first: str, second: str, seed: int = 0, pool_max: int = 2000) -> str:
    a, b = runs(out, first), runs(out, second)
    rows, d = [], {"mrr": [], "auc": [], "wall": []}
    for g in sorted(set(a) & set(b)):
        if seed not in a[g] or seed not in b[g]:
            continue
        x, y = decided(a[g][seed], pool_max), decided(b[g][seed], pool_max)
        ratio = wall(b[g][seed]) / wall(a[g][seed])
        d["mrr"].append(y["mrr"] - x["mrr"])
        d["auc"].append(y["auc"] - x["auc"])
        d["wall"].append(ratio)
        rows.append(
            [
                g,
                f"{x['mrr']:.2f} / {x['auc']:.2f}",
                f"{y['mrr'] - x['mrr']:+.2f}",
                f"{y['auc'] - x['auc']:+.2f}",
                f"{ratio:.2f}",
                f"{x['heuristic']:.2f}",
                f"{x['below']:.2f} / {y['below']:.2f}",
            ]
        )
    m, u = np.array(d["mrr"]), np.array(d["auc"])
    rows.append(
        [
            f"**mean** ({len(m)} graphs; wall: geometric)",
            "",
            f"**{m.mean():+.2f}**",
            f"**{u.mean():+.2f}**",
            f"{np.exp(np.log(d['wall']).mean()):.2f}",
            "",
            "",
        ]
    )
    rows.append(["wins / losses (> 0.5)", "", f"{(m > 0.5).sum()} / {(m < -0.5).sum()}", "", "", "", ""])
    adopt = m.mean() > 0 and u.mean() >= -0.1 and (m < -0.5).sum() <= (m > 0.5).sum()
    adopt = adopt and np.exp(np.log(d["wall"]).mean()) <= 1.1
    header = [
        "graph",
        f"{first}: MRR at test's count / AUC",
        f"{second}: MRR diff",
        "AUC diff",
        "wall ratio",
        "best heuristic: MRR at test's count",
        "below the heuristic: first / second",
    ]
    return table(header, rows) + f"\n\nthe rule adopts {second}: {'yes' if adopt else 'no'}"


def main(argv=None) -> int:
    prog = "python -m experiments.own_graph_research.versus"
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--variants", required=True, help="FIRST,SECOND (both pooled: run.py's POOLS)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pool-max", type=int, default=2000)
    args = p.parse_args(argv)
    first, second = args.variants.split(",")
    print(versus(Path(args.out), first, second, args.seed, args.pool_max))
    return 0


if __name__ == "__main__":
    sys.exit(main())
