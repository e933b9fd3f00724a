"""The own-graph yardstick: `pencil run` with no preset (the search) on a suite of graphs, 3 seeds, beside the
fixed `general` preset, CN / AA / RA and SEAL given the same wall time, with wall time and peak memory.

    python -m bench.own_graph_suite --out suite                      # every graph, every method (hours)
    python -m bench.own_graph_suite --out suite --graphs er,grid     # some graphs
    python -m bench.own_graph_suite --out suite --table              # the table of what has finished
    python -m bench.own_graph_suite --out suite --graphs grid --burners 2   # the default beside 2 busy cores

The graphs: the development edge lists in ../shared/data/graphs, cora and citeseer, and seeded synthetic
families spanning the shapes users bring (written as edge lists under OUT/graphs): preferential attachment,
random regular, Erdős–Rényi, a grid-like infrastructure network (mean degree below 3, long paths),
latent-space graphs at mean degree 2.5, 10 and 40, a stochastic block model, and a bipartite user-item graph
with string ids; and families shaped like the small real networks subgraph link predictors are benchmarked on
(a hub-dominated transport network, co-authorship cliques, a router map, dense biological networks, a blog
network; bench/graph_families.py). And graphs that carry more than edges: cora as an edge list (the paper path's
split) with its Planetoid features as a feature file (PENCIL beside PENCIL w/o features; SEAL reads the
structure only), and collegemsg's timestamped messages on their temporal split, the default, and on a random
split beside it.
Each (graph, method) lands in OUT/<graph>/<method>.json; a rerun skips what finished.
Every method runs as its own process, so its peak memory is the peak PSS of its process tree (shared pages once).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.graph_families import BIPARTITE_USERS, NODES, synthetic_edges
from common.atomic import write_json_atomic, write_text_atomic
from common.cli import Parser, run_cli, summary
from pipelines.core.memory_gate import tree_bytes

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PENCIL_SHARED", REPO.parent / "shared"))
DEV = ("citeseer", "cora", "facebook", "ppi", "wikipedia", "arxiv-astroph", "blogcatalog")
SYNTHETIC = ("pa", "regular", "er", "grid", "latent-2.5", "latent-10", "latent-40", "sbm", "bipartite")
# shaped like the small real networks subgraph link predictors are benchmarked on (bench/graph_families.py)
BENCHMARK_SHAPED = ("airports", "coauthor", "router", "bio-300", "bio-1800", "blogs")
INPUTS = ("cora-features", "collegemsg", "collegemsg-random")
GRAPHS = DEV + SYNTHETIC + BENCHMARK_SHAPED + INPUTS
METHODS = ("auto", "general", "seal")


def write_cora_edge_list(planetoid: Path, folder: Path) -> tuple[Path, Path]:
    """cora as a user brings it: an edge list whose split column is the paper path's split (`--dataset cora`), and
    its Planetoid features as a feature table (node, w0 .. w1432: binary bag-of-words). Returns both paths."""
    from common.datasets import DatasetSpec, load_dataset

    paper = load_dataset(DatasetSpec("cora", planetoid_dir=str(planetoid), features=True))
    edges, features = folder / "cora-edges.csv", folder / "cora-features.csv"
    rows = "".join(f"{u},{v},{s}\n" for s in ("train", "valid", "test") for u, v in paper.splits[s].pos.tolist())
    write_text_atomic(edges, "src,dst,split\n" + rows)
    header = "node," + ",".join(f"w{j}" for j in range(paper.x.shape[1]))
    table = np.column_stack([np.arange(len(paper.x)), paper.x]).astype(np.int64)
    write_text_atomic(features, header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in table.tolist()))
    return edges, features


def graph_args(name: str, out: Path) -> list[str]:
    """The `--dataset ...` flags of a suite graph (a synthetic one, or cora's edge list, is written first)."""
    if name == "cora-features":
        edges, features = out / "graphs" / "cora-edges.csv", out / "graphs" / "cora-features.csv"
        if not (edges.exists() and features.exists()):
            write_cora_edge_list(SHARED / "data" / "planetoid", out / "graphs")
        return ["--dataset", str(edges), "--node-features", str(features)]
    if name.startswith("collegemsg"):  # its time column: a temporal split by default
        random = ["--split", "random"] if name.endswith("-random") else []
        return ["--dataset", str(SHARED / "data" / "graphs" / "collegemsg.csv.gz"), *random]
    if name == "citeseer":
        return ["--dataset", "citeseer"]
    if name == "cora":
        return ["--dataset", "cora", "--planetoid-dir", str(SHARED / "data" / "planetoid")]
    if name in DEV:
        return ["--dataset", str(SHARED / "data" / "graphs" / f"{name}.csv.gz")]
    path = out / "graphs" / f"{name}.csv"
    if not path.exists():
        users = int(NODES["bipartite"] * BIPARTITE_USERS)  # bipartite: string ids, users u*, items i*
        label = (lambda x: f"u{x}" if x < users else f"i{x - users}") if name == "bipartite" else str
        e = synthetic_edges(name)
        write_text_atomic(path, "src,dst\n" + "".join(f"{label(u)},{label(v)}\n" for u, v in e.tolist()))
    return ["--dataset", str(path)]


# ---------------------------------------------------------------------------- running one method
def measured(cmd: list[str], log: Path) -> dict:
    """Run `cmd`; its wall seconds, exit status and the peak memory of its process tree, polled: its PSS, shared
    pages (torch's libraries, forked loader workers) counted once (the trainer pool's own measure)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    t0, peak = time.perf_counter(), 0
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=f, stderr=f)
        while proc.poll() is None:
            peak = max(peak, tree_bytes(proc.pid))
            time.sleep(1.0)
    return {"rc": proc.returncode, "wall_s": round(time.perf_counter() - t0, 1), "peak_pss_mb": round(peak / 2**20)}


def table_rows(results_json: Path) -> dict:
    rows = json.loads(results_json.read_text())["table"]
    return {r["model"]: {m: r[m] for m in ("mrr", "auc") if m in r} for r in rows}


def structure_only(args: list[str]) -> list[str]:
    """A suite graph's flags without its feature file: SEAL reads the structure only."""
    at = args.index("--node-features") if "--node-features" in args else None
    return args if at is None else args[:at] + args[at + 2 :]


def run_unless_done(name: str, method: str, out: Path, seeds: str) -> dict | None:
    """run_method, unless OUT/<graph>/<method>.json says it finished; that file is written only on success.
    Returns the run's record, None when it had finished."""
    done = out / name / f"{method}.json"
    if done.exists():
        return None
    print(f"== {name} / {method}", flush=True)
    got = run_method(name, method, out, seeds)
    print(f"   {got['wall_s']:.0f} s, peak {got['peak_pss_mb']} MB, rc {got['rc']}", flush=True)
    if got["rc"] == 0:
        write_json_atomic(done, got)
    return got


def run_method(name: str, method: str, out: Path, seeds: str) -> dict:
    gdir = out / name
    data = graph_args(name, out)
    if method in ("auto", "general"):
        # collegemsg-random shares its dataset (so its results folder) with collegemsg: its runs live apart
        res = out / "runs" / (f"{method}-{name}" if name.endswith("-random") else method)
        cmd = [
            sys.executable,
            "-m",
            "pipelines",
            "run",
            *data,
            "--seeds",
            seeds,
            "--out",
            str(res),
            "--shards",
            str(out / "shards"),
            "--device",
            "cpu",
            *(["--preset", "general"] if method == "general" else ["--preset", "auto"]),
        ]
        got = measured(cmd, gdir / f"{method}.log")
        if got["rc"] == 0:
            found = sorted((res).glob(f"*/{method}/results.json"), key=lambda p: p.stat().st_mtime)
            got["rows"] = table_rows(found[-1])
            if method == "auto":
                got["search"] = json.loads((found[-1].parent / "original" / "search.json").read_text())
                got["search"].pop("stats", None)
    else:
        auto = json.loads((gdir / "auto.json").read_text())
        target = gdir / "seal-result.json"
        got = measured(
            [
                sys.executable,
                "-m",
                "bench.seal_baseline",
                *structure_only(data),
                "--seconds",
                str(auto["wall_s"]),
                "--out",
                str(target),
                "--scores",  # its logits, for the paired comparison with the default on the same test negatives
                str(gdir / "seal-scores"),
            ],
            gdir / "seal.log",
        )
        if got["rc"] == 0:
            r = json.loads(target.read_text())
            got["rows"] = {"SEAL": {m: [100 * r["test"][m], 0.0] for m in ("mrr", "auc")}}
            got["epochs"] = r["epochs"]
    return got


def again(name: str, out: Path, seeds: str, burners: int) -> dict:
    """The default once more from scratch (its own shard cache), alone or beside `burners` processes that each
    keep a core busy: OUT/<graph>/auto-timing.json or auto-loaded<N>.json, with its choice beside the suite run's
    and what the budget cut (search.json's cut_short, skipped, failed and final seeds)."""
    tag = f"loaded{burners}" if burners else "timing"
    res = out / tag / name
    cmd = [sys.executable, "-m", "pipelines", "run", *graph_args(name, out), "--seeds", seeds, "--out", str(res)]
    cmd += ["--shards", str(out / f"{tag}-shards"), "--device", "cpu", "--preset", "auto"]
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)]
    try:
        got = measured(cmd, out / name / f"auto-{tag}.log")
    finally:
        for proc in spin:
            proc.kill()
            proc.wait()
    got["burners"] = burners
    found = sorted(res.glob("*/auto/original/search.json"))
    if found:
        rec = json.loads(found[-1].read_text())
        chosen = rec.get("chosen", {})
        got["choice"] = {k: chosen.get(k) for k in ("cid", "epochs", "best_epoch")}
        got["cut"] = {
            "cut_short": chosen.get("cut_short", []),
            "skipped": chosen.get("skipped", {}),
            "failed": chosen.get("failed", {}),
            "final_seeds": rec.get("final_seeds"),
            "budget_cut": rec.get("budget_cut"),
        }
    alone = out / name / "auto.json"
    if alone.exists():
        chosen = json.loads(alone.read_text())["search"]["chosen"]
        got["suite_choice"] = {k: chosen.get(k) for k in ("cid", "epochs", "best_epoch")}
    write_json_atomic(out / name / f"auto-{tag}.json", got)
    print(f"== {name} ({tag}): {got['wall_s']:.0f} s, peak {got['peak_pss_mb']} MB, rc {got['rc']}", flush=True)
    print(f"   choice {got.get('choice')} (suite: {got.get('suite_choice')}); cut {got.get('cut')}", flush=True)
    return got


