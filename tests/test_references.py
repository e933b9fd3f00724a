"""Every module, function or file that the code and the docs cite by name exists: a move breaks this test,
not a reader. Dotted names under the project's packages (`pipelines.core.seeds.train_seeds`) are imported
and looked up attribute by attribute; repository paths (`pipelines/core/trainers.py`) must exist. In code,
comments and strings are read (a variable named `trainer` is code, not a citation); the dated benchmark
reports are history, quoting the names of their day, and are not read."""

from __future__ import annotations

import importlib
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "preprocess", "trainer", "pipelines", "bench", "experiments")
SOURCES = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "benchmarks" not in p.parts)]
# a dotted name ending in one of these is a file (RUN_DIR/trainer.log), not a module
FILE_ENDINGS = {
    "log",
    "py",
    "json",
    "jsonl",
    "md",
    "pt",
    "npz",
    "npy",
    "csv",
    "tsv",
    "gz",
    "parquet",
    "png",
    "tar",
    "txt",
    "yaml",
    "sh",
    "lock",
}
DOTTED = re.compile(r"(?<![\w./-])(?:%s)(?:\.[A-Za-z_]\w*)+" % "|".join(PACKAGES))
PATH = re.compile(r"(?<![\w./-])((?:%s|docs|tests|docker)/[\w./-]*\w)" % "|".join(PACKAGES))


def prose(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of what a reader reads: a doc's lines, a module's comments and strings."""
    text = path.read_text()
    if path.suffix != ".py":
        return list(enumerate(text.splitlines(), 1))
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return [(t.start[0], t.string) for t in tokens if t.type in (tokenize.COMMENT, tokenize.STRING)]


def cited(files: list[Path], pattern: re.Pattern) -> dict[str, str]:
    """{name: where it is first cited}."""
    out: dict[str, str] = {}
    for f in files:
        for lineno, text in prose(f):
            for m in pattern.finditer(text):
                out.setdefault(m.group(0).rstrip("."), f"{f.relative_to(ROOT)}:{lineno}")
    return out


def resolves(name: str) -> bool:
    parts = name.split(".")
    if parts[-1] in FILE_ENDINGS:
        return True
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_dotted_name_the_code_and_docs_cite_imports():
    pytest.importorskip("ray")  # some cited modules import Ray (absent on a trainer image)
    missing = [f"{where}: {name}" for name, where in cited(SOURCES + DOCS, DOTTED).items() if not resolves(name)]
    assert not missing, "cited names that do not exist:\n" + "\n".join(missing)


def test_every_repository_path_the_code_and_docs_cite_exists():
    missing = [
        f"{where}: {name}"
        for name, where in cited(SOURCES + DOCS, PATH).items()
        if "<" not in name and "*" not in name and not (ROOT / name).exists()
    ]
    assert not missing, "cited paths that do not exist:\n" + "\n".join(missing)
