"""Side by side, in one process tree at a time: SEAL's 10-epoch time and today's default (`pencil run`, no
preset: shard sets, the search, 3 seeds, the blend) on the same graph, with the default's phases from its log.

    python -m experiments.own_graph_research.timing --out runs/timing --graphs grid,sbm

Per graph: SEAL first (bench.seal_baseline --epochs 10, validation only), then the default with a fresh shard
cache; OUT/<graph>.json holds both walls and the phases: preprocess (start to the search's first line), search
(to search.json's record), seeds (to the blend's line), blend and report (to the end).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from common.atomic import write_json_atomic
from experiments.own_graph_research.graphs import dataset_args

STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})")


def stamps(log: Path, start: float) -> list[tuple[float, str]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = STAMP.match(line)
        if m:
            t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
            out.append((t - start, line))
    return out


def first(lines: list[tuple[float, str]], pattern: str) -> float | None:
    return next((t for t, line in lines if re.search(pattern, line)), None)


def phases(log: Path, start: float, wall: float) -> dict:
    lines = stamps(log, start)
    search = first(lines, r"search: \d+ candidates")
    chosen = first(lines, r"search: \S+ \(")
    blend = first(lines, r"blend: ")
    return {
        "preprocess_s": search,
        "search_s": None if None in (search, chosen) else chosen - search,
        "seeds_s": None if None in (chosen, blend) else blend - chosen,
        "blend_and_report_s": None if blend is None else wall - blend,
    }


def timed(cmd: list[str], log: Path) -> tuple[float, int, float]:
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    t0 = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=f, check=False).returncode
    return round(time.perf_counter() - t0, 1), rc, start


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.own_graph_research.timing")
    p.add_argument("--out", required=True)
    p.add_argument("--graphs", required=True)
    p.add_argument("--graph-root", default="runs/research", help="where the study's edge lists are written")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    for name in args.graphs.split(","):
        data = dataset_args(name, Path(args.graph_root).resolve())
        seal_json = out / name / "seal10.json"
        seal_wall, seal_rc, _ = timed(
            [
                sys.executable,
                "-m",
                "bench.seal_baseline",
                *data,
                "--seconds",
                "100000",
                "--epochs",
                "10",
                "--eval-splits",
                "valid",
                "--out",
                str(seal_json),
            ],
            out / name / "seal10.log",
        )
        run_wall, run_rc, start = timed(
            [
                sys.executable,
                "-m",
                "pipelines",
                "run",
                *data,
                "--seeds",
                "0,1,2",
                "--out",
                str(out / name / "results"),
                "--shards",
                str(out / name / "shards"),
                "--device",
                "cpu",
            ],
            out / name / "default.log",
        )
        record = {
            "graph": name,
            "seal_10_epochs_wall_s": seal_wall,
            "seal_rc": seal_rc,
            "default_wall_s": run_wall,
            "default_rc": run_rc,
            "phases": phases(out / name / "default.log", start, run_wall),
        }
        if seal_json.exists():
            s = json.loads(seal_json.read_text())
            record["seal_prepare_s"], record["seal_train_s"] = s["prepare_seconds"], s["seconds"]
        write_json_atomic(out / f"{name}.json", record)
        print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
