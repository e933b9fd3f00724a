"""Where a CPU trainer's wall time goes on short sequences: process start, the loader, forward, backward,
the optimiser, attention bucketing, evaluation, checkpoints.

    python -m bench.cpu_epoch --shards OUT/<dataset>/<key> [--epochs 2] [-- EXTRA TRAINER FLAGS]
    python -m bench.cpu_epoch --shards SET --epochs 1 --against ../other-checkout    # start-up, side by side

Runs the real trainer (`python -m trainer --preset general --device cpu`) twice on the same shard set: once
plain, for the wall time, and once under cProfile, for the split. cProfile sees the main thread only: the
loader's worker processes show as the main thread waiting in trainer.train.next_batch, torch's intra-op threads
inside the operator that runs them. Profiling slows Python-heavy parts more than operator-heavy ones, so
each share is of the profiled run's total, and the plain run's wall time is printed beside it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/cpu_epoch.py` as well as `python -m bench.cpu_epoch`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workload import print_table

# The trainer under cProfile, its stats written by an atexit handler: the trainer's process ends with
# os._exit after Python's exit steps (common.cli.exit_process), so `python -m cProfile` would never write them.
PROFILED = """
import atexit, cProfile, runpy, sys
prof = cProfile.Profile()
atexit.register(lambda: (prof.disable(), prof.dump_stats({out!r})))
sys.argv = ["trainer", *sys.argv[1:]]
prof.enable()
runpy.run_module("trainer", run_name="__main__", alter_sys=True)
"""


def parts() -> list[tuple[str, tuple]]:
    """(row, pstats key) per part: the cumulative time of that function in the main thread (recursion and
    repeated calls folded by pstats). Rows are nested as indented; a parent includes its children."""
    import importlib._bootstrap as bootstrap

    from torch.optim import AdamW

    from trainer import train
    from trainer.model import attention
    from trainer.model import pencil as model

    def key(fn) -> tuple:
        code = inspect.unwrap(fn).__code__
        return (code.co_filename, code.co_firstlineno, code.co_name)

    return [
        ("process start: imports", key(bootstrap._find_and_load)),
        ("epochs (train_epoch)", key(train.Trainer.train_epoch)),
        ("  waiting for the loader", key(train.next_batch)),
        ("  optimiser steps (train_step)", key(train.Trainer.train_step)),
        ("    forward", key(model.Pencil.forward)),
        ("      embedding", key(model.Pencil.embed)),
        ("      attention plan (bucketing)", key(attention.build_buckets)),
        ("      attention kernel (bucketed SDPA)", key(attention.bucketed_kernel)),
        ("    backward", ("~", 0, "<method 'run_backward' of 'torch._C._EngineBase' objects>")),
        ("    optimiser (AdamW.step)", key(AdamW.step)),
        ("  evaluation (run_eval)", key(train.Trainer.run_eval)),
        ("  last.pt (save_last)", key(train.Trainer.save_last)),
    ]


def trainer_cmd(shards: str, out: Path, epochs: int, extra: list[str]) -> list[str]:
    return [
        "-m",
        "trainer",
        "--shards",
        shards,
        "--preset",
        "general",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--overwrite",
        "--epochs",
        str(epochs),
        "--eval-splits",
        "valid",
        "--no-progress",
        *extra,
    ]


def run_timed(argv: list[str], cwd: str | None = None) -> tuple[float, float, float]:
    """(launch time on the wall clock, seconds the process ran, its peak RSS in MB); `python -m` imports the
    project from cwd. The peak is the trainer process's own (os.wait4), its loader workers' not counted."""
    launch, t0 = time.time(), time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.DEVNULL, stderr=err, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status):
            err.seek(0)
            tail = (err.read().strip().splitlines() or ["(no output)"])[-1]
            raise SystemExit(f"bench.cpu_epoch: the trainer failed: {tail}")
    return launch, wall, usage.ru_maxrss / 1024  # KiB on Linux


def first_step(rows: list[dict]) -> float:
    """When optimiser step 0 began: extrapolated back from the first two train lines."""
    first, second = [r for r in rows if r["event"] == "train"][:2]
    pace = (second["time"] - first["time"]) / (second["step"] - first["step"])
    return first["time"] - first["step"] * pace


def read_metrics(metrics: Path) -> list[dict]:
    return [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]


def timeline(metrics: Path, launch: float, wall: float) -> list[list]:
    """The plain run's phases from its metrics.jsonl: launch to the first optimiser step, then each epoch's
    training and evaluation, then the exit."""
    rows = read_metrics(metrics)
    start = first_step(rows)
    out, prev = [["process start (launch to step 0)", f"{start - launch:.2f}"]], start
    for r in (r for r in rows if r["event"] == "eval"):
        out.append([f"epoch {r['epoch']}: training", f"{r['time'] - r['seconds'] - prev:.2f}"])
        out.append([f"epoch {r['epoch']}: evaluation", f"{r['seconds']:.2f}"])
        prev = r["time"]
    out.append(["after the last evaluation (summary, exit)", f"{launch + wall - prev:.2f}"])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.cpu_epoch", description=__doc__.splitlines()[0])
    ap.add_argument("--shards", required=True, help="a shard set folder (preprocess's output)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs each run trains")
    ap.add_argument(
        "--against",
        help="another checkout of the project: its trainer's start-up and whole run are timed beside this "
        "one's, alternating, --repeats times each, instead of the profile",
    )
    ap.add_argument("--repeats", type=int, default=3, help="runs of each checkout with --against")
    ap.add_argument("extra", nargs="*", help="more trainer flags, after --")
    args = ap.parse_args(argv)
    if args.against:
        return side_by_side(args)
    with tempfile.TemporaryDirectory(prefix="cpu_epoch_") as tmp:
        tmp = Path(tmp)
        launch, plain, _ = run_timed(trainer_cmd(args.shards, tmp / "plain", args.epochs, args.extra))
        phases = timeline(tmp / "plain" / "metrics.jsonl", launch, plain)
        prof = tmp / "profile.pstats"
        cmd = trainer_cmd(args.shards, tmp / "prof", args.epochs, args.extra)[2:]  # the flags, without -m trainer
        _, profiled, _ = run_timed(["-c", PROFILED.format(out=str(prof)), *cmd])
        stats = pstats.Stats(str(prof))
    print_table(f"CPU trainer, {args.epochs} epochs, plain run: {plain:.1f} s wall", ["phase", "s"], phases)
    total = stats.total_tt
    rows = []
    for label, key in parts():
        secs = stats.stats.get(key, (0, 0, 0, 0.0))[3]
        rows.append([label, f"{secs:.2f}", f"{100 * secs / total:.1f}%"])
    print_table(
        f"The same under cProfile: {profiled:.1f} s wall (main thread {total:.1f} s)",
        ["part (main thread, cumulative)", "profiled s", "share"],
        rows,
    )


def side_by_side(args) -> None:
    """Process start, whole-run wall time and peak RSS of this checkout's trainer and --against's, alternating."""
    here = str(Path(__file__).resolve().parents[1])
    runs = {here: [], args.against: []}
    with tempfile.TemporaryDirectory(prefix="cpu_epoch_") as tmp:
        for rep in range(args.repeats):
            for k, cwd in enumerate(runs):
                out = Path(tmp) / f"r{rep}-{k}"
                launch, wall, peak = run_timed(trainer_cmd(args.shards, out, args.epochs, args.extra), cwd=cwd)
                runs[cwd].append((first_step(read_metrics(out / "metrics.jsonl")) - launch, wall, peak))
    rows = []
    for cwd, got in runs.items():
        start, wall, peak = [statistics.median(x) for x in zip(*got)]
        lo, hi = min(g[0] for g in got), max(g[0] for g in got)
        rows.append([cwd, f"{start:.2f} ({lo:.2f}-{hi:.2f})", f"{wall:.2f}", f"{peak:.0f}"])
    print_table(
        f"CPU trainer, {args.epochs} epoch(s), {args.repeats} runs each, alternating (medians)",
        ["checkout", "process start s", "whole run s", "peak RSS MB"],
        rows,
    )


if __name__ == "__main__":
    main()
