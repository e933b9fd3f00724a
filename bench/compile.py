"""Does torch.compile pay for PENCIL's dense per-token work? (with dynamic token counts)

    python -m bench.compile                                   # CPU: hidden 128, FFN 256
    python -m bench.compile --hidden 512 --ffn 2048 --tokens 16384,24576,65536   # GPU (bf16 autocast)

What is timed, forward + backward, in training mode (dropout on): everything of one block that is neither
the attention kernel (a custom op per backend, trainer/model/attention.py) nor the graph scatter, i.e. BERT's
attention-output dense + dropout + LayerNorm, the GELU feed-forward with its dropout + LayerNorm, and
PENCIL's P_k = Linear + GELU on the aggregated states. These are the pointwise-heavy pieces a compiler could
fuse. The compiled version is `torch.compile(dynamic=True)`, so the changing token count of packed batches
does not recompile it; its first call per shape class is reported separately (compile seconds). The
trainer compiles these pieces with `--compile` (trainer.model.pencil.Pencil.compile_blocks, off by default);
`python -m bench.trainer --compile` times whole training steps with it.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/compile.py` as well as `python -m bench.compile`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from trainer.model.pencil import EncoderLayer, ModelConfig


def dense_part(block: EncoderLayer):
    """(a, h, g) -> block output without attention and scatter: a = attention output (T, d), h = block input,
    g = the aggregated states Â Z (T, d) stand-in."""
    bert = block.bert

    def f(a, h, g):
        z = bert.feed_forward_chunk(bert.attention.output(a, h))
        return z + block.prop(g)

    return f


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_fn(f, tokens: int, hidden: int, device, amp, repeats: int) -> float:
    """Median ms of forward + backward at `tokens` tokens."""
    xs = [torch.randn(tokens, hidden, device=device, requires_grad=True) for _ in range(3)]
    times = []
    for i in range(repeats + 2):
        _sync(device)
        t = time.perf_counter()
        with amp():
            out = f(*xs)
        out.float().sum().backward()
        _sync(device)
        if i >= 2:  # warm-up
            times.append(1e3 * (time.perf_counter() - t))
    return sorted(times)[len(times) // 2] if times else float("nan")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.compile", description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=256)
    ap.add_argument("--tokens", default="2048,3000,4096", help="comma-separated token counts per batch")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    args = ap.parse_args(argv)
    device = torch.device(
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else "cpu"
        if args.device == "auto"
        else args.device
    )
    torch.manual_seed(0)
    block = (
        EncoderLayer(ModelConfig(n_max=2, hidden=args.hidden, layers=1, heads=args.heads, ffn=args.ffn))
        .to(device)
        .train()
    )
    eager = dense_part(block)
    compiled = torch.compile(eager, dynamic=True)
    amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else contextlib.nullcontext
    rows = []
    for tokens in (int(t) for t in args.tokens.split(",")):
        t0 = time.perf_counter()
        time_fn(compiled, tokens, args.hidden, device, amp, 0)  # first calls: compile (once per shape class)
        first = time.perf_counter() - t0
        e, c = (
            time_fn(eager, tokens, args.hidden, device, amp, args.repeats),
            time_fn(compiled, tokens, args.hidden, device, amp, args.repeats),
        )
        rows.append([tokens, f"{e:.2f}", f"{c:.2f}", f"{e / c:.2f}x", f"{first:.1f}"])
    print(
        f"\n### torch.compile of the block's dense part ({device}, hidden {args.hidden}, FFN {args.ffn}"
        f"{', bf16 autocast' if device.type == 'cuda' else ''}; fwd + bwd, median of {args.repeats})\n"
    )
    print("| tokens | eager ms | compiled ms | speed-up | first call s (compile) |\n|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(map(str, r)) + " |")


if __name__ == "__main__":
    main()
