"""The one trainer pool of every recipe, and the one builder of a trainer's command line.

A `TrainerRun` is one `python -m trainer` run as a record: what it trains and how. Every recipe (seeds, the
search's candidates, the final seeds) describes its runs so, and only `TrainerRun.flags` turns one into
flags; a finished run is recognised by its `identity()`, a record, not by a list of flags in some order.

The pool runs them as child processes (torchrun over `python -m trainer` when several GPUs are visible), a
few at a time, that never outlive the recipe, each logging to RUN_DIR/trainer.log. CPU runs take one process
per core (each trainer takes one thread there, trainer.setup.cpu_threads); a GPU run takes one at a time
(one trainer fills the GPU, or torchrun spans several).

With RAY_ADDRESS set (`ray job submit` sets it) the same pool starts each run on the cluster instead, chosen once
in `_start` (pipelines.core.ray_pool): the same flags, one GPU (else one CPU) per run, as many at once as the
cluster has; everything else (the loop, the budget, the pace check, the one-line failures) is this module's.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pipelines.core.children import start_child, stop_children
from pipelines.core.memory_gate import MemoryGate, default_gate
from pipelines.core.ray_pool import ClusterTrainer, cluster_slots, on_cluster, uses_gpus

log = logging.getLogger("pipelines")
TRAINER = [sys.executable, "-m", "trainer"]
LOG_NAME = "trainer.log"


class TrainerError(ValueError):
    """A trainer child that failed; the message names its last line and its log."""


@dataclass(frozen=True)
class TrainerRun:
    run_dir: Path  # the trainer's --out
    shards: str
    preset: str
    seed: int
    protocol: str
    device: str = "auto"
    epochs: float | None = None  # None: the preset's
    overrides: tuple[str, ...] = ()  # more trainer flags, one token each: a candidate's, then the user's --train-arg
    eval_splits: tuple[str, ...] | None = None  # None: the trainer's (valid and test)
    stop_epoch: int | None = None
    patience: int | None = None
    select_on: str | None = None  # the validation metric of the best epoch and of early stopping (None: the data's)
    save_scores: bool = False
    eval_weights: str | None = None  # evaluate these weights instead of training
    fresh: bool = False  # clear the folder rather than resume its last.pt

    @property
    def log(self) -> Path:
        return Path(self.run_dir) / LOG_NAME

    def identity(self) -> dict:
        """What the run trains: a folder finished with the same identity is that run (pipelines.core.finished).
        Where it lives and how it enters its folder are not part of it."""
        d = asdict(self)
        for how in ("run_dir", "fresh"):
            d.pop(how)
        return {
            **d,
            "overrides": list(self.overrides),
            "eval_splits": None if self.eval_splits is None else list(self.eval_splits),
        }

    def flags(self) -> list[str]:
        """The trainer's flags. A folder with a last.pt resumes (a finished run only re-reads it); one without
        is new, or the leftover of a run killed before its first checkpoint, and is cleared: the recipe owns
        its folders (trainer.run_folder refuses a run folder otherwise)."""
        resume = (Path(self.run_dir) / "last.pt").is_file() and not self.fresh
        out = [
            "--shards",
            str(self.shards),
            "--preset",
            self.preset,
            "--out",
            str(self.run_dir),
            "--seed",
            str(self.seed),
            "--protocol",
            self.protocol,
            "--device",
            self.device,
            "--resume" if resume else "--overwrite",
        ]
        optional = {
            "--epochs": self.epochs,
            "--stop-epoch": self.stop_epoch,
            "--patience": self.patience,
            "--select-on": self.select_on,
            "--eval-weights": self.eval_weights,
            "--eval-splits": self.eval_splits and ",".join(self.eval_splits),
        }
        out += [t for name, value in optional.items() if value is not None for t in (name, str(value))]
        return out + (["--save-scores"] if self.save_scores else []) + list(self.overrides)


def cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def device_kind(device_flag: str) -> str:
    """'cuda' when the trainer will run on GPUs (--device auto or cuda, and some are visible, or the cluster
    of RAY_ADDRESS has some), else 'cpu'."""
    if device_flag != "cpu" and on_cluster():
        return "cuda" if uses_gpus(device_flag) else "cpu"
    return "cuda" if device_flag != "cpu" and cuda_devices() else "cpu"


def cpu_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def trainer_slots(device_flag: str, wanted: int = 0) -> int:
    """Trainer processes at once: one per CPU core (or `wanted`), one on GPUs; on a cluster, its CPUs or GPUs."""
    if on_cluster():
        return cluster_slots(device_flag, wanted)
    return 1 if device_kind(device_flag) == "cuda" else max(1, wanted or cpu_cores())


def trainer_command(run: TrainerRun) -> list[str]:
    """The child's command: torchrun over every visible GPU when there are several, else one trainer."""
    gpus = cuda_devices() if run.device != "cpu" else 0
    flags = [*run.flags(), "--no-progress"]
    if gpus > 1:
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={gpus}",
            *TRAINER[1:],
            *flags,
        ]
    return [*TRAINER, *flags]


