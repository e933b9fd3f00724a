"""The house rules that a machine can check: below each command's parser, no function takes the parsed
flags (an argparse namespace); the command line is turned into typed configuration once, by a `from_args`
(or the trainer's and preprocess's `config_from_args`), and passed down."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("common", "preprocess", "trainer", "pipelines")
# the functions that read parsed flags: each command's conversion into its configuration (and argparse's own
# Action protocol, __call__(parser, namespace, ...))
BOUNDARY = {"from_args", "config_from_args", "given", "__call__"}
NAMESPACE_NAMES = {"args", "ns", "namespace", "parsed"}


def takes_namespace(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    params = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    return any(
        p.arg in NAMESPACE_NAMES or (p.annotation is not None and "Namespace" in ast.unparse(p.annotation))
        for p in params
    )


def test_no_function_below_a_commands_parser_takes_its_namespace():
    offenders = []
    for pkg in PRODUCT:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and node.name not in BOUNDARY
                    and takes_namespace(node)
                ):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not offenders, "functions that take an argparse namespace:\n" + "\n".join(offenders)
