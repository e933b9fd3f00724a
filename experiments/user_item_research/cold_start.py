"""Where a temporal user-item split's signal is: the share of valid and test pairs whose user has no earlier pair
(cold start: no history to rank by), and MRR on the cold and the warm pairs apart, for the popularity row, the L3
path count (Σ over paths u - i' - u' - i of 1 / sqrt(deg i' · deg u'), the bipartite stand-in for CN, which is 0
there), a `pencil run`'s model per seed, and its blend as validation chose it (model + w · log1p(popularity prior)).

    python -m experiments.user_item_research.cold_start --dataset ../shared/data/movielens-100k/ratings.tsv.gz \
        --run OUT/ratings/auto/kg --seeds 0,1,2

Diagnosis only: it chooses nothing. Each split is scored on the graph it is scored on in the run (valid on train;
test on train + valid).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from common.datasets import load_dataset
from common.datasets.kg import KG
from common.datasets.spec import DatasetSpec
from common.heuristics_typed import POPULARITY, POPULARITY_PRIOR, typed_scores
from common.manifest import read_manifest
from common.metrics import rank_against_own
from pipelines.auto.signal import eval_signal

GRAPH_OF = {"valid": ("train",), "test": ("train", "valid")}


def reciprocal_ranks(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """(P,) 1 / the tie-averaged rank of each positive among its own row of negatives (-inf: padding)."""
    return 1.0 / rank_against_own(pos, neg)


def l3_scores(edges: np.ndarray, n: int, pos: np.ndarray, neg: np.ndarray, real: np.ndarray):
    """The degree-normalised L3 path count of every positive and every real negative pair (user, item)."""
    a = sp.csr_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    a.data[:] = 1.0
    inv = lambda k: np.where(k > 0, 1 / np.sqrt(np.maximum(k, 1)), 0.0)  # noqa: E731
    users, items = inv(np.asarray(a.sum(1)).ravel()), inv(np.asarray(a.sum(0)).ravel())
    l3 = (((a @ sp.diags(items)) @ a.T) @ sp.diags(users) @ a).tocsr()
    flat = np.clip(neg, 0, None).reshape(-1, 2)
    at_neg = np.asarray(l3[flat[:, 0], flat[:, 1]]).reshape(real.shape)
    return np.asarray(l3[pos[:, 0], pos[:, 1]]).ravel(), np.where(real, at_neg, -np.inf)


def split_rows(ds, man, run: Path, split: str, seeds: list[int], blend: dict) -> tuple[np.ndarray, dict]:
    """(cold mask, {row: per-positive reciprocal ranks}) of one split."""
    data = ds.splits[split]
    pos, neg = data.pos, data.negatives(KG)
    real = neg[..., 0] >= 0
    seen = np.concatenate([ds.splits[s].pos for s in GRAPH_OF[split]])
    cold = np.bincount(seen[:, 0], minlength=ds.num_nodes)[pos[:, 0]] == 0
    h = typed_scores(ds, split, (POPULARITY, POPULARITY_PRIOR))
    rows = {
        "popularity": reciprocal_ranks(*h[POPULARITY]),
        "L3": reciprocal_ranks(*l3_scores(seen, ds.num_nodes, pos, neg, real)),
    }
    prior_pos, prior_neg = (np.log1p(np.where(np.isfinite(x), x, 0)) for x in h[POPULARITY_PRIOR])
    w = (
        blend.get("weight", 0.0)
        if blend.get("heuristic") == POPULARITY_PRIOR and not blend.get("partner_weight")
        else None
    )
    for seed in seeds:
        z = np.load(run / f"seed{seed}" / "scores" / f"{split}-kg.npz")
        sig = eval_signal(man, split, "kg", z["cid"], z["score"])
        rows[f"model, seed {seed}"] = reciprocal_ranks(sig.pos.astype(np.float64), sig.neg.astype(np.float64))
        if w:  # ranked as float32, as the blend ranks
            bp = (sig.pos + np.float32(w) * prior_pos.astype(np.float32)).astype(np.float32)
            bn = np.where(real, sig.neg + np.float32(w) * prior_neg.astype(np.float32), -np.inf).astype(np.float32)
            rows[f"blend x {w:g}, seed {seed}"] = reciprocal_ranks(bp, bn)
    return cold, rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, help="the ratings file the run trained on")
    ap.add_argument("--run", required=True, type=Path, help="the run's OUT/<name>/auto/kg folder")
    ap.add_argument("--seeds", default="0,1,2")
    args = ap.parse_args(argv)
    ds = load_dataset(DatasetSpec(args.dataset))
    search = json.loads((args.run / "search.json").read_text())
    man = read_manifest(Path(search["chosen"]["shards"]))
    seeds = [int(s) for s in args.seeds.split(",")]
    print("| split | row | all pairs | warm users | cold users |\n|---|---|---|---|---|")
    for split in ("valid", "test"):
        cold, rows = split_rows(ds, man, args.run, split, seeds, search.get("blend") or {})
        print(f"| {split} | pairs ({100 * cold.mean():.1f} % cold) | {len(cold)} | {(~cold).sum()} | {cold.sum()} |")
        for name, r in rows.items():
            got = " | ".join(f"{100 * x.mean():.2f}" for x in (r, r[~cold], r[cold]))
            print(f"| {split} | {name} | {got} |")


if __name__ == "__main__":
    main()
