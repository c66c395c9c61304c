"""The hook API's HTTP/1.1 server: each connection's bytes read by httptools' parser (llhttp,
the C parser of Node.js and uvicorn), each request read whole, then handed to one handler.

Two calls per Pod come to the hook API, each from curl on a connection of its own (a prolog, a
placeholder job's script). Measured on such calls with a trivial handler, the server's CPU per
call was about 265 µs with aiohttp.web and 195 µs with uvicorn, against 125 µs here (115 µs for
the bare parser loop): the parser is the same C code, what is left out is the request and
response objects around it.

What a caller who is no well-behaved client gets:

- a request that is not HTTP/1.1 (or 1.0), or a request line and headers over
  :data:`MAX_HEAD` bytes or :data:`MAX_HEADERS` lines: 400 or 431, and the connection closed;
- a body over ``max_body`` bytes (declared, or as it arrives): the handler is asked at once,
  with :attr:`Request.too_large` set and no body, and the connection is closed after its answer;
- a request not whole within :data:`REQUEST_TIMEOUT` of its first byte (or of the connection,
  for its first request): the connection is closed;
- requests sent one after the other without waiting (pipelined): answered in turn;
  ``Expect: 100-continue`` answered before the body is read; an upgrade is not made.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import http
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import cast

import httptools
import msgspec

log = logging.getLogger("sunk.http.server")

#: The request line and headers together (aiohttp's and Node's limits are about as large).
MAX_HEAD = 64 * 1024
MAX_HEADERS = 100
#: How long a request may take to arrive whole.
REQUEST_TIMEOUT = 15.0
#: An idle kept-open connection is closed after this long (uvicorn's default).
KEEPALIVE = 5.0


@dataclass(slots=True)
class Request:
    method: str
    #: The path as sent (percent-encoded), and the query string without its ``?``.
    path: str
    query: str
    #: Each header's first value under its lower-case name, its bytes read as Latin-1.
    headers: dict[str, str]
    body: bytes = b""
    #: The body was over the limit: it was not read (answer 413 where it matters).
    too_large: bool = False
    peer: str = ""

    @property
    def content_length(self) -> int | None:
        text = self.headers.get("content-length")
        return int(text) if text is not None and text.isdigit() else None


@dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str | None = None
    headers: Mapping[str, str] | None = None


Handler = Callable[[Request], Awaitable[Response]]


class _BadRequest(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


class _Stop(Exception):
    """Raised in a parser's call to stop reading: the connection is closing."""


_date_second = -1
_date_text = ""


def _date() -> str:
    """The Date header's value, made once a second."""
    global _date_second, _date_text
    now = int(time.time())
    if now != _date_second:
        _date_second, _date_text = now, email.utils.formatdate(now, usegmt=True)
    return _date_text


def encode(response: Response, *, keep_alive: bool, head_only: bool = False) -> bytes:
    """A response as the bytes written (headers given with a line break are refused)."""
    status = response.status
    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {status} {reason}", f"Date: {_date()}"]
    if status >= 200 and status not in (204, 304):  # those never have a body
        lines.append(f"Content-Length: {len(response.body)}")
    if response.content_type is not None:
        lines.append(f"Content-Type: {response.content_type}")
    for name, value in (response.headers or {}).items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"a line break in the HTTP header {name!r}")
        lines.append(f"{name}: {value}")
    if not keep_alive:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + response.body


def error(status: int, detail: str) -> Response:
    """The JSON error answer every refusal of the API has."""
    return Response(status, msgspec.json.encode({"status_code": status, "detail": detail}),
                    "application/json")


