"""Our CEL runner gives the results of cel-python's own interpreter, only faster."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import celpy
import pytest
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError
from hypothesis import given, settings
from hypothesis import strategies as st

from sunk.policy import PolicyEngine
from sunk.policy.cel import (
    Program,
    as_cel,
    compile_expression,
    new_activation,
    run_all,
    to_cel,
)
from sunk.policy.compiled import CompiledPolicy
from sunk.policy.functions import FUNCTIONS

from .pods import container, pod, realistic_pod, with_status

_STOCK = celpy.Environment()

Values = Mapping[str, Any]


def stock(expression: str, values: Values) -> Any:
    """cel-python's interpreter, as its documentation shows it, with our functions.

    ``values`` may be plain JSON: they are converted, as cel-python needs. The result is in
    cel-python's types (its arithmetic can give a plain ``float`` for a CEL double).
    """
    program = _stock_program(expression)
    try:
        return as_cel(program.evaluate({name: as_cel(value) for name, value in values.items()}))
    except CELEvalError as error:
        return error


def ours(expression: str, values: Values) -> Any:
    """Our compiled closures, in cel-python's types (they return plain values where they can)."""
    program = our_program(expression, tuple(values.keys()), tuple(_names(values)))
    return as_cel(program.run(new_activation(values)))


@functools.cache
def _stock_program(expression: str) -> Any:
    """Each expression parsed once: a program is made to be run many times."""
    return _STOCK.program(_STOCK.compile(expression), functions=FUNCTIONS)


@functools.cache
def our_program(expression: str, names: tuple[str, ...], variables: tuple[str, ...]) -> Program:
    """Each expression compiled once (``our_program.cache_clear()`` after changing the
    compiler)."""
    return compile_expression(expression, names=names, variables=variables)


def _names(values: Values) -> list[str]:
    variables = values.get("variables")
    return [str(name) for name in variables] if isinstance(variables, Mapping) else []


def same(left: Any, right: Any) -> bool:
    """Equal values of the same CEL types, or two errors."""
    if isinstance(left, CELEvalError) or isinstance(right, CELEvalError):
        return isinstance(left, CELEvalError) and isinstance(right, CELEvalError)
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(map(same, left, right))
    if isinstance(left, float) and math.isnan(left):
        return math.isnan(right)
    return bool(left == right)


POD = to_cel(realistic_pod())
SETTINGS = to_cel({"killWaitSeconds": 30, "annotationPrefix": "sunk.coreweave.com/"})
VALUES = {"object": POD, "settings": SETTINGS, "params": to_cel({"n": 3, "names": ["a", "b"]})}

