"""`--preset auto`'s training-negatives stage: uniform random negatives, or HARD_NEG_FRACTION of them drawn as
2-hop non-edges of the training graph (preprocess --hard-neg-fraction), decided per run on validation.

Why a stage and not a constant: the auto winner retrained on F = 0.5 views (3 seeds, validation, the best
prior blend) went 17.86 -> 18.58 MRR on wikipedia (dense) and 29.55 -> 27.32 on citeseer (sparse); the model
alone was worse on both. So the choice depends on the graph, and is made on the metric the product ships:
the best heuristic-prior blend (pipelines.auto_prior) on the selection protocol's validation set.

What it does, once the search has chosen its winner (pipelines.auto_search) and before the final seeds:
1. builds the winner's shard set again with hard_neg_fraction HARD_NEG_FRACTION (same dataset, views,
   percent and protocols: only the training views differ, so the validation candidates are the same);
2. trains seed SEARCH_SEED of the winner on it for exactly the chosen epochs, VALIDATION ONLY (the final
   seeds' flags with --eval-splits valid), its validation logits saved;
3. evaluates the uniform winner's own weights (the search's best.pt at the chosen epoch) the same way, on
   validation only (trained like 2. on the uniform shards when no such weights exist);
4. keeps F = 0.5 only when its best blended validation value is strictly higher (a tie keeps uniform).
When 0.5 wins, the final seeds train on the hard shard set. Seed SEARCH_SEED evaluates the best.pt of the
chosen views' run (the stage's hard run; for uniform, the search winner's, or the stage's uniform run when
it had to train) instead of training the same weights again. No trainer here opens a test file: test is read only after this choice, by the final seeds.

An explicit --hard-neg-fraction (0 included) skips the stage; so does a budget that cannot fit it (its cost,
one training run of the winner plus two validation passes, is reserved by the search as one more final seed).
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Callable

from common.eval_scores import scores_path
from pipelines.auto_candidates import round_cost
from pipelines.auto_final import final_flags, reusable_weights
from pipelines.auto_runs import SEARCH_SEED, _summary, run_trainers

log = logging.getLogger("pipelines.auto")

HARD_NEG_FRACTION = 0.5
UNIFORM = 0.0


def stage_runs(args) -> bool:
    """The stage runs only when the user left the fraction to the recipe (--hard-neg-fraction not given)."""
    return args.hard_neg_fraction is None


def choose_fraction(values: dict[float, float]) -> float:
    """HARD_NEG_FRACTION only when its best blended validation value is strictly higher than uniform's."""
    return HARD_NEG_FRACTION if values[HARD_NEG_FRACTION] > values[UNIFORM] else UNIFORM


def best_blend(prior, run_dir: Path) -> float:
    """The best blended validation value over auto_prior's GRID (the model alone, w = 0, included)."""
    return max(v for _, _, v in prior.validation_grid(run_dir)["grid"])


def stage_dir(root: Path, fraction: float, chosen: dict, shards: str) -> Path:
    """One folder per (fraction, choice, shard set): a rerun finds its finished run there."""
    key = hashlib.sha256(json.dumps([chosen["cid"], chosen["config"], chosen["epochs"], shards],
                                    sort_keys=True).encode()).hexdigest()[:8]
    return root / f"negatives-f{fraction:g}-{key}"


def stage_flags(args, chosen: dict, shards: str, protocol: str, select: str, run_dir: Path,
                weights: Path | None) -> list[str]:
    """The final seeds' flags of seed SEARCH_SEED on `shards`, validation only (no test file opened); when
    selection ranks on another protocol, final_flags already adds --score-protocols <select>."""
    flags = final_flags(args, {**chosen, "shards": shards}, protocol, select, SEARCH_SEED, run_dir, weights, fresh=True)
    flags[flags.index("--eval-splits") + 1] = "valid"
    return flags


def finished(run_dir: Path, epochs: int, select: str) -> bool:
    return ((_summary(run_dir) or {}).get("epochs_completed", 0) >= epochs
            and scores_path(run_dir, "valid", select).is_file())


def decide(args, searcher, chosen: dict, build_shards: Callable[[float], str], make_prior: Callable[[str], object],
           protocol: str, select: str, winner_dir: Path) -> tuple[dict, Path]:
    """The stage: (its search.json record, the run folder whose best.pt final seed SEARCH_SEED may evaluate).
    When HARD_NEG_FRACTION wins, chosen["shards"] becomes the hard shard set (in place)."""
    chosen.setdefault("hard_neg_fraction", args.hard_neg_fraction or UNIFORM)
    if not stage_runs(args):
        log.info("training negatives: --hard-neg-fraction %g (the flag; no stage)", args.hard_neg_fraction)
        return {"chosen": args.hard_neg_fraction, "by": "flag"}, winner_dir
    cid, epochs = chosen["cid"], chosen["epochs"]
    left = searcher.deadline - searcher.clock()
    stage_s = searcher.sec_per_epoch[cid] * epochs
    final_s = round_cost(searcher.sec_per_epoch, [cid], 0, epochs, searcher.slots, searcher.final_seeds - 1)
    if left < stage_s + final_s:
        log.info("training negatives: uniform, the stage skipped: it (~%.0f s) and the final seeds (~%.0f s) need "
                 "more than the %.0f s left", stage_s, final_s, left)
        return {"chosen": UNIFORM, "by": "skipped: budget", "need_s": round(stage_s + final_s, 1),
                "left_s": round(left, 1)}, winner_dir
    shards = {UNIFORM: chosen["shards"], HARD_NEG_FRACTION: build_shards(HARD_NEG_FRACTION)}
    runs = {f: stage_dir(searcher.root, f, chosen, s) for f, s in shards.items()}
    weights = {UNIFORM: reusable_weights(winner_dir, chosen), HARD_NEG_FRACTION: None}
    jobs = {f"negatives f{f:g}": (stage_flags(args, chosen, shards[f], protocol, select, runs[f], weights[f]), runs[f])
            for f in shards if not finished(runs[f], epochs, select)}
    log.info("training negatives: seed %d of %s on uniform and %g-hard views, %d epoch(s), validation only (%d to "
             "run, %d reused)", SEARCH_SEED, cid, HARD_NEG_FRACTION, epochs, len(jobs), len(shards) - len(jobs))
    run_trainers(jobs, searcher.slots)
    values = {f: best_blend(make_prior(shards[f]), runs[f]) for f in shards}
    fraction = choose_fraction(values)
    record = {"fractions": {f"{f:g}": v for f, v in values.items()}, "chosen": fraction, "by": "validation",
              "protocol": f"valid/{select}", "runs": {f"{f:g}": str(d) for f, d in runs.items()}}
    log.info("training negatives: %s (best blended valid/%s: uniform %.4f, %g-hard %.4f)",
             "hard" if fraction else "uniform", select, values[UNIFORM], HARD_NEG_FRACTION, values[HARD_NEG_FRACTION])
    if fraction == UNIFORM:  # the stage's own uniform run, when it trained (no reusable weights), is seed 0's
        return record, winner_dir if weights[UNIFORM] else runs[UNIFORM]
    chosen.update(shards=shards[fraction], hard_neg_fraction=fraction)
    return record, runs[fraction]
