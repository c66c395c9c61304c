"""CEL values: Pods converted to them, their type names and errors as messages say them."""

from __future__ import annotations

from typing import Any, Final

import lark
from celpy import celtypes
from celpy.adapter import json_to_cel

Result = Any  # a celtypes value or a CELEvalError
Tree = lark.Tree[Any]

TRUE: Final = celtypes.BoolType(True)
FALSE: Final = celtypes.BoolType(False)


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


def _new_map() -> celtypes.MapType:
    # MapType.__init__ only copies its argument, in Python; an empty one needs none of it.
    return celtypes.MapType.__new__(celtypes.MapType)


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
    ((celtypes.BoolType, bool), "bool"),
    ((celtypes.IntType, celtypes.UintType, int), "int"),
    ((celtypes.DoubleType, float), "double"),
    (str, "string"),
    (bytes, "bytes"),
    (list, "list"),
    (dict, "map"),
    (type(None), "null"),
)
