"""How a policy set turns a Pod into a decision: actions, failure policies, mappings."""

from __future__ import annotations

import logging
import textwrap
from typing import Any

import pytest
from prometheus_client import REGISTRY

from sunk.policy import POLICY_ERROR_REASON, PolicyEngine, load_sources
from sunk.policy.compiled import MAX_MESSAGE_LENGTH

from .pods import pod, policy


def engine(*documents: str, settings: dict[str, Any] | None = None) -> PolicyEngine:
    """One source per document, named so that they apply in the order given."""
    return load_sources({f"{i:02}.yaml": text for i, text in enumerate(documents)}, settings)


def check(expression: str, **extra: Any) -> dict[str, Any]:
    return {"expression": expression, "reason": "Checked", **extra}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_false_validation_denies_with_its_reason_and_message() -> None:
    decision = engine(policy(validations=[check("false", message="no")])).evaluate(pod())
    assert not decision.allowed
    assert decision.reason == "Checked"
    assert decision.message == "test: no"
    assert decision.denials[0].policy == "test"


def test_the_default_reason_and_message_follow_kubernetes() -> None:
    decision = engine(policy(validations=[{"expression": "1 > 2"}])).evaluate(pod())
    assert decision.denials[0].reason == "Invalid"
    assert decision.denials[0].message == "failed expression: 1 > 2"


def test_a_message_expression_sees_the_pod() -> None:
    rule = check("false", messageExpression="'pod ' + object.metadata.name")
    assert engine(policy(validations=[rule])).evaluate(pod()).message == "test: pod test"


@pytest.mark.parametrize("broken", ["1/0 == 1 ? 'x' : 'y'", "42", "''"])
def test_a_broken_message_expression_falls_back_to_the_message(broken: str) -> None:
    rule = check("false", message="static", messageExpression=broken)
    decision = engine(policy(validations=[rule])).evaluate(pod())
    assert decision.denials[0].message == "static"
    assert len(decision.errors) == 1
    assert decision.errors[0].field == "spec.validations[0].messageExpression"
    assert not decision.errors[0].enforced


def test_messages_are_clipped_to_fit_an_event() -> None:
    rule = check("false", messageExpression="'x' + object.metadata.annotations.long")
    decision = engine(policy(validations=[rule])).evaluate(pod(annotations={"a/long": ""}))
    assert decision.allowed is False
    long = pod(annotations={"x/y": ""})
    long["metadata"]["annotations"] = {"long": "y" * 10_000}
    message = engine(policy(validations=[rule])).evaluate(long).denials[0].message
    assert len(message) == MAX_MESSAGE_LENGTH and message.endswith("...")


def test_warn_and_audit_let_the_pod_through(caplog: pytest.LogCaptureFixture) -> None:
    warn = policy("warn", validationActions=["Warn"], validations=[check("false", message="w")])
    audit = policy(
        "audit", validationActions=["Audit", "Warn"], validations=[check("false", message="a")]
    )
    before = sample("sunk_policy_audit_total", policy="audit")
    with caplog.at_level(logging.INFO, logger="sunk.policy.engine"):
        decision = engine(warn, audit).evaluate(pod())
    assert decision.allowed
    assert [w.message for w in decision.warnings] == ["w", "a"]
    assert [a.message for a in decision.audits] == ["a"]
    assert sample("sunk_policy_audit_total", policy="audit") == before + 1
    assert "policy audit: audit: Checked: a (pod default/test)" in caplog.text


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("1/0 == 1", "divide by zero"),
        ("object.spec.missing == 1", "no such key: 'missing'"),
        ("42", "expected bool, got int"),
        ("'yes'", "expected bool, got string"),
    ],
)
def test_with_fail_an_error_denies_with_reason_policy_error(expression: str, problem: str) -> None:
    decision = engine(policy(validations=[check(expression)])).evaluate(pod())
    assert decision.reason == POLICY_ERROR_REASON
    assert decision.denials[0].message.startswith("spec.validations[0].expression: ")
    assert problem in decision.denials[0].message
    [error] = decision.errors
    assert (error.policy, error.field, error.enforced) == (
        "test",
        "spec.validations[0].expression",
        True,
    )
    assert problem in error.message