# ---------------------------------------------------------------------------- the table
def cell(v) -> str:
    return "–" if v is None else f"{v[0]:.2f} ± {v[1]:.2f}"


def table(out: Path, names: list[str]) -> str:
    lines = [
        "| graph | default MRR | fixed preset MRR | best heuristic MRR | SEAL MRR | default AUC | fixed preset AUC | "
        "best heuristic AUC | SEAL AUC | choice | wall: default / preset / SEAL | peak MB default |",
        "|" + "---|" * 12,
    ]
    for name in names:
        got = {
            m: json.loads((out / name / f"{m}.json").read_text())
            for m in METHODS
            if (out / name / f"{m}.json").exists()
        }
        auto = got.get("auto", {}).get("rows", {})
        final = next((v for k, v in auto.items() if k.startswith("PENCIL") and "+" in k), None)
        heur = {k: v for k, v in auto.items() if k in ("CN", "AA", "RA")}
        gen = next((v for k, v in got.get("general", {}).get("rows", {}).items() if k.startswith("PENCIL")), None)
        seal = got.get("seal", {}).get("rows", {}).get("SEAL")

        def best(metric):
            if not heur:
                return "–"
            k = max(heur, key=lambda h: heur[h][metric][0])
            return f"{k} {heur[k][metric][0]:.2f}"

        search = got.get("auto", {}).get("search", {})
        choice = f"{search.get('chosen', {}).get('cid', '–')}, {search.get('blend', {}).get('choice', '–')}"
        walls = " / ".join(f"{got[m]['wall_s'] / 60:.1f}" if m in got else "–" for m in METHODS)
        lines.append(
            f"| {name} | {cell(final and final['mrr'])} | {cell(gen and gen['mrr'])} | {best('mrr')} | "
            f"{cell(seal and seal['mrr'])} | {cell(final and final['auc'])} | {cell(gen and gen['auc'])} | "
            f"{best('auc')} | {cell(seal and seal['auc'])} | {choice} | {walls} min | "
            f"{got.get('auto', {}).get('peak_pss_mb', got.get('auto', {}).get('peak_rss_mb', '–'))} |"
        )
    return "\n".join(lines) + "\n"


