"""Where a training step's time goes, by kind of operator: the profile behind an MFU number
(an MFU below target is explained by the measured gap and this profile).

    python -m bench.step_profile             # collab-like lengths, 512 x 8 (on a GPU)
    python -m bench.step_profile --shards SET --hidden 1024 --layers 2 --heads 8 --ffn 2048   # citeseer's paper model

For every token budget, one training step (forward + backward + AdamW, with the trainer's default attention
path, dropout and bf16 autocast) is timed without the profiler, then profiled. The device's time is split
over kinds of operator (KINDS below), and its busy time is set against the unprofiled wall time:

  busy / wall well below 1    the GPU waits for the host: too many small kernels per token (launch-bound)
  a small matmul share        the time goes to memory-bound kernels that carry no model FLOPs
  matmul TFLOP/s              whether the GEMMs themselves run well

On a GPU a kind's time is the time of the kernels its operators launched (each kernel belongs to the
innermost operator that launched it); what no operator owns is a row of its own. On CPU the "device" is the
CPU, with one thread: a kind's time is its operators' self CPU time, and the time spent outside any operator
(the autograd engine, Python) is a row of its own, HOST. Anything under the optimiser's step is OPTIMIZER.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):  # `python bench/step_profile.py` as well as `python -m bench.step_profile`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from bench.workload import (
    DISTRIBUTIONS,
    attention_flops,
    make_step,
    matmul_flops,
    peak_flops,
    print_table,
    shard_samples,
    synthetic_samples,
    token_batches,
)
from common.presets import n_max as budget_of
from trainer.data.packing import pack_samples as pack  # hand-built sample dicts
from trainer.model.pencil import ModelConfig, Pencil

MATMUL, ATTENTION, GATHER, NORM, ACTIVATION, ELEMENTWISE, COPY, REDUCTION, VIEW = (
    "matmul",
    "attention",
    "gather/scatter",
    "layernorm",
    "gelu/dropout",
    "other elementwise",
    "copy/fill/cast",
    "reduction",
    "view (no kernel)",
)
# One device (or one CPU thread) cannot be busy for longer than the step lasts: a profiled busy time above
# the unprofiled wall time (beyond the profiler's own overhead and timing noise) means events are counted twice
# or belong to other work; the summary marks such a row "(!)". (A threshold of the bench, not of the tests.)
BUSY_OVER_WALL = 2.0
OPTIMIZER, HOST, UNATTRIBUTED = "optimizer", "outside operators", "kernels of no operator"
KINDS = (MATMUL, ATTENTION, GATHER, NORM, ACTIVATION, ELEMENTWISE, COPY, REDUCTION, VIEW, OPTIMIZER, HOST, UNATTRIBUTED)
_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "scaled_mm", "addmv", "mv", "dot"}
_GATHER = {
    "gather",
    "scatter",
    "scatter_add",
    "embedding",
    "embedding_dense_backward",
    "take",
    "nonzero",
    "masked_select",
    "masked_scatter",
    "unsafe_index",
    "unsafe_index_put",
}
_COPY = {
    "copy",
    "to_copy",
    "to",
    "clone",
    "contiguous",
    "cat",
    "stack",
    "fill",
    "zero",
    "zeros",
    "zeros_like",
    "new_zeros",
    "ones",
    "ones_like",
    "new_ones",
    "full",
    "full_like",
    "new_full",
    "empty",
    "empty_like",
    "new_empty",
    "empty_strided",
    "local_scalar_dense",
    "constant_pad_nd",
    "repeat",
    "split_with_sizes_copy",
}
_VIEW = {
    "view",
    "_unsafe_view",
    "reshape",
    "_reshape_alias",
    "view_as",
    "transpose",
    "t",
    "permute",
    "expand",
    "expand_as",
    "as_strided",
    "slice",
    "select",
    "narrow",
    "squeeze",
    "unsqueeze",
    "detach",
    "alias",
    "split",
    "split_with_sizes",
    "unbind",
    "chunk",
    "flatten",
    "unflatten",
    "resolve_conj",
    "resolve_neg",
    "lift_fresh",
}
_REDUCTION = {
    "sum",
    "mean",
    "max",
    "min",
    "amax",
    "amin",
    "norm",
    "linalg_vector_norm",
    "argmax",
    "sort",
    "argsort",
    "cumsum",
    "var",
    "std",
    "prod",
    "any",
    "all",
}


def kind_of(op: str) -> str:
    """The kind of a profiler event, by its name: an aten operator's, or HOST for anything else (autograd
    engine nodes, record_function scopes, Python). In-place variants (add_) count with their operator."""
    if not op.startswith("aten::"):
        return HOST
    name = op.removeprefix("aten::").rstrip("_")
    if name in _VIEW:
        return VIEW  # metadata only: host time, never a kernel
    name = name.lstrip("_")  # _index_put_impl, _to_copy, _fused_adamw: private variants count with their kind
    if any(s in name for s in ("attention", "flash", "varlen", "softmax")):
        return ATTENTION  # the kernels, and on CPU the softmax of SDPA's math path and of the reference
    if name in _MATMUL:
        return MATMUL
    if name.startswith("index") or name in _GATHER:  # index, index_select, index_add, index_put(_impl), index_copy
        return GATHER
    if "layer_norm" in name:
        return NORM
    if "gelu" in name or "dropout" in name or name == "bernoulli":
        return ACTIVATION
    if name in _COPY:
        return COPY
    if name in _REDUCTION:
        return REDUCTION
    return ELEMENTWISE  # add, mul, div, where, the loss, ...


def _under_optimizer(event) -> bool:
    while event is not None:
        if event.name.startswith("Optimizer."):  # torch.optim's record_function scopes: step and zero_grad
            return True
        event = event.cpu_parent
    return False


def _annotation(event) -> bool:
    """A record_function scope's span on the device timeline (kineto's gpu_user_annotation, e.g.
    'Optimizer.step#AdamW.step' on CUDA): it covers kernels that are events of their own, so counting it as
    device time counts them twice (seen on an H200: 0.13 of a 0.69 ms step)."""
    return bool(getattr(event, "is_user_annotation", False)) and event.device_type != DeviceType.CPU


def attribute(events, on_device: bool) -> tuple[dict[str, list[float]], float, int]:
    """({kind: [µs, count]}, busy µs, kernels or operator calls) over profiled events.
    on_device: a kind's µs are its operators' own kernels and its count their kernels; busy is every kernel
    and copy the device ran, and the part no operator owns is UNATTRIBUTED. Otherwise (CPU): µs are self CPU
    times, the count is aten calls, and busy is their sum."""
    kinds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    busy, count = 0.0, 0
    for e in events:
        if _annotation(e):
            continue
        if e.device_type != DeviceType.CPU:  # a kernel or a copy on the device
            if on_device:
                busy += e.time_range.elapsed_us()
                count += 1
            continue
        if e.is_async or (on_device and not e.kernels):
            continue
        if on_device:
            own, n = sum(k.duration for k in e.kernels), len(e.kernels)
        else:
            own, n = e.self_cpu_time_total, int(e.name.startswith("aten::"))
            busy += own
            count += n
        row = kinds[OPTIMIZER if _under_optimizer(e) else kind_of(e.name)]
        row[0] += own
        row[1] += n
    if on_device:
        rest = busy - sum(v[0] for v in kinds.values())
        if abs(rest) > 1e-6 * max(busy, 1.0):
            kinds[UNATTRIBUTED] = [rest, count - sum(v[1] for v in kinds.values())]
    return dict(kinds), busy, count


def unowned_kernels(events, top: int = 5) -> list[tuple[str, float]]:
    """[(kernel name, µs)] of the device time no operator owns (attribute's UNATTRIBUTED), largest first: the
    device's kernels by name minus those the counted operators launched, so a gap in the kinds has names."""
    ran: dict[str, float] = defaultdict(float)
    for e in events:
        if _annotation(e):
            continue
        if e.device_type != DeviceType.CPU:
            ran[e.name] += e.time_range.elapsed_us()
        elif not e.is_async:
            for k in e.kernels:
                ran[k.name] -= k.duration
    rest = sorted(((n, us) for n, us in ran.items() if us > 1e-6), key=lambda x: -x[1])
    return rest[:top]


def measure(model: Pencil, batches: list, device: torch.device, repeats: int, steps: int) -> dict:
    """Wall ms per step (median, unprofiled) and the profile of `steps` steps, on batches taken in turn."""
    cuda = device.type == "cuda"
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, fused=cuda)
    step, turn = make_step(model, opt, device, amp=cuda), itertools.cycle(batches)

    def run_one():
        step(next(turn))

    for _ in range(2):  # warm-up: kernel selection, the allocator
        run_one()
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    wall = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run_one()
        if cuda:
            torch.cuda.synchronize(device)
        wall.append(time.perf_counter() - t0)
    peak_gb = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for _ in range(steps):
            run_one()
        if cuda:
            torch.cuda.synchronize(device)
    events = prof.events()
    kinds, busy, count = attribute(events, on_device=cuda)
    unowned = [(n, us / steps / 1e3) for n, us in unowned_kernels(events)] if cuda else []
    return dict(
        wall_ms=1e3 * statistics.median(wall),
        kinds={k: (v[0] / steps / 1e3, v[1] / steps) for k, v in kinds.items()},
        busy_ms=busy / steps / 1e3,
        count=count / steps,
        peak_gb=peak_gb,
        unowned=unowned,
    )


