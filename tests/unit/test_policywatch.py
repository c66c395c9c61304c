"""Policies from a ConfigMap read through the API: start-up, edits, deletion."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sunk import kube
from sunk.loops import policywatch
from sunk.plans import podplan, waiting
from sunk.policy import PolicyLoadError, PolicyStore
from tests.unit.policy.pods import pod


def gate(reason: str) -> str:
    """A policy document that denies every Pod with ``reason``."""
    return json.dumps({
        "apiVersion": "sunk.coreweave.com/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "gate"},
        "spec": {"validations": [{"expression": "false", "reason": reason}]},
    })


@pytest.mark.parametrize(("ref", "expected"), [
    ("policies", ("home", "policies")),
    ("ops/policies", ("ops", "policies")),
    (" ops/policies ", ("ops", "policies")),
])
def test_a_reference_names_the_configmap_and_its_namespace(ref: str,
                                                            expected: tuple[str, str]) -> None:
    assert policywatch.configmap_ref(ref, "home") == expected


@pytest.mark.parametrize("ref", ["", "ops/", "/policies", "a/b/c"])
def test_a_malformed_reference_is_refused(ref: str) -> None:
    with pytest.raises(ValueError, match="not a ConfigMap reference"):
        policywatch.configmap_ref(ref, "home")


#: The API client is never used directly here: kube.request is replaced.
API: Any = object()


class FakeApi:
    """Answers kube.request for one ConfigMap: a body, or a KubeError status."""

    def __init__(self, *answers: dict[str, Any] | int) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str, str | None]] = []

    async def request(self, api: object, method: str, url: str, *,
                      namespace: str | None = None, **_: Any) -> dict[str, Any]:
        self.calls.append((method, url, namespace))
        answer = self.answers.pop(0)
        if isinstance(answer, int):
            raise kube.KubeError(f"{method} {url}: status {answer}", status=answer)
        return answer


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api = FakeApi()
    monkeypatch.setattr(kube, "request", api.request)
    return api


async def test_start_up_reads_the_configmap_once(fake: FakeApi) -> None:
    fake.answers = [{"data": {"gate.yaml": gate("FromConfigMap"), "README": "not a policy"}}]
    store = await policywatch.load(API, "ops", "policies", {"killWaitSeconds": 30})
    assert store.evaluate(pod()).reason == "FromConfigMap"
    assert fake.calls == [("GET", "configmaps/policies", "ops")]


@pytest.mark.parametrize(("status", "problem"), [(404, "does not exist"),
                                                 (403, "may not be read")])
async def test_a_missing_or_forbidden_configmap_stops_start_up(fake: FakeApi, status: int,
                                                               problem: str) -> None:
    fake.answers = [status]
    with pytest.raises(PolicyLoadError, match=problem):
        await policywatch.load(API, "ops", "policies")
    assert len(fake.calls) == 1


async def test_a_configmap_that_does_not_load_starts_with_no_set_the_watch_then_fills(
        fake: FakeApi) -> None:
    fake.answers = [{"data": {"gate.yaml": "spec: ["}}]
    store = await policywatch.load(API, "ops", "policies", {"killWaitSeconds": 30})
    why = store.not_in_force()
    assert why is not None and "gate.yaml" in why and store.status().generation == 0
    watch = policywatch.ConfigMapPolicies(API, "ops", "policies", store)
    watch.on_event("MODIFIED", {"data": {"gate.yaml": gate("Fixed")}})
    assert store.not_in_force() is None and store.evaluate(pod()).reason == "Fixed"


def test_a_pod_waits_for_a_policy_set_saying_why_and_is_never_refused_for_it() -> None:
    later = podplan.await_policies("no policy set is in force (gate.yaml: bad)")
    assert later.after == podplan.POLICIES_AWAITED_EVERY and later.show is not None
    assert (later.show.reason, later.show.message) == (
        waiting.SCHEDULER_ERROR, "no policy set is in force (gate.yaml: bad)")


async def test_an_unreachable_api_server_is_retried_then_reported(fake: FakeApi) -> None:
    fake.answers = [0, 503, {"data": {"gate.yaml": gate("Late")}}]
    store = await policywatch.load(API, "ops", "policies", delay=0.001)
    assert store.evaluate(pod()).reason == "Late"
    fake.answers = [0, 0, 0]
    with pytest.raises(PolicyLoadError, match="could not be read"):
        await policywatch.load(API, "ops", "policies", attempts=3, delay=0.001)


def test_each_change_of_the_configmap_reloads_and_a_deletion_keeps_the_set() -> None:
    store = PolicyStore.from_configmap({"gate.yaml": gate("First")})
    watcher = policywatch.ConfigMapPolicies(API, "ops", "policies", store)
    assert watcher.informer.params == {"fieldSelector": "metadata.name=policies"}
    assert watcher.informer.namespace == "ops"
    cm: dict[str, Any] = {"metadata": {"name": "policies", "namespace": "ops"}}
    watcher.on_event("ADDED", {**cm, "data": {"gate.yaml": gate("First")}})
    assert store.status().generation == 1  # the same set: not loaded again
    watcher.on_event("MODIFIED", {**cm, "data": {"gate.yaml": gate("Second")}})
    assert store.evaluate(pod()).reason == "Second"
    watcher.on_event("MODIFIED", {**cm, "data": {"gate.yaml": "spec: [unclosed"}})
    assert store.evaluate(pod()).reason == "Second"
    assert store.status().error is not None
    watcher.on_event("DELETED", cm)
    assert store.evaluate(pod()).reason == "Second"
