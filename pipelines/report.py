"""Multi-seed reports: mean ± std over seeds of every result.json under run folders, as one Markdown table.

    pencil report RUN_DIR [RUN_DIR ...] [--out report.md] [--no-paper]
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from common.atomic import write_text_atomic
from common.cli import Parser, run_cli, summary
from common.flags import add_overwrite_flag
from common.outputs import OutputError, check_output, check_replacement, stamp_line
from pipelines.core.results import ResultsError, aggregate, check_mixing, data_of, load_results, markdown

log = logging.getLogger("pipelines.report")
PROG = "python -m pipelines.report"


def build_parser(prog: str = PROG) -> Parser:
    ap = Parser(prog=prog, description=summary(__doc__))
    ap.add_argument("runs", nargs="+", type=Path, help="run folders (or result.json files) to gather")
    ap.add_argument("--out", type=Path, help="also write the Markdown table here")
    add_overwrite_flag(ap)
    ap.add_argument("--no-paper", action="store_true", help="leave out the paper's reference rows")
    return ap


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_cli(lambda a: _main(a, prog), argv, prog=prog)


def _main(argv: list[str] | None, prog: str) -> int:
    ap = build_parser(prog)
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.runs if not p.exists()]
    if missing:
        ap.error(f"no such run folder: {', '.join(missing)}")
    try:
        if args.out:  # a report written over a result.json it reads, or into a run, would lose or mix a seed
            check_output(args.out, files={f"the run {p}": p for p in args.runs if p.is_file()})
        results = load_results(args.runs)
        if not results:
            ap.error("no result.json found under " + ", ".join(map(str, args.runs)))
        check_mixing(results)
        if args.out:
            check_replacement(args.out, "report", data_of(results), args.overwrite, what="report")
    except (ResultsError, OutputError) as err:
        ap.error(str(err))
    table = markdown(aggregate(results), with_paper=not args.no_paper)
    sys.stdout.write(table)
    if args.out:
        write_text_atomic(args.out, f"{table}\n<!-- {stamp_line('report', data_of(results))} -->\n")
        log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    raise SystemExit(main())
