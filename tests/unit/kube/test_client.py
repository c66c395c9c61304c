"""The API client: paths, credentials, errors and streams, against an HTTP-level stand-in."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import httpx
import pytest
from aiohttp import web

from sunk import kube
from tests.unit.kube.fakes import (
    SERVER,
    FakeCredentials,
    FakeServer,
    Stream,
    client,
    events,
    obj,
    status,
)


@pytest.mark.parametrize(("url", "namespace", "version", "path"), [
    ("nodes", None, "v1", "/api/v1/nodes"),
    ("pods/p/binding", "team-a", "v1", "/api/v1/namespaces/team-a/pods/p/binding"),
    ("leases/sunk", "ops", "coordination.k8s.io/v1",
     "/apis/coordination.k8s.io/v1/namespaces/ops/leases/sunk"),
    ("validatingadmissionpolicies", None, "admissionregistration.k8s.io/v1",
     "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"),
    ("/version", "ignored", "v1", "/version"),
])
def test_paths_follow_the_api_servers_layout(url: str, namespace: str | None, version: str,
                                             path: str) -> None:
    assert kube.api_path(url, namespace=namespace, version=version) == path


def test_a_version_without_a_group_other_than_v1_is_refused() -> None:
    with pytest.raises(ValueError, match="not an API version"):
        kube.api_path("pods", version="v2")


async def test_a_request_carries_path_params_token_and_json_body() -> None:
    server = FakeServer(httpx.Response(201, json={"kind": "Lease", "spec": {"x": 1}}))
    api = client(server)
    answer = await kube.request(api, "POST", "leases", namespace="ops",
                                version="coordination.k8s.io/v1",
                                params={"fieldValidation": "Strict"}, json={"spec": {"x": 1}})
    await api.aclose()
    assert answer == {"kind": "Lease", "spec": {"x": 1}}
    sent = server.requests[0]
    assert sent.method == "POST"
    assert str(sent.url) == (f"{SERVER}/apis/coordination.k8s.io/v1/namespaces/ops/leases"
                             "?fieldValidation=Strict")
    assert sent.headers["authorization"] == "Bearer first-token"
    assert sent.headers["content-type"] == "application/json"
    assert server.body(0) == {"spec": {"x": 1}}


async def test_a_callers_content_type_replaces_the_default_one() -> None:
    server = FakeServer(httpx.Response(200, json={}))
    api = client(server)
    await api.request("PATCH", "nodes/n", json={"spec": {}},
                      headers={"content-type": "application/merge-patch+json"})
    await api.aclose()
    assert server.requests[0].headers.get_list("content-type") == [
        "application/merge-patch+json"]


async def test_no_token_no_authorization_header_and_an_empty_answer_is_an_empty_object() -> None:
    server = FakeServer(httpx.Response(200))
    credentials = FakeCredentials()
    credentials.token = None  # client certificates only
    api = client(server, credentials)
    assert await api.request("DELETE", "pods/p", namespace="ns") == {}
    await api.aclose()
    assert "authorization" not in server.requests[0].headers


async def test_the_tls_server_name_is_sent_as_sni() -> None:
    server = FakeServer(httpx.Response(200, json={}))
    credentials = FakeCredentials()
    credentials.tls_server_name = "kubernetes.default"
    api = client(server, credentials)
    await api.request("GET", "nodes")
    await api.aclose()
    assert server.requests[0].extensions["sni_hostname"] == "kubernetes.default"


@pytest.mark.parametrize(("answer", "code", "message"), [
    (status(404, 'pods "p" not found', "NotFound"), 404, 'pods "p" not found'),
    (status(409, "the object has been modified", "Conflict"), 409, "has been modified"),
    (httpx.Response(503, text="upstream connect error"), 503, "upstream connect error"),
    (httpx.Response(500), 500, "Internal Server Error"),
])
async def test_an_error_answer_is_a_kube_error_with_its_status_and_message(
        answer: httpx.Response, code: int, message: str) -> None:
    api = client(FakeServer(answer))
    with pytest.raises(kube.KubeError) as raised:
        await api.request("GET", "pods/p", namespace="ns")
    await api.aclose()
    assert raised.value.status == code
    assert message in str(raised.value)
    assert "GET /api/v1/namespaces/ns/pods/p" in str(raised.value)


async def test_a_write_reads_only_an_error_answer() -> None:
    server = FakeServer(httpx.Response(201, text="not read"),
                        status(409, "the object has been modified", "Conflict"))
    api = client(server)
    await api.write("POST", "events", namespace="ns", json={"reason": "R"})  # not read
    assert server.body(0) == {"reason": "R"}
    with pytest.raises(kube.KubeError, match="has been modified") as raised:
        await api.write("POST", "pods/p/binding", namespace="ns", json={})
    await api.aclose()
    assert raised.value.status == 409


async def test_an_answer_that_is_not_json_is_a_kube_error() -> None:
    api = client(FakeServer(httpx.Response(200, text="<html>proxy login</html>")))
    with pytest.raises(kube.KubeError, match="not JSON") as raised:
        await api.request("GET", "nodes")
    await api.aclose()
    assert raised.value.status == 200


@pytest.mark.parametrize(("error", "seen_as"), [
    (httpx.ConnectError("connection refused"), ConnectionError),  # as the test transport
    (httpx.ReadTimeout("timed out"), TimeoutError),                # raises them
    (ConnectionResetError("reset by peer"), ConnectionResetError),
    (aiohttp.ServerDisconnectedError(), aiohttp.ServerDisconnectedError),
    (TimeoutError(), TimeoutError),
])
async def test_an_unreachable_server_is_a_kube_error_with_status_0(
        error: Exception, seen_as: type[Exception]) -> None:
    async def fail(request: httpx.Request) -> httpx.Response:
        raise error

    api = client(FakeServer(fail))
    with pytest.raises(kube.KubeError) as raised:
        await api.request("GET", "nodes")
    await api.aclose()
    assert raised.value.status == 0
    assert isinstance(raised.value.__cause__, seen_as)


async def test_a_401_reads_the_credentials_again_and_retries_once() -> None:
    server = FakeServer(status(401, "Unauthorized"), httpx.Response(200, json={"ok": True}))
    credentials = FakeCredentials(tokens=["expired", "rotated"])
    api = client(server, credentials)
    assert await api.request("GET", "nodes") == {"ok": True}
    await api.aclose()
    assert credentials.reauthentications == 1
    assert [r.headers["authorization"] for r in server.requests] == [
        "Bearer expired", "Bearer rotated"]


async def test_a_second_401_is_a_kube_error_not_a_loop() -> None:
    server = FakeServer(status(401, "Unauthorized"), status(401, "Unauthorized"))
    credentials = FakeCredentials(tokens=["bad", "still-bad"])
    api = client(server, credentials)
    with pytest.raises(kube.KubeError) as raised:
        await api.request("GET", "nodes")
    await api.aclose()
    assert raised.value.status == 401
    assert credentials.reauthentications == 1
    assert len(server.requests) == 2


async def test_a_403_is_not_retried() -> None:
    server = FakeServer(status(403, "forbidden"))
    credentials = FakeCredentials()
    api = client(server, credentials)
    with pytest.raises(kube.KubeError) as raised:
        await api.request("GET", "secrets", namespace="ns")
    await api.aclose()
    assert raised.value.status == 403
    assert credentials.reauthentications == 0


async def test_concurrent_401s_read_the_credentials_again_only_once() -> None:
    async def refuse_unless_rotated(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.01)  # all three are in flight before the first answer
        if request.headers["authorization"] == "Bearer rotated":
            return httpx.Response(200, json={})
        return status(401, "Unauthorized")

    server = FakeServer(*[refuse_unless_rotated] * 6)
    credentials = FakeCredentials(tokens=["expired", "rotated", "another"])
    api = client(server, credentials)
    await asyncio.gather(*(api.request("GET", "nodes") for _ in range(3)))
    await api.aclose()
    assert credentials.reauthentications == 1


async def test_a_watch_is_streamed_line_by_line_without_a_read_timeout() -> None:
    body = events(("ADDED", obj("a", "5")), ("MODIFIED", obj("a", "6")))
    server = FakeServer(httpx.Response(200, stream=Stream(body[:7], body[7:])))
    api = client(server)
    async with api.watch_lines("pods", namespace="ns", params={"watch": "true"}) as lines:
        got = [json.loads(line)["type"] async for line in lines]
    await api.aclose()
    assert got == ["ADDED", "MODIFIED"]
    sent = server.requests[0]
    assert sent.url.path == "/api/v1/namespaces/ns/pods"
    assert sent.url.params["watch"] == "true"
    assert sent.extensions["timeout"]["read"] is None


async def test_a_refused_watch_is_a_kube_error_with_its_status() -> None:
    api = client(FakeServer(status(410, "too old resource version", "Expired")))
    with pytest.raises(kube.KubeError, match="too old resource version") as raised:
        async with api.watch_lines("pods"):
            pass
    await api.aclose()
    assert raised.value.status == 410


async def test_a_watch_refused_with_401_reads_the_credentials_again() -> None:
    body = events(("ADDED", obj("a", "5")))
    server = FakeServer(status(401, "Unauthorized"),
                        httpx.Response(200, stream=Stream(body)))
    credentials = FakeCredentials(tokens=["expired", "rotated"])
    api = client(server, credentials)
    async with api.watch_lines("pods") as lines:
        got = [line async for line in lines]
    await api.aclose()
    assert len(got) == 1
    assert credentials.reauthentications == 1
    assert server.requests[1].headers["authorization"] == "Bearer rotated"


async def test_a_broken_watch_stream_is_a_kube_error_with_status_0() -> None:
    body = events(("ADDED", obj("a", "5")))
    stream = Stream(body, error=httpx.ReadError("connection reset"))
    api = client(FakeServer(httpx.Response(200, stream=stream)))
    got: list[str] = []
    with pytest.raises(kube.KubeError, match="stream broke") as raised:
        async with api.watch_lines("pods") as lines:
            async for line in lines:
                got.append(line)
    await api.aclose()
    assert raised.value.status == 0
    assert len(got) == 1


# -- over aiohttp's connections, with credentials read by kr8s --------------------------------


@pytest.fixture
async def apiserver(unused_tcp_port: int) -> AsyncIterator[str]:
    """A tiny real HTTP server: /version, a list of nodes, and a watch of two events."""
    async def version(request: web.Request) -> web.Response:
        return web.json_response({"gitVersion": "v1.35.4",
                                  "auth": request.headers.get("Authorization")})

    async def nodes(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.json_response({"metadata": {"resourceVersion": "1"}, "items": []})
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(events(("ADDED", obj("n1", "2", namespace=None))))
        await response.write(events(("ADDED", obj("n2", "3", namespace=None))))
        return response

    app = web.Application()
    app.router.add_get("/version", version)
    app.router.add_get("/api/v1/nodes", nodes)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    yield f"http://127.0.0.1:{unused_tcp_port}"
    await runner.cleanup()


def kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "from-kubeconfig"}}],
        "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u"}}]}))
    return path


async def test_kr8s_reads_the_kubeconfig_into_credentials(tmp_path: Path) -> None:
    credentials = await kube.load_credentials(kubeconfig(tmp_path, "https://10.0.0.1:6443"))
    assert (credentials.server, credentials.token) == ("https://10.0.0.1:6443",
                                                       "from-kubeconfig")


async def test_connect_calls_and_watches_over_aiohttp(apiserver: str, tmp_path: Path) -> None:
    api = await kube.connect(kubeconfig(tmp_path, apiserver))
    try:
        version = await api.request("GET", "/version")
        assert version == {"gitVersion": "v1.35.4", "auth": "Bearer from-kubeconfig"}
        async with api.watch_lines("nodes", params={"watch": "true"}) as lines:
            names = [json.loads(line)["object"]["metadata"]["name"] async for line in lines]
        assert names == ["n1", "n2"]
    finally:
        await kube.close(api)


async def test_connect_to_a_server_that_is_not_up_is_a_kube_error_with_status_0(
        tmp_path: Path, unused_tcp_port: int) -> None:
    with pytest.raises(kube.KubeError) as raised:
        await kube.connect(kubeconfig(tmp_path, f"http://127.0.0.1:{unused_tcp_port}"))
    assert raised.value.status == 0
