"""A family of user-item rating files whose users carry attributes, for the peer input (trainer --peer-features):
users arrive over time and choose among items whose popularity rises and fades, each user's taste set by its
attributes with strength BETA (0: the attributes are noise, the family's signal-free control).

    python -m bench.attribute_ratings --out /tmp/attr0 --seed 0 --beta 1.0

Writes OUT/ratings.csv (user,item,time) and OUT/users.csv (node, segment one-hot (5), flag (0/1, a third of the
users), age (standardised)). A user's pairs follow its arrival: k of them (geometric, mean 25), each item drawn
without repeats with probability proportional to popularity_i(t) * exp(BETA * taste(u, i)), where
popularity_i(t) = base_i * exp(-(t - release_i) / life) after the item's release (0 before), base lognormal, and
taste(u, i) = segment_pref[s_u, i] + flag_pref[f_u, i] + age_u * age_slope_i, all standard normal draws.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.atomic import write_text_atomic
from common.cli import Parser, run_cli, summary

USERS, ITEMS, SEGMENTS = 800, 300, 5
LIFE = 0.3  # an item's popularity fades by e every 0.3 of the history


def generate(seed: int, beta: float) -> tuple[str, str]:
    """(ratings.csv text, users.csv text) of one graph of the family."""
    rng = np.random.default_rng(seed)
    seg, flag, age = rng.integers(0, SEGMENTS, USERS), (rng.random(USERS) < 1 / 3).astype(int), rng.normal(size=USERS)
    base, release = np.exp(rng.normal(size=ITEMS)), rng.random(ITEMS) * 1.2 - 0.2
    seg_pref, flag_pref, slope = rng.normal(size=(SEGMENTS, ITEMS)), rng.normal(size=(2, ITEMS)), rng.normal(size=ITEMS)
    arrival = np.sort(rng.random(USERS))
    rows = []
    for u in range(USERS):
        t = arrival[u]
        pop = np.where(release <= t, base * np.exp(-(t - release).clip(min=0) / LIFE), 0.0)
        w = pop * np.exp(beta * (seg_pref[seg[u]] + flag_pref[flag[u]] + age[u] * slope))
        k = min(int(rng.geometric(1 / 25)), int((w > 0).sum()))
        items = rng.choice(ITEMS, size=k, replace=False, p=w / w.sum())
        times = t + np.sort(rng.random(k)) * 0.01  # a burst after arrival
        rows += [f"u{u},i{i},{int(tt * 1e7)}\n" for i, tt in zip(items, times)]
    age_z = (age - age.mean()) / age.std()
    users = [
        f"u{u}," + ",".join(str(int(seg[u] == s)) for s in range(SEGMENTS)) + f",{flag[u]},{age_z[u]:.4f}\n"
        for u in range(USERS)
    ]
    head = "node," + ",".join(f"segment_{s}" for s in range(SEGMENTS)) + ",flag,age\n"
    return "user,item,time\n" + "".join(rows), head + "".join(users)


def build_parser(prog: str = "python -m bench.attribute_ratings") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--out", required=True, help="a folder: ratings.csv and users.csv are written there")
    p.add_argument("--seed", type=int, default=0, help="the graph's seed (default 0)")
    p.add_argument("--beta", type=float, default=1.0, help="the attributes' weight in taste; 0: noise (default 1)")
    return p


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    ratings, users = generate(args.seed, args.beta)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(args.out) / "ratings.csv", ratings)
    write_text_atomic(Path(args.out) / "users.csv", users)
    print(f"wrote {args.out}/ratings.csv ({ratings.count(chr(10)) - 1:,} pairs) and {args.out}/users.csv")
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.attribute_ratings")


if __name__ == "__main__":
    raise SystemExit(main())
