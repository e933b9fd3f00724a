"""Latency and throughput of `pencil serve` over real HTTP on 127.0.0.1, beside the offline cost per node.

    python -m bench.serve --checkpoint RUN
    python -m bench.serve --checkpoint RUN --graphs citeseer --requests 100 --concurrency 1,8

Per graph: the run's own graph ("citeseer": the run's test graph, served with `--graph test`) and a
collab-sized synthetic one ("collab": bench.scale's Chung-Lu power-law graph with ogbl-collab's 235,868 nodes
and 967,632 edges, served with `--graph EDGES`: the same model on a bigger graph, as a snapshot).
1. The offline cost of `pencil recommend` per node: its engine on blocks of 256 of the sampled query nodes (the
   job's block), in this process, torch on one thread like a replica: wall ms per node, split into retrieval,
   sampling, scoring and top-k. The same one node at a time: what a lone request costs a replica.
2. The real service (`python -m pipelines serve`, one replica of one CPU, an embedded Ray), started as a
   child, waited for on /health, warmed up.
3. Request loops that stop by themselves (--requests per cell, or --max-seconds): GET /health (the HTTP path
   without the model, at concurrency 1), GET /recommend/{node}?k=20&pool=100 over the sampled nodes, and POST
   /score with --score-pairs random pairs of them, at each --concurrency (that many clients, each one request
   at a time). Client-side latency percentiles p50/p95/p99 and throughput. Every answer must be 200.
The client runs on the same machine (one asyncio process), so its CPU counts against the service's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

REPO = Path(__file__).resolve().parents[1]
GRAPHS = ("citeseer", "collab")


# ---------------------------------------------------------------------------- the service as a child
@contextlib.contextmanager
def service(
    checkpoint: str,
    state: Path,
    port: int,
    *flags: str,
    env: dict | None = None,
    log_path: Path,
    timeout_s: float = 900.0,
):
    """`python -m pipelines serve` on 127.0.0.1:port as a child; yields the Popen once /health answers 200.
    Stopped with SIGTERM at the end (SIGKILL after a minute)."""
    cmd = [
        sys.executable,
        "-m",
        "pipelines",
        "serve",
        "--checkpoint",
        str(checkpoint),
        "--state",
        str(state),
        "--port",
        str(port),
        *flags,
    ]
    run_env = {**os.environ, **(env or {})}
    run_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), run_env.get("PYTHONPATH")) if p)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=run_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(port, proc, timeout_s, log_path)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def request(
    port: int, method: str, path: str, body=None, headers: dict | None = None, timeout: float = 60.0
) -> tuple[int, str]:
    """One HTTP request to 127.0.0.1:port with the standard library: (status, body text). `body`: bytes as
    they are, anything else as JSON."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()


def wait_healthy(port: int, proc: subprocess.Popen, timeout_s: float, log_path: Path) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited ({proc.returncode}): {log_path.read_text()[-3000:]}")
        with contextlib.suppress(OSError):
            status, _ = request(port, "GET", "/health", timeout=5)
            if status == 200:
                return
        time.sleep(1.0)
    raise RuntimeError(f"the service did not answer /health in {timeout_s:.0f} s: {log_path.read_text()[-3000:]}")


# ---------------------------------------------------------------------------- load
async def _drive(port: int, make, concurrency: int, total: int, max_seconds: float) -> dict:
    """`concurrency` clients, each sending make(i) = (method, path, body) one at a time, until `total` requests
    were sent or max_seconds passed."""
    import aiohttp

    latencies, bad, sent = [], [], [0]
    deadline = time.perf_counter() + max_seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(
        f"http://127.0.0.1:{port}", connector=connector, timeout=aiohttp.ClientTimeout(total=300)
    ) as session:

        async def client():
            while sent[0] < total and time.perf_counter() < deadline:
                method, path, body = make(sent[0])
                sent[0] += 1
                t = time.perf_counter()
                async with session.request(method, path, json=body) as resp:
                    await resp.read()
                    if resp.status != 200:
                        bad.append(resp.status)
                latencies.append(time.perf_counter() - t)

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    lat = np.array(latencies) * 1000.0
    return {
        "requests": len(lat),
        "errors": len(bad),
        "elapsed_s": elapsed,
        "p50_ms": float(np.percentile(lat, 50)),
        "p95_ms": float(np.percentile(lat, 95)),
        "p99_ms": float(np.percentile(lat, 99)),
        "req_per_s": len(lat) / elapsed,
    }


