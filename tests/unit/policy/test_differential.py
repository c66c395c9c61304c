"""Every expression of the default and example policies gives, on generated Pods, what
cel-python's stock interpreter gives.

``test_cel.test_every_policy_expression_matches_the_stock_interpreter`` does this for ten
hand-written Pods; this does it for 200 Pods from ``generated.generated_pods``, with the
same ``stock``, ``ours`` and ``same``.

Where the two disagree, the disagreement is allowed only if it is one of the two places where we
follow CEL rather than cel-python 0.5 (the docstring of ``sunk.policy.cel`` and
``test_cel.FIXED``): ``x != null``, and an error inside ``map()`` or ``filter()`` that ``||`` or
``&&`` absorbs. That is decided precisely, not by skipping errors: the expression is run again
by ``FollowsCel``, cel-python's interpreter changed in exactly those two places, which records
which change it used; the disagreement is explained only if that run gives our result and used
one of the changes (or read a variable whose value one of them made).

cel-python also raises Python exceptions on some inputs instead of giving an error value (a
macro over an integer: ``'IntType' object is not iterable``). Those are not results to compare
with: ``compare`` records them as ``Crash`` and the test requires ours to give a CEL error there.
"""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import celpy
import lark
import pytest
from celpy import celtypes
from celpy.evaluation import CELEvalError, Evaluator

from sunk.policy import PolicyEngine, load_sources
from sunk.policy.cel import as_cel, codegen, to_cel
from sunk.policy.functions import FUNCTIONS
from sunk.policy.memo import KeyMaker

from .generated import ODD_SHARE, generated_pods, namespace_for
from .pods import policy as policy_document
from .test_cel import Values, our_program, ours, policy_expressions, same, stock

SEED: Final = 20260527
POD_COUNT: Final = 200
# The default and example policies have 67 expressions (variables, match conditions,
# validations, message expressions and mappings): 200 x 67 = 13,400 comparisons.
MIN_COMPARISONS: Final = 13_000
MUTANT_POD_COUNT: Final = 25

NE_NULL: Final = "x != null is !(x == null)"
MACRO_ERROR: Final = "an error inside map() or filter() is a value that || and && absorb"
# The only departures from cel-python allowed: sunk/policy/cel/__init__.py documents both.
DOCUMENTED_DEPARTURES: Final = frozenset({NE_NULL, MACRO_ERROR})

Evaluate = Callable[[str, Values], Any]


# --- cel-python, changed in the two documented places -----------------------------------------


class FollowsCel(Evaluator):
    """cel-python 0.5's interpreter with CEL's ``!=`` against null and CEL's errors in
    ``map()``/``filter()``; ``fixes`` records which of the two changed an evaluation."""

    def __init__(self, ast: lark.Tree[Any], activation: Any, fixes: set[str]) -> None:
        super().__init__(ast, activation)
        self.fixes = fixes

    def sub_evaluator(self, ast: lark.Tree[Any]) -> Evaluator:
        """Macro bodies with the same changes (the library's builds its own class)."""
        return FollowsCel(ast, self.activation, self.fixes)

    def relation(self, tree: lark.Tree[Any]) -> Any:
        """``x != null`` is ``!(x == null)`` where cel-python has no ``!=`` for the two."""
        operator = tree.children[0] if len(tree.children) == 2 else None
        if not isinstance(operator, lark.Tree) or operator.data != "relation_ne":
            return super().relation(tree)
        operands: Any = self.visit_children(tree)  # [[left], right], as the library's has it
        left, right = operands[0][0], operands[1]
        try:
            return self.activation.resolve_function("_!=_")(left, right)
        except TypeError as error:
            errors = isinstance(left, CELEvalError) or isinstance(right, CELEvalError)
            if (left is None or right is None) and not errors:
                try:
                    equal = self.activation.resolve_function("_==_")(left, right)
                except TypeError:
                    pass
                else:
                    if not isinstance(equal, CELEvalError):
                        self.fixes.add(NE_NULL)
                        return celtypes.BoolType(not equal)
            message = f"found no matching overload for {operator.data!r}"
            return CELEvalError(message, type(error), error.args, tree=tree)

    def member_dot_arg(self, tree: lark.Tree[Any]) -> Any:
        """An error raised by the body of ``map()`` or ``filter()`` is the macro's value."""
        method = tree.children[1]
        if not isinstance(method, lark.Token) or method.value not in ("map", "filter"):
            return super().member_dot_arg(tree)
        items = self.visit(tree.children[0])  # as the library's member_dot_arg() does
        if isinstance(items, CELEvalError):
            return items
        body = self.build_macro_eval(tree)
        try:
            if method.value == "map":
                return celtypes.ListType(map(body, items))
            return celtypes.ListType(filter(body, items))
        except CELEvalError as error:
            self.fixes.add(MACRO_ERROR)
            return error


