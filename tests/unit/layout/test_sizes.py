"""Rooms a newcomer can read: no module of the product over 400 lines, no class over 250, no
function over 60.

A route table is the one exception: the function that builds an HTTP app holds its handlers
side by side so a reader sees every route in one place (:data:`ROUTE_TABLES`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("sunk", "web")
MODULE_LINES = 400
CLASS_LINES = 250
FUNCTION_LINES = 60
#: module path -> the function that is a route table.
ROUTE_TABLES = {"sunk/hooks/routes.py": "create_hooks_app", "web/app.py": "create_app"}


def oversized(path: Path, relative: str) -> list[str]:
    """What in one module is over its limit, as ``path:line name (lines)``."""
    text = path.read_text(encoding="utf-8")
    found = []
    if (lines := len(text.splitlines())) > MODULE_LINES:
        found.append(f"{relative} ({lines} lines > {MODULE_LINES})")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            limit = CLASS_LINES
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if ROUTE_TABLES.get(relative) == node.name:
                continue
            limit = FUNCTION_LINES
        else:
            continue
        size = (node.end_lineno or node.lineno) - node.lineno + 1
        if size > limit:
            found.append(f"{relative}:{node.lineno} {node.name} ({size} lines > {limit})")
    return found


def modules(root: Path = ROOT) -> list[tuple[Path, str]]:
    return [(path, path.relative_to(root).as_posix())
            for package in PACKAGES for path in sorted((root / package).rglob("*.py"))
            if "__pycache__" not in path.parts]


def test_no_module_class_or_function_of_the_product_is_over_its_limit() -> None:
    found = [what for path, relative in modules() for what in oversized(path, relative)]
    assert found == [], "split these:\n" + "\n".join(found)


def test_every_route_table_exception_still_names_a_function() -> None:
    for relative, name in ROUTE_TABLES.items():
        tree = ast.parse((ROOT / relative).read_text(encoding="utf-8"))
        assert any(isinstance(n, ast.FunctionDef) and n.name == name for n in ast.walk(tree)), \
            f"{relative} has no {name}: drop it from ROUTE_TABLES"


# -- the check itself, on made-up modules ----------------------------------------------------


def body(lines: int) -> str:
    return "".join("    x = 1\n" for _ in range(lines))


@pytest.mark.parametrize(("source", "expected"), [
    ("def f():\n" + body(FUNCTION_LINES - 1), []),
    ("def f():\n" + body(FUNCTION_LINES), ["m.py:1 f (61 lines > 60)"]),
    ("class C:\n" + body(CLASS_LINES - 1), []),
    ("class C:\n" + body(CLASS_LINES), ["m.py:1 C (251 lines > 250)"]),
    ("x = 1\n" * MODULE_LINES, []),
    ("x = 1\n" * (MODULE_LINES + 1), ["m.py (401 lines > 400)"]),
])
def test_the_limits(tmp_path: Path, source: str, expected: list[str]) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    assert oversized(path, "m.py") == expected


def test_a_route_table_may_be_long_but_only_by_its_name(tmp_path: Path) -> None:
    path = tmp_path / "app.py"
    path.write_text("def create_app():\n" + body(FUNCTION_LINES))
    assert oversized(path, "web/app.py") == []
    assert oversized(path, "web/other.py") == ["web/other.py:1 create_app (61 lines > 60)"]
