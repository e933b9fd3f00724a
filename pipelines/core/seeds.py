"""The seeds of a recipe: each seed's trainer run, finished seeds reused, the others trained in the one
trainer pool (pipelines.core.trainers), and the record each seed leaves (result.json)."""

from __future__ import annotations

import contextlib
import io
import logging
from dataclasses import replace
from pathlib import Path

from common.presets import preset_for_protocol
from pipelines.core import finished
from pipelines.core.config import TrainerOptions
from pipelines.core.seed_data import stale_seeds
from pipelines.core.stopped import stopped_summary
from pipelines.core.trainers import TrainerError, TrainerRun, run_trainers, trainer_slots
from trainer.run_summary import RunSummary, read_summary

log = logging.getLogger("pipelines")


class SeedFlagsError(ValueError):
    """A bad --train-arg; the message names it."""


def seed_run(
    opts: TrainerOptions, preset_name: str, shards: str, protocol: str, seed: int, run_dir: Path, **more
) -> TrainerRun:
    """A seed's trainer run under the recipe's options; `more`: TrainerRun fields the recipe sets (a
    candidate's overrides come before the user's --train-arg, so the user has the last word)."""
    overrides = (*more.pop("overrides", ()), *opts.train_args)
    return TrainerRun(
        run_dir, shards, preset_name, seed, protocol, opts.device, more.pop("epochs", opts.epochs), overrides, **more
    )


def check_trainer_flags(opts: TrainerOptions, preset_name: str, protocols: list[str], out: Path) -> None:
    """Parse the trainer's flags once up front (shards do not exist yet, so a placeholder path)."""
    from trainer.config import config_from_args
    from trainer.model.pencil import ModelConfig

    given = " ".join(opts.train_args) or "(none)"
    for protocol in protocols:
        name = preset_for_protocol(preset_name, protocol)
        usage = io.StringIO()
        try:
            with contextlib.redirect_stderr(usage):  # argparse prints a usage block; keep only its error line
                config = config_from_args(seed_run(opts, name, "<shards>", protocol, 0, out).flags())
            overrides = config.model.as_overrides()
            overrides.pop("features", None)  # --no-features: whether the set's table is read, not a model field
            ModelConfig.from_preset(name, **overrides)  # model flags (--attention ...) too
        except ValueError as err:
            raise SeedFlagsError(f"--train-arg {given}: {err}") from None
        except SystemExit:
            lines = usage.getvalue().strip().splitlines() or ["invalid trainer flags"]
            raise SeedFlagsError(f"--train-arg {given}: {lines[-1].split('error: ', 1)[-1]}") from None


def train_seeds(
    opts: TrainerOptions, runs: dict[int, TrainerRun], stop_at: float | None = None, partial: bool = False
) -> dict[int, RunSummary]:
    """{seed: summary} of every run: finished seeds reused untouched, the others trained in the pool.
    `stop_at`: the pool's deadline. A seed it stops, or whose trainer fails, raises; with `partial` it is
    judged on the epochs it evaluated (pipelines.core.stopped; its summary says `stopped`, or `failed` with
    the trainer's one line), or left out of the result when it evaluated none, and only when no seed has a
    result does a failure raise; a rerun resumes it either way. A folder trained on other data is refused
    (pipelines.core.seed_data), or cleared with the recipe's --overwrite, as is, with --overwrite, a finished
    run of other flags."""
    if not runs:
        return {}
    shards = next(iter(runs.values())).shards
    stale = stale_seeds(opts, {seed: Path(r.run_dir) for seed, r in runs.items()}, shards)
    if opts.overwrite:  # --overwrite also retrains a finished seed of other flags, which --resume would refuse
        for seed in sorted(seed for seed, r in runs.items() if seed not in stale and finished.trained_otherwise(r)):
            log.info("seed %d: %s holds a run of other flags; --overwrite retrains it", seed, runs[seed].run_dir)
            stale.add(seed)
    runs = {seed: replace(r, fresh=True) if seed in stale else r for seed, r in runs.items()}
    done = {
        seed: s for seed, r in runs.items() if seed not in stale and (s := finished.finished_summary(r)) is not None
    }
    for seed in done:
        log.info("seed %d: finished as this run would train it, in %s; reused", seed, runs[seed].run_dir)
    todo = {seed: r for seed, r in runs.items() if seed not in done}
    for seed, run in todo.items():
        finished.forget(Path(run.run_dir))
        log.info("training seed %d (log: %s)", seed, run.log)
    # evaluations (seed 0 of --preset auto) before the trainings: under a budget it is the one seed that cannot be
    # judged on part of its run, and it is known to be short; after equal trainings it ends the phase as late
    # (T + E either way), and on a knowledge graph's 300,000 candidates it is minutes, which a budget cut whole
    jobs = {f"seed {seed}": run for seed, run in sorted(todo.items(), key=lambda kv: kv[1].eval_weights is None)}
    failed: dict[str, str] = {}  # filled only with `partial`: without it a failure raises in the pool
    slots = min(len(jobs) or 1, trainer_slots(opts.device, opts.parallel))
    _, stopped = run_trainers(jobs, slots, stop_at, failed=failed if partial else None)
    if stopped and not partial:
        raise TrainerError(
            f"{', '.join(stopped)}: stopped by the time budget before finishing; rerun with a larger "
            "--budget-minutes (finished seeds are reused, stopped ones resume)"
        )
    for seed, run in todo.items():
        key = f"seed {seed}"
        if key not in stopped and key not in failed:
            finished.mark_finished(run)
            done[seed] = read_summary(run.run_dir)
        elif (judged := _judged(seed, run, failed.get(key))) is not None:
            done[seed] = judged
    if failed and not done:
        raise TrainerError(next(iter(failed.values())))  # no seed to report: the first failure is the run's
    return {seed: done[seed] for seed in runs if seed in done}


