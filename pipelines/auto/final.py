"""The final seeds of `--preset auto`: the chosen candidate trained for every seed as the search trained it
(same lr schedule, same stop), evaluated on valid and test, test read at each seed's best validation epoch.

Seed SEARCH_SEED is the search's own run of the chosen candidate: a final seed of that number, trained with
the same flags, would reach exactly its weights (training is deterministic per seed, evaluation takes no
training randomness), so it evaluates that run's best.pt once (trainer --eval-weights) instead.
"""
from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

from pipelines.auto.config import DEFAULT_PRESET, Candidate
from pipelines.auto.search import SEARCH_SEED
from pipelines.core.seeds import train_seeds

log = logging.getLogger("pipelines.auto")


def final_flags(chosen: dict, max_epochs: int, train_arg: list[str]) -> list[str]:
    """The chosen candidate's trainer flags for a final seed (beyond the seed's own: pipelines.core.seeds),
    the user's --train-arg last, as in the search (pipelines.auto.search.Search.flags)."""
    c = Candidate.from_dict(chosen["config"])
    return [*c.trainer_flags(max_epochs), "--stop-epoch", str(chosen["epochs"]), "--save-scores",
            *[a for arg in train_arg for a in arg.split("=", 1)]]


def train_final_seeds(args, chosen: dict, protocol: str, runs: dict[int, Path], max_epochs: int,
                      stop_at: float | None = None) -> dict[int, dict]:
    """{seed: summary} of every final seed; finished seeds are reused, the search's seed evaluates its run."""
    flags = final_flags(chosen, max_epochs, args.train_arg)
    extra = {seed: list(flags) for seed in runs}
    fresh = frozenset()
    weights = Path(chosen["run_dir"]) / "best.pt"
    if SEARCH_SEED in runs and weights.is_file():
        extra[SEARCH_SEED] += ["--eval-weights", str(weights)]
        fresh = frozenset({SEARCH_SEED})
        log.info("seed %d: evaluating the search's run of %s (%s) instead of training it again", SEARCH_SEED,
                 chosen["cid"], weights)
    run_args = _seed_args(args)
    return train_seeds(run_args, DEFAULT_PRESET, chosen["shards"], protocol, runs, extra, stop_at, fresh)


def _seed_args(args) -> SimpleNamespace:
    """The run's flags as core.seeds reads them; --epochs and --train-arg come with final_flags."""
    return SimpleNamespace(device=args.device, epochs=None, train_arg=[], parallel_seeds=args.parallel_seeds,
                           overwrite=getattr(args, "overwrite", False))
