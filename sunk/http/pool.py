"""The clients' calls on kept-open connections of their own, their answers parsed by
httptools: half the CPU of a call through aiohttp, which the scheduler, CPU-bound on its calls,
spends five or so times per Pod. :class:`ConnectionPool` keeps the connections (one call at a
time on each); :class:`_Connection` is one of them, an asyncio protocol."""

from __future__ import annotations

import asyncio
import contextlib
import select
import ssl
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

from sunk.http.base import Answer, Streamed, Timeout, env_proxy
from sunk.http.streams import AiohttpTransport

#: aiohttp's default: a connection unused for longer may be closed by the server any moment.
KEEP_IDLE = 15.0
#: A kept-open connection unused for longer has its socket looked at before it is used again
#: (:meth:`_Connection.heard_from`). One used since was reused as it is: in a burst each call
#: takes a connection a few milliseconds old, and the look was 5 of each Pod's calls.
LOOK_AFTER = 1.0


#: What a connection makes of an answer: status, reason, body, and whether to keep it open.
_Parsed = tuple[int, str, bytes | bytearray, bool]


class _Connection(asyncio.Protocol):
    """One kept-open HTTP/1.1 connection: a call writes its request and waits for
    httptools' parser to see the whole answer."""

    def __init__(self) -> None:
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._answer: asyncio.Future[_Parsed] | None = None
        self._reason = b""
        #: The answer's body as it comes: one buffer grown in place, so the largest answer (the
        #: adoption's listing of every job, 200 MB at 11,000 jobs) is not held twice, as
        #: pieces and joined, which left the scheduler 16 MiB larger after a restart.
        self._body = bytearray()
        self._sized = False  # the answer says where it ends (Content-Length or chunked)
        self._began = False  # a byte of the answer came
        self.closed = False
        #: ``loop.time()`` of the last bytes read, or of the answer's end while idle.
        self.active_at = 0.0
        self._read = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def send(self, data: bytes, read: float | None) -> asyncio.Future[_Parsed]:
        """Write a request; the future gets (status, reason, body, keep the connection), or
        TimeoutError after ``read`` seconds without a byte of the answer."""
        assert self._transport is not None and self._answer is None
        loop = asyncio.get_running_loop()
        self._answer = loop.create_future()
        self._reason, self._body, self._sized, self._began = b"", bytearray(), False, False
        self.active_at = loop.time()
        if read is not None:
            self._read, self._timer = read, loop.call_later(read, self._check_quiet)
        self._transport.write(data)
        return self._answer

    def _check_quiet(self) -> None:
        self._timer = None
        if self._answer is None:
            return
        loop = asyncio.get_running_loop()
        quiet = loop.time() - self.active_at
        if quiet < self._read:
            self._timer = loop.call_later(self._read - quiet, self._check_quiet)
        else:
            self._fail(TimeoutError(f"no answer for {self._read:g}s"))

    def _settled(self) -> None:
        """The answer came, or will not: its timer and pieces go."""
        self._answer, self._body = None, bytearray()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    @property
    def began(self) -> bool:
        return self._began

    def heard_from(self) -> bool:
        """Bytes, or the end, wait unread on this idle connection's socket: the server closed
        it (or spoke unasked) while the loop was not reading, as between two tests. urllib3
        looks the same way before it reuses a connection; a POST sent on it would fail, and is
        never sent twice. (A close that arrives while the loop is busy, on a connection used
        within :data:`LOOK_AFTER`, is not looked for: that POST fails, as it did before the look,
        and its connection is dropped.)"""
        transport = self._transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is None:
            return transport is None
        try:
            poller = select.poll()  # (select.select fails past 1,024 descriptors)
            poller.register(sock.fileno(), select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError):  # closed under us
            return True

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Close at once, without TLS's farewell: a TLS connection's ``close`` waits for the
        server's answer to its close_notify on the loop, and a loop that ends first (a test
        session's, a process stopping) leaves its socket open, for the garbage collector to
        find (a ResourceWarning)."""
        self.closed = True
        if self._transport is not None:
            self._transport.abort()

    def _fail(self, exc: Exception) -> None:
        answer = self._answer
        self._settled()
        if answer is not None and not answer.done():
            answer.set_exception(exc)

    # -- asyncio's calls -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if self._answer is None or parser is None:  # bytes no call asked for (a server's
            self.close()                             # farewell): not reused
            return
        self._began = True
        self.active_at = asyncio.get_running_loop().time()
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"an answer that is not HTTP/1.1: {exc}"))
            self.close()

    def eof_received(self) -> bool:
        if self._answer is not None and self._began and not self._sized:
            self._complete(keep=False)  # an answer that ends with its connection
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionResetError("the server closed the connection before its answer "
                                        "ended") if exc is None else exc)
        # Each refers back to this protocol: the cycles would hold the connection's TLS
        # buffers (256 kB in uvloop) until a full garbage collection, which is rare here.
        self._transport, self._parser = None, None

    # -- httptools' calls ----------------------------------------------------------------
    def on_status(self, status: bytes) -> None:
        self._reason = status

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self._sized = True

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        parser = self._parser
        if parser is not None and 100 <= parser.get_status_code() < 200:
            self._body, self._sized = bytearray(), False  # informational: the answer follows
            return
        self._complete(keep=parser is not None and parser.should_keep_alive())

    def _complete(self, *, keep: bool) -> None:
        # The buffer goes with the answer, not copied. Kept here, an idle connection held the
        # last answer until its next call (the 200 MB listing of 11,000 jobs at adoption).
        answer, body = self._answer, self._body
        self._settled()
        if answer is not None and not answer.done():
            status = self._parser.get_status_code() if self._parser is not None else 0
            answer.set_result((status, self._reason.decode("latin-1"), body, keep))


#: Methods a call may make again on a new connection when a kept-open one turns out to be
#: closed by the server before it answered (as aiohttp and browsers do): asking twice is safe.
_IDEMPOTENT = frozenset({"GET", "PUT", "DELETE", "OPTIONS"})


class ConnectionPool:
    """:class:`Transport` with its calls on kept-open connections of its own, their answers
    parsed by httptools (the C parser uvicorn uses): about half the CPU of an aiohttp call
    (75 against 145 µs against the test bed's API server, TLS included). Watches, HEAD, and
    every call through a proxy go through aiohttp (:class:`AiohttpTransport`)."""

    def __init__(self, url: str, *, verify: ssl.SSLContext | bool = True,
                 proxy: str | None = None, connections: int = 100) -> None:
        self._aiohttp = AiohttpTransport(url, verify=verify, proxy=proxy,
                                         connections=connections)
        parts = urlsplit(url)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self._host_header = parts.netloc.rpartition("@")[2]
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._tls: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self._tls = verify if isinstance(verify, ssl.SSLContext) else _tls_context(verify)
        self._direct = parts.scheme in ("http", "https") and (proxy or env_proxy(url)) is None
        self._slots = asyncio.Semaphore(connections)
        #: Kept-open connections waiting for a call, the most recently used last.
        self._idle: deque[_Connection] = deque()
        self._open: set[_Connection] = set()
        self._sweep: asyncio.TimerHandle | None = None

    async def call(self, method: str, url: str, *, headers: Mapping[str, str],
                   body: bytes | None, timeouts: Timeout,
                   server_hostname: str | None = None) -> Answer:
        # (an answer to HEAD has no body whatever its Content-Length says: the parser here
        # does not know which call an answer is for)
        if not self._direct or method == "HEAD" or not url.startswith(self._origin):
            return await self._aiohttp.call(method, url, headers=headers, body=body,
                                            timeouts=timeouts, server_hostname=server_hostname)
        target = url[len(self._origin):] or "/"
        request = self._request(method, target, headers, body)
        async with self._slots:
            for attempt in (1, 2):
                connection, reused = await self._connection(timeouts, server_hostname)
                try:
                    status, reason, content, keep = await connection.send(
                        request, timeouts.read)
                except ConnectionError:
                    self._drop(connection)
                    if reused and not connection.began and method in _IDEMPOTENT and attempt == 1:
                        continue  # closed by the server while idle: ask on a new connection
                    raise
                except BaseException:  # cancelled, or timed out, mid-answer: not reusable
                    self._drop(connection)
                    raise
                if keep and not connection.closed:
                    self._idle.append(connection)
                    if self._sweep is None:
                        self._sweep = asyncio.get_running_loop().call_later(
                            KEEP_IDLE, self._close_idle)
                else:
                    self._drop(connection)
                return Answer(method, target.partition("?")[0], status, reason, content)
        raise AssertionError("unreachable")  # pragma: no cover

    def _request(self, method: str, target: str, headers: Mapping[str, str],
                 body: bytes | None) -> bytes:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                raise ValueError(f"a line break in the HTTP header {name!r}")
            lines.append(f"{name}: {value}")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head + body if body else head

    async def _connection(self, timeouts: Timeout,
                          server_hostname: str | None) -> tuple[_Connection, bool]:
        """A kept-open connection (True) or a new one (False)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._idle:
            connection = self._idle.pop()
            idle = now - connection.active_at
            if not connection.closed and idle < KEEP_IDLE and (
                    idle < LOOK_AFTER or not connection.heard_from()):
                return connection, True
            self._drop(connection)
        async with asyncio.timeout(timeouts.connect):
            _, connection = await loop.create_connection(
                _Connection, self._host, self._port, ssl=self._tls,
                server_hostname=(server_hostname or self._host) if self._tls else None)
        self._open.add(connection)
        return connection, False

    def _close_idle(self) -> None:
        """Close the connections unused for :data:`KEEP_IDLE` (the oldest first), as aiohttp's
        pool did: a burst of calls opens many, and each held its TLS buffers, and a socket on
        the server, for as long as the scheduler ran."""
        self._sweep = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._idle and (self._idle[0].closed
                              or now - self._idle[0].active_at >= KEEP_IDLE):
            self._drop(self._idle.popleft())
        if self._idle:
            self._sweep = loop.call_later(
                max(0.0, self._idle[0].active_at + KEEP_IDLE - now), self._close_idle)

    def _drop(self, connection: _Connection) -> None:
        connection.close()
        self._open.discard(connection)

    @contextlib.asynccontextmanager
    async def stream(self, method: str, url: str, *, headers: Mapping[str, str],
                     timeouts: Timeout, server_hostname: str | None = None,
                     ) -> AsyncIterator[Streamed]:
        async with self._aiohttp.stream(method, url, headers=headers, timeouts=timeouts,
                                        server_hostname=server_hostname) as streamed:
            yield streamed

    async def aclose(self) -> None:
        for connection in self._open:
            connection.abort()
        self._open.clear()
        self._idle.clear()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        await self._aiohttp.aclose()


def _tls_context(verify: bool) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
