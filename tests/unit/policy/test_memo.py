"""The engine's memo: a Pod that reads the same as one evaluated gets that decision, exactly."""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from sunk.policy import PolicyEngine, load_sources
from sunk.policy.compiled import CompiledPolicy
from sunk.policy.memo import MAX_DEPTH, KeyMaker, Memo

from .pods import container, pod, policy, realistic_pod


def engine(*documents: str, memo_size: int = 1024) -> PolicyEngine:
    compiled = load_sources({f"{i:02}.yaml": text for i, text in enumerate(documents)})
    return PolicyEngine(compiled.policies, compiled.settings, memo_size=memo_size)


def fresh(base: PolicyEngine, memo_size: int = 1024) -> PolicyEngine:
    """The same compiled policies with an empty memo (or none, with memo_size 0)."""
    return PolicyEngine(base.policies, base.settings, memo_size=memo_size)


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the policies evaluated, one entry per policy and Pod."""
    calls: list[str] = []
    original = CompiledPolicy.evaluate

    def counting(self: CompiledPolicy, values: Any, outcome: Any) -> None:
        calls.append(self.name)
        original(self, values, outcome)

    monkeypatch.setattr(CompiledPolicy, "evaluate", counting)
    yield calls


def renamed(base: dict[str, Any], name: str) -> dict[str, Any]:
    result = copy.deepcopy(base)
    result["metadata"].update(name=name, uid=f"uid-{name}", resourceVersion=str(len(name)))
    result["metadata"]["managedFields"] = [{"manager": name}]
    return result


def test_pods_differing_only_in_name_share_one_evaluation(
    defaults: PolicyEngine, runs: list[str]
) -> None:
    memo = fresh(defaults)
    first = memo.evaluate(renamed(realistic_pod(), "a"))
    evaluated = len(runs)
    assert evaluated == len(defaults.policies)
    second = memo.evaluate(renamed(realistic_pod(), "b"))
    assert len(runs) == evaluated  # no policy ran for the second Pod
    assert second == first
    assert first.mappings["account"] == "inference"


@pytest.mark.parametrize(
    "change",
    [
        lambda p: p["metadata"]["annotations"].update({"sunk.coreweave.com/qos": "high"}),
        lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu="2"),
        lambda p: p["spec"].update(terminationGracePeriodSeconds=7),
        lambda p: p["spec"].pop("terminationGracePeriodSeconds", None),
        lambda p: p["metadata"].setdefault("labels", {}).update({"sunk.coreweave.com/gang": ""}),
        lambda p: p.update(status={"qosClass": "Guaranteed"}),
    ],
)
def test_a_pod_differing_in_a_read_field_is_evaluated(
    defaults: PolicyEngine, runs: list[str], change: Any
) -> None:
    memo = fresh(defaults)
    base = realistic_pod()
    memo.evaluate(base)
    other = copy.deepcopy(base)
    change(other)
    before = len(runs)
    decision = memo.evaluate(other)
    assert len(runs) == before + len(defaults.policies)
    assert decision == fresh(defaults, 0).evaluate(other)


def test_the_namespace_labels_are_part_of_the_key_when_a_policy_reads_them(
    with_examples: PolicyEngine, runs: list[str]
) -> None:
    memo = fresh(with_examples)
    gpu = pod(containers=[container(limits={"nvidia.com/gpu": "4"})], namespace="research")
    small = {"metadata": {"name": "research", "labels": {"example.com/max-gpus-per-pod": "2"}}}
    large = {"metadata": {"name": "research", "labels": {"example.com/max-gpus-per-pod": "8"}}}
    assert not memo.evaluate(gpu, small).allowed
    before = len(runs)
    renamed_namespace = {"metadata": {**small["metadata"], "uid": "x"}}
    assert not memo.evaluate(renamed(gpu, "other"), renamed_namespace).allowed
    assert len(runs) == before  # the namespace's uid is not read
    assert memo.evaluate(gpu, large).allowed
    assert memo.evaluate(gpu, None).allowed  # research allows 8 by the table
    assert len(runs) == before + 2 * len(with_examples.policies)


def test_a_policy_reading_the_name_keys_on_it(runs: list[str]) -> None:
    named = engine(
        policy(
            validations=[
                {"expression": "false", "messageExpression": "'pod ' + object.metadata.name"}
            ]
        )
    )
    assert named.reads["object"] == (("metadata", "name"),)
    assert named.evaluate(renamed(pod(), "a")).message == "test: pod a"
    assert named.evaluate(renamed(pod(), "b")).message == "test: pod b"
    assert named.evaluate(renamed(pod(), "a")).message == "test: pod a"
    assert runs == ["test", "test"]


def test_a_policy_reading_the_whole_pod_keys_on_all_of_it(runs: list[str]) -> None:
    whole = engine(policy(validations=[{"expression": "size(object) > 0"}]))
    assert whole.reads["object"] == ((),)
    whole.evaluate(renamed(pod(), "a"))
    whole.evaluate(renamed(pod(), "b"))
    whole.evaluate(renamed(pod(), "b"))
    assert runs == ["test", "test"]


# Every kind of outcome: a denial and an audit from one policy with two actions, a warning, a
# messageExpression that fails (an error that is not enforced), an enforced error, a mapping.
COUNTED = [
    policy(
        "deny-audit",
        validationActions=["Deny", "Audit"],
        validations=[{"expression": "object.spec.x == 1", "messageExpression": "object.spec.x"}],
    ),
    policy("warn", validationActions=["Warn"], validations=[{"expression": "false"}]),
    policy("broken", failurePolicy="Fail", validations=[{"expression": "object.spec.nope"}]),
    policy("lenient", failurePolicy="Ignore", validations=[{"expression": "object.metadata.nope"}]),
    policy("maps", mappings={"nodes": {"type": "list(string)", "expression": "['a', 'b']"}}),
]
COUNTERS = [
    ("sunk_policy_evaluations_total", {"result": "denied"}),
    ("sunk_policy_evaluations_total", {"result": "allowed"}),
    ("sunk_policy_violations_total", {"policy": "deny-audit", "action": "Deny"}),
    ("sunk_policy_violations_total", {"policy": "deny-audit", "action": "Audit"}),
    ("sunk_policy_violations_total", {"policy": "warn", "action": "Warn"}),
    ("sunk_policy_violations_total", {"policy": "broken", "action": "Deny"}),
    ("sunk_policy_audit_total", {"policy": "deny-audit"}),
    ("sunk_policy_evaluation_errors_total", {"policy": "deny-audit"}),
    ("sunk_policy_evaluation_errors_total", {"policy": "broken"}),
    ("sunk_policy_evaluation_errors_total", {"policy": "lenient"}),
]


def counters() -> list[float]:
    return [REGISTRY.get_sample_value(name, labels) or 0.0 for name, labels in COUNTERS]


def moved(action: Any) -> list[float]:
    before = counters()
    action()
    return [after - start for start, after in zip(before, counters(), strict=True)]


def test_counters_move_the_same_for_a_hit_a_miss_and_no_memo(runs: list[str]) -> None:
    memo = engine(*COUNTED)
    plain = fresh(memo, 0)
    subject = pod(x=2)
    expected = [1, 0, 1, 1, 1, 1, 1, 1, 1, 1]
    assert moved(lambda: plain.evaluate(subject)) == expected
    assert moved(lambda: memo.evaluate(renamed(subject, "miss"))) == expected
    evaluated = len(runs)
    assert moved(lambda: memo.evaluate(renamed(subject, "hit"))) == expected
    assert len(runs) == evaluated
    decision = memo.evaluate(subject)
    assert [e.enforced for e in decision.errors] == [False, True, False]
    assert [d.policy for d in decision.denials] == ["deny-audit", "broken"]


def test_audits_are_logged_for_every_pod(caplog: pytest.LogCaptureFixture) -> None:
    memo = engine(COUNTED[0])
    with caplog.at_level(logging.INFO, logger="sunk.policy.engine"):
        memo.evaluate(renamed(pod(x=2), "first"))
        memo.evaluate(renamed(pod(x=2), "second"))
    audits = [r.getMessage() for r in caplog.records if "policy audit" in r.getMessage()]
    assert len(audits) == 2
    assert audits[0].endswith("(pod default/first)")
    assert audits[1].endswith("(pod default/second)")


def test_a_caller_changing_its_decision_does_not_change_the_next(runs: list[str]) -> None:
    memo = engine(COUNTED[-1])
    first = memo.evaluate(pod())
    nodes = first.mappings["nodes"]
    assert isinstance(nodes, list)
    nodes.append("c")
    second = memo.evaluate(pod())
    assert second.mappings["nodes"] == ["a", "b"]
    assert len(runs) == 1


def test_an_internal_error_is_not_kept(runs: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    memo = engine(policy(validations=[{"expression": "object.spec.x == 1"}]))
    original = CompiledPolicy.evaluate
    failures = iter([True])

    def flaky(self: CompiledPolicy, values: Any, outcome: Any) -> None:
        if next(failures, False):
            raise RuntimeError("bug")
        original(self, values, outcome)

    monkeypatch.setattr(CompiledPolicy, "evaluate", flaky)
    assert memo.evaluate(pod(x=1)).errors[0].message == "internal error: bug"
    assert memo.evaluate(pod(x=1)).allowed  # evaluated again, not the failed decision
    assert memo.evaluate(pod(x=1)).allowed


@pytest.mark.parametrize(
    ("good", "odd"),
    [
        (None, float("nan")),  # JSON writes NaN as null
        (None, float("inf")),
        ({"1": "a"}, {1: "a"}),  # JSON writes the key 1 as "1"
        ([1, 2], (1, 2)),
        ([1, 2], {1, 2}),
        ("1", __import__("decimal").Decimal("1")),
    ],
)
def test_values_json_would_confuse_are_not_memoised(good: Any, odd: Any) -> None:
    memo = engine(policy(validations=[{"expression": "object.spec.x == null"}]))
    plain = fresh(memo, 0)
    memo.evaluate(pod(x=good))
    assert memo.evaluate(pod(x=odd)) == plain.evaluate(pod(x=odd))


@pytest.mark.parametrize(
    "unread",
    [2**63, -(2**63) - 1, 2**64, {3, 4}, object()],
)
def test_a_pod_that_cannot_be_read_gets_its_errors_not_a_kept_decision(unread: Any) -> None:
    memo = engine(policy(validations=[{"expression": "object.spec.x == 1"}]))
    plain = fresh(memo, 0)
    assert memo.evaluate(pod(x=1)).allowed
    odd = pod(x=1)
    odd["metadata"]["unread"] = unread
    expected = plain.evaluate(odd)
    assert not expected.allowed
    assert memo.evaluate(odd) == expected


def test_deep_nesting_is_not_memoised() -> None:
    maker = KeyMaker({"object": (("spec",),)})
    nested: Any = "leaf"
    for _ in range(MAX_DEPTH):
        nested = [nested]
    assert maker.key({"spec": 1, "deep": nested}, None) is None
    assert maker.key({"spec": 1, "deep": nested[0][0]}, None) is not None
    tricky = {"spec": 1, "text": '"[[[\\"]]]\\\\', "deep": nested[0][0]}
    assert maker.key(tricky, None) is not None


def test_keys_tell_where_a_walk_stopped() -> None:
    maker = KeyMaker({"object": (("a", "b"),), "namespaceObject": (("c",),)})
    keys = {
        maker.key(obj, ns)
        for obj, ns in [
            ({}, None),
            ({"a": None}, None),
            ({"a": {}}, None),
            ({"a": []}, None),
            ({"a": [1]}, None),
            ({"a": "b"}, None),
            ({"a": {"b": None}}, None),
            ({"a": {"b": 1}}, None),
            ({"a": {"b": 1.0}}, None),
            ({"a": {"b": True}}, None),
            ({"a": {"b": "1"}}, None),
            ({"a": {"b": 1}}, {}),
            ({"a": {"b": 1}}, {"c": 1}),
            ({"a": {"b": 1}}, {"c": None}),
        ]
    }
    assert len(keys) == 14
    assert maker.key({"a": {"b": 1}, "z": 2}, {"d": 3}) == maker.key({"a": {"b": 1}}, {})


def test_the_memo_keeps_the_most_recent() -> None:
    memo = Memo(2)
    memo.put(b"a", 1)
    memo.put(b"b", 2)
    assert memo.get(b"a") == 1
    memo.put(b"c", 3)
    assert memo.get(b"b") is None
    assert (memo.get(b"a"), memo.get(b"c"), len(memo)) == (1, 3, 2)


def test_the_engine_memo_is_bounded(runs: list[str]) -> None:
    memo = engine(
        policy(validations=[{"expression": "true", "messageExpression": "object.spec.x"}]),
        memo_size=2,
    )
    for x in (1, 2, 3, 1):
        memo.evaluate(pod(x=x))
    assert len(runs) == 4  # 1 was evicted by 3
    memo.evaluate(pod(x=1))
    assert len(runs) == 4


def random_pod(rng: random.Random) -> dict[str, Any]:
    """A Pod whose read fields take a few values each, so that some Pods read the same."""
    annotations: dict[str, str] = {}
    for name, values in {
        "sunk.coreweave.com/priority": ["1", "x", "-1", "4294967294"],
        "sunk.coreweave.com/timeout": ["60", "0"],
        "sunk.coreweave.com/account": ["a", "", "b\x01"],
        "sunk.coreweave.com/exclusive": ["user", "true", "maybe"],
        "sunk.coreweave.com/gang-size": ["2", "x"],
        "sunk.coreweave.com/excluded-nodes": ["n1,n2", "bad node"],
        "other/unread": ["1", "2"],
    }.items():
        if rng.random() < 0.3:
            annotations[name] = rng.choice(values)
    containers = [
        container(
            f"c{index}",
            cpu=rng.choice(["1", "500m", None, "0", "x"]),
            memory=rng.choice(["1Gi", None]),
            limits=rng.choice([None, {"cpu": "1", "memory": "1Gi"}, {"nvidia.com/gpu": "4"}]),
        )
        for index in range(rng.choice([1, 1, 2]))
    ]
    result = pod(
        annotations=annotations,
        containers=containers,
        grace=rng.choice([None, 5, 25, 60]),
        namespace=rng.choice(["default", "team-a", "research"]),
    )
    result["metadata"]["name"] = f"pod-{rng.randrange(10**6)}"
    result["metadata"]["uid"] = str(rng.random())
    if rng.random() < 0.2:
        result["metadata"]["labels"] = {"sunk.coreweave.com/gang": "g"}
    if rng.random() < 0.2:
        result["status"] = {"qosClass": rng.choice(["Guaranteed", "Burstable"])}
    if rng.random() < 0.2:
        result["spec"]["priorityClassName"] = rng.choice(["batch", "other"])
    if rng.random() < 0.2:
        result["spec"]["initContainers"] = [container("init", restartPolicy="Always", cpu=None)]
    return result


NAMESPACES: list[dict[str, Any] | None] = [
    None,
    {"metadata": {"name": "ns", "labels": {}}},
    *(
        {"metadata": {"name": "ns", "labels": {"example.com/max-gpus-per-pod": cap}}}
        for cap in ("1", "8", "x")
    ),
]


def test_memoised_decisions_are_those_of_evaluating(
    with_examples: PolicyEngine, runs: list[str]
) -> None:
    """Pods from a few random templates, named apart: the memo answers many, always right."""
    rng = random.Random(20260527)
    templates = [random_pod(rng) for _ in range(60)]
    memo = fresh(with_examples)
    plain = fresh(with_examples, 0)
    count = 400
    for number in range(count):
        subject = renamed(rng.choice(templates), f"pod-{number}")
        namespace = copy.deepcopy(rng.choice(NAMESPACES))
        if namespace is not None:
            namespace["metadata"]["uid"] = str(number)
        expected = plain.evaluate(subject, namespace)
        assert memo.evaluate(subject, namespace) == expected, subject
    memoised = count * 2 * len(with_examples.policies) - len(runs)
    assert memoised > count * len(with_examples.policies) // 4  # about 180 Pods of 400


def test_the_default_policies_read_a_few_fields(defaults: PolicyEngine) -> None:
    assert dict(defaults.reads) == {
        "object": (
            ("metadata", "annotations"),
            ("metadata", "labels"),
            ("spec", "containers"),
            ("spec", "initContainers"),
            ("spec", "terminationGracePeriodSeconds"),
            ("status", "qosClass"),
        )
    }
