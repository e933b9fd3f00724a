"""The issue's synthetic degree sweep (issue 21 acceptance): latent-space graphs from sparse to dense, as a
user would hand them over, and optionally PENCIL's auto search against the best of CN/AA/RA on each.

    python -m bench.degree_sweep --out sweep/                          # write the graphs, print their table
    python -m bench.degree_sweep --out sweep/ --degrees 2.5,40 --nodes 5000 --seed 1
    python -m bench.degree_sweep --out sweep/ --run --budget-minutes 20  # then pipelines.run on each, in turn

Each graph is common.datasets.synthetic's latent-space model (3 clusters, beta 2, noise 0.5; alpha fitted so
the expected mean degree over all N nodes is the requested one; one seed, so the graphs share their latent
positions and differ only in density). It is written as `latent-d<degree>-n<N>-s<seed>.csv.gz` (src,dst;
rows shuffled, endpoints in random order) with every node renamed to a distinct random integer in
[2^40, 2^62), so the run goes through the id mapping a user's own ids take. Nodes without an edge (about
an eighth of them at degree 2.5) exist only through the node list written beside it
(`<name>.nodes.csv.gz`, column node), which --run passes as `--nodes`; the table gives the mean degree
over all nodes (2E/N, the requested one) and over the nodes that have an edge.

--run runs `python -m pipelines.run --dataset FILE --nodes NODES --preset auto --seeds S [--budget-minutes B]
--out RESULTS --shards SHARDS` for each graph one after another (nothing by default: it trains), then reads
RESULTS/<graph>/auto/results.json and prints, per PENCIL row there, its test MRR and AUC beside the best of
CN/AA/RA on the same protocol and the differences; the table also goes to OUT/summary.md.
"""
from __future__ import annotations

import argparse
import gzip
import io
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ID_LOW, ID_HIGH = 2**40, 2**62  # far outside 0..N-1: the mapping cannot take the dense or the table path
HEURISTICS = ("CN", "AA", "RA")


class SweepError(ValueError):
    """A bad bench.degree_sweep flag; the message names it and the fix."""


@dataclass
class Written:
    path: Path
    nodes_path: Path
    degree: float  # requested
    nodes: int
    with_edge: int
    edges: int

    @property
    def dataset(self) -> str:  # the loader's name for the file: its stem without .csv.gz
        return self.path.name[: -len(".csv.gz")]

    @property
    def mean_degree(self) -> float:
        return 2 * self.edges / self.nodes


def parse_degrees(text: str) -> list[float]:
    try:
        degrees = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        degrees = []
    if not degrees or any(not d > 0 for d in degrees) or len(set(degrees)) != len(degrees):
        raise SweepError(f"--degrees: expected distinct positive numbers separated by commas (e.g. 2.5,5,10), got {text!r}")
    return degrees


def large_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    """n distinct random integers in [ID_LOW, ID_HIGH), in random order."""
    ids = np.zeros(0, dtype=np.int64)
    while len(ids) < n:  # a collision among 2^62 values is all but impossible: one round in practice
        ids = np.unique(np.concatenate([ids, rng.integers(ID_LOW, ID_HIGH, size=n, dtype=np.int64)]))
    return rng.permutation(ids)[:n]


