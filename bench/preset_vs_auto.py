"""Should `make demo` switch to `--preset auto`? A paper preset against a finished auto run, on VALIDATION only,
with the signal auto selects on (issue 21 items 2 and 8).

    python -m bench.preset_vs_auto --dataset citeseer --preset citeseer-small --auto RESULTS/citeseer/auto/original \\
        [--seeds 0,1,2] [--work bench-work] [--out table.md]

The auto run's selection protocol (search.json: `hard` when the split's own validation is saturated) is the
signal. The preset's seeds are trained exactly as `pipelines.run --preset PRESET` trains them (its views,
epochs, and its own best epoch, picked on the reported protocol's validation as the paper's rule does), on a
shard set that also holds the selection protocol's validation queries (the same hard negatives auto built:
pipelines.auto_search.attach_hard_negatives is a function of the training graph and a fixed seed), and score
them at that epoch (trainer --save-scores --score-protocols). Both sides' numbers are then read from the
saved validation logits by the same code (pipelines.auto_prior.PriorStage.validation_grid): the model alone
(no heuristic prior; the preset has none) and auto's chosen blend. No test file is opened: the preset's seeds
train with --eval-splits valid, and every open of a test-*.npz fails while the numbers are read.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from bench.prior_rule import no_test_scores


def train_preset(args, select: str) -> tuple[dict, object, dict]:
    """The preset's seeds on a shard set with the selection protocol too: ({seed: run dir}, dataset, manifest)."""
    from common.presets import get_preset
    from common.shards import read_manifest
    from pipelines.auto_search import HARD, attach_hard_negatives
    from pipelines.run import load_run_dataset, preprocess_config, preset_views, shutdown_embedded_ray, train_seeds
    from pipelines.run_args import build_parser, validate_args
    from preprocess.job import run_job

    work = Path(args.work)
    run_args = build_parser().parse_args([
        "--dataset", args.dataset, "--preset", args.preset, "--seeds", args.seeds, "--out", str(work / "results"),
        "--shards", str(work / "shards"), "--train-arg=--save-scores", f"--train-arg=--score-protocols={select}",
        "--train-arg=--eval-splits=valid"])
    validate_args(run_args)
    dataset = load_run_dataset(run_args)
    if select == HARD:
        attach_hard_negatives(dataset)
    preset = get_preset(args.preset)
    protocols = list(dict.fromkeys(["original", select]))  # select may be original itself
    cfg = preprocess_config(run_args, preset.sampling, preset_views(run_args, preset), preset.train_percent, protocols)
    shards = str(run_job(cfg, dataset).path)
    shutdown_embedded_ray()
    runs = {s: work / "results" / args.preset / f"seed{s}" for s in run_args.seed_list}
    train_seeds(run_args, args.preset, shards, "original", runs)
    return runs, dataset, read_manifest(shards)


def values(stage, run_dir: Path, chosen: tuple[str, float] | None = None) -> dict:
    """The model alone's (and a given blend's) selection-protocol validation value, from the saved logits; and
    the model alone's reported-protocol validation MRR and AUC at the same epoch (the run's summary)."""
    grid = {(h, w): v for h, w, v in stage.validation_grid(run_dir)["grid"]}
    valid = json.loads((run_dir / "summary.json").read_text())["valid"]
    out = {"model": grid[("none", 0.0)], "reported": valid["mrr"], "auc": valid["auc"]}
    if chosen is not None:
        out["blend"] = grid[chosen]
    return out


def fmt(xs) -> str:
    x = 100 * np.asarray(xs, dtype=float)
    return f"{x.mean():.2f} ± {x.std(ddof=1) if len(x) > 1 else 0.0:.2f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.preset_vs_auto", description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True)
    p.add_argument("--preset", required=True, help="the paper preset make demo runs (e.g. citeseer-small)")
    p.add_argument("--auto", required=True, help="a finished auto run's protocol folder (search.json, seed<k>/)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--work", default="bench-work/preset_vs_auto", help="shards and the preset's runs")
    p.add_argument("--out", default=None, help="also write the table here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from common.shards import read_manifest
    from pipelines.auto_prior import PriorStage

    auto = Path(args.auto)
    search = json.loads((auto / "search.json").read_text())
    select = search["selection"]["protocol"]
    runs, dataset, manifest = train_preset(args, select)
    auto_stage = PriorStage(dataset, read_manifest(search["chosen"]["shards"]), select, "original")
    preset_stage = PriorStage(dataset, manifest, select, "original")
    rows = {"preset": [], "auto": []}
    with no_test_scores():
        for s, run_dir in runs.items():
            rows["preset"].append(values(preset_stage, run_dir))
            prior = search["prior"][str(s)]
            rows["auto"].append(values(auto_stage, auto / f"seed{s}", (prior["heuristic"], prior["weight"])))
    lines = [f"| {args.dataset}, seeds {args.seeds} | valid/{select} MRR, model alone | with its prior | "
             "valid/original MRR, model alone | valid/original AUC |", "|---|---|---|---|---|"]
    for name, key in ((f"{args.preset} (make demo)", "preset"),
                      (f"auto ({search['chosen']['cid']}, {search['chosen']['epochs']} ep)", "auto")):
        r = rows[key]
        blend = fmt([x["blend"] for x in r]) if "blend" in r[0] else "–"
        lines.append(f"| {name} | {fmt([x['model'] for x in r])} | {blend} | {fmt([x['reported'] for x in r])} | "
                     f"{fmt([x['auc'] for x in r])} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
