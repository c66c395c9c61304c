"""What the scheduler writes: method, path, headers and body of each call, and which refusals
are fine."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest

from sunk import kube
from sunk.apply.ports import KubeAPI
from tests.unit.kube.fakes import FakeServer, client, status

POD = {"metadata": {"name": "p", "namespace": "team-a", "uid": "uid-1",
                    "resourceVersion": "7"}}
MERGE = "application/merge-patch+json"


async def test_bind_posts_a_binding_carrying_the_pods_uid() -> None:
    server = FakeServer(httpx.Response(201, json={"kind": "Status", "status": "Success"}))
    api = client(server)
    await kube.bind(api, POD, "node-7")
    await api.aclose()
    sent = server.requests[0]
    assert (sent.method, sent.url.path) == ("POST",
                                            "/api/v1/namespaces/team-a/pods/p/binding")
    assert server.body(0) == {
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "p", "namespace": "team-a", "uid": "uid-1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-7"}}


async def test_a_binding_carries_annotations_for_the_pod() -> None:
    server = FakeServer(httpx.Response(201, json={"kind": "Status", "status": "Success"}))
    api = client(server)
    await kube.bind(api, POD, "node-7", {"sunk.coreweave.com/gang-rank": "2"})
    await api.aclose()
    assert server.body(0)["metadata"] == {
        "name": "p", "namespace": "team-a", "uid": "uid-1",
        "annotations": {"sunk.coreweave.com/gang-rank": "2"}}


async def test_a_refused_binding_raises() -> None:
    api = client(FakeServer(status(409, 'pod p is already assigned to node "x"')))
    with pytest.raises(kube.KubeError) as raised:
        await kube.bind(api, POD, "node-7")
    await api.aclose()
    assert raised.value.status == 409


async def test_annotate_merge_patches_the_annotations() -> None:
    server = FakeServer(httpx.Response(200, json={"metadata": {"name": "p"}}))
    api = client(server)
    written = await kube.annotate(api, "pods", "team-a", "p", {"a": "1", "gone": None})
    await api.aclose()
    assert written == {"metadata": {"name": "p"}}
    sent = server.requests[0]
    assert (sent.method, sent.url.path) == ("PATCH", "/api/v1/namespaces/team-a/pods/p")
    assert sent.headers["content-type"] == MERGE
    assert server.body(0) == {"metadata": {"annotations": {"a": "1", "gone": None}}}


async def test_annotate_a_cluster_scoped_object() -> None:
    server = FakeServer(httpx.Response(200, json={}))
    api = client(server)
    await kube.annotate(api, "nodes", None, "n", {"a": "1"})
    await api.aclose()
    assert server.requests[0].url.path == "/api/v1/nodes/n"


async def test_delete_pod_carries_a_uid_precondition_and_the_grace_period() -> None:
    server = FakeServer(httpx.Response(200, json={}), httpx.Response(200, json={}))
    api = client(server)
    await kube.delete_pod(api, POD, grace=0)
    await kube.delete_pod(api, POD)
    await api.aclose()
    sent = server.requests[0]
    assert (sent.method, sent.url.path) == ("DELETE", "/api/v1/namespaces/team-a/pods/p")
    assert server.body(0) == {"apiVersion": "v1", "kind": "DeleteOptions",
                              "preconditions": {"uid": "uid-1"}, "gracePeriodSeconds": 0}
    assert "gracePeriodSeconds" not in server.body(1)


@pytest.mark.parametrize("code", [404, 409])
async def test_delete_pod_of_a_pod_gone_or_replaced_is_fine(code: int) -> None:
    api = client(FakeServer(status(code, "gone or replaced")))
    await kube.delete_pod(api, POD)
    await api.aclose()


async def test_delete_pod_refused_otherwise_raises() -> None:
    api = client(FakeServer(status(403, "forbidden")))
    with pytest.raises(kube.KubeError) as raised:
        await kube.delete_pod(api, POD)
    await api.aclose()
    assert raised.value.status == 403


async def test_event_posts_a_core_v1_event_on_the_object() -> None:
    server = FakeServer(httpx.Response(201, json={}))
    api = client(server)
    await kube.event(api, POD, reason="Scheduled", message="x" * 2000, type_="Warning",
                     component="sunk-test")
    await api.aclose()
    sent = server.requests[0]
    assert (sent.method, sent.url.path) == ("POST", "/api/v1/namespaces/team-a/events")
    body = server.body(0)
    assert body["metadata"] == {"generateName": "p.", "namespace": "team-a"}
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "p",
                                      "namespace": "team-a", "uid": "uid-1"}
    assert (body["reason"], body["type"], body["count"]) == ("Scheduled", "Warning", 1)
    assert body["message"] == "x" * 1024
    assert body["source"] == {"component": "sunk-test"}
    assert body["reportingComponent"] == "sunk-test"
    assert body["firstTimestamp"] == body["lastTimestamp"]
    assert len(body["firstTimestamp"]) == 20 and body["firstTimestamp"].endswith("Z")


async def test_an_event_on_a_node_goes_to_the_default_namespace() -> None:
    server = FakeServer(httpx.Response(201, json={}))
    api = client(server)
    await kube.event(api, {"metadata": {"name": "n", "uid": "u"}}, kind="Node",
                     reason="Locked", message="m")
    await api.aclose()
    assert server.requests[0].url.path == "/api/v1/namespaces/default/events"
    assert server.body(0)["involvedObject"]["kind"] == "Node"


async def test_an_event_that_fails_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    api = client(FakeServer(status(403, "forbidden")))
    with caplog.at_level(logging.WARNING, logger="sunk.kube"):
        await kube.event(api, POD, reason="Scheduled", message="m")
    await api.aclose()
    assert "could not record Event Scheduled on team-a/p" in caplog.text


async def test_set_taints_is_a_compare_and_swap_on_the_resource_version() -> None:
    taints = [{"key": "sunk.coreweave.com/lock", "effect": "NoSchedule"}]
    server = FakeServer(httpx.Response(200, json={"metadata": {"resourceVersion": "8"}}))
    api = client(server)
    written = await kube.set_taints(api, "node-7", "7", taints)
    await api.aclose()
    assert written["metadata"]["resourceVersion"] == "8"
    sent = server.requests[0]
    assert (sent.method, sent.url.path) == ("PATCH", "/api/v1/nodes/node-7")
    assert sent.headers["content-type"] == MERGE
    assert server.body(0) == {"metadata": {"resourceVersion": "7"}, "spec": {"taints": taints}}


async def test_set_taints_on_a_node_changed_meanwhile_raises_409() -> None:
    api = client(FakeServer(status(409, "the object has been modified", "Conflict")))
    with pytest.raises(kube.KubeError) as raised:
        await kube.set_taints(api, "node-7", "7", [])
    await api.aclose()
    assert raised.value.status == 409


async def test_evict_posts_a_policy_v1_eviction() -> None:
    server = FakeServer(httpx.Response(201, json={"kind": "Status", "status": "Success"}))
    api = client(server)
    await kube.evict(api, "team-a", "p")
    await api.aclose()
    sent = server.requests[0]
    assert (sent.method, sent.url.path) == ("POST",
                                            "/api/v1/namespaces/team-a/pods/p/eviction")
    assert server.body(0) == {"apiVersion": "policy/v1", "kind": "Eviction",
                              "metadata": {"name": "p", "namespace": "team-a"}}


async def test_evicting_a_pod_already_gone_is_fine() -> None:
    api = client(FakeServer(status(404, 'pods "p" not found')))
    await kube.evict(api, "team-a", "p")
    await api.aclose()


async def test_an_eviction_a_disruption_budget_forbids_raises_429() -> None:
    api = client(FakeServer(status(429, "Cannot evict pod as it would violate the pod's "
                                        "disruption budget.", "TooManyRequests")))
    with pytest.raises(kube.KubeError, match="disruption budget") as raised:
        await kube.evict(api, "team-a", "p")
    await api.aclose()
    assert raised.value.status == 429


async def test_events_beyond_the_bound_wait_their_turn_in_order() -> None:
    in_flight, most, order = 0, 0, []
    release = asyncio.Event()

    async def answer(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        order.append(json.loads(request.content)["reason"])
        await release.wait()
        in_flight -= 1
        return httpx.Response(201, json={})

    server = FakeServer(*[answer] * 6)
    api = client(server)
    port = KubeAPI(api, "sunk", events_in_flight=2)
    sent = [asyncio.create_task(port.event(POD, kind="Pod", reason=f"R{i}", message="m",
                                           warning=False)) for i in range(6)]
    await server.wait_for(2)
    await asyncio.sleep(0.05)
    assert len(server.requests) == 2, "the others wait for a slot"
    release.set()
    await asyncio.gather(*sent)
    await api.aclose()
    assert most == 2 and order == [f"R{i}" for i in range(6)]


async def test_events_beyond_the_waiting_room_are_dropped_and_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    release, order = asyncio.Event(), []

    async def answer(request: httpx.Request) -> httpx.Response:
        order.append(json.loads(request.content)["reason"])
        await release.wait()
        return httpx.Response(201, json={})

    server = FakeServer(*[answer] * 3)
    api = client(server)
    port = KubeAPI(api, "sunk", events_in_flight=1, events_waiting_max=2)
    sent = [asyncio.create_task(port.event(POD, kind="Pod", reason=f"R{i}", message="m",
                                           warning=False)) for i in range(5)]
    await server.wait_for(1)
    await asyncio.sleep(0.05)
    assert port.events_dropped == 2, "one in flight, two waiting, the rest dropped"
    assert "2 Events dropped so far (R4 on team-a/p the newest)" in caplog.text
    release.set()
    await asyncio.gather(*sent)
    await api.aclose()
    assert order == ["R0", "R1", "R2"]
