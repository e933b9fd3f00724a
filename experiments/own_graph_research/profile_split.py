"""Where a `python -m trainer` run's time goes, from a py-spy profile of the whole process tree.

    py-spy record --subprocesses --rate 50 --format raw -o run.raw -- python -m trainer ...
    python -m experiments.own_graph_research.profile_split run.raw

The training process's samples are split by what its stack is doing (first matching rule wins); the loader
workers' samples (stacks under a second `process` frame) are split by the loader step they are in. Samples are
on-CPU time (py-spy leaves idle threads out), so the main process's rows add up to its busy time.
"""

from __future__ import annotations

import collections
import re
import sys

MAIN_RULES = [
    ("start-up: imports", ["_find_and_load"], ["Trainer.fit"]),
    ("evaluation: waiting for the loader", ["score_eval_set", r"Loader\._batches|_next_data|Loader\.__iter__"], []),
    ("evaluation: forward", ["score_eval_set", "Pencil.forward"], []),
    ("evaluation: other", ["run_eval"], []),
    (
        "training: waiting for the loader",
        ["train_epoch", r"Loader\._batches|_next_data|Loader\.__iter__|train_loader"],
        [],
    ),
    ("training: forward, attention core (bucketed)", ["train_step", "bucketed_kernel"], ["backward"]),
    ("training: forward, rest", ["train_step", "Pencil.forward"], ["backward"]),
    ("training: backward", ["train_step", "backward"], []),
    ("training: optimiser", ["train_step", r"Optimizer|adamw|_use_grad|zero_grad"], []),
    ("training: other", ["train_epoch|train_step"], []),
    ("checkpoints", ["save_last|save_atomic"], []),
    ("start-up: model and setup", ["Trainer.__init__|_run"], []),
]
WORKER_STEPS = ["BatchPacker.__call__", "relabel", "read_blocks", "shuffle_pool", "token_batches", "Queue.put"]


def split(path: str, rate: float) -> tuple[dict, dict]:
    main, workers = collections.Counter(), collections.Counter()
    with open(path) as f:
        lines = f.read().splitlines()
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        frames = stack.split(";")
        n = int(count)
        if len(frames) > 1 and frames[1].startswith("process "):
            names = [f.split(" (")[0] for f in frames[2:]]
            if "Thread._bootstrap" in names:
                continue  # the queue's feeder and resource-sharer threads: waiting, not loading
            step = next((s for s in WORKER_STEPS if s in names), "other")
            workers["import (in " + step + ")" if "_find_and_load" in names else step] += n
            continue
        if "Thread._bootstrap" in stack:
            continue
        for name, need, avoid in MAIN_RULES:
            if all(re.search(p, stack) for p in need) and not any(re.search(p, stack) for p in avoid):
                main[name] += n
                break
        else:
            main["other"] += n
    return {k: v / rate for k, v in main.items()}, {k: v / rate for k, v in workers.items()}


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    rate = float(args[1]) if len(args) > 1 else 50.0
    main_s, workers_s = split(args[0], rate)
    total = sum(main_s.values())
    print(f"training process: {total:.1f} s on CPU")
    for k, v in sorted(main_s.items(), key=lambda kv: -kv[1]):
        print(f"  {k:48s} {v:7.1f} s  {100 * v / total:5.1f} %")
    print(f"loader workers: {sum(workers_s.values()):.1f} s on CPU")
    for k, v in sorted(workers_s.items(), key=lambda kv: -kv[1]):
        print(f"  {k:48s} {v:7.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