_REFERENCE = celpy.Environment()
_reference_programs: dict[str, Any] = {}


def follows_cel(expression: str, values: Values) -> tuple[Any, frozenset[str]]:
    """The value (or CELEvalError) CEL gives, by ``FollowsCel``, and the changes it used."""
    program = _reference_programs.get(expression)
    if program is None:
        program = _REFERENCE.program(_REFERENCE.compile(expression), functions=FUNCTIONS)
        _reference_programs[expression] = program
    fixes: set[str] = set()
    value: Any
    evaluator = FollowsCel(program.ast, program.new_activation(), fixes)
    try:
        value = as_cel(evaluator.evaluate({name: as_cel(item) for name, item in values.items()}))
    except CELEvalError as error:
        value = error
    return value, frozenset(fixes)


_VARIABLE = re.compile(r"""\bvariables\s*(?:\.\s*(\w+)|\[\s*['"]([^'"]*)['"]\s*\])""")


def variables_read(expression: str) -> set[str]:
    return {dot or index for dot, index in _VARIABLE.findall(expression)}


# --- the comparison ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Crash:
    """A Python exception where an evaluator should give a value or a CELEvalError."""

    error: Exception

    def __str__(self) -> str:
        return f"raised {type(self.error).__name__}: {self.error}"


def _run(evaluate: Evaluate, expression: str, values: Values) -> Any:
    try:
        return evaluate(expression, values)
    except Exception as error:  # a bug of the evaluator: recorded, not raised
        return Crash(error)


def _bound(result: Any) -> Any:
    """What a variable holds: a crash is an error to the expressions after it."""
    return CELEvalError(str(result)) if isinstance(result, Crash) else result


_short = reprlib.Repr()
_short.maxstring = 40
_short.maxother = 120
_short.maxdict = 6
_short.maxlist = 4
_short.maxlevel = 4


@dataclass(frozen=True)
class Mismatch:
    """One expression on one Pod where the evaluator under test and the stock one disagree.

    ``departure`` names the documented departures that explain it; empty if none does.
    """

    policy: str
    name: str
    expression: str
    index: int
    pod: Any
    ours: Any
    stock: Any
    departure: frozenset[str] = frozenset()

    def __str__(self) -> str:
        expression = " ".join(self.expression.split())
        why = f" [documented: {', '.join(sorted(self.departure))}]" if self.departure else ""
        return (
            f"{self.policy} / {self.name}{why}\n"
            f"    expression: {expression if len(expression) < 160 else _short.repr(expression)}\n"
            f"    pod #{self.index}: {_short.repr(self.pod)}\n"
            f"    ours:  {_result(self.ours)}\n"
            f"    stock: {_result(self.stock)}"
        )


def _result(value: Any) -> str:
    if isinstance(value, Crash):
        return str(value)
    if isinstance(value, CELEvalError):  # its repr() can raise (cel-python's tree_dump)
        return f"error {_short.repr(value.args[0] if value.args else '')}"
    try:
        return f"{type(value).__name__} {_short.repr(value)}"
    except Exception:  # an error inside a value
        return f"{type(value).__name__} (unprintable)"


