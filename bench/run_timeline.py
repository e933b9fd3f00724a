"""Where a `pencil run --preset auto` run's wall time went, from its logs: each phase's wall, the trainer processes
that ran in it, and the core-seconds its trainer slots left idle.

    python -m bench.run_timeline RUN_LOG RUN_FOLDER [--slots 2]
    python -m bench.run_timeline suite/grid/auto.log suite/runs/auto/grid/auto/original

RUN_LOG is the recipe's own log (what `pencil run` prints; the suite keeps it as OUT/<graph>/auto.log), RUN_FOLDER
the protocol's folder (search/, seed<k>/, runner-up/). The phases come from the recipe's log lines: the shard sets
(its first line to the search's start), the grace rung, the convergence rung, and from the choice to the report
(the final seeds, the runner-up's evaluation, the blend). A trainer process is the span from its start-up line
("PENCIL trainer: ...") to its last line before the next start or the end of its log, so each span leaves out
its imports (about 2 s), which count as idle here. Idle core-seconds: slots x the phase's wall minus the
trainers' time in it: what a scheduler that kept every slot busy could have used.
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime
from pathlib import Path

if __package__ in (None, ""):  # `python bench/run_timeline.py` as well as `python -m bench.run_timeline`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PRELUDE = (" WARNING ", "resuming from")  # what a trainer may log before its start-up line
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")
STARTUP = ("PENCIL trainer:", "--eval-weights:")  # a training process's start-up line, an evaluation's


def stamp(line: str) -> float | None:
    m = STAMP.match(line)
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() if m else None


def stamped(path: Path) -> list[tuple[float, str]]:
    return [(t, line) for line in path.read_text(errors="replace").splitlines() if (t := stamp(line)) is not None]


def phases(log: Path) -> list[tuple[str, float, float]]:
    """[(phase, start, end)] from the recipe's log."""
    lines = stamped(log)
    if not lines:
        raise SystemExit(f"{log}: no time-stamped lines (is it the recipe's log?)")
    rungs = [t for t, line in lines if re.search(r"search: \d+ candidate\(s\) to epoch", line)]
    chosen = [t for t, line in lines if re.search(r"pipelines\.auto: search: \S+ \(", line)]
    wrote = [t for t, line in lines if "results.json" in line and " wrote " in line]
    if len(rungs) < 2 or not chosen or not wrote:
        raise SystemExit(f"{log}: not a finished --preset auto run (needs both rungs, the choice and the report)")
    marks = [("shard sets", lines[0][0]), ("grace rung", rungs[0]), ("convergence rung", rungs[1])]
    marks += [("final seeds, blend, report", chosen[-1]), ("", wrote[-1])]
    return [(name, start, end) for (name, start), (_, end) in zip(marks, marks[1:])]


def spans(folder: Path) -> list[tuple[str, float, float]]:
    """[(trainer folder, start, end)]: one per process that logged a start-up line."""
    out = []
    for log in sorted(folder.glob("**/trainer.log")):
        lines, name = stamped(log), str(log.parent.relative_to(folder))
        starts = [first_of(lines, i) for i, (_, line) in enumerate(lines) if any(m in line for m in STARTUP)]
        for i, j in zip(starts, starts[1:] + [len(lines)]):
            out.append((name, lines[i][0], lines[j - 1][0]))
    return out


def first_of(lines: list[tuple[float, str]], i: int) -> int:
    """The first line of the process whose start-up line is lines[i]: the warnings and the "resuming from" line it
    logs before it (within seconds: building the model and optimiser)."""
    while i > 0 and lines[i][0] - lines[i - 1][0] < 5.0 and any(m in lines[i - 1][1] for m in PRELUDE):
        i -= 1
    return i


def overlap(a: float, b: float, s: float, e: float) -> float:
    return max(0.0, min(b, e) - max(a, s))


def timeline(log: Path, folder: Path, slots: int) -> list[list]:
    runs = spans(folder)
    rows = []
    for name, a, b in phases(log):
        inside = [(n, s, e) for n, s, e in runs if overlap(a, b, s, e) > 0]
        busy = sum(overlap(a, b, s, e) for _, s, e in inside)
        idle = slots * (b - a) - busy
        rows.append([name, f"{b - a:.1f}", len({n for n, _, _ in inside}), f"{busy:.1f}", f"{idle:.1f}"])
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.run_timeline", description=__doc__.split("\n")[0])
    p.add_argument("log", help="the recipe's log (OUT/<graph>/auto.log in the suite)")
    p.add_argument("folder", help="the run's protocol folder (results/<dataset>/auto/original)")
    p.add_argument("--slots", type=int, default=2, help="trainer slots (one per core on a CPU; default 2)")
    args = p.parse_args(argv)
    from bench.workload import print_table

    rows = timeline(Path(args.log), Path(args.folder), args.slots)
    total = sum(float(r[1]) for r in rows)
    idle = sum(float(r[4]) for r in rows)
    rows.append(["whole run", f"{total:.1f}", "", f"{sum(float(r[3]) for r in rows):.1f}", f"{idle:.1f}"])
    print_table(
        f"{args.folder}: {args.slots} slots, idle {idle / (args.slots * total):.0%} of the core-seconds",
        ["phase", "wall s", "trainer folders", "trainer s", "idle core-s"],
        rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
