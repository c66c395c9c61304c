"""Compile CEL once, check it at load, and evaluate it quickly, with cel-python's parser,
types, functions and interpreter.

cel-python 0.5 spends most of a policy's time on overhead rather than on CEL: nine
pass-through parse-tree levels above every literal and name; ``typing`` subscriptions such as
``cast(Tuple[List[Result], Result], ...)`` built at every node (hashing large Unions was 40% of
the time); a ``functools.wraps`` wrapper built at every comparison, integer and macro call; a
copy of every binding for each element a macro visits; a linear scan for ``key in map``.
The default policies took 6 to 7 ms per Pod that way (see docs/benchmarks.md). So we

1. simplify each parse tree once (``_simplify``): drop pass-through nodes, fold literals,
   turn names, function calls, ``has()`` and macros into nodes that need no searching;
2. evaluate with ``_Evaluator``, a subclass of ``celpy.Evaluator`` whose hot methods are the
   library's own logic without that overhead, with ``&&``/``||`` skipping the right operand
   when the left one decides (the result is the same: ``false && x`` is false whatever x is);
3. call the library's operators and conversions through wrappers built once (``_FUNCTIONS``),
   and convert Pods with ``to_cel``, which gives what ``celpy.json_to_cel`` gives;
4. let callers build one activation per Pod and policy and run several expressions against it
   (``run_all``).

Results are those of cel-python's interpreter (``tests/unit/policy/test_cel.py`` compares
them), except in two places where cel-python 0.5 departs from CEL and we follow CEL:
``x != y`` is ``!(x == y)`` (cel-python fails ``map != null``), and an error inside ``map()``
or ``filter()`` is an error value that ``||`` and ``&&`` can absorb (cel-python raises it
through the whole expression). cel-python's compiled runner is not an option: in 0.5 it fails
on ``has()``.

Compilation also checks what cel-python only finds at run time: unknown names, functions and
methods, ``variables.x`` read before it is defined, and invalid constant regular expressions.
"""

from __future__ import annotations

import operator
from collections import ChainMap
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any, Final, NoReturn, cast

import celpy
import lark
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import (
    Activation,
    CELEvalError,
    Evaluator,
    NameContainer,
    Referent,
    base_functions,
    eval_error,
)

from sunk.policy.functions import FUNCTIONS, regex, regex_problem

Result = Any  # a celtypes value or a CELEvalError
Tree = lark.Tree[Any]

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
_OPERATORS: Final = {
    "relation_lt": "_<_",
    "relation_le": "_<=_",
    "relation_gt": "_>_",
    "relation_ge": "_>=_",
    "relation_eq": "_==_",
    "relation_ne": "_!=_",
    "relation_in": "_in_",
    "addition_add": "_+_",
    "addition_sub": "_-_",
    "multiplication_mul": "_*_",
    "multiplication_div": "_/_",
    "multiplication_mod": "_%_",
    "unary_not": "!_",
    "unary_neg": "-_",
}
_ARITHMETIC_ERRORS = (TypeError, ValueError, OverflowError, ZeroDivisionError)


class CelCompileError(Exception):
    """An expression that does not parse or refers to something that does not exist."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        where = f"line {line} column {column}: " if line and column else ""
        super().__init__(f"{where}{message}")
        self.line = line
        self.column = column


@dataclass(frozen=True, slots=True)
class Program:
    """One compiled expression, ready to run against many activations."""

    source: str
    ast: Tree

    def run(self, activation: Activation) -> Result:
        """The value, or the CELEvalError, of this expression; raises only on a bug."""
        return _Evaluator(self.ast, activation).visit_safely(self.ast)


def run_all(programs: Sequence[Program], activation: Activation) -> list[Result]:
    """Each program's value or CELEvalError, from a single pass of the evaluator."""
    if not programs:
        return []
    tree = lark.Tree("_each", [program.ast for program in programs])
    results: list[Result] = _Evaluator(tree, activation).visit(tree)
    return results


