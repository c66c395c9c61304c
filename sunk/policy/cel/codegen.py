"""Compile a simplified parse tree (:mod:`~sunk.policy.cel.compiler`) into one Python
function: its source is generated, then compiled by Python (see :mod:`sunk.policy.cel`).

Each node becomes a few statements that leave its value in a local variable: a field of a
plain map is a ``dict.get``, ``&&`` an ``if``, a comparison of two strings a comparison, with
no call in the common case. Which rule, operator, field, function or macro variable a node
names is settled here, once. Whatever the fast paths do not take (other types, errors) goes to
the helpers of :mod:`~sunk.policy.cel.native` and :mod:`~sunk.policy.cel.scope`, which give
cel-python's results, so the value of every node is the one cel-python's evaluator gives.

The generated source holds no text of the expression: field names, strings and functions are
passed in as constants (``k0``, ``k1``...), locals are numbered. A rule without code of its
own here, or an expression nested too deeply for Python to compile, is evaluated by
``FastEvaluator`` instead: slower, never different.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, cast

import lark
from celpy import celtypes
from celpy.evaluation import CELEvalError

from sunk.policy.cel import native, scope
from sunk.policy.cel.evaluator import _OPERATORS
from sunk.policy.cel.operators import (
    CALL_ERRORS,
    FAST_CALLS,
    FUNCTION_CHAIN,
    call_failed,
)
from sunk.policy.cel.scope import Closure, Variables
from sunk.policy.cel.values import FALSE, TRUE, Result, Tree
from sunk.policy.cel.writer import SourceWriter

# Types whose values compare (==, <) in Python exactly as CEL compares them, when both
# operands are of the same one.
_ORDERED: Final = frozenset(
    {str, int, float, celtypes.StringType, celtypes.IntType, celtypes.DoubleType}
)
_EQUATABLE: Final = _ORDERED | {bool, celtypes.BoolType}
_COMPARISONS: Final = {
    "_==_": "==",
    "_!=_": "!=",
    "_<_": "<",
    "_<=_": "<=",
    "_>_": ">",
    "_>=_": ">=",
}

_HELPERS: Final[dict[str, Any]] = {
    "CELEvalError": CELEvalError,
    "TRUE": TRUE,
    "FALSE": FALSE,
    "BOOLS": frozenset({bool, celtypes.BoolType}),
    "SIZED": frozenset({str, list, dict, celtypes.StringType, celtypes.ListType, celtypes.MapType}),
    "ORDERED": _ORDERED,
    "EQUATABLE": _EQUATABLE,
    "Variables": Variables,
    "UNKNOWN": scope.UNKNOWN,
    "all_of": native.all_of,
    "any_of": native.any_of,
    "as_cel": native.as_cel,
    "plain_result": native.plain_result,
    "CALL_ERRORS": CALL_ERRORS,
    "call_failed": call_failed,
    "index": native.index,
    "contains": native.contains,
    "not_": native.not_,
    "negate": native.negate,
    "and_": native.and_,
    "or_": native.or_,
    "condition": native.condition,
    "name_value": scope.name_value,
    "variable_of": scope.variable_of,
    "select": scope.select,
    "no_key": scope.no_key,
    "undeclared": scope.undeclared,
    "make_list": scope.make_list,
    "make_map": scope.make_map,
    "not_iterable": scope.not_iterable,
}


def compile_closure(tree: Tree) -> Closure:
    """The function that evaluates ``tree``, a simplified parse tree, in a scope."""
    generator = _Generator()
    try:
        result = generator.node(tree, {})
        code = compile(generator.source(result), "<cel>", "exec")
    except (RecursionError, SyntaxError, MemoryError):  # too deep for Python's compiler
        return scope.interpreted(tree)
    namespace = {**_HELPERS, **generator.constants}
    exec(code, namespace)  # generated above: no text of the expression is in it
    return cast(Closure, namespace["evaluate"])


class _Generator(SourceWriter):
    """Writes the statements of one function; each node's method returns the name holding
    its value. ``names`` maps the macro variables in scope to their locals."""

    def __init__(self) -> None:
        super().__init__()
        self.rules: dict[str, Callable[[Tree, dict[str, str]], str]] = {
            "_const": self._const,
            "_name": self._name,
            "member_dot": self._member_dot,
            "member_index": self._member_index,
            "member_dot_arg": self._method,
            "_function": self._function,
            "_has": self._has,
            "_macro": self.macro,
            "expr": self._condition,
            "conditionaland": self._and,
            "conditionalor": self._or,
            "relation": self._binary,
            "addition": self._binary,
            "multiplication": self._binary,
            "unary": self._unary,
            "primary": self._primary,
        }

    def node(self, tree: Tree, names: dict[str, str]) -> str:
        rule = self.rules.get(str(tree.data))
        return rule(tree, names) if rule else self._interpreted(tree, names)

    def _interpreted(self, tree: Tree, names: dict[str, str]) -> str:
        run = self.constant(scope.interpreted(tree))
        bound = ", ".join(f"{self.constant(name)}: {local}" for name, local in names.items())
        result = self.temporary()
        self.emit(f"{result} = {run}({{**scope, {bound}}})")
        return result

    def _const(self, tree: Tree, names: dict[str, str]) -> str:
        return self.constant(scope.plain_constant(tree.children[0]))

    def _name(self, tree: Tree, names: dict[str, str]) -> str:
        name = str(tree.children[0])
        if name in names:
            return names[name]
        if name not in self.roots:
            self.roots[name] = f"n{len(self.roots)}"
        return self.roots[name]

    def _member_dot(self, tree: Tree, names: dict[str, str]) -> str:
        target, token = tree.children
        field = self.constant(cast(lark.Token, token).value)
        result = self.temporary()
        if _is_name(target, "variables") and "variables" not in names:
            self.reads_variables = True
            self.emit("if type(variables) is Variables:")
            self.emit(f"    {result} = variables.values.get({field}, UNKNOWN)")
            self.emit(f"    if {result} is UNKNOWN: {result} = variables.get({field})")
            self.emit(f"else: {result} = variable_of(variables, scope, {field})")
            return result
        member = self.node(_tree(target), names)
        self._get(
            result, member, field, missing=f"no_key({field})", other=f"select({member}, {field})"
        )
        return result

    def _member_index(self, tree: Tree, names: dict[str, str]) -> str:
        container, key = (self.node(_tree(child), names) for child in tree.children)
        result = self.temporary()
        other = f"index({container}, {key})"
        self._get(result, container, key, missing=other, other=other)
        return result

    def _get(self, result: str, container: str, key: str, *, missing: str, other: str) -> None:
        """``container[key]``: a plain dict's ``get`` for a string key, else ``other``."""
        string = "" if type(self.constants.get(key)) is str else f" and type({key}) is str"
        self.emit(f"if type({container}) is dict{string}:")
        self.emit(f"    {result} = {container}.get({key}, UNKNOWN)")
        self.emit(f"    if {result} is UNKNOWN: {result} = {missing}")
        self.emit(f"else: {result} = {other}")

    def _method(self, tree: Tree, names: dict[str, str]) -> str:
        target = self.node(_tree(tree.children[0]), names)
        token = cast(lark.Token, tree.children[1])
        arguments = self._list(tree.children[2], names) if len(tree.children) == 3 else []
        return self.call(token, FUNCTION_CHAIN.get(token.value), [target, *arguments])

    def _function(self, tree: Tree, names: dict[str, str]) -> str:
        token = cast(lark.Token, tree.children[0])
        arguments = [self.node(_tree(child), names) for child in tree.children[1:]]
        function = FAST_CALLS.get(token.value) or FUNCTION_CHAIN.get(token.value)
        return self.call(token, function, arguments)

    def _has(self, tree: Tree, names: dict[str, str]) -> str:
        selection = self.node(_tree(tree.children[0]), names)
        result = self.temporary()
        self.emit(f"{result} = FALSE if isinstance({selection}, CELEvalError) else TRUE")
        return result

    def _condition(self, tree: Tree, names: dict[str, str]) -> str:
        """``test ? left : right``: only the branch the test picks is evaluated."""
        test_tree, left_tree, right_tree = (_tree(child) for child in tree.children)
        test = self.node(test_tree, names)
        result, is_bool = self.temporary(), self.temporary()
        self.emit(f"{is_bool} = type({test}) in BOOLS")
        self.emit(f"if {test}:")
        self.depth += 1
        left = self.node(left_tree, names)
        self.emit(f"{result} = {left} if {is_bool} else condition({test}, {left}, FALSE)")
        self.depth -= 1
        self.emit("else:")
        self.depth += 1
        right = self.node(right_tree, names)
        self.emit(f"{result} = {right} if {is_bool} else condition({test}, FALSE, {right})")
        self.depth -= 1
        return result

    def _and(self, tree: Tree, names: dict[str, str]) -> str:
        return self._logic(tree, names, "not ", "FALSE", "and_")

    def _or(self, tree: Tree, names: dict[str, str]) -> str:
        return self._logic(tree, names, "", "TRUE", "or_")

    def _logic(
        self, tree: Tree, names: dict[str, str], decides: str, decided: str, combine: str
    ) -> str:
        """``&&`` and ``||``: the right operand only if the left one does not decide."""
        left_tree, right_tree = (_tree(child) for child in tree.children)
        left = self.node(left_tree, names)
        result = self.temporary()
        self.emit(f"if type({left}) in BOOLS and {decides}{left}: {result} = {decided}")
        self.emit("else:")
        self.depth += 1
        right = self.node(right_tree, names)
        both_bool = f"type({left}) in BOOLS and type({right}) in BOOLS"
        self.emit(f"if {both_bool}: {result} = TRUE if {right} else FALSE")
        self.emit(f"else: {result} = {combine}({left}, {right})")
        self.depth -= 1
        return result

    def _binary(self, tree: Tree, names: dict[str, str]) -> str:
        operator_tree, right_tree = (_tree(child) for child in tree.children)
        name = _OPERATORS[str(operator_tree.data)]
        left = self.node(_tree(operator_tree.children[0]), names)
        right = self.node(right_tree, names)
        operation = self.constant(native.BINARY[name])
        result = self.temporary()
        if name in _COMPARISONS:
            kinds = _EQUATABLE if name in ("_==_", "_!=_") else _ORDERED
            self.emit(f"if {self._same_type_among(left, right, kinds)}:")
            self.emit(f"    {result} = TRUE if {left} {_COMPARISONS[name]} {right} else FALSE")
            self.emit(f"else: {result} = {operation}({left}, {right})")
        elif name == "_in_":
            string = "" if type(self.constants.get(left)) is str else f" and type({left}) is str"
            self.emit(f"if type({right}) is dict{string}:")
            self.emit(f"    {result} = TRUE if {left} in {right} else FALSE")
            self.emit(f"else: {result} = contains({left}, {right})")
        else:
            self.emit(f"{result} = {operation}({left}, {right})")
        return result

    def _same_type_among(self, left: str, right: str, kinds: frozenset[type]) -> str:
        """The test that both operands are of one type among ``kinds``, simpler where one is
        a constant."""
        for operand, other in ((left, right), (right, left)):
            if operand in self.constants:
                kind = type(self.constants[operand])
                if kind not in kinds:
                    return "False"
                return f"type({other}) is {self.constant(kind)}"
        kinds_name = "EQUATABLE" if kinds is _EQUATABLE else "ORDERED"
        return f"type({left}) is type({right}) and type({left}) in {kinds_name}"

    def _unary(self, tree: Tree, names: dict[str, str]) -> str:
        operator_tree, operand_tree = (_tree(child) for child in tree.children)
        operand = self.node(operand_tree, names)
        result = self.temporary()
        if operator_tree.data == "unary_not":
            self.emit(f"if type({operand}) in BOOLS: {result} = FALSE if {operand} else TRUE")
            self.emit(f"else: {result} = not_({operand})")
        else:
            self.emit(f"{result} = negate({operand})")
        return result

    def _primary(self, tree: Tree, names: dict[str, str]) -> str:
        child = _tree(tree.children[0])
        if child.data not in ("list_lit", "map_lit"):
            return self._interpreted(tree, names)
        items = self._list(child.children[0], names) if child.children else []
        result = self.temporary()
        make = "make_list" if child.data == "list_lit" else "make_map"
        self.emit(f"{result} = {make}([{', '.join(items)}])")
        return result

    def _list(self, exprlist: object, names: dict[str, str]) -> list[str]:
        return [self.node(_tree(child), names) for child in _tree(exprlist).children]


def _is_name(node: object, name: str) -> bool:
    return isinstance(node, lark.Tree) and node.data == "_name" and node.children[0] == name


def _tree(node: object) -> Tree:
    assert isinstance(node, lark.Tree)
    return node


__all__ = ["Result", "compile_closure"]
