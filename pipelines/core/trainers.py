"""The one trainer pool of every recipe: `python -m trainer` (or torchrun over it) child processes, a few at a
time, that never outlive the recipe, each logging to RUN_DIR/trainer.log.

CPU runs take one process per core (each trainer takes one thread there, trainer.setup.cpu_threads); a
GPU run takes one process at a time (one trainer fills the GPU, or torchrun spans several).
"""
from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pipelines.core.children import start_child, stop_children

log = logging.getLogger("pipelines")
TRAINER = [sys.executable, "-m", "trainer"]
LOG_NAME = "trainer.log"


class TrainerError(ValueError):
    """A trainer child that failed; the message names its last line and its log."""


@dataclass(frozen=True)
class Job:
    flags: list[str]  # the trainer's flags (its --out is run_dir)
    run_dir: Path

    @property
    def log(self) -> Path:
        return self.run_dir / LOG_NAME


def cuda_devices() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def device_kind(device_flag: str) -> str:
    """'cuda' when the trainer will run on GPUs (--device auto or cuda, and some are visible), else 'cpu'."""
    return "cuda" if device_flag != "cpu" and cuda_devices() else "cpu"


def cpu_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def trainer_slots(device_flag: str, wanted: int = 0) -> int:
    """Trainer processes at once: one per CPU core (or `wanted`), one on GPUs."""
    return 1 if device_kind(device_flag) == "cuda" else max(1, wanted or cpu_cores())


def trainer_command(flags: list[str], device_flag: str) -> list[str]:
    """The child's command: torchrun over every visible GPU when there are several, else one trainer."""
    gpus = cuda_devices() if device_flag != "cpu" else 0
    if gpus > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}",
                "-m", "trainer", *flags, "--no-progress"]
    return [*TRAINER, *flags, "--no-progress"]


def run_trainers(jobs: dict, slots: int, stop_at: float | None = None, clock=time.time,
                 device_flag: str = "cpu") -> tuple[dict, list]:
    """Run every Job, `slots` at a time; returns (each job's wall seconds, the jobs stopped at `stop_at` by
    `clock`: the running ones are ended, the pending ones never start). A failed job stops the others and
    raises naming its log; so do Ctrl-C and SIGTERM (pipelines.core.children.exit_on_sigterm)."""
    pending, running, wall, stopped = list(jobs), {}, {}, []
    try:
        while pending or running:
            if stop_at is not None and clock() >= stop_at:
                stop_children([proc for proc, _ in running.values()])
                wall.update({key: time.perf_counter() - t for key, (_, t) in running.items()})
                stopped += [*running, *pending]
                running, pending = {}, []
                break
            while pending and len(running) < slots:
                key = pending.pop(0)
                running[key] = (_start(key, jobs[key], device_flag), time.perf_counter())
            time.sleep(0.2)
            for key, (proc, t) in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[key]
                wall[key] = time.perf_counter() - t
                if proc.returncode != 0:
                    tail = jobs[key].log.read_text().strip().splitlines()[-1:] or ["(no output)"]
                    raise TrainerError(f"{key}: the trainer failed ({tail[0]}); full log: {jobs[key].log}")
    finally:
        stop_children([proc for proc, _ in running.values()])
    return wall, stopped


def _start(key, job: Job, device_flag: str):
    cmd = trainer_command(job.flags, device_flag)
    job.run_dir.mkdir(parents=True, exist_ok=True)
    if cmd[2] == "torch.distributed.run":
        log.info("training %s on %s GPUs: %s", key, cmd[4].split("=")[1], " ".join(cmd))
    with open(job.log, "a") as f:
        return start_child(cmd, stdout=f, stderr=f)