def budget_rows(model: Pencil, samples: list[dict], n_max: int, budget: int, device, args, peak) -> tuple[list, list]:
    """(summary row, per-kind rows) of one token budget."""
    batches = token_batches(samples, budget)[: max(args.repeats, args.steps)]
    packed = [pack(b, n_max).to(device) for b in batches]
    per_step = [np.array([len(s["nodes"]) + 2 for s in b]) for b in batches]  # sequence lengths of each step
    tokens, links = float(np.mean([ln.sum() for ln in per_step])), float(np.mean([len(ln) for ln in per_step]))
    try:
        m = measure(model, packed, device, args.repeats, args.steps)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return [budget, f"{tokens:.0f}", f"{links:.0f}", "out of memory"], []
    mm = float(np.mean([matmul_flops(model, float(ln.sum())) for ln in per_step]))
    att = float(np.mean([attention_flops(model, ln) for ln in per_step]))
    flops = mm + att
    summary = [
        budget,
        f"{tokens:.0f}",
        f"{links:.0f}",
        f"{m['wall_ms']:.1f}",
        f"{m['busy_ms']:.1f}",
        f"{m['busy_ms'] / m['wall_ms']:.0%}" + ("  (!)" if m["busy_ms"] > BUSY_OVER_WALL * m["wall_ms"] else ""),
        f"{m['count']:.0f}",
        f"{tokens / m['wall_ms'] * 1e3:.3g}",
    ]
    if m["peak_gb"] is not None:  # CUDA
        summary += [
            f"{flops / (m['wall_ms'] / 1e3) / peak:.1%}" if peak else "n/a",
            f"{flops / (m['busy_ms'] / 1e3) / peak:.1%}" if peak else "n/a",
            f"{m['peak_gb']:.1f}",
        ]
    if m["unowned"]:  # name the kernels behind UNATTRIBUTED, so a gap in the kinds can be chased
        print(
            f"budget {budget}: kernels of no operator (ms per step): "
            + ", ".join(f"{n[:60]} {ms:.3f}" for n, ms in m["unowned"])
        )
    rows = []
    for kind in KINDS:
        if kind not in m["kinds"]:
            continue
        ms, n = m["kinds"][kind]
        rate = {MATMUL: mm, ATTENTION: att}.get(kind)
        rows.append(
            [
                budget,
                kind,
                f"{ms:.2f}",
                f"{ms / m['busy_ms']:.1%}",
                f"{n:.0f}",
                f"{rate / (ms / 1e3) / 1e12:.3g}" if rate and ms > 0 else "",
            ]
        )
    return summary, rows


