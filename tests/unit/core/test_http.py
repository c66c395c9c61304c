"""The HTTP plumbing both clients share: requests built without an httpx client, answers read
whole, proxies from the environment as httpx's client took them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from sunk import http
from sunk.kube.client import Client
from sunk.slurm.client import SlurmClient
from tests import mock_http
from tests.mock_http import MockHttp
from tests.unit.kube.fakes import FakeCredentials


def test_the_environment_names_the_proxy_unless_no_proxy_covers_the_host(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                 "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert http.env_proxy("https://api.test:6443") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.test:3128")
    assert http.env_proxy("https://api.test:6443") == "http://proxy.test:3128"
    assert http.env_proxy("http://slurmrestd.test:6820") is None  # only https is proxied
    monkeypatch.setenv("NO_PROXY", "api.test")
    assert http.env_proxy("https://api.test:6443") is None
    assert http.env_proxy("https://other.test") == "http://proxy.test:3128"


def test_a_request_carries_its_timeout_and_tls_name() -> None:
    request = mock_http.request("GET", http.with_query("https://api.test/x", {"q": "1 2"}),
                           timeout=http.Timeout(read=7, connect=2), headers={"A": "b"},
                           sni_hostname="kube.local")
    assert request.extensions["timeout"] == {"connect": 2, "read": 7, "write": 7, "pool": 7}
    assert request.extensions["sni_hostname"] == "kube.local"
    assert str(request.url) == "https://api.test/x?q=1+2"
    assert "sni_hostname" not in mock_http.request("GET", "https://api.test/x",
                                              timeout=http.Timeout(read=1, connect=1),
                                              headers={}).extensions


async def test_the_answer_is_read_whole_and_knows_its_call() -> None:
    async def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, content=b'{"a": 1}')

    got = await MockHttp(answer).call(
        "GET", "https://api.test/x/y?z=1", headers={}, body=None,
        timeouts=http.Timeout(read=1, connect=1))
    assert (got.method, got.path, got.status, got.reason) == ("GET", "/x/y", 404, "Not Found")
    assert got.body == b'{"a": 1}' and got.is_error and got.text == '{"a": 1}'


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


@pytest.mark.parametrize("parts", [
    (b'{"a":1}\n{"b":', b'2}\n', b'{"c":3}'),
    (b'{"a":1}\r\n', b'{"b":2}\n{"c"', b':3}\n'),
    (b'{"a', b'":1}\n{"b":2}\n{"c":3}\n', b''),
])
async def test_lines_are_whole_however_the_chunks_cut_them(parts: tuple[bytes, ...]) -> None:
    lines = [line async for line in http.split_lines(_chunks(*parts))]
    assert lines == ['{"a":1}', '{"b":2}', '{"c":3}']


async def test_a_line_longer_than_aiohttps_own_limit_is_read_whole() -> None:
    big = b"x" * 300_000
    lines = [line async for line in http.split_lines(_chunks(big[:65536], big[65536:] + b"\n"))]
    assert lines == [big.decode()]


async def test_the_api_server_path_follows_the_servers_own_path() -> None:
    seen: list[httpx.Request] = []

    async def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"kind": "Pod"})

    credentials = FakeCredentials(server="https://rancher.test/k8s/clusters/c-1/",
                                  tls_server_name="kube.local")
    client = Client(credentials, transport=MockHttp(answer))
    await client.request("PATCH", "pods/p", namespace="ns", json={"a": 1},
                         headers={"Content-Type": "application/merge-patch+json"})
    sent = seen[0]
    assert str(sent.url) == "https://rancher.test/k8s/clusters/c-1/api/v1/namespaces/ns/pods/p"
    assert sent.headers["content-type"] == "application/merge-patch+json"
    assert sent.headers["authorization"] == "Bearer first-token"
    assert sent.headers["accept"] == "application/json"
    assert sent.extensions["sni_hostname"] == "kube.local"
    assert sent.content == b'{"a":1}'


async def test_slurmrestd_calls_go_under_the_versioned_prefix_with_the_token() -> None:
    seen: list[httpx.Request] = []

    async def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"job_id": 42})

    slurm = SlurmClient("http://slurm.test:6820/", token=lambda: "jwt",
                        transport=MockHttp(answer))
    assert await slurm.submit({"name": "x"}) == 42
    assert str(seen[0].url) == "http://slurm.test:6820/slurm/v0.0.42/job/submit"
    assert seen[0].headers["x-slurm-user-token"] == "jwt"
    assert seen[0].headers["content-type"] == "application/json"
    assert seen[0].content == b'{"job":{"name":"x"}}'
