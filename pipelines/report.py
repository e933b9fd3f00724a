"""Multi-seed reports: mean ± std over seeds of every result.json under run folders, as one Markdown table.

pencil report RUN_DIR [RUN_DIR ...] [--out report.md] [--no-paper]
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from common.atomic import write_text_atomic
from common.cli import Parser, command, exit_process, summary
from common.flags import FlagError, add_overwrite_flag
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


@dataclass(frozen=True)
class ReportConfig:
    runs: tuple[Path, ...]  # run folders or result.json files
    out: Path | None = None
    overwrite: bool = False
    paper: bool = True  # the paper's reference rows

    @classmethod
    def from_args(cls, args) -> "ReportConfig":
        missing = [str(p) for p in args.runs if not p.exists()]
        if missing:
            raise FlagError(f"no such run folder: {', '.join(missing)}")
        return cls(tuple(args.runs), args.out, args.overwrite, not args.no_paper)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return command(build_parser, report, argv, prog, config=ReportConfig.from_args)


def report(cfg: ReportConfig) -> int:
    try:
        if cfg.out:  # a report written over a result.json it reads, or into a run, would lose or mix a seed
            check_output(cfg.out, files={f"the run {p}": p for p in cfg.runs if p.is_file()})
        results = load_results(list(cfg.runs))
        if not results:
            raise FlagError("no result.json found under " + ", ".join(map(str, cfg.runs)))
        check_mixing(results)
        if cfg.out:
            check_replacement(cfg.out, "report", data_of(results), cfg.overwrite, what="report")
    except (ResultsError, OutputError) as err:
        raise FlagError(str(err)) from None
    table = markdown(aggregate(results), with_paper=cfg.paper)
    sys.stdout.write(table)
    if cfg.out:
        write_text_atomic(cfg.out, f"{table}\n<!-- {stamp_line('report', data_of(results))} -->\n")
        log.info("wrote %s", cfg.out)
    return 0


if __name__ == "__main__":
    exit_process(main)
