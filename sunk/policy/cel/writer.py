"""The source of one generated function (see :mod:`~sunk.policy.cel.codegen`): its lines,
constants and locals, and the statements every kind of node needs for a function call and for
a macro's loop."""

from __future__ import annotations

from typing import Any, Final, cast

import lark
from celpy import celtypes

from sunk.policy.cel import native
from sunk.policy.cel.operators import FAST_CALLS
from sunk.policy.cel.values import Tree
from sunk.policy.functions import FUNCTIONS
from sunk.quantity import Quantity

# Our functions that give the same result for plain JSON arguments of these types as for
# cel-python's: they test strings with isinstance(x, str), and copy or test a container's
# items without looking at their cel-python type. (quantity() tells a bool from an int by
# cel-python's type, sum() wants cel-python's integers: they get converted arguments.)
_STRINGS: Final = frozenset({str, celtypes.StringType, Quantity})
_PLAIN_ARGUMENTS: Final[dict[Any, frozenset[type]]] = {
    **{
        FUNCTIONS[name]: _STRINGS
        for name in (
            "isQuantity", "sign", "asInteger", "asApproximateFloat", "isInteger",
            "lowerAscii", "upperAscii", "matches", "trim",
        )
    },
    FAST_CALLS["int"]: frozenset({str, celtypes.StringType}),
    FUNCTIONS["join"]: _STRINGS | {list, celtypes.ListType},
    FUNCTIONS["prefixed"]: _STRINGS | {dict, celtypes.MapType},
}  # fmt: skip


class SourceWriter:
    """Writes the statements of one function; ``node`` (the code generator's) writes those of
    a node and returns the name that holds its value. ``names`` maps the macro variables in
    scope to their locals."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}
        self.roots: dict[str, str] = {}
        self.reads_variables = False
        self.depth = 1
        self.count = 0

    def source(self, result: str) -> str:
        head = ["def evaluate(scope):"]
        for name, local in self.roots.items():
            head.append(f"    {local} = name_value(scope, {self.constant(name)})")
        if self.reads_variables:
            head.append(f"    variables = scope.get({self.constant('variables')})")
        return "\n".join([*head, *self.lines, f"    return {result}"])

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def temporary(self, prefix: str = "t") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def constant(self, value: Any) -> str:
        name = f"k{len(self.constants)}"
        self.constants[name] = value
        return name

    def node(self, tree: Tree, names: dict[str, str]) -> str:
        raise NotImplementedError

    def call(self, token: lark.Token, function: Any, operands: list[str]) -> str:
        """A function or method call: the first error among the operands, or its value."""
        result = self.temporary()
        if function is None:
            self.emit(f"{result} = undeclared({self.constant(token.value)})")
            return result
        keyword = "if"
        if token.value == "size" and len(operands) == 1:
            self.emit(f"if type({operands[0]}) in SIZED: {result} = len({operands[0]})")
            keyword = "elif"
        for operand in operands:
            self.emit(f"{keyword} isinstance({operand}, CELEvalError): {result} = {operand}")
            keyword = "elif"
        if function in native.PLAIN_FUNCTIONS:
            plain_function, types = native.PLAIN_FUNCTIONS[function]
            if len(types) == len(operands):
                taken = " and ".join(
                    f"type({operand}) is {self.constant(kind)}"
                    for operand, kind in zip(operands, types, strict=True)
                )
                self.emit(f"elif {taken}:")
                self._try_call(result, token, plain_function, operands, convert=False)
        plain = _PLAIN_ARGUMENTS.get(function)
        converted = [f"as_cel({operand})" for operand in operands]
        if plain is not None:
            kinds = self.constant(plain)
            taken = " and ".join(f"type({operand}) in {kinds}" for operand in operands)
            self.emit(f"elif {taken}:")
            self._try_call(result, token, function, operands)
        self.emit("else:")
        self._try_call(result, token, function, converted)
        return result

    def _try_call(
        self,
        result: str,
        token: lark.Token,
        function: Any,
        arguments: list[str],
        *,
        convert: bool = True,
    ) -> None:
        """``call_function`` written out: a Python exception becomes the error value."""
        called, error = self.temporary("a"), self.temporary("e")
        value = f"{self.constant(function)}(*{called})"
        self.emit(f"    {called} = [{', '.join(arguments)}]")
        self.emit(f"    try: {result} = {f'plain_result({value})' if convert else value}")
        self.emit(f"    except CALL_ERRORS as {error}:")
        self.emit(f"        {result} = call_failed({self.constant(token)}, {error}, {called})")

    def macro(self, tree: Tree, names: dict[str, str]) -> str:
        """all(), exists(), exists_one(), map() and filter(): a loop over the elements."""
        method, variable, target, body = cast(tuple[str, str, Tree, Tree], tree.children)
        items = self.node(target, names)
        result, results = self.temporary(), self.temporary()
        element, error = self.temporary("m"), self.temporary("e")
        quantifier = method in ("all", "exists")
        self.emit(f"{result} = {items} if isinstance({items}, CELEvalError) else UNKNOWN")
        self.emit(f"if {result} is UNKNOWN:")
        self.depth += 1
        self.emit("try:")
        self.emit(f"    {results} = []")
        self.emit(f"    for {element} in {items}:")
        self.depth += 2
        value = self.node(body, {**names, variable: element})
        if quantifier:
            self.emit(f"{results}.append({value})")
        else:  # an error for any element is the result, as CEL says
            self.emit(f"if isinstance({value}, CELEvalError):")
            self.emit(f"    {result} = {value}")
            self.emit("    break")
            self.emit(f"{results}.append(({element}, {value}))")
        self.depth -= 2
        self.emit(f"except (TypeError, ValueError, AttributeError) as {error}:")
        self.emit(f"    {result} = not_iterable({self.constant(method)}, {items}, {error})")
        self.emit(f"if {result} is UNKNOWN:")
        self.depth += 1
        self._macro_result(method, result, results)
        self.depth -= 2
        return result

    def _macro_result(self, method: str, result: str, results: str) -> None:
        if method in ("all", "exists"):
            combine, every = ("all_of", "all") if method == "all" else ("any_of", "any")
            self.emit(f"if all(type(x) in BOOLS for x in {results}):")
            self.emit(f"    {result} = TRUE if {every}({results}) else FALSE")
            self.emit(f"else: {result} = {combine}({results})")
        elif method == "map":
            self.emit(f"{result} = [y for _, y in {results}]")
        elif method == "filter":
            self.emit(f"{result} = [x for x, y in {results} if y]")
        else:
            self.emit(f"{result} = TRUE if sum(1 for _, y in {results} if y) == 1 else FALSE")