def drive(port: int, make, concurrency: int, total: int, max_seconds: float) -> dict:
    return asyncio.run(_drive(port, make, concurrency, total, max_seconds))


# ---------------------------------------------------------------------------- offline cost
def offline_cost(checkpoint: str, spec: str, nodes: np.ndarray, block: int | None = None) -> dict:
    """`pencil recommend`'s engine on `nodes` with its defaults (k=20, pool=100, ra), one thread, in blocks of
    `block` nodes (default the job's 256; 1 is what a lone request costs a replica): wall ms per node, and where
    it goes: retrieval, sampling, scoring (packing + forward), top-k."""
    import torch

    from common import snapshot
    from common.retrieval import EVERY_NODE, retrieve
    from pipelines.core.runs import load_run
    from pipelines.recommend.engine import RecConfig, finish_block, prepare_block, sampler_for, scorer_for

    torch.set_num_threads(1)
    device = torch.device("cpu")
    model, dataset, fields, _ = load_run(checkpoint, device)
    graph, _ = snapshot.graph_for(spec, dataset)
    cfg = RecConfig(**fields)
    step = block or cfg.block_nodes
    sampler, scorer = sampler_for(graph, cfg), scorer_for(model, graph, cfg, device)
    spent = dict.fromkeys(("retrieve", "sample", "score", "top_k"), 0.0)
    pairs = 0
    for first, b in ((True, 0), *((False, b) for b in range(0, len(nodes), step))):
        queries = nodes[:2] if first else nodes[b : b + step]  # first: compile the sampler, warm up
        prep = prepare_block(b, queries, graph, EVERY_NODE, cfg, sampler)  # the job's step; its two parts timed alone:
        t0 = time.perf_counter()
        retrieve(graph, queries, cfg.retriever, cfg.pool)
        t1 = time.perf_counter()
        list(sampler.blocks(np.stack([prep.node, prep.cand], axis=1), 0))
        t2 = time.perf_counter()
        logits = scorer.score_blocks(prep.sampled, len(prep.node))
        t3 = time.perf_counter()
        finish_block(prep, logits, cfg)
        t4 = time.perf_counter()
        if not first:
            pairs += len(prep.node)
            for key, dt in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                spent[key] += dt
    total = sum(spent.values())
    return {
        "block": step,
        "nodes": len(nodes),
        "pairs": pairs,
        "ms_per_node": total / len(nodes) * 1000.0,
        "pairs_per_node": pairs / len(nodes),
        "pairs_per_s": pairs / spent["score"],
        "share": {k: v / total for k, v in spent.items()},
    }


def graph_spec(name: str, work: Path, seed: int) -> str:
    if name == "citeseer":
        return "test"
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.scale import SHAPES, make_graph

    graph = make_graph(SHAPES["ogbl-collab"], 1.0, 2.5, seed)
    e = graph.edge_array()
    path = work / "collab.parquet"
    pq.write_table(pa.table({"src": e[:, 0], "dst": e[:, 1]}), path)
    print(f"collab-sized graph: {graph}", flush=True)
    return str(path)


def query_nodes(checkpoint: str, spec: str, count: int, seed: int) -> np.ndarray:
    from common import snapshot
    from common.datasets import load_set_dataset
    from common.shards import read_manifest
    from pipelines.core.runs import resolve_checkpoint
    from trainer import checkpoint as ckpt_io

    shards = ckpt_io.load(resolve_checkpoint(checkpoint))["config"]["data"]["shards"]
    graph, _ = snapshot.graph_for(spec, load_set_dataset(read_manifest(shards)["config"]))
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(np.flatnonzero(graph.degree > 0), size=count, replace=False))