def build_parser(prog: str = "python -m bench.own_graph_suite") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--out", required=True, help="the suite's folder (graphs, runs, one JSON per graph and method)")
    p.add_argument("--graphs", default=",".join(GRAPHS), help="comma-separated suite graphs (default all)")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of auto,general,seal")
    p.add_argument("--seeds", default="0,1,2", help="seeds of the PENCIL runs (default 0,1,2)")
    p.add_argument("--table", action="store_true", help="only print the table of what has finished")
    p.add_argument(
        "--timing",
        action="store_true",
        help="time the default again, alone (OUT/<graph>/auto-timing.json): wall time and peak memory "
        "on a quiet machine; its choice must equal the suite run's",
    )
    p.add_argument(
        "--burners",
        type=int,
        default=0,
        help="run the default again beside N processes that each keep a core busy (OUT/<graph>/auto-loadedN.json): "
        "it must complete, and make the suite run's choice or name what the budget cut",
    )
    return p


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.own_graph_suite")


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out).resolve()
    names = [g for g in args.graphs.split(",") if g]
    if bad := [g for g in names if g not in GRAPHS]:
        raise SystemExit(f"--graphs: unknown {', '.join(bad)}; choose from {', '.join(GRAPHS)}")
    if args.timing or args.burners:
        for name in names:
            again(name, out, args.seeds, args.burners)
        return 0
    for name in names if not args.table else []:
        for method in [m for m in args.methods.split(",") if m]:
            got = run_unless_done(name, method, out, args.seeds)
            if got and got["rc"]:  # a failed method is retried by the next run; its log says why
                print("   " + (out / name / f"{method}.log").read_text().strip().splitlines()[-1], flush=True)
    text = table(out, names)
    write_text_atomic(out / "table.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
