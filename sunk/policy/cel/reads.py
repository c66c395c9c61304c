"""Which parts of ``object`` and ``namespaceObject`` an expression reads (see
:mod:`sunk.policy.memo`).

A *path* is the chain of constant field selections from a root name: ``object.spec.containers``
reads ``("spec", "containers")``, ``object.metadata.annotations['x']`` reads
``("metadata", "annotations", "x")`` and ``has(object.a.b)`` reads ``("a", "b")``. Any other use
of a value on the chain (a method, a macro, a function, an operator, an index that is not a
string literal, the bare root) ends the chain there: the expression may then look at everything
under that prefix, so the prefix is read whole, and the bare root reads ``()``, the whole
object. A macro variable that has a root's name hides the root in the macro's body.

The evaluator's result depends on the Pod only through what walking each path finds: the
value at its end, or where the walk stopped (a missing key, or a value that is not a map).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final

import lark
from celpy import celtypes

from sunk.policy.cel.values import Tree

Path = tuple[str, ...]
Read = tuple[str, Path]
"""A root name and the path read under it."""

VARYING_ROOTS: Final = frozenset({"object", "namespaceObject"})
"""The root names whose values change from one Pod to the next."""


def read_paths(tree: Tree, roots: Collection[str] = VARYING_ROOTS) -> frozenset[Read]:
    """Every (root, path) that ``tree``, a simplified parse tree, reads under ``roots``."""
    found: set[Read] = set()
    _visit(tree, frozenset(roots), found)
    return frozenset(found)


def minimal(reads: Iterable[Read]) -> dict[str, tuple[Path, ...]]:
    """The paths by root, without those under another path (reading a prefix reads them)."""
    by_root: dict[str, set[Path]] = {}
    for root, path in reads:
        by_root.setdefault(root, set()).add(path)
    result: dict[str, tuple[Path, ...]] = {}
    for root in sorted(by_root):
        paths = sorted(by_root[root], key=lambda path: (len(path), path))
        kept: list[Path] = []
        for path in paths:
            if not any(path[: len(shorter)] == shorter for shorter in kept):
                kept.append(path)
        result[root] = tuple(sorted(kept))
    return result


def _visit(tree: Tree, roots: frozenset[str], found: set[Read]) -> None:
    chain = _chain(tree, roots)
    if chain is not None:
        found.add(chain)
        return
    data = tree.data
    if data == "_macro":
        _, variable, target, body = tree.children
        _visit(_tree(target), roots, found)
        _visit(_tree(body), roots - {str(variable)}, found)
        return
    for child in tree.children:
        if isinstance(child, lark.Tree):
            _visit(child, roots, found)
        elif data not in _NAMING_TOKENS and isinstance(child, lark.Token) and str(child) in roots:
            # A name left unsimplified (``ident``; the checker refuses the other such nodes):
            # it may be the root itself.
            found.add((str(child), ()))


# Nodes whose tokens name a field, a method or a function, never a value.
_NAMING_TOKENS: Final = frozenset({"member_dot", "member_dot_arg", "_function", "_name"})


def _chain(tree: Tree, roots: frozenset[str]) -> Read | None:
    """(root, path) if ``tree`` is a root followed only by constant field selections."""
    data = tree.data
    if data == "_name":
        name = str(tree.children[0])
        return (name, ()) if name in roots else None
    if data == "member_dot":
        target, field = tree.children
        inner = _chain(_tree(target), roots)
        return None if inner is None else (inner[0], (*inner[1], str(field)))
    if data == "member_index":
        target, index = tree.children
        key = _string_constant(index)
        if key is None:
            return None
        inner = _chain(_tree(target), roots)
        return None if inner is None else (inner[0], (*inner[1], key))
    return None


def _string_constant(node: object) -> str | None:
    if isinstance(node, lark.Tree) and node.data == "_const":
        value = node.children[0]
        if isinstance(value, celtypes.StringType):
            return str(value)
    return None


def _tree(node: object) -> Tree:
    assert isinstance(node, lark.Tree)
    return node