def compare(
    evaluate: Evaluate, pods: Sequence[Any], engine: PolicyEngine
) -> tuple[int, list[Mismatch]]:
    """Run every expression of ``engine``'s policies, in policy order, on each Pod (with the
    Namespace ``namespace_for`` gives it) through ``evaluate`` and through ``stock``.

    Variables are bound as they are computed, each evaluator with its own results, as
    ``test_cel.test_every_policy_expression_matches_the_stock_interpreter`` does. Gives the number
    of comparisons and every disagreement, explained by a documented departure or not.
    """
    compared = 0
    mismatches: list[Mismatch] = []
    for index, raw in enumerate(pods):
        namespace = namespace_for(raw, index)
        base = engine_values(raw, namespace, engine)
        for policy in engine.policies:
            values = {**base, "params": policy.params}
            stock_variables: dict[str, Any] = {}
            our_variables: dict[str, Any] = {}
            cel_variables: dict[str, Any] = {}
            departed: dict[str, frozenset[str]] = {}  # variables whose value a departure made
            for name, expression in policy_expressions(policy):
                expected = _run(stock, expression, _with(values, stock_variables))
                actual = _run(evaluate, expression, _with(values, our_variables))
                reference, fixes = expected, frozenset[str]()
                if not same(actual, expected):
                    if not isinstance(expected, Crash):
                        reference, fixes = follows_cel(expression, _with(values, cel_variables))
                    for variable in variables_read(expression):
                        fixes |= departed.get(variable, frozenset())
                    explained = fixes if fixes and same(actual, reference) else frozenset()
                    mismatches.append(
                        Mismatch(
                            policy.name, name, expression, index, raw, actual, expected, explained
                        )
                    )
                if name.startswith("variable "):
                    variable = name.split()[1]
                    stock_variables[variable] = _bound(expected)
                    our_variables[variable] = _bound(actual)
                    cel_variables[variable] = _bound(reference)
                    if fixes:
                        departed[variable] = fixes
                compared += 1
    return compared, mismatches


def engine_values(pod: Any, namespace: Any, engine: PolicyEngine) -> dict[str, Any]:
    """The values the engine evaluates a Pod with: plain JSON as it is, anything else converted
    to cel-python's values (see ``PolicyEngine._evaluate``)."""
    convert: Callable[[Any], Any] = _as_it_is if KeyMaker.is_plain(pod, namespace) else to_cel
    return {
        "object": convert(pod),
        "settings": engine._settings,
        "namespaceObject": None if namespace is None else convert(namespace),
    }


def _as_it_is(value: Any) -> Any:
    return value


def _with(values: Mapping[str, Any], variables: dict[str, Any]) -> dict[str, Any]:
    return {**values, "variables": celtypes.MapType(variables)}


def listing(mismatches: Sequence[Mismatch], limit: int = 40) -> str:
    shown = "\n".join(str(mismatch) for mismatch in mismatches[:limit])
    more = len(mismatches) - limit
    tail = f"\n... and {more} more" if more > 0 else ""
    return f"{len(mismatches)} mismatches:\n{shown}{tail}"


# --- the tests --------------------------------------------------------------------------------

PODS: Final = generated_pods(POD_COUNT, SEED)


def _is_a_cel_error_where_stock_raised(mismatch: Mismatch) -> bool:
    return isinstance(mismatch.stock, Crash) and isinstance(mismatch.ours, CELEvalError)


def test_generated_pods_match_the_stock_interpreter(with_examples: PolicyEngine) -> None:
    """200 generated Pods (10 of them structurally odd) x the 67 expressions of the default
    and example policies: at least 13,000 comparisons, each the same as cel-python's stock
    interpreter, or one of the two documented departures, or a CEL error where cel-python
    raises a Python exception."""
    assert sum(index % ODD_SHARE == ODD_SHARE - 1 for index in range(POD_COUNT)) == 10
    compared, mismatches = compare(ours, PODS, with_examples)
    expressions = sum(len(policy_expressions(policy)) for policy in with_examples.policies)
    assert compared == POD_COUNT * expressions
    assert compared >= MIN_COMPARISONS, (compared, expressions)
    unexplained = [
        mismatch
        for mismatch in mismatches
        if not mismatch.departure and not _is_a_cel_error_where_stock_raised(mismatch)
    ]
    assert not unexplained, listing(unexplained)
    assert all(mismatch.departure <= DOCUMENTED_DEPARTURES for mismatch in mismatches)


