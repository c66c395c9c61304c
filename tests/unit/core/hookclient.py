"""The hook API served for real in a test (:mod:`sunk.http.server`, on loopback), and two ways
to call it, each answer read whole: aiohttp's client, or raw bytes on a socket (any header
byte, any path, as a caller that is no well-behaved client may send them)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import yarl
from multidict import CIMultiDict, CIMultiDictProxy

from sunk.hooks.routes import MAX_BODY
from sunk.http import server as httpserver


@dataclass(frozen=True)
class Answer:
    status_code: int
    text: str
    headers: CIMultiDictProxy[str]

    def json(self) -> Any:
        return json.loads(self.text)


class HookClient:
    """aiohttp's client for the hook API, answers read whole."""

    def __init__(self, session: aiohttp.ClientSession, port: int) -> None:
        self._session = session
        self.port = port

    async def request(self, method: str, path: str, *, json: Any = None,
                      content: bytes | None = None,
                      headers: Mapping[str, str] | None = None) -> Answer:
        url = yarl.URL(f"http://127.0.0.1:{self.port}{path}", encoded=True)
        async with self._session.request(method, url, json=json, data=content,
                                         headers=headers) as r:
            return Answer(r.status, await r.text(), r.headers)

    async def get(self, path: str, *, headers: Mapping[str, str] | None = None) -> Answer:
        return await self.request("GET", path, headers=headers)

    async def post(self, path: str, *, json: Any = None, content: bytes | None = None,
                   headers: Mapping[str, str] | None = None) -> Answer:
        return await self.request("POST", path, json=json, content=content, headers=headers)


@contextlib.asynccontextmanager
async def hook_client(app: httpserver.Handler) -> AsyncIterator[HookClient]:
    async with hook_server(app) as port, aiohttp.ClientSession() as session:
        yield HookClient(session, port)


def port_of(client: HookClient) -> int:
    """The port the app is served on, for :func:`send_raw`."""
    return client.port


@contextlib.asynccontextmanager
async def hook_server(app: httpserver.Handler) -> AsyncIterator[int]:
    """The port the app is served on (as the scheduler serves it, bodies up to MAX_BODY)."""
    listening: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(httpserver.serve(
        app, "127.0.0.1", 0, max_body=MAX_BODY, started=listening.set_result))
    try:
        either: set[asyncio.Future[Any]] = {server, listening}
        done, _ = await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if server in done:
            server.result()  # it failed to listen: say why
        yield listening.result()
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server


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