CORPUS = [
    "true",
    "1 + 2 * 3 - 4 / 2 % 3",
    "-(1) == -1",
    "!true || !false",
    "1 < 2 && 2 <= 2 && 3 > 2 && 3 >= 3 && 1 == 1 && 1 != 2",
    "'a' + 'b' == 'ab' && 'abc' > 'abb'",
    "1.5 * 2.0 == 3.0",
    "2u + 3u == 5u",
    "9223372036854775807 + 1",
    "1 / 0",
    "1 % 0",
    "1 + 'a'",
    "1 == 'a'",
    "1 < 'a'",
    "-true",
    "!1",
    "[1, 2, 3][1]",
    "[1, 2, 3][5]",
    "{'a': 1}['b']",
    "{'a': 1, 'a': 2}",
    "{[1]: 2}",
    "{'a': 1/0}",
    "[1, 1/0]",
    "size([1, 2]) + size('abc') + size({'a': 1}) + 'xy'.size()",
    "'a' in ['a', 'b'] && 2 in {2: 'x'} && !('z' in {'a': 1})",
    "'a' in {1: 'x'}",
    "1 in 'abc'",
    "object.metadata.name",
    "object.metadata.annotations['sunk.coreweave.com/account']",
    "object.metadata.nothing",
    "object.spec.containers[0].resources.requests.cpu",
    "object.spec.containers.size()",
    "object.spec.containers.map(c, c.name)",
    "object.spec.containers.filter(c, c.name.startsWith('s')).size() == 1",
    "object.spec.containers.all(c, has(c.resources.requests.cpu))",
    "object.spec.containers.exists(c, c.name == 'metrics')",
    "object.spec.containers.exists_one(c, has(c.ports))",
    "object.spec.containers.all(c, c.nothing == 1)",
    "object.spec.containers.exists(c, c.nothing == 1 || c.name == 'server')",
    "[1, 0].all(x, 1 / x > 0)",
    "[1, 0].exists(x, 1 / x > 0)",
    "[[1, 2], [3]].map(l, l.map(x, x * 2))",
    "{'a': 1, 'b': 2}.all(k, k.size() == 1)",
    "has(object.spec.schedulerName) && !has(object.spec.nothing)",
    "has(object.spec.containers[0].resources.limits.cpu)",
    "has(object.nothing.deeper)",
    "object.metadata.name == 'x' ? 1 : 2",
    "true ? 1 : 1/0",
    "false ? 1/0 : 2",
    "1/0 == 1 ? 1 : 2",
    "1 ? 2 : 3",
    "false && 1/0 == 1",
    "1/0 == 1 && false",
    "true || 1/0 == 1",
    "1/0 == 1 || true",
    "1/0 == 1 || false",
    "1 && true",
    "1 || false",
    "int('42') + int(3.9) + int(2u)",
    "int('0x1F') + int('-0x1')",
    "int('abc')",
    "int('99999999999999999999')",
    "double(1) + double('2.5')",
    "string(1) + string(true) + string(1.5)",
    "uint(1) == 1u",
    "type(1) == int && type('a') == string && type([]) == list",
    "dyn(1) == 1",
    "timestamp('2026-01-01T00:00:00Z') < timestamp('2026-01-02T00:00:00Z')",
    "duration('1h') > duration('1m')",
    "'abc'.contains('b') && 'abc'.endsWith('c') && 'abc'.matches('^a')",
    "settings.killWaitSeconds - 5",
    "params.names.exists(n, n == 'b') && params.n == 3",
    "params.nothing",
    "quantity(object.spec.containers[0].resources.requests.memory).isGreaterThan(quantity('1Gi'))",
    "object.metadata.annotations.prefixed(settings.annotationPrefix).size()",
    "'user-id' in object.metadata.annotations.prefixed(settings.annotationPrefix)",
    "object.spec.containers.map(c, c.name).join(',').split(',').size()",
    "null == null && object.spec.nothing == null",
    "{'a': 1} == null",
    "[] == []",
    "{'a': [1, {'b': 2}]} == {'a': [1, {'b': 2}]}",
    # Each operator's fast paths and what they leave to cel-python: kinds mixed, errors,
    # overflow, other types.
    "1.0 == 1.0",
    "1.0 < 2.0",
    "double('NaN') == double('NaN')",
    "double('NaN') < 1.0",
    "true < false",
    "true == true",
    "false != true",
    "'a' < 'b'",
    "1 < 1.0",
    "1 == 1.0",
    "1u < 2u",
    "1u == 1",
    "[1] + [2]",
    "'a' + 1",
    "-9223372036854775808",
    "-(-9223372036854775807 - 1)",
    "9223372036854775807 * 2",
    "-9223372036854775807 - 2",
    "{'a': 1}.a",
    "{1: 2}[1]",
    "[1,2][true]",
    "size(null)",
    "null.x",
    "{'a': {'b': 1}}.a.b",
    "[1, 2].size()",
    "'abc'.size()",
    "{'a':1}.size()",
    "'x' in {'x': 1, 2: 3}",
    "'y' in {'x': 1, 2: 3}",
    "'x' in ['x', 1]",
    "'y' in ['x', 1]",
    "1 in [1, 'x']",
    "'12'.isInteger()",
    "int('12') + 1",
    "'a,b'.matches('^[a-z,]+$')",
    "{'k.x/y': 'v'}.prefixed('k.x/')",
    "[[1]].all(x, x.size() == 1)",
    "[1, 2].exists_one(x, x > 1)",
    "[1, 2].filter(x, x > 1).map(x, x * 2)",
    "{'a': 1}.exists(k, k == 'a')",
    "[1, 'a'].all(x, x)",
    "[true, 1].exists(x, x)",
    "[1, 2].all(x, x)",
    "has({'a': 1}.a)",
    "has({'a': 1}.b)",
    "true ? 1 : 2",
    "'x' ? 1 : 2",
    "(1/0) ? 1 : 2",
    "!'a'",
    "-'a'",
    "-(1.5)",
    "1 - 2 - 3",
    "2 * 3.0",
    "7 / 2",
    "-7 / 2",
    "-7 % 3",
    "1.0 / 0.0",
    "int('0x1f')",
    "int('-0X10')",
    "int(' 12')",
    "'1_000'.isInteger()",
    "'٣'.isInteger()",
    "[1,2,3][-1]",
    "[1][1]",
    "{'a': 1}['a']",
    "{'a': 1}[1]",
    "[1]['a']",
    "'abc'[0]",
    "object.metadata.labels['app']",
    "object.metadata.labels.app == 'inference'",
    "object.spec.containers[0].name",
    "object.spec.containers[5]",
    "object.metadata.annotations.prefixed('sunk.coreweave.com/').account",
    "object.spec.terminationGracePeriodSeconds + 1",
    "object.spec.terminationGracePeriodSeconds < 1.5",
    "object.spec.terminationGracePeriodSeconds == 5",
    "object.spec.containers.map(c, c.resources.requests.cpu)",
    "object.spec.containers.all(c, quantity(c.resources.requests.memory).sign() > 0)",
    "[1, 2, 3].map(x, [x, x]).size()",
    "[1,2].map(x, {'v': x})[1].v",
    "{'a': true} == {'a': true}",
    "[1, 'a'] == [1, 'a']",
    "null == {}",
    "size([1/0])",
    "[1/0].size()",
    "'a'.startsWith('a') && 'b'.endsWith('b')",
    "'abc'.contains(1)",
    "string(1u)",
    "bool('true')",
    "type(1u) == uint",
    "1u + 1u",
    "1u - 2u",
    "b'ab' + b'c'",
    "b'ab' == b'ab'",
    "size(b'ab')",
    "timestamp('2026-01-01T00:00:00Z') + duration('1h') > timestamp('2026-01-01T00:30:00Z')",
    "duration('1h') == duration('60m')",
    "[1, 2] == [1, 2.0]",
    "{'a': 1, 'b': 2}.map(k, k)",
    "{'a': 1}.filter(k, k == 'a')",
    "'ab'.all(c, true)",
    "[[1, 2], [3]].exists(l, l.exists(x, x == 3))",
    "[1].map(x, [1].map(y, x + y))",
    "[1].all(object, object == 1)",
    "[1].all(variables, variables == 1)",
    "[0, 1].all(x, 1 / x > 0) || true",
    "[0, 1].exists(x, 1 / x > 0) && false",
]

