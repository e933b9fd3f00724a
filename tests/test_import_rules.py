"""The import rules of docs/design.md, checked on the source: imports run one way
(common <- preprocess, trainer <- pipelines <- bench, experiments), preprocess and trainer never import each
other, pipelines/core imports nothing else from pipelines, and no module reaches another package's private
names (`_name`), neither by `from m import _name` nor by `m._name`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# a package may import itself and any package of a lower layer; preprocess and trainer share one layer, so neither
# imports the other; experiments may use bench's graph generators; nothing imports the tests (they may import anything)
LAYER = {"common": 0, "preprocess": 1, "trainer": 1, "pipelines": 2, "bench": 3, "experiments": 4, "tests": 5}
CORE = "pipelines.core"


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(tree: ast.AST, module: str) -> list[tuple[str, list[str], int]]:
    """(imported module, the names taken from it, line) for every absolute import; relative ones are resolved."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = module.split(".")[: -node.level] if node.level else []
                base = ".".join([*up, base] if base else up)
            found.append((base, [a.name for a in node.names], node.lineno))
    return found


def package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def layer_problem(module: str, target: str) -> str | None:
    src, dst = module.split(".")[0], target.split(".")[0]
    if dst not in LAYER or src == dst:
        if src == dst == "pipelines" and module.startswith(CORE) and not target.startswith(CORE):
            return "pipelines/core imports nothing else from pipelines"
        return None
    if LAYER[dst] >= LAYER[src]:
        return f"{src} may not import {dst}"
    return None


def private_attribute_uses(tree: ast.AST, aliases: dict[str, str]) -> list[tuple[str, str, int]]:
    """`alias._name` where alias is a module imported from elsewhere: (module, name, line)."""
    return [
        (aliases[n.value.id], n.attr, n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases and private(n.attr)
    ]


def module_aliases(tree: ast.AST, found: list, known: set[str]) -> dict[str, str]:
    """The local names bound to a project module by `import a.b as x` or `from a import b`."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name in known:
                    aliases[a.asname] = a.name
    for target, names, _ in found:
        for n in names:
            if f"{target}.{n}" in known:
                aliases[n] = f"{target}.{n}"
    return aliases


def violations(root: Path, packages: tuple[str, ...]) -> list[str]:
    files = {module_name(root, p): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}
    known = set(files)
    problems = []
    for module, path in files.items():
        tree = ast.parse(path.read_text())
        mine = package_of(module, path.name == "__init__.py")
        where = f"{path.relative_to(root)}"
        found = imports(tree, module)
        for target, names, line in found:
            if problem := layer_problem(module, target):
                problems.append(f"{where}:{line} imports {target}: {problem}")
            theirs = target if target in known and files[target].name == "__init__.py" else target.rpartition(".")[0]
            for n in names:
                if private(n) and target.split(".")[0] in LAYER and theirs != mine:
                    problems.append(f"{where}:{line} imports private {target}.{n} from another package")
        for target, name, line in private_attribute_uses(tree, module_aliases(tree, found, known)):
            if package_of(target, files[target].name == "__init__.py") != mine:
                problems.append(f"{where}:{line} uses private {target}.{name} from another package")
    return problems


PACKAGES = tuple(p for p in LAYER if p != "tests")  # the tests are checked as a target only: they test internals


def test_the_product_keeps_the_import_rules():
    problems = violations(ROOT, PACKAGES)
    assert not problems, "import rules broken:\n" + "\n".join(problems)


PLANTED = {
    "upward import": ("common/a.py", "import pipelines.run\n"),
    "sideways import": ("trainer/a.py", "from preprocess import sampler\n"),
    "core reaching up": ("pipelines/core/a.py", "from pipelines.auto import search\n"),
    "private name": ("pipelines/a.py", "from trainer.model import _secret\n"),
    "private attribute": ("experiments/a.py", "from pipelines.auto import blend\nblend._table()\n"),
    "a bench reaching into the tests": ("bench/a.py", "from tests.conftest import needs_ray\n"),
}


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_a_planted_violation_is_caught(tmp_path, case):
    for pkg in ("common", "preprocess", "trainer", "pipelines/core", "pipelines/auto", "experiments", "bench"):
        (tmp_path / pkg).mkdir(parents=True, exist_ok=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "trainer" / "model.py").write_text("_secret = 1\n")
    (tmp_path / "pipelines" / "auto" / "blend.py").write_text("def _table(): ...\n")
    assert violations(tmp_path, PACKAGES) == []
    path, text = PLANTED[case]
    (tmp_path / path).write_text(text)
    assert len(violations(tmp_path, PACKAGES)) == 1


def test_a_private_name_inside_its_own_package_is_allowed(tmp_path):
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__init__.py").write_text("")
    (tmp_path / "trainer" / "model.py").write_text("_secret = 1\n")
    (tmp_path / "trainer" / "loop.py").write_text("from trainer.model import _secret\nfrom .model import _secret\n")
    assert violations(tmp_path, PACKAGES) == []
