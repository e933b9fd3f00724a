"""A signal-free copy of a ratings file: every row keeps its user, rating and time, and gets an item drawn
uniformly from the file's items. No scorer can rank a held-out pair above its negatives there, so PENCIL (with
or without its degree input) and popularity must land at chance (MRR about 5.1 among 101 items): the check that
a result on the real file is signal, not the protocol.

    python -m bench.user_item_control --data ../shared/data/movielens-100k/ratings.tsv.gz --out control.tsv

A permutation of the item column would not do: it keeps every item's count, and so popularity, a real signal.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.atomic import write_text_atomic
from common.cli import Parser, run_cli, summary
from common.datasets.tables import read_columns


def control_rows(path, seed: int) -> list[str]:
    """The file's rows (user, item, rating, time) as TSV lines, items redrawn uniformly (seeded)."""
    cols = read_columns(
        Path(path), ("user", "item", "time"), optional=("rating",), hint="user,item,time", rows="ratings"
    ).cols
    users, times = cols["user"].to_pylist(), cols["time"].to_pylist()
    ratings = cols["rating"].to_pylist() if "rating" in cols else [1] * len(users)
    items = np.unique(np.asarray(cols["item"].to_pylist()).astype(str))
    drawn = items[np.random.default_rng(seed).integers(0, len(items), len(users))]
    return [f"{u}\t{i}\t{r}\t{t}" for u, i, r, t in zip(users, drawn, ratings, times)]


def build_parser(prog: str = "python -m bench.user_item_control") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--data", required=True, help="ratings file with user, item, time columns (rating optional)")
    p.add_argument("--out", required=True, help="the control file to write (TSV)")
    p.add_argument("--seed", type=int, default=0, help="seed of the item draw (default 0)")
    return p


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    lines = control_rows(args.data, args.seed)
    write_text_atomic(args.out, "\n".join(["user\titem\trating\ttime", *lines]) + "\n")
    print(f"{args.out}: {len(lines)} ratings, items drawn uniformly (seed {args.seed})")
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.user_item_control")


if __name__ == "__main__":
    raise SystemExit(main())
