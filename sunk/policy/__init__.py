"""The policy engine: what a Pod may ask of Slurm, and which Slurm job fields it becomes.

Operators write policies as YAML documents in the shape of Kubernetes' ValidatingAdmissionPolicy
with CEL expressions (see docs/policies.md). The scheduler uses three things::

    store = PolicyStore.from_directory("policies", settings={"killWaitSeconds": 30})
    decision = store.evaluate(pod, namespace)   # never raises
    store.reload_configmap(configmap["data"])   # keeps the last good set if the new one is broken

``decision.allowed``, ``decision.reason`` and ``decision.message`` give the Event;
``decision.mappings`` the Slurm job fields; ``store.status()`` what the dashboard shows.

The engine remembers the decisions of recent Pods by the fields its policies read
(:mod:`sunk.policy.memo`): the Pods of one Deployment or Job, which differ in name and uid, are
evaluated once, and each gets the decision that evaluating it would give.
"""

from sunk.policy.compiled import POLICY_ERROR_REASON
from sunk.policy.decision import Decision, EvaluationError, MappingValue, Violation
from sunk.policy.engine import DEFAULT_SETTINGS, PolicyEngine
from sunk.policy.loader import (
    DEFAULT_DIRECTORY,
    PolicyStatus,
    PolicyStore,
    RecentError,
    load_configmap,
    load_directory,
    load_sources,
    parse_sources,
    read_directory,
)
from sunk.policy.model import Origin, PolicyDocument, PolicyIssue, PolicyLoadError

__all__ = [
    "DEFAULT_DIRECTORY",
    "DEFAULT_SETTINGS",
    "POLICY_ERROR_REASON",
    "Decision",
    "EvaluationError",
    "MappingValue",
    "Origin",
    "PolicyDocument",
    "PolicyEngine",
    "PolicyIssue",
    "PolicyLoadError",
    "PolicyStatus",
    "PolicyStore",
    "RecentError",
    "Violation",
    "load_configmap",
    "load_directory",
    "load_sources",
    "parse_sources",
    "read_directory",
]
