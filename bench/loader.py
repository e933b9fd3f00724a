"""Loader benchmark : training-read throughput of one loader process, and the
sparse/dense crossover of the graph part of the model.

    python -m bench.loader                                   # both shard sets, then the form sweep
    python -m bench.loader --sections reads --citeseer /tmp/shards/citeseer/<key>
    python -m bench.loader --sections form

Sections:
- reads: one loader process (a fresh child pinned to one core) does what a training worker does:
  decode, check, shuffle pool, token-budget cuts, relabel, induce edges from the shipped graph, pack.
  Reported per process in *CPU* time (time.process_time, which holds on a shared machine): tokens/s,
  samples/s; plus the child's peak RSS and the set's bytes per link on disk. Two sets:
  (a) real citeseer (2,20) shards, built by
      `python -m preprocess --dataset citeseer --sampling 2,20 --views 2 --out /tmp/shards --num-cpus 1`
      (found under /tmp/shards when --citeseer is not given);
  (b) ddi-shaped shards: a synthetic near-uniform graph with ogbl-ddi's 4,267 nodes and ~1.07 M training
      edges (density 11.7 %, log-normal node weights), a few thousand links sampled at (1,350) with the
      project's sampler, written as a v2 shard set (graph shipped) under --work.
- workers: the trainer's persistent loaders (2 training + 2 eval workers, forked once) over 3 epochs
  and evaluations of a 20,000-link ddi-shaped set (enough to fill the 64 MB shuffle pool): peak RSS and
  private memory (USS) of any worker, against --loader-memory-mb.
- form: time of the graph part of a batch (induce + pack + adjacency embedding + two propagation layers,
  forward and backward, hidden 128) in the sparse (message list) and dense (bmm) forms, over edge
  densities, with the packer's density estimate (Inducer.entry_bound / (B Lc^2)) next to each: what
  trainer.data.packing.DENSE_MIN_DENSITY is set from. On CPU (process time, packing included) and, where there is
  one, on the GPU (--form-device; the GPU part alone, at the GPU's 65,536-token micro-batch).
Targets: >= 2 M tokens/s per loader process on citeseer (2,20), >= 1 M on ddi-shaped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/loader.py` as well as `python -m bench.loader`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from bench.child import run_child
from common.atomic import atomic_file
from common.memory import peak_rss_mb

DDI_NODES, DDI_EDGES = 4_267, 1_067_911


# ---------------------------------------------------------------------------- reads
def measure_training_reads(
    shard_set: str,
    seconds: float = 10.0,
    token_budget: int | None = None,
    max_samples: int = 1 << 30,
    shuffle_buffer_mb: int = 64,
) -> dict:
    """Training reads of one loader process on `shard_set` (in this process) for about `seconds` of CPU.

    The token budget defaults to 64 samples' worth of average links (about what a GPU micro-batch
    holds). Returns tokens/s and samples/s per CPU second, batches, peak RSS and bytes per link."""
    from common.shards import read_manifest
    from trainer.config_sections import DataConfig
    from trainer.data.stream import TrainStream, plan_epoch

    manifest = read_manifest(shard_set)
    entries = [s for s in manifest.shards if s["split"] == "train"]
    links, tokens = sum(e["links"] for e in entries), sum(e["tokens"] for e in entries)
    budget = token_budget or int(64 * tokens / links)
    cfg = DataConfig(
        shards=shard_set,
        max_samples=max_samples,
        token_budget=budget,
        eval_token_budget=budget,
        shuffle_buffer_mb=shuffle_buffer_mb,
        num_workers=0,
        seed=0,
    )
    ds = TrainStream(manifest, 0, 1, cfg, workers=1)
    warm = next(iter(ds.logical_worker(0, 1, 0, 0, 1)))  # numba caches load, graph mapped: not timed
    del warm
    n_tok = n_smp = n_bat = dense = 0
    t0 = time.process_time()
    epoch = 0
    while time.process_time() - t0 < seconds:
        plan = plan_epoch(manifest, epoch, 1, 1, cfg)
        for batch in ds.logical_worker(0, 1, epoch, 0, plan.batches):
            n_tok += batch.num_tokens
            n_smp += batch.num_samples
            n_bat += 1
            dense += batch.dense
            if time.process_time() - t0 >= seconds:
                break
        epoch += 1
    cpu = time.process_time() - t0
    return {
        "set": manifest.dataset or "?",
        "token_budget": budget,
        "tokens_per_s": n_tok / cpu,
        "samples_per_s": n_smp / cpu,
        "batches": n_bat,
        "dense_batches": dense,
        "cpu_s": cpu,
        "tokens_per_link": tokens / links,
        "bytes_per_link": sum(e["bytes"] for e in entries) / links,
        "peak_rss_mb": peak_rss_mb(),
    }


def measure_workers(
    shard_set: str, token_budget: int, epochs: int = 3, loader_memory_mb: int = 1024, shuffle_buffer_mb: int = 64
) -> dict:
    """The trainer's persistent loaders with 2 real workers: `epochs` training epochs plus a valid
    evaluation after each; the peak RSS and private (USS) memory of any worker, sampled every 50 ms."""
    import threading

    import psutil

    from common.shards import read_manifest
    from trainer.config_sections import DataConfig
    from trainer.data import loader_budget, loaders

    manifest = read_manifest(shard_set)
    cfg = DataConfig(
        shards=shard_set,
        max_samples=1 << 20,
        token_budget=token_budget,
        eval_token_budget=4 * token_budget,
        num_workers=2,
        shuffle_buffer_mb=shuffle_buffer_mb,
        loader_memory_mb=loader_memory_mb,
    )
    peak = {"rss": 0, "uss": 0, "workers": set()}
    done = threading.Event()

    def watch():
        while not done.is_set():
            for c in psutil.Process().children(recursive=True):
                try:
                    mi = c.memory_full_info()
                except psutil.Error:
                    continue
                peak["rss"], peak["uss"] = max(peak["rss"], mi.rss), max(peak["uss"], mi.uss)
                peak["workers"].add(c.pid)
            done.wait(0.05)

    th = threading.Thread(target=watch)
    th.start()
    tokens = 0
    try:
        for epoch in range(epochs):
            loader, _ = loaders.train_loader(manifest, epoch, loaders.LoaderSettings(cfg))
            tokens += sum(b.num_tokens for b in loader)
            if manifest.eval:
                tokens += sum(
                    b.num_tokens
                    for b in loaders.eval_loader(manifest, "valid", "original", loaders.LoaderSettings(cfg))
                )
    finally:
        done.set()
        th.join()
        loaders.close_loaders()
    return {
        "set": manifest.dataset or "?",
        "token_budget": token_budget,
        "tokens": tokens,
        "prefetch": loader_budget.prefetch_depth(manifest.n_max, token_budget, cfg),
        "loader_memory_mb": loader_memory_mb,
        "worker_processes": len(peak["workers"]),
        "worker_peak_rss_mb": peak["rss"] / 2**20,
        "worker_peak_uss_mb": peak["uss"] / 2**20,
    }


def ddi_graph(seed: int = 0):
    """Near-uniform dense graph of ogbl-ddi's size: P(i ~ j) = min(1, c w_i w_j), log-normal weights."""
    from common.graph import Graph

    rng = np.random.default_rng(seed)
    w = rng.lognormal(0.0, 0.5, DDI_NODES)
    a, b = np.triu_indices(DDI_NODES, 1)
    prod = w[a] * w[b]
    keep = rng.random(len(a)) < np.minimum(1.0, DDI_EDGES / prod.sum() * prod)
    return Graph.from_edges(np.stack([a[keep], b[keep]], 1), num_nodes=DDI_NODES)


