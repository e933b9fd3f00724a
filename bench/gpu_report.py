"""The Markdown report of bench/gpu_check.sh, built from the logs and run folders in its OUT.

    python bench/gpu_report.py OUT SEEDS BUDGET_S "| step | status | seconds |" ...

gpu_check.sh calls it after every step, so the report on disk always holds everything finished so far: a
device call cut off by its time limit still brings back a report.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from common.atomic import write_text_atomic
from common.cli import Parser, run_cli

TABLE_STARTS = ("step time", "profile", "host cost", "loader vs model", "reads", "form", "#", "|")
RUNS = (
    ("citeseer", "Citeseer, paper preset, seeds in parallel on one GPU"),
    ("citeseer-varlen", "A/B: the same seeds with --attention varlen (no attention dropout), run alongside"),
)
BENCHES = (
    ("step-citeseer", "Step bench, real citeseer shards, paper model 1024 x 2"),
    ("step-collab", "Step bench, collab-like lengths, 512 x 8"),
    ("profile-collab", "Profile of one step, collab-like lengths, 512 x 8: device time by kind of operator"),
    ("profile-citeseer", "Profile of one step, real citeseer shards, paper model 1024 x 2"),
    ("host-overhead", "Host cost of a micro-step (operator calls, host ms at negligible arithmetic)"),
    ("loader-vs-model", "Loader vs model"),
)


def log(out: Path, name: str) -> str | None:
    p = out / f"{name}.log"
    return p.read_text(errors="replace") if p.exists() else None


def tables(text: str) -> str:
    """The bench's printed tables (title line, header, rows), without the progress noise."""
    keep, on = [], False
    for line in text.splitlines():
        if line.startswith(TABLE_STARTS) or (on and line.strip()):
            keep.append(line)
            on = True
        elif on and not line.strip():
            on = False
            keep.append("")
    return "\n".join(keep).strip() or text[-3000:]


def device() -> tuple[str, str]:
    try:
        import torch
    except Exception as err:  # the report is still written
        return "unknown", f"torch not importable: {err}"
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA"
    return gpu, f"torch {torch.__version__}, CUDA {torch.version.cuda}"


def bench_tokens_per_s(text: str) -> dict[str, float]:
    """path -> tokens/s from a CUDA step-bench table (columns ... path, step ms, vs padded, tokens/s, MFU)."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 11 and f[-1].endswith("%"):
            try:
                out[f[6]] = float(f[9])
            except ValueError:
                pass
    return out


def records(metrics: Path) -> list[dict]:
    """A metrics.jsonl's records; a run killed mid-write may leave its last line cut, which is skipped."""
    out = []
    for line in metrics.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def loop_vs_bench(out: Path) -> list[str]:
    """The training loop's tokens/s (python -m trainer, alone on the GPU, the bench's token budget) against the
    step bench's for the same attention kernel: the goal is >= 80 %."""
    metrics, summary = out / "loop" / "metrics.jsonl", out / "loop" / "summary.json"
    if not metrics.exists():
        return []
    tps = [r["tokens_per_s"] for r in records(metrics) if r.get("event") == "train"][
        1:
    ]  # the first window holds the warm-up
    backend = json.loads(summary.read_text()).get("attention_backend") if summary.exists() else None
    bench = bench_tokens_per_s(log(out, "step-citeseer") or "")
    lines = ["## Training loop vs the step bench (citeseer shards, paper model, default batching, dropout 0)", ""]
    if not tps:
        return lines + ["(no training window after the first)", ""]
    loop = statistics.median(tps)
    lines.append(
        f"Loop: {loop:.3g} tokens/s (median of {len(tps)} logged windows after the first, attention "
        f"{backend}, data loading included)."
    )
    if backend in bench:
        lines.append(
            f"Bench, same kernel: {bench[backend]:.3g} tokens/s. Loop / bench: **{loop / bench[backend]:.0%}** "
            "(target >= 80 %)."
        )
    else:
        lines.append("No CUDA step-bench row for that kernel to compare with.")
    return lines + [""]


