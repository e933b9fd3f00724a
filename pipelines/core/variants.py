"""The rows a protocol's seeds give beside their own, for both recipes of `pencil run` (a fixed preset, the search):

- **Node features.** A shard set with node features (--features, --node-features) trains every seed twice:
  with them ('PENCIL', in <protocol>/seed<k>) and, in <protocol>/no-features/seed<k>, the same run with the
  trainer's --no-features on the same set ('PENCIL w/o features'). The same seeds, the same candidates: the
  rows differ by the features alone.
- **The user's pairs beside a protocol.** With --eval-pairs, the checkpoints of a protocol other than `pairs`
  are also evaluated on the user's pairs (<seed folder's parent>/pairs/seed<k>: trainer --eval-weights on the
  same set, protocol pairs); their rows say which protocol selected them. `--protocol pairs` selects on the
  pairs instead.
- **The split.** A record names the split when the time decides it (`temporal`) or was set aside (`random`),
  so the report says which split its numbers come from, and the two never share a row.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from pipelines.core.results import SeedResult
from pipelines.core.run_config import NO_FEATURES, PEER_FEATURES, RunConfig
from pipelines.core.seeds import result_record, train_seeds
from pipelines.core.trainers import TrainerRun
from trainer.run_summary import RunSummary

log = logging.getLogger("pipelines")
NO_FEATURES_DIR = "no-features"
PAIRS = "pairs"


def split_label(run: RunConfig, dataset) -> str | None:
    """'temporal' for a split by time, 'random' for one the user asked to be random (--split random: a time
    column, if any, set aside); None otherwise (a split column, a paper dataset's own split, the default)."""
    if dataset.temporal:
        return "temporal"
    return "random" if run.source.split_kind == "random" else None


def pairs_beside(dataset, protocol: str) -> bool:
    """Whether the checkpoints of `protocol` are also evaluated on the user's pairs."""
    return PAIRS in dataset.protocols and protocol != PAIRS


def without_features(runs: dict[int, TrainerRun]) -> dict[int, TrainerRun]:
    """The same trainer runs with the trainer's --no-features, each in <parent>/no-features/<seed folder>, trained
    (never a featured run's weights evaluated instead)."""
    return {
        seed: replace(
            r,
            run_dir=Path(r.run_dir).parent / NO_FEATURES_DIR / Path(r.run_dir).name,
            overrides=(NO_FEATURES, *(o for o in r.overrides if o != PEER_FEATURES)),  # peers read the table
            eval_weights=None,
            fresh=False,
        )
        for seed, r in runs.items()
    }


def pairs_runs(runs: dict[int, TrainerRun], summaries: dict[int, RunSummary]) -> dict[int, TrainerRun]:
    """Each trained seed's best weights evaluated on the user's pairs, in <parent>/pairs/<seed folder>. A seed that
    evaluated another run's weights (the search's seed) passes those on."""
    out = {}
    for seed, r in runs.items():
        if seed not in summaries:
            continue
        weights = summaries[seed].weights_from or str(Path(r.run_dir) / "best.pt")
        out[seed] = replace(
            r,
            run_dir=Path(r.run_dir).parent / PAIRS / Path(r.run_dir).name,
            protocol=PAIRS,
            eval_weights=weights,
            stop_epoch=None,
            patience=None,
            save_scores=False,
            fresh=False,
        )
    return out


def seed_record(
    run: RunConfig, dataset, protocol: str, preset: str, seed: int, summary: RunSummary, features: bool, **extra
) -> dict:
    """A seed's result.json: pipelines.core.seeds.result_record, with the split's label and `extra`."""
    record = result_record(
        dataset.name, protocol, preset, seed, summary, features, dataset.own, run.shards.hard_neg_fraction
    )
    if label := split_label(run, dataset):
        record["split"] = label
    return {**record, **extra}


def seed_results(
    run: RunConfig,
    dataset,
    protocol: str,
    preset: str,
    runs: dict[int, TrainerRun],
    summaries: dict[int, RunSummary],
    features: bool,
    **extra,
) -> list[SeedResult]:
    """Every trained seed's record and, when the pairs are evaluated beside `protocol`, its checkpoint's on them
    (selected_on names the protocol that chose the checkpoint)."""
    out = [
        SeedResult(
            Path(runs[s].run_dir) / "result.json",
            seed_record(run, dataset, protocol, preset, s, summaries[s], features, **extra),
        )
        for s in runs
        if s in summaries
    ]
    if pairs_beside(dataset, protocol):
        beside = pairs_runs(runs, summaries)
        log.info(
            "evaluating the checkpoints of %s on your pairs (protocol pairs, beside %s)",
            ", ".join(f"seed {s}" for s in beside),
            protocol,
        )
        done = train_seeds(run.trainer, beside)
        out += [
            SeedResult(
                Path(beside[s].run_dir) / "result.json",
                seed_record(run, dataset, PAIRS, preset, s, done[s], features, selected_on=protocol, **extra),
            )
            for s in beside
            if s in done
        ]
    return out


def train_without_features(
    run: RunConfig, runs: dict[int, TrainerRun], stop_at: float | None = None, partial: bool = False
) -> tuple[dict[int, TrainerRun], dict[int, dict]]:
    """With node features, the 'PENCIL w/o features' twins of `runs` (the featured seeds) and their summaries
    (pipelines.core.seeds.train_seeds); nothing without them."""
    if not run.ships_features or not runs:
        return {}, {}
    no_features = without_features(runs)
    log.info(
        "training the same seeds without node features (trainer %s), in %s",
        NO_FEATURES,
        Path(next(iter(no_features.values())).run_dir).parent,
    )
    return no_features, train_seeds(run.trainer, no_features, stop_at, partial=partial)