def test_where_cel_python_raises_ours_gives_an_error(with_examples: PolicyEngine) -> None:
    """cel-python raises on some Pods instead of giving an error value: its map() and filter()
    on an integer (TypeError), and ``!`` on the error of ``3 + []`` (IndexError, from printing
    that error). Ours give a CEL error there."""
    compared, mismatches = compare(ours, [{"spec": {"containers": 3}}], with_examples)
    assert compared > 0
    assert all(_is_a_cel_error_where_stock_raised(mismatch) for mismatch in mismatches)
    raised = {
        (mismatch.policy, mismatch.name, type(mismatch.stock.error).__name__)
        for mismatch in mismatches
    }
    assert raised == {
        ("sunk-static-cpu-allocation", "variable pinned", "TypeError"),
        ("sunk-static-cpu-allocation", "validation 0", "IndexError"),
        ("gpus-per-pod", "variable gpus", "TypeError"),
    }


def test_the_generated_pods_reach_every_outcome(with_examples: PolicyEngine) -> None:
    """Each validation and match condition is true for some generated Pods and false for
    others, and each mapping gives a value for some: the Pods are not all alike."""
    outcomes: dict[tuple[str, str], set[str]] = {}
    for index, raw in enumerate(PODS):
        namespace = namespace_for(raw, index)
        base = engine_values(raw, namespace, with_examples)
        for policy in with_examples.policies:
            variables: dict[str, Any] = {}
            for name, expression in policy_expressions(policy):
                result = ours(expression, _with({**base, "params": policy.params}, variables))
                if name.startswith("variable "):
                    variables[name.split()[1]] = result
                kind = "error" if isinstance(result, CELEvalError) else "null"
                if isinstance(result, celtypes.BoolType | bool):
                    kind = str(bool(result))
                elif result is not None and kind != "error":
                    kind = "value"
                outcomes.setdefault((policy.name, name), set()).add(kind)
    for (policy_name, name), kinds in outcomes.items():
        if name.startswith(("validation ", "condition ")):
            assert {"True", "False"} <= kinds, (policy_name, name, kinds)
        if name.startswith("mapping "):
            assert "value" in kinds, (policy_name, name, kinds)


def swapped_comparisons(expression: str, values: Values) -> Any:
    """Ours, with ``<`` read as ``<=`` and ``<=`` as ``<``."""
    swapped = re.sub(r"<=?", lambda match: "<" if match.group() == "<=" else "<=", expression)
    return ours(swapped, values)


def negated_int(expression: str, values: Values) -> Any:
    """Ours, with ``int(x)`` giving ``-x``."""
    return ours(re.sub(r"\bint\(", "-int(", expression), values)


@pytest.mark.parametrize("wrong", [swapped_comparisons, negated_int])
def test_a_wrong_evaluator_is_caught(with_examples: PolicyEngine, wrong: Evaluate) -> None:
    """The comparison can fail: an evaluator that differs from ours only in ``<`` against
    ``<=``, or in the sign of ``int()``, disagrees with the stock interpreter on the first 25
    generated Pods, in several expressions, and no documented departure explains that."""
    compared, mismatches = compare(wrong, PODS[:MUTANT_POD_COUNT], with_examples)
    assert compared > 0
    assert mismatches
    assert not any(mismatch.departure for mismatch in mismatches), listing(mismatches)
    assert len({(mismatch.policy, mismatch.name) for mismatch in mismatches}) >= 2


@pytest.mark.parametrize(
    ("operator", "written"),
    [("_<_", "<="), ("_==_", "is")],
    ids=["less-than-as-less-or-equal", "equality-as-identity"],
)
def test_our_compiler_changed_on_purpose_is_caught(
    with_examples: PolicyEngine, monkeypatch: pytest.MonkeyPatch, operator: str, written: str
) -> None:
    """The same, with the change made in our compiler itself: the Python it writes for one
    comparison's fast path is wrong (``<`` written as ``<=``, ``==`` as ``is``)."""
    monkeypatch.setitem(codegen._COMPARISONS, operator, written)
    our_program.cache_clear()
    try:
        compared, mismatches = compare(ours, PODS[:MUTANT_POD_COUNT], with_examples)
    finally:
        monkeypatch.undo()
        our_program.cache_clear()
    assert compared > 0
    assert mismatches
    assert not any(mismatch.departure for mismatch in mismatches), listing(mismatches)


