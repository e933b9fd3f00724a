"""The default against SEAL on a sparse infrastructure family (bench/graph_families.py `power`: mean degree 2.7,
long paths, few triangles), paired on the same test split: several members (generator seeds and sizes), each run
as the own-graph suite runs a graph (`pencil run --dataset G.csv --seeds 0,1,2`, then SEAL given the default's wall
time, its logits kept), then bench.peers' paired differences and SEs.

    python -m bench.sparse_infra --out runs/sparse                       # every member (about an hour on 2 cores)
    python -m bench.sparse_infra --out runs/sparse --members power-s0-2000 --table

A member is `<family>-s<seed>-<nodes>`; its edge list is written to OUT/graphs/<member>.csv, so the suite's
runner and bench.peers read it as a suite graph. A rerun skips what finished.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.graph_families import synthetic_edges
from bench.own_graph_suite import run_unless_done
from bench.peers import graph_rows, times
from common.atomic import write_text_atomic
from common.cli import Parser, run_cli, summary

MEMBERS = ("power-s0-2000", "power-s1-2500", "power-s2-3000")


def member(name: str) -> tuple[str, int, int]:
    """(family, generator seed, nodes) of `<family>-s<seed>-<nodes>`."""
    parts = name.rsplit("-", 2)
    if len(parts) != 3 or not parts[1][:1] == "s" or not parts[1][1:].isdigit() or not parts[2].isdigit():
        raise SystemExit(f"--members: {name} is not <family>-s<seed>-<nodes>, e.g. power-s0-2000")
    return parts[0], int(parts[1][1:]), int(parts[2])


def write_member(name: str, out: Path) -> Path:
    path = out / "graphs" / f"{name}.csv"
    if not path.exists():
        family, seed, nodes = member(name)
        e = synthetic_edges(family, seed, nodes)
        write_text_atomic(path, "src,dst\n" + "".join(f"{u},{v}\n" for u, v in e.tolist()))
    return path


def build_parser(prog: str = "python -m bench.sparse_infra") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--out", required=True, help="folder for the graphs, runs and one JSON per member and method")
    p.add_argument("--members", default=",".join(MEMBERS), help="comma-separated <family>-s<seed>-<nodes>")
    p.add_argument("--seeds", default="0,1,2", help="seeds of the default's runs (default 0,1,2)")
    p.add_argument("--table", action="store_true", help="only print the paired table of what has finished")
    return p


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.sparse_infra")


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out).resolve()
    names = [m for m in args.members.split(",") if m]
    for name in names:
        write_member(name, out)
    for name in names if not args.table else []:
        for method in ("auto", "seal"):  # SEAL second: it is given the default's wall time
            got = run_unless_done(name, method, out, args.seeds)
            if got and got["rc"]:
                raise SystemExit(f"{name} / {method} failed: see {out / name / f'{method}.log'}")
    rows = [r for g in names for r in graph_rows(out, g)]
    text = (
        "| graph | seeds | test positives | shared negatives | peer | default MRR | peer MRR | MRR difference ± SE | "
        "default AUC | peer AUC | AUC difference ± SE |\n|" + "---|" * 11 + "\n" + "\n".join(rows) + "\n\n"
        "| graph | default wall | SEAL to its 10th epoch | ratio | fixed preset, no search | ratio |\n"
        "|---|---|---|---|---|---|\n"
        + "\n".join(f"| {g} | {times(out / g)} |" for g in names if (out / g / "seal-result.json").exists())
        + "\n"
    )
    write_text_atomic(out / "paired.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