def run_trainers(
    jobs: dict[str, TrainerRun],
    slots: int,
    stop_at: float | None = None,
    clock=time.time,
    failed: dict | None = None,
    watch=None,
    gate: MemoryGate | None = None,
) -> tuple[dict, list]:
    """Run every TrainerRun, `slots` at a time; returns (each job's wall seconds, the jobs stopped at `stop_at` by
    `clock`: the running ones are ended, the pending ones never start). A failed job stops the others and
    raises naming its log, unless `failed` is given: then the failure's one line goes there ({key: line}) and
    the others go on. `watch(key)`, asked about each running job, stops it early by returning why (the
    search's pace check; the watcher keeps the reasons). A slot is taken only when memory allows it (`gate`, the
    recipe's one pipelines.core.memory_gate by default). Ctrl-C and SIGTERM stop them all
    (pipelines.core.children.exit_on_sigterm)."""
    # on a cluster this machine's memory says nothing of the nodes': each run asks Ray for the memory the
    # recipe's cluster gate expects of it instead (ray_pool.ClusterTrainer)
    gate = gate or default_gate(cluster=on_cluster())
    gate.held.clear()  # a key ("seed 1") may come back in the next pool: log its waits there too
    views = {key: str(job.shards) for key, job in jobs.items()}  # what a trainer's memory follows
    pending, running, wall, stopped = list(jobs), {}, {}, []
    try:
        while pending or running:
            if stop_at is not None and clock() >= stop_at:
                stop_children([proc for proc, _ in running.values()])
                wall.update({key: time.perf_counter() - t for key, (_, t) in running.items()})
                stopped += [*running, *pending]
                running, pending = {}, []
                break
            gate.observe({key: proc.pid for key, (proc, _) in running.items()}, views)
            while pending and len(running) < slots and gate.allows(pending[0], list(running), views):
                key = pending.pop(0)
                running[key] = (_start(key, jobs[key]), time.perf_counter())
            time.sleep(0.2)
            for key, (proc, t) in list(running.items()):
                if proc.poll() is None:
                    if watch is None or not watch(key):
                        continue
                    stop_children([proc])
                    del running[key]
                    wall[key] = time.perf_counter() - t
                    continue
                del running[key]
                wall[key] = time.perf_counter() - t
                if proc.returncode != 0:
                    tail = jobs[key].log.read_text().strip().splitlines()[-1:] or ["(no output)"]
                    message = f"{key}: the trainer {died(proc.returncode)} ({tail[0]}); full log: {jobs[key].log}"
                    if failed is None:
                        raise TrainerError(message)
                    failed[key] = message
    finally:
        stop_children([proc for proc, _ in running.values()])
    return wall, stopped


def died(returncode: int) -> str:
    """How a trainer ended, for its one line: a signal by name; SIGKILL with its likeliest sender."""
    if returncode >= 0:
        return "failed"
    if -returncode == signal.SIGKILL:
        return (
            "was killed (SIGKILL: most often the kernel's out-of-memory killer; train one run at a time with "
            "--parallel-seeds 1, or free memory)"
        )
    try:
        return f"was killed ({signal.Signals(-returncode).name})"
    except ValueError:
        return f"was killed (signal {-returncode})"


def _start(key, job: TrainerRun):
    """The run as a local child, or on the cluster of RAY_ADDRESS (the same flags; a Popen-shaped handle)."""
    if on_cluster():
        return ClusterTrainer(key, job, job.device)
    cmd = trainer_command(job)
    Path(job.run_dir).mkdir(parents=True, exist_ok=True)
    if cmd[2] == "torch.distributed.run":
        log.info("training %s on %s GPUs: %s", key, cmd[4].split("=")[1], " ".join(cmd))
    with open(job.log, "a") as f:
        return start_child(cmd, stdout=f, stderr=f)