# ---------------------------------------------------------------------------- the benchmark
def bench_graph(name: str, args, work: Path) -> tuple[list[dict], dict]:
    from pipelines.core.ray_head import free_ports

    spec = graph_spec(name, work, args.seed)
    nodes = query_nodes(args.checkpoint, spec, args.nodes, args.seed)
    offline = [offline_cost(args.checkpoint, spec, nodes), offline_cost(args.checkpoint, spec, nodes[:64], block=1)]
    for o in offline:
        shares = ", ".join(f"{k} {v:.1%}" for k, v in o["share"].items())
        print(
            f"{name}: pencil recommend's engine, blocks of {o['block']}: {o['ms_per_node']:.1f} ms/node "
            f"({o['pairs_per_node']:.0f} pairs/node, scoring {o['pairs_per_s']:.0f} pairs/s, one thread; {shares})",
            flush=True,
        )
    rows = []
    rng = np.random.default_rng(args.seed + 1)
    partners = rng.integers(0, nodes.max() + 1, size=(len(nodes), args.score_pairs))

    def health(i):
        return "GET", "/health", None

    def recommend(i):
        return "GET", f"/recommend/{int(nodes[i % len(nodes)])}?k=20&pool=100", None

    def score(i):
        u = int(nodes[i % len(nodes)])
        return "POST", "/score", {"pairs": [[u, int(v)] for v in partners[i % len(nodes)] if v != u]}

    port = free_ports(1)[0]
    flags = ["--graph", spec]  # the offline numbers above were taken on this graph too
    with service(args.checkpoint, work / f"state-{name}", port, *flags, log_path=work / f"serve-{name}.log"):
        for make in (health, recommend, score):
            drive(port, make, 4, 40, 120)  # warm-up: every code path once, the batch queues created
            for c in [1] if make is health else args.concurrency:  # health: the HTTP path alone, no model
                load = os.getloadavg()[0]
                r = drive(port, make, c, args.requests * (1 if c == 1 else 2), args.max_seconds)
                row = {"graph": name, "endpoint": make.__name__, "concurrency": c, "load": load, **r}
                rows.append(row)
                print(
                    f"{name} {make.__name__} c={c}: p50 {r['p50_ms']:.1f} p95 {r['p95_ms']:.1f} p99 "
                    f"{r['p99_ms']:.1f} ms, {r['req_per_s']:.1f} req/s, {r['errors']} errors, load {load:.1f}",
                    flush=True,
                )
    return rows, [{"graph": name, **o} for o in offline]


def table(rows: list[dict], offline: list[dict]) -> str:
    fmt = lambda v: f"{v:.1f}" if isinstance(v, float) else str(v)
    keys = ("graph", "endpoint", "concurrency", "requests", "p50_ms", "p95_ms", "p99_ms", "req_per_s", "errors", "load")
    lines = [
        "| graph | endpoint | clients | requests | p50 ms | p95 ms | p99 ms | req/s | errors | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(fmt(r[k]) for k in keys) + " |" for r in rows]
    lines += [
        "",
        "| graph | pencil recommend's engine, nodes per block | ms/node | pairs/node | scoring pairs/s | "
        "retrieval | sampling | scoring (pack + forward) | top-k |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {o['graph']} | {o['block']} | {o['ms_per_node']:.1f} | {o['pairs_per_node']:.0f} | "
        f"{o['pairs_per_s']:.0f} | "
        + " | ".join(f"{o['share'][k]:.1%}" for k in ("retrieve", "sample", "score", "top_k"))
        + " |"
        for o in offline
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.serve", description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="a trained run (e.g. citeseer-small's seed0 folder)")
    p.add_argument("--graphs", default=",".join(GRAPHS), help=f"comma list of {', '.join(GRAPHS)} (default both)")
    p.add_argument("--concurrency", default="1,8,32", help="client counts (default 1,8,32)")
    p.add_argument(
        "--requests", type=int, default=200, help="requests at concurrency 1, twice that above (default 200)"
    )
    p.add_argument("--max-seconds", type=float, default=60.0, help="each loop stops after this long (default 60)")
    p.add_argument("--nodes", type=int, default=256, help="sampled query nodes (default 256)")
    p.add_argument("--score-pairs", type=int, default=100, help="pairs per /score request (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c.strip()]
    names = [g.strip() for g in args.graphs.split(",") if g.strip()]
    if bad := sorted(set(names) - set(GRAPHS)):
        p.error(f"--graphs: unknown {', '.join(bad)}; use some of {', '.join(GRAPHS)}")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    rows, offline = [], []
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        for name in names:
            r, o = bench_graph(name, args, Path(tmp))
            rows += r
            offline += o
    print(f"load average {os.getloadavg()[0]:.1f} at the end\n")
    print(table(rows, offline))
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "offline": offline}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