class _Connection(asyncio.Protocol):
    """One client's connection: requests parsed as they arrive, answered one at a time."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self._parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._peer = ""
        self._waiting: deque[Request] = deque()  # whole requests waiting their turn
        self._answering: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closing = False  # no more requests read: answer those read, then close
        # the request being read
        self._url = b""
        self._headers: dict[str, str] = {}
        self._head_size = 0
        self._header_lines = 0
        self._body: list[bytes] = []
        self._body_size = 0
        self._handed = False  # handed over before its end (too large): the rest is not read

    # -- asyncio's calls -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "")
        self._server.connections.add(self)
        self._arm(REQUEST_TIMEOUT)

    def connection_lost(self, exc: Exception | None) -> None:
        # A call in flight goes on (a long poll's work is the scheduler's, not the caller's);
        # its answer is not written.
        self._server.connections.discard(self)
        self._closing = True
        self._waiting.clear()
        self._disarm()
        # Each refers back to this protocol: the cycles would keep every closed connection
        # (two a Pod) until a full garbage collection, which is rare here.
        self._transport, self._parser = None, None

    def data_received(self, data: bytes) -> None:
        if self._closing or self._parser is None:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._closing = True  # the request is answered; what follows it is not HTTP
        except httptools.HttpParserError as exc:
            cause = exc.__context__  # what a call of ours raised, if it was one
            if isinstance(cause, _BadRequest):
                self._refuse(cause.status, str(cause))
            elif isinstance(cause, Exception) and not isinstance(cause, _Stop):
                # a bug of ours, not the caller's bytes: its traceback, and a 500
                log.error("reading a request from %s failed", self._peer, exc_info=cause)
                self._refuse(500, "Internal Server Error", warn=False)
            elif cause is None:
                self._refuse(400, f"Bad Request ({exc})")

    # -- httptools' calls ----------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self._closing:  # a request after one the connection closes with: not read
            raise _Stop
        self._url, self._headers, self._head_size, self._header_lines = b"", {}, 0, 0
        self._body, self._body_size, self._handed = [], 0, False
        if self._answering is None:  # (while a call is answered, its own wait counts)
            self._arm(REQUEST_TIMEOUT)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value))
        self._header_lines += 1
        if self._header_lines > MAX_HEADERS:
            raise _BadRequest(431, "Request Header Fields Too Large")
        self._headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))

    def _count_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > MAX_HEAD:
            raise _BadRequest(431, "Request Header Fields Too Large")

    def on_headers_complete(self) -> None:
        length = self._headers.get("content-length", "")
        if length.isdigit() and int(length) > self._server.max_body:
            self._hand_over(too_large=True)
        elif self._headers.get("expect", "").lower() == "100-continue" and self._transport:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._handed:
            return
        self._body_size += len(body)
        if self._body_size > self._server.max_body:
            self._hand_over(too_large=True)
        else:
            self._body.append(body)

    def on_message_complete(self) -> None:
        if not self._handed:
            self._hand_over(too_large=False)

    # -- answering -----------------------------------------------------------------------
    def _hand_over(self, *, too_large: bool) -> None:
        self._handed = True
        try:
            parsed = httptools.parse_url(self._url)
        except httptools.HttpParserInvalidURLError:
            raise _BadRequest(400, "Bad Request (an invalid request target)") from None
        path = (parsed.path or b"").decode("utf-8", "surrogateescape")
        query = (parsed.query or b"").decode("utf-8", "surrogateescape")
        assert self._parser is not None  # (called by the parser)
        request = Request(self._parser.get_method().decode("latin-1"), path, query,
                          self._headers, b"" if too_large else b"".join(self._body),
                          too_large, self._peer)
        self._body = []  # the request has it now
        if too_large or not self._parser.should_keep_alive():
            self._closing = True  # answer it, then close: the rest of its body is not read
            if self._transport is not None:
                self._transport.pause_reading()
        self._waiting.append(request)
        self._disarm()
        if self._answering is None:
            self._answering = task = self._server.loop.create_task(self._answer_all())
            self._server.tasks.add(task)
            task.add_done_callback(self._server.tasks.discard)

    async def _answer_all(self) -> None:
        while self._waiting:
            request = self._waiting.popleft()
            head_only = request.method == "HEAD"
            try:
                response = await self._server.handler(request)
                last = self._closing and not self._waiting
                data = encode(response, keep_alive=not last, head_only=head_only)
            except Exception:
                log.exception("call %s %s from %s failed", request.method, request.path,
                              request.peer)
                last = self._closing and not self._waiting
                data = encode(error(500, "Internal Server Error"), keep_alive=not last,
                              head_only=head_only)
            self._write(data, close=last)
        self._answering = None
        if not self._closing:
            self._arm(KEEPALIVE)

    def _write(self, data: bytes, *, close: bool) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(data)
        if close:
            transport.close()

    def _refuse(self, status: int, detail: str, *, warn: bool = True) -> None:
        """A request that cannot be read: say so (after the answers owed), and close."""
        if warn:
            log.warning("invalid HTTP request from %s: %.300s", self._peer, detail)
        self._closing = True
        if self._answering is not None:  # the requests read whole are answered, then it closes
            return
        self._write(encode(error(status, detail), keep_alive=False), close=True)

    def _arm(self, delay: float) -> None:
        self._disarm()
        self._timer = self._server.loop.call_later(delay, self.close)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        self._closing = True
        self._disarm()
        if self._transport is not None:
            self._transport.close()


@dataclass
class _Server:
    handler: Handler
    max_body: int
    loop: asyncio.AbstractEventLoop
    connections: set[_Connection] = field(default_factory=set)
    #: Calls being answered, on any connection (a long poll goes on after its caller left).
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


async def serve(handler: Handler, host: str, port: int, *, max_body: int,
                backlog: int = 100, shutdown_timeout: float = 2.5,
                started: Callable[[int], None] | None = None) -> None:
    """Serve ``handler`` until cancelled (``started`` is told the port, once listening); then
    stop listening, give the calls in flight ``shutdown_timeout`` to finish, and close every
    connection."""
    loop = asyncio.get_running_loop()
    state = _Server(handler, max_body, loop)
    try:
        listener = await loop.create_server(lambda: _Connection(state), host, port,
                                            backlog=backlog)
    except OSError as exc:
        raise OSError(f"could not serve on {host}:{port} (address in use?)") from exc
    try:
        if started is not None:
            started(listener.sockets[0].getsockname()[1])
        await asyncio.Event().wait()
    finally:
        listener.close()
        if state.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait(list(state.tasks), timeout=shutdown_timeout)
        for task in list(state.tasks):
            task.cancel()
        for connection in list(state.connections):
            connection.close()
        if state.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait(list(state.tasks), timeout=shutdown_timeout)
        await listener.wait_closed()