def test_with_ignore_an_error_is_reported_and_skipped() -> None:
    before = sample("sunk_policy_evaluation_errors_total", policy="test")
    spec = {"failurePolicy": "Ignore", "validations": [check("1/0 == 1"), check("true")]}
    decision = engine(policy(**spec)).evaluate(pod())
    assert decision.allowed
    assert [(e.field, e.enforced) for e in decision.errors] == [
        ("spec.validations[0].expression", False)
    ]
    assert sample("sunk_policy_evaluation_errors_total", policy="test") == before + 1


def test_with_fail_an_error_in_a_warn_policy_only_warns() -> None:
    spec = {"validationActions": ["Warn"], "validations": [check("1/0 == 1")]}
    decision = engine(policy(**spec)).evaluate(pod())
    assert decision.allowed
    assert [w.reason for w in decision.warnings] == [POLICY_ERROR_REASON]


def test_match_conditions_select_the_pods_a_policy_applies_to() -> None:
    spec = {
        "matchConditions": [
            {"name": "in-batch", "expression": "object.metadata.namespace == 'batch'"}
        ],
        "validations": [check("false")],
        "mappings": {"partition": {"type": "string", "expression": "'batch'"}},
    }
    checked = engine(policy(**spec))
    skipped = checked.evaluate(pod(namespace="other"))
    assert skipped.allowed and not skipped.mappings
    assert not checked.evaluate(pod(namespace="batch")).allowed


@pytest.mark.parametrize(("failure_policy", "allowed"), [("Fail", False), ("Ignore", True)])
def test_a_failing_match_condition_follows_the_failure_policy(
    failure_policy: str, allowed: bool
) -> None:
    spec = {
        "failurePolicy": failure_policy,
        "matchConditions": [{"name": "broken", "expression": "object.nothing == 1"}],
        "validations": [check("true")],
    }
    decision = engine(policy(**spec)).evaluate(pod())
    assert decision.allowed is allowed
    assert decision.errors[0].field == "spec.matchConditions[0].expression"


@pytest.mark.parametrize(
    ("kind", "expression", "value"),
    [
        ("string", "'a'", "a"),
        ("int", "7", 7),
        ("int", "7u", 7),
        ("bool", "true", True),
        ("list(string)", "['a', 'b']", ["a", "b"]),
        ("list(string)", "[]", []),
    ],
)
def test_mappings_give_plain_values_of_their_type(kind: str, expression: str, value: Any) -> None:
    spec = {"mappings": {"field": {"type": kind, "expression": expression}}}
    decision = engine(policy(**spec)).evaluate(pod())
    assert decision.mappings == {"field": value}
    assert type(decision.mappings["field"]) is type(value)
    assert decision.mapped_by == {"field": "test"}


@pytest.mark.parametrize(
    ("kind", "expression", "problem"),
    [
        ("string", "7", "expected string, got int"),
        ("int", "'7'", "expected int, got string"),
        ("int", "true", "expected int, got bool"),
        ("int", "7.0", "expected int, got double"),
        ("bool", "1", "expected bool, got int"),
        ("list(string)", "['a', 1]", "expected list(string), got list"),
        ("list(string)", "'a'", "expected list(string), got string"),
        ("string", "object.spec.nothing", "no such key"),
    ],
)
def test_a_mapping_of_the_wrong_type_is_a_policy_error(
    kind: str, expression: str, problem: str
) -> None:
    spec = {"mappings": {"field": {"type": kind, "expression": expression}}}
    decision = engine(policy(**spec)).evaluate(pod())
    assert decision.reason == POLICY_ERROR_REASON
    assert "field" not in decision.mappings
    assert decision.errors[0].field == "spec.mappings.field.expression"
    assert problem in decision.errors[0].message
    ignored = engine(policy(failurePolicy="Ignore", **spec)).evaluate(pod())
    assert ignored.allowed and not ignored.mappings


def test_null_means_no_value_and_later_policies_override() -> None:
    first = policy(
        "first",
        mappings={"a": {"type": "int", "expression": "1"}, "b": {"type": "int", "expression": "2"}},
    )
    second = policy(
        "second",
        mappings={
            "a": {"type": "int", "expression": "10"},
            "b": {"type": "int", "expression": "null"},
        },
    )
    decision = engine(first, second).evaluate(pod())
    assert decision.mappings == {"a": 10, "b": 2}
    assert decision.mapped_by == {"a": "second", "b": "first"}


