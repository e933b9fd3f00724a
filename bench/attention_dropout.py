"""What dropout on the attention probabilities costs a CPU trainer, side by side in one run.

    python -m bench.attention_dropout                                    # the attention call alone
    python -m bench.attention_dropout --shards SET --epochs 1 --repeats 2 [-- EXTRA TRAINER FLAGS]

The first table times torch's SDPA as the trainer's bucketed kernel calls it (one bucket of n samples of L
tokens, a quarter of them padded, about the trainer's 12,000 tokens a micro-batch, 4 heads of 32), forward and
backward, with dropout 0.1 and without, one thread. The second runs the real trainer (`python -m trainer --preset
general --device cpu`, bench.cpu_epoch's command) on a shard set with `--attention-dropout 0` and without,
alternating: whole-run wall, the training part of its epochs (from metrics.jsonl) and peak RSS.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/attention_dropout.py` as well as `python -m bench.attention_dropout`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F

from bench.cpu_epoch import first_step, read_metrics, run_timed, trainer_cmd
from bench.workload import print_table

TOKENS = 12_000  # about the trainer's token budget of a CPU micro-batch
HEADS, HEAD_DIM = 4, 32  # the general preset: hidden 128, 4 heads


def attention_seconds(n: int, length: int, dropout: float, repeats: int) -> float:
    """Best of `repeats` forward + backward passes of one bucket's SDPA call (after one warm-up)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, HEADS, length, HEAD_DIM, generator=g, requires_grad=True) for _ in range(3))
    mask = torch.ones(n, 1, 1, length, dtype=torch.bool)
    mask[: n // 4, ..., (3 * length) // 4 :] = False  # a quarter of the samples shorter than the bucket
    best = float("inf")
    for rep in range(repeats + 1):
        t0 = time.perf_counter()
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        out.sum().backward()
        if rep:
            best = min(best, time.perf_counter() - t0)
    return best


def kernel_table(lengths: list[int], repeats: int) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a trainer of the search runs, one core each
    rows = []
    try:
        for length in lengths:
            n = max(1, TOKENS // length)
            with_, without = (attention_seconds(n, length, p, repeats) for p in (0.1, 0.0))
            rows.append([length, n, f"{1e3 * with_:.1f}", f"{1e3 * without:.1f}", f"{with_ / without:.2f}"])
    finally:
        torch.set_num_threads(threads)
    print_table(
        f"SDPA forward + backward on CPU, one thread, best of {repeats}",
        ["tokens a sample", "samples", "dropout 0.1 ms", "dropout 0 ms", "ratio"],
        rows,
    )


def epoch_training_seconds(metrics: Path) -> float:
    """The training part of the run: from optimiser step 0 (bench.cpu_epoch.first_step; the first train line on
    a run too short for two) to the last evaluation's end, less every evaluation."""
    rows = read_metrics(metrics)
    evals = [r for r in rows if r["event"] == "eval"]
    trains = [r for r in rows if r["event"] == "train"]
    start = first_step(rows) if len(trains) > 1 else trains[0]["time"]
    return evals[-1]["time"] - start - sum(r["seconds"] for r in evals)


def trainer_table(args) -> None:
    arms = {"attention dropout 0.1 (the preset's)": [], "--attention-dropout 0": ["--attention-dropout", "0"]}
    got: dict[str, list[tuple]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory(prefix="attention_dropout_") as tmp:
        for rep in range(args.repeats):
            for k, (arm, flags) in enumerate(arms.items()):
                out = Path(tmp) / f"r{rep}-{k}"
                _, wall, peak = run_timed(trainer_cmd(args.shards, out, args.epochs, [*args.extra, *flags]))
                got[arm].append((wall, epoch_training_seconds(out / "metrics.jsonl"), peak))
    rows, base = [], None
    for arm, runs in got.items():
        wall, train, peak = (statistics.median(x) for x in zip(*runs))
        base = base or train
        rows.append([arm, f"{wall:.1f}", f"{train:.1f}", f"{train / base:.2f}", f"{peak:.0f}"])
    print_table(
        f"CPU trainer, {args.epochs} epoch(s), {args.repeats} runs each, alternating (medians)",
        ["arm", "whole run s", "training s", "training x", "peak RSS MB"],
        rows,
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.attention_dropout", description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="40,100,220", help="tokens a sample, comma-separated (kernel table)")
    ap.add_argument("--kernel-repeats", type=int, default=5)
    ap.add_argument("--shards", help="a shard set folder: also time the real trainer on it")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2, help="trainer runs of each arm, alternating")
    ap.add_argument("extra", nargs="*", help="more trainer flags, after --")
    args = ap.parse_args(argv)
    kernel_table([int(x) for x in args.lengths.split(",")], args.kernel_repeats)
    if args.shards:
        trainer_table(args)


if __name__ == "__main__":
    main()