def compile_expression(
    text: str,
    *,
    variables: Collection[str] = (),
    names: Collection[str] = ROOT_NAMES,
) -> Program:
    """Parse, check and simplify one expression.

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
    return Program(text, simple)


def new_activation(values: Mapping[str, Result]) -> Activation:
    """An activation holding ``values`` (already CEL values) and the custom functions."""
    activation = Activation.__new__(Activation)
    activation.identifiers = _names(values, parent=None)
    activation.functions = _FUNCTION_CHAIN
    activation.package = None
    return activation


def to_cel(value: Any) -> Result:
    """JSON data (a Pod) as CEL values, as ``celpy.json_to_cel`` makes them, but faster.

    The library's version tests each value against ``typing.List`` and ``typing.Dict`` and
    wraps a checking function around each integer, which made converting a Pod cost more than
    evaluating the default policies. Anything but plain JSON types goes to the library.
    Raises ValueError, as the library does, for what JSON cannot hold.
    """
    kind = type(value)
    if kind is str:
        return str.__new__(celtypes.StringType, value)
    if kind is dict:
        result = _new_map()
        dict.update(result, {to_cel(key): to_cel(item) for key, item in value.items()})
        return result
    if kind is list:
        return celtypes.ListType([to_cel(item) for item in value])
    if kind is int:
        if not -(2**63) <= value < 2**63:
            raise ValueError("overflow")
        return int.__new__(celtypes.IntType, value)
    if kind is bool:
        return int.__new__(celtypes.BoolType, value)
    if kind is float:
        return float.__new__(celtypes.DoubleType, value)
    if value is None:
        return None
    return json_to_cel(value)


def _names(values: Mapping[str, Result], parent: NameContainer | None) -> NameContainer:
    """Bind names to values, in front of ``parent``'s bindings.

    cel-python checks every name against a regular expression and copies the enclosing
    bindings for each element a macro visits; chaining to them resolves names the same way.
    """
    container = NameContainer(parent=parent)
    for name, value in values.items():
        referent = Referent()
        referent.value = value
        dict.__setitem__(container, name, referent)
    return container


def _operator_in(item: Result, container: Result) -> Result:
    """``x in m``: a hash look-up for a string in a string-keyed map.

    cel-python's ``operator_in`` compares the item with every key; the result is the same.
    """
    if isinstance(container, dict) and isinstance(item, str):
        if item in container:
            return _TRUE
        if all(isinstance(key, str) for key in container):
            return _FALSE
    return _STOCK_IN(item, container)


def _int(value: Result) -> Result:
    """``int(x)``: cel-python's conversion, without building a range-checking wrapper per call."""
    if isinstance(value, str) and not value.lstrip("-").startswith(("0x", "0X")):
        number = int(value)
        if not -(2**63) <= number < 2**63:
            raise ValueError("overflow")
        return int.__new__(celtypes.IntType, number)
    return celtypes.IntType(value)


def _comparison(compare: Callable[[Any, Any], Any]) -> Callable[[Result, Result], Result]:
    """cel-python's ``boolean(compare)``, built once rather than at every comparison."""

    def compare_values(left: Result, right: Result) -> Result:
        if isinstance(left, CELEvalError):
            return left
        if isinstance(right, CELEvalError):
            return right
        return _TRUE if compare(left, right) else _FALSE

    return compare_values


def _not_equal(left: Result, right: Result) -> Result:
    """``a != b`` as CEL defines it, ``!(a == b)``: cel-python 0.5 fails ``map != null``."""
    equal = _EQUAL(left, right)
    if isinstance(equal, CELEvalError):
        return equal
    return _FALSE if equal else _TRUE


def _new_map() -> celtypes.MapType:
    # MapType.__init__ only copies its argument, in Python; an empty one needs none of it.
    return celtypes.MapType.__new__(celtypes.MapType)


