"""The hook API served for real in a test (aiohttp's test server, on loopback), and two ways to
call it, each answer read whole: aiohttp's test client, or raw bytes on a socket (any header
byte, any path, as a caller that is no well-behaved client may send them)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from multidict import CIMultiDict, CIMultiDictProxy


@dataclass(frozen=True)
class Answer:
    status_code: int
    text: str
    headers: CIMultiDictProxy[str]

    def json(self) -> Any:
        return json.loads(self.text)


class HookClient:
    """aiohttp's test client for the hook API, answers read whole."""

    def __init__(self, client: TestClient[web.Request, web.Application]) -> None:
        self._client = client

    async def request(self, method: str, path: str, *, json: Any = None,
                      content: bytes | None = None,
                      headers: Mapping[str, str] | None = None) -> Answer:
        async with self._client.request(method, path, json=json, data=content,
                                        headers=headers) as r:
            return Answer(r.status, await r.text(), r.headers)

    async def get(self, path: str, *, headers: Mapping[str, str] | None = None) -> Answer:
        return await self.request("GET", path, headers=headers)

    async def post(self, path: str, *, json: Any = None, content: bytes | None = None,
                   headers: Mapping[str, str] | None = None) -> Answer:
        return await self.request("POST", path, json=json, content=content, headers=headers)


@contextlib.asynccontextmanager
async def hook_client(app: web.Application) -> AsyncIterator[HookClient]:
    async with TestClient(TestServer(app)) as client:
        yield HookClient(client)


def port_of(client: HookClient) -> int:
    """The port the app is served on, for :func:`send_raw`."""
    port = client._client.port
    assert port is not None
    return port


@contextlib.asynccontextmanager
async def hook_server(app: web.Application) -> AsyncIterator[int]:
    """The port the app is served on."""
    async with TestServer(app) as server:
        assert server.port is not None
        yield server.port


async def send_raw(port: int, method: str, target: str, headers: list[tuple[bytes, bytes]],
                   body: bytes | None = None) -> Answer:
    """One request as bytes (``target`` is sent as it is), on its own connection."""
    lines = [f"{method} {target} HTTP/1.1".encode(), b"Host: 127.0.0.1", b"Connection: close"]
    lines += [name + b": " + value for name, value in headers]
    if body is not None:
        lines.append(b"Content-Length: " + str(len(body)).encode())
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"\r\n".join(lines) + b"\r\n\r\n" + (body or b""))
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, content = answer.partition(b"\r\n\r\n")
    status, *fields = head.decode("latin-1").split("\r\n")
    received: CIMultiDict[str] = CIMultiDict()
    for field in fields:
        name, _, value = field.partition(":")
        received.add(name.strip(), value.strip())
    assert "chunked" not in received.get("Transfer-Encoding", ""), head
    return Answer(int(status.split(" ", 2)[1]), content.decode("utf-8", "replace"),
                  CIMultiDictProxy(received))
