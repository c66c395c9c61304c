"""CEL operators on plain JSON values, with cel-python's results (see :mod:`sunk.policy.cel`).

The compiled closures (:mod:`~sunk.policy.cel.closures`) evaluate a Pod as the API server
gave it: ``str``, ``int``, ``float``, ``bool``, ``None``, ``dict`` and ``list``, never converted.
Converting a whole Pod to cel-python's types cost more than evaluating the default policies.
Values that functions return (cel-python's ``StringType``, ``IntType``, ``MapType``,
quantities) mix with them freely.

Each operator takes the common case itself, when both operands are of one kind (two strings,
two integers, two booleans, two doubles, two lists), where the result is plainly the same as
cel-python's. Anything else goes to cel-python's own operator (or our faster stand-in of it,
:mod:`~sunk.policy.cel.operators`) after converting the operands with :func:`as_cel`, so
mixed types, errors, overflow, durations and quantities give exactly what the library gives.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Final

import re2  # type: ignore[import-untyped]
from celpy import celtypes
from celpy.evaluation import CELEvalError

from sunk.policy.cel.operators import FAST_CALLS, FUNCTION_CHAIN, apply_operator
from sunk.policy.cel.values import FALSE, TRUE, Result, to_cel, type_name
from sunk.policy.functions import _INTEGER, FUNCTIONS, regex, regex_problem

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

_BOOLS: Final = frozenset({bool, celtypes.BoolType})
_INTS: Final = frozenset({int, celtypes.IntType})
_DOUBLES: Final = frozenset({float, celtypes.DoubleType})
_STRINGS: Final = frozenset({str, celtypes.StringType})
_LISTS: Final = frozenset({list, celtypes.ListType})
_MAPS: Final = frozenset({dict, celtypes.MapType})
_PLAIN: Final = frozenset({str, int, float, bool, dict, list})

_KIND_OF: Final = {kind: kinds for kinds in (_STRINGS, _INTS, _BOOLS, _DOUBLES) for kind in kinds}

Binary = Callable[[Result, Result], Result]


def as_cel(value: Result) -> Result:
    """``value`` in cel-python's types: plain JSON values converted, the rest as they are."""
    kind = type(value)
    if kind is list or kind is celtypes.ListType:
        return celtypes.ListType([as_cel(item) for item in value])
    if kind is dict or kind is celtypes.MapType:
        result = celtypes.MapType.__new__(celtypes.MapType)
        dict.update(result, {as_cel(key): as_cel(item) for key, item in value.items()})
        return result
    if kind in _PLAIN:
        return to_cel(value)
    if kind.__module__ == celtypes.__name__ or isinstance(value, celtypes.MapType):
        return value  # cel-python's own (or the lazy variables)
    if isinstance(value, dict):  # read as JSON's: a defaultdict's __missing__ is not called
        return as_cel(dict(value.items()))
    if isinstance(value, list):
        return as_cel(list(value))
    return to_cel(value) if isinstance(value, str | int | float) else value


def plain_result(value: Result) -> Result:
    """A function's result as the plain value it equals, one level deep.

    Later operators then take their fast paths. A map becomes a ``dict`` only if its keys are
    all strings: a plain ``dict`` always has string keys (JSON's, or these).
    """
    kind = type(value)
    if kind is celtypes.MapType:
        if not all(type(key) in _STRINGS for key in value):
            return value
        # Strings as keys and values too: a cel-python string hashes and compares in Python.
        return {
            str(key): str(item) if type(item) is celtypes.StringType else item
            for key, item in value.items()
        }
    if kind is celtypes.BoolType and int(value) not in (0, 1):
        return value  # cel-python's bool(2) holds 2
    plain = _PLAIN_OF.get(kind)
    return value if plain is None else plain(value)


_PLAIN_OF: Final[dict[type, Callable[[Any], Any]]] = {
    celtypes.StringType: str,
    celtypes.IntType: int,
    celtypes.BoolType: bool,
    celtypes.DoubleType: float,
    celtypes.ListType: list,
}


def is_bool(value: Result) -> bool:
    """Whether ``value`` is a CEL bool (plain or cel-python's)."""
    return type(value) in _BOOLS


def _stock(name: str) -> Binary:
    """cel-python's operator ``name`` (or our stand-in), on converted operands."""
    function = FUNCTION_CHAIN[name]

    def stock(left: Result, right: Result) -> Result:
        return apply_operator(None, name, function, as_cel(left), as_cel(right))

    return stock


