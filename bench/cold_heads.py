"""Cold-head training views (trainer --cold-heads) on user-item graphs whose validation users are mostly new: the
degree model trained with and without them, paired on one shard set and seed, validation only.

    python -m bench.cold_heads --out /tmp/cold --data ../shared/data/movielens-100k/ratings.tsv.gz \
        --data /tmp/arr0.csv --data /tmp/arr1.csv        # bench.bipartite_ratings --arrivals --seed K

Per graph: one shard set (sampling (1, 10), two views of half the training pairs each: the degree report's
setting), then the degree model (--degree-features 40 --degree-steps 4, the search's `degree` candidate's input)
twice side by side, one thread each: --cold-heads 0 and SHARE. The table gives validation MRR at each run's best
epoch, over all pairs and over the pairs whose user has no training pair (new) or some (known), and the paired
difference per positive with its standard error. Test is never evaluated: this chooses the search's rule.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from common.cli import Parser, run_cli, summary
from common.datasets import load_dataset
from common.datasets.spec import DatasetSpec
from common.manifest import read_manifest
from common.metrics import rank_against_own
from pipelines.auto.signal import eval_signal

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ["--preset", "citeseer-ablate-small", "--protocol", "kg", "--device", "cpu", "--effective-batch", "128"]
TRAIN += ["--lr-schedule", "cosine", "--eval-splits", "valid"]
DEGREE = ["--degree-features", "40", "--degree-steps", "4"]  # the search's `degree` candidate's input


def shard_set(data: str, out: Path, extra: tuple[str, ...] = ()) -> Path:
    """The set of `data` in the benches' setting; `extra`: more preprocess flags (--node-features SPEC)."""
    cmd = [sys.executable, "-m", "preprocess", "--dataset", data, "--sampling", "1,10", "--views", "2", *extra]
    proc = subprocess.run([*cmd, "--percent", "50", "--out", str(out), "-q"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"preprocess {data}: {proc.stderr.strip().splitlines()[-1]}")
    return Path(proc.stdout.strip().splitlines()[-1].split()[-1])


def train_pair(shards: Path, out: Path, share: float, epochs: int) -> dict[float, Path]:
    """Both runs side by side, one thread each; {share: run folder}."""
    arms = {s: [*TRAIN, *DEGREE, "--cold-heads", str(s)] for s in (0.0, share)}
    return train_arms(shards, out, arms, epochs)


def train_arms(shards: Path, out: Path, arms: dict, epochs: int) -> dict:
    """One run per arm ({key: trainer flags}) side by side, one thread each, scores saved; {key: run folder}."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs, procs = {}, []
    for key, flags in arms.items():
        runs[key] = out / f"cold{key:g}" if isinstance(key, float) else out / str(key)
        runs[key].mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "trainer", *flags, "--shards", str(shards), "--out", str(runs[key])]
        cmd += ["--epochs", str(epochs), "--save-scores"]
        with open(runs[key] / "log.txt", "w") as log:  # a file, not a pipe: a full pipe would stall the trainer
            procs.append((subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), runs[key]))
    for p, run in procs:
        if p.wait():
            raise SystemExit(f"trainer on {shards}: {(run / 'log.txt').read_text().strip().splitlines()[-1]}")
    return runs


def reciprocal_ranks(run: Path, manifest) -> np.ndarray:
    z = np.load(run / "scores" / "valid-kg.npz")
    sig = eval_signal(manifest, "valid", "kg", z["cid"], z["score"])
    return 1.0 / rank_against_own(sig.pos.astype(np.float64), sig.neg.astype(np.float64))


def graph_rows(data: str, out: Path, share: float, epochs: int) -> list[str]:
    arms = {s: [*TRAIN, *DEGREE, "--cold-heads", str(s)] for s in (0.0, share)}
    return [paired_row(data, out, arms, epochs)]


def paired_row(data: str, out: Path, arms: dict, epochs: int, preprocess: tuple[str, ...] = (), label: str = "") -> str:
    """One table row (named `label`, else the file's name): two arms ({key: trainer flags}) trained side by side
    on one shard set of `data` (`preprocess`: its extra flags), their validation MRR over all / new / known users
    at each one's best epoch, and the second minus the first."""
    ds = load_dataset(DatasetSpec(data))
    pos = ds.splits["valid"].pos
    new = np.bincount(ds.splits["train"].pos[:, 0], minlength=ds.num_nodes)[pos[:, 0]] == 0
    shards = shard_set(data, out / "shards", preprocess)
    manifest = read_manifest(shards)
    runs = train_arms(shards, out / "runs", arms, epochs)
    off, on = (reciprocal_ranks(runs[k], manifest) for k in arms)
    best = [json.loads((runs[k] / "summary.json").read_text())["best_epoch"] for k in arms]
    d = on - off
    cells = []
    for r in (off, on):
        cells.append(" / ".join(f"{100 * x.mean():.2f}" if len(x) else "-" for x in (r, r[new], r[~new])))
    diff = " / ".join(
        f"{100 * x.mean():+.2f} ± {100 * x.std() / np.sqrt(len(x)):.2f}" if len(x) > 1 else "-"
        for x in (d, d[new], d[~new])
    )
    pairs = f"{len(pos):,} ({100 * new.mean():.0f} %)"
    return f"| {label or Path(data).name} | {pairs} | {cells[0]} | {cells[1]} | {diff} | {best[0]}, {best[1]} |"


def build_parser(prog: str = "python -m bench.cold_heads") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--data", action="append", required=True, help="a user-item file (repeat for several)")
    p.add_argument("--out", required=True, help="a work folder (shard sets and runs)")
    p.add_argument("--share", type=float, default=0.5, help="the cold share of the second run (default 0.5)")
    p.add_argument("--epochs", type=int, default=2, help="each run's epochs (default 2)")
    return p


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    head = f"MRR all / new / known, off | on ({args.share:g}) | on - off"
    print(f"| graph | valid pairs (new users) | {head} | best epochs |")
    print("|---|---|---|---|---|---|")
    for i, data in enumerate(args.data):
        for row in graph_rows(data, Path(args.out) / f"g{i}", args.share, args.epochs):
            print(row, flush=True)
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.cold_heads")


if __name__ == "__main__":
    raise SystemExit(main())
