"""Prometheus counters of the policy engine, on the default registry (defined once, here)."""

from typing import Final

from prometheus_client import Counter

from sunk.policy.decision import Decision

EVALUATIONS: Final = Counter(
    "sunk_policy_evaluations_total",
    "Pods evaluated against the policy set, by result (allowed or denied).",
    ["result"],
)
VIOLATIONS: Final = Counter(
    "sunk_policy_violations_total",
    "Failed validations, by policy and action (Deny, Warn, Audit).",
    ["policy", "action"],
)
AUDITS: Final = Counter(
    "sunk_policy_audit_total",
    "Failed validations of policies with the Audit action, by policy.",
    ["policy"],
)
EVALUATION_ERRORS: Final = Counter(
    "sunk_policy_evaluation_errors_total",
    "Expressions that failed to evaluate or gave a wrong type, by policy.",
    ["policy"],
)
_ALLOWED: Final = EVALUATIONS.labels(result="allowed")
_DENIED: Final = EVALUATIONS.labels(result="denied")
LOAD_ERRORS: Final = Counter(
    "sunk_policy_load_errors_total",
    "Policy sets that failed to load; the last good set stayed in force.",
)
RELOADS: Final = Counter(
    "sunk_policy_reloads_total",
    "Policy sets loaded and put in force (start-up included).",
)


def count(decision: Decision) -> None:
    """Count one Pod's decision: its result, each violation once per action, each error.

    A policy whose validation fails adds the violation once for each of its actions, to the
    denials, warnings or audits, and each evaluation error (a messageExpression's too) is in
    ``errors``: counting them here moves every counter as counting them as they happened did.
    """
    (_ALLOWED if decision.allowed else _DENIED).inc()
    for action, violations in (
        ("Deny", decision.denials),
        ("Warn", decision.warnings),
        ("Audit", decision.audits),
    ):
        for violation in violations:
            VIOLATIONS.labels(policy=violation.policy, action=action).inc()
    for violation in decision.audits:
        AUDITS.labels(policy=violation.policy).inc()
    for error in decision.errors:
        EVALUATION_ERRORS.labels(policy=error.policy).inc()