def _write_shard(path: Path, g, cand: np.ndarray, label: np.ndarray, d: int, n: int, block: int, seed: int) -> dict:
    from common.shards import Block, ShardWriter
    from preprocess.sampler import sample_subgraphs

    with atomic_file(path) as f:
        writer = ShardWriter(f)
        for lo in range(0, len(cand), block):
            c = cand[lo : lo + block]
            sub = sample_subgraphs(g.indptr, g.indices, c[:, 0], c[:, 1], d, n, seed + lo)
            writer.add(
                Block(np.arange(lo, lo + len(c)), c[:, 0], c[:, 1], label[lo : lo + block], sub.node_ptr, sub.nodes)
            )
        stats = writer.close()
    return stats


def build_ddi_set(
    out: Path, links: int = 3000, d: int = 1, n: int = 350, block: int = 256, seed: int = 0, eval_links: int = 200
) -> Path:
    """A v2 shard set sampled at (d, n) on ddi_graph(): one training shard of `links` links (half graph
    edges, half random pairs), valid/test sets of `eval_links` (a third positives, ranked against the
    rest as shared negatives), and the shipped graph. Reused when its manifest exists."""
    from common.presets import n_max
    from common.shards import (
        MANIFEST,
        encode_array,
        encode_queries,
        eval_shard_name,
        graph_entry,
        graph_names,
        open_storage,
        queries_name,
        train_shard_name,
        write_manifest,
    )

    if (out / MANIFEST).exists():
        return out
    g = ddi_graph(seed)
    rng = np.random.default_rng(seed + 1)

    def candidates(k: int) -> np.ndarray:
        cand = np.empty((k, 2), np.int64)
        cand[0::2] = g.edge_array()[rng.integers(0, g.num_edges, (k + 1) // 2)]
        cand[1::2] = rng.integers(0, g.num_nodes, (k // 2, 2))
        return cand

    out.mkdir(parents=True, exist_ok=True)
    storage = open_storage(out)
    records, sets, evals = [], [], {}

    def record(name, split, protocol, view, stats):
        records.append(
            {
                "name": name,
                "split": split,
                "protocol": protocol,
                "view": view,
                "links": stats["links"],
                "tokens": stats["tokens"],
                "blocks": stats["blocks"],
                "bytes": stats["bytes"],
                "sha256": stats["sha256"],
            }
        )
        sets.append(
            {"split": split, "protocol": protocol, "view": view, "graph": "train", "links": stats["links"], "shards": 1}
        )

    label = (np.arange(links) % 2 == 0).astype(np.float32)
    name = train_shard_name(0, 0)
    record(name, "train", None, 0, _write_shard(out / name, g, candidates(links), label, d, n, block, seed))
    for split in ("valid", "test"):
        n_pos = eval_links // 3
        cand = np.concatenate(
            [g.edge_array()[rng.integers(0, g.num_edges, n_pos)], rng.integers(0, g.num_nodes, (eval_links - n_pos, 2))]
        )
        label = np.r_[np.ones(n_pos), np.zeros(eval_links - n_pos)].astype(np.float32)
        name = eval_shard_name(split, "original", 0)
        record(name, split, "original", None, _write_shard(out / name, g, cand, label, d, n, block, seed + 7))
        cids = np.arange(eval_links)
        storage.write_atomic(queries_name(split, "original"), encode_queries(cids[:n_pos], cids[n_pos:]))
        evals[f"{split}/original"] = {
            "queries": queries_name(split, "original"),
            "kind": "shared",
            "metric": "mrr",
            "ogb": False,
        }
    for fname, arr in zip(graph_names("train"), (g.indptr, g.indices)):
        storage.write_atomic(fname, encode_array(arr))
    write_manifest(
        storage,
        {
            "dataset": "ddi-shaped",
            "key": "bench-loader",
            "num_nodes": g.num_nodes,
            "n_max": n_max(d, n),
            "sampling": {"d": d, "n": n},
            "views": 1,
            "graphs": {"train": graph_entry("train", g.indptr, g.indices)},
            "sets": sets,
            "shards": records,
            "eval": evals,
        },
    )
    return out


def find_citeseer(root: str = "/tmp/shards") -> str | None:
    sets = sorted(Path(root).glob("citeseer/*/manifest.json"), key=lambda p: p.stat().st_mtime)
    for m in reversed(sets):
        if json.loads(m.read_text()).get("sampling") == {"d": 2, "n": 20}:
            return str(m.parent)
    return None


# ---------------------------------------------------------------------------- form
def form_sweep(
    hidden: int = 128, size: int = 200, tokens: int = 8192, repeats: int = 3, device: str = "cpu"
) -> list[dict]:
    """Graph part of one batch in both forms, over densities; batches of `size`-node links.
    CPU: process CPU time of pack + forward + backward (the best of `repeats`). CUDA: wall time of the GPU part
    only, forward + backward under bf16 autocast as the trainer runs it, from the packed batch on the device
    (on a GPU the packing is the loader workers' job, done beside the step); the median of `repeats`."""
    import statistics

    import torch

    from common.induce import Inducer
    from common.shards import Block
    from trainer.data.packing import BatchPacker
    from trainer.model.propagation import Propagation, adjacency_embedding

    torch.manual_seed(0)
    cuda = device == "cuda"
    rows = []
    B = max(1, tokens // (size + 2))
    M = 2000
    for p in (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.46):
        rng = np.random.default_rng(1)
        a, b = np.triu_indices(M, 1)
        keep = rng.random(len(a)) < p
        from common.graph import Graph

        g = Graph.from_edges(np.stack([a[keep], b[keep]], 1), num_nodes=M)
        nodes = np.concatenate([rng.choice(M, size, replace=False) for _ in range(B)]).astype(np.int64)
        ptr = np.arange(B + 1, dtype=np.int64) * size
        block = Block(np.arange(B), nodes[ptr[:-1]], nodes[ptr[:-1] + 1], np.zeros(B, np.float32), ptr, nodes)
        w0 = torch.randn(size, hidden, device=device)
        lin = torch.nn.Linear(hidden, hidden).to(device)
        row = {
            "density": p,
            "size": size,
            "B": B,
            "estimate": float(Inducer(g.indptr, g.indices).entry_bound(ptr, nodes).sum()) / (B * size * size),
        }
        for form, md in (("sparse", 2.0), ("dense", 0.0)):
            packer = BatchPacker(g.indptr, g.indices, size, min_density=md)
            times = []
            for _ in range(repeats + cuda):  # on CUDA the first run is a warm-up
                t = time.process_time()
                batch = packer(block)
                if cuda:
                    batch = batch.to(device)
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                z0 = torch.randn(batch.num_tokens, hidden, requires_grad=True, device=device)
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
                    prop = Propagation(batch)
                    h = z0 + adjacency_embedding(batch, w0)
                    for _ in range(2):
                        h = h + torch.nn.functional.gelu(lin(prop(h)))
                h.float().sum().backward()
                if cuda:
                    torch.cuda.synchronize()
                times.append((time.perf_counter() if cuda else time.process_time()) - t)
            row[f"{form}_ms"] = (statistics.median(times[1:]) if cuda else min(times)) * 1e3
        row["dense_speedup"] = row["sparse_ms"] / row["dense_ms"]
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------- main
def table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    head = "| " + " | ".join(c[1] for c in cols) + " |"
    sep = "|" + "|".join("---:" for _ in cols) + "|"
    body = ["| " + " | ".join(format(r[c[0]], c[2]) if c[0] in r else "n/a" for c in cols) + " |" for r in rows]
    return "\n".join([head, sep, *body])


READ_COLS = [
    ("set", "set", "s"),
    ("token_budget", "token budget", ","),
    ("tokens_per_link", "tokens/link", ".0f"),
    ("bytes_per_link", "bytes/link", ",.0f"),
    ("tokens_per_s", "tokens/s (CPU)", ",.0f"),
    ("samples_per_s", "samples/s (CPU)", ",.0f"),
    ("batches", "batches", "d"),
    ("dense_batches", "dense batches", "d"),
    ("peak_rss_mb", "peak RSS MB", ".0f"),
]
WORKER_COLS = [
    ("set", "set", "s"),
    ("token_budget", "token budget", ","),
    ("prefetch", "prefetch", "d"),
    ("loader_memory_mb", "--loader-memory-mb", "d"),
    ("worker_processes", "workers seen", "d"),
    ("worker_peak_rss_mb", "worker peak RSS MB", ".0f"),
    ("worker_peak_uss_mb", "worker peak private MB", ".0f"),
]
FORM_COLS = [
    ("density", "edge density", ".3f"),
    ("estimate", "packer estimate", ".3f"),
    ("B", "B", "d"),
    ("size", "N", "d"),
    ("sparse_ms", "sparse ms", ".1f"),
    ("dense_ms", "dense ms", ".1f"),
    ("dense_speedup", "sparse/dense", ".2f"),
]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sections", default="reads,workers,form", help="comma-separated: reads, workers, form")
    p.add_argument("--citeseer", help="citeseer (2,20) shard set (default: the newest under /tmp/shards)")
    p.add_argument("--work", default="/tmp/bench-loader", help="where the ddi-shaped set is built (reused)")
    p.add_argument("--ddi-links", type=int, default=3000)
    p.add_argument("--seconds", type=float, default=10.0, help="CPU seconds of reads per set")
    p.add_argument("--token-budget", type=int, help="default: 64 average links")
    p.add_argument(
        "--form-device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="where the form sweep runs (auto: CUDA when available)",
    )
    args = p.parse_args(argv)
    sections = {s for s in args.sections.split(",") if s}
    if bad := sections - {"reads", "workers", "form"}:
        p.error(f"--sections: unknown {sorted(bad)} (choose from reads, workers, form)")
    if "reads" in sections:
        sets = []
        cs = args.citeseer or find_citeseer()
        if cs:
            sets.append(cs)
        else:
            print(
                "no citeseer (2,20) set found: build it with `python -m preprocess --dataset citeseer --sampling "
                "2,20 --views 2 --out /tmp/shards --num-cpus 1`, or pass --citeseer",
                file=sys.stderr,
            )
        t = time.perf_counter()
        sets.append(str(build_ddi_set(Path(args.work) / "ddi-shaped", links=args.ddi_links)))
        print(f"ddi-shaped set ready in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        rows = [run_child("bench.loader", "measure_training_reads", s, args.seconds, args.token_budget) for s in sets]
        print("### Training reads, one loader process (one core, CPU time)\n")
        print(table(rows, READ_COLS) + "\n")
    if "workers" in sections:
        # enough links that the 64 MB shuffle pool fills at ddi density (~5 KB per decoded link)
        big = str(build_ddi_set(Path(args.work) / "ddi-shaped-20k", links=20_000))
        rows = [run_child("bench.loader", "measure_workers", big, b) for b in (8192, 65536)]
        print("### Loader workers at ddi density (2 persistent workers, 3 epochs + valid evals)\n")
        print(table(rows, WORKER_COLS) + "\n")
    if "form" in sections:
        device = args.form_device
        if device == "auto":
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        # 65536: the GPU's default micro-batch (trainer.config_sections.GPU_MICRO_TOKENS)
        tokens = 8192 if device == "cpu" else 65536
        rows = run_child("bench.loader", "form_sweep", 128, 200, tokens, 3, device)
        clock = (
            "CPU time of pack + fwd + bwd"
            if device == "cpu"
            else "GPU wall time of fwd + bwd in bf16, packed batch given"
        )
        print(
            f"### Graph part of a batch: sparse vs dense form ({device}, hidden 128, 2 layers, {tokens} tokens; "
            f"{clock})\n"
        )
        print(table(rows, FORM_COLS) + "\n")
    return 0


if __name__ == "__main__":
    from common.cli import run_cli  # one-line errors; --debug for the traceback

    sys.exit(run_cli(main, prog="python bench/loader.py", strip_debug=True))