def best_so_far(metrics: Path) -> tuple[int, float, float] | None:
    """(epoch, valid MRR, test MRR) at the best validation MRR a run has logged so far, for a run cut off by
    the time limit (test is scored when validation improves, so it is logged at that step); None if none."""
    if not metrics.exists():
        return None
    evals = [r for r in records(metrics) if r.get("event") == "eval"]
    tests = {r["step"]: r["mrr"] for r in evals if r.get("split") == "test"}
    valid = [r for r in evals if r.get("split") == "valid" and r["step"] in tests]
    if not valid:
        return None
    best = max(valid, key=lambda r: r["mrr"])  # the first of equals, as the trainer keeps it
    return best["epoch"], 100 * best["mrr"], 100 * tests[best["step"]]


def run_table(out: Path, name: str, seeds: int) -> list[str]:
    """One row per seed from its summary.json (or its last evaluation while it is still running)."""
    rows, mrrs = [], []
    for s in range(seeds):
        folder = out / name / f"seed{s}"
        p = folder / "summary.json"
        if p.exists():
            sm = json.loads(p.read_text())
            mrr = 100 * (sm.get("test") or {}).get("mrr", float("nan"))
            mrrs.append(mrr)
            rows.append(
                f"| {s} | {sm.get('best_epoch')} | {100 * (sm.get('valid') or {}).get('mrr', float('nan')):.2f} | "
                f"{mrr:.2f} | {sm.get('train_time_s')} | {sm.get('attention_backend')} |"
            )
        else:
            log_file = out / f"{name}-seed{s}.log"
            last = log_file.read_text(errors="replace").strip().splitlines()[-1:] if log_file.exists() else []
            why = " ".join(last)[-160:].replace("|", "/") or "empty"
            so_far = best_so_far(folder / "metrics.jsonl")
            if so_far:
                epoch, valid, test = so_far
                rows.append(
                    f"| {s} | {epoch} (so far) | {valid:.2f} | {test:.2f} | - | not finished; best "
                    f"validation so far ({log_file.name}: {why}) |"
                )
            else:
                rows.append(f"| {s} | - | - | - | - | not finished ({log_file.name}: {why}) |")
    lines = [
        "| seed | best epoch | valid MRR | test MRR (at best valid) | train s | attention |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    if mrrs:
        sd = statistics.stdev(mrrs) if len(mrrs) > 1 else 0.0
        lines += [
            f"Test MRR {statistics.mean(mrrs):.2f} ± {sd:.2f} over {len(mrrs)} seed(s); the paper: 47.51 ± 3.09.",
            "",
        ]
    return lines


def report(out: Path, seeds: int, budget: int, status: list[str]) -> str:
    gpu, env = device()
    lines = [
        f"# GPU check: {gpu}",
        "",
        f"{env}; budget {budget} s.",
        "",
        "| step | status | seconds |",
        "|---|---|---|",
        *status,
        "",
    ]
    for name, title in (("gpu-tests", "GPU tests (pytest -m gpu)"),):
        text = log(out, name)
        lines += [f"## {title}", "", "```", *((text or "(not run yet)").strip().splitlines()[-15:]), "```", ""]
    for name, title in BENCHES:
        text = log(out, name)
        if text is not None:
            lines += [f"## {title}", "", "```", tables(text), "```", ""]
    lines += loop_vs_bench(out)
    for name, title in RUNS:
        if (out / name).exists() or (out / f"{name}-seed0.log").exists():  # started, even if it failed at once
            lines += [f"## {title}", "", *run_table(out, name, seeds)]
    suite = log(out, "suite")
    lines += ["## Whole suite", "", "```", *((suite or "(not run yet)").strip().splitlines()[-12:]), "```", ""]
    return "\n".join(lines)


def build_parser() -> Parser:
    p = Parser(
        prog="python -m bench.gpu_report",
        description="Write OUT/gpu_check.md from what bench/gpu_check.sh left in OUT (it calls this after every step).",
    )
    p.add_argument("out", type=Path, help="the GPU check's output folder")
    p.add_argument("seeds", type=int, help="how many citeseer seeds the check trains")
    p.add_argument("budget", type=int, help="the check's budget in seconds")
    p.add_argument("status", nargs="*", help="the status table's rows so far, one Markdown row each")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv, prog="python -m bench.gpu_report")


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if not args.out.is_dir():
        raise SystemExit(f"python -m bench.gpu_report: error: {args.out}: no such folder; pass the GPU check's --out")
    write_text_atomic(args.out / "gpu_check.md", report(args.out, args.seeds, args.budget, args.status))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
