"""The hook API's HTTP/1.1 server (:mod:`sunk.http.server`), spoken to in raw bytes on
loopback: kept-open and pipelined requests, what a caller who is no well-behaved client may
send (oversized heads and bodies, garbage, slow requests, upgrades), and its shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httptools
import pytest

from sunk.http import server as httpserver
from sunk.http.server import Request, Response

MAX_BODY = 1000


@dataclass
class App:
    """The handler served: records each request; answers with what ``answer`` says."""

    seen: list[Request] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    block: bool = False
    finished: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, request: Request) -> Response:
        self.seen.append(request)
        self.arrived.set()
        if request.path == "/boom":
            raise RuntimeError("a bug")
        if request.path == "/badheader":
            return Response(200, b"", headers={"X-A": "b\r\nX-Injected: 1"})
        if request.path == "/empty":
            return Response(204, headers={"Allow": "GET"})
        if self.block:
            await self.release.wait()
        self.finished += 1
        self.done.set()
        body = json.dumps({"path": request.path, "query": request.query,
                           "size": len(request.body), "too_large": request.too_large})
        return Response(200, body.encode(), "application/json")


@contextlib.asynccontextmanager
async def serving(app: App, shutdown_timeout: float = 2.5,
                  ) -> AsyncIterator[tuple[int, asyncio.Task[None]]]:
    listening: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(httpserver.serve(
        app, "127.0.0.1", 0, max_body=MAX_BODY, started=listening.set_result,
        shutdown_timeout=shutdown_timeout))
    try:
        yield await listening, server
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, object]:
        parsed: dict[str, object] = json.loads(self.body)
        return parsed


async def read_answer(reader: asyncio.StreamReader, *, head_only: bool = False) -> Answer:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = b"" if head_only else await asyncio.wait_for(reader.readexactly(length), 5)
    return Answer(int(status.split(" ")[1]), headers, body)


@contextlib.asynccontextmanager
async def connection(port: int) -> AsyncIterator[tuple[asyncio.StreamReader,
                                                       asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def closed(reader: asyncio.StreamReader) -> bool:
    """The server closed the connection (nothing more comes)."""
    return await asyncio.wait_for(reader.read(), 5) == b""


def get(path: str, *extra: str) -> bytes:
    return ("\r\n".join([f"GET {path} HTTP/1.1", "Host: x", *extra]) + "\r\n\r\n").encode()


async def test_requests_on_a_kept_open_connection_are_answered_in_turn() -> None:
    app = App()
    async with serving(app) as (port, _), connection(port) as (reader, writer):
        writer.write(get("/a?x=1"))
        first = await read_answer(reader)
        writer.write(b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        second = await read_answer(reader)
    assert first.status == 200 and first.json() == {"path": "/a", "query": "x=1", "size": 0,
                                                    "too_large": False}
    assert "date" in first.headers and first.headers["content-type"] == "application/json"
    assert "connection" not in first.headers
    assert second.json()["size"] == 3 and app.seen[1].body == b"abc"
    assert app.seen[1].method == "POST"


async def test_pipelined_requests_are_answered_in_the_order_sent() -> None:
    app = App()
    async with serving(app) as (port, _), connection(port) as (reader, writer):
        writer.write(get("/1") + get("/2") + get("/3", "Connection: close"))
        answers = [await read_answer(reader) for _ in range(3)]
        assert await closed(reader)
    assert [a.json()["path"] for a in answers] == ["/1", "/2", "/3"]
    assert answers[2].headers["connection"] == "close"


@pytest.mark.parametrize("request_bytes", [
    get("/x", "Connection: close"),
    b"GET /x HTTP/1.0\r\n\r\n",
], ids=["close", "http-1.0"])
async def test_a_connection_not_kept_open_is_closed_after_its_answer(request_bytes: bytes) -> None:
    async with serving(App()) as (port, _), connection(port) as (reader, writer):
        writer.write(request_bytes)
        assert (await read_answer(reader)).status == 200
        assert await closed(reader)


async def test_a_body_declared_too_large_is_answered_without_being_read() -> None:
    app = App()
    async with serving(app) as (port, _), connection(port) as (reader, writer):
        writer.write(f"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n"
                     .encode())  # the body never comes
        answer = await read_answer(reader)
        assert await closed(reader)
    assert answer.json() == {"path": "/big", "query": "", "size": 0, "too_large": True}


async def test_a_chunked_body_growing_past_the_limit_is_cut_off() -> None:
    app = App()
    chunk = b"%x\r\n%s\r\n" % (400, b"y" * 400)
    async with serving(app) as (port, _), connection(port) as (reader, writer):
        writer.write(b"POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + chunk * 3)
        answer = await read_answer(reader)
        assert await closed(reader)
    assert answer.json()["too_large"] is True and answer.json()["size"] == 0
    assert len(app.seen) == 1


async def test_a_body_at_the_limit_is_read_whole() -> None:
    async with serving(App()) as (port, _), connection(port) as (reader, writer):
        writer.write(b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"%x\r\n%s\r\n0\r\n\r\n" % (MAX_BODY, b"z" * MAX_BODY))
        answer = await read_answer(reader)
    assert answer.json()["size"] == MAX_BODY and answer.json()["too_large"] is False


async def test_expect_100_continue_is_answered_before_the_body_is_sent() -> None:
    async with serving(App()) as (port, _), connection(port) as (reader, writer):
        writer.write(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                     b"Expect: 100-continue\r\n\r\n")
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"ok")
        assert (await read_answer(reader)).json()["size"] == 2


@pytest.mark.parametrize("extra", [
    ["X-Big: " + "a" * (httpserver.MAX_HEAD + 1)],
    [f"X-{n}: 1" for n in range(httpserver.MAX_HEADERS + 1)],
], ids=["long", "many"])
async def test_a_head_too_large_is_refused_with_431_and_the_connection_closed(
        extra: list[str]) -> None:
    app = App()
    async with serving(app) as (port, _), connection(port) as (reader, writer):
        writer.write(get("/x", *extra))
        answer = await read_answer(reader)
        assert await closed(reader)
    assert answer.status == 431 and answer.json()["status_code"] == 431
    assert app.seen == []


@pytest.mark.parametrize("garbage", [
    b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    b"GET /x HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    b"GET /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"GET /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
    b"\x00\xff\xfe" * 100,
], ids=["ssh", "header", "smuggling", "negative-length", "binary"])
async def test_what_is_not_http_gets_400_one_log_line_and_a_closed_connection(
        garbage: bytes, caplog: pytest.LogCaptureFixture) -> None:
    app = App()
    with caplog.at_level(logging.DEBUG, logger="sunk.http.server"):
        async with serving(app) as (port, _), connection(port) as (reader, writer):
            writer.write(garbage)
            answer = await read_answer(reader)
            assert await closed(reader)
    assert answer.status == 400 and answer.json()["status_code"] == 400
    assert app.seen == []
    [record] = [r for r in caplog.records if r.name == "sunk.http.server"]
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert record.getMessage().startswith("invalid HTTP request from 127.0.0.1:")


async def test_garbage_after_a_good_request_gets_its_answer_first(
        caplog: pytest.LogCaptureFixture) -> None:
    app = App()
    app.block = True
    async with serving(app) as (port, _), connection(port) as (reader, writer):
        writer.write(get("/first") + b"NOT HTTP AT ALL\r\n\r\n")
        await asyncio.wait_for(app.arrived.wait(), 5)
        app.release.set()
        assert (await read_answer(reader)).json()["path"] == "/first"
        assert await closed(reader)


async def test_a_request_not_whole_within_the_timeout_loses_its_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpserver, "REQUEST_TIMEOUT", 0.2)
    app = App()
    async with serving(app) as (port, _), connection(port) as (reader, writer):
        writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        assert await closed(reader)
    async with serving(app) as (port, _), connection(port) as (reader, writer):
        assert await closed(reader)  # nothing sent at all
    assert app.seen == []


async def test_an_idle_kept_open_connection_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpserver, "KEEPALIVE", 0.2)
    async with serving(App()) as (port, _), connection(port) as (reader, writer):
        writer.write(get("/x"))
        assert (await read_answer(reader)).status == 200
        assert await closed(reader)


async def test_a_long_call_is_not_cut_by_the_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpserver, "REQUEST_TIMEOUT", 0.1)
    monkeypatch.setattr(httpserver, "KEEPALIVE", 0.1)
    app = App()
    app.block = True
    async with serving(app) as (port, _), connection(port) as (reader, writer):
        writer.write(get("/poll"))
        await asyncio.sleep(0.4)
        app.release.set()
        assert (await read_answer(reader)).status == 200


async def test_a_failing_handler_gets_500_and_the_connection_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    async with serving(App()) as (port, _), connection(port) as (reader, writer):
        writer.write(get("/boom"))
        failed = await read_answer(reader)
        writer.write(get("/badheader"))
        refused = await read_answer(reader)
        writer.write(get("/fine"))
        fine = await read_answer(reader)
    assert failed.status == 500 and failed.json()["detail"] == "Internal Server Error"
    assert refused.status == 500 and "x-injected" not in refused.headers
    assert fine.status == 200
    assert [r.exc_info is not None for r in caplog.records
            if r.name == "sunk.http.server"] == [True, True]


async def test_head_gets_the_head_alone_and_204_no_length() -> None:
    async with serving(App()) as (port, _), connection(port) as (reader, writer):
        writer.write(b"HEAD /x HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await read_answer(reader, head_only=True)
        writer.write(get("/empty"))
        empty = await read_answer(reader)
        writer.write(get("/after"))
        after = await read_answer(reader)  # nothing stray came between them
    assert head.status == 200 and int(head.headers["content-length"]) > 0
    assert empty.status == 204 and "content-length" not in empty.headers
    assert empty.headers["allow"] == "GET"
    assert after.json()["path"] == "/after"


async def test_headers_are_read_as_latin_1_under_lower_case_names_first_value_first() -> None:
    app = App()
    async with serving(app) as (port, _), connection(port) as (reader, writer):
        writer.write(b"GET http://example.test/abs/path?q=%20 HTTP/1.1\r\nHost: x\r\n"
                     b"X-Name: caf\xe9\r\nx-name: second\r\n\r\n")
        assert (await read_answer(reader)).status == 200
    [request] = app.seen
    assert request.headers["x-name"] == "caf\xe9"
    assert (request.path, request.query) == ("/abs/path", "q=%20")
    assert request.peer.startswith("127.0.0.1:")


async def test_an_upgrade_is_not_made_the_request_is_answered_and_the_connection_closed(
        ) -> None:
    async with serving(App()) as (port, _), connection(port) as (reader, writer):
        writer.write(get("/ws", "Connection: Upgrade", "Upgrade: websocket") + b"\x81\x00")
        assert (await read_answer(reader)).status == 200
        assert await closed(reader)


async def test_a_call_whose_caller_left_finishes_without_writing() -> None:
    app = App()
    app.block = True
    async with serving(app) as (port, _):
        async with connection(port) as (_, writer):
            writer.write(get("/poll"))
            await asyncio.wait_for(app.arrived.wait(), 5)
        await asyncio.sleep(0.05)
        app.release.set()
        await asyncio.wait_for(app.done.wait(), 5)


async def test_shutdown_waits_for_calls_in_flight_then_cuts_them_short() -> None:
    app = App()
    app.block = True
    async with serving(app, shutdown_timeout=0.3) as (port, server), \
            connection(port) as (reader, writer):
        writer.write(get("/poll"))
        await asyncio.wait_for(app.arrived.wait(), 5)
        server.cancel()
        await asyncio.sleep(0.1)
        assert not server.done()  # waiting for the call
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)  # no longer listening
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(server, 5)
        assert await closed(reader)  # cut short, no answer
    assert app.finished == 0


async def test_serving_on_a_taken_port_says_so() -> None:
    async with serving(App()) as (port, _):
        with pytest.raises(OSError, match="address in use"):
            await httpserver.serve(App(), "127.0.0.1", port, max_body=MAX_BODY)


async def test_a_closed_connection_is_freed_without_waiting_for_the_garbage_collector(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two connections a Pod: held in cycles (the parser and the transport refer back to
    each), they stayed until a full collection, which is rare in the scheduler."""
    made: list[weakref.ref[httpserver._Connection]] = []

    class Tracked(httpserver._Connection):
        def __init__(self, server: httpserver._Server) -> None:
            super().__init__(server)
            made.append(weakref.ref(self))

    monkeypatch.setattr(httpserver, "_Connection", Tracked)
    gc.disable()
    try:
        async with serving(App()) as (port, _):
            for request in (get("/a", "Connection: close"), get("/b")):
                async with connection(port) as (reader, writer):
                    writer.write(request)
                    assert (await read_answer(reader)).status == 200
            for _ in range(50):
                if all(ref() is None for ref in made):
                    break
                await asyncio.sleep(0.02)
        assert len(made) == 2 and all(ref() is None for ref in made)
    finally:
        gc.enable()


async def test_a_bug_in_reading_a_request_is_a_500_with_its_traceback_not_a_400(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The caller's bytes were fine: it is not told they were not, and the log has the bug."""
    def broken(url: bytes) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr(httptools, "parse_url", broken)
    app = App()
    with caplog.at_level(logging.DEBUG, logger="sunk.http.server"):
        async with serving(app) as (port, _), connection(port) as (reader, writer):
            writer.write(get("/x"))
            answer = await read_answer(reader)
            assert await closed(reader)
    assert answer.status == 500 and app.seen == []
    [record] = [r for r in caplog.records if r.name == "sunk.http.server"]
    assert record.levelno == logging.ERROR and record.exc_info is not None