def _same_kind(left: Result, right: Result) -> frozenset[type] | None:
    """The kind both operands share, if they share one the fast paths know."""
    left_kind, right_kind = type(left), type(right)
    if left_kind is right_kind:
        return _KIND_OF.get(left_kind)
    for kinds in (_STRINGS, _INTS, _BOOLS, _DOUBLES):
        if left_kind in kinds and right_kind in kinds:
            return kinds
    return None


def _comparison(name: str, compare: Callable[[Any, Any], bool]) -> Binary:
    stock = _stock(name)

    def compare_values(left: Result, right: Result) -> Result:
        if _same_kind(left, right) is not None:
            return TRUE if compare(left, right) else FALSE
        if left is None and right is None and name == "_==_":
            return TRUE
        return stock(left, right)

    return compare_values


def _in_range(number: int, name: str, left: Result, right: Result) -> Result:
    if INT64_MIN <= number <= INT64_MAX:
        return number
    return _STOCK_ARITHMETIC[name](left, right)  # the library's overflow error


def _add(left: Result, right: Result) -> Result:
    kind = _same_kind(left, right)
    if kind is _INTS:
        return _in_range(int(left) + int(right), "_+_", left, right)
    if kind is _STRINGS:
        return str(left) + str(right)
    if kind is _DOUBLES:
        return float(left) + float(right)
    if type(left) in _LISTS and type(right) in _LISTS:
        return [*left, *right]
    return _STOCK_ARITHMETIC["_+_"](left, right)


def _subtract(left: Result, right: Result) -> Result:
    kind = _same_kind(left, right)
    if kind is _INTS:
        return _in_range(int(left) - int(right), "_-_", left, right)
    if kind is _DOUBLES:
        return float(left) - float(right)
    return _STOCK_ARITHMETIC["_-_"](left, right)


def _multiply(left: Result, right: Result) -> Result:
    kind = _same_kind(left, right)
    if kind is _INTS:
        return _in_range(int(left) * int(right), "_*_", left, right)
    if kind is _DOUBLES:
        return float(left) * float(right)
    return _STOCK_ARITHMETIC["_*_"](left, right)


def contains(item: Result, container: Result) -> Result:
    """``item in container``."""
    container_kind = type(container)
    if type(item) in _STRINGS:
        if container_kind is dict:  # keys are strings (see plain_result): a miss is false
            return TRUE if item in container else FALSE
        if container_kind is celtypes.MapType:
            # Keys from JSON and from map literals of strings are strings: a miss is false.
            if item in container:
                return TRUE
            if all(type(key) in _STRINGS for key in container):
                return FALSE
        elif container_kind in _LISTS and all(type(value) in _STRINGS for value in container):
            return TRUE if item in container else FALSE
    return _STOCK_IN(item, container)


def not_(operand: Result) -> Result:
    """``!x``."""
    if type(operand) in _BOOLS:
        return FALSE if operand else TRUE
    return apply_operator(None, "!_", FUNCTION_CHAIN["!_"], as_cel(operand))


def negate(operand: Result) -> Result:
    """``-x``."""
    kind = type(operand)
    if kind in _INTS and operand > INT64_MIN:
        return -int(operand)
    if kind in _DOUBLES:
        return -float(operand)
    return apply_operator(None, "-_", FUNCTION_CHAIN["-_"], as_cel(operand))


def and_(left: Result, right: Result) -> Result:
    """``left && right`` once ``left`` is known not to be false."""
    if type(left) in _BOOLS and type(right) in _BOOLS:
        return TRUE if left and right else FALSE
    return _STOCK_LOGIC["_&&_"](left, right)


def or_(left: Result, right: Result) -> Result:
    """``left || right`` once ``left`` is known not to be true."""
    if type(left) in _BOOLS and type(right) in _BOOLS:
        return TRUE if left or right else FALSE
    return _STOCK_LOGIC["_||_"](left, right)


def index(container: Result, key: Result) -> Result:
    """``container[key]``, with cel-python's errors."""
    container_kind, key_kind = type(container), type(key)
    if container_kind in _MAPS and key_kind in _STRINGS:
        try:
            return dict.__getitem__(container, key)
        except KeyError as error:
            return CELEvalError("no such key", KeyError, error.args)
    if container_kind in _LISTS and key_kind in _INTS:
        try:
            return list.__getitem__(container, key)
        except IndexError as error:
            return CELEvalError("invalid_argument", IndexError, error.args)
    return _stock_index(as_cel(container), as_cel(key))


def _stock_index(container: Result, key: Result) -> Result:
    """cel-python's ``_[_]`` with the errors its evaluator makes of exceptions."""
    try:
        return operator.getitem(container, key)
    except TypeError as error:
        message = (
            f"found no matching overload for _[_] applied to '({type(container)}, {type(key)})'"
        )
        return CELEvalError(message, TypeError, error.args)
    except KeyError as error:
        return CELEvalError("no such key", KeyError, error.args)
    except IndexError as error:
        return CELEvalError("invalid_argument", IndexError, error.args)