def test_a_policy_that_denies_produces_no_mappings() -> None:
    spec = {
        "validations": [check("false")],
        "mappings": {"priority": {"type": "int", "expression": "int('not a number')"}},
    }
    decision = engine(policy(**spec)).evaluate(pod())
    assert [d.reason for d in decision.denials] == ["Checked"]
    assert not decision.errors and not decision.mappings


def test_variables_are_computed_only_when_read() -> None:
    spec = {
        "variables": [
            {"name": "broken", "expression": "1/0"},
            {"name": "fine", "expression": "object.metadata.name"},
            {"name": "derived", "expression": "variables.fine + '!'"},
        ],
        "validations": [check("variables.derived == 'test!'")],
    }
    decision = engine(policy(**spec)).evaluate(pod())
    assert decision.allowed and not decision.errors


def test_a_broken_variable_fails_the_expressions_reading_it() -> None:
    spec = {
        "variables": [{"name": "broken", "expression": "1/0"}],
        "validations": [check("variables.broken == 1")],
    }
    decision = engine(policy(**spec)).evaluate(pod())
    assert decision.reason == POLICY_ERROR_REASON
    assert "divide by zero" in decision.errors[0].message


def test_expressions_see_params_settings_and_the_namespace() -> None:
    spec = {
        "params": {"teams": {"default": "blue"}},
        "mappings": {
            "comment": {
                "type": "string",
                "expression": "params.teams[object.metadata.namespace] + '/' + settings.site"
                " + '/' + namespaceObject.metadata.labels.zone",
            },
            "partition": {"type": "string", "expression": "string(settings.killWaitSeconds)"},
        },
    }
    namespace = {"metadata": {"name": "default", "labels": {"zone": "z1"}}}
    decision = engine(policy(**spec), settings={"site": "ord1"}).evaluate(pod(), namespace)
    assert decision.mappings == {"comment": "blue/ord1/z1", "partition": "30"}


def test_without_a_namespace_object_it_is_null() -> None:
    spec = {"validations": [check("namespaceObject == null"), check("!has(namespaceObject.x)")]}
    assert engine(policy(**spec)).evaluate(pod()).allowed


def test_managed_fields_are_not_shown_to_policies() -> None:
    spec = {"validations": [check("!has(object.metadata.managedFields)")]}
    noisy = pod()
    noisy["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    assert engine(policy(**spec)).evaluate(noisy).allowed
    assert noisy["metadata"]["managedFields"], "the caller's Pod is left as it was"


@pytest.mark.parametrize("odd", [{"metadata": {"bad": {1, 2}}}, {"spec": {"n": 2**64}}])
def test_a_pod_that_is_not_json_data_is_a_policy_error(odd: dict[str, Any]) -> None:
    two = engine(
        policy("one", validations=[check("true")]),
        policy("two", failurePolicy="Ignore", validations=[check("true")]),
    )
    decision = two.evaluate(odd)
    assert [d.policy for d in decision.denials] == ["one"]
    assert decision.reason == POLICY_ERROR_REASON
    assert [(e.policy, e.field, e.enforced) for e in decision.errors] == [
        ("one", "object", True),
        ("two", "object", False),
    ]


def test_every_evaluation_is_counted() -> None:
    allowed = sample("sunk_policy_evaluations_total", result="allowed")
    denied = sample("sunk_policy_evaluations_total", result="denied")
    engine(policy(validations=[check("object.metadata.name == 'test'")])).evaluate(pod())
    engine(policy(validations=[check("false")])).evaluate(pod())
    assert sample("sunk_policy_evaluations_total", result="allowed") == allowed + 1
    assert sample("sunk_policy_evaluations_total", result="denied") == denied + 1


def test_yaml_documents_read_as_operators_write_them() -> None:
    text = textwrap.dedent(
        """\
        apiVersion: sunk.coreweave.com/v1alpha1
        kind: SchedulingPolicy
        metadata:
          name: yaml
        spec:
          variables:
            - name: annotations
              expression: >-
                has(object.metadata.annotations)
                ? object.metadata.annotations : {}
          validations:
            - expression: "!('stop' in variables.annotations)"  # a comment
              reason: Stopped
        """
    )
    checked = load_sources({"yaml.yaml": text})
    assert checked.evaluate(pod()).allowed
    assert checked.evaluate(pod(annotations={"x/y": "1", "stop": "now"})).reason is None
    stopped = pod()
    stopped["metadata"]["annotations"] = {"stop": "now"}
    assert checked.evaluate(stopped).reason == "Stopped"
