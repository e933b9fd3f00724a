"""The seeds of a recipe: each seed's trainer flags, finished seeds reused, the others trained in the one
trainer pool (pipelines.core.trainers), and the record each seed leaves (result.json).

`args` is the namespace of pipelines.run's parser, or one with its fields device, epochs, train_arg and
parallel_seeds (the paper recipes pass their own).
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
from pathlib import Path

from common.presets import preset_for_protocol
from pipelines.core import finished
from pipelines.core.seed_data import stale_seeds
from pipelines.core.trainers import Job, TrainerError, run_trainers, trainer_slots

log = logging.getLogger("pipelines")


class SeedFlagsError(ValueError):
    """A bad --train-arg; the message names it."""


def trainer_flags(args, preset_name: str, shards: str, protocol: str, seed: int, run_dir: Path,
                  fresh: bool = False) -> list[str]:
    """The seed's trainer flags. A seed folder with a last.pt resumes (a finished seed only re-reads it);
    one without is the leftover of a run killed before its first checkpoint (or nothing), which is
    cleared: the recipe owns its seed folders (trainer.run_folder refuses a run folder otherwise)."""
    resume = (run_dir / "last.pt").is_file() and not fresh
    flags = ["--shards", str(shards), "--preset", preset_name, "--out", str(run_dir), "--seed", str(seed),
             "--protocol", protocol, "--device", args.device, "--resume" if resume else "--overwrite"]
    if args.epochs:
        flags += ["--epochs", str(args.epochs)]
    return flags + [a for arg in args.train_arg for a in arg.split("=", 1)]


def check_trainer_flags(args, preset_name: str, protocols: list[str], out: Path) -> None:
    """Parse the trainer's flags once up front (shards do not exist yet, so a placeholder path)."""
    from trainer.config import config_from_args
    from trainer.model import ModelConfig
    for protocol in protocols:
        name = preset_for_protocol(preset_name, protocol)
        flags = trainer_flags(args, name, "<shards>", protocol, 0, out)
        given = " ".join(args.train_arg) or "(none)"
        usage = io.StringIO()
        try:
            with contextlib.redirect_stderr(usage):  # argparse prints a usage block; keep only its error line
                config = config_from_args(flags)
            ModelConfig.from_preset(name, **config.model.as_overrides())  # model flags (--attention ...) too
        except ValueError as err:
            raise SeedFlagsError(f"--train-arg {given}: {err}") from None
        except SystemExit:
            lines = usage.getvalue().strip().splitlines() or ["invalid trainer flags"]
            raise SeedFlagsError(f"--train-arg {given}: {lines[-1].split('error: ', 1)[-1]}") from None


def train_seeds(args, preset_name: str, shards: str, protocol: str, runs: dict[int, Path],
                extra: dict[int, list[str]] | None = None, stop_at: float | None = None,
                fresh: frozenset = frozenset()) -> dict[int, dict]:
    """{seed: summary} of every run: finished seeds reused untouched, the others trained in the pool.
    `extra`: more trainer flags per seed; `stop_at`: the pool's deadline (a stopped seed raises); `fresh`:
    seeds whose folder is cleared rather than resumed. A folder trained on other data is refused
    (pipelines.core.seed_data), or cleared with the recipe's --overwrite."""
    stale = stale_seeds(args, runs, shards)  # folders trained on other data: refused, or --overwrite
    flags = {seed: trainer_flags(args, preset_name, shards, protocol, seed, d, seed in fresh or seed in stale)
             + (extra or {}).get(seed, []) for seed, d in runs.items()}
    done = {seed: s for seed in runs if seed not in stale
            and (s := finished.finished_summary(runs[seed], flags[seed])) is not None}
    for seed in done:
        log.info("seed %d: finished with these flags in %s; reused", seed, runs[seed])
    todo = {seed: d for seed, d in runs.items() if seed not in done}
    for seed, run_dir in todo.items():
        finished.forget(run_dir)
        log.info("training seed %d (log: %s)", seed, run_dir / "trainer.log")
    jobs = {f"seed {seed}": Job(flags[seed], d) for seed, d in todo.items()}
    _, stopped = run_trainers(jobs, min(len(jobs) or 1, trainer_slots(args.device, args.parallel_seeds or 0)),
                              stop_at, device_flag=args.device)
    if stopped:
        raise TrainerError(f"{', '.join(stopped)}: stopped by the time budget before finishing; rerun with a larger "
                           "--budget-minutes (finished seeds are reused, stopped ones resume)")
    for seed in todo:
        finished.mark_finished(runs[seed], flags[seed])
        done[seed] = json.loads((runs[seed] / "summary.json").read_text())
    return {seed: done[seed] for seed in runs}


def result_record(dataset: str, protocol: str, preset: str, seed: int, summary: dict, features: bool) -> dict:
    model = "PENCIL" if features else "PENCIL w/o features"  # the paper's row names
    return {"dataset": dataset, "protocol": protocol, "model": model, "preset": preset, "seed": seed,
            "best_epoch": summary.get("best_epoch"), "valid": summary.get("valid") or {},
            "test": summary.get("test") or {}, "train_time_s": summary.get("train_time_s"),
            "attention_backend": summary.get("attention_backend")}
