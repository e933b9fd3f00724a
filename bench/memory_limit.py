"""The default run under a memory limit: `pencil run` in a fresh cgroup capped at --limit-gb, once per code
version, one after the other, with the peak the cgroup saw, the kernel's out-of-memory kills inside it, and
what came out. A machine smaller than the run's trainers side by side is what this measures: the trainer
pool's memory gate (pipelines/core/memory_gate.py) should trade time for completing.

    python -m bench.memory_limit --out OUT --dataset suite/graphs/sbm.csv --shards suite/shards --limit-gb 8 \\
        --arm before=../w1 --arm after=.

Each arm runs `python -m pipelines run --dataset D --seeds 0,1,2 --device cpu` from its checkout (the code
`python -m` imports there), into OUT/<arm>, with the shared --shards cache (warm it first so that the arms
time the same work). Needs root and a writable cgroup file system (v1 or v2); elsewhere it says so in a line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common.cli import Parser, run_cli

V1, V2 = Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup")


class Cgroup:
    """A memory cgroup of our own (v1 or v2), removed when done."""

    def __init__(self, name: str, limit: int):
        self.v1 = (V1 / "memory.limit_in_bytes").exists()
        self.path = (V1 if self.v1 else V2) / name
        try:
            self.path.mkdir(exist_ok=True)
            (self.path / ("memory.limit_in_bytes" if self.v1 else "memory.max")).write_text(str(limit))
        except OSError as e:
            raise SystemExit(
                f"--limit-gb: cannot make a memory cgroup at {self.path} ({e.strerror}); run as root"
            ) from None

    def join(self) -> None:  # preexec_fn: the child and all it starts live in the group
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def peak(self) -> int:
        name = "memory.max_usage_in_bytes" if self.v1 else "memory.peak"
        try:
            return int((self.path / name).read_text())
        except (OSError, ValueError):
            return 0

    def oom_kills(self) -> int:
        text = (self.path / ("memory.oom_control" if self.v1 else "memory.events")).read_text()
        return next((int(line.split()[1]) for line in text.splitlines() if line.startswith("oom_kill ")), 0)

    def remove(self) -> None:
        for _ in range(50):  # the group empties when its last process is reaped
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.2)


def run_arm(name: str, repo: Path, args, out: Path) -> dict:
    group = Cgroup(f"pencil-bench-{name}-{os.getpid()}", int(args.limit_gb * 2**30))
    dest = out / name
    cmd = [sys.executable, "-m", "pipelines", "run", "--dataset", str(Path(args.dataset).resolve())]
    cmd += ["--seeds", args.seeds, "--out", str(dest.resolve()), "--shards", str(Path(args.shards).resolve())]
    cmd += ["--device", "cpu", *args.extra]
    log = out / f"{name}.log"
    start = time.perf_counter()
    try:
        with open(log, "w") as f:
            rc = subprocess.run(cmd, cwd=repo, stdout=f, stderr=subprocess.STDOUT, preexec_fn=group.join).returncode
        wall, peak, kills = time.perf_counter() - start, group.peak(), group.oom_kills()
    finally:
        group.remove()
    text = log.read_text()
    row = {"arm": name, "repo": str(repo), "rc": rc, "wall_s": round(wall, 1), "peak_mb": peak // 2**20}
    row.update(oom_kills=kills, held=text.count("waits for a running trainer"), command=" ".join(cmd))
    row["last_line"] = (text.strip().splitlines() or [""])[-1][-300:]
    found = sorted(dest.glob("*/auto/results.json"))
    if rc == 0 and found:
        search = json.loads((found[0].parent / "original" / "search.json").read_text())
        row["choice"] = search["chosen"]["cid"]
        row["left_out"] = search["final_seeds"].get("left_out", [])
        row["failed"] = search["chosen"].get("failed", {})
        lines = (found[0].parent / "report.md").read_text().splitlines()
        cells = dict(zip(*([c.strip() for c in line.strip("|").split("|")] for line in (lines[0], lines[2]))))
        row["report"] = f"{cells['model']}: MRR {cells['mrr']}, AUC {cells['auc']}"  # the report's first row
    return row


def table(rows: list[dict], limit_gb: float) -> str:
    head = "| arm | exit | wall | peak in the cgroup | OOM kills | trainers held back | choice | report's first row |"
    out = [f"limit {limit_gb:g} GiB", head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| {r['arm']} | {r['rc']} | {r['wall_s'] / 60:.1f} min | {r['peak_mb']:,} MB | {r['oom_kills']} | "
            f"{r['held']} | {r.get('choice', '-')} | {r.get('report', r['last_line'])} |"
        )
    return "\n".join(out)


def build_parser(prog: str = "python -m bench.memory_limit") -> Parser:
    p = Parser(prog=prog, description="The default run under a cgroup memory limit, per code version.")
    p.add_argument("--out", required=True, help="folder for the arms' results, logs and OUT/memory_limit.json")
    p.add_argument("--dataset", required=True, help="an edge list (the run's --dataset)")
    p.add_argument("--shards", required=True, help="the shard cache the arms share (warm it first)")
    p.add_argument("--limit-gb", type=float, required=True, help="the cgroup's memory limit in GiB")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--arm", action="append", default=[], help="NAME=CHECKOUT, repeatable (default: this=.)")
    p.add_argument("extra", nargs="*", help="more `pencil run` flags, after --")
    return p


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.memory_limit")


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    arms = [a.split("=", 1) for a in args.arm] or [["this", "."]]
    if bad := [a for a in arms if len(a) != 2 or not (Path(a[1]) / "pipelines").is_dir()]:
        raise SystemExit(f"--arm: expected NAME=CHECKOUT with a pipelines/ folder, got {'='.join(bad[0])}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = [run_arm(name, Path(repo).resolve(), args, out) for name, repo in arms]
    (out / "memory_limit.json").write_text(json.dumps(rows, indent=1))
    print(table(rows, args.limit_gb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
