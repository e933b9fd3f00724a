"""The README and docs/ stay true: the two set-up commands, a README read in minutes, every command the docs
show parses with the real parser, docs/cli.md matches the parsers, every --help fits a screen, and the code
cites only what is in the repository. BENCHMARKS.md reads in two minutes, every benchmark report is linked
from it or from the reports' index, and every link to a section finds its heading."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))


def test_exactly_two_setup_commands():
    block = README.split("## Set up and run (fresh clone)")[1].split("```bash")[1].split("```")[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: install\n\t\$\(PYTHON\) -m pipelines.run --dataset citeseer", makefile, re.M)
    assert re.search(r"^test: install\n\t\$\(PYTEST\)$", makefile, re.M)
    pytest = r"^PYTEST = \$\(PYTHON\) (-X faulthandler )?-m pytest -q( -n \d+ --dist loadfile)?$"
    assert re.search(pytest, makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_the_readme_reads_in_minutes():
    assert len(README.splitlines()) <= 210
    for needed in ("pencil run --dataset", "pencil score", "pencil recommend", "results/"):
        assert needed in README, needed


def test_the_cli_reference_matches_the_parsers(monkeypatch):
    from pipelines.docs import CLI_MD, reference

    assert CLI_MD.read_text() == reference(), "docs/cli.md is stale: run `python -m pipelines.docs`"


def _parsers() -> dict:
    from pipelines.docs import parsers

    return parsers()


@pytest.mark.parametrize("prog", list(_parsers()))
def test_every_default_help_fits_a_screen(prog, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    parser = _parsers()[prog]
    assert len(parser.format_help().splitlines()) <= 40, prog
    assert "--help-all" in parser.format_help()


def test_pencil_lists_every_command():
    out = subprocess.run([sys.executable, "-m", "pipelines", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and len(out.stdout.splitlines()) <= 40
    from pipelines.cli import COMMANDS

    assert all(f"  {name} " in out.stdout for name in COMMANDS)


def shown_commands(text: str) -> list[list[str]]:
    """The project's commands inside ```bash blocks: `pencil ...` and `python -m MODULE ...` (also after
    `ray job submit ... --` or `torchrun ... -m trainer`), continuation lines joined, comments dropped."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("#") or not line:
                continue
            words = shlex.split(line)
            if "--" in words and words[0] == "ray":
                words = words[words.index("--") + 1 :]
            if words[0] == "torchrun":
                words = ["python", "-m", "trainer", *words[words.index("-m") + 2 :]]
            if words[0] == "pencil" or words[:2] in (["python", "-m"], ["python3", "-m"]):
                out.append(words)
    return out


def parser_for(words: list[str]):
    """(parser, its arguments) of a shown command, or None for a module that is not a command."""
    from pipelines.cli import COMMANDS, PAPER
    from pipelines.docs import RUN_AS

    if words[0] == "pencil":
        name, rest = words[1], words[2:]
        table = COMMANDS
        if name == "paper":
            name, rest, table = rest[0], rest[1:], PAPER
        module = table[name][0]
    else:
        by_run_as = {v: k for k, v in RUN_AS.items()}
        module, rest = by_run_as.get(words[2], words[2]), words[3:]
    import importlib

    mod = importlib.import_module(module)
    if not hasattr(mod, "build_parser"):
        return None
    return mod.build_parser(), rest


@pytest.mark.parametrize("doc", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_every_command_the_docs_show_parses(doc):
    commands = shown_commands(doc.read_text())
    for words in commands:
        found = parser_for(words)
        if found is None or "--help" in words or "--help-all" in words:
            continue
        parser, rest = found
        try:
            parser.parse_args(rest)
        except SystemExit as err:
            pytest.fail(f"{doc.name}: `{' '.join(words)}` does not parse ({err})")


BENCHMARK_INDEX = ROOT / "docs" / "benchmarks" / "README.md"
HEADLINE_DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", BENCHMARK_INDEX]


@pytest.mark.parametrize("doc", [*HEADLINE_DOCS, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_links_point_at_files_in_the_repository(doc):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
        if "://" in target:
            continue
        assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which is not in the repository"


def test_code_cites_only_the_repository():
    """No issue numbers of a tracker that is not in the repository, no design file outside it."""
    bad = []
    for folder in ("common", "preprocess", "trainer", "pipelines", "bench", "experiments"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".sh") and path.is_file():
                for i, line in enumerate(path.read_text().splitlines(), 1):
                    if re.search(r"\b[Ii]ssues? \d+|DESIGN\.md", line):
                        bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out, seen = set(), {}
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


@pytest.mark.parametrize("doc", [*HEADLINE_DOCS, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_links_to_a_section_find_it(doc):
    """Every headline links to its row's section: an anchor that names no heading is a dead link."""
    bad = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", doc.read_text()):
        path = (doc.parent / target) if target else doc
        if "://" not in target and path.suffix == ".md" and anchor not in anchors(path):
            bad.append(f"{target}#{anchor}")
    assert not bad, f"{doc.name} links to sections that do not exist: {bad}"


def test_benchmarks_reads_in_two_minutes():
    lines = (ROOT / "BENCHMARKS.md").read_text().splitlines()
    assert len(lines) <= 120, f"BENCHMARKS.md has {len(lines)} lines; move detail to docs/benchmarks/"
    long = [i for i, line in enumerate(lines, 1) if len(line) > 300]
    assert not long, f"BENCHMARKS.md lines over 300 characters: {long}; shorten the cells, link the report"


def test_every_benchmark_report_is_linked():
    """A report no page links to is lost: BENCHMARKS.md or the reports' index names each one."""
    linked = (ROOT / "BENCHMARKS.md").read_text() + BENCHMARK_INDEX.read_text()
    reports = sorted(p.name for p in BENCHMARK_INDEX.parent.glob("*.md") if p != BENCHMARK_INDEX)
    missing = [name for name in reports if f"{name})" not in linked and f"{name}#" not in linked]
    assert not missing, f"reports linked from neither BENCHMARKS.md nor docs/benchmarks/README.md: {missing}"
