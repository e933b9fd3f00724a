"""Multi-seed reports: mean ± std over seeds, in the format of the paper's tables.

`python -m pipelines.report RUN_DIR [RUN_DIR ...] [--out report.md]` gathers every `result.json`
under the given folders (one per pipeline run and seed) into one Markdown table.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections import defaultdict
from pathlib import Path

from common.cli import add_debug_flag, one_line_errors, run_cli
from common.metrics import METRIC_KEYS
from common.storage import LocalStorage
from pipelines.heuristics import write_json_atomic
from pipelines.paper_results import paper_reference

log = logging.getLogger("pipelines.report")
METRICS = METRIC_KEYS  # mrr, hits@1..100, auc, ap


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1, as the paper's ± columns); std 0 for one value."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def fmt(mean: float, std: float) -> str:
    return f"{mean:.2f} ± {std:.2f}"


def load_results(paths: list[Path]) -> list[dict]:
    """Every result.json below the given files/folders."""
    found = []
    for p in paths:
        files = [p] if p.is_file() else sorted(p.rglob("result.json"))
        for f in files:
            try:
                found.append(json.loads(f.read_text()))
            except json.JSONDecodeError as err:
                raise SystemExit(f"{f}: not valid JSON ({err})")
    return found


def aggregate(results: list[dict]) -> list[dict]:
    """Group per (dataset, protocol, model) and reduce each metric to mean ± std over seeds.

    A result holds {"dataset", "protocol", "model", "seed", "test": {metric: fraction}}.
    """
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in results:
        groups[(r["dataset"], r["protocol"], r.get("model", "PENCIL"))].append(r)
    rows = []
    for (dataset, protocol, model), rs in sorted(groups.items()):
        row = {"dataset": dataset, "protocol": protocol, "model": model,
               "seeds": sorted(r.get("seed", 0) for r in rs)}
        for m in METRICS:
            vals = [100.0 * r["test"][m] for r in rs if m in r.get("test", {})]
            if vals:
                row[m] = mean_std(vals)
        rows.append(row)
    return rows


def markdown(rows: list[dict], with_paper: bool = True) -> str:
    """One table; after each (dataset, protocol) group's measured rows, the paper's rows for it."""
    header = ["dataset", "protocol", "model", "seeds", *METRICS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["dataset"], row["protocol"])].append(row)
    for (dataset, protocol), group in groups.items():
        for row in group:
            cells = [dataset, protocol, row["model"], str(len(row["seeds"]))]
            cells += [fmt(*row[m]) if m in row else "–" for m in METRICS]
            lines.append("| " + " | ".join(cells) + " |")
        ref = paper_reference(dataset, protocol) if with_paper else None
        if ref:
            metric, models = ref
            for name, (mean, std) in models.items():
                cells = [dataset, protocol, f"{name} (paper)", "–"]
                cells += [fmt(mean, std) if m == metric else "–" for m in METRICS]
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def table_json(rows: list[dict]) -> list[dict]:
    """Table rows for JSON: (mean, std) tuples become lists."""
    return [{k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()} for r in rows]


def publish_results(out: Path, payload: dict, md: str, *also: Path) -> None:
    """A recipe's outputs: results.json and report.md (each written atomically), the table on stdout,
    and one log line naming what was written (`also`: figures and other files)."""
    write_json_atomic(out / "results.json", payload)
    LocalStorage(out).write_atomic("report.md", md.encode())  # never a half-written report
    sys.stdout.write("\n" + md)
    log.info("wrote %s", ", ".join(str(p) for p in (out / "results.json", out / "report.md", *also)))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pipelines.report", description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders (or result.json files) to gather")
    ap.add_argument("--out", type=Path, help="also write the Markdown table here")
    ap.add_argument("--no-paper", action="store_true", help="leave out the paper's reference rows")
    add_debug_flag(ap)
    return one_line_errors(ap)


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv, prog="python -m pipelines.report")


def _main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.runs if not p.exists()]
    if missing:
        ap.error(f"no such run folder: {', '.join(missing)}")
    results = load_results(args.runs)
    if not results:
        ap.error("no result.json found under " + ", ".join(map(str, args.runs)))
    table = markdown(aggregate(results), with_paper=not args.no_paper)
    sys.stdout.write(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        LocalStorage(args.out.parent).write_atomic(args.out.name, table.encode())
        log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    raise SystemExit(main())
