"""Parse an expression, check what cel-python would only find at run time, and simplify its
parse tree once (see :mod:`sunk.policy.cel`)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Final, NoReturn

import celpy
import lark
from celpy.celparser import CELParseError
from celpy.evaluation import Activation, CELEvalError, Evaluator, base_functions

from sunk.policy.cel.values import Tree
from sunk.policy.functions import FUNCTIONS, regex, regex_problem

ROOT_NAMES: Final = frozenset({"object", "namespaceObject", "params", "variables", "settings"})
"""The names every policy expression sees."""

MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})

_ENVIRONMENT: Final = celpy.Environment()
_KNOWN_FUNCTIONS: Final = frozenset(base_functions) | frozenset(FUNCTIONS) | {"has", "dyn"}
# cel-python treats these as macros too, but they are not CEL: we refuse them.
_NOT_CEL: Final = frozenset({"reduce", "min"})
_PASS_THROUGH: Final = frozenset(
    {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication"}
    | {"unary", "member"}
)


class CelCompileError(Exception):
    """An expression that does not parse or refers to something that does not exist."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        where = f"line {line} column {column}: " if line and column else ""
        super().__init__(f"{where}{message}")
        self.line = line
        self.column = column


def compile_tree(text: str, *, variables: Collection[str], names: Collection[str]) -> Tree:
    """The simplified parse tree of ``text``; raises CelCompileError for what cannot run.

    ``variables`` are the names ``variables.x`` may read; ``names`` the free identifiers.
    """
    try:
        tree = _ENVIRONMENT.compile(text)
    except CELParseError as error:
        context = str(error.args[0]).rstrip() if error.args else ""
        raise CelCompileError(f"syntax error\n{context}", error.line, error.column) from None
    except RecursionError:
        raise CelCompileError("expression nested too deeply") from None
    simple = _simplify(tree)
    _Checker(frozenset(names), frozenset(variables)).check(simple, frozenset())
    return simple


def _simplify(tree: Tree) -> Tree:
    """The same expression with fewer nodes; see :mod:`sunk.policy.cel`."""
    data = str(tree.data)
    if data == "member_dot_arg" and str(tree.children[1]) in MACROS and len(tree.children) == 3:
        target, method, arguments = tree.children
        variable, *rest = _tree(arguments).children
        bound = _macro_variable(_tree(variable))
        if bound is not None and len(rest) == 1:
            # _macro: the method, the variable's name, the target and the body.
            body = _simplify(_tree(rest[0]))
            children = [str(method), bound, _simplify(_tree(target)), body]
            return lark.Tree("_macro", children, tree.meta)
        return tree  # malformed: the checker reports it
    children = [
        _simplify(child) if isinstance(child, lark.Tree) else child for child in tree.children
    ]
    if len(children) == 1 and isinstance(children[0], lark.Tree):
        child = children[0]
        if data in _PASS_THROUGH:
            return child
        if data == "primary" and child.data == "literal":
            value = Evaluator(child, Activation()).visit(child)
            if not isinstance(value, CELEvalError):
                return lark.Tree("_const", [value], tree.meta)
        if data == "primary" and child.data == "ident":
            return lark.Tree("_name", [str(child.children[0])], tree.meta)
        if data == "primary" and child.data == "paren_expr":
            return _tree(child.children[0])
        if data == "primary" and child.data == "ident_arg":
            name, *rest = child.children
            arguments = _tree(rest[0]).children if rest else []
            if name == "has" and len(arguments) == 1:
                return lark.Tree("_has", arguments, tree.meta)
            if name == "dyn" and len(arguments) == 1:
                return _tree(arguments[0])
            if name not in ("has", "dyn"):
                return lark.Tree("_function", [name, *arguments], tree.meta)
    return lark.Tree(data, children, tree.meta)


def _tree(node: object) -> Tree:
    assert isinstance(node, lark.Tree)
    return node


