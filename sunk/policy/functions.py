"""CEL functions that scheduling policies need and cel-python 0.5 lacks.

They follow Kubernetes CEL where Kubernetes has the same function (the quantity library, the
strings extension), so an operator's policy reads the same here as in a ValidatingAdmissionPolicy.

Every function returns a ``CELEvalError`` instead of raising: cel-python treats a returned error
as a value, which keeps ``&&``, ``||`` and ``?:`` able to absorb it, as CEL requires.
A method call ``x.f(y)`` is the function call ``f(x, y)``, so each function dispatches on the type
of its first argument (``isInteger`` serves both strings and quantities).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Final

import re2  # type: ignore[import-untyped]
from celpy import celtypes
from celpy.evaluation import CELEvalError

from sunk.quantity import Quantity

Result = Any  # a celtypes value or a CELEvalError: cel-python's own union is not precise enough

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

_INTEGER = re.compile(r"[+-]?[0-9]+")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _error(message: str) -> CELEvalError:
    return CELEvalError(message)


def _no_overload(name: str, *args: object) -> CELEvalError:
    kinds = ", ".join(type(arg).__name__ for arg in args)
    return CELEvalError(f"no such overload: {name}({kinds})")


def _as_int(value: int) -> Result:
    # int.__new__: celtypes.IntType() wraps a range-checking function around every call.
    if INT64_MIN <= value <= INT64_MAX:
        return int.__new__(celtypes.IntType, value)
    return _error("integer overflow")


# --- quantities ------------------------------------------------------------------------------


def quantity(text: Result) -> Result:
    """``quantity("128Gi")``: parse a quantity (integers are accepted as a convenience)."""
    if isinstance(text, Quantity):
        return text
    if isinstance(text, celtypes.BoolType):
        return _no_overload("quantity", text)
    if isinstance(text, int):
        return Quantity(Fraction(int(text)))
    if not isinstance(text, str):
        return _no_overload("quantity", text)
    try:
        return _parse_quantity(str(text))
    except (ValueError, ZeroDivisionError) as error:
        return _error(str(error))


@functools.lru_cache(maxsize=1024)
def _parse_quantity(text: str) -> Quantity:
    """Pods repeat the same few quantities ("1", "128Gi"); Quantity is immutable."""
    return Quantity.parse(text)


def is_quantity(text: Result) -> Result:
    """``isQuantity(s)``: whether ``quantity(s)`` would succeed."""
    return celtypes.BoolType(not isinstance(quantity(text), CELEvalError))


def sign(value: Result) -> Result:
    """``q.sign()``: -1, 0 or 1."""
    if not isinstance(value, Quantity):
        return _no_overload("sign", value)
    return _as_int((value.value > 0) - (value.value < 0))


def as_integer(value: Result) -> Result:
    """``q.asInteger()``: the quantity as an int, an error if it has a fraction or overflows."""
    if not isinstance(value, Quantity):
        return _no_overload("asInteger", value)
    if value.value.denominator != 1:
        return _error(f"quantity {value} is not an integer")
    return _as_int(value.value.numerator)


def as_approximate_float(value: Result) -> Result:
    """``q.asApproximateFloat()``: the quantity as a double, rounded."""
    if not isinstance(value, Quantity):
        return _no_overload("asApproximateFloat", value)
    try:
        return celtypes.DoubleType(float(value.value))
    except OverflowError:
        return _error("quantity too large for a double")


def _operand(name: str, value: Result, other: Result) -> tuple[Quantity, Quantity] | CELEvalError:
    if isinstance(other, int) and not isinstance(other, celtypes.BoolType):
        other = Quantity(Fraction(int(other)))
    if isinstance(value, Quantity) and isinstance(other, Quantity):
        return value, other
    return _no_overload(name, value, other)


def add(value: Result, other: Result) -> Result:
    """``q.add(q2)`` or ``q.add(int)``."""
    pair = _operand("add", value, other)
    return pair if isinstance(pair, CELEvalError) else Quantity(pair[0].value + pair[1].value)


def sub(value: Result, other: Result) -> Result:
    """``q.sub(q2)`` or ``q.sub(int)``."""
    pair = _operand("sub", value, other)
    return pair if isinstance(pair, CELEvalError) else Quantity(pair[0].value - pair[1].value)


def compare_to(value: Result, other: Result) -> Result:
    """``q.compareTo(q2)``: -1, 0 or 1."""
    pair = _operand("compareTo", value, other)
    if isinstance(pair, CELEvalError):
        return pair
    left, right = pair[0].value, pair[1].value
    return _as_int((left > right) - (left < right))


def is_greater_than(value: Result, other: Result) -> Result:
    """``q.isGreaterThan(q2)``."""
    pair = _operand("isGreaterThan", value, other)
    return pair if isinstance(pair, CELEvalError) else celtypes.BoolType(pair[0] > pair[1])


def is_less_than(value: Result, other: Result) -> Result:
    """``q.isLessThan(q2)``."""
    pair = _operand("isLessThan", value, other)
    return pair if isinstance(pair, CELEvalError) else celtypes.BoolType(pair[0] < pair[1])


def is_integer(value: Result) -> Result:
    """``s.isInteger()``: an optional sign and ASCII digits, within int64 (so ``int(s)`` works).

    On a quantity, ``q.isInteger()`` as in Kubernetes: no fraction, within int64.
    Python's ``int()`` also takes "1_000", " 12" and non-ASCII digits, which is why policies
    test with this before converting.
    """
    if isinstance(value, Quantity):
        number = value.value
        return celtypes.BoolType(number.denominator == 1 and INT64_MIN <= number <= INT64_MAX)
    if not isinstance(value, str):
        return _no_overload("isInteger", value)
    if len(value) > 20 or _INTEGER.fullmatch(value) is None:
        return celtypes.BoolType(False)
    return celtypes.BoolType(INT64_MIN <= int(value) <= INT64_MAX)


# --- strings ---------------------------------------------------------------------------------


def split(text: Result, separator: Result, limit: Result = None) -> Result:
    """``s.split(sep)`` and ``s.split(sep, n)`` as in Kubernetes' strings extension."""
    if not isinstance(text, str) or not isinstance(separator, str):
        return _no_overload("split", text, separator)
    if limit is None:
        count = -1
    elif isinstance(limit, int) and not isinstance(limit, celtypes.BoolType):
        count = int(limit)
    else:
        return _no_overload("split", text, separator, limit)
    if count == 0:
        return celtypes.ListType()
    if separator == "":
        pieces = list(text) if count < 0 else [*text[: count - 1], text[count - 1 :]]
        pieces = [piece for piece in pieces if piece] if text else []
    else:
        pieces = text.split(separator, count - 1 if count > 0 else -1)
    return celtypes.ListType([celtypes.StringType(piece) for piece in pieces])


