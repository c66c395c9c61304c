"""Evaluate a Pod against a compiled policy set: a decision, and the Slurm job fields.

Policies are compiled once (``PolicyEngine.compile``) and evaluated for every Pod
(``PolicyEngine.evaluate``). Evaluation never raises: whatever the Pod holds, the outcome is
allowed, denied with a reason, or a policy error that the policy's ``failurePolicy`` turns into
a violation (Fail) or skips (Ignore), and which is reported either way.

Each engine keeps the decisions of recent Pods by what the policies read of them
(:mod:`sunk.policy.memo`): a Pod that reads the same as one already evaluated, such as
another Pod of the same Deployment or Job, gets that decision without evaluating the policies
again. The decision is the one evaluating would give; the metrics and the audit log lines are
counted and written for every Pod alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Final

from sunk.policy import metrics
from sunk.policy.cel import describe_error, to_cel
from sunk.policy.cel.reads import Path, minimal
from sunk.policy.compiled import CompiledPolicy
from sunk.policy.decision import Decision, Outcome
from sunk.policy.memo import MAX_ENTRIES, KeyMaker, Memo
from sunk.policy.model import Origin, PolicyDocument, PolicyIssue, PolicyLoadError

_log = logging.getLogger(__name__)

DEFAULT_SETTINGS: Final[Mapping[str, Any]] = MappingProxyType(
    {"killWaitSeconds": 30, "annotationPrefix": "sunk.coreweave.com/"}
)
"""Settings every policy can read as ``settings.<name>``; the scheduler passes its own."""


class PolicyEngine:
    """A compiled policy set and the settings its expressions see; immutable once built,
    but for its memo of recent decisions (``memo_size`` of them; 0 turns the memo off)."""

    def __init__(
        self,
        policies: Sequence[CompiledPolicy],
        settings: Mapping[str, Any] | None = None,
        *,
        memo_size: int = MAX_ENTRIES,
    ) -> None:
        self.policies = tuple(policies)
        self.settings: Mapping[str, Any] = MappingProxyType(
            {**DEFAULT_SETTINGS, **(settings or {})}
        )
        self._settings = dict(self.settings)  # read as JSON, as the Pod is
        to_cel(self._settings)  # raises ValueError for what CEL cannot hold
        # What the policies read of object and namespaceObject, by root name.
        self.reads: Mapping[str, tuple[Path, ...]] = MappingProxyType(
            minimal(read for policy in self.policies for read in policy.reads)
        )
        self._keys = KeyMaker(self.reads)
        self._memo: Memo | None = Memo(memo_size) if memo_size > 0 else None
        for result in ("allowed", "denied"):  # both series exist from the start
            metrics.EVALUATIONS.labels(result=result)

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
        try:
            shown = without_managed_fields(pod)
        except Exception:  # not a mapping of the usual kind: evaluating reports it
            shown = pod
        key = self._key(shown, namespace) if self._memo is not None else None
        known = None if key is None or self._memo is None else self._memo.get(key)
        if known is not None:
            decision = _own_copy(known)
        else:
            # A key is made only of plain JSON; without the memo, the same check.
            plain = key is not None or (self._memo is None and self._plain(shown, namespace))
            decision, clean = self._evaluate(shown, namespace, plain=plain)
            if key is not None and clean and self._memo is not None:
                self._memo.put(key, _own_copy(decision))
        metrics.count(decision)
        for audit in decision.audits:
            _log.info(
                "policy audit: %s: %s: %s (pod %s)",
                audit.policy,
                audit.reason,
                audit.message,
                pod_name(pod),
            )
        return decision

    def _key(self, pod: Any, namespace: Mapping[str, Any] | None) -> bytes | None:
        """The memo key of the Pod (without its managed fields), or None (then it is evaluated
        without the memo)."""
        try:
            ns = None if namespace is None else dict(namespace)
            return self._keys.key(pod, ns)
        except Exception:  # not a mapping: evaluating reports it
            return None

    def _plain(self, pod: Any, namespace: Mapping[str, Any] | None) -> bool:
        try:
            ns = None if namespace is None else dict(namespace)
            return self._keys.is_plain(pod, ns)
        except Exception:  # not a mapping: evaluating reports it
            return False

    def _evaluate(
        self, pod: Mapping[str, Any], namespace: Mapping[str, Any] | None, *, plain: bool
    ) -> tuple[Decision, bool]:
        """The decision, and whether it came without an exception (only then is it kept).

        Plain JSON is read as it is; anything else is converted to CEL values first, which
        refuses what CEL cannot hold (an integer beyond 64 bits, a set).
        """
        outcome = Outcome()
        clean = True
        convert: Callable[[Any], Any] = _as_it_is if plain else to_cel
        try:
            values = {
                "object": convert(pod),
                "namespaceObject": None if namespace is None else convert(dict(namespace)),
                "settings": self._settings,
            }
        except Exception as error:  # not JSON data, or nested too deeply
            clean = False
            for policy in self.policies:
                policy.record_error(
                    outcome, "object", f"cannot read the Pod or its Namespace: {error}"
                )
        else:
            for policy in self.policies:
                try:
                    policy.evaluate(values, outcome)
                except Exception as error:  # a bug in a function or in cel-python
                    clean = False
                    _log.exception("policy %s failed on a Pod", policy.name)
                    policy.record_error(outcome, "spec", f"internal error: {describe_error(error)}")
        return outcome.decision(), clean


def _as_it_is(value: Any) -> Any:
    return value


def _own_copy(decision: Decision) -> Decision:
    """The decision with its own mappings (list values included), for the memo or a caller.

    A decision is immutable but for a mapping's list: one without lists is shared as it is.
    """
    if not any(type(value) is list for value in decision.mappings.values()):
        return decision
    mappings = {
        name: list(value) if isinstance(value, list) else value
        for name, value in decision.mappings.items()
    }
    return replace(decision, mappings=MappingProxyType(mappings))


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
