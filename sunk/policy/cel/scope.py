"""What a compiled expression runs in: the names it sees, the lazy ``variables``, and the
helpers its generated code calls off its fast paths (see :mod:`~sunk.policy.cel.codegen`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from celpy import celtypes
from celpy.evaluation import Activation, CELEvalError

from sunk.policy.cel import native
from sunk.policy.cel.evaluator import FastEvaluator, bind_names
from sunk.policy.cel.operators import FUNCTION_CHAIN
from sunk.policy.cel.values import Result, Tree, type_name

Scope = dict[str, Any]
"""The names an expression sees: ``object``, ``variables``, ``params``... (or a test's own)."""

Closure = Callable[[Scope], Result]
"""A compiled expression: its value, or its CELEvalError, in a scope."""

UNKNOWN: Final[Any] = object()
"""Not found (a missing key, a variable not computed yet)."""


class Variables:
    """``variables``: each computed when first read, then kept for this Pod and policy.

    This is Kubernetes' behaviour, and it saves the work of variables only some paths need.
    Load-time checks ensure a variable reads only those defined before it, so there is no cycle.
    """

    __slots__ = ("_closures", "scope", "values")

    def __init__(self, closures: Mapping[str, Closure]) -> None:
        self._closures = closures
        self.values: dict[str, Result] = {}
        self.scope: Scope = {}

    def get(self, name: str) -> Result:
        value = self.values.get(name, UNKNOWN)
        if value is not UNKNOWN:
            return value
        closure = self._closures.get(name)
        if closure is None:
            return no_key(name)
        value = self.values[name] = closure(self.scope)
        return value

    def as_map(self) -> VariablesMap:
        """``variables`` as a whole, for an expression that reads it so: a map whose values are
        computed when read (a variable may read ``size(variables)`` without computing itself)."""
        return VariablesMap(self)


class VariablesMap(celtypes.MapType):
    """``variables`` as a map: each value computed when first read (as :class:`Variables`)."""

    def __init__(self, variables: Variables) -> None:
        super().__init__()
        self._variables = variables
        for name in variables._closures:
            dict.__setitem__(self, celtypes.StringType(name), UNKNOWN)

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        if value is UNKNOWN:
            value = self._variables.get(str(key))
            dict.__setitem__(self, key, value)
        return value


def no_key(field: str) -> CELEvalError:
    return CELEvalError(f"no such key: {field!r}", KeyError, None)


def name_value(scope: Scope, name: str) -> Result:
    """A free name's value: from the scope, else a function of that name (``int``), else an
    error, as cel-python resolves names."""
    try:
        value = scope[name]
    except KeyError:
        function = FUNCTION_CHAIN.get(name)
        if function is None:
            return CELEvalError(f"undeclared reference to '{name}'", KeyError, (name,))
        return function
    return value.as_map() if type(value) is Variables else value


def variable_of(variables: Result, scope: Scope, name: str) -> Result:
    """``variables.<name>`` where ``variables`` is not the lazy kind (a test gives a map)."""
    if type(variables) is Variables:
        return variables.get(name)
    if variables is None and "variables" not in scope:
        return CELEvalError("undeclared reference to 'variables'", KeyError, ("variables",))
    return select(variables, name)


def select(member: Result, field: str) -> Result:
    """``member.field``, with cel-python's answers for what is not a map."""
    if isinstance(member, celtypes.MessageType):
        return member.get(field)
    if isinstance(member, dict):
        if type(member) is VariablesMap:
            try:
                return member[field]
            except KeyError:
                return no_key(field)
        # Any other dict is read as JSON's: its own __getitem__ (a defaultdict's __missing__)
        # could invent the field, which converting it to a map never did.
        value = dict.get(member, field, UNKNOWN)
        return no_key(field) if value is UNKNOWN else value
    if isinstance(member, CELEvalError):
        return member
    message = f"type '{type_name(member)}' does not support field selection"
    return CELEvalError(message, TypeError, None)


def undeclared(name: str) -> CELEvalError:
    return CELEvalError(f"undeclared reference to '{name}'", KeyError, (name,))


def make_list(values: list[Result]) -> Result:
    """A list literal: the first error among its items, or the list."""
    for value in values:
        if isinstance(value, CELEvalError):
            return value
    return values


def make_map(entries: list[Result]) -> Result:
    """cel-python's map literal: errors kept as values; a repeated or unhashable key an error."""
    values = [native.as_cel(entry) for entry in entries]
    result = celtypes.MapType()
    try:
        for key, value in zip(values[0::2], values[1::2], strict=True):
            if key in result:
                raise ValueError(f"Duplicate key {key!r}")
            result[key] = value
    except (ValueError, TypeError) as error:
        return CELEvalError(error.args[0], error.__class__, error.args)
    return result


def not_iterable(method: str, items: Result, error: Exception) -> CELEvalError:
    message = f"no matching overload for {method}() on {type_name(items)}"
    return CELEvalError(message, error.__class__, error.args)


def interpreted(tree: Tree) -> Closure:
    """cel-python's evaluator for ``tree``, with the names in scope: for what the code
    generator has no code of its own (or cannot compile, nested too deeply)."""

    def interpret(scope: Scope) -> Result:
        values = {
            name: native.as_cel(value.as_map() if type(value) is Variables else value)
            for name, value in scope.items()
        }
        activation = Activation.__new__(Activation)
        activation.identifiers = bind_names(values, parent=None)
        activation.functions = FUNCTION_CHAIN
        activation.package = None
        return FastEvaluator(tree, activation).visit_safely(tree)

    return interpret


def plain_constant(value: Result) -> Result:
    """A literal as the plain value it equals, where there is one (not ``1u`` or bytes)."""
    for kind, plain in (
        (celtypes.BoolType, bool),
        (celtypes.IntType, int),
        (celtypes.DoubleType, float),
        (celtypes.StringType, str),
    ):
        if type(value) is kind:
            return plain(value)
    return value
