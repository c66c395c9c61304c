"""``FastEvaluator``: cel-python's evaluator without its per-node overhead (see
:mod:`sunk.policy.cel`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, cast

import lark
from celpy import celtypes
from celpy.evaluation import Activation, CELEvalError, Evaluator, NameContainer, Referent

from sunk.policy.cel.native import all_of, any_of
from sunk.policy.cel.operators import FAST_CALLS, apply_operator, call_function
from sunk.policy.cel.values import FALSE, TRUE, Result, Tree, type_name

_OPERATORS: Final = {
    "relation_lt": "_<_",
    "relation_le": "_<=_",
    "relation_gt": "_>_",
    "relation_ge": "_>=_",
    "relation_eq": "_==_",
    "relation_ne": "_!=_",
    "relation_in": "_in_",
    "addition_add": "_+_",
    "addition_sub": "_-_",
    "multiplication_mul": "_*_",
    "multiplication_div": "_/_",
    "multiplication_mod": "_%_",
    "unary_not": "!_",
    "unary_neg": "-_",
}


def bind_names(values: Mapping[str, Result], parent: NameContainer | None) -> NameContainer:
    """Bind names to values, in front of ``parent``'s bindings.

    cel-python checks every name against a regular expression and copies the enclosing
    bindings for each element a macro visits; chaining to them resolves names the same way.
    """
    container = NameContainer(parent=parent)
    for name, value in values.items():
        referent = Referent()
        referent.value = value
        dict.__setitem__(container, name, referent)
    return container


class FastEvaluator(Evaluator):
    """celpy's Evaluator, with its hot methods rewritten without per-node overhead.

    Each override keeps the library method's behaviour: same functions called, same values,
    and a CELEvalError where it returns one (it also turns a few Python exceptions that the
    library would let escape into CELEvalErrors).
    """

    def visit(self, tree: Tree) -> Result:
        # lark's dispatch looks the rule up on the instance, then for a visit_wrapper, which
        # cel-python never uses; a table of the methods is quicker.
        method = _DISPATCH.get(tree.data)
        result = method(self, tree) if method else getattr(self, tree.data)(tree)
        if result.__class__ is CELEvalError:
            # cel-python's repr() of an error re-renders its parse tree, and cannot render a
            # simplified one; the error keeps its line and column.
            result.tree = None
        return result

    def visit_children(self, tree: Tree) -> list[Result]:
        # cel-python's methods visit children through this: make them go through visit().
        return [self.visit(c) if isinstance(c, lark.Tree) else c for c in tree.children]

    def sub_evaluator(self, ast: Tree) -> Evaluator:
        return FastEvaluator(ast, activation=self.activation)

    def set_activation(self, values: Mapping[str, Result]) -> Evaluator:
        # A macro's variable, bound in front of the enclosing names (see ``bind_names``).
        base = self.base_activation
        activation = Activation.__new__(Activation)
        activation.identifiers = bind_names(values, parent=base.identifiers)
        activation.functions = base.functions
        activation.package = base.package
        self.activation = activation
        return self

    def visit_safely(self, tree: Tree) -> Result:
        """The value or the error: cel-python raises errors met inside map() and filter()."""
        try:
            return self.visit(tree)
        except CELEvalError as error:
            error.tree = None
            return error

    def _each(self, tree: Tree) -> list[Result]:
        return [self.visit_safely(child) for child in tree.children]

    def _const(self, tree: Tree) -> Result:
        return tree.children[0]

    def _name(self, tree: Tree) -> Result:
        name = cast(str, tree.children[0])
        container: NameContainer | None = self.activation.identifiers
        while container is not None:
            referent = dict.get(container, name)
            if referent is not None:
                return referent.value
            container = container.parent
        try:
            return self.activation.functions[name]
        except KeyError:
            return CELEvalError(f"undeclared reference to '{name}'", KeyError, (name,), tree=tree)

    def _macro(self, tree: Tree) -> Result:
        """all(), exists(), exists_one(), map() and filter(), as cel-python evaluates them."""
        method, variable, target_tree, body = cast(tuple[str, str, Tree, Tree], tree.children)
        target = self.visit(target_tree)
        if isinstance(target, CELEvalError):
            return target
        inner = FastEvaluator(body, self.activation)

        def value(item: Result) -> Result:
            inner.set_activation({variable: item})
            return inner.visit_safely(body)

        try:
            if method == "all":
                return all_of(list(map(value, target)))
            if method == "exists":
                return any_of(list(map(value, target)))
            results = []
            for item in target:  # map, filter and exists_one fail on an error, as CEL says
                result = value(item)
                if isinstance(result, CELEvalError):
                    return result
                results.append((item, result))
        except (TypeError, ValueError, AttributeError) as error:  # not a list or a map
            message = f"no matching overload for {method}() on {type_name(target)}"
            return CELEvalError(message, error.__class__, error.args)
        if method == "map":
            return celtypes.ListType(result for _, result in results)
        if method == "filter":
            return celtypes.ListType(item for item, result in results if result)
        return TRUE if sum(1 for _, result in results if result) == 1 else FALSE

    def _has(self, tree: Tree) -> Result:
        return FALSE if isinstance(self.visit(tree.children[0]), CELEvalError) else TRUE

    def _function(self, tree: Tree) -> Result:
        name, *arguments = tree.children
        values = [self.visit(argument) for argument in arguments]
        return self.function_eval(cast(lark.Token, name), values)

    def expr(self, tree: Tree) -> Result:
        if len(tree.children) == 1:
            return self.visit(tree.children[0])
        condition = self.visit(tree.children[0])
        left = right = FALSE
        if condition:
            left = self.visit(tree.children[1])
        else:
            right = self.visit(tree.children[2])
        function = self.activation.functions["_?_:_"]
        return apply_operator(tree, "_?_:_", function, condition, left, right)

    def _binary(self, tree: Tree) -> Result:
        if len(tree.children) == 1:
            return self.visit(tree.children[0])
        operator_tree, right_tree = tree.children
        name = _OPERATORS[operator_tree.data]
        left = self.visit(operator_tree.children[0])
        right = self.visit(right_tree)
        return apply_operator(tree, name, self.activation.functions[name], left, right)

    relation = addition = multiplication = _binary

    def unary(self, tree: Tree) -> Result:
        if len(tree.children) == 1:
            return self.visit(tree.children[0])
        operator_tree, operand_tree = tree.children
        name = _OPERATORS[operator_tree.data]
        operand = self.visit(operand_tree)
        return apply_operator(tree, name, self.activation.functions[name], operand)

    def conditionaland(self, tree: Tree) -> Result:
        if len(tree.children) == 1:
            return self.visit(tree.children[0])
        left = self.visit(tree.children[0])
        if isinstance(left, celtypes.BoolType) and not left:
            return left
        right = self.visit(tree.children[1])
        return apply_operator(tree, "_&&_", self.activation.functions["_&&_"], left, right)

    def conditionalor(self, tree: Tree) -> Result:
        if len(tree.children) == 1:
            return self.visit(tree.children[0])
        left = self.visit(tree.children[0])
        if isinstance(left, celtypes.BoolType) and left:
            return left
        right = self.visit(tree.children[1])
        return apply_operator(tree, "_||_", self.activation.functions["_||_"], left, right)

    def member_dot(self, tree: Tree) -> Result:
        member_tree, field_token = tree.children
        member = self.visit(member_tree)
        field = cast(lark.Token, field_token).value
        if type(member) is celtypes.MapType:  # the common case: a map from the Pod
            try:
                # MapType's own __getitem__ only adds a key-type check: field is a str.
                return dict.__getitem__(member, field)
            except KeyError:
                return CELEvalError(f"no such key: {field!r}", KeyError, None, tree=tree)
        if isinstance(member, CELEvalError):
            return member
        if isinstance(member, NameContainer):
            if field in member:
                return member[field].value
            return CELEvalError(f"no {field!r} in bindings", KeyError, None, tree=tree)
        if isinstance(member, celtypes.MessageType):
            return member.get(field)
        if isinstance(member, celtypes.MapType):
            try:
                return member[field]
            except KeyError:
                return CELEvalError(f"no such key: {field!r}", KeyError, None, tree=tree)
        message = f"type '{type_name(member)}' does not support field selection"
        return CELEvalError(message, TypeError, None, tree=tree)

    def member_dot_arg(self, tree: Tree) -> Result:
        method = cast(lark.Token, tree.children[1])
        target = self.visit(tree.children[0])
        arguments = self.visit(tree.children[2]) if len(tree.children) == 3 else []
        return self.method_eval(target, method, arguments)

    def method_eval(self, object: Result, method_ident: lark.Token, exprlist: Any = None) -> Result:
        name = method_ident.value
        function = self.activation.functions.get(name)
        if function is None:
            return CELEvalError(f"undeclared reference to '{name}'", KeyError, (name,))
        if isinstance(object, CELEvalError):
            return object
        if isinstance(exprlist, CELEvalError):
            return exprlist
        return call_function(method_ident, function, [object, *(exprlist or [])])

    def function_eval(self, name_token: lark.Token, exprlist: Any = None) -> Result:
        name = name_token.value
        function = FAST_CALLS.get(name) or self.activation.functions.get(name)
        if function is None:
            return CELEvalError(f"undeclared reference to '{name}'", KeyError, (name,))
        if isinstance(exprlist, CELEvalError):
            return exprlist
        arguments = list(exprlist or [])
        for argument in arguments:
            if isinstance(argument, CELEvalError):
                return argument
        return call_function(name_token, function, arguments)

    def exprlist(self, tree: Tree) -> Result:
        values = [self.visit(child) for child in tree.children]
        for value in values:
            if isinstance(value, CELEvalError):
                return value
        return celtypes.ListType(values)

    def mapinits(self, tree: Tree) -> Result:
        result = celtypes.MapType()
        values = [self.visit(child) for child in tree.children]
        for key, value in zip(values[0::2], values[1::2], strict=True):
            if key in result:
                raise ValueError(f"Duplicate key {key!r}")
            result[key] = value
        return result


_DISPATCH: Final[dict[str, Callable[[FastEvaluator, Tree], Result]]] = {
    name: getattr(FastEvaluator, name)
    for name in (
        "_each", "_const", "_name", "_macro", "_has", "_function", "expr", "conditionalor",
        "conditionaland", "relation", "addition", "multiplication", "unary", "member_dot",
        "member_dot_arg", "member_index", "primary", "literal", "exprlist", "mapinits",
    )
}  # fmt: skip
