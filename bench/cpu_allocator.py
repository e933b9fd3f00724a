"""How much of a CPU trainer's peak memory is the C allocator's, not the model's: the real trainer run under
glibc malloc settings, one after another on the same shard set, with its wall time, its resident memory's peak
in each epoch, and whether every evaluation equals the plain run's (an allocator must not change a digit).

    python -m bench.cpu_allocator --shards OUT/<dataset>/<key> [--epochs 3] [--settings plain,mmap-1m] [-- FLAGS]

glibc serves a large block from its heap once a freed block of that size has raised its mmap threshold (up to
32 MB), and keeps freed heap memory for reuse; the trainer's tensors change shape with every bucketed batch, so
the heap can grow across epochs. A fixed threshold maps every block above it afresh, and returns it when freed.
The trainer now trims the heap itself (common/heap.py): "plain" turns that off, "default" is the trainer as
shipped, and the trim-* settings are other trim policies (the "trims" column counts the trims made).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/cpu_allocator.py` as well as `python -m bench.cpu_allocator`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cpu_epoch import read_metrics, trainer_cmd
from bench.workload import print_table

MiB = 1 << 20
CLOCK = ("time", "seconds")  # an evaluation record's fields that are not its scores
OFF = {"PENCIL_BENCH_HEAP_TRIM": "off"}  # common.heap's switch: glibc's own behaviour, no trims from the trainer


def _mmap(mb: int) -> dict:  # a fixed threshold (glibc stops moving it) and trim threshold, set before start
    return {**OFF, "MALLOC_MMAP_THRESHOLD_": str(mb * MiB), "MALLOC_TRIM_THRESHOLD_": str(mb * MiB)}


SETTINGS = {
    "plain": OFF,
    "default": {},  # the trainer as shipped: common.heap's policy
    "arena-1": {**OFF, "MALLOC_ARENA_MAX": "1"},
    "top-pad-64m": {**OFF, "MALLOC_TOP_PAD_": str(64 * MiB)},
    "mmap-32m": _mmap(32),
    "mmap-8m": _mmap(8),
    "mmap-4m": _mmap(4),
    "mmap-1m": _mmap(1),
    "hugetlb": {**OFF, "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"},
    "hugetlb+mmap-1m": {**OFF, "GLIBC_TUNABLES": f"glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold={MiB}"},
    "trim-phase": {"PENCIL_BENCH_HEAP_TRIM": "phase"},  # when training turns to evaluation and back
    "trim-every-1": {"PENCIL_BENCH_HEAP_TRIM": "every:1"},  # before every training forward
    "trim-every-10": {"PENCIL_BENCH_HEAP_TRIM": "every:10"},
    "trim-grow-128": {"PENCIL_BENCH_HEAP_TRIM": "grow:128"},  # once grown 128 MB past the last trim
    "trim-grow-256": {"PENCIL_BENCH_HEAP_TRIM": "grow:256"},
    "trim-grow-512": {"PENCIL_BENCH_HEAP_TRIM": "grow:512"},
}


def rss_mb(pid: int) -> int | None:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    return next((int(line.split()[1]) // 1024 for line in lines if line.startswith("VmRSS")), None)


def run(setting: str, shards: str, out: Path, epochs: int, extra: list[str], env: dict | None = None) -> dict:
    """The trainer under `setting` (a name for its errors; its variables: `env`, else SETTINGS[setting]): wall
    seconds, the main process's resident peak (MB) in each epoch (sampled every 0.25 s, up to that epoch's
    evaluation), and each evaluation's validation metrics."""
    log = out.with_suffix(".heap.log")  # one line per trim (common.heap), its count a column
    env = {**os.environ, **(SETTINGS[setting] if env is None else env), "PENCIL_BENCH_HEAP_TRIM_LOG": str(log)}
    t0 = time.time()
    cmd = [sys.executable, *trainer_cmd(shards, out, epochs, extra)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples = []
    while proc.poll() is None:
        rss = rss_mb(proc.pid)
        if rss is not None:
            samples.append((time.time(), rss))
        time.sleep(0.25)
    wall = time.time() - t0
    if proc.returncode:
        tail = (proc.stderr.read().strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"bench: the trainer failed under {setting}: {tail}")
    evals = [r for r in read_metrics(out / "metrics.jsonl") if r["event"] == "eval"]
    bounds = [t0] + [r["time"] for r in evals]
    peaks = [max((m for t, m in samples if a < t <= b), default=0) for a, b in zip(bounds, bounds[1:])]
    # every field but the clock's: the metrics themselves (mrr, hits@k, auc, ap), each epoch's and split's
    scores = [{k: v for k, v in r.items() if k not in CLOCK} for r in evals]
    trims = len(log.read_text().splitlines()) if log.exists() else 0
    return {"wall": wall, "peaks": peaks, "evals": scores, "trims": trims}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.cpu_allocator", description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", required=True, help="a shard set folder (preprocess's output)")
    p.add_argument("--epochs", type=int, default=3, help="epochs each run trains")
    p.add_argument("--settings", default="plain,mmap-8m,mmap-1m", help=f"comma-separated of {','.join(SETTINGS)}")
    p.add_argument("--work", help="keep the runs (and each trim log, <setting>.heap.log) in this folder")
    p.add_argument("extra", nargs="*", help="more trainer flags, after --")
    args = p.parse_args(argv)
    names = args.settings.split(",")
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise SystemExit(f"bench.cpu_allocator: --settings: unknown {unknown}; choose from {','.join(SETTINGS)}")
    if names[0] != "plain":
        names.insert(0, "plain")  # the reference every ratio and digit is read against
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        results = {n: run(n, args.shards, work / n, args.epochs, args.extra) for n in names}
    base = results["plain"]
    rows = [
        [
            name,
            f"{r['wall']:.1f}",
            f"{r['wall'] / base['wall']:.2f}",
            " / ".join(str(m) for m in r["peaks"]),
            f"{max(r['peaks']) / max(base['peaks']):.2f}",
            "yes" if r["evals"] == base["evals"] else "NO",
            str(r["trims"]),
        ]
        for name, r in results.items()
    ]
    header = ["setting", "wall s", "wall / plain", "peak MB per epoch", "peak / plain", "same evaluations", "trims"]
    title = f"the trainer under glibc malloc settings, {args.epochs} epoch(s) each, one after another: {args.shards}"
    print_table(title, header, rows)


if __name__ == "__main__":
    main()
