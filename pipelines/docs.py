"""Write docs/cli.md, every command's flags (--help-all), from the parsers themselves, so it always matches.

python -m pipelines.docs            # rewrite docs/cli.md
python -m pipelines.docs --check    # exit 1 when docs/cli.md is stale
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from common.atomic import write_text_atomic
from common.cli import Parser, exit_process, run_cli, summary
from pipelines.cli import COMMANDS, PAPER

CLI_MD = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
# the module a command runs as under `python -m`, where it is not the one holding main()
RUN_AS = {
    "trainer.train": "trainer",
    "preprocess.__main__": "preprocess",
    "pipelines.recommend.job": "pipelines.recommend",
    "pipelines.serve.command": "pipelines.serve",
}


def parsers() -> dict:
    """{"pencil NAME": parser} for every command of the front door (paper experiments included)."""
    out = {}
    for prefix, table in (("pencil", COMMANDS), ("pencil paper", PAPER)):
        for name, (module, _) in table.items():
            if module is not None:
                prog = f"{prefix} {name}"
                out[prog] = importlib.import_module(module).build_parser(prog)
    return out


def reference() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; fix the width for a stable file
    parts = [
        "# Command reference",
        "",
        "Every flag of every command, generated from the parsers (`python -m pipelines.docs`); each command's",
        "`--help` shows the common ones, `--help-all` all of them. `pencil X` is also `python -m MODULE`:",
        "",
    ]
    parts += [
        f"- `pencil {name}`: `python -m {RUN_AS.get(module, module)}`"
        for name, (module, _) in {**COMMANDS, **{f"paper {k}": v for k, v in PAPER.items()}}.items()
        if module
    ]
    parts.append("")
    for prog, parser in parsers().items():
        parts += [f"## `{prog}`", "", "```text", parser.format_help(show_all=True).rstrip(), "```", ""]
    return "\n".join(parts)


def build_parser(prog: str = "python -m pipelines.docs") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--check", action="store_true", help="only check that docs/cli.md is current (exit 1 if not)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv, prog="python -m pipelines.docs")


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    text = reference()
    if args.check:
        if not CLI_MD.exists() or CLI_MD.read_text() != text:
            raise SystemExit(f"{CLI_MD} is stale: run `python -m pipelines.docs`")
        return 0
    write_text_atomic(CLI_MD, text)
    print(f"wrote {CLI_MD}")
    return 0


if __name__ == "__main__":
    exit_process(main)
