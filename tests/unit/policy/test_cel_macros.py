"""all() and exists() over elements whose values are not bools."""

from __future__ import annotations

import itertools
from functools import reduce
from typing import Any

import pytest
from celpy import celtypes
from celpy.evaluation import CELEvalError

from sunk.policy.cel import as_cel
from sunk.policy.cel.native import all_of, any_of
from sunk.policy.cel.operators import AND, OR
from sunk.policy.cel.values import FALSE, TRUE

from .test_cel import our_program, ours, same, stock


def test_all_over_many_errors_does_not_grow_its_error_exponentially() -> None:
    """cel-python folds the values with ``&&``, whose error quotes both sides: each failing
    element doubled the message. Ours gives the same outcome (false if any is false, else an
    error) with a message of fixed size, fast."""
    values: dict[str, Any] = {"params": {"items": [{}] * 20}}
    for expression in (
        "params.items.all(x, x.nothing == 1)",
        "params.items.exists(x, x.nothing == 1)",
    ):
        result = ours(expression, values)
        assert isinstance(result, CELEvalError)
        assert len(str(result.args)) < 100_000, (expression, len(str(result.args)))


def _values() -> list[Any]:
    return [TRUE, FALSE, True, False, celtypes.IntType(1), "x", CELEvalError("no such key")]


@pytest.mark.parametrize("length", [0, 1, 2, 3])
def test_all_and_exists_combine_as_cel_pythons_fold_does(length: int) -> None:
    """Every list of up to three values, bools, other values and errors: the same outcome as
    cel-python's ``reduce(&&, values, true)`` and ``reduce(||, values, false)`` (any error for
    an error)."""
    for combination in itertools.product(_values(), repeat=length):
        results = list(combination)
        converted = [as_cel(value) for value in results]
        assert same(as_cel(all_of(results)), as_cel(reduce(AND, converted, TRUE))), results
        assert same(as_cel(any_of(results)), as_cel(reduce(OR, converted, FALSE))), results


def test_macros_nested_deeper_than_python_compiles_are_evaluated_all_the_same() -> None:
    """Each macro is a loop in a ``try`` of the generated code, and Python refuses more than 20
    nested blocks: 25 nested macros are left to cel-python's evaluator, with its result."""
    for depth, runner in ((5, "evaluate"), (25, "interpreted.<locals>.interpret")):
        expression = "true"
        for level in range(depth):
            expression = f"[1].all(v{level}, {expression} && v{level} == 1)"
        assert our_program(expression, ("object",), ()).closure.__qualname__ == runner
        assert same(ours(expression, {"object": {}}), stock(expression, {"object": {}}))
        assert ours(expression, {"object": {}}) == TRUE
