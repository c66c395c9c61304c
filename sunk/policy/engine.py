"""Evaluate a Pod against a compiled policy set: a decision, and the Slurm job fields.

Policies are compiled once (``PolicyEngine.compile``) and evaluated for every Pod
(``PolicyEngine.evaluate``). Evaluation never raises: whatever the Pod holds, the outcome is
allowed, denied with a reason, or a policy error that the policy's ``failurePolicy`` turns into
a violation (Fail) or skips (Ignore), and which is reported either way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from sunk.policy import metrics
from sunk.policy.cel import describe_error, to_cel
from sunk.policy.compiled import CompiledPolicy
from sunk.policy.decision import Decision, Outcome
from sunk.policy.model import Origin, PolicyDocument, PolicyIssue, PolicyLoadError

_log = logging.getLogger(__name__)

DEFAULT_SETTINGS: Final[Mapping[str, Any]] = MappingProxyType(
    {"killWaitSeconds": 30, "annotationPrefix": "sunk.coreweave.com/"}
)
"""Settings every policy can read as ``settings.<name>``; the scheduler passes its own."""


class PolicyEngine:
    """A compiled policy set and the settings its expressions see; immutable once built."""

    def __init__(
        self, policies: Sequence[CompiledPolicy], settings: Mapping[str, Any] | None = None
    ) -> None:
        self.policies = tuple(policies)
        self.settings: Mapping[str, Any] = MappingProxyType(
            {**DEFAULT_SETTINGS, **(settings or {})}
        )
        self._settings = to_cel(dict(self.settings))
        self._results = {
            True: metrics.EVALUATIONS.labels(result="allowed"),
            False: metrics.EVALUATIONS.labels(result="denied"),
        }

    @classmethod
    def compile(
        cls,
        documents: Iterable[tuple[Origin | None, PolicyDocument]],
        settings: Mapping[str, Any] | None = None,
    ) -> PolicyEngine:
        """Compile documents in order; raises PolicyLoadError listing every problem found."""
        issues: list[PolicyIssue] = []
        policies: list[CompiledPolicy] = []
        seen: dict[str, Origin | None] = {}
        for origin, document in documents:
            name = document.metadata.name
            if name in seen:
                where = f" (first in {seen[name]})" if seen[name] else ""
                issues.append(
                    PolicyIssue(f"duplicate policy name{where}", origin, name, "metadata.name")
                )
                continue
            seen[name] = origin
            try:
                policies.append(CompiledPolicy(document, origin))
            except PolicyLoadError as error:
                issues.extend(error.issues)
        if issues:
            raise PolicyLoadError(issues)
        return cls(policies, settings)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(policy.name for policy in self.policies)

    def evaluate(
        self, pod: Mapping[str, Any], namespace: Mapping[str, Any] | None = None
    ) -> Decision:
        """The decision for ``pod`` (a Pod as the API server returns it, as plain JSON data).

        ``namespace`` is the Pod's Namespace object, if the caller has it. Never raises.
        """
        outcome = Outcome()
        try:
            values = {
                "object": to_cel(without_managed_fields(pod)),
                "namespaceObject": None if namespace is None else to_cel(dict(namespace)),
                "settings": self._settings,
            }
        except Exception as error:  # not JSON data, or nested too deeply
            for policy in self.policies:
                policy.record_error(
                    outcome, "object", f"cannot read the Pod or its Namespace: {error}"
                )
        else:
            for policy in self.policies:
                try:
                    policy.evaluate(values, outcome)
                except Exception as error:  # a bug in a function or in cel-python
                    _log.exception("policy %s failed on a Pod", policy.name)
                    policy.record_error(outcome, "spec", f"internal error: {describe_error(error)}")
        decision = outcome.decision()
        self._results[decision.allowed].inc()
        for audit in decision.audits:
            _log.info(
                "policy audit: %s: %s: %s (pod %s)",
                audit.policy,
                audit.reason,
                audit.message,
                pod_name(pod),
            )
        return decision


def without_managed_fields(pod: Mapping[str, Any]) -> Any:
    """The Pod without ``metadata.managedFields``: no policy needs them, and they are large."""
    metadata = pod.get("metadata") if isinstance(pod, Mapping) else None
    if isinstance(metadata, Mapping) and "managedFields" in metadata:
        rest = {key: value for key, value in metadata.items() if key != "managedFields"}
        return {**pod, "metadata": rest}
    return dict(pod) if isinstance(pod, Mapping) and not isinstance(pod, dict) else pod


def pod_name(pod: Mapping[str, Any]) -> str:
    """namespace/name, for logs; never raises, whatever the Pod holds."""
    try:
        metadata = pod["metadata"]
        return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
    except Exception:
        return "?"
