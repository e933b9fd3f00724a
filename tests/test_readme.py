"""The README stays true: its two set-up commands exist and run the right things, and every CLI flag
that `--help` prints is documented (the CLI reference is generated from the same parsers)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _parsers():
    from pipelines.docs import parsers
    return parsers()


def test_exactly_two_setup_commands():
    block = README.split("## Set up and run (fresh clone)")[1].split("```bash")[1].split("```")[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: install\n\t\$\(PYTHON\) -m pipelines.run --dataset citeseer", makefile, re.M)
    assert re.search(r"^test: install\n\t\$\(PYTHON\) -m pytest", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("cli", ["preprocess", "trainer", "pipelines.run", "pipelines.score", "pipelines.recommend",
                                 "pipelines.report",
                                 "pipelines.heuristics"])
def test_cli_reference_matches_help(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    parser = _parsers()[cli]
    section = README.split(f"### `python -m {cli}`")
    assert len(section) == 2, f"README has no CLI reference section for python -m {cli}"
    documented = section[1].split("```text\n", 1)[1].split("\n```", 1)[0]
    assert documented == parser.format_help().rstrip(), \
        f"README's reference for {cli} is stale: regenerate it with `python -m pipelines.docs`"
    flags = {opt for action in parser._actions for opt in action.option_strings}
    assert all(flag in documented for flag in flags)