class _Checker:
    """Finds, at load time, the mistakes cel-python would only report when a Pod arrives."""

    def __init__(self, names: frozenset[str], variables: frozenset[str]) -> None:
        self.names = names
        self.variables = variables

    def check(self, tree: Tree, bound: frozenset[str]) -> None:
        data = tree.data
        if data == "_name":
            name = tree.children[0]
            if name not in self.names and name not in bound and name not in base_functions:
                self._fail(tree, f"undeclared reference to '{name}'")
            return
        if data == "_const":
            return
        if data in ("dot_ident", "dot_ident_arg", "member_object"):
            self._fail(tree, "message types and leading-dot names are not supported")
        if data == "member_dot":
            self._check_member_dot(tree, bound)
            return
        if data == "_macro":
            _, variable, target, body = tree.children
            self.check(_tree(target), bound)
            self.check(_tree(body), bound | {str(variable)})
            return
        if data == "member_dot_arg":
            self._check_method(tree, bound)
            return
        if data == "_function":
            self._check_function(tree, bound)
            return
        if data == "_has" and _tree(tree.children[0]).data != "member_dot":
            self._fail(tree, "has() takes a field selection, such as has(object.spec.x)")
        if data == "ident_arg":  # has() or dyn() with the wrong number of arguments
            self._fail(tree, f"{tree.children[0]}() takes one argument")
        for child in tree.children:
            if isinstance(child, lark.Tree):
                self.check(child, bound)

    def _check_member_dot(self, tree: Tree, bound: frozenset[str]) -> None:
        target, field = tree.children
        assert isinstance(target, lark.Tree)
        reads_variables = target.data == "_name" and target.children[0] == "variables"
        if reads_variables and "variables" not in bound and str(field) not in self.variables:
            known = ", ".join(sorted(self.variables)) or "none"
            self._fail(
                tree, f"variables.{field} is not defined before this expression (known: {known})"
            )
        self.check(target, bound)

    def _check_method(self, tree: Tree, bound: frozenset[str]) -> None:
        target, method, *rest = tree.children
        name = str(method)
        arguments = _tree(rest[0]).children if rest else []
        if name in MACROS:  # well-formed macros became _macro nodes
            if len(arguments) != 2:
                self._fail(tree, f"{name}() takes a variable and an expression")
            self._fail(tree, f"the first argument of {name}() must be a variable name")
        if name in _NOT_CEL or name not in _KNOWN_FUNCTIONS:
            self._fail(tree, f"unknown method '{name}'")
        self.check(_tree(target), bound)
        for argument in arguments:
            self.check(_tree(argument), bound)
        if name == "matches" and arguments:
            self._check_regex(_tree(arguments[0]))

    def _check_function(self, tree: Tree, bound: frozenset[str]) -> None:
        name, *arguments = tree.children
        if name in _NOT_CEL or name not in _KNOWN_FUNCTIONS:
            self._fail(tree, f"unknown function '{name}'")
        for argument in arguments:
            self.check(_tree(argument), bound)
        if name == "matches" and len(arguments) == 2:
            self._check_regex(_tree(arguments[1]))

    def _check_regex(self, pattern: Tree) -> None:
        if pattern.data == "_const" and isinstance(pattern.children[0], str):
            try:
                regex(pattern.children[0])
            except Exception as error:  # re2.error, which has no type information
                self._fail(pattern, regex_problem(error))

    @staticmethod
    def _fail(tree: Tree, message: str) -> NoReturn:
        meta = tree.meta
        line = None if meta.empty else meta.line
        column = None if meta.empty else meta.column
        raise CelCompileError(message, line, column)


def _macro_variable(tree: Tree) -> str | None:
    """The name in a macro's first argument, if it is a bare identifier."""
    node: Tree | lark.Token = tree
    while isinstance(node, lark.Tree) and len(node.children) == 1:
        if node.data == "ident":
            return str(node.children[0])
        node = node.children[0]
    return None
