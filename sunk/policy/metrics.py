"""Prometheus counters of the policy engine, on the default registry (defined once, here)."""

from typing import Final

from prometheus_client import Counter

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
LOAD_ERRORS: Final = Counter(
    "sunk_policy_load_errors_total",
    "Policy sets that failed to load; the last good set stayed in force.",
)
RELOADS: Final = Counter(
    "sunk_policy_reloads_total",
    "Policy sets loaded and put in force (start-up included).",
)