# cel-python's combinators for all() and exists(), wrapped once rather than at every call.
_AND: Final[Callable[[Result, Result], Result]] = eval_error("no such overload", TypeError)(
    celtypes.logical_and
)
_OR: Final[Callable[[Result, Result], Result]] = eval_error("no such overload", TypeError)(
    celtypes.logical_or
)
_EQUAL: Final = _comparison(operator.eq)
_TRUE: Final = celtypes.BoolType(True)
_FALSE: Final = celtypes.BoolType(False)
_STOCK_IN: Final = base_functions["_in_"]
_FUNCTIONS: Final[dict[str, Callable[..., Result]]] = {
    **FUNCTIONS,
    "_in_": _operator_in,
    "_<_": _comparison(operator.lt),
    "_<=_": _comparison(operator.le),
    "_>_": _comparison(operator.gt),
    "_>=_": _comparison(operator.ge),
    "_==_": _EQUAL,
    "_!=_": _not_equal,
}
# Faster versions of calls whose name must keep naming a type (``type(x) == int``).
_FAST_CALLS: Final[dict[str, Callable[..., Result]]] = {"int": _int}
_FUNCTION_CHAIN: Final[ChainMap[str, Callable[..., Result]]] = ChainMap(_FUNCTIONS, base_functions)


def describe_error(error: BaseException) -> str:
    """A short, readable text for a CEL error (cel-python's can embed a whole activation)."""
    text = str(error.args[0]) if error.args else type(error).__name__
    text = text.split(" (in activation", 1)[0]
    return text if len(text) <= 300 else text[:297] + "..."


def type_name(value: object) -> str:
    """The CEL name of a value's type, for messages."""
    for kind, name in _TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


_TYPE_NAMES: Final[tuple[tuple[type | tuple[type, ...], str], ...]] = (
    (celtypes.BoolType, "bool"),
    ((celtypes.IntType, celtypes.UintType), "int"),
    (celtypes.DoubleType, "double"),
    (str, "string"),
    (bytes, "bytes"),
    (list, "list"),
    (dict, "map"),
    (type(None), "null"),
)


# --- simplification ---------------------------------------------------------------------------


def _simplify(tree: Tree) -> Tree:
    """The same expression with fewer nodes; see the module docstring."""
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


# --- evaluation -------------------------------------------------------------------------------


