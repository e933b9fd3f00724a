"""Do the search's and the blend's rules pay on held-out validation? Each rule chooses on one half of a run's
validation positives and is scored on the other half, over many random halvings; test is never read.

    python -m experiments.selection_rules.study SUITE/runs/auto [--halvings 20] [--out table.md]

For every finished `--preset auto` run folder under the root (its search/ candidates and seed<k>/ folders
hold their validation logits at their best epoch, scores/valid-original.npz):
- the search: among the default and the alternative that went on, "default" always keeps the default,
  "best" takes the best mean on half A, "margin 2 SE" (what `pipelines.auto.search` does) takes the best only
  when it beats the default by more than 2 standard errors on half A ("margin 1 SE": by more than 1);
- the blend: over the final seeds, "none" keeps the model alone, "per seed" lets each seed take its best
  (h, w) on half A, "per run" takes the best mean over the seeds, "per run + margin" (what
  `pipelines.auto.blend` does) keeps it only beyond 2 standard errors.
Each rule's value is the chosen option's mean on half B of the run's signal (MRR, or AUC under 300
validation positives); the table gives, per run and on average, each rule minus the first rule.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from common.eval_scores import read_scores, scores_path
from common.manifest import read_manifest
from common.manifest_record import Manifest
from pipelines.auto import blend
from pipelines.auto.signal import choose, per_positive


def values(run_dir: Path, manifest: Manifest, metric: str) -> np.ndarray:
    cid, score, _ = read_scores(scores_path(run_dir, "valid", "original"))
    return per_positive(manifest, "valid", "original", cid, score.astype(np.float64))[metric]


def search_options(out: Path, record: dict) -> dict:
    """{candidate: per-positive validation values} of the candidates that trained to convergence."""
    chosen = record["chosen"]
    metric = chosen["metric"]
    opts = {}
    for cid in chosen["rungs"]["converged"]:
        run = next((out / "search").glob(f"{cid}-*"))
        manifest = read_manifest(json.loads((run / "config.json").read_text())["data"]["shards"])
        opts[cid] = values(run, manifest, metric)
    return opts


def blend_options(out: Path, record: dict) -> dict:
    """{seed: {(h, w) key: per-positive values}} of every final seed's blended validation logits."""
    from common.datasets import load_set_dataset

    manifest = read_manifest(record["chosen"]["shards"])
    metric = record["chosen"]["metric"]
    heur = blend.eval_heuristics(load_set_dataset(manifest.config).without_test(), manifest, "valid", "original")
    out_ = {}
    for seed_dir in sorted(out.glob("seed*")):
        cid, logit, _ = read_scores(scores_path(seed_dir, "valid", "original"))
        out_[seed_dir.name] = {
            blend.key(h, w): per_positive(
                manifest,
                "valid",
                "original",
                cid,
                blend.blend(logit.astype(np.float64), heur[h][cid] if h != blend.NONE else None, w),
            )[metric]
            for h, w in blend.GRID
        }
    return out_


def mean_on(v: np.ndarray, rows: np.ndarray) -> float:
    return float(v[rows].mean())


def search_rules(opts: dict, a: np.ndarray, b: np.ndarray) -> dict:
    keys = list(opts)
    best = max(keys, key=lambda k: (mean_on(opts[k], a), -keys.index(k)))
    margin = {se: choose({k: opts[k][a] for k in keys}, se)["choice"] for se in (1.0, 2.0)}
    return {
        "default": mean_on(opts[keys[0]], b),
        "best": mean_on(opts[best], b),
        "margin 1 SE": mean_on(opts[margin[1.0]], b),
        "margin 2 SE": mean_on(opts[margin[2.0]], b),
    }


def blend_rules(seeds: dict, a: np.ndarray, b: np.ndarray) -> dict:
    grid = list(next(iter(seeds.values())))
    per_seed = np.mean(
        [mean_on(v[max(grid, key=lambda k: (mean_on(v[k], a), -grid.index(k)))], b) for v in seeds.values()]
    )
    pooled = {k: np.mean([v[k] for v in seeds.values()], axis=0) for k in grid}
    best = max(grid, key=lambda k: (mean_on(pooled[k], a), -grid.index(k)))
    margin = choose({k: pooled[k][a] for k in grid}, 2.0)["choice"]
    return {
        "none": mean_on(pooled["none"], b),
        "per seed": float(per_seed),
        "per run": mean_on(pooled[best], b),
        "per run + margin": mean_on(pooled[margin], b),
    }


def halvings(n: int, count: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        perm = rng.permutation(n)
        yield perm[: n // 2], perm[n // 2 :]


def study(root: Path, count: int) -> tuple[dict, dict]:
    search, blends = {}, {}
    for record_path in sorted(root.glob("*/auto/original/search.json")):
        out, record = record_path.parent, json.loads(record_path.read_text())
        name = out.parent.parent.name
        opts = search_options(out, record)
        n = len(next(iter(opts.values())))
        runs = [search_rules(opts, a, b) for a, b in halvings(n, count, 0)]
        search[name] = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
        if "blend" in record:  # the final seeds finished (a run stopped after its search has no blend yet)
            seeds = blend_options(out, record)
            runs = [blend_rules(seeds, a, b) for a, b in halvings(n, count, 0)]
            blends[name] = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
    return search, blends


def markdown(table: dict, title: str) -> str:
    rules = list(next(iter(table.values())))
    base = rules[0]
    lines = [
        f"**{title}**: half-B value of each rule minus `{base}` (x 100), {len(table)} runs",
        "",
        "| run | " + " | ".join(rules[1:]) + f" | `{base}` itself |",
        "|---|" + "---|" * len(rules),
    ]
    for name, v in table.items():
        lines.append(
            f"| {name} | "
            + " | ".join(f"{100 * (v[r] - v[base]):+.2f}" for r in rules[1:])
            + f" | {100 * v[base]:.2f} |"
        )
    mean = {r: np.mean([100 * (v[r] - v[base]) for v in table.values()]) for r in rules[1:]}
    lines.append("| **mean** | " + " | ".join(f"**{mean[r]:+.2f}**" for r in rules[1:]) + " | |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m experiments.selection_rules.study", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("root", type=Path, help="a folder holding <dataset>/auto/original/search.json runs")
    p.add_argument("--halvings", type=int, default=20)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    search, blends = study(args.root, args.halvings)
    if not search:
        p.error(f"no finished auto run under {args.root}")
    text = markdown(search, "The search's choice") + "\n" + markdown(blends, "The heuristic blend")
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
