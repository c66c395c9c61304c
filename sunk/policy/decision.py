"""What evaluating a Pod against the policy set gives: a decision, and the Slurm job fields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

MappingValue = str | int | bool | list[str]


@dataclass(frozen=True, slots=True)
class Violation:
    """A failed validation: the policy, the Event reason and the message for the Pod."""

    policy: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class EvaluationError:
    """An expression that could not be evaluated for a Pod, or gave the wrong type.

    ``enforced`` is true when the policy's failurePolicy (Fail) turned it into a violation.
    """

    policy: str
    field: str
    message: str
    enforced: bool


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome for one Pod.

    ``mappings`` are the Slurm job fields the policies produced, as plain Python values;
    ``mapped_by`` names the policy that produced each one.
    """

    denials: tuple[Violation, ...] = ()
    warnings: tuple[Violation, ...] = ()
    audits: tuple[Violation, ...] = ()
    errors: tuple[EvaluationError, ...] = ()
    mappings: Mapping[str, MappingValue] = field(default_factory=lambda: MappingProxyType({}))
    mapped_by: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def allowed(self) -> bool:
        return not self.denials

    @property
    def reason(self) -> str | None:
        """The reason of the first denial, for the Pod's Event."""
        return self.denials[0].reason if self.denials else None

    @property
    def message(self) -> str:
        """Every denial, one per line, each naming its policy."""
        return "\n".join(f"{denial.policy}: {denial.message}" for denial in self.denials)


@dataclass
class Outcome:
    """The decision being assembled while policies run."""

    denials: list[Violation] = field(default_factory=list)
    warnings: list[Violation] = field(default_factory=list)
    audits: list[Violation] = field(default_factory=list)
    errors: list[EvaluationError] = field(default_factory=list)
    mappings: dict[str, MappingValue] = field(default_factory=dict)
    mapped_by: dict[str, str] = field(default_factory=dict)

    def decision(self) -> Decision:
        return Decision(
            denials=tuple(self.denials),
            warnings=tuple(self.warnings),
            audits=tuple(self.audits),
            errors=tuple(self.errors),
            mappings=MappingProxyType(self.mappings),
            mapped_by=MappingProxyType(self.mapped_by),
        )
