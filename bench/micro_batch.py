"""What a CPU micro-batch's token target costs and saves: the real trainer on each shard set at each
`--micro-tokens` target, one run after another, with its links per micro-batch, wall time, resident peak per
epoch and last validation scores, every ratio against the same set without a target (0: the effective batch
whole, the CPU default).

    python -m bench.micro_batch --shards SET[,SET...] [--targets 0,2048,4096] [--epochs 2] [-- TRAINER FLAGS]

The gradient is the same mean at any target (accumulated micro-batches); dropout draws and summation order
differ, so the validation scores move within a seed's noise, not to the digit. A set whose batches already fit
under a target is trained the same way at it, to the digit (the last column).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # `python bench/micro_batch.py` as well as `python -m bench.micro_batch`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cpu_allocator import run
from bench.workload import print_table
from common.manifest import read_manifest
from trainer.data.stream import view_stats


def tokens_per_link(shards: str) -> float:
    """The mean the trainer sizes its micro-batches by: its first training view's tokens over its links."""
    links, tokens = view_stats(read_manifest(shards), 0)
    return tokens / max(1, links)


def one(shards: str, target: int, out: Path, epochs: int, extra: list[str]) -> dict:
    """The trainer at `target` tokens a micro-batch: run()'s wall, peaks and evaluations, and its resolved split."""
    got = run(f"--micro-tokens {target}", shards, out, epochs, [*extra, "--micro-tokens", str(target)], env={})
    summary = json.loads((out / "summary.json").read_text())
    got["links"] = summary["config"]["data"]["max_samples"]
    got["accumulation"] = summary["accumulation"]
    return got


def rows_of(shards: str, targets: list[int], epochs: int, extra: list[str], tmp: Path) -> list[list]:
    results = {t: one(shards, t, tmp / f"{Path(shards).name}-{t}", epochs, extra) for t in targets}
    base = results[0]
    rows = []
    for t, r in results.items():
        last = r["evals"][-1]
        rows.append(
            [
                f"{Path(shards).name} ({tokens_per_link(shards):.0f} tok/link)",
                t,
                f"{r['links']} x {r['accumulation']}",
                f"{r['wall']:.1f}",
                f"{r['wall'] / base['wall']:.2f}",
                " / ".join(str(m) for m in r["peaks"]),
                f"{max(r['peaks']) / max(base['peaks']):.2f}",
                f"{100 * last['mrr']:.2f} / {100 * last['auc']:.2f}",
                "yes" if r["evals"] == base["evals"] else "no",
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.micro_batch", description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", required=True, help="comma-separated shard set folders (preprocess's output)")
    p.add_argument("--targets", default="0,2048,4096", help="comma-separated --micro-tokens targets (0: none)")
    p.add_argument("--epochs", type=int, default=2, help="epochs each run trains")
    p.add_argument("extra", nargs="*", help="more trainer flags, after --")
    args = p.parse_args(argv)
    try:
        targets = [int(t) for t in args.targets.split(",")]
    except ValueError:
        raise SystemExit(f"bench.micro_batch: --targets: {args.targets!r} is not comma-separated integers") from None
    targets = [0, *(t for t in targets if t != 0)]  # the reference every ratio and digit is read against
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shards in args.shards.split(","):
            rows += rows_of(shards, targets, args.epochs, args.extra, Path(tmp))
    header = [
        "shard set",
        "target",
        "links x micro-steps",
        "wall s",
        "wall / none",
        "peak MB per epoch",
        "peak / none",
        "last valid MRR / AUC",
        "same evaluations",
    ]
    title = f"the CPU trainer at micro-batch token targets, {args.epochs} epoch(s) each, one after another"
    print_table(title, header, rows)


if __name__ == "__main__":
    main()