def parse_args(argv=None):
    cuda = torch.cuda.is_available()
    ap = argparse.ArgumentParser(prog="python -m bench.step_profile", description=__doc__.splitlines()[0])
    ap.add_argument("--shards", help="a preprocessed shard set: real lengths and edges (default: synthetic --dist)")
    ap.add_argument(
        "--dist",
        default="ogbl-collab",
        help=f"synthetic lengths without --shards: {', '.join(d.split('(')[0] for d in DISTRIBUTIONS)}",
    )
    ap.add_argument("--device", help="cuda / cpu (default: cuda when available)")
    ap.add_argument("--hidden", type=int, default=512 if cuda else 64)
    ap.add_argument("--layers", type=int, default=8 if cuda else 2)
    ap.add_argument("--heads", type=int, default=8 if cuda else 4)
    ap.add_argument("--ffn", type=int, default=2048 if cuda else 256)
    ap.add_argument(
        "--budgets",
        default="16384,65536" if cuda else "1024,4096",
        help="comma-separated tokens per step (the trainer's GPU micro-batch: 65536)",
    )
    ap.add_argument("--dropout", type=float, default=0.1, help="the paper's model: 0.1 (attention path chosen for it)")
    ap.add_argument("--attention", default="auto", help="attention path (default: the trainer's choice)")
    ap.add_argument("--samples", type=int, default=4000 if cuda else 400, help="samples drawn (batches reuse them)")
    ap.add_argument("--repeats", type=int, default=5, help="unprofiled steps timed (median)")
    ap.add_argument("--steps", type=int, default=3, help="profiled steps")
    ap.add_argument("--peak-tflops", type=float, help="device peak for MFU (default: looked up by GPU name)")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu":
        torch.set_num_threads(1)  # self CPU times of one thread add up to the step
    if args.shards:
        name, n_max, samples = shard_samples(args.shards, args.samples)
    else:
        short = {d.split("(")[0]: d for d in DISTRIBUTIONS}
        if args.dist not in short:
            raise SystemExit(f"--dist: unknown '{args.dist}'; choose from {', '.join(short)}")
        name = short[args.dist]
        n_max = budget_of(*DISTRIBUTIONS[name])
        samples = synthetic_samples(name, args.samples, args.seed)
    torch.manual_seed(args.seed)
    model = (
        Pencil(
            ModelConfig(
                n_max=n_max,
                hidden=args.hidden,
                layers=args.layers,
                heads=args.heads,
                ffn=args.ffn,
                dropout=args.dropout,
                attention=args.attention,
            )
        )
        .to(device)
        .train()
    )
    peak = peak_flops(device, args.peak_tflops)
    cuda = device.type == "cuda"
    summaries, kinds = [], []
    for budget in (int(b) for b in args.budgets.split(",")):
        s, k = budget_rows(model, samples, n_max, budget, device, args, peak)
        summaries.append(s)
        kinds += k
    what = (
        f"{name}, hidden {args.hidden} x {args.layers} layers, heads {args.heads}, ffn {args.ffn}, dropout "
        f"{args.dropout}, attention {model.attention_backend}, {device.type}"
        + (", bf16 autocast" if cuda else ", fp32, one thread")
    )
    cols = [
        "budget",
        "tokens",
        "links",
        "wall ms",
        "busy ms",
        "busy/wall",
        "kernels" if cuda else "aten calls",
        "tokens/s",
    ] + (["MFU", "MFU if busy", "peak GB"] if cuda else [])
    print_table(
        f"profile: one step (forward+backward+AdamW), {what}; busy = device time in kernels (CPU: in operators)",
        cols,
        summaries,
    )
    if any(str(s[5]).endswith("(!)") for s in summaries if len(s) > 5):
        print(
            f"(!) busy time above {BUSY_OVER_WALL:g} x the step's wall time: the attribution counts something twice "
            "or another process's work; do not trust that row's kinds"
        )
    print_table(
        "profile by kind of operator (ms per step, share of busy time; TFLOP/s of the model's useful "
        "FLOPs of that kind)",
        ["budget", "kind", "ms", "share", "kernels" if cuda else "calls", "TFLOP/s"],
        kinds,
    )


if __name__ == "__main__":
    from common.cli import run_cli  # one-line errors; --debug for the traceback

    sys.exit(run_cli(main, prog="python -m bench.step_profile", strip_debug=True))