def graph_rows(num_nodes: int, degree: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(edge rows (E, 2) and node list (N,)) in the user's ids: shuffled rows, random endpoint order."""
    from common.datasets.synthetic import sample_latent_space

    _, _, edges, _ = sample_latent_space(num_nodes, degree, seed)
    rng = np.random.default_rng([seed, 21])  # the renaming and shuffles: apart from the graph's own draws
    ids = large_ids(rng, num_nodes)
    edges = edges[rng.permutation(len(edges))]
    flip = rng.random(len(edges)) < 0.5
    edges[flip] = edges[flip][:, ::-1]
    return ids[edges], ids


def _csv_gz(header: str, table: np.ndarray) -> bytes:
    text = io.StringIO()
    text.write(header + "\n")
    np.savetxt(text, table.reshape(len(table), -1), fmt="%d", delimiter=",")
    return gzip.compress(text.getvalue().encode(), mtime=0)  # mtime 0: the same graph is the same bytes


def write_graph(out: Path, num_nodes: int, degree: float, seed: int) -> Written:
    from common.storage import LocalStorage

    rows, ids = graph_rows(num_nodes, degree, seed)
    name = f"latent-d{degree:g}-n{num_nodes}-s{seed}"
    storage = LocalStorage(out)  # temp name + rename: a killed run leaves no half-written graph
    storage.write_atomic(f"{name}.nodes.csv.gz", _csv_gz("node", ids))
    storage.write_atomic(f"{name}.csv.gz", _csv_gz("src,dst", rows))
    return Written(out / f"{name}.csv.gz", out / f"{name}.nodes.csv.gz", degree, num_nodes,
                   int(np.unique(rows).size), len(rows))


def graphs_table(graphs: list[Written]) -> str:
    lines = ["| file | nodes | nodes with an edge | edges | mean degree requested | measured (2E/N) | "
             "over nodes with an edge |", "|---|---|---|---|---|---|---|"]
    for g in graphs:
        lines.append(f"| {g.path.name} | {g.nodes:,} | {g.with_edge:,} | {g.edges:,} | {g.degree:g} | "
                     f"{g.mean_degree:.2f} | {2 * g.edges / max(1, g.with_edge):.2f} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- --run
def run_command(g: Written, args) -> list[str]:
    cmd = [sys.executable, "-m", "pipelines.run", "--dataset", str(g.path), "--nodes", str(g.nodes_path),
           "--preset", "auto", "--seeds", args.seeds, "--out", args.results, "--shards", args.shards]
    if args.budget_minutes is not None:
        cmd += ["--budget-minutes", f"{args.budget_minutes:g}"]
    if args.num_cpus is not None:
        cmd += ["--num-cpus", str(args.num_cpus)]
    return cmd


def summary_rows(graph: str, degree: float, results: dict) -> list[dict]:
    """Every PENCIL row of a results.json table beside the best CN/AA/RA row of its protocol, per metric."""
    table = results.get("table", [])
    rows = []
    for r in table:
        if not r["model"].startswith("PENCIL"):
            continue
        row = {"graph": graph, "degree": degree, "protocol": r["protocol"], "model": r["model"]}
        heur = [h for h in table if h["protocol"] == r["protocol"] and h["model"] in HEURISTICS]
        for m in ("mrr", "auc"):
            scored = [h for h in heur if m in h]
            best = max(scored, key=lambda h: h[m][0]) if scored else None
            row[m] = r.get(m)
            row[f"best_{m}"] = (best["model"], best[m][0]) if best else None
            row[f"delta_{m}"] = r[m][0] - best[m][0] if best and m in r else None
        rows.append(row)
    return rows


def summary_table(rows: list[dict], failed: list[str]) -> str:
    def ms(v):
        return f"{v[0]:.2f} ± {v[1]:.2f}" if v else "–"

    def best(v):
        return f"{v[1]:.2f} ({v[0]})" if v else "–"

    def delta(v):
        return f"{v:+.2f}" if v is not None else "–"

    lines = ["| graph | mean degree | protocol | model | test MRR | best CN/AA/RA MRR | Δ MRR | test AUC | "
             "best CN/AA/RA AUC | Δ AUC |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['graph']} | {r['degree']:.2f} | {r['protocol']} | {r['model']} | {ms(r['mrr'])} | "
                     f"{best(r['best_mrr'])} | {delta(r['delta_mrr'])} | {ms(r['auc'])} | {best(r['best_auc'])} | "
                     f"{delta(r['delta_auc'])} |")
    lines += [f"| {g} | – | – | failed (see its log) | – | – | – | – | – | – |" for g in failed]
    return "\n".join(lines) + "\n"


def run_all(graphs: list[Written], args) -> int:
    from common.storage import LocalStorage
    from pipelines.run import results_dir

    rows, failed = [], []
    for g in graphs:
        cmd = run_command(g, args)
        print("$ " + " ".join(cmd[1:]), file=sys.stderr, flush=True)
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:  # its own progress and errors pass through
            failed.append(g.dataset)
            continue
        results = json.loads((results_dir(args.results, g.dataset, "auto") / "results.json").read_text())
        rows += summary_rows(g.dataset, g.mean_degree, results)
    table = summary_table(rows, failed)
    LocalStorage(Path(args.out)).write_atomic("summary.md", table.encode())
    print("\n" + table)
    return 1 if failed else 0


# ---------------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    from common.cli import add_debug_flag, one_line_errors

    p = argparse.ArgumentParser(prog="python -m bench.degree_sweep", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for the graphs (and summary.md with --run)")
    p.add_argument("--degrees", default="2.5,5,10,20,40", help="mean degrees, one graph each (default 2.5,5,10,20,40)")
    p.add_argument("--nodes", type=int, default=2000, help="nodes per graph (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the graphs and their ids (default 0)")
    p.add_argument("--run", action="store_true", help="then run pipelines.run --preset auto on each graph (trains)")
    p.add_argument("--seeds", default="0,1,2", help="--run: training seeds (default 0,1,2)")
    p.add_argument("--budget-minutes", type=float, default=None, help="--run: pipelines.run's budget per graph")
    p.add_argument("--num-cpus", type=int, default=None, help="--run: pipelines.run's --num-cpus")
    p.add_argument("--results", default="results", help="--run: pipelines.run --out (default results)")
    p.add_argument("--shards", default="shards", help="--run: pipelines.run --shards (default shards)")
    add_debug_flag(p)
    return one_line_errors(p)


def main(argv: list[str] | None = None) -> int:
    from common.cli import run_cli
    return run_cli(_main, argv, prog="python -m bench.degree_sweep")


def _main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        degrees = parse_degrees(args.degrees)
        if args.nodes < 3 or any(d >= args.nodes - 1 for d in degrees):
            raise SweepError(f"--nodes {args.nodes}: need at least 3 nodes and more than every degree + 1")
    except SweepError as err:
        parser.error(str(err))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    graphs = [write_graph(out, args.nodes, d, args.seed) for d in degrees]
    print(graphs_table(graphs))
    return run_all(graphs, args) if args.run else 0


if __name__ == "__main__":
    raise SystemExit(main())