def join(items: Result, separator: Result = "") -> Result:
    """``list.join()`` and ``list.join(sep)``: concatenate a list of strings."""
    if not isinstance(items, list) or not isinstance(separator, str):
        return _no_overload("join", items, separator)
    if not all(isinstance(item, str) for item in items):
        return _error("join: every element must be a string")
    return celtypes.StringType(separator.join(items))


def lower_ascii(text: Result) -> Result:
    """``s.lowerAscii()``: only A-Z change, as in Kubernetes."""
    if not isinstance(text, str):
        return _no_overload("lowerAscii", text)
    return celtypes.StringType(text.translate(_ASCII_LOWER))


def upper_ascii(text: Result) -> Result:
    """``s.upperAscii()``: only a-z change, as in Kubernetes."""
    if not isinstance(text, str):
        return _no_overload("upperAscii", text)
    return celtypes.StringType(text.translate(_ASCII_UPPER))


def _quiet_options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a bad pattern is reported as a CEL error, not on stderr
    return options


_QUIET: Final = _quiet_options()


@functools.lru_cache(maxsize=256)
def regex(pattern: str) -> Any:
    """The compiled RE2 pattern (CEL's regular expression dialect); raises ``re2.error``."""
    return re2.compile(pattern, options=_QUIET)


def regex_problem(error: Exception) -> str:
    """RE2's complaint about a pattern, readable (it comes as bytes)."""
    detail = error.args[0] if error.args else error
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    return f"invalid regular expression: {detail}"


def matches(text: Result, pattern: Result) -> Result:
    """``s.matches(re)``: whether RE2 pattern ``re`` matches anywhere in ``s``.

    Replaces cel-python's own, which builds the pattern's options at every call and logs
    invalid patterns to stderr.
    """
    if not isinstance(text, str) or not isinstance(pattern, str):
        return _no_overload("matches", text, pattern)
    try:
        compiled = regex(str(pattern))
    except re2.error as error:
        return _error(regex_problem(error))
    return celtypes.BoolType(compiled.search(text) is not None)


def trim(text: Result) -> Result:
    """``s.trim()``: without leading and trailing whitespace."""
    if not isinstance(text, str):
        return _no_overload("trim", text)
    return celtypes.StringType(text.strip())


# --- lists -----------------------------------------------------------------------------------


def sum_(items: Result) -> Result:
    """``list.sum()``: the sum of a list of ints or of doubles (0 for an empty list)."""
    if not isinstance(items, list):
        return _no_overload("sum", items)
    if all(isinstance(item, celtypes.IntType) for item in items):
        return _as_int(sum(int(item) for item in items))
    if items and all(isinstance(item, celtypes.DoubleType) for item in items):
        return celtypes.DoubleType(sum(float(item) for item in items))
    return _error("sum: the elements must be all ints or all doubles")


# --- maps ------------------------------------------------------------------------------------


def prefixed(mapping: Result, prefix: Result) -> Result:
    """``m.prefixed("sunk.coreweave.com/")``: the entries whose key starts with the prefix,
    keyed by the rest of the key.

    This lets policies read ``variables.sunk.priority`` whatever annotation prefix the
    scheduler is configured with.
    """
    if not isinstance(mapping, dict) or not isinstance(prefix, str):
        return _no_overload("prefixed", mapping, prefix)
    start = len(prefix)
    return celtypes.MapType(
        {
            celtypes.StringType(key[start:]): value
            for key, value in mapping.items()
            if isinstance(key, str) and key.startswith(prefix)
        }
    )


FUNCTIONS: Final[dict[str, Callable[..., Result]]] = {
    "quantity": quantity,
    "isQuantity": is_quantity,
    "sign": sign,
    "asInteger": as_integer,
    "asApproximateFloat": as_approximate_float,
    "add": add,
    "sub": sub,
    "compareTo": compare_to,
    "isGreaterThan": is_greater_than,
    "isLessThan": is_less_than,
    "isInteger": is_integer,
    "split": split,
    "join": join,
    "lowerAscii": lower_ascii,
    "upperAscii": upper_ascii,
    "trim": trim,
    "matches": matches,
    "sum": sum_,
    "prefixed": prefixed,
}
"""The custom functions by their CEL name, as ``celpy`` programs take them."""
