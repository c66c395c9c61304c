"""Function calls of compiled expressions give cel-python's results, whatever the types of
their arguments, and never raise."""

from __future__ import annotations

from celpy.evaluation import CELEvalError

from .test_cel import PLAIN_VALUES, ours, same, stock


def test_isquantity_of_a_plain_bool_is_false_as_in_cel_python() -> None:
    """A bool is not a quantity: a plain ``true`` is converted before ``quantity()`` sees it, which
    tells a bool from an int by cel-python's type."""
    values = {**PLAIN_VALUES, "params": {"flag": True}}
    expression = "isQuantity(params.flag)"
    expected = stock(expression, values)
    assert expected is not None and not expected  # cel-python: false
    actual = ours(expression, values)
    assert same(actual, expected), (actual, expected)


def test_bool_of_an_int_keeps_cel_pythons_value() -> None:
    """cel-python 0.5's ``bool(2)`` holds 2: it is not made a plain ``true``."""
    values = {**PLAIN_VALUES, "params": {"two": 2}}
    expression = "bool(params.two) == true"
    expected, actual = stock(expression, values), ours(expression, values)
    assert same(actual, expected), (actual, expected)


def test_a_function_raising_oserror_gives_an_error_value_not_an_exception() -> None:
    """A time zone that is a directory makes the library raise OSError: the call's value is an
    error, the expression does not raise."""
    values = {"object": {"metadata": {"annotations": {"tz": "Europe"}}}}
    expression = "timestamp('2026-01-01T00:00:00Z').getHours(object.metadata.annotations.tz)"
    result = ours(expression, values)  # raises IsADirectoryError today
    assert isinstance(result, CELEvalError)
