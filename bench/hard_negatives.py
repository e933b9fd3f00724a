"""Hard training negatives against uniform ones, with everything else fixed: a finished `--preset auto`
run's winner retrained on views whose negatives are partly 2-hop non-edges (preprocess --hard-neg-fraction).

    python -m bench.hard_negatives RESULTS/<graph>/auto/<protocol> [--fraction 0.5] [--seeds 0,1,2]
                                   [--shards DIR] [--out DIR]

RUN must have trained on uniform negatives (the search always does; its final seeds did unless the
training-negatives stage or the flag chose hard views). The winner's shard set is rebuilt with the fraction
(same dataset, sampling, views, percent, protocols and seed: only the training views differ, so the eval
candidates are identical), and each seed is trained with exactly the final seeds' flags
(pipelines.auto_final.final_flags) into OUT/seed<k>. Both arms are then scored the recipe's way
(pipelines.auto_prior.PriorStage: each seed picks its prior on its validation logits, then test).

The table: per arm, mean ± std over the seeds of the selection protocol's validation metric for the model
alone and for the best prior blend (what the training-negatives stage decides on), and test MRR / AUC of
the model alone and of each seed's chosen blend. Validation is what a choice may use; test is reported.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from types import SimpleNamespace

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np


def rebuilt_config(manifest: dict, fraction: float, out: str):
    """The PreprocessConfig that wrote `manifest`'s shard set (its recorded config), with `fraction` hard
    training negatives and another output root; everything else, hence the eval sets, unchanged."""
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig

    c = dict(manifest["config"])
    cand = {**c.pop("candidates"), "hard_neg_fraction": fraction}
    sampling = c.pop("sampling")
    names = {f.name for f in dataclasses.fields(PreprocessConfig)}
    kept = {k: v for k, v in c.items() if k in names}
    kept.update(out=out, force=False, split=tuple(c["split"]) if c.get("split") else None)
    return PreprocessConfig(**kept, sampling=SamplingConfig(sampling["d"], sampling["n"]),
                            candidates=CandidateConfig(**cand))


def hard_shard_set(manifest: dict, dataset, fraction: float, out: str) -> str:
    """The shard set of `manifest` rebuilt with `fraction` hard training negatives (cached by preprocess)."""
    from preprocess.job import run_job

    result = run_job(rebuilt_config(manifest, fraction, out), dataset)
    return result.location or str(result.path)


def arm_metrics(stage, runs: dict[int, Path]) -> dict:
    """{seed: valid model, valid best blend, test model mrr/auc, test blend mrr/auc} the recipe's way."""
    out = {}
    for seed, prior in stage.run(runs).items():
        summary = json.loads((Path(runs[seed]) / "summary.json").read_text())
        out[seed] = {"valid_model": prior["grid"][0][2], "valid_blend": prior["valid"],
                     "test_model_mrr": summary["test"]["mrr"], "test_model_auc": summary["test"]["auc"],
                     "test_blend_mrr": prior["test"]["mrr"], "test_blend_auc": prior["test"]["auc"],
                     "prior": [prior["heuristic"], prior["weight"]]}
    return out


def table(arms: dict[str, dict], select: str, metric: str) -> str:
    cols = ["valid_model", "valid_blend", "test_model_mrr", "test_model_auc", "test_blend_mrr", "test_blend_auc"]
    lines = [f"| training negatives | valid/{select} {metric.upper()} model | valid/{select} {metric.upper()} best blend"
             " | test MRR model | test AUC model | test MRR blend | test AUC blend | priors (seeds) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, seeds in arms.items():
        cells = []
        for c in cols:
            v = 100 * np.array([m[c] for m in seeds.values()])
            cells.append(f"{v.mean():.2f} ± {v.std(ddof=1) if len(v) > 1 else 0.0:.2f}")
        picks = ", ".join("none" if h == "none" else f"{h.upper()} x {w:g}" for h, w in (m["prior"] for m in seeds.values()))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {picks} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    from common.datasets import load_set_dataset
    from common.manifest import read_manifest
    from pipelines.auto_final import final_flags
    from pipelines.auto_prior import PriorStage
    from pipelines.auto_runs import run_trainers
    from pipelines.auto_search import HARD, attach_hard_negatives

    p = argparse.ArgumentParser(prog="python -m bench.hard_negatives", description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a finished --preset auto run folder (RESULTS/<graph>/auto/<protocol>)")
    p.add_argument("--fraction", type=float, default=0.5, help="hard fraction of the training negatives")
    p.add_argument("--seeds", default="0,1,2", help="seeds to train (each is compared with RUN's seed of that number)")
    p.add_argument("--shards", default="shards", help="shard root for the rebuilt set (default shards)")
    p.add_argument("--out", type=Path, default=None, help="run folders of the hard arm (default RUN/../hard-f<F>)")
    p.add_argument("--device", default="cpu", help="trainer --device (default cpu)")
    p.add_argument("--slots", type=int, default=2, help="trainers at once (default 2)")
    args = p.parse_args(argv)
    if not 0 < args.fraction <= 1:
        p.error(f"--fraction: {args.fraction}; pass a value in (0, 1]")
    search = json.loads((args.run / "search.json").read_text())
    chosen, select, protocol = dict(search["chosen"]), search["selection"]["protocol"], args.run.name
    if chosen.get("hard_neg_fraction"):
        p.error(f"{args.run}: its final seeds already trained on {chosen['hard_neg_fraction']:g}-hard views; pass a "
                "run on uniform negatives")
    manifest = read_manifest(chosen["shards"])
    dataset = load_set_dataset(manifest["config"])
    if select == HARD:
        attach_hard_negatives(dataset)
    seeds = [int(s) for s in args.seeds.split(",")]
    out = args.out or args.run.parent / f"hard-f{args.fraction:g}"
    hard = hard_shard_set(manifest, dataset, args.fraction, args.shards)
    runs = {s: out / f"seed{s}" for s in seeds}
    flags_args = SimpleNamespace(device=args.device, train_arg=[])
    jobs = {f"seed {s}": (final_flags(flags_args, {**chosen, "shards": hard}, protocol, select, s, d, None, fresh=True), d)
            for s, d in runs.items() if not (d / "summary.json").exists()}
    run_trainers(jobs, args.slots)
    uniform = PriorStage(dataset, manifest, select, protocol)
    arms = {"uniform": arm_metrics(uniform, {s: args.run / f"seed{s}" for s in seeds}),
            f"{args.fraction:g} hard": arm_metrics(PriorStage(dataset, read_manifest(hard), select, protocol), runs)}
    text = table(arms, select, uniform.metric)
    (out / "hard_negatives.json").write_text(json.dumps({"run": str(args.run), "fraction": args.fraction,
                                                          "shards": hard, "arms": arms}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
