"""Does a selection pool of more validation negatives make better choices? Validation halves, no test.

    python -m experiments.own_graph_research.run --out runs/research --graphs ... --variants base-pool8
    python -m experiments.own_graph_research.pool --out runs/research --variant base-pool8

A run of a `-pool8` variant was evaluated on validation positives against the protocol's Q shared negatives
followed by 8Q more from the same draw (preprocess --valid-pool 8, common/datasets/pool.py). Each halving splits
the positives and both kinds of negatives into halves A and B. Two rules choose the stopping epoch (the search's
patience) and then the blend (pipelines/auto/blend.py's grid and 2-SE margin) on A:
- today's: mean reciprocal rank against A's protocol negatives alone;
- the pool's: expected reciprocal rank at test's count of negatives against all of A's negatives
  (common.metrics.expected_rank_values).
Both choices are scored on B the same way, against all of B's negatives at test's count (the quantity the report's
test MRR estimates), and against B's protocol negatives alone (what today's validation reads); AUC on all of B's.
The heuristics come from the dataset without its test split.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from common.datasets import load_set_dataset
from common.datasets.pool import POOL_MAX, attach_valid_pool
from common.heuristics import split_scores
from common.manifest import read_manifest
from experiments.own_graph_research.scores import queries, run_matrices
from experiments.own_graph_research.study import halves, runs, stop_epoch, table
from pipelines.auto import blend
from pipelines.auto.config import SearchConfig
from pipelines.auto.signal import choose, rank_values
from trainer.evaluate import eval_entry

PROTOCOL = "original"
# rule -> (what the stopping epoch is chosen on, what the blend is chosen on)
RULES = {"today": ("today", "today"), "pool": ("pool", "pool"), "pool-blend": ("today", "pool")}


def heuristic_scores(shards: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """{h: positives' scores (P,)}, {h: negatives' scores (M,)} of CN, AA and RA on the validation set."""
    manifest = read_manifest(shards)
    pre = manifest.config
    # the first sets were drawn before the pool had its cap: the dataset with the pool of the size the set holds
    held = eval_entry(manifest, "valid", PROTOCOL)["valid_pool"]["pool"]
    selection_view = attach_valid_pool(load_set_dataset({**pre, "valid_pool": 0}), pre["valid_pool"], cap=held)
    selection_view = selection_view.without_test()
    valid = split_scores(selection_view, "valid", [PROTOCOL], list(blend.HEURISTICS))[PROTOCOL]
    table_ = blend.by_cid(selection_view, manifest, "valid", PROTOCOL, valid)
    pos_cid, neg_cid = queries(manifest)
    return {h: t[pos_cid] for h, t in table_.items()}, {h: t[neg_cid] for h, t in table_.items()}


def raw(pos: np.ndarray, neg: np.ndarray) -> dict[str, np.ndarray]:
    return rank_values(pos, neg)


def pooled(pos: np.ndarray, neg: np.ndarray, at: int) -> dict[str, np.ndarray]:
    return rank_values(pos, neg, at)


def grid_scores(pos: np.ndarray, neg: np.ndarray, hpos: dict, hneg: dict) -> dict[str, tuple]:
    """{blend key: (positives', negatives' scores)} of one epoch's logits over the blend's grid (no partner)."""
    return {
        blend.key(h, w): (blend.blend(pos, hpos.get(h), w), blend.blend(neg, hneg.get(h), w)) for h, w in blend.GRID
    }


def one_halving(pos, neg, hpos, hneg, at: int, a, b, qa, qb, pa, pb, patience: int) -> dict:
    """Every rule's choices on half A, scored on half B. a, b: positives; qa, qb: protocol negatives; pa, pb: pool
    negatives (indices into neg's columns)."""
    today = lambda s: raw(s[0][a], s[1][qa])
    pool = lambda s: pooled(s[0][a], s[1][np.r_[qa, pa]], at)
    out = {}
    for rule, (epoch_on, blend_on) in RULES.items():
        values_of = {"today": today, "pool": pool}
        curve = np.array([values_of[epoch_on]((pos[e], neg[e]))["mrr"].mean() for e in range(len(pos))])
        e = int(np.argmax(curve[: stop_epoch(curve, patience) + 1]))
        grid = grid_scores(pos[e], neg[e], hpos, hneg)
        on = values_of[blend_on]
        k = choose({k: on(s)["mrr"] for k, s in grid.items()}, SearchConfig().blend_margin_se)["choice"]
        sp, sn = grid[k]
        judge = pooled(sp[b], sn[np.r_[qb, pb]], at)
        out[rule] = {
            "epoch": e,
            "key": k,
            "mrr_at_test": float(judge["mrr"].mean()),
            "auc": float(judge["auc"].mean()),
            "mrr_protocol": float(raw(sp[b], sn[qb])["mrr"].mean()),
        }
    heur = {h: pooled(hpos[h][b], hneg[h][np.r_[qb, pb]], at) for h in blend.HEURISTICS}
    out["heuristic"] = {
        "mrr_at_test": max(float(v["mrr"].mean()) for v in heur.values()),
        "auc": max(float(v["auc"].mean()) for v in heur.values()),
    }
    return out


def study_run(run_dir: Path, pool_max: int) -> dict:
    config = json.loads((run_dir / "config.json").read_text())
    shards = config["data"]["shards"]
    info = eval_entry(read_manifest(shards), "valid", PROTOCOL)["valid_pool"]
    q, m, at = info["negatives"], info["pool"], info["rank_at"]
    m = min(m, pool_max)  # the pool's draw order is random: a prefix is a smaller pool
    pos, neg = run_matrices(run_dir)
    neg = neg[:, : q + m]
    hpos, hneg = heuristic_scores(shards)
    hneg = {h: v[: q + m] for h, v in hneg.items()}
    patience = SearchConfig().patience_epochs(len(pos))
    rng = np.random.default_rng(1)
    rows = []
    for a, b in halves(pos.shape[1]):
        qa, qb = np.array_split(rng.permutation(q), 2)
        pa, pb = np.array_split(q + rng.permutation(m), 2)
        rows.append(one_halving(pos, neg, hpos, hneg, at, a, b, qa, qb, pa, pb, patience))
    return {"rows": rows, "positives": pos.shape[1], "negatives": q, "pool": m, "rank_at": at, "epochs": len(pos)}


def summary(name: str, got: dict) -> list:
    rows = got["rows"]

    def mean(rule: str, m: str) -> float:
        return 100 * float(np.mean([r[rule][m] for r in rows]))

    def diff(rule: str, m: str) -> float:
        return mean(rule, m) - mean("today", m)

    blended = {rule: np.mean([r[rule]["key"] != blend.NONE for r in rows]) for rule in RULES}
    below = {rule: np.mean([r[rule]["mrr_at_test"] < r["heuristic"]["mrr_at_test"] for r in rows]) for rule in RULES}
    return [
        name,
        f"{got['positives']} / {got['negatives']} + {got['pool']} / {got['rank_at']}",
        f"{mean('today', 'mrr_at_test'):.2f}",
        f"{diff('pool', 'mrr_at_test'):+.2f}",
        f"{diff('pool', 'auc'):+.2f}",
        f"{diff('pool-blend', 'mrr_at_test'):+.2f}",
        f"{diff('pool-blend', 'auc'):+.2f}",
        f"{diff('pool', 'mrr_protocol'):+.2f}",
        f"{mean('heuristic', 'mrr_at_test'):.2f}",
        " / ".join(f"{blended[r]:.2f}" for r in RULES),
        " / ".join(f"{below[r]:.2f}" for r in RULES),
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m experiments.own_graph_research.pool", description=__doc__.split("\n")[0]
    )
    p.add_argument("--out", required=True)
    p.add_argument("--variant", default="base-pool8")
    p.add_argument("--pool-max", type=int, default=POOL_MAX, help=f"use at most this many pool negatives ({POOL_MAX})")
    args = p.parse_args(argv)
    out = Path(args.out)
    lines = []
    for name, seeds in runs(out, args.variant).items():
        lines.append(summary(name, study_run(seeds[min(seeds)], args.pool_max)))
    cols = (3, 4, 5, 6, 7)
    means = [f"**{np.mean([float(r[i]) for r in lines]):+.2f}**" for i in cols]
    wins = [f"{sum(float(r[i]) > 0.5 for r in lines)} / {sum(float(r[i]) < -0.5 for r in lines)}" for i in cols]
    lines.append(["**mean**", f"{len(lines)} graphs", "", *means, "", "", ""])
    lines.append(["wins / losses (> 0.5)", "", "", *wins, "", "", ""])
    header = [
        "graph",
        "positives / negatives + pool / test's count",
        "today: MRR at test's count",
        "pool: MRR diff",
        "pool: AUC diff",
        "pool-blend: MRR diff",
        "pool-blend: AUC diff",
        "pool: MRR against the protocol's negatives, diff",
        "best heuristic: MRR at test's count",
        "blended: " + " / ".join(RULES),
        "below the heuristic: " + " / ".join(RULES),
    ]
    print(table(header, lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
