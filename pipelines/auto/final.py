"""The final seeds of `--preset auto`: the chosen candidate trained for every seed as the search trained it
(same lr schedule, same stop), evaluated on valid and test, test read at each seed's best validation epoch.

Seed SEARCH_SEED is the search's own run of the chosen candidate: a final seed of that number, trained with
the same flags, would reach exactly its weights (training is deterministic per seed, evaluation takes no
training randomness), so it evaluates that run's best.pt once (trainer --eval-weights) instead.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from pipelines.auto.config import DEFAULT_PRESET
from pipelines.auto.records import Choice
from pipelines.auto.search import SEARCH_SEED
from pipelines.core import finished
from pipelines.core.config import TrainerOptions
from pipelines.core.seeds import seed_run, train_seeds
from pipelines.core.trainers import TrainerRun, run_trainers
from trainer.run_summary import RunSummary

log = logging.getLogger("pipelines.auto")


def final_runs(opts: TrainerOptions, choice: Choice, protocol: str, runs: dict[int, Path]) -> dict[int, TrainerRun]:
    """Every final seed's trainer run: the chosen candidate as the search trained it; the search's seed evaluates
    that run's best.pt instead of training it again."""
    seeds = {
        seed: seed_run(
            opts,
            DEFAULT_PRESET,
            choice.shards,
            protocol,
            seed,
            run_dir,
            epochs=choice.run_epochs,
            overrides=choice.candidate.overrides(),
            stop_epoch=choice.epochs,
            save_scores=True,
            select_on=choice.metric,
        )
        for seed, run_dir in runs.items()
    }
    weights = Path(choice.run_dir) / "best.pt"
    if SEARCH_SEED in seeds and weights.is_file():
        seeds[SEARCH_SEED] = replace(seeds[SEARCH_SEED], eval_weights=str(weights), fresh=True)
    return seeds


def train_final_seeds(
    opts: TrainerOptions, choice: Choice, protocol: str, runs: dict[int, Path], stop_at: float | None = None
) -> dict[int, RunSummary]:
    """{seed: summary} of every final seed; finished seeds are reused, the search's seed evaluates its run. A
    seed the budget stops, or whose trainer fails, is judged on its evaluated epochs, or left out
    (pipelines.core.seeds.train_seeds)."""
    seeds = final_runs(opts, choice, protocol, runs)
    if SEARCH_SEED in seeds and seeds[SEARCH_SEED].eval_weights:
        log.info(
            "seed %d: evaluating the search's run of %s (%s) instead of training it again",
            SEARCH_SEED,
            choice.cid,
            seeds[SEARCH_SEED].eval_weights,
        )
    return train_seeds(opts, seeds, stop_at, partial=True)


def evaluate_partner(opts: TrainerOptions, choice: Choice, protocol: str, out: Path) -> Path | None:
    """The search's run of the choice's partner evaluated on valid and test (its best.pt, trainer
    --eval-weights) in `out`, for a blend that adds it; reused when done. None, logged, if its trainer fails
    (the blend is then decided without it)."""
    weights = Path(choice.partner_dir) / "best.pt"
    run = seed_run(
        opts,
        DEFAULT_PRESET,
        choice.partner_shards,
        protocol,
        SEARCH_SEED,
        out,
        epochs=choice.partner_run_epochs or choice.run_epochs,
        overrides=choice.partner.overrides(),
        save_scores=True,
        eval_weights=str(weights),
        fresh=True,
    )
    if finished.finished_summary(run) is None:
        finished.forget(out)
        log.info("blend: evaluating %s's search run on test (%s; log: %s)", choice.partner.cid, weights, run.log)
        failed: dict[str, str] = {}
        run_trainers({choice.partner.cid: run}, 1, failed=failed)
        if failed:
            log.warning("blend: %s", failed[choice.partner.cid])
            return None
        finished.mark_finished(run)
    return out
