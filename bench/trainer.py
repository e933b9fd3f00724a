"""Trainer benchmarks: forward+backward step time, packed vs padded, on realistic length distributions.

    python -m bench.trainer                       # CPU: small model (hidden 128), synthetic lengths, < ~3 min
    python -m bench.trainer --shards OUT/citeseer/<key>   # real lengths and edges from a shard set
    python -m bench.trainer --sections step --budget 65536 --hidden 512 --layers 8 --heads 8 --ffn 2048  # GPU

Each section is a function `section(args) -> (title, columns, rows)` registered in SECTIONS; main() runs
the requested ones and prints a table per section. Within a table every path is timed on the same
batches, interleaved (A B A B ...), and compared as ratios (docs/design.md: these machines are shared and
noisy; quote ratios, absolute times only from a GPU).

The step section compares the padded path (the BertLayer + SDPA over (B, L) with a key padding mask, the
paper's batching) with every other attention path that runs on the device (trainer/model/attention.py): on CPU
the packed reference and bucketed SDPA; on CUDA bucketed, varlen, flash_varlen and flash_attn. On CUDA it
also reports real tokens/s and model FLOPs utilisation (useful FLOPs on real tokens / peak).

The padded baseline is capped (--padded-cap, padded tokens B x L per forward): a 65,536-token budget of
citeseer-like samples pads to ~1.4 M tokens, whose (B, H, L, L) attention does not fit a 140 GB GPU. Above
the cap the padded step runs its batch in chunks with gradient accumulation (same maths, bounded memory).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/trainer.py` as well as `python -m bench.trainer`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from bench.workload import (
    DISTRIBUTIONS,
    make_step,
    peak_flops,
    print_table,
    shard_samples,
    step_flops,
    sync,
    synthetic_samples,
    token_batches,
)
from common.presets import n_max as budget_of
from trainer.data.packing import pack_samples as pack  # hand-built sample dicts
from trainer.model.attention import resolve_backend
from trainer.model.pencil import ModelConfig, Pencil


# ---------------------------------------------------------------------------- timing
def padded_chunks(samples: list[dict], cap: int) -> list[list[dict]]:
    """Split a batch, in order, into chunks whose padded size (count x longest N + 2) stays <= cap."""
    out, cur, longest = [], [], 0
    for s in samples:
        L = max(longest, len(s["nodes"]) + 2)
        if cur and (len(cur) + 1) * L > cap:
            out.append(cur)
            cur, L = [], len(s["nodes"]) + 2
        cur.append(s)
        longest = L
    return out + ([cur] if cur else [])


COMPILED = "+compile"  # a path name with this suffix runs the same kernel with the blocks torch.compile'd


def time_paths(
    model: Pencil, paths: list[str], batches: dict, device, amp: bool, repeats: int, clock=time.perf_counter
) -> dict[str, float | str]:
    """Median seconds per step for each attention path, interleaved over the same batches
    (batches[path][i]: the i-th step's batch for that path, a PackedBatch or a list of chunks).
    A path "X+compile" runs kernel X on a copy of the model with its blocks compiled (Pencil.compile_blocks,
    as `python -m trainer --compile`); its compile happens in the warm-up round, which is not timed. If it
    cannot compile here (no C compiler, an inductor error), its entry is the one-line reason instead of a
    time, and the other paths are still timed.
    clock=time.process_time measures CPU time, which holds on a shared, overloaded CPU box."""
    failed: dict[str, str] = {}
    compiled = None
    if any(p.endswith(COMPILED) for p in paths):
        try:
            compiled = copy.deepcopy(model).compile_blocks()
        except Exception as err:  # noqa: BLE001  (reported in the table, not raised)
            failed.update({p: _first_line(err) for p in paths if p.endswith(COMPILED)})
    steps = {}
    for m in (model, compiled):
        if m is not None:
            opt = torch.optim.AdamW(
                [p for p in m.parameters() if p.requires_grad], lr=1e-4, fused=device.type == "cuda"
            )
            steps[id(m)] = make_step(m, opt, device, amp)
    times = {p: [] for p in paths}
    for r in range(repeats + 1):  # round 0 is warm-up (kernel selection, allocator, compilation)
        for path in (p for p in paths if p not in failed):
            m = compiled if path.endswith(COMPILED) else model
            m.set_attention(path.removesuffix(COMPILED))
            for b in batches[path]:
                sync(device)
                t0 = clock()
                try:
                    steps[id(m)](b)
                except Exception as err:  # noqa: BLE001
                    if r or m is model:
                        raise
                    failed[path] = _first_line(err)  # the compiled path failed to build its kernels
                    break
                sync(device)
                if r:
                    times[path].append(clock() - t0)
    return {p: failed.get(p) or statistics.median(times[p]) for p in paths}


def _first_line(err: Exception) -> str:
    lines = [ln for ln in str(err).splitlines() if ln.strip()]
    return f"failed: {type(err).__name__}: {lines[0][:160] if lines else ''}"


def device_paths(device_type: str) -> list[str]:
    """sdpa (the padded baseline) first, then every other path that resolves to itself on this device."""
    paths = ["sdpa"]
    for p in ("reference", "bucketed", "varlen", "flash_varlen", "flash_attn"):
        if device_type == "cuda" and p == "reference":
            continue  # a Python loop per sample: a CPU parity tool, meaningless as a GPU timing
        try:
            if resolve_backend(p, device_type) == p:
                paths.append(p)
        except ValueError:
            pass  # not available here (kernel missing, wrong device)
    return paths


# ---------------------------------------------------------------------------- sections
def section_step(args):
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    paths = [p for p in device_paths(device.type) if not args.paths or p in args.paths.split(",")]
    if "sdpa" not in paths:
        paths.insert(0, "sdpa")  # the baseline every ratio is against
    if args.compile:  # the fastest packed kernels again, with the blocks compiled
        paths += [p + COMPILED for p in paths if p not in ("sdpa", "reference")]
    peak = peak_flops(device, args.peak_tflops)
    if args.shards:
        name, n_max, samples = shard_samples(args.shards, args.samples)
        sources = [(name, n_max, samples)]
    else:
        short = {d.split("(")[0]: d for d in DISTRIBUTIONS}  # "ogbl-collab" -> "ogbl-collab(1,75)"
        wanted = [short.get(d, d) for d in args.dists.split(",")] if args.dists else list(DISTRIBUTIONS)
        if bad := [d for d in wanted if d not in DISTRIBUTIONS]:
            raise SystemExit(f"--dists: unknown {bad}; choose from {', '.join(short)}")
        sources = [(d, budget_of(*DISTRIBUTIONS[d]), synthetic_samples(d, args.samples, args.seed)) for d in wanted]
    columns = ["lengths", "mean N", "max N", "B", "tokens", "padded", "path", "step ms", "vs padded"]
    if cuda:
        columns += ["tokens/s", "MFU"]
    rows = []
    for name, n_max, samples in sources:
        torch.manual_seed(args.seed)
        model = (
            Pencil(
                ModelConfig(
                    n_max=n_max,
                    hidden=args.hidden,
                    layers=args.layers,
                    heads=args.heads,
                    ffn=args.ffn,
                    dropout=0.0,
                    attention="sdpa",
                )
            )
            .to(device)
            .train()
        )
        batches = token_batches(samples, args.budget)[: args.batches]
        packed = [pack(b, n_max).to(device) for b in batches]
        lens = [np.diff(p.cu_seqlens.cpu().numpy()) for p in packed]
        N = np.concatenate([[len(s["nodes"]) for s in b] for b in batches])
        real = float(np.mean([ln.sum() for ln in lens]))
        padded = float(np.mean([len(ln) * ln.max() for ln in lens]))
        per_path = {p: packed for p in paths}
        chunked = args.padded_cap and padded > args.padded_cap
        if chunked:
            per_path["sdpa"] = [[pack(c, n_max).to(device) for c in padded_chunks(b, args.padded_cap)] for b in batches]
        secs = time_paths(
            model,
            paths,
            per_path,
            device,
            amp=cuda,
            repeats=args.repeats,
            clock=time.process_time if args.clock == "cpu" else time.perf_counter,
        )
        flops = float(np.mean([step_flops(model, ln) for ln in lens]))
        for path in paths:
            row = [
                name,
                f"{N.mean():.1f}",
                int(N.max()),
                f"{np.mean([len(b) for b in batches]):.0f}",
                f"{real:.0f}",
                f"{padded:.0f}",
                path,
            ]
            if isinstance(secs[path], str):  # a compiled path that could not be built here: the reason
                rows.append(row + [secs[path]])
                continue
            row += [f"{secs[path] * 1e3:.1f}", f"{secs['sdpa'] / secs[path]:.2f}x"]
            if cuda:
                row += [f"{real / secs[path]:.3g}", f"{flops / secs[path] / peak:.1%}" if peak else "n/a"]
            rows.append(row)
    title = (
        f"step time (forward+backward+AdamW), {device.type}, hidden {args.hidden}, layers {args.layers}, "
        f"heads {args.heads}, ffn {args.ffn}, token budget {args.budget}, {'bf16 autocast' if cuda else 'fp32'}; "
        f"'vs padded' > 1 means faster than padded SDPA; {args.clock} time"
        + ("; X+compile = kernel X with the blocks torch.compile'd (--compile)" if args.compile else "")
        + (f" (padded baseline in chunks of <= {args.padded_cap} padded tokens)" if args.padded_cap else "")
    )
    return title, columns, rows


SECTIONS = {"step": section_step}  # other sections (e.g. "loader") register here


# ---------------------------------------------------------------------------- loader throughput
def _loader_shard_set(args, tmp: str) -> str:
    """args.shards: the loader section reads a real (shard format v2) set; `python -m bench.loader` builds
    its own synthetic sets when none is at hand."""
    if not args.shards:
        raise SystemExit(
            "--sections loader needs --shards (a preprocessed set); python -m bench.loader "
            "benchmarks the loader on built-in synthetic sets"
        )
    return args.shards


def section_loader(args):
    """trainer.data.stream's training stream (decode, shuffle, relabel, token batching, pack) in loader worker
    processes, against what the model consumes on the same batches: 'vs model' > 1 means the loader keeps up."""
    import os
    import tempfile

    from common.shards import read_manifest
    from trainer.config_sections import DataConfig
    from trainer.data import loaders

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    with tempfile.TemporaryDirectory() as tmp:
        manifest = read_manifest(_loader_shard_set(args, tmp))
        n_max = manifest.n_max
        # model consumption on the loader's own first batches (sdpa path, as the trainer runs it)
        torch.manual_seed(args.seed)
        model = (
            Pencil(
                ModelConfig(
                    n_max=n_max, hidden=args.hidden, layers=args.layers, heads=args.heads, ffn=args.ffn, dropout=0.0
                )
            )
            .to(device)
            .train()
        )
        cfg0 = DataConfig(
            shards=manifest.root,
            max_samples=1 << 20,
            token_budget=args.budget,
            shuffle_buffer_mb=64,
            num_workers=0,
            seed=args.seed,
        )
        first = [
            b.to(device)
            for b, _ in zip(loaders.train_loader(manifest, 0, loaders.LoaderSettings(cfg0))[0], range(args.batches))
        ]
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        step = make_step(model, opt, device, amp=device.type == "cuda")
        step(first[0])  # warm-up
        sync(device)
        t0 = time.perf_counter()
        for _ in range(args.repeats):
            for b in first:
                step(b)
        sync(device)
        model_tps = sum(b.num_tokens for b in first) * args.repeats / (time.perf_counter() - t0)
        rows = [["model step", "-", "-", "-", f"{model_tps:.3g}", "1.00x"]]
        for workers in sorted({0, 1, 2, min(8, os.cpu_count() or 1)}):
            cfg = DataConfig(
                shards=manifest.root,
                max_samples=1 << 20,
                token_budget=args.budget,
                shuffle_buffer_mb=64,
                num_workers=workers,
                seed=args.seed,
            )
            loader, plan = loaders.train_loader(manifest, 0, loaders.LoaderSettings(cfg))
            t0 = time.perf_counter()
            samples = tokens = 0
            for b in loader:  # includes worker start-up, as every epoch pays it
                samples += b.num_samples
                tokens += b.num_tokens
            dt = time.perf_counter() - t0
            rows.append(
                [
                    f"loader, {workers} workers",
                    plan.batches,
                    f"{samples / dt:.3g}",
                    f"{dt:.2f}",
                    f"{tokens / dt:.3g}",
                    f"{tokens / dt / model_tps:.2f}x",
                ]
            )
    title = (
        f"loader vs model, {device.type}, token budget {args.budget}, {manifest.get('dataset', 'shards')} "
        f"(N_max {n_max}), model hidden {args.hidden} x {args.layers} layers; one epoch of one rank"
    )
    return title, ["path", "batches", "samples/s", "epoch s", "tokens/s", "vs model"], rows


SECTIONS["loader"] = section_loader


def parse_args(argv=None):
    cuda = torch.cuda.is_available()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default="step", help=f"comma-separated, from: {', '.join(SECTIONS)}")
    ap.add_argument("--shards", help="a preprocessed shard set (OUT/<dataset>/<key>): real lengths and edges")
    ap.add_argument("--device", help="cuda / cpu (default: cuda when available)")
    ap.add_argument("--hidden", type=int, default=512 if cuda else 128)
    ap.add_argument("--layers", type=int, default=8 if cuda else 2)
    ap.add_argument("--heads", type=int, default=8 if cuda else 4)
    ap.add_argument("--ffn", type=int, default=2048 if cuda else 256)
    ap.add_argument("--budget", type=int, default=65536 if cuda else 2048, help="tokens per batch")
    ap.add_argument("--samples", type=int, default=6000 if cuda else 800, help="samples drawn per distribution")
    ap.add_argument("--batches", type=int, default=8 if cuda else 3, help="batches timed per round")
    ap.add_argument("--repeats", type=int, default=5 if cuda else 2, help="timed rounds after one warm-up")
    ap.add_argument("--peak-tflops", type=float, help="device peak for MFU (default: looked up by GPU name)")
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall" if cuda else "cpu",
        help="wall (perf_counter; GPUs) or cpu (process CPU time with one torch thread: holds on a "
        "shared CPU box; default on CPU)",
    )
    ap.add_argument(
        "--dists",
        help="comma-separated synthetic length distributions used without --shards: "
        f"{', '.join(d.split('(')[0] for d in DISTRIBUTIONS)} (default: all)",
    )
    ap.add_argument("--paths", help="comma-separated attention paths to time (default: all that run here)")
    ap.add_argument(
        "--compile",
        action="store_true",
        help="also time every packed path with the blocks torch.compile'd (the trainer's --compile)",
    )
    ap.add_argument(
        "--padded-cap",
        type=int,
        default=131072 if cuda else 0,
        help="padded tokens (B x L) per forward of the padded baseline; larger batches run in "
        "accumulated chunks (default 131072 on CUDA: ~25 GB of activations at 512 x 8; 0 = no cap)",
    )
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.clock == "cpu":
        torch.set_num_threads(1)  # process CPU time = step time only with one compute thread
    for name in args.sections.split(","):
        if name not in SECTIONS:
            raise SystemExit(f"unknown section '{name}'; choose from {', '.join(SECTIONS)}")
        print_table(*SECTIONS[name](args))


if __name__ == "__main__":
    from common.cli import run_cli  # one-line errors; --debug for the traceback

    sys.exit(run_cli(main, prog="python bench/trainer.py", strip_debug=True))
