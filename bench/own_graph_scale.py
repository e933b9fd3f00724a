"""The default's cost curve: `pencil run --dataset G.csv` (no preset: --preset auto and its search), one seed, on
generated graphs of 10 k to 1 M edges at two densities, with each stage's wall time and peak memory.

    python -m bench.own_graph_scale --out scale --sizes 10k --degrees 4,30          # run (a rerun skips what finished)
    python -m bench.own_graph_scale --out scale --sizes 1m --degrees 4 --budget-minutes 30
    python -m bench.own_graph_scale --out scale --sizes 1m --degrees 4 --null        # the signal-free control
    python -m bench.own_graph_scale --out scale --table                              # the table, 10 M projected

The graphs (`scale_edges`): nodes on a ring, each edge from an endpoint drawn by a heavy-tailed activity to a
partner a heavy-tailed ring distance away, so most links are local (shared neighbours, triangles: the heuristics
and the model have something to find) and a few are long shortcuts. Vectorised, O(edges): the suite's families
(bench/graph_families.py) are O(nodes^2) (latent space) or a Python loop per edge (Holme-Kim).
The stages come from the run's own log (the same lines bench/run_timeline.py reads): load (the process's start
to the full graph built: imports, reading, ids), split (the split and its negatives, the training graph),
heuristics (test's CN/AA/RA and the run's set-up), shard sets (candidates and sampling), search (both rungs),
final seeds (to the validation heuristics), blend, report (the results written and the process's exit).
Memory: the PSS of the run's process tree (shared pages once), sampled every second; a stage's peak is the
largest sample inside it. A size not measured is projected per stage from the two largest measured sizes of its
density (linear in edges past the smaller one) and labelled so; the search's projection is bounded by the budget.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from bench.run_timeline import stamped

REPO = Path(__file__).resolve().parents[1]
SIZES = {"10k": 10_000, "100k": 100_000, "1m": 1_000_000, "10m": 10_000_000}
STAGES = ("load", "split", "heuristics", "shard sets", "search", "final seeds", "blend", "report")
# (stage, the log line that ends it): the first match after the previous stage's end
ENDS = (
    ("load", re.compile(r"edges built in|the graph is undirected")),
    ("split", re.compile(r"training graph built in|pipelines\.run: split:")),
    ("heuristics", re.compile(r"preprocess\.(candidates|job):")),
    ("shard sets", re.compile(r"pipelines\.auto: search: \d+ candidates?")),
    ("search", re.compile(r"pipelines\.auto: search: \S+ \(")),
    ("final seeds", re.compile(r"common\.heuristics: \S+/valid:|pipelines\.auto: blend: (?!validation's)")),
    ("blend", re.compile(r"pipelines\.auto: auto: ")),
)


# ---------------------------------------------------------------------------- graphs
def scale_edges(edges: int, mean_degree: float, seed: int = 0) -> np.ndarray:
    """About `edges` distinct undirected edges over round(2 edges / mean_degree) nodes (see the docstring)."""
    n = max(3, round(2 * edges / mean_degree))
    rng = np.random.default_rng(seed)
    activity = rng.pareto(2.5, n) + 1.0  # heavy-tailed degrees
    cdf = np.cumsum(activity) / activity.sum()
    want, got = int(edges * 1.3) + 16, np.zeros((0, 2), dtype=np.int64)
    while len(got) < edges:
        u = np.minimum(np.searchsorted(cdf, rng.random(want)), n - 1)
        hop = np.ceil(mean_degree / 4 * (rng.pareto(1.2, want) + 1.0)).astype(np.int64)  # mostly local
        v = (u + np.where(rng.random(want) < 0.5, hop, -hop)) % n
        pair = np.sort(np.stack([u, v], 1), axis=1)
        pair = pair[pair[:, 0] != pair[:, 1]]
        got = np.unique(np.concatenate([got, pair]), axis=0)
    return rng.permutation(got)[:edges]


def null_edges(edges: int, mean_degree: float, seed: int = 0) -> np.ndarray:
    """The signal-free control: `edges` distinct pairs drawn uniformly (Erdos-Renyi) over as many nodes as
    `scale_edges`, so a held-out link is no likelier than a non-link: test AUC ~50 and MRR ~chance expected."""
    n = max(3, round(2 * edges / mean_degree))
    rng = np.random.default_rng(seed)
    got = np.zeros((0, 2), dtype=np.int64)
    while len(got) < edges:
        pair = np.sort(rng.integers(0, n, (int(edges * 1.1) + 16, 2)), axis=1)
        got = np.unique(np.concatenate([got, pair[pair[:, 0] != pair[:, 1]]]), axis=0)
    return rng.permutation(got)[:edges]


def write_graph(path: Path, edges: np.ndarray) -> None:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    pcsv.write_csv(pa.table({"src": edges[:, 0], "dst": edges[:, 1]}), tmp)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------- one run
def measured_run(graph: Path, out: Path, budget: float, max_gb: float | None = None, every_s: float = 1.0) -> dict:
    """`pencil run --dataset graph` (the real command, its defaults); wall, exit status, PSS samples. Above
    `max_gb` of PSS the run is stopped (a shared machine's cap), and "capped" says so."""
    from pipelines.core.memory_gate import tree_bytes

    cmd = [sys.executable, "-m", "pipelines.run", "--dataset", str(graph), "--out", str(out / "results")]
    cmd += ["--shards", str(out / "shards"), "--budget-minutes", f"{budget:g}"]
    log, samples = out / "run.log", []
    load, capped = [os.getloadavg()[0]], False
    start = time.time()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        while proc.poll() is None:
            samples.append((time.time(), tree_bytes(proc.pid)))
            load.append(os.getloadavg()[0])
            if max_gb is not None and samples[-1][1] > max_gb * 1e9:
                os.killpg(proc.pid, signal.SIGTERM)  # the run and its trainers, Ray's workers
                proc.wait()
                capped = True
                break
            time.sleep(every_s)
    end = time.time()
    got = {"cmd": cmd, "rc": proc.returncode, "start": start, "end": end, "samples": samples, "load": load}
    return {**got, "capped": capped}


def stages(log: Path, start: float, end: float) -> list[tuple[str, float, float]]:
    """[(stage, from, to)] from the run's log; the stages whose end line never came are left out."""
    lines = stamped(log)
    out, at, i = [], start, 0
    for name, pattern in ENDS:
        j = next((k for k in range(i, len(lines)) if pattern.search(lines[k][1])), None)
        if j is None:
            return out
        out.append((name, at, lines[j][0]))
        at, i = lines[j][0], j + 1
    if any(" wrote " in line and "results.json" in line for _, line in lines[i:]):
        out.append(("report", at, end))
    return out


def stage_rows(marks: list[tuple[str, float, float]], samples: list[tuple[float, int]]) -> dict:
    """{stage: (wall s, peak GB)}; a stage shorter than the sampling interval gets the nearest sample."""
    rows = {}
    for name, a, b in marks:
        inside = [m for t, m in samples if a <= t <= b]
        if not inside and samples:
            inside = [min(samples, key=lambda s: abs(s[0] - (a + b) / 2))[1]]
        rows[name] = (round(b - a, 1), round(max(inside, default=0) / 1e9, 2))
    return rows


def results(out: Path) -> dict:
    """The report's test MRR/AUC of PENCIL (and its blend) and the best heuristic, and the protocol's name."""
    found = sorted((out / "results").glob("*/auto/results.json"))
    if not found:
        return {}
    got = json.loads(found[0].read_text())
    table = got.get("table", [])
    best = {}
    for metric in ("mrr", "auc"):
        models = [r for r in table if r.get(metric) is not None]
        pencil = [r for r in models if r["model"].startswith("PENCIL")]
        rest = [r for r in models if not r["model"].startswith("PENCIL")]
        for tag, group in (("pencil", pencil), ("heuristic", rest)):
            if group:
                top = max(group, key=lambda r: _mean(r[metric]))
                best[f"{tag}_{metric}"] = f"{_mean(top[metric]):.2f} ({top['model']})"
    best["protocol"] = ", ".join(sorted({str(r.get("protocol", "")) for r in table}))
    return best


def _mean(cell) -> float:
    """A table cell's mean: [mean, std] in results.json, a number, or "mean ± std" text."""
    if isinstance(cell, (list, tuple)):
        return float(cell[0])
    return float(cell) if isinstance(cell, (int, float)) else float(str(cell).split(" ")[0])


def run_one(
    root: Path, size: str, degree: float, budget: float, max_gb: float | None = None, null: bool = False
) -> dict:
    name = f"{size}-d{degree:g}" + ("-null" if null else "")
    folder, done = root / name, root / name / "run.json"
    if done.exists():
        return json.loads(done.read_text())
    raw, graph = folder / "raw.json", folder / f"{name}.csv"
    if not raw.exists():  # the measurement is kept before anything reads it: a failed parse reruns no run
        t0 = time.perf_counter()
        edges = (null_edges if null else scale_edges)(SIZES[size], degree)
        write_graph(graph, edges)
        print(f"== {name}: {len(edges):,} edges, written in {time.perf_counter() - t0:.1f} s", flush=True)
        run = measured_run(graph, folder, budget, max_gb)
        run["nodes"], run["edges"] = int(edges.max()) + 1, int(len(edges))
        raw.write_text(json.dumps(run))
    run = json.loads(raw.read_text())
    marks = stages(folder / "run.log", run["start"], run["end"])
    got = {
        "name": name,
        "edges": run["edges"],
        "nodes": run["nodes"],
        "degree": degree,
        "null": null,
        "rc": run["rc"],
        "capped_gb": max_gb if run["capped"] else None,
        "wall_s": round(run["end"] - run["start"], 1),
        "peak_gb": round(max((m for _, m in run["samples"]), default=0) / 1e9, 2),
        "load_avg": [round(min(run["load"]), 1), round(max(run["load"]), 1)],
        "stages": stage_rows(marks, run["samples"]),
        "results": results(folder),
        "cmd": " ".join(run["cmd"]),
        "budget_minutes": budget,
    }
    (folder / "run.json").write_text(json.dumps(got, indent=1))
    print(f"   rc {got['rc']}, {got['wall_s']:.0f} s, peak {got['peak_gb']} GB, load {got['load_avg']}", flush=True)
    return got


# ---------------------------------------------------------------------------- the table
def project(runs: list[dict], edges: int, budget_s: float) -> dict:
    """Each stage's (wall, peak) at `edges`, linear in edges from the two largest measured runs (one: in
    proportion, an upper bound the table does not print); the search is bounded by the budget."""
    a, b = sorted(runs, key=lambda r: r["edges"])[-2:] if len(runs) > 1 else (None, runs[0])
    out = {}
    for stage in STAGES:
        if stage not in b["stages"]:
            continue
        vb = b["stages"][stage]
        if a is None or stage not in a["stages"]:
            va, ea = (0.0, 0.0), 0
        else:
            va, ea = a["stages"][stage], a["edges"]
        # from the larger run at the slope between the two (none where it fell: noise, or a fixed cost)
        cell = [vb[k] + max(0.0, vb[k] - va[k]) * (edges - b["edges"]) / (b["edges"] - ea) for k in (0, 1)]
        if stage == "search":
            cell[0] = min(cell[0], budget_s)
        out[stage] = (round(cell[0], 1), round(cell[1], 2))
    return out


def growth(runs: list[dict], stage: str, k: int) -> str:
    """The exponent of a stage's cost in edges between the two largest runs (1: linear; above 1: faster)."""
    runs = sorted((r for r in runs if stage in r["stages"]), key=lambda r: r["edges"])[-2:]
    if len(runs) < 2 or min(r["stages"][stage][k] for r in runs) <= 0:
        return "–"
    x = math.log(runs[1]["edges"] / runs[0]["edges"])
    return f"{math.log(runs[1]['stages'][stage][k] / runs[0]['stages'][stage][k]) / x:.2f}"


def table(runs: list[dict], project_to: tuple[int, ...] = (1_000_000, 10_000_000), budget_s: float = 1800) -> str:
    """The markdown table: one row per (graph, stage) measured, then the projections, then each stage's
    growth exponent per density."""
    head = "| graph | edges | nodes | source | " + " | ".join(STAGES)
    head += " | whole run | load avg | test: PENCIL vs best heuristic |"
    lines = [head, "|" + "---|" * (len(STAGES) + 7)]
    for degree in sorted({r["degree"] for r in runs}):
        mine = [r for r in runs if r["degree"] == degree and r["rc"] == 0 and not r.get("null")]  # controls: no slope
        mine.sort(key=lambda r: r["edges"])
        for r in sorted((r for r in runs if r["degree"] == degree), key=lambda r: r["edges"]):
            cells = [_cell(r["stages"].get(s)) for s in STAGES]
            res = r.get("results", {})
            quality = f"MRR {res.get('pencil_mrr', '–')} vs {res.get('heuristic_mrr', '–')}"
            quality += f"; AUC {res.get('pencil_auc', '–')} vs {res.get('heuristic_auc', '–')}"
            src = "measured" if r["rc"] == 0 else f"failed (rc {r['rc']})"
            if r.get("capped_gb"):
                src = f"stopped at the {r['capped_gb']:g} GB cap"
            lines.append(
                f"| {r['name']} | {r['edges']:,} | {r['nodes']:,} | {src} | "
                + " | ".join(cells)
                + f" | {_cell((r['wall_s'], r['peak_gb']))} | {r['load_avg'][0]}–{r['load_avg'][1]} | {quality} |"
            )
        for edges in project_to:
            if len(mine) < 2 or any(r["edges"] >= edges for r in mine):  # a slope needs two sizes
                continue
            p = project(mine, edges, budget_s)
            whole = (round(sum(v[0] for v in p.values()), 1), max(v[1] for v in p.values()))
            cells = [_cell(p.get(s)) for s in STAGES]
            lines.append(
                f"| {_size(edges)}-d{degree:g} | {edges:,} | {round(2 * edges / degree):,} | **projection** | "
                + " | ".join(cells)
                + f" | {_cell(whole)} | – | – |"
            )
        if len(mine) > 1:
            exps = [f"{growth(mine, s, 0)} / {growth(mine, s, 1)}" for s in STAGES]
            lines.append(f"| d{degree:g}: growth exponent (time / memory) | | | | " + " | ".join(exps) + " | | | |")
    return "\n".join(lines)


def _size(edges: int) -> str:
    return next((k for k, v in SIZES.items() if v == edges), f"{edges:,}")


def _cell(v) -> str:
    return "–" if v is None else f"{v[0]:.0f} s, {v[1]:.1f} GB"


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench.own_graph_scale", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="work folder: graphs, runs, run.json per graph")
    p.add_argument("--sizes", default="10k,100k", help=f"comma-separated, of {', '.join(SIZES)} (default 10k,100k)")
    p.add_argument("--degrees", default="4,30", help="mean degrees (default 4,30)")
    p.add_argument("--budget-minutes", type=float, default=30.0, help="the run's --budget-minutes (default 30)")
    p.add_argument("--max-gb", type=float, default=None, help="stop a run whose process tree's PSS passes this")
    p.add_argument("--null", action="store_true", help="the signal-free control: uniform random graphs (NAME-null)")
    p.add_argument("--table", action="store_true", help="print the table of what has finished, with projections")
    args = p.parse_args(argv)
    root = Path(args.out)
    bad = [s for s in args.sizes.split(",") if s not in SIZES]
    if bad:
        raise SystemExit(f"--sizes: {', '.join(bad)} unknown; use some of {', '.join(SIZES)}")
    if not args.table:
        for size in args.sizes.split(","):
            for degree in (float(d) for d in args.degrees.split(",")):
                run_one(root, size, degree, args.budget_minutes, args.max_gb, args.null)
    runs = [json.loads(f.read_text()) for f in sorted(root.glob("*/run.json"))]
    print(table(runs, budget_s=60 * args.budget_minutes) if runs else f"{root}: no finished run yet")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
