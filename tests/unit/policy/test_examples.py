"""The three operator examples of docs/policies.md, from policies/examples/."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sunk.policy import PolicyEngine, load_sources

from .pods import REPOSITORY, container, pod


def gpu_pod(namespace: str, *gpus: int) -> dict[str, Any]:
    containers = [
        container(f"c{i}", limits={"nvidia.com/gpu": str(count)}) for i, count in enumerate(gpus)
    ]
    return pod(namespace=namespace, containers=[*containers, container("cpu-only")])


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


# --- GPUs per Pod, per namespace ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "gpus", "cap"),
    [("research", (4, 4), 8), ("inference", (2,), 2), ("elsewhere", (2, 1, 1), 4)],
)
def test_pods_within_their_namespaces_gpu_cap_pass(
    with_examples: PolicyEngine, name: str, gpus: tuple[int, ...], cap: int
) -> None:
    assert sum(gpus) == cap
    decision = with_examples.evaluate(gpu_pod(name, *gpus), namespace(name))
    assert decision.allowed, decision


@pytest.mark.parametrize(
    ("name", "gpus", "cap"),
    [("research", (8, 1), 8), ("inference", (3,), 2), ("elsewhere", (4, 1), 4)],
)
def test_pods_over_the_cap_are_refused(
    with_examples: PolicyEngine, name: str, gpus: tuple[int, ...], cap: int
) -> None:
    decision = with_examples.evaluate(gpu_pod(name, *gpus), namespace(name))
    assert decision.reason == "TooManyGPUs"
    assert decision.denials[0].message == (
        f"namespace {name} allows at most {cap} GPUs per Pod, this Pod asks for {sum(gpus)}"
    )


def test_a_namespace_label_sets_its_own_cap(with_examples: PolicyEngine) -> None:
    labelled = namespace("research", **{"example.com/max-gpus-per-pod": "1"})
    assert with_examples.evaluate(gpu_pod("research", 1), labelled).allowed
    refused = with_examples.evaluate(gpu_pod("research", 2), labelled)
    assert refused.denials[0].message.startswith("namespace research allows at most 1 GPUs")


def test_without_the_namespace_object_the_table_applies(with_examples: PolicyEngine) -> None:
    assert with_examples.evaluate(gpu_pod("inference", 2)).allowed
    assert with_examples.evaluate(gpu_pod("inference", 3)).reason == "TooManyGPUs"


# --- an account per namespace ---------------------------------------------------------------


def test_a_namespaces_account_is_forced(with_examples: PolicyEngine) -> None:
    decision = with_examples.evaluate(pod(namespace="team-a"))
    assert decision.allowed
    assert decision.mappings["account"] == "research-a"
    assert decision.mapped_by["account"] == "account-per-namespace"


def test_the_same_account_may_be_asked_for(with_examples: PolicyEngine) -> None:
    decision = with_examples.evaluate(
        pod(namespace="team-b", annotations={"account": "research-b"})
    )
    assert decision.allowed and decision.mappings["account"] == "research-b"


def test_another_account_is_refused(with_examples: PolicyEngine) -> None:
    decision = with_examples.evaluate(pod(namespace="team-a", annotations={"account": "other"}))
    assert decision.reason == "AccountNotAllowed"
    assert decision.denials[0].message == (
        'Pods in namespace team-a run under Slurm account research-a, not "other": '
        "set sunk.coreweave.com/account to research-a or leave it out"
    )


def test_other_namespaces_choose_their_account(with_examples: PolicyEngine) -> None:
    decision = with_examples.evaluate(pod(namespace="team-c", annotations={"account": "mine"}))
    assert decision.allowed and decision.mappings["account"] == "mine"
    assert decision.mapped_by["account"] == "sunk-annotations"


# --- a QOS from the PriorityClass -----------------------------------------------------------


@pytest.mark.parametrize(
    ("priority_class", "qos"),
    [("system-cluster-critical", "high"), ("production", "normal"), ("batch", "low")],
)
def test_the_priority_class_gives_the_qos(
    with_examples: PolicyEngine, priority_class: str, qos: str
) -> None:
    decision = with_examples.evaluate(pod(priorityClassName=priority_class))
    assert decision.allowed
    assert decision.mappings["qos"] == qos
    assert decision.mapped_by["qos"] == "qos-from-priority-class"


def test_an_unmapped_or_missing_priority_class_sets_no_qos(with_examples: PolicyEngine) -> None:
    assert "qos" not in with_examples.evaluate(pod(priorityClassName="other")).mappings
    assert "qos" not in with_examples.evaluate(pod()).mappings


def test_a_qos_annotation_wins_over_the_priority_class(with_examples: PolicyEngine) -> None:
    decision = with_examples.evaluate(pod(priorityClassName="batch", annotations={"qos": "gold"}))
    assert decision.mappings["qos"] == "gold"
    assert decision.mapped_by["qos"] == "sunk-annotations"


# --- the example of docs/policies.md ----------------------------------------------------------


def test_the_documented_policy_loads_and_works() -> None:
    text = (REPOSITORY / "docs" / "policies.md").read_text(encoding="utf-8")
    match = re.search(r"```yaml\n(apiVersion:.*?)```", text, re.DOTALL)
    assert match, "docs/policies.md shows a whole policy document"
    engine = load_sources({"documented.yaml": match.group(1)})
    eight = engine.evaluate(pod(containers=[container(limits={"nvidia.com/gpu": "8"})]))
    assert eight.reason == "TooManyGPUs"
    assert eight.denials[0].message == "at most 4 GPUs, got 8"
    two = engine.evaluate(pod(containers=[container(limits={"nvidia.com/gpu": "2"})]))
    assert two.allowed and two.mappings == {"comment": "GPUs: 2"}
    assert engine.evaluate(pod()).allowed, "the match condition skips Pods without GPUs"