def test_the_departure_check_explains_only_the_documented_departures() -> None:
    """``FollowsCel`` is the stock interpreter but in the two documented places."""
    values = {"object": to_cel({"spec": {"containers": [{"name": "a"}]}})}
    assert follows_cel("{'a': 1} != null", values) == (True, frozenset({NE_NULL}))
    assert follows_cel("object.spec != null", values) == (True, frozenset({NE_NULL}))
    value, fixes = follows_cel("[1, 0].map(x, 1 / x) == [1] || true", values)
    assert (value, fixes) == (True, frozenset({MACRO_ERROR}))
    value, fixes = follows_cel("object.spec.containers.filter(c, c.no == 1).size() == 0", values)
    assert isinstance(value, CELEvalError) and fixes == {MACRO_ERROR}
    for expression in [
        "1 != null",
        "null != null",
        "'a' != 'b'",
        "1 / 0 == 1 || true",
        "[1, 2].map(x, x * 2)",
        "[1].filter(x, x == 1)",
        "[1, 0].all(x, 1 / x > 0) || true",
        "[1, 0].exists_one(y, 1 / y == 1) || true",  # cel-python raises it here too
    ]:
        value, fixes = follows_cel(expression, values)
        assert same(value, stock(expression, values)) and not fixes, expression


def test_a_documented_departure_is_explained_and_nothing_else() -> None:
    """End to end through ``compare``: both departures, and an expression that reads a variable
    made by one, are explained; a wrong result beside them is not."""
    engine = load_sources(
        {
            "90-departures.yaml": policy_document(
                "departures",
                variables=[{"name": "hasSpec", "expression": "object.spec != null"}],
                validations=[
                    {"expression": "variables.hasSpec"},
                    {"expression": "object.spec.containers.map(c, c.no) == [] || true"},
                    {"expression": "object.spec.containers.size() > 0"},
                ],
            )
        }
    )
    pods = [{"spec": {"containers": [{"name": "a"}]}}]
    compared, mismatches = compare(ours, pods, engine)
    assert compared == 4
    explained = {(mismatch.name, *mismatch.departure) for mismatch in mismatches}
    assert explained == {
        ("variable hasSpec", NE_NULL),
        ("validation 0", NE_NULL),
        ("validation 1", MACRO_ERROR),
    }

    def wrong(expression: str, values: Values) -> Any:
        return ours(expression.replace("> 0", "> 1"), values)

    compared, mismatches = compare(wrong, pods, engine)
    assert [mismatch.name for mismatch in mismatches if not mismatch.departure] == ["validation 2"]


def test_generated_pods_are_reproducible_json() -> None:
    assert generated_pods(POD_COUNT, SEED) == PODS
    assert generated_pods(20, SEED + 1) != PODS[:20]
    assert json.loads(json.dumps(PODS, allow_nan=False)) == PODS


def test_a_mismatch_reads_well() -> None:
    mismatch = Mismatch(
        "sunk-annotations",
        "validation 0",
        "int(variables.sunk.priority)\n  >= 0",
        7,
        {"metadata": {"annotations": {"sunk.coreweave.com/priority": "x" * 500}}},
        celtypes.BoolType(True),
        CELEvalError("no such overload"),
    )
    text = str(mismatch)
    assert text.splitlines()[0] == "sunk-annotations / validation 0"
    assert "expression: int(variables.sunk.priority) >= 0" in text
    assert "pod #7: {'metadata': {'annotations': {'sunk.coreweave.com/priority': 'xxx" in text
    assert "ours:  BoolType BoolType(True)" in text
    assert "stock: error 'no such overload'" in text
    assert len(text) < 400
