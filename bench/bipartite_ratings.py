"""The own-graph suite's synthetic `bipartite` family (bench/graph_families.py) as a ratings file: a second user-item
graph beside movielens-100k, read by `pencil run` as users and items joined by one relation.

    python -m bench.bipartite_ratings --out /tmp/bipartite.csv [--seed 0]

Columns user,item,time with the suite's string ids (u<k> the users, i<k> the items, as bench.own_graph_suite writes
the family's edge list) and a seeded random time per pair, so the file's temporal split is a random 85/5/10 split:
unlike movielens, most test users have training pairs. With --arrivals, users arrive over time instead: a user's
pairs follow its seeded arrival, so the split's valid and test users are mostly new ones, as movielens' are
(`--arrivals 0.5`: half the users arrive, the others are there from the start).
"""

from __future__ import annotations

import numpy as np

from bench.graph_families import BIPARTITE_USERS, NODES, synthetic_edges
from common.atomic import write_text_atomic
from common.cli import Parser, run_cli, summary


def ratings_text(seed: int = 0, arrivals: float = 0.0) -> str:
    """The family's pairs (duplicates dropped, first kept) as user,item,time lines, times a seeded permutation;
    arrivals > 0: that share of the users arrives over time, uniformly, its pairs in a row after its arrival, and
    the other users' pairs are spread over the whole span."""
    users = int(NODES["bipartite"] * BIPARTITE_USERS)
    pairs = np.unique(synthetic_edges("bipartite", seed), axis=0)
    rng = np.random.default_rng(seed)
    times = rng.permutation(len(pairs))
    if arrivals:
        arrival = rng.permutation(users)[pairs[:, 0]].astype(np.float64)
        jitter = rng.random(len(pairs))
        if arrivals < 1:  # drawn only here, so a share of 1 writes what every earlier --arrivals file held
            settled = rng.random(users)[pairs[:, 0]] >= arrivals
            arrival = np.where(settled, rng.random(len(pairs)) * users, arrival)
        times = np.empty(len(pairs), dtype=np.int64)
        times[np.lexsort((jitter, arrival))] = np.arange(len(pairs))
    rows = "".join(f"u{u},i{i - users},{t}\n" for (u, i), t in zip(pairs.tolist(), times.tolist()))
    return "user,item,time\n" + rows


def build_parser(prog: str = "python -m bench.bipartite_ratings") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--out", required=True, help="the ratings file to write (CSV)")
    p.add_argument("--seed", type=int, default=0, help="the family's seed and the times' (default 0)")
    p.add_argument(
        "--arrivals",
        type=float,
        nargs="?",
        const=1.0,
        default=0.0,
        metavar="SHARE",
        help="users arrive over time (all, or SHARE of them): new users in valid and test",
    )
    return p


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    write_text_atomic(args.out, ratings_text(args.seed, args.arrivals))
    print(args.out)
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.bipartite_ratings")


if __name__ == "__main__":
    raise SystemExit(main())
