"""The peer input (trainer --peer-features) on user-item graphs with times and user attributes whose validation
users are mostly new: the search's `time` candidate (recent activity, cold heads) against the same with each token's
lift among the nodes that share the head's attributes, paired on one shard set and seed, validation only.

    python -m bench.attribute_ratings --out /tmp/attr/b1s0 --beta 1 --seed 0          # a graph of the family
    python -m bench.movielens_features --data ../shared/data/movielens-100k --out /tmp/ml
    python -m bench.peer_input --out /tmp/peer --shuffled \\
        --data /tmp/attr/b1s0/ratings.csv --tables user=/tmp/attr/b1s0/users.csv \\
        --data ../shared/data/movielens-100k/ratings.tsv.gz --tables user=/tmp/ml/users.csv,item=/tmp/ml/items.csv

Per graph (--data and --tables in pairs): bench.cold_heads' shard set built with the tables (--node-features), and
its runs side by side, one thread each, both with the tables and half their links cold: `time` (--time-features)
and `peers` (--time-features --peer-features). With --shuffled, a second row per graph does the same with every
table's rows permuted among its ids (seeded): attributes that say nothing, the signal-free control. The table gives
validation MRR at each run's best epoch over all pairs and the new and known users' pairs, and peers minus time per
positive with its standard error. Test is never evaluated: this chooses the search's rule.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from bench.cold_heads import TRAIN, paired_row
from common.atomic import write_text_atomic
from common.cli import Parser, run_cli, summary

ARMS = {"time": [*TRAIN, "--time-features", "--cold-heads", "0.5"]}
ARMS["peers"] = [*ARMS["time"], "--peer-features"]


def shuffled_tables(spec: str, out: Path, seed: int = 0) -> str:
    """The --node-features SPEC of copies of spec's tables (KIND=FILE,...) under `out`, each table's rows (all
    columns but the id) permuted among its ids."""
    rng, parts = np.random.default_rng(seed), []
    for part in spec.split(","):
        kind, path = part.split("=", 1)
        with open(path, newline="") as f:
            head, *rows = list(csv.reader(f))
        order = rng.permutation(len(rows))
        lines = [head] + [[row[0], *rows[j][1:]] for row, j in zip(rows, order)]
        target = out / f"{kind}-shuffled.csv"
        write_text_atomic(target, "".join(",".join(line) + "\n" for line in lines))
        parts.append(f"{kind}={target}")
    return ",".join(parts)


def build_parser(prog: str = "python -m bench.peer_input") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--data", action="append", required=True, help="a user-item file with times (repeat)")
    p.add_argument("--tables", action="append", required=True, help="its --node-features KIND=FILE,... (repeat)")
    p.add_argument("--out", required=True, help="a work folder (shard sets and runs)")
    p.add_argument("--epochs", type=int, default=2, help="each run's epochs (default 2)")
    p.add_argument("--shuffled", action="store_true", help="also each graph with its tables' rows shuffled")
    return p


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    if len(args.data) != len(args.tables):
        raise SystemExit(f"--tables: give one per --data ({len(args.data)} --data, {len(args.tables)} --tables)")
    print("| graph | valid pairs (new users) | MRR all / new / known, time | peers | peers - time | best epochs |")
    print("|---|---|---|---|---|---|")
    for i, (data, spec) in enumerate(zip(args.data, args.tables)):
        out = Path(args.out) / f"g{i}"
        label = f"{Path(data).parent.name}/{Path(data).name}"
        print(paired_row(data, out, ARMS, args.epochs, ("--node-features", spec), label), flush=True)
        if args.shuffled:
            (out / "shuffled").mkdir(parents=True, exist_ok=True)
            flags = ("--node-features", shuffled_tables(spec, out / "shuffled"))
            print(paired_row(data, out / "shuffled", ARMS, args.epochs, flags, label + " (shuffled)"), flush=True)
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.peer_input")


if __name__ == "__main__":
    raise SystemExit(main())
