"""One policy document with every expression compiled, and its evaluation for one Pod.

A failed validation becomes a violation for each of the policy's actions; an expression that
cannot be evaluated is an evaluation error, which ``failurePolicy: Fail`` also turns into a
violation (reason :data:`POLICY_ERROR_REASON`).

Evaluation only builds the outcome; the engine counts it in the metrics
(:func:`sunk.policy.metrics.count`), for a decision it reuses as for one it computes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from celpy import celtypes
from celpy.evaluation import CELEvalError

from sunk.policy.cel import (
    CelCompileError,
    Program,
    Read,
    Scope,
    Variables,
    compile_expression,
    describe_error,
    is_bool,
    run_all,
    to_cel,
    type_name,
)
from sunk.policy.decision import EvaluationError, MappingValue, Outcome, Violation
from sunk.policy.model import (
    Action,
    FieldMapping,
    MatchCondition,
    Origin,
    PolicyDocument,
    PolicyIssue,
    PolicyLoadError,
    Validation,
    Variable,
)

POLICY_ERROR_REASON: Final = "PolicyError"
MAX_MESSAGE_LENGTH: Final = 1024  # an Event's note is at most 1 kB
_BOOLS: Final = frozenset({bool, celtypes.BoolType})


@dataclass(frozen=True, slots=True)
class _Validation:
    field: str
    program: Program
    reason: str
    message: str
    message_program: Program | None


@dataclass(frozen=True, slots=True)
class _Mapping:
    name: str
    program: Program
    type: str


class CompiledPolicy:
    """One policy document with every expression compiled; evaluated many times."""

    def __init__(self, document: PolicyDocument, origin: Origin | None = None) -> None:
        """Compile every expression; raises PolicyLoadError listing each broken one."""
        spec = document.spec
        self.name = document.metadata.name
        self.origin = origin
        self.document = document
        self.fail = spec.failure_policy == "Fail"
        self.actions: tuple[Action, ...] = tuple(spec.validation_actions)
        self._issues: list[PolicyIssue] = []
        self.params = spec.params  # read as JSON, as the Pod is
        try:
            to_cel(spec.params)  # refuses what CEL cannot hold: an integer beyond 64 bits
        except (ValueError, RecursionError) as error:
            self._issue("spec.params", f"not a CEL value: {error}")
        # What variables.x may name: those defined before (broken ones too, reported once).
        self._scope: list[str] = []
        self.variables = self._compile_variables(spec.variables)
        self.match_conditions = self._compile_match_conditions(spec.match_conditions)
        self.validations = self._compile_validations(spec.validations)
        self.mappings = self._compile_mappings(spec.mappings)
        if self._issues:
            raise PolicyLoadError(self._issues)
        self._variable_closures = {
            name: program.closure for name, program in self.variables.items()
        }
        self._validation_programs = [validation.program for validation in self.validations]
        self._mapping_programs = [mapping.program for mapping in self.mappings]
        programs = [
            *self.variables.values(),
            *(program for _, program in self.match_conditions),
            *self._validation_programs,
            *(v.message_program for v in self.validations if v.message_program is not None),
            *self._mapping_programs,
        ]
        # What of object and namespaceObject any expression of the policy reads.
        self.reads: frozenset[Read] = frozenset().union(*(p.reads for p in programs))

    def _compile_variables(self, variables: list[Variable]) -> dict[str, Program]:
        """Each variable in turn, so that each may name only those before it."""
        compiled: dict[str, Program] = {}
        for index, variable in enumerate(variables):
            program = self._compile(f"spec.variables[{index}].expression", variable.expression)
            if program is not None:
                compiled[variable.name] = program
            self._scope.append(variable.name)
        return compiled

    def _compile_match_conditions(
        self, conditions: list[MatchCondition]
    ) -> list[tuple[str, Program]]:
        compiled: list[tuple[str, Program]] = []
        for index, condition in enumerate(conditions):
            where = f"spec.matchConditions[{index}].expression"
            program = self._compile(where, condition.expression)
            if program is not None:
                compiled.append((where, program))
        return compiled

    def _compile_validations(self, validations: list[Validation]) -> list[_Validation]:
        compiled: list[_Validation] = []
        for index, validation in enumerate(validations):
            where = f"spec.validations[{index}]"
            program = self._compile(f"{where}.expression", validation.expression)
            message_program = None
            if validation.message_expression is not None:
                message_program = self._compile(
                    f"{where}.messageExpression", validation.message_expression
                )
            message = validation.message or f"failed expression: {validation.expression}"
            if program is not None:
                compiled.append(
                    _Validation(
                        f"{where}.expression", program, validation.reason, message, message_program
                    )
                )
        return compiled

    def _compile_mappings(self, mappings: Mapping[str, FieldMapping]) -> list[_Mapping]:
        compiled: list[_Mapping] = []
        for name, mapping in mappings.items():
            program = self._compile(f"spec.mappings.{name}.expression", mapping.expression)
            if program is not None:
                compiled.append(_Mapping(name, program, mapping.type))
        return compiled

    def _compile(self, where: str, text: str) -> Program | None:
        try:
            return compile_expression(text, variables=self._scope)
        except CelCompileError as error:
            self._issue(where, str(error))
            return None

    def _issue(self, where: str, message: str) -> None:
        self._issues.append(PolicyIssue(message, self.origin, self.name, where))

    def evaluate(self, values: Mapping[str, Any], outcome: Outcome) -> None:
        """Add this policy's violations, errors and mappings for one Pod to ``outcome``."""
        variables = Variables(self._variable_closures)
        scope = {**values, "params": self.params, "variables": variables}
        variables.scope = scope
        for where, program in self.match_conditions:
            result = program.run(scope)
            if type(result) not in _BOOLS:
                self.record_error(outcome, where, _problem(result, "bool"))
                return
            if not result:
                return
        denied = len(outcome.denials)
        results = run_all(self._validation_programs, scope)
        for validation, result in zip(self.validations, results, strict=True):
            if type(result) not in _BOOLS:
                self.record_error(outcome, validation.field, _problem(result, "bool"))
            elif not result:
                message = self._message(validation, scope, outcome)
                self._violate(outcome, validation.reason, message)
        if len(outcome.denials) > denied:
            return  # a denied Pod gets no job: its mappings would only add noise
        results = run_all(self._mapping_programs, scope)
        for mapping, result in zip(self.mappings, results, strict=True):
            if result is None:
                continue
            value = _to_python(result, mapping.type)
            if value is None:
                where = f"spec.mappings.{mapping.name}.expression"
                self.record_error(outcome, where, _problem(result, mapping.type))
            else:
                outcome.mappings[mapping.name] = value
                outcome.mapped_by[mapping.name] = self.name

    def _message(self, validation: _Validation, scope: Scope, outcome: Outcome) -> str:
        if validation.message_program is not None:
            text = validation.message_program.run(scope)
            if isinstance(text, str) and text:
                return _clip(str(text))
            where = validation.field.replace(".expression", ".messageExpression")
            # Reported but not enforced: the validation's own outcome already stands.
            outcome.errors.append(
                EvaluationError(self.name, where, _problem(text, "string"), enforced=False)
            )
        return _clip(validation.message)

    def _violate(self, outcome: Outcome, reason: str, message: str) -> None:
        violation = Violation(self.name, reason, message)
        for action in self.actions:
            if action == "Deny":
                outcome.denials.append(violation)
            elif action == "Warn":
                outcome.warnings.append(violation)
            else:
                outcome.audits.append(violation)

    def record_error(self, outcome: Outcome, where: str, message: str) -> None:
        """Report an evaluation error; with failurePolicy Fail it is also a violation."""
        outcome.errors.append(EvaluationError(self.name, where, message, enforced=self.fail))
        if self.fail:
            self._violate(outcome, POLICY_ERROR_REASON, _clip(f"{where}: {message}"))


def _to_python(value: Any, kind: str) -> MappingValue | None:
    """The mapping's value as plain Python, or None if it is not of the declared type."""
    if kind == "string" and isinstance(value, str):
        return str(value)
    if kind == "int" and type(value) in (int, celtypes.IntType, celtypes.UintType):
        return int(value)
    if kind == "bool" and is_bool(value):
        return bool(value)
    if (
        kind == "list(string)"
        and isinstance(value, list)
        and all(isinstance(v, str) for v in value)
    ):
        return [str(item) for item in value]
    return None


def _problem(result: Any, expected: str) -> str:
    if isinstance(result, CELEvalError):
        return describe_error(result)
    return f"expected {expected}, got {type_name(result)}"


def _clip(message: str) -> str:
    if len(message) <= MAX_MESSAGE_LENGTH:
        return message
    return message[: MAX_MESSAGE_LENGTH - 3] + "..."