class _Evaluator(Evaluator):
    """celpy's Evaluator, with its hot methods rewritten without per-node overhead.

    Each override keeps the library method's behaviour: same functions called, same values,
    and a CELEvalError where it returns one (it also turns a few Python exceptions that the
    library would let escape into CELEvalErrors).
    """

    def visit(self, tree: Tree) -> Result:
        # lark's dispatch looks the rule up on the instance, then for a visit_wrapper, which
        # cel-python never uses; a table of the methods is quicker.
        method = _DISPATCH.get(tree.data)
        result = method(self, tree) if method else getattr(self, tree.data)(tree)
        if result.__class__ is CELEvalError:
            # cel-python's repr() of an error re-renders its parse tree, and cannot render a
            # simplified one; the error keeps its line and column.
            result.tree = None
        return result

    def visit_children(self, tree: Tree) -> list[Result]:
        # cel-python's methods visit children through this: make them go through visit().
        return [self.visit(c) if isinstance(c, lark.Tree) else c for c in tree.children]

    def sub_evaluator(self, ast: Tree) -> Evaluator:
        return _Evaluator(ast, activation=self.activation)

    def set_activation(self, values: Mapping[str, Result]) -> Evaluator:
        # A macro's variable, bound in front of the enclosing names (see ``_names``).
        base = self.base_activation
        activation = Activation.__new__(Activation)
        activation.identifiers = _names(values, parent=base.identifiers)
        activation.functions = base.functions
        activation.package = base.package
        self.activation = activation
        return self

    def visit_safely(self, tree: Tree) -> Result:
        """The value or the error: cel-python raises errors met inside map() and filter()."""
        try:
            return self.visit(tree)
        except CELEvalError as error:
            error.tree = None
            return error

    def _each(self, tree: Tree) -> list[Result]:
        return [self.visit_safely(child) for child in tree.children]

    def _const(self, tree: Tree) -> Result:
        return tree.children[0]

    def _name(self, tree: Tree) -> Result:
        name = cast(str, tree.children[0])
        container: NameContainer | None = self.activation.identifiers
        while container is not None:
            referent = dict.get(container, name)
            if referent is not None:
                return referent.value
            container = container.parent
        try:
            return self.activation.functions[name]
        except KeyError:
            return CELEvalError(f"undeclared reference to '{name}'", KeyError, (name,), tree=tree)

    def _macro(self, tree: Tree) -> Result:
        """all(), exists(), exists_one(), map() and filter(), as cel-python evaluates them."""
        method, variable, target_tree, body = cast(tuple[str, str, Tree, Tree], tree.children)
        target = self.visit(target_tree)
        if isinstance(target, CELEvalError):
            return target
        inner = _Evaluator(body, self.activation)

        def value(item: Result) -> Result:
            inner.set_activation({variable: item})
            return inner.visit_safely(body)

        try:
            if method == "all":
                return reduce(_AND, map(value, target), _TRUE)
            if method == "exists":
                return reduce(_OR, map(value, target), _FALSE)
            results = []
            for item in target:  # map, filter and exists_one fail on an error, as CEL says
                result = value(item)
                if isinstance(result, CELEvalError):
                    return result
                results.append((item, result))
        except (TypeError, ValueError, AttributeError) as error:  # not a list or a map
            message = f"no matching overload for {method}() on {type_name(target)}"
            return CELEvalError(message, error.__class__, error.args)
        if method == "map":
            return celtypes.ListType(result for _, result in results)
        if method == "filter":
            return celtypes.ListType(item for item, result in results if result)
        return _TRUE if sum(1 for _, result in results if result) == 1 else _FALSE

    def _has(self, tree: Tree) -> Result:
        return _FALSE if isinstance(self.visit(tree.children[0]), CELEvalError) else _TRUE

    def _function(self, tree: Tree) -> Result:
        name, *arguments = tree.children
        values = [self.visit(argument) for argument in arguments]
        return self.function_eval(cast(lark.Token, name), values)

    def expr(self, tree: Tree) -> Result:
        if len(tree.children) == 1:
            return self.visit(tree.children[0])
        condition = self.visit(tree.children[0])
        left = right = _FALSE
        if condition:
            left = self.visit(tree.children[1])
        else:
            right = self.visit(tree.children[2])
        function = self.activation.functions["_?_:_"]
        return self._apply(tree, "_?_:_", function, condition, left, right)

    def _binary(self, tree: Tree) -> Result:
        if len(tree.children) == 1:
            return self.visit(tree.children[0])
        operator_tree, right_tree = tree.children
        name = _OPERATORS[operator_tree.data]
        left = self.visit(operator_tree.children[0])
        right = self.visit(right_tree)
        return self._apply(tree, name, self.activation.functions[name], left, right)

    relation = addition = multiplication = _binary

    def unary(self, tree: Tree) -> Result:
        if len(tree.children) == 1:
            return self.visit(tree.children[0])
        operator_tree, operand_tree = tree.children
        name = _OPERATORS[operator_tree.data]
        operand = self.visit(operand_tree)
        return self._apply(tree, name, self.activation.functions[name], operand)

    def conditionaland(self, tree: Tree) -> Result:
        if len(tree.children) == 1:
            return self.visit(tree.children[0])
        left = self.visit(tree.children[0])
        if isinstance(left, celtypes.BoolType) and not left:
            return left
        right = self.visit(tree.children[1])
        return self._apply(tree, "_&&_", self.activation.functions["_&&_"], left, right)

    def conditionalor(self, tree: Tree) -> Result:
        if len(tree.children) == 1:
            return self.visit(tree.children[0])
        left = self.visit(tree.children[0])
        if isinstance(left, celtypes.BoolType) and left:
            return left
        right = self.visit(tree.children[1])
        return self._apply(tree, "_||_", self.activation.functions["_||_"], left, right)

    @staticmethod
    def _apply(tree: Tree, name: str, function: Callable[..., Result], *args: Result) -> Result:
        try:
            return function(*args)
        except _ARITHMETIC_ERRORS as error:
            symbol = name.strip("_")
            kinds = ", ".join(type_name(arg) for arg in args)
            message = f"no matching overload for '{symbol}' applied to ({kinds})"
            if isinstance(error, ZeroDivisionError):
                message = "modulus or divide by zero"
            elif not isinstance(error, TypeError):
                message = f"'{symbol}': {error}"
            result = CELEvalError(message, error.__class__, error.args, tree=tree)
            result.__cause__ = error
            return result

    def member_dot(self, tree: Tree) -> Result:
        member_tree, field_token = tree.children
        member = self.visit(member_tree)
        field = cast(lark.Token, field_token).value
        if type(member) is celtypes.MapType:  # the common case: a map from the Pod
            try:
                # MapType's own __getitem__ only adds a key-type check: field is a str.
                return dict.__getitem__(member, field)
            except KeyError:
                return CELEvalError(f"no such key: {field!r}", KeyError, None, tree=tree)
        if isinstance(member, CELEvalError):
            return member
        if isinstance(member, NameContainer):
            if field in member:
                return member[field].value
            return CELEvalError(f"no {field!r} in bindings", KeyError, None, tree=tree)
        if isinstance(member, celtypes.MessageType):
            return member.get(field)
        if isinstance(member, celtypes.MapType):
            try:
                return member[field]
            except KeyError:
                return CELEvalError(f"no such key: {field!r}", KeyError, None, tree=tree)
        message = f"type '{type_name(member)}' does not support field selection"
        return CELEvalError(message, TypeError, None, tree=tree)

    def member_dot_arg(self, tree: Tree) -> Result:
        method = cast(lark.Token, tree.children[1])
        target = self.visit(tree.children[0])
        arguments = self.visit(tree.children[2]) if len(tree.children) == 3 else []
        return self.method_eval(target, method, arguments)

    def method_eval(self, object: Result, method_ident: lark.Token, exprlist: Any = None) -> Result:
        name = method_ident.value
        function = self.activation.functions.get(name)
        if function is None:
            return CELEvalError(f"undeclared reference to '{name}'", KeyError, (name,))
        if isinstance(object, CELEvalError):
            return object
        if isinstance(exprlist, CELEvalError):
            return exprlist
        return self._call(method_ident, function, [object, *(exprlist or [])])

    def function_eval(self, name_token: lark.Token, exprlist: Any = None) -> Result:
        name = name_token.value
        function = _FAST_CALLS.get(name) or self.activation.functions.get(name)
        if function is None:
            return CELEvalError(f"undeclared reference to '{name}'", KeyError, (name,))
        if isinstance(exprlist, CELEvalError):
            return exprlist
        arguments = list(exprlist or [])
        for argument in arguments:
            if isinstance(argument, CELEvalError):
                return argument
        return self._call(name_token, function, arguments)

    @staticmethod
    def _call(
        token: lark.Token, function: Callable[..., Result], arguments: list[Result]
    ) -> Result:
        try:
            return function(*arguments)
        except (TypeError, AttributeError, ValueError, OverflowError) as error:
            kinds = ", ".join(type_name(argument) for argument in arguments)
            message = f"no matching overload for {token.value}({kinds})"
            if isinstance(error, ValueError | OverflowError):
                message = f"{token.value}: {error}"
            result = CELEvalError(message, error.__class__, error.args, token=token)
            result.__cause__ = error
            return result

    def exprlist(self, tree: Tree) -> Result:
        values = [self.visit(child) for child in tree.children]
        for value in values:
            if isinstance(value, CELEvalError):
                return value
        return celtypes.ListType(values)

    def mapinits(self, tree: Tree) -> Result:
        result = celtypes.MapType()
        values = [self.visit(child) for child in tree.children]
        for key, value in zip(values[0::2], values[1::2], strict=True):
            if key in result:
                raise ValueError(f"Duplicate key {key!r}")
            result[key] = value
        return result


_DISPATCH: Final[dict[str, Callable[[_Evaluator, Tree], Result]]] = {
    name: getattr(_Evaluator, name)
    for name in (
        "_each", "_const", "_name", "_macro", "_has", "_function", "expr", "conditionalor",
        "conditionaland", "relation", "addition", "multiplication", "unary", "member_dot",
        "member_dot_arg", "member_index", "primary", "literal", "exprlist", "mapinits",
    )
}  # fmt: skip
