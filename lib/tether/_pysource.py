"""Where a Python module's docstrings are: one definition for the check and the fingerprints."""

from __future__ import annotations

import ast
from collections.abc import Iterator

_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def docstring_owners(
    tree: ast.AST,
) -> Iterator[ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef]:
    """Each module, class or function in ``tree`` whose body starts with a docstring."""
    for node in ast.walk(tree):
        if not isinstance(node, _DOCUMENTED):
            continue
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            yield node
