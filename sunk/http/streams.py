"""The clients' calls on aiohttp's connections: every watch (an answer read as it comes), and
the calls :class:`sunk.http.pool.ConnectionPool` does not make itself (HEAD, and any call
through a proxy)."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Mapping

import aiohttp
import yarl

from sunk.http.base import Answer, Streamed, Timeout, env_proxy, split_lines


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
