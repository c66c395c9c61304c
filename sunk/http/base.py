"""What every transport of :mod:`sunk.http` shares: a call's timeouts, its answer, the
:class:`Transport` interface the clients call through, and the small helpers on URLs, proxies
and streamed lines the transports use."""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlencode, urlsplit


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
    #: A bytearray when it came through :class:`sunk.http.pool.ConnectionPool` (grown in
    #: place, not copied).
    body: bytes | bytearray

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
    """Where the clients' calls go: the pool's connections, aiohttp's, or a test's own."""

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