def condition(test: Result, left: Result, right: Result) -> Result:
    """``test ? left : right`` where ``test`` is not a bool: cel-python's answer (an error).

    Only the branch that ``test``'s truth picks was evaluated; the other is given as false.
    """
    function = FUNCTION_CHAIN["_?_:_"]
    return apply_operator(None, "_?_:_", function, as_cel(test), as_cel(left), as_cel(right))


_STOCK_IN: Final = _stock("_in_")
_STOCK_ARITHMETIC: Final = {name: _stock(name) for name in ("_+_", "_-_", "_*_", "_/_", "_%_")}
_STOCK_LOGIC: Final = {name: _stock(name) for name in ("_&&_", "_||_")}

BINARY: Final[dict[str, Binary]] = {
    "_==_": _comparison("_==_", operator.eq),
    "_!=_": _comparison("_!=_", operator.ne),
    "_<_": _comparison("_<_", operator.lt),
    "_<=_": _comparison("_<=_", operator.le),
    "_>_": _comparison("_>_", operator.gt),
    "_>=_": _comparison("_>=_", operator.ge),
    "_in_": contains,
    "_+_": _add,
    "_-_": _subtract,
    "_*_": _multiply,
    "_/_": _STOCK_ARITHMETIC["_/_"],
    "_%_": _STOCK_ARITHMETIC["_%_"],
}
"""Each binary operator by cel-python's name for it."""


# --- functions on plain arguments ------------------------------------------------------------
# The functions policies call most, for plain arguments, with the results of our functions
# (sunk.policy.functions) as plain values: without building cel-python values to convert back.


def _prefixed(mapping: dict[str, Any], prefix: str) -> Result:
    start = len(prefix)
    return {
        key[start:]: value
        for key, value in mapping.items()
        if isinstance(key, str) and key.startswith(prefix)
    }


def _is_integer(text: str) -> Result:
    if len(text) > 20 or _INTEGER.fullmatch(text) is None:
        return False
    return INT64_MIN <= int(text) <= INT64_MAX


def _int(text: str) -> Result:
    if text.lstrip("-").startswith(("0x", "0X")):
        return int(FAST_CALLS["int"](text))
    number = int(text)
    if not INT64_MIN <= number <= INT64_MAX:
        raise ValueError("overflow")
    return number


def _matches(text: str, pattern: str) -> Result:
    try:
        compiled = regex(pattern)
    except re2.error as error:
        return CELEvalError(regex_problem(error))
    return compiled.search(text) is not None


def _is_quantity(text: str) -> Result:
    return not isinstance(FUNCTIONS["quantity"](text), CELEvalError)


PLAIN_FUNCTIONS: Final[dict[Any, tuple[Callable[..., Result], tuple[type, ...]]]] = {
    FUNCTIONS["quantity"]: (FUNCTIONS["quantity"], (str,)),
    FUNCTIONS["isQuantity"]: (_is_quantity, (str,)),
    FUNCTIONS["prefixed"]: (_prefixed, (dict, str)),
    FUNCTIONS["isInteger"]: (_is_integer, (str,)),
    FUNCTIONS["matches"]: (_matches, (str, str)),
    FAST_CALLS["int"]: (_int, (str,)),
}
"""For a function, its plain version and the exact types of the arguments it takes."""


# --- all() and exists() ----------------------------------------------------------------------


def all_of(results: list[Result]) -> Result:
    """What cel-python's ``all()`` makes of its elements' values, which are not all bools:
    false if any is false; else the one value that is not a bool; else (two or more) an error.

    cel-python folds them with ``&&``, whose error for two values that are not bools quotes
    both: each element doubled the message, so 30 failing elements made gigabytes of text.
    """
    return _combined(results, decides=False, method="all")


def any_of(results: list[Result]) -> Result:
    """``exists()``, as :func:`all_of`: true if any is true; else the one value that is not a
    bool; else an error."""
    return _combined(results, decides=True, method="exists")


def _combined(results: list[Result], *, decides: bool, method: str) -> Result:
    others = []
    for result in results:
        if type(result) in _BOOLS:
            if bool(result) is decides:
                return TRUE if decides else FALSE
        else:
            others.append(result)
    if not others:
        return FALSE if decides else TRUE
    if len(others) == 1:
        return others[0]
    kinds = ", ".join(sorted({type_name(other) for other in others}))
    message = f"no such overload: {method}() of {len(others)} values that are not bools ({kinds})"
    return CELEvalError(message, TypeError, (message,))
