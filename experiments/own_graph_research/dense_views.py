"""Closest-first views for `deep` (two hops of 10) on dense graphs, validation only: what a per-link cap
(preprocess --closest K) costs and keeps, on the schedule the search gives the candidate.

    python -m experiments.own_graph_research.dense_views --out runs/dense-views \
        --graphs blogs,bio-1800,bio-300,airports,power-s0-2000,coauthor --variants deep,deep-c40 --seeds 0,1
    python -m experiments.own_graph_research.dense_views --out runs/dense-views --table

A variant is the product's candidate as `--preset auto` trains it on a CPU (three negatives a training positive;
`deep`: `--distance-features 4`) for the epochs the search gives it (SearchConfig.candidate_epochs against the
default's set: the default's compute, at least 2 epochs). Each run is `python -m trainer ... --eval-splits valid`
under /usr/bin/time (its peak RSS and CPU seconds: a CPU trainer runs its loader workers inline, one process);
test is never evaluated. The table reads each run at its best validation epoch by MRR, with the per-positive
standard error, and each set's training tokens per link from its manifest.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bench.sparse_infra import MEMBERS, member
from common.atomic import write_json_atomic
from common.manifest import epoch_tokens, read_manifest
from experiments.own_graph_research import graphs, run
from experiments.own_graph_research.scores import per_positive, run_matrices
from pipelines.auto.config import SearchConfig

NR3 = (0, 3)  # no hard negatives, three negatives a positive: the search's training views
# name -> (sampling (d, n, hard share, negatives a positive, closest), trainer flags)
VARIANTS = {
    "default": ((1, 20, *NR3), []),
    "deep": ((2, 10, *NR3), ["--distance-features", "4"]),
    "deep-c40": ((2, 10, *NR3, 40), ["--distance-features", "4"]),
    "deep-c64": ((2, 10, *NR3, 64), ["--distance-features", "4"]),
}


def epochs(name: str, variant: str, out: Path) -> int:
    """The search's schedule for the variant: the default's epochs (1,500 steps, at three negatives a positive),
    an alternative cut to the default's compute (SearchConfig.candidate_epochs)."""
    cfg = SearchConfig()
    default = cfg.link_epochs(run.schedule(run.train_positives(name, out))[2], cfg.neg_ratio)
    if variant == "default":
        return default
    own = epoch_tokens(read_manifest(run.shard_set(name, VARIANTS[variant][0], out)))
    base = epoch_tokens(read_manifest(run.shard_set(name, VARIANTS["default"][0], out)))
    return cfg.candidate_epochs(default, own, base)


def tokens_per_link(shards: str) -> float:
    """Training tokens per link of the set's first view (N_b + 2 a link, common.shards.Block.tokens)."""
    m = read_manifest(shards)
    train = [s for s in m.shards if s["split"] == "train" and s.get("view", 0) == 0]
    return sum(s["tokens"] for s in train) / max(1, sum(s["links"] for s in train))


def train(name: str, variant: str, seed: int, out: Path) -> dict | None:
    run_dir = out / name / variant / f"s{seed}"
    done = run_dir / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    sampling, flags = VARIANTS[variant]
    shards = run.shard_set(name, sampling, out)
    n_epochs = epochs(name, variant, out)
    cmd = [sys.executable, "-m", "trainer", "--shards", shards, "--preset", "general", "--out", str(run_dir)]
    cmd += ["--overwrite", "--seed", str(seed), "--device", "cpu", "--epochs", str(n_epochs)]
    cmd += ["--eval-splits", "valid", "--save-scores", "--save-epoch-scores", "--no-progress", *flags]
    usage = run_dir.parent / f"s{seed}.time"
    if usage.exists() and len(run.curves(run_dir)) == n_epochs:  # finished, its runner stopped before the record
        rc, wall = 0, round(usage.stat().st_mtime - (run_dir / "config.json").stat().st_mtime, 1)
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        with open(run_dir.parent / f"s{seed}.log", "w") as log:
            timed = ["/usr/bin/time", "-o", str(usage), "-f", "%M %U %S", "nice", "-n", "5", *cmd]
            rc = subprocess.run(timed, stdout=log, stderr=log, check=False).returncode
        wall = round(time.perf_counter() - t0, 1)
    if rc:
        print(f"   {name}/{variant}/s{seed}: exit {rc}, see {run_dir.parent / f's{seed}.log'}", flush=True)
        return None
    rss_kb, user, system = usage.read_text().split()[-3:]
    result = {
        "graph": name,
        "variant": variant,
        "seed": seed,
        "epochs": n_epochs,
        "wall_s": wall,
        "cpu_s": round(float(user) + float(system), 1),
        "peak_rss_mb": round(int(rss_kb) / 1024),
        "tokens_per_link": round(tokens_per_link(shards), 1),
        "epoch_tokens": epoch_tokens(read_manifest(shards)),
        "command": " ".join(cmd),
        "curve": run.curves(run_dir),
    }
    write_json_atomic(done, result)
    best = max(result["curve"], key=lambda r: r["mrr"])
    cost = f"{wall:.0f} s, {result['cpu_s']:.0f} CPU-s"
    print(f"   {name}/{variant}/s{seed}: {cost}, best valid MRR {best['mrr']:.4f} (epoch {best['epoch']})", flush=True)
    return result


