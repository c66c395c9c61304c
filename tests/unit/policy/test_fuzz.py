"""Whatever a Pod holds, evaluation returns a decision: it never raises."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sunk.policy import POLICY_ERROR_REASON, Decision, PolicyEngine

from .pods import PREFIX, container, pod

ANNOTATIONS = [
    "account", "comment", "constraints", "exclusive", "excluded-nodes", "required-nodes",
    "partition", "prefer", "priority", "qos", "reservation", "user-id", "group-id",
    "current-working-dir", "timeout",
]  # fmt: skip

MAPPING_TYPES: dict[str, type | tuple[type, ...]] = {
    "account": str, "comment": str, "constraints": str, "current_working_directory": str,
    "partition": str, "prefer": str, "qos": str, "reservation": str, "shared": str,
    "priority": int, "user_id": int, "group_id": int, "time_limit": int,
    "excluded_nodes": list, "required_nodes": list,
}  # fmt: skip

# Values near the valid ones, and anything at all.
annotation_values = st.one_of(
    st.sampled_from(["", "0", "1", "-1", "100", "4294967294", "none", "ok", "true", "a,b"]),
    st.from_regex(r"[+-]?[0-9]{1,25}", fullmatch=True),
    st.from_regex(r"[a-z0-9,._\[\]-]{0,20}", fullmatch=True),
    st.text(max_size=50),
    st.text(st.characters(codec="utf-8"), min_size=1000, max_size=5000),
)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


def pod_field(key: str) -> st.SearchStrategy[Any]:
    return st.one_of(json_values, st.fixed_dictionaries({}, optional={key: json_values}))


odd_containers = st.one_of(
    json_values,
    st.lists(
        st.one_of(
            json_values,
            st.fixed_dictionaries(
                {},
                optional={
                    "name": json_values,
                    "resources": st.one_of(
                        json_values,
                        st.fixed_dictionaries(
                            {}, optional={"requests": pod_field("cpu"), "limits": pod_field("cpu")}
                        ),
                    ),
                    "restartPolicy": st.sampled_from(["Always", None, 1]),
                },
            ),
        ),
        max_size=3,
    ),
)

odd_pods = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "metadata": st.one_of(
                json_values,
                st.fixed_dictionaries(
                    {},
                    optional={
                        "name": json_values,
                        "namespace": json_values,
                        "annotations": st.one_of(
                            json_values, st.dictionaries(st.text(max_size=30), json_values)
                        ),
                    },
                ),
            ),
            "spec": st.one_of(
                json_values,
                st.fixed_dictionaries(
                    {},
                    optional={
                        "containers": odd_containers,
                        "initContainers": odd_containers,
                        "terminationGracePeriodSeconds": json_values,
                        "priorityClassName": json_values,
                    },
                ),
            ),
            "status": pod_field("qosClass"),
        },
    ),
)


def well_formed(decision: Decision) -> None:
    """Allowed, or denied with a reason and a message; every error reported; right types."""
    assert isinstance(decision, Decision)
    for violation in (*decision.denials, *decision.warnings, *decision.audits):
        assert violation.reason and violation.message and violation.policy
    for error in decision.errors:
        assert not error.message.startswith("internal error"), error
    enforced = [error for error in decision.errors if error.enforced]
    if any(
        error.policy.startswith("sunk-") and error.policy != "sunk-static-cpu-allocation"
        for error in enforced
    ):
        assert not decision.allowed
        assert POLICY_ERROR_REASON in {denial.reason for denial in decision.denials}
    for name, value in decision.mappings.items():
        expected = MAPPING_TYPES.get(name)
        if expected is not None:
            assert isinstance(value, expected), (name, value)
        if isinstance(value, list):
            assert all(isinstance(item, str) for item in value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(ANNOTATIONS), annotation_values, max_size=6))
def test_random_annotation_values(defaults: PolicyEngine, values: dict[str, str]) -> None:
    decision = defaults.evaluate(pod(annotations={PREFIX + k: v for k, v in values.items()}))
    well_formed(decision)
    assert not decision.errors, decision.errors
    if not decision.allowed:
        assert {denial.reason for denial in decision.denials} == {"InvalidAnnotation"}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(odd_pods, st.one_of(st.none(), json_values))
def test_odd_pods(with_examples: PolicyEngine, raw: Any, namespace: Any) -> None:
    well_formed(with_examples.evaluate(raw, namespace if isinstance(namespace, dict) else None))


def test_huge_and_deep_pods(defaults: PolicyEngine) -> None:
    huge = pod(annotations={"comment": "x" * 2_000_000, "priority": "9" * 100_000})
    decision = defaults.evaluate(huge)
    well_formed(decision)
    assert decision.denials[0].message.endswith("...")
    deep: Any = "bottom"
    for _ in range(10_000):
        deep = {"d": deep}
    decision = defaults.evaluate(pod(containers=[container(extra=deep)]))
    well_formed(decision)
    assert decision.reason == POLICY_ERROR_REASON
    assert decision.errors[0].field == "object"


def test_unicode_everywhere(defaults: PolicyEngine) -> None:
    weird = pod(
        annotations={"comment": "日本語 🎉 \u202e", "account": "ü", "\x00key": "\x00"},
        containers=[container("名前", cpu="\uff11", memory="1Gi")],
        namespace="ñ",
    )
    decision = defaults.evaluate(weird)
    well_formed(decision)
    assert decision.reason == "MissingResourceRequests"