# Where cel-python 0.5 departs from CEL and we follow CEL (see sunk/policy/cel/__init__.py).
FIXED = {
    "{'a': 1} != null": True,
    "[1] != null": True,
    "{} != null": True,
    "object.spec != null": True,
    "[1, 0].map(x, 1 / x) == [1] || true": True,
    "object.spec.containers.filter(c, c.nothing == 1).size() == 0 || true": True,
}


# The Pod as the engine gives it: plain JSON, read as it is.
PLAIN_VALUES = {
    "object": realistic_pod(),
    "settings": {"killWaitSeconds": 30, "annotationPrefix": "sunk.coreweave.com/"},
    "params": {"n": 3, "names": ["a", "b"]},
}


@pytest.mark.parametrize("values", [PLAIN_VALUES, VALUES], ids=["plain", "cel"])
@pytest.mark.parametrize("expression", CORPUS)
def test_results_match_the_stock_interpreter(expression: str, values: Values) -> None:
    expected, actual = stock(expression, values), ours(expression, values)
    assert same(actual, expected), (actual, expected)


@pytest.mark.parametrize(("expression", "value"), FIXED.items())
def test_where_cel_python_departs_from_cel_we_follow_cel(expression: str, value: Any) -> None:
    assert isinstance(stock(expression, VALUES), CELEvalError)
    assert ours(expression, VALUES) == value