def best(result: dict, run_dir: Path) -> dict:
    """The best validation epoch by MRR: its MRR and AUC (%), and their per-positive standard errors."""
    pos, neg = run_matrices(run_dir)
    values = per_positive(pos, neg)
    e = int(np.argmax(values["mrr"].mean(axis=1)))
    got = {"epoch": e}
    for k in ("mrr", "auc"):
        v = values[k][e]
        got[k], got[f"{k}_se"] = 100 * v.mean(), 100 * v.std(ddof=1) / np.sqrt(len(v))
    return got


def paired(out: Path, graph: str, seed: int, a: str, b: str) -> str:
    """b - a at each run's best epoch (by MRR), per validation positive (the same links and negatives: one split,
    one candidate set), with the difference's standard error."""
    dirs = [out / graph / v / f"s{seed}" for v in (a, b)]
    if not all((d / "result.json").exists() for d in dirs):
        return ""
    vals = []
    for d in dirs:
        pos, neg = run_matrices(d)
        v = per_positive(pos, neg)
        e = int(np.argmax(v["mrr"].mean(axis=1)))
        vals.append({k: 100 * v[k][e] for k in ("mrr", "auc")})
    cells = []
    for k in ("mrr", "auc"):
        d = vals[1][k] - vals[0][k]
        cells.append(f"{k.upper()} {d.mean():+.2f} ± {d.std(ddof=1) / np.sqrt(len(d)):.2f}")
    return f"{graph} s{seed}: {b} - {a}: " + ", ".join(cells)


def table(out: Path, variants: list[str]) -> str:
    """One row per (graph, variant): epochs, tokens a link, wall, CPU, peak RSS, validation MRR and AUC by seed."""
    lines = ["| graph | variant | epochs | tokens a link | wall s | CPU s | peak RSS MB | valid MRR (SE) by seed "]
    lines[0] += "| valid AUC (SE) by seed |"
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for g in sorted({p.parent.parent.parent.name for p in out.glob("*/*/s*/result.json")}):
        for v in variants:
            runs = sorted((out / g / v).glob("s*/result.json"))
            if not runs:
                continue
            rs = [json.loads(p.read_text()) for p in runs]
            bs = [best(r, p.parent) for r, p in zip(rs, runs)]
            mrr = ", ".join(f"{b['mrr']:.2f} ({b['mrr_se']:.2f})" for b in bs)
            auc = ", ".join(f"{b['auc']:.2f} ({b['auc_se']:.2f})" for b in bs)
            lines.append(
                f"| {g} | {v} | {rs[0]['epochs']} | {rs[0]['tokens_per_link']} | "
                + "/".join(f"{r['wall_s']:.0f}" for r in rs)
                + " | "
                + "/".join(f"{r['cpu_s']:.0f}" for r in rs)
                + " | "
                + "/".join(str(r["peak_rss_mb"]) for r in rs)
                + f" | {mrr} | {auc} |"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.own_graph_research.dense_views", description=__doc__[:60])
    p.add_argument("--out", required=True)
    p.add_argument("--graphs", default="blogs,bio-1800,bio-300,airports,power-s0-2000,coauthor")
    p.add_argument("--variants", default="deep,deep-c40")
    p.add_argument("--seeds", default="0")
    p.add_argument("--parallel", type=int, default=2, help="trainer processes at once (default 2)")
    p.add_argument("--table", action="store_true", help="print the table of what has finished")
    args = p.parse_args(argv)
    for m in MEMBERS:
        graphs.SYNTHETIC.setdefault(m, member(m))
    out, variants = Path(args.out).resolve(), args.variants.split(",")
    if args.table:
        print(table(out, variants))
        for g in sorted({p.parent.parent.parent.name for p in out.glob("*/*/s*/result.json")}):
            for seed in range(3):
                line = paired(out, g, seed, variants[0], variants[-1])
                if line:
                    print(line)
        return 0
    names, seeds = args.graphs.split(","), [int(s) for s in args.seeds.split(",")]
    jobs = [(g, v, s, out) for s in seeds for g in names for v in variants]
    for g in names:  # the shard sets first, one at a time (each starts an embedded Ray)
        for v in {*variants, "default"}:
            run.shard_set(g, VARIANTS[v][0], out)
    print(f"{len(jobs)} runs", flush=True)
    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(lambda j: train(*j), jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
