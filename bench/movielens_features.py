"""movielens-100k's user and item attributes as `--node-features` tables, one per node kind.

    python -m bench.movielens_features --data ../shared/data/movielens-100k --out /tmp/ml
    pencil run --dataset ../shared/data/movielens-100k/ratings.tsv.gz \
        --node-features user=/tmp/ml/users.csv,item=/tmp/ml/items.csv

What a user would do with such files: numbers as numbers (standardised), categories one-hot.
- users.csv: node, age (standardised), female (0/1), one column per occupation (21);
- items.csv: node, one column per genre (19, the file's flags), release year (standardised; 0 where unknown).
No column looks at the ratings: nothing here is fit on any split.
"""

from __future__ import annotations

import argparse
import csv
import gzip
from pathlib import Path

import numpy as np


def _rows(path: Path) -> list[list[str]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n").split("|") for line in f if line.strip()]


def _standardised(values: np.ndarray) -> np.ndarray:
    return (values - values.mean()) / (values.std() or 1.0)


def user_table(rows: list[list[str]]) -> tuple[list[str], list[list]]:
    """(header, rows) of users.csv from users.psv's id|age|gender|occupation|zip rows."""
    jobs = sorted({r[3] for r in rows})
    age = _standardised(np.array([float(r[1]) for r in rows]))
    header = ["node", "age", "female", *(f"job_{j}" for j in jobs)]
    out = [[r[0], f"{a:.4f}", int(r[2] == "F"), *(int(r[3] == j) for j in jobs)] for r, a in zip(rows, age)]
    return header, out


def item_table(rows: list[list[str]], genres: list[str]) -> tuple[list[str], list[list]]:
    """(header, rows) of items.csv from items.psv's id|title|release date|video date|URL|19 genre flags rows."""
    years = np.array([float(r[2][-4:]) if r[2][-4:].isdigit() else np.nan for r in rows])
    known = ~np.isnan(years)
    year = np.zeros(len(rows))
    year[known] = _standardised(years[known])
    header = ["node", *(f"genre_{g}" for g in genres), "year"]
    out = [[r[0], *(int(v) for v in r[5 : 5 + len(genres)]), f"{y:.4f}"] for r, y in zip(rows, year)]
    return header, out


def _write(path: Path, header: list[str], rows: list[list]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.movielens_features", description=__doc__.split("\n")[0])
    p.add_argument("--data", default="../shared/data/movielens-100k", help="the movielens-100k folder")
    p.add_argument("--out", required=True, help="folder for users.csv and items.csv")
    a = p.parse_args(argv)
    data, out = Path(a.data), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    genres = [line.split("|")[0] for line in (data / "genres.psv").read_text().splitlines() if line.strip()]
    _write(out / "users.csv", *user_table(_rows(data / "users.psv.gz")))
    _write(out / "items.csv", *item_table(_rows(data / "items.psv.gz"), genres))
    print(f"wrote {out / 'users.csv'} and {out / 'items.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
