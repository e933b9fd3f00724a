"""Regenerate the README's CLI reference from the parsers themselves, so it always matches `--help`.

    python -m pipelines.docs            # rewrites the block between the CLI-reference markers
"""
from __future__ import annotations

import os
from pathlib import Path

BEGIN, END = "<!-- CLI reference -->", "<!-- /CLI reference -->"
README = Path(__file__).resolve().parents[1] / "README.md"


def parsers() -> dict:
    from pipelines import ablations, gnn_baselines, gnn_full_ranking, heuristic_estimation, heuristics, latent_space, recommend, report, run_args, score
    from preprocess.__main__ import build_parser as preprocess_parser
    from trainer.config import build_parser as trainer_parser
    return {"preprocess": preprocess_parser(), "trainer": trainer_parser(), "pipelines.run": run_args.build_parser(),
            "pipelines.score": score.build_parser(), "pipelines.recommend": recommend.build_parser(),
            "pipelines.report": report.build_parser(),
            "pipelines.heuristics": heuristics.build_parser(), "pipelines.ablations": ablations.build_parser(),
            "pipelines.gnn_baselines": gnn_baselines.build_parser(),
            "pipelines.gnn_full_ranking": gnn_full_ranking.build_parser(), "pipelines.latent_space": latent_space.build_parser(),
            "pipelines.heuristic_estimation": heuristic_estimation.build_parser()}


def reference() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; fix the width for a stable file
    parts = [BEGIN, "## CLI reference", "", "Generated from the parsers (`python -m pipelines.docs`); identical to `--help`.", ""]
    for name, parser in parsers().items():
        parts += [f"### `python -m {name}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    return "\n".join(parts + [END])


def main(argv: list[str] | None = None) -> int:
    from common.cli import run_cli
    return run_cli(lambda _: _main(), argv, prog="python -m pipelines.docs")


def _main() -> int:
    text = README.read_text()
    if BEGIN not in text:
        raise SystemExit(f"{README}: no '{BEGIN}' marker to write the CLI reference at")
    head, _, rest = text.partition(BEGIN)
    tail = rest.partition(END)[2] if END in rest else ""
    README.write_text(head + reference() + tail)
    print(f"updated {README}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
