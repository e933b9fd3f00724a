"""The time input (trainer --time-features) on user-item graphs with a time column whose validation users are mostly
new: the search's `degree` candidate (training degrees, cold heads) against the same with each node's recent
activity in place of its training degree, paired on one shard set and seed, validation only.

    python -m bench.time_input --out /tmp/time --data ../shared/data/movielens-100k/ratings.tsv.gz \\
        --data /tmp/arr0.csv --data /tmp/arr1.csv        # bench.bipartite_ratings --arrivals --seed K

Per graph: bench.cold_heads' shard set and runs (sampling (1, 10), two views of half the training pairs, one thread
a run, side by side), both with half their links cold (--cold-heads 0.5): `degree` (--degree-features 40
--degree-steps 4) and `time` (--time-features). The table gives validation MRR at each run's best epoch, over all
pairs and over the pairs whose user has no training pair (new) or some (known), and time minus degree per positive
with its standard error. Test is never evaluated: this chooses the search's rule.
"""

from __future__ import annotations

from pathlib import Path

from bench.cold_heads import DEGREE, TRAIN, paired_row
from common.cli import Parser, run_cli, summary

COLD = ["--cold-heads", "0.5"]
ARMS = {"degree": [*TRAIN, *DEGREE, *COLD], "time": [*TRAIN, "--time-features", *COLD]}


def build_parser(prog: str = "python -m bench.time_input") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--data", action="append", required=True, help="a user-item file with times (repeat for several)")
    p.add_argument("--out", required=True, help="a work folder (shard sets and runs)")
    p.add_argument("--epochs", type=int, default=2, help="each run's epochs (default 2)")
    return p


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    print("| graph | valid pairs (new users) | MRR all / new / known, degree | time | time - degree | best epochs |")
    print("|---|---|---|---|---|---|")
    for i, data in enumerate(args.data):
        print(paired_row(data, Path(args.out) / f"g{i}", ARMS, args.epochs), flush=True)
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.time_input")


if __name__ == "__main__":
    raise SystemExit(main())
