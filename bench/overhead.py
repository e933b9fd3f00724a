"""What a micro-step costs the host, whatever its size: operator calls and host time of PENCIL's forward +
backward at a width where the arithmetic is negligible (why GPU micro-batches are sized by tokens).

    python -m bench.overhead                    # the device's default attention path, eager and --compile

Each operator call is a kernel launch on a GPU (or several), prepared by Python, the dispatcher and
autograd on the host. When a micro-step's kernels run faster than the host issues them, the GPU waits:
the step costs (calls x host time per call) however few tokens it holds. Counted here with the torch
profiler (outermost aten calls only, so a composite op counts once), per step and per extra layer, with
the host time of one step (median) at hidden 16: that time is almost all overhead. Divide it into the
step bench's time at real widths to see how much of a real step the host alone accounts for.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/overhead.py` as well as `python -m bench.overhead`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch.profiler import ProfilerActivity, profile

from bench.workload import DISTRIBUTIONS, print_table, synthetic_samples
from common.presets import n_max as budget_of
from trainer.data.packing import pack_samples
from trainer.model.pencil import ModelConfig, Pencil


def outermost_aten_calls(fn) -> int:
    """aten operator calls made by fn() that no other aten call made (what the host dispatches itself)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(
        1
        for e in prof.events()
        if e.name.startswith("aten::") and not (e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::"))
    )


def measure(layers: int, compiled: bool, batch, n_max: int, device, repeats: int) -> tuple[int, float, str]:
    """(operator calls, median host ms, attention path) of one forward + backward."""
    torch.manual_seed(0)
    model = Pencil(ModelConfig(n_max=n_max, hidden=16, layers=layers, heads=2, ffn=64, dropout=0.1)).to(device).train()
    if compiled:
        model.compile_blocks()

    def step():
        model.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            out = model(batch)
        model.loss(out, batch.label).backward()

    for _ in range(3):  # warm-up (and the compile)
        step()
    calls = outermost_aten_calls(step)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(1e3 * (time.perf_counter() - t0))
    return calls, statistics.median(times), model.attention_backend


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="1,2,8", help="comma-separated layer counts")
    ap.add_argument("--samples", type=int, default=8, help="collab-like samples in the batch")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)
    dist = "ogbl-collab(1,75)"
    n_max = budget_of(*DISTRIBUTIONS[dist])
    batch = pack_samples(synthetic_samples(dist, args.samples, 0), n_max).to(device)
    layer_counts = [int(x) for x in args.layers.split(",")]
    rows = []
    for compiled in (False,) if args.no_compile else (False, True):
        try:
            res = {n: measure(n, compiled, batch, n_max, device, args.repeats) for n in layer_counts}
        except Exception as err:  # noqa: BLE001  (no compiler here, an inductor error: report it, keep eager)
            if not compiled:
                raise
            rows.append(["+compile", f"failed: {type(err).__name__}: {str(err).strip().splitlines()[0][:160]}"])
            continue
        lo, hi = min(layer_counts), max(layer_counts)
        per_layer = (res[hi][0] - res[lo][0]) / max(hi - lo, 1)
        for n, (calls, ms, path) in res.items():
            rows.append(
                [
                    path + ("+compile" if compiled else ""),
                    n,
                    calls,
                    f"{per_layer:.0f}",
                    f"{ms:.2f}",
                    f"{1e3 * ms / calls:.1f}",
                ]
            )
    print_table(
        f"host cost of one forward + backward, {device.type}, hidden 16 ({batch.num_tokens} tokens: "
        "negligible arithmetic), collab-like samples; calls = outermost aten operator calls",
        ["path", "layers", "calls", "calls per extra layer", "host ms", "µs per call"],
        rows,
    )


if __name__ == "__main__":
    main()