def _judged(seed: int, run: TrainerRun, failure: str | None) -> RunSummary | None:
    """The summary of a seed that did not finish (the budget stopped it, or its trainer failed with the line
    `failure`) at its best evaluated epoch, or None when it evaluated none; either is logged."""
    why = failure.removeprefix(f"seed {seed}: ") if failure else "stopped by the time budget"
    resume = "a rerun resumes it" if failure else "a rerun with a larger --budget-minutes resumes it"
    summary = stopped_summary(Path(run.run_dir), run.protocol)
    if summary is None:
        log.warning("seed %d: %s before its first evaluation; left out of the report (%s)", seed, why, resume)
        return None
    log.warning(
        "seed %d: %s after %d epoch(s); judged on its best evaluated epoch, %d (%s)",
        seed,
        why,
        summary.epochs_completed,
        summary.best_epoch,
        resume,
    )
    return replace(summary, stopped=False, failed=failure) if failure else summary


def result_record(
    dataset: str,
    protocol: str,
    preset: str,
    seed: int,
    summary: RunSummary,
    features: bool,
    own_graph: bool = False,
    hard_neg_fraction: float | None = None,
) -> dict:
    """A seed's result.json: what `pencil report` reads. `own_graph` and `hard_neg_fraction` are recorded only
    when set, so the records of paper datasets and of uniform-negative runs stay as they were."""
    model = "PENCIL" if features else "PENCIL w/o features"  # the paper's row names
    record = {
        "dataset": dataset,
        "protocol": protocol,
        "model": model,
        "preset": preset,
        "seed": seed,
        "best_epoch": summary.best_epoch,
        "valid": summary.valid or {},
        "test": summary.test or {},
        "train_time_s": summary.train_time_s,
        "attention_backend": summary.attention_backend,
    }
    if own_graph:
        record["own_graph"] = True
    if hard_neg_fraction:
        record["hard_neg_fraction"] = hard_neg_fraction
    if summary.stopped:  # a time budget ended it: its best evaluated epoch (pipelines.core.stopped)
        record["stopped_by_budget"] = True
    if summary.failed:  # its trainer failed after an evaluation: judged on it as well
        record["trainer_failed"] = summary.failed
    return record


def seed_notes(requested: list[int], records: list[dict]) -> list[str]:
    """The report's lines for seeds it does not hold whole: per protocol and model row, the seeds asked for with no
    evaluated epoch (left out of the table) and those a time budget or a failed trainer cut short (reported at
    their best evaluated epoch). A table with fewer or shorter seeds than asked says so under it."""
    groups: dict[tuple[str, str], dict[int, dict]] = {}
    for r in records:
        if "blend_of" not in r:  # a blend row repeats its model's seeds
            groups.setdefault((r["protocol"], r["model"]), {})[r["seed"]] = r
    notes = []
    for (protocol, model), got in groups.items():
        where = f"{model}, protocol {protocol}"
        if missing := [s for s in requested if s not in got]:
            notes.append(
                f"{where}: {_seeds(missing)} left out, no evaluated epoch (stopped by --budget-minutes or a "
                f"failed trainer: the log says which); a rerun resumes {_it(missing)}"
            )
        if cut := [s for s, r in sorted(got.items()) if r.get("stopped_by_budget")]:
            notes.append(
                f"{where}: {_seeds(cut)} stopped by --budget-minutes, each reported at its best evaluated epoch; "
                f"a rerun with a larger --budget-minutes resumes {_it(cut)}"
            )
        for s, r in sorted(got.items()):
            if r.get("trainer_failed"):
                why = r["trainer_failed"]
                notes.append(f"{where}: seed {s}'s trainer failed ({why}); reported at its best evaluated epoch")
    return notes


def _seeds(seeds: list[int]) -> str:
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))


def _it(seeds: list[int]) -> str:
    return "it" if len(seeds) == 1 else "them"
