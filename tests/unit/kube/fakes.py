"""An API server stand-in at the HTTP level (``httpx.MockTransport``) and fixed credentials."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from sunk import kube
from tests.mock_http import MockHttp

SERVER = "https://api.test:6443"

Answer = httpx.Response | Callable[[httpx.Request], Awaitable[httpx.Response]]


@dataclass
class FakeCredentials:
    """What kr8s's KubeAuth offers; ``tokens`` are handed out one per (re)authentication."""

    tokens: list[str] = field(default_factory=lambda: ["first-token"])
    server: str = SERVER
    tls_server_name: str | None = None
    token: str | None = None
    reauthentications: int = 0

    def __post_init__(self) -> None:
        self.token = self.tokens[0]

    @property
    def proxy(self) -> str | None:
        return None

    async def ssl_context(self) -> ssl.SSLContext | bool:
        return True

    async def reauthenticate(self) -> None:
        self.reauthentications += 1
        self.token = self.tokens[min(self.reauthentications, len(self.tokens) - 1)]


class FakeServer:
    """Answers requests in order from ``answers`` (a response, or a coroutine function making
    one) and records each request with its body read."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []
        self.arrived = asyncio.Event()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        self.requests.append(request)
        self.arrived.set()
        if not self.answers:
            raise AssertionError(f"unexpected request {request.method} {request.url}")
        answer = self.answers.pop(0)
        return answer if isinstance(answer, httpx.Response) else await answer(request)

    def body(self, index: int) -> Any:
        return json.loads(self.requests[index].content)

    async def wait_for(self, count: int) -> None:
        """Until ``count`` requests have arrived."""
        async with asyncio.timeout(10):
            while len(self.requests) < count:
                self.arrived.clear()
                await self.arrived.wait()


def client(server: FakeServer, credentials: FakeCredentials | None = None) -> kube.Client:
    return kube.Client(credentials or FakeCredentials(), transport=MockHttp(server))


def status(code: int, message: str, reason: str = "") -> httpx.Response:
    """A Kubernetes Status answer."""
    return httpx.Response(code, json={"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                      "message": message, "reason": reason, "code": code})


def obj(name: str, rv: str, namespace: str | None = "ns", **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv, "uid": f"uid-{name}"}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta, **extra}


def listing(rv: str, *items: dict[str, Any]) -> httpx.Response:
    return httpx.Response(200, json={"kind": "List", "metadata": {"resourceVersion": rv},
                                     "items": list(items)})


def events(*pairs: tuple[str, dict[str, Any]]) -> bytes:
    return b"".join(json.dumps({"type": t, "object": o}).encode() + b"\n" for t, o in pairs)


class Stream(httpx.AsyncByteStream):
    """A watch body: ``chunks``, then an error (a dropped connection) or, with ``hang``, no end
    until the reader is cancelled."""

    def __init__(self, *chunks: bytes, error: Exception | None = None,
                 hang: bool = False) -> None:
        self.chunks, self.error, self.hang = chunks, error, hang

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.error is not None:
            raise self.error
        if self.hang:
            await asyncio.Event().wait()


def watch(*pairs: tuple[str, dict[str, Any]], error: Exception | None = None,
          hang: bool = False) -> httpx.Response:
    return httpx.Response(200, stream=Stream(events(*pairs), error=error, hang=hang))


async def never(request: httpx.Request) -> httpx.Response:
    """A request the server never answers (the test ends first)."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")
