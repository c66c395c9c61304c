"""The policy document an operator writes, checked field by field before anything is compiled.

The shape follows Kubernetes' ValidatingAdmissionPolicy (``matchConditions``, ``variables``,
``validations``, ``failurePolicy``, ``validationActions``) so that operators meet nothing new,
plus inline ``params`` and the ``mappings`` that turn a Pod into Slurm job fields.
Unknown fields are errors: a misspelt ``validationAction`` must not silently do nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

API_VERSION: Final = "sunk.coreweave.com/v1alpha1"
KIND: Final = "SchedulingPolicy"

Action = Literal["Deny", "Warn", "Audit"]
MappingType = Literal["string", "int", "bool", "list(string)"]

# A Kubernetes object name (DNS-1123 subdomain), as policy names appear in Events and metrics.
PolicyName = Annotated[
    str,
    StringConstraints(max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"),
]
# A CEL identifier: variables are read as variables.<name>.
Identifier = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=63)]
# A match condition's name, as Kubernetes allows (a qualified name without prefix).
ConditionName = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", max_length=63)
]
# Slurm job_desc_msg field names are lower snake case.
MappingName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$", max_length=63)]
# An Event reason is UpperCamelCase.
Reason = Annotated[str, StringConstraints(pattern=r"^[A-Z][A-Za-z0-9]*$", max_length=128)]
Expression = Annotated[str, StringConstraints(min_length=1, max_length=10_000)]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


class Metadata(_Model):
    """Only the name matters to the engine; labels and annotations are allowed for tooling."""

    name: PolicyName
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class MatchCondition(_Model):
    """The policy applies to a Pod only if every match condition is true."""

    name: ConditionName
    expression: Expression


class Variable(_Model):
    """A named expression, read as ``variables.<name>``; computed at most once per Pod."""

    name: Identifier
    expression: Expression


class Validation(_Model):
    """A check: ``expression`` must be true, or the Pod gets ``reason`` and a message."""

    expression: Expression
    message: str | None = Field(default=None, max_length=1024)
    message_expression: Expression | None = None
    reason: Reason = "Invalid"


class FieldMapping(_Model):
    """A named output for the Slurm job description; ``null`` means "no value"."""

    expression: Expression
    type: MappingType


def _deny() -> list[Action]:
    return ["Deny"]


class PolicySpec(_Model):
    """What a policy checks and produces, and what happens on an error or a violation."""

    failure_policy: Literal["Fail", "Ignore"] = "Fail"
    validation_actions: list[Action] = Field(default_factory=_deny, min_length=1)
    match_conditions: list[MatchCondition] = Field(default_factory=list)
    variables: list[Variable] = Field(default_factory=list)
    params: dict[str, JsonValue] = Field(default_factory=dict)
    validations: list[Validation] = Field(default_factory=list)
    mappings: dict[MappingName, FieldMapping] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> PolicySpec:
        actions = self.validation_actions
        if len(set(actions)) != len(actions):
            raise ValueError("validationActions lists an action twice")
        if "Deny" in actions and "Warn" in actions:
            raise ValueError("validationActions cannot hold both Deny and Warn")
        for kind, names in (
            ("matchConditions", [condition.name for condition in self.match_conditions]),
            ("variables", [variable.name for variable in self.variables]),
        ):
            duplicates = sorted({name for name in names if names.count(name) > 1})
            if duplicates:
                raise ValueError(f"{kind} names must be unique: {', '.join(duplicates)}")
        if not self.validations and not self.mappings:
            raise ValueError("a policy needs validations or mappings")
        return self


class PolicyDocument(_Model):
    """One YAML document of ``kind: SchedulingPolicy``."""

    api_version: Literal["sunk.coreweave.com/v1alpha1"]
    kind: Literal["SchedulingPolicy"]
    metadata: Metadata
    spec: PolicySpec


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a document came from: a file (or ConfigMap key) and its 1-based document number."""

    source: str
    document: int

    def __str__(self) -> str:
        return f"{self.source} document {self.document}"


@dataclass(frozen=True, slots=True)
class PolicyIssue:
    """One problem in a policy set, located the way ``status.typeChecking`` would locate it."""

    message: str
    origin: Origin | None = None
    policy: str | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = [str(self.origin)] if self.origin else []
        if self.policy:
            where.append(f"policy {self.policy}")
        if self.field:
            where.append(self.field)
        return f"{', '.join(where)}: {self.message}" if where else self.message


class PolicyLoadError(Exception):
    """A policy set that cannot be used; ``issues`` lists every problem found."""

    def __init__(self, issues: list[PolicyIssue]) -> None:
        self.issues = tuple(issues)
        lines = "\n".join(f"  - {issue}" for issue in self.issues)
        super().__init__(f"invalid policy set ({len(self.issues)} problem(s)):\n{lines}")
