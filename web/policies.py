"""The policy set in force and the last reload's problems -> the Policies page and its JSON."""

from __future__ import annotations

from sunk.policy.engine import PolicyEngine
from web.protocol import SchedulerView
from web.viewmodels import (
    EvaluationErrorView,
    IssueView,
    PolicyInfo,
    PolicyView,
    RuleView,
    utc,
)


def policy_info(engine: PolicyEngine) -> list[PolicyInfo]:
    out = []
    for policy in engine.policies:
        spec = policy.document.spec
        out.append(PolicyInfo(
            name=policy.name, source=str(policy.origin or ""),
            failure_policy=spec.failure_policy, actions=list(spec.validation_actions),
            match_conditions=[c.name for c in spec.match_conditions],
            variables=[v.name for v in spec.variables],
            validations=[RuleView(v.reason, v.message) if v.message else
                         RuleView(v.reason, v.message_expression or v.expression, computed=True)
                         for v in spec.validations],
            mappings=list(spec.mappings)))
    return out


def policies(scheduler: SchedulerView) -> PolicyView:
    status = scheduler.policies.status()
    # Generation 0: none in force (the set did not load at start-up; new Pods wait).
    engine = scheduler.policies.engine if status.generation else None
    errors = [] if status.error is None else [
        IssueView(message=issue.message, source=str(issue.origin or ""),
                  policy=issue.policy or "", field=issue.field or "")
        for issue in status.error.issues]
    recent = [EvaluationErrorView(at=utc(e.at), pod=e.pod, policy=e.error.policy,
                                  field=e.error.field, message=e.error.message,
                                  enforced=e.error.enforced)
              for e in scheduler.policies.recent_errors()]
    return PolicyView(
        generation=status.generation, policies=policy_info(engine) if engine else [],
        loaded_at=utc(status.loaded_at), last_reload_ok=status.error is None, errors=errors,
        error_at=utc(status.error_at) if status.error_at is not None else None,
        evaluation_errors=recent)
