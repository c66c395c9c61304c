"""The custom CEL functions, called from CEL as policies call them."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from celpy.evaluation import CELEvalError

from sunk.policy.cel import compile_expression, new_activation, to_cel
from sunk.policy.functions import FUNCTIONS
from sunk.quantity import Quantity


def run(expression: str, **values: Any) -> Any:
    program = compile_expression(expression, names=values.keys())
    return program.run(new_activation({name: to_cel(value) for name, value in values.items()}))


def error_of(expression: str, **values: Any) -> str:
    result = run(expression, **values)
    assert isinstance(result, CELEvalError), result
    return str(result.args[0])


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("1", 1),
        ("-2", -2),
        ("+3", 3),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("5.", 5),
        ("500m", Fraction(1, 2)),
        ("250u", Fraction(1, 4000)),
        ("3n", Fraction(3, 10**9)),
        ("1k", 1000),
        ("1M", 10**6),
        ("1G", 10**9),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1E", 10**18),
        ("1Ki", 1024),
        ("1Mi", 1024**2),
        ("128Gi", 128 * 1024**3),
        ("1Ti", 1024**4),
        ("1Pi", 1024**5),
        ("1Ei", 1024**6),
        ("1e3", 1000),
        ("1E3", 1000),
        ("2e-3", Fraction(1, 500)),
        ("1.5Gi", 3 * 512 * 1024**2),
    ],
)
def test_quantities_parse_every_kubernetes_suffix(text: str, value: Fraction | int) -> None:
    assert Quantity.parse(text).value == value
    assert run(f"isQuantity('{text}')")
    assert run(f"quantity('{text}') == quantity('{text}')")


@pytest.mark.parametrize(
    "text", ["", "Gi", "1 Gi", "1gi", "1KB", "0x10", "1e", "1e1000", "--1", "1.2.3"]
)
def test_invalid_quantities(text: str) -> None:
    assert not run(f"isQuantity('{text}')")
    assert "quantity" in error_of(f"quantity('{text}')")


def test_quantities_compare_and_convert() -> None:
    assert run("quantity('1Gi').isGreaterThan(quantity('1G'))")
    assert run("quantity('1G').isLessThan(quantity('1Gi'))")
    assert run("quantity('1000m') == quantity('1')")
    assert run("quantity('1k').compareTo(quantity('1000'))") == 0
    assert run("quantity('1').compareTo(quantity('2'))") == -1
    assert run("quantity('1.5').asApproximateFloat()") == 1.5
    assert run("quantity('2Ki').asInteger()") == 2048
    assert run("quantity('1.5k').isInteger()")
    assert not run("quantity('500m').isInteger()")
    assert run("quantity('-1').sign()") == -1 and run("quantity('0').sign()") == 0
    assert run("quantity('1').add(quantity('500m')) == quantity('1500m')")
    assert run("quantity('1').sub(1).sign()") == 0
    assert run("quantity('1') < quantity('2')")
    assert run("quantity(8) == quantity('8')")
    assert "not an integer" in error_of("quantity('500m').asInteger()")
    assert "overflow" in error_of("quantity('1e30').asInteger()")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", True),
        ("-12", True),
        ("+7", True),
        ("9223372036854775807", True),
        ("9223372036854775808", False),
        ("", False),
        ("1.0", False),
        (" 1", False),
        ("1_000", False),
        ("٣", False),
        ("0x1F", False),
        ("1" * 5000, False),
    ],
)
def test_is_integer_accepts_exactly_what_int_converts(text: str, expected: bool) -> None:
    assert bool(run("s.isInteger()", s=text)) is expected
    if expected:
        assert run("int(s)", s=text) == int(text)


def test_string_helpers() -> None:
    assert run("'a,b,,c'.split(',')") == ["a", "b", "", "c"]
    assert run("'a,b,c'.split(',', 2)") == ["a", "b,c"]
    assert run("'a,b'.split(',', 0)") == []
    assert run("'abc'.split('')") == ["a", "b", "c"]
    assert run("''.split(',')") == [""]
    assert run("['a', 'b'].join()") == "ab"
    assert run("['a', 'b'].join(', ')") == "a, b"
    assert run("'ÀBc'.lowerAscii()") == "Àbc"
    assert run("'àbC'.upperAscii()") == "àBC"
    assert run("'  x \\t'.trim()") == "x"
    assert run("'abc'.contains('b')")
    assert run("'sunk-1'.matches('^[a-z]+-[0-9]$')")
    assert run("[1, 2, 3].sum()") == 6
    assert run("[].sum()") == 0
    assert run("[0.5, 0.25].sum()") == 0.75


def test_prefixed_selects_and_strips_a_prefix() -> None:
    annotations = {"sunk.coreweave.com/a": "1", "other/b": "2", "sunk.coreweave.com/c-d": "3"}
    assert run("m.prefixed('sunk.coreweave.com/')", m=annotations) == {"a": "1", "c-d": "3"}
    assert run("m.prefixed('sunk.coreweave.com/')['c-d']", m=annotations) == "3"


@pytest.mark.parametrize(
    "expression",
    [
        "quantity(1.5)",
        "quantity(true)",
        "(1).sign()",
        "'1'.asInteger()",
        "'1'.asApproximateFloat()",
        "quantity('1').add('1')",
        "quantity('1').compareTo(1.0)",
        "quantity('1').isGreaterThan('2')",
        "(1).isInteger()",
        "(1).split(',')",
        "'a'.split(1)",
        "'a'.split(',', true)",
        "'a'.join()",
        "[1].join()",
        "(1).lowerAscii()",
        "(1).upperAscii()",
        "(1).trim()",
        "'a'.prefixed('x')",
        "{}.prefixed(1)",
        "'x'.sum()",
        "[1, 2.0].sum()",
        "(1).matches('x')",
        "[9223372036854775807, 1].sum()",
        "quantity('1') < 2",
    ],
)
def test_wrong_arguments_give_cel_errors_not_exceptions(expression: str) -> None:
    error_of(expression)


def test_a_pattern_known_only_at_run_time_may_be_invalid() -> None:
    assert error_of("'x'.matches(p)", p="(") == "invalid regular expression: missing ): ("


def test_errors_stay_values_so_logic_can_absorb_them() -> None:
    assert run("true || quantity('bad').sign() == 1")
    assert run("quantity('bad').sign() == 1 || true")
    assert run("!(false && 'x'.matches(p))", p="(")


def test_every_function_is_registered_under_its_cel_name() -> None:
    assert set(FUNCTIONS) == {
        "quantity", "isQuantity", "sign", "asInteger", "asApproximateFloat", "add", "sub",
        "compareTo", "isGreaterThan", "isLessThan", "isInteger", "split", "join", "lowerAscii",
        "upperAscii", "trim", "matches", "sum", "prefixed",
    }  # fmt: skip