PODS = [
    realistic_pod(),
    pod(),
    pod(annotations={"priority": "x", "exclusive": "maybe", "excluded-nodes": "a,,b"}),
    pod(annotations={"comment": "a\nb", "user-id": "12", "timeout": "0", "exclusive": "false"}),
    pod(containers=[container(cpu=None), {"name": "bare"}], initContainers=[{"name": "i"}]),
    with_status(
        pod(containers=[container(cpu="4", memory="1Gi", limits={"cpu": "4", "memory": "1Gi"})]),
        qosClass="Guaranteed",
    ),
    pod(containers=[container(cpu="4", memory="1Gi", limits={"cpu": "4", "memory": "1Gi"})]),
    {"metadata": {"annotations": ["not", "a", "map"]}, "spec": {"containers": "none"}},
    {"spec": {"containers": [{"resources": {"requests": {"cpu": 2, "memory": None}}}]}},
    {},
]


def policy_expressions(policy: CompiledPolicy) -> list[tuple[str, str]]:
    spec = policy.document.spec
    found = [(f"variable {v.name}", v.expression) for v in spec.variables]
    found += [(f"condition {c.name}", c.expression) for c in spec.match_conditions]
    for index, validation in enumerate(spec.validations):
        found.append((f"validation {index}", validation.expression))
        if validation.message_expression:
            found.append((f"message {index}", validation.message_expression))
    found += [(f"mapping {name}", m.expression) for name, m in spec.mappings.items()]
    return found


def test_every_policy_expression_matches_the_stock_interpreter(
    with_examples: PolicyEngine,
) -> None:
    """All expressions of the default and example policies, on Pods good, bad and odd."""
    compared = 0
    namespace = to_cel(
        {"metadata": {"name": "team-a", "labels": {"example.com/max-gpus-per-pod": "2"}}}
    )
    for raw in PODS:
        base = {
            "object": to_cel(raw),
            "settings": with_examples._settings,
            "namespaceObject": namespace,
        }
        for policy in with_examples.policies:
            values = {**base, "params": policy.params}
            stock_variables: dict[str, Any] = {}
            our_variables: dict[str, Any] = {}
            for name, expression in policy_expressions(policy):
                expected = stock(
                    expression, {**values, "variables": celtypes.MapType(stock_variables)}
                )
                actual = ours(expression, {**values, "variables": celtypes.MapType(our_variables)})
                assert same(actual, expected), (policy.name, name, raw, actual, expected)
                if name.startswith("variable "):
                    stock_variables[name.split()[1]] = expected
                    our_variables[name.split()[1]] = actual
                compared += 1
    assert compared > 500


def test_run_all_gives_each_result_or_error() -> None:
    programs = [compile_expression(text) for text in ("1 + 1", "1/0", "object.metadata.name")]
    results = run_all(programs, new_activation(VALUES))
    assert results[0] == 2 and isinstance(results[1], CELEvalError)
    assert results[2] == "inference-7d9f8c6b5-x2x7k"
    assert run_all([], new_activation(VALUES)) == []


def test_errors_can_be_printed() -> None:
    error = ours("object.spec.containers.map(c, c.nothing)", VALUES)
    assert isinstance(error, CELEvalError)
    assert "no such key: 'nothing'" in repr(error)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=True)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_to_cel_converts_json_as_the_library_does(value: Any) -> None:
    assert same(to_cel(value), json_to_cel(value))


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, {1, 2}, object()])
def test_to_cel_refuses_what_the_library_refuses(value: Any) -> None:
    with pytest.raises(ValueError):
        json_to_cel(value)
    with pytest.raises(ValueError):
        to_cel(value)
