"""Compile CEL once, check it at load, and evaluate it quickly, with cel-python's parser,
types, functions and (for what the compiler leaves) interpreter.

cel-python 0.5 evaluates by walking its parse tree, with overhead at every node (``typing``
subscriptions built per node, a wrapper built per comparison, a copy of every binding per
element a macro visits), and needs the Pod converted to its own types first: together several
milliseconds a Pod. So we

1. simplify each parse tree once (:mod:`~sunk.policy.cel.compiler`): drop pass-through nodes,
   fold literals, turn names, function calls, ``has()`` and macros into nodes that need no
   searching; and check what cel-python only finds at run time;
2. generate one Python function per expression (:mod:`~sunk.policy.cel.codegen`): each node
   becomes a few statements with its common case written out (a field of a map is a
   ``dict.get``, ``&&`` an ``if``); ``&&``/``||`` skip the right operand when the left one
   decides (the result is the same: ``false && x`` is false whatever x is);
3. read the Pod as plain JSON, never converted (:mod:`~sunk.policy.cel.native`): operators take
   two strings, integers or booleans themselves, and hand anything else to cel-python's own
   operator on converted operands, so mixed types and errors give the library's results;
4. record, for each expression, which parts of the Pod and its Namespace it reads
   (:mod:`~sunk.policy.cel.reads`), so that the engine can reuse the decision of a Pod that
   reads the same (:mod:`sunk.policy.memo`).

Results are those of cel-python's interpreter (``tests/unit/policy/test_cel.py`` and
``test_differential.py`` compare them, on thousands of Pods), except in two places where
cel-python 0.5 departs from CEL and we follow CEL: ``x != y`` is ``!(x == y)`` (cel-python fails
``map != null``), and an error inside ``map()``, ``filter()`` or ``exists_one()`` is an error
value that ``||``, ``&&`` and ``has()`` can absorb (cel-python raises it through the whole
expression). Where cel-python raises a Python exception for a value (a macro over an integer),
the value is an error. cel-python's own
compiled runner is not an option: in 0.5 it fails on ``has()``.

Compilation also checks what cel-python only finds at run time: unknown names, functions and
methods, ``variables.x`` read before it is defined, and invalid constant regular expressions.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from sunk.policy.cel import _pinned  # noqa: F401  (first: a wrong cel-python says so)
from sunk.policy.cel.codegen import compile_closure
from sunk.policy.cel.compiler import ROOT_NAMES, CelCompileError, compile_tree
from sunk.policy.cel.native import as_cel, is_bool
from sunk.policy.cel.reads import VARYING_ROOTS, Read, read_paths
from sunk.policy.cel.scope import Closure, Scope, Variables
from sunk.policy.cel.values import Result, Tree, describe_error, to_cel, type_name

__all__ = [
    "ROOT_NAMES",
    "VARYING_ROOTS",
    "CelCompileError",
    "Program",
    "Read",
    "Result",
    "Scope",
    "Variables",
    "as_cel",
    "compile_expression",
    "describe_error",
    "is_bool",
    "new_activation",
    "run_all",
    "to_cel",
    "type_name",
]


@dataclass(frozen=True, slots=True)
class Program:
    """One compiled expression, ready to run against many scopes.

    ``reads`` are the parts of ``object`` and ``namespaceObject`` it reads (see
    :mod:`~sunk.policy.cel.reads`): its value depends on the Pod through them only.
    """

    source: str
    ast: Tree
    reads: frozenset[Read] = frozenset()
    closure: Closure = field(default=lambda scope: None, compare=False, repr=False)

    def run(self, scope: Scope) -> Result:
        """The value, or the CELEvalError, of this expression; raises only on a bug."""
        return self.closure(scope)


def run_all(programs: Sequence[Program], scope: Scope) -> list[Result]:
    """Each program's value or CELEvalError."""
    return [program.closure(scope) for program in programs]


def compile_expression(
    text: str,
    *,
    variables: Collection[str] = (),
    names: Collection[str] = ROOT_NAMES,
) -> Program:
    """Parse, check, simplify and compile one expression.

    ``variables`` are the names ``variables.x`` may read; ``names`` the free identifiers.
    """
    tree = compile_tree(text, variables=variables, names=names)
    return Program(text, tree, read_paths(tree, VARYING_ROOTS), compile_closure(tree))


def new_activation(values: Mapping[str, Result]) -> Scope:
    """The names an expression sees, bound to ``values``: plain JSON or CEL values."""
    return dict(values)
