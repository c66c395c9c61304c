"""The HTTP plumbing both clients share (the API server's, :mod:`sunk.kube.client`, and
slurmrestd's, :mod:`sunk.slurm.client`): a call goes straight to aiohttp's session, and its
answer comes back read whole as an :class:`Answer`.

The scheduler is CPU-bound on its calls (five or so per Pod). Measured against the test bed's
API server, 8 calls at a time: 310 µs of CPU per call through httpx's request and response
objects on aiohttp's connections, 150 µs through aiohttp alone (docs/benchmarks.md). So the
clients build the URL and headers themselves and hand them to aiohttp. Tests hand the clients an
``httpx.MockTransport``, which :class:`HttpxTransport` serves through the same interface.
"""

from __future__ import annotations

import contextlib
import ssl
import urllib.request
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlencode, urlsplit

import aiohttp
import httpx
import yarl


@dataclass(frozen=True, slots=True)
class Timeout:
    """How long a call may wait: for the connection (``connect``) and, between two reads
    of its answer, for the server (``read``; None: forever, for a watch)."""

    read: float | None
    connect: float


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer read whole."""

    method: str
    #: The path called (for messages), without the query.
    path: str
    status: int
    reason: str
    body: bytes

    @property
    def is_error(self) -> bool:
        return self.status >= 400

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class Streamed(Protocol):
    """An answer whose body is still being read (a watch)."""

    status: int

    async def read(self) -> bytes: ...

    def lines(self) -> AsyncIterator[str]: ...


class Transport(Protocol):
    """Where the clients' calls go: aiohttp's connections, or (in tests) an httpx transport."""

    async def call(self, method: str, url: str, *, headers: Mapping[str, str],
                   body: bytes | None, timeouts: Timeout,
                   server_hostname: str | None = None) -> Answer: ...

    def stream(self, method: str, url: str, *, headers: Mapping[str, str],
               timeouts: Timeout, server_hostname: str | None = None,
               ) -> contextlib.AbstractAsyncContextManager[Streamed]: ...

    async def aclose(self) -> None: ...


def with_query(url: str, params: Mapping[str, str] | None) -> str:
    """``url`` with ``params`` as its query (encoded as a form is)."""
    return f"{url}?{urlencode(params)}" if params else url


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY``/``HTTP_PROXY``, unless
    ``NO_PROXY`` covers its host), as httpx's client honoured it."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme or "https")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


async def split_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The lines of a stream of chunks, however the chunks cut them, and however long a line
    is (aiohttp's own ``readline`` refuses a line over 128 KiB; one watch event can be more)."""
    pending = b""
    async for chunk in chunks:
        pending += chunk
        if b"\n" not in chunk:
            continue
        *done, pending = pending.split(b"\n")
        for line in done:
            yield line.rstrip(b"\r").decode("utf-8", "replace")
    if pending:
        yield pending.rstrip(b"\r").decode("utf-8", "replace")


class _AiohttpStreamed:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status

    async def read(self) -> bytes:
        return await self._response.read()

    def lines(self) -> AsyncIterator[str]:
        return split_lines(self._response.content.iter_any())


class AiohttpTransport:
    """aiohttp's connection pool for one server (through ``proxy``, or the environment's)."""

    def __init__(self, url: str, *, verify: ssl.SSLContext | bool = True,
                 proxy: str | None = None, connections: int = 100) -> None:
        self._proxy = proxy or env_proxy(url)
        self._verify = verify
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[Timeout, aiohttp.ClientTimeout] = {}

    def _open(self) -> aiohttp.ClientSession:
        # Made on first use: a session belongs to the running event loop.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._verify, limit=self._connections),
                trust_env=False)
        return self._session

    def _timeout(self, timeouts: Timeout) -> aiohttp.ClientTimeout:
        if (made := self._timeouts.get(timeouts)) is None:
            # ``connect`` counts the wait for a free connection of the pool too: that may be
            # as long as a call's answer.
            made = self._timeouts[timeouts] = aiohttp.ClientTimeout(
                total=None, connect=timeouts.read, sock_connect=timeouts.connect,
                sock_read=timeouts.read)
        return made

    async def call(self, method: str, url: str, *, headers: Mapping[str, str],
                   body: bytes | None, timeouts: Timeout,
                   server_hostname: str | None = None) -> Answer:
        target = yarl.URL(url, encoded=True)
        async with self._open().request(
                method, target, headers=headers, data=body, timeout=self._timeout(timeouts),
                proxy=self._proxy, server_hostname=server_hostname,
                allow_redirects=False) as response:
            return Answer(method, target.path, response.status, response.reason or "",
                          await response.read())

    @contextlib.asynccontextmanager
    async def stream(self, method: str, url: str, *, headers: Mapping[str, str],
                     timeouts: Timeout, server_hostname: str | None = None,
                     ) -> AsyncIterator[Streamed]:
        async with self._open().request(
                method, yarl.URL(url, encoded=True), headers=headers,
                timeout=self._timeout(timeouts), proxy=self._proxy,
                server_hostname=server_hostname, allow_redirects=False) as response:
            yield _AiohttpStreamed(response)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


# -- tests: the same interface on an httpx transport (``httpx.MockTransport``) --------------

def request(method: str, url: str, *, timeout: Timeout, headers: Mapping[str, str],
            content: bytes | None = None, sni_hostname: str | None = None) -> httpx.Request:
    """The httpx request a call makes (what a test's ``MockTransport`` is handed)."""
    extensions: dict[str, object] = {"timeout": {
        "connect": timeout.connect, "read": timeout.read, "write": timeout.read,
        "pool": timeout.read}}
    if sni_hostname:
        extensions["sni_hostname"] = sni_hostname
    return httpx.Request(method, url, headers=headers, content=content, extensions=extensions)


class _HttpxStreamed:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code

    async def read(self) -> bytes:
        return await self._response.aread()

    def lines(self) -> AsyncIterator[str]:
        return self._response.aiter_lines()


class HttpxTransport:
    """:class:`Transport` on an httpx transport."""

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self.transport = transport

    async def call(self, method: str, url: str, *, headers: Mapping[str, str],
                   body: bytes | None, timeouts: Timeout,
                   server_hostname: str | None = None) -> Answer:
        sent = request(method, url, timeout=timeouts, headers=headers, content=body,
                       sni_hostname=server_hostname)
        response = await self.transport.handle_async_request(sent)
        content = await response.aread()
        return Answer(method, sent.url.path, response.status_code, response.reason_phrase,
                      content)

    @contextlib.asynccontextmanager
    async def stream(self, method: str, url: str, *, headers: Mapping[str, str],
                     timeouts: Timeout, server_hostname: str | None = None,
                     ) -> AsyncIterator[Streamed]:
        sent = request(method, url, timeout=timeouts, headers=headers,
                       sni_hostname=server_hostname)
        response = await self.transport.handle_async_request(sent)
        try:
            yield _HttpxStreamed(response)
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self.transport.aclose()
