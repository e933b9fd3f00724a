"""How much of a finished auto run's validation-to-test MRR drop is the number of shared negatives.

    python -m bench.negatives_count results/GRAPH/auto/original [--draws 20]

Under the `original` protocol every positive is ranked against all of its split's shared random negatives,
and a seeded 85/5/10 split gives test twice as many as validation. A ranker whose positives mostly beat
every negative (RA on a positive with common neighbours) hardly notices; one whose positives sit among the
negatives sees its ranks double. This bench re-ranks each final seed's saved test scores against random
subsets of the test negatives of validation's size (--draws of them), for the model alone and for the best
heuristic, beside the validation and full-test MRR. An analysis of a run whose choices are made: it reads
test scores and chooses nothing.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from common.eval_scores import read_scores, scores_path

from common.metrics import evaluate
from common.shards import load_queries
from trainer.evaluate import eval_entry


def mrr(pos: np.ndarray, neg: np.ndarray) -> float:
    """Mean reciprocal rank of each positive among the shared negatives, ties counted half (common.metrics)."""
    return float(evaluate("original", pos, neg)["mrr"])


def subsampled_mrr(pos: np.ndarray, neg: np.ndarray, size: int, draws: int, rng) -> np.ndarray:
    """(draws,) MRR of the positives against `draws` random subsets of `size` of the shared negatives."""
    return np.array([mrr(pos, neg[rng.choice(len(neg), size=size, replace=False)]) for _ in range(draws)])


def split_scores(stage, run_dir: Path | None, split: str, heuristic: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(positive scores, shared negative scores) of one split: the seed's saved logits, or a heuristic's."""
    entry = eval_entry(stage.manifest, split, "original")
    pos_cid, neg_cid = load_queries(f"{stage.manifest['root']}/{entry['queries']}",
                                    sha256=stage.manifest["files"][entry["queries"]]["sha256"])
    if heuristic is not None:
        table = stage.heuristics(split, "original")[heuristic]
    else:
        cid, score, _ = read_scores(scores_path(run_dir, split, "original"))
        table = np.full(int(cid.max()) + 1, np.nan)
        table[cid] = score
    return table[pos_cid], table[neg_cid]


def rows_for(stage, name: str, run_dir: Path | None, heuristic: str | None, draws: int, rng) -> dict:
    vpos, vneg = split_scores(stage, run_dir, "valid", heuristic)
    tpos, tneg = split_scores(stage, run_dir, "test", heuristic)
    sub = subsampled_mrr(tpos, tneg, len(vneg), draws, rng)
    return {"ranker": name, "valid_neg": len(vneg), "test_neg": len(tneg), "valid": mrr(vpos, vneg),
            "test_sub": float(np.mean(sub)), "test_sub_std": float(np.std(sub)), "test": mrr(tpos, tneg)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.negatives_count", description=__doc__.splitlines()[0])
    p.add_argument("run_root", help="a finished `--preset auto` run's protocol folder (holds search.json)")
    p.add_argument("--draws", type=int, default=20, help="random negative subsets per seed (default 20)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from bench.prior_rule import load_stage
    from pipelines.auto_prior import HEURISTICS

    root = Path(args.run_root)
    if not (root / "search.json").is_file():
        p.error(f"{root}: no search.json; pass a finished `--preset auto` run's protocol folder")
    stage, seeds, _ = load_stage(root)
    rng = np.random.default_rng(args.seed)
    heur = {h: mrr(*split_scores(stage, None, "valid", h)) for h in HEURISTICS}
    best = max(heur, key=heur.get)  # the best heuristic on validation
    rows = [rows_for(stage, f"PENCIL {d.name}", d, None, args.draws, rng) for d in seeds]
    rows.append(rows_for(stage, f"{best} (best on valid)", None, best, args.draws, rng))
    print(f"{root}: valid {rows[0]['valid_neg']} shared negatives, test {rows[0]['test_neg']}")
    print("| ranker | valid MRR | test MRR, validation's count of negatives | test MRR, all negatives |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['ranker']} | {100 * r['valid']:.2f} | {100 * r['test_sub']:.2f} ± {100 * r['test_sub_std']:.2f} "
              f"| {100 * r['test']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
