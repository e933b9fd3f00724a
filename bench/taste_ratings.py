"""A family of user-item files whose users choose by a hidden taste: what collaborative filtering reads, and what the
l3 prior of a typed blend counts (the users who chose what a user chose choosing the item).

    python -m bench.taste_ratings --out /tmp/taste/b1s0.csv --beta 1 --seed 0

Each user and item has one of GROUPS tastes, unseen; item popularity is heavy-tailed. A user rates RATED distinct
items, each drawn with probability proportional to popularity x exp(beta x LIFT) where the item shares the user's
taste (popularity alone elsewhere). Times are a seeded permutation, so the file's temporal split is a random one
and almost every validation user has training pairs. beta = 0 makes tastes say nothing: the family's control.
Columns user,item,time, ids u<k> and i<k>.
"""

from __future__ import annotations

import numpy as np

from common.atomic import write_text_atomic
from common.cli import Parser, run_cli, summary

USERS, ITEMS, GROUPS, RATED = 1500, 500, 8, 8
LIFT = 2.0  # log of how much more a user picks an item of its taste at beta 1


def draw(seed: int, beta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pairs (USERS x RATED, 2) [user, item], each user's taste, each item's taste)."""
    rng = np.random.default_rng(seed)
    user_taste, item_taste = rng.integers(0, GROUPS, USERS), rng.integers(0, GROUPS, ITEMS)
    popularity = rng.pareto(1.5, ITEMS) + 1.0
    rows = []
    for u in range(USERS):
        w = popularity * np.exp(beta * LIFT * (item_taste == user_taste[u]))
        rows.append(np.stack([np.full(RATED, u), rng.choice(ITEMS, RATED, replace=False, p=w / w.sum())], 1))
    return np.concatenate(rows), user_taste, item_taste


def generate(seed: int, beta: float) -> str:
    """The file's text: a header and USERS x RATED lines user,item,time, times a seeded permutation."""
    pairs = draw(seed, beta)[0]
    times = np.random.default_rng([seed, 1]).permutation(len(pairs))
    lines = [f"u{u},i{i},{t}\n" for (u, i), t in zip(pairs.tolist(), times.tolist())]
    return "user,item,time\n" + "".join(lines)


def build_parser(prog: str = "python -m bench.taste_ratings") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--out", required=True, help="the ratings file to write")
    p.add_argument("--beta", type=float, default=1.0, help="how strongly taste steers choice (0: the control)")
    p.add_argument("--seed", type=int, default=0, help="the graph's seed")
    return p


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    write_text_atomic(args.out, generate(args.seed, args.beta))
    print(args.out)
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
