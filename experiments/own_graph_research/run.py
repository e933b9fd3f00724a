"""Train the study's variants on the study's graphs, validation only, every evaluation's scores kept.

    python -m experiments.own_graph_research.run --out runs/research --graphs all --variants base,dist --seeds 0
    python -m experiments.own_graph_research.run --out runs/research --seal --graphs grid,sbm   # SEAL, validation

A variant is the `general` preset as `--preset auto` trains it (its epochs from SearchConfig: enough for 1,500
optimiser steps, 12 to 60; at most 4,000 training positives a view) plus trainer / sampling options (VARIANTS).
Each run is `python -m trainer ... --eval-splits valid --save-epoch-scores`: test is never evaluated. A run lands
in OUT/<graph>/<variant>/s<seed>/ with result.json (wall seconds, per-epoch validation MRR and AUC); a rerun skips
what finished. Shard sets (one per sampling) are built first, one at a time (each starts an embedded Ray).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common.atomic import write_json_atomic
from common.manifest import epoch_tokens, read_manifest
from common.presets import get_preset
from experiments.own_graph_research.graphs import ALL, dataset_args
from pipelines.auto.config import SearchConfig

CPU_VIEW_POSITIVES = get_preset("general").cpu_view_positives
MATCHED = "matched"  # an epochs multiplier: the default's training tokens per link over the variant's
RULE = "rule"  # the epochs the search gives an alternative (SearchConfig.candidate_epochs, from both sets' tokens)
# a multiplier may also be (multiplier, min_steps): the schedule of SearchConfig(min_steps=...) instead of the default
# name -> (sampling (d, n[, h[, r]]), epochs multiplier of the default's schedule (at least 2 epochs), extra trainer
# flags); h: the fraction of training negatives drawn as 2-hop non-edges (preprocess --hard-neg-fraction), else 0;
# r: training negatives per positive (preprocess --neg-ratio), else 1; a fifth entry: preprocess --closest (0 = off)
VARIANTS = {
    "base": ((1, 20), 1, []),
    "dist": ((1, 20), 1, ["--distance-features", "3"]),
    "d2n5": ((2, 5), 1, []),
    "d2n5-dist": ((2, 5), 1, ["--distance-features", "4"]),
    "d2n10-dist": ((2, 10), 1, ["--distance-features", "4"]),  # SEAL's ball (2 hops of 10): what it costs
    # the same without dropout on the attention probabilities: on CPU its random draws triple the attention's cost
    "d2n10-dist-ad0": ((2, 10), 1, ["--distance-features", "4", "--attention-dropout", "0"]),
    # the same view for the default's compute: its epochs scaled by the default's training tokens per link over its
    # own, so a run of it costs about what the default's does (two hops of 10 are 4-7x the tokens on dense graphs)
    "d2n10-dist-cm": ((2, 10), MATCHED, ["--distance-features", "4"]),
    "d2n7-dist-cm": ((2, 7), MATCHED, ["--distance-features", "4"]),
    # the search's own rule (SearchConfig.candidate_epochs): the default's compute, or min_run_tokens if more
    "d2n10-dist-rule": ((2, 10), RULE, ["--distance-features", "4"]),
    # the schedule's floor halved (750 optimiser steps instead of 1,500): shorter runs on small graphs only
    "base-s750": ((1, 20), (1, 750), []),
    "d2n10-dist-cm-s750": ((2, 10), (MATCHED, 750), ["--distance-features", "4"]),
    "long": ((1, 20), 3, []),
    "long-dist": ((1, 20), 3, ["--distance-features", "3"]),
    # the same epochs in 4x fewer, 4x larger steps: a CPU step of 4x the tokens costs ~2.5x (bench.step_profile)
    "b256": ((1, 20), 1, ["--effective-batch", "256", "--lr", "1e-3"]),
    "b256-dist": ((1, 20), 1, ["--effective-batch", "256", "--lr", "1e-3", "--distance-features", "3"]),
    # shorter runs of the two-hop candidate: a third of the epochs, or the same epochs in 4x larger steps
    "d2n5-dist-e3": ((2, 5), 1 / 3, ["--distance-features", "4"]),
    # the two-hop candidate on twice its schedule: do the runs that end still improving want more epochs?
    "d2n5-dist-x2": ((2, 5), 2, ["--distance-features", "4"]),
    "d2n5-dist-b256": ((2, 5), 1, ["--distance-features", "4", "--effective-batch", "256", "--lr", "1e-3"]),
    "base-e3": ((1, 20), 1 / 3, []),
    # training negatives that share a neighbour with the link: do they teach the ranks that random pairs with a
    # common neighbour take from the positives (ppi: 15 % of its random negatives share one)?
    "hn25": ((1, 20, 0.25), 1, []),
    "hn50": ((1, 20, 0.5), 1, []),
    "d2n5-dist-hn25": ((2, 5, 0.25), 1, ["--distance-features", "4"]),
    # validation with a selection pool of 8 more random negatives per negative (preprocess --valid-pool 8): the
    # study replays choices on it (experiments/own_graph_research/pool.py)
    "base-pool8": ((1, 20), 1, []),
    # three uniform training negatives per positive instead of one, on the default's compute (half its epochs): a
    # balanced view makes "one common neighbour" a near-certain link, and BCE stops ordering the pairs it is sure
    # of; test's MRR ranks each positive against hundreds of random pairs, the rare ones with a neighbour among them
    "nr3-pool8": ((1, 20, 0, 3), MATCHED, []),
    # the product's own training: the default with 3 negatives a positive on its compute, and `deep` so on the
    # default's whole schedule (the search cuts it to the default's compute on dense graphs): is a dense graph's
    # gap to SEAL, which sees the same two hops of 10, the shorter schedule?
    "nr3": ((1, 20, 0, 3), MATCHED, []),
    "d2n10-dist-nr3": ((2, 10, 0, 3), 1 / 2, ["--distance-features", "4"]),
    # the product's `deep` on an eighth of the default's schedule (about its epochs in the search), with a CPU
    # micro-batch token target of 2,048 (4 accumulated micro-batches of 16 links on bio-300) and without one (the
    # effective batch of 64 whole, the CPU default): the same mean gradient in other dropout draws. Not adopted
    # (docs/benchmarks/2026-12-04-cpu-micro-batch.md): -1.25 valid MRR on average over 8 (graph, seed) pairs.
    "d2n10-dist-nr3-e8": ((2, 10, 0, 3), 1 / 8, ["--distance-features", "4"]),
    "d2n10-dist-nr3-e8-mt0": ((2, 10, 0, 3), 1 / 8, ["--distance-features", "4", "--micro-tokens", "0"]),
}
POOLS = {"base-pool8": 8, "nr3-pool8": 8}  # variant -> its shard set's --valid-pool


def train_positives(name: str, out: Path) -> int:
    from common.datasets import DatasetSpec, load_dataset

    a = dataset_args(name, out)
    return len(load_dataset(DatasetSpec(a[1], planetoid_dir=a[3] if len(a) > 2 else None)).splits["train"].pos)


def schedule(train: int, min_steps: int | None = None) -> tuple[float, int, int]:
    """(view percent, views, epochs) as --preset auto sets them on CPU (`min_steps`: SearchConfig's, or this)."""
    percent = 100.0 if train <= CPU_VIEW_POSITIVES else min(100.0, round(100.0 * CPU_VIEW_POSITIVES / train, 3))
    view = round(train * percent / 100)
    cfg = SearchConfig() if min_steps is None else SearchConfig(min_steps=min_steps)
    epochs = cfg.epochs(math.ceil(2 * view / get_preset("general").effective_batch))
    return percent, max(1, min(20, epochs)), epochs


PREPROCESS = threading.Lock()  # one embedded Ray at a time


def shard_set(name: str, sampling: tuple, out: Path, pool: int = 0) -> str:
    hard = f"-h{sampling[2]:g}" if len(sampling) > 2 and sampling[2] else ""
    hard += f"-r{sampling[3]}" if len(sampling) > 3 and sampling[3] != 1 else ""
    hard += f"-c{sampling[4]}" if len(sampling) > 4 and sampling[4] else ""
    pooled = f"-p{pool}" if pool else ""
    record = out / name / f"shards-d{sampling[0]}n{sampling[1]}{hard}{pooled}.json"
    with PREPROCESS:
        if not record.exists():
            build(name, sampling, out, record, pool)
    return json.loads(record.read_text())["shards"]


def build(name: str, sampling: tuple, out: Path, record: Path, pool: int = 0) -> None:
    percent, views, _ = schedule(train_positives(name, out))
    cmd = [
        sys.executable,
        "-m",
        "preprocess",
        *dataset_args(name, out),
        "--sampling",
        f"{sampling[0]},{sampling[1]}",
        "--views",
        str(views),
        "--percent",
        f"{percent:g}",
        "--protocol",
        "original",
        *(["--hard-neg-fraction", f"{sampling[2]:g}"] if len(sampling) > 2 and sampling[2] else []),
        *(["--neg-ratio", str(sampling[3])] if len(sampling) > 3 else []),
        *(["--closest", str(sampling[4])] if len(sampling) > 4 and sampling[4] else []),
        *(["--valid-pool", str(pool)] if pool else []),
        "--out",
        str(out / "shards"),
        "--num-cpus",
        "1",
        "-q",
    ]
    t0 = time.perf_counter()
    got = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if got.returncode:
        raise SystemExit(f"preprocess {name} {sampling}: {got.stderr.strip().splitlines()[-1]}")
    path = got.stdout.strip().splitlines()[-1].split()[-1]
    write_json_atomic(record, {"shards": path, "seconds": round(time.perf_counter() - t0, 1)})


def run_epochs(name: str, sampling: tuple, mult, out: Path, pool: int = 0) -> int:
    """A variant's epochs: the default's schedule times `mult`; for MATCHED, times the default's training tokens
    per link over the variant's (at least 2 epochs); for RULE, the search's; (mult, min_steps): the same on that
    schedule."""
    mult, min_steps = mult if isinstance(mult, tuple) else (mult, None)
    epochs = schedule(train_positives(name, out), min_steps)[2]
    if mult in (MATCHED, RULE):
        base = epoch_tokens(read_manifest(shard_set(name, VARIANTS["base"][0], out, pool)))
        own = epoch_tokens(read_manifest(shard_set(name, sampling, out, pool)))
        if mult == RULE:
            return SearchConfig().candidate_epochs(epochs, own, base)
        mult = base / own  # one view's tokens over the other's: the same links, so tokens per link
    return max(2, round(epochs * mult))


def curves(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [
        {"epoch": r["epoch"], "mrr": r["mrr"], "auc": r["auc"], "time": r["time"]}
        for r in rows
        if r.get("event") == "eval" and r.get("split") == "valid"
    ]


def train(name: str, variant: str, seed: int, out: Path) -> dict | None:
    run_dir = out / name / variant / f"s{seed}"
    done = run_dir / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    sampling, mult, flags = VARIANTS[variant]
    shards = shard_set(name, sampling, out, POOLS.get(variant, 0))
    epochs = run_epochs(name, sampling, mult, out, POOLS.get(variant, 0))
    cmd = [
        sys.executable,
        "-m",
        "trainer",
        "--shards",
        shards,
        "--preset",
        "general",
        "--out",
        str(run_dir),
        "--overwrite",
        "--seed",
        str(seed),
        "--device",
        "cpu",
        "--epochs",
        str(epochs),
        "--eval-splits",
        "valid",
        "--save-scores",
        "--save-epoch-scores",
        "--no-progress",
        *flags,
    ]
    run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(run_dir.parent / f"s{seed}.log", "w") as log:
        rc = subprocess.run(["nice", "-n", "5", *cmd], stdout=log, stderr=log, check=False).returncode
    wall = round(time.perf_counter() - t0, 1)
    if rc:
        print(f"   {name}/{variant}/s{seed}: exit {rc}, see {run_dir.parent / f's{seed}.log'}", flush=True)
        return None
    result = {
        "graph": name,
        "variant": variant,
        "seed": seed,
        "epochs": epochs,
        "wall_s": wall,
        "command": " ".join(cmd),
        "curve": curves(run_dir),
    }
    write_json_atomic(done, result)
    best = max(result["curve"], key=lambda r: r["mrr"])
    print(
        f"   {name}/{variant}/s{seed}: {wall:.0f} s, best valid MRR {best['mrr']:.4f} (epoch {best['epoch']})",
        flush=True,
    )
    return result


def seal(name: str, seconds: float, epochs: int | None, out: Path) -> None:
    """SEAL on validation for `seconds` (its per-epoch validation curve, with seconds, is kept: the study reads it
    at any wall time or epoch count)."""
    target = out / name / "seal" / "result.json"
    if target.exists():
        return
    cmd = [
        sys.executable,
        "-m",
        "bench.seal_baseline",
        *dataset_args(name, out),
        "--seconds",
        str(seconds),
        "--out",
        str(target),
        "--eval-splits",
        "valid",
        *(["--epochs", str(epochs)] if epochs else []),
    ]
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / "seal.log", "w") as log:
        rc = subprocess.run(["nice", "-n", "5", *cmd], stdout=log, stderr=log, check=False).returncode
    print(f"   {name}/seal: exit {rc}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.own_graph_research.run", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--graphs", default="all")
    p.add_argument("--variants", default="base,dist")
    p.add_argument("--seeds", default="0")
    p.add_argument("--parallel", type=int, default=2, help="trainer processes at once (default 2)")
    p.add_argument("--seal", action="store_true", help="SEAL on validation, one graph at a time")
    p.add_argument("--seal-seconds", type=float, default=900.0, help="SEAL: its training time (default 900)")
    p.add_argument("--seal-epochs", type=int, help="SEAL: stop after this many epochs")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    names = list(ALL) if args.graphs == "all" else args.graphs.split(",")
    if args.seal:
        for name in names:
            seal(name, args.seal_seconds, args.seal_epochs, out)
        return 0
    variants, seeds = args.variants.split(","), [int(s) for s in args.seeds.split(",")]
    jobs = [(name, v, s, out) for name in names for s in seeds for v in variants]
    print(f"{len(jobs)} runs", flush=True)
    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(lambda j: train(*j), jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
