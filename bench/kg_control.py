"""A signal-free copy of a knowledge graph: every triple of train, valid and test keeps its head and relation and
gets a tail drawn uniformly from the graph's entities. No scorer can rank a held-out triple above its corruptions
there, so PENCIL, with or without its distance and degree inputs, must land at chance (MRR about 0.05 among 101
candidates): the check that a result on the real graph is signal, not the protocol.

    python -m bench.kg_control --data ../shared/data/kg/wn18rr --out control/

A permutation of the tail column would not do: it keeps every entity's in-degree, a real signal.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from common.atomic import atomic_file
from common.cli import Parser, run_cli, summary
from common.datasets.base import DatasetError
from common.datasets.kg import kg_files, read_triples


def read_folder(folder: Path) -> dict[str, np.ndarray]:
    """{split: (T, 3) text [head, relation, tail]} of a knowledge-graph folder, read as `pencil run` reads it."""
    files = kg_files(folder)
    if files is None:
        raise DatasetError(f"{folder}: no train.txt[.gz]; give a knowledge-graph folder (train, valid, test)")
    return {split: read_triples(path) for split, path in files.items()}


def control_triples(triples: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """The same heads and relations, tails redrawn uniformly over every entity of the three splits (seeded, in
    split order)."""
    entities = np.unique(np.concatenate([t[:, [0, 2]].ravel() for t in triples.values()]).astype(str))
    rng = np.random.default_rng(seed)
    out = {}
    for split, rows in triples.items():
        drawn = rows.copy()
        drawn[:, 2] = entities[rng.integers(0, len(entities), len(rows))]
        out[split] = drawn
    return out


def build_parser(prog: str = "python -m bench.kg_control") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument(
        "--data", required=True, help="a knowledge-graph folder (train, valid, test: head<TAB>relation<TAB>tail)"
    )
    p.add_argument("--out", required=True, help="the folder to write the control's train/valid/test.txt.gz into")
    p.add_argument("--seed", type=int, default=0, help="seed of the tail draw (default 0)")
    return p


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    drawn = control_triples(read_folder(Path(args.data)), args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for split, rows in drawn.items():
        text = "".join(f"{h}\t{r}\t{t}\n" for h, r, t in rows)
        with atomic_file(out / f"{split}.txt.gz", "wb") as f:
            f.write(gzip.compress(text.encode(), mtime=0))
    counts = ", ".join(f"{len(v)} {k}" for k, v in drawn.items())
    print(f"{out}: {counts} triples, tails drawn uniformly (seed {args.seed})")
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.kg_control")


if __name__ == "__main__":
    raise SystemExit(main())
