"""cel-python's operators and conversions, wrapped once rather than at every call, and the
faster versions of a few (``in`` on a map, ``int()``, the comparisons)."""

from __future__ import annotations

import operator
from collections import ChainMap
from collections.abc import Callable
from typing import Any, Final

import lark
from celpy import celtypes
from celpy.evaluation import CELEvalError, base_functions, eval_error

from sunk.policy.cel.values import FALSE, TRUE, Result, Tree, type_name
from sunk.policy.functions import FUNCTIONS

_ARITHMETIC_ERRORS: Final = (TypeError, ValueError, OverflowError, ZeroDivisionError)


def _operator_in(item: Result, container: Result) -> Result:
    """``x in m``: a hash look-up for a string in a string-keyed map.

    cel-python's ``operator_in`` compares the item with every key; the result is the same.
    """
    if isinstance(container, dict) and isinstance(item, str):
        if item in container:
            return TRUE
        if all(isinstance(key, str) for key in container):
            return FALSE
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
        return TRUE if compare(left, right) else FALSE

    return compare_values


def _not_equal(left: Result, right: Result) -> Result:
    """``a != b`` as CEL defines it, ``!(a == b)``: cel-python 0.5 fails ``map != null``."""
    equal = _EQUAL(left, right)
    if isinstance(equal, CELEvalError):
        return equal
    return FALSE if equal else TRUE


# cel-python's combinators for all() and exists(), wrapped once rather than at every call.
AND: Final[Callable[[Result, Result], Result]] = eval_error("no such overload", TypeError)(
    celtypes.logical_and
)
OR: Final[Callable[[Result, Result], Result]] = eval_error("no such overload", TypeError)(
    celtypes.logical_or
)
_EQUAL: Final = _comparison(operator.eq)
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
FAST_CALLS: Final[dict[str, Callable[..., Result]]] = {"int": _int}
FUNCTION_CHAIN: Final[ChainMap[str, Callable[..., Result]]] = ChainMap(_FUNCTIONS, base_functions)


def apply_operator(
    tree: Tree | None, name: str, function: Callable[..., Result], *args: Result
) -> Result:
    """``function(*args)`` for operator ``name``; what cel-python lets escape as an exception
    is an error value, as CEL defines it."""
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


def call_function(
    token: lark.Token, function: Callable[..., Result], arguments: list[Result]
) -> Result:
    """``function(*arguments)``; a Python exception becomes an error value naming the call."""
    try:
        return function(*arguments)
    except CALL_ERRORS as error:
        return call_failed(token, error, arguments)


CALL_ERRORS: Final = (TypeError, AttributeError, ValueError, ArithmeticError, LookupError, OSError)
"""What a function raises for arguments it does not take (or a time zone that is not one: an
OSError): an error value, not a crash."""


def call_failed(token: lark.Token, error: Exception, arguments: list[Result]) -> CELEvalError:
    """The error value of a call that raised ``error``."""
    kinds = ", ".join(type_name(argument) for argument in arguments)
    message = f"no matching overload for {token.value}({kinds})"
    if not isinstance(error, TypeError | AttributeError):
        message = f"{token.value}: {error}"
    result = CELEvalError(message, error.__class__, error.args, token=token)
    result.__cause__ = error
    return result
