"""The clients' transport interface (:class:`sunk.http.Transport`) on an httpx transport, for
tests: ``MockHttp(handler)`` serves a client's calls from ``httpx.MockTransport(handler)``.

httpx is a test tool here, not the product's: a handler that raises httpx's own errors (a
refused connection, a timeout) has them raised as the errors the product's stack raises (an
``OSError``: ``ConnectionError``, ``TimeoutError``), so the clients handle them as they would
on the bed."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping

import httpx

from sunk.http import Answer, Streamed, Timeout


def request(method: str, url: str, *, timeout: Timeout, headers: Mapping[str, str],
            content: bytes | None = None, sni_hostname: str | None = None) -> httpx.Request:
    """The httpx request a call makes (what a test's ``MockTransport`` is handed)."""
    extensions: dict[str, object] = {"timeout": {
        "connect": timeout.connect, "read": timeout.read, "write": timeout.read,
        "pool": timeout.read}}
    if sni_hostname:
        extensions["sni_hostname"] = sni_hostname
    return httpx.Request(method, url, headers=headers, content=content, extensions=extensions)


@contextlib.contextmanager
def _as_the_products_errors() -> Iterator[None]:
    try:
        yield
    except httpx.TimeoutException as exc:
        raise TimeoutError(str(exc)) from exc
    except httpx.HTTPError as exc:
        raise ConnectionError(str(exc)) from exc


class _Streamed:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code

    async def read(self) -> bytes:
        with _as_the_products_errors():
            return await self._response.aread()

    async def _lines(self) -> AsyncIterator[str]:
        with _as_the_products_errors():
            async for line in self._response.aiter_lines():
                yield line

    def lines(self) -> AsyncIterator[str]:
        return self._lines()


class HttpxTransport:
    """:class:`sunk.http.Transport` on an httpx transport."""

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self.transport = transport

    async def call(self, method: str, url: str, *, headers: Mapping[str, str],
                   body: bytes | None, timeouts: Timeout,
                   server_hostname: str | None = None) -> Answer:
        sent = request(method, url, timeout=timeouts, headers=headers, content=body,
                       sni_hostname=server_hostname)
        with _as_the_products_errors():
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
        with _as_the_products_errors():
            response = await self.transport.handle_async_request(sent)
        try:
            yield _Streamed(response)
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self.transport.aclose()


def MockHttp(handler: Callable[[httpx.Request], object]) -> HttpxTransport:
    """``httpx.MockTransport(handler)`` as the clients' transport."""
    return HttpxTransport(httpx.MockTransport(handler))  # type: ignore[arg-type]
