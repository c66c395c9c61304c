"""Compile CEL once, check it at load, and evaluate it quickly, with cel-python's parser,
types, functions and interpreter.

cel-python 0.5 spends most of a policy's time on overhead rather than on CEL: nine
pass-through parse-tree levels above every literal and name; ``typing`` subscriptions such as
``cast(Tuple[List[Result], Result], ...)`` built at every node (hashing large Unions was 40% of
the time); a ``functools.wraps`` wrapper built at every comparison, integer and macro call; a
copy of every binding for each element a macro visits; a linear scan for ``key in map``.
The default policies took 6 to 7 ms per Pod that way. So we

1. simplify each parse tree once (:mod:`~sunk.policy.cel.compiler`): drop pass-through nodes,
   fold literals, turn names, function calls, ``has()`` and macros into nodes that need no
   searching;
2. evaluate with ``FastEvaluator`` (:mod:`~sunk.policy.cel.evaluator`), a subclass of
   ``celpy.Evaluator`` whose hot methods are the library's own logic without that overhead,
   with ``&&``/``||`` skipping the right operand when the left one decides (the result is the
   same: ``false && x`` is false whatever x is);
3. call the library's operators and conversions through wrappers built once
   (:mod:`~sunk.policy.cel.operators`), and convert Pods with ``to_cel``
   (:mod:`~sunk.policy.cel.values`), which gives what ``celpy.json_to_cel`` gives;
4. let callers build one activation per Pod and policy and run several expressions against it
   (``run_all``);
5. record, for each expression, which parts of the Pod and its Namespace it reads
   (:mod:`~sunk.policy.cel.reads`), so that the engine can reuse the decision of a Pod that
   reads the same (:mod:`sunk.policy.memo`).

Results are those of cel-python's interpreter (``tests/unit/policy/test_cel.py`` compares
them), except in two places where cel-python 0.5 departs from CEL and we follow CEL:
``x != y`` is ``!(x == y)`` (cel-python fails ``map != null``), and an error inside ``map()``
or ``filter()`` is an error value that ``||`` and ``&&`` can absorb (cel-python raises it
through the whole expression). cel-python's compiled runner is not an option: in 0.5 it fails
on ``has()``.

Compilation also checks what cel-python only finds at run time: unknown names, functions and
methods, ``variables.x`` read before it is defined, and invalid constant regular expressions.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import lark
from celpy.evaluation import Activation

from sunk.policy.cel import _pinned  # noqa: F401  (first: a wrong cel-python says so)
from sunk.policy.cel.compiler import ROOT_NAMES, CelCompileError, compile_tree
from sunk.policy.cel.evaluator import FastEvaluator, bind_names
from sunk.policy.cel.operators import FUNCTION_CHAIN
from sunk.policy.cel.reads import VARYING_ROOTS, Read, read_paths
from sunk.policy.cel.values import Result, Tree, describe_error, to_cel, type_name

__all__ = [
    "ROOT_NAMES",
    "VARYING_ROOTS",
    "CelCompileError",
    "Program",
    "Read",
    "Result",
    "compile_expression",
    "describe_error",
    "new_activation",
    "run_all",
    "to_cel",
    "type_name",
]


@dataclass(frozen=True, slots=True)
class Program:
    """One compiled expression, ready to run against many activations.

    ``reads`` are the parts of ``object`` and ``namespaceObject`` it reads (see
    :mod:`~sunk.policy.cel.reads`): its value depends on the Pod through them only.
    """

    source: str
    ast: Tree
    reads: frozenset[Read] = frozenset()

    def run(self, activation: Activation) -> Result:
        """The value, or the CELEvalError, of this expression; raises only on a bug."""
        return FastEvaluator(self.ast, activation).visit_safely(self.ast)


def run_all(programs: Sequence[Program], activation: Activation) -> list[Result]:
    """Each program's value or CELEvalError, from a single pass of the evaluator."""
    if not programs:
        return []
    tree = lark.Tree("_each", [program.ast for program in programs])
    results: list[Result] = FastEvaluator(tree, activation).visit(tree)
    return results


def compile_expression(
    text: str,
    *,
    variables: Collection[str] = (),
    names: Collection[str] = ROOT_NAMES,
) -> Program:
    """Parse, check and simplify one expression.

    ``variables`` are the names ``variables.x`` may read; ``names`` the free identifiers.
    """
    tree = compile_tree(text, variables=variables, names=names)
    return Program(text, tree, read_paths(tree, VARYING_ROOTS))


def new_activation(values: Mapping[str, Result]) -> Activation:
    """An activation holding ``values`` (already CEL values) and the custom functions."""
    activation = Activation.__new__(Activation)
    activation.identifiers = bind_names(values, parent=None)
    activation.functions = FUNCTION_CHAIN
    activation.package = None
    return activation
