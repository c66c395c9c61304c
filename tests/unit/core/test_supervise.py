"""What the event loop reports of errors no task awaited."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sunk.runtime.supervise import report_loop_error


class Transport(asyncio.Transport):
    def __init__(self, closing: bool) -> None:
        super().__init__()
        self.closing = closing

    def is_closing(self) -> bool:
        return self.closing


def uvloop_tls_noise(transport: asyncio.Transport) -> dict[str, object]:
    """As uvloop's SSLProtocol reports a write to a transport its peer had closed."""
    return {"message": "Fatal error on SSL protocol", "transport": transport,
            "exception": RuntimeError("unable to perform operation on <TCPTransport "
                                      "closed=True reading=False 0x5639>; the handler is closed")}


async def test_a_tls_write_on_a_connection_closed_already_is_no_error(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    report_loop_error(asyncio.get_running_loop(), uvloop_tls_noise(Transport(closing=True)))
    assert [(r.name, r.levelname) for r in caplog.records] == [("sunk", "DEBUG")]
    assert "on a connection its peer had closed" in caplog.records[0].getMessage()


@pytest.mark.parametrize("context", [
    uvloop_tls_noise(Transport(closing=False)),  # open: something else is wrong
    {"message": "Task exception was never retrieved", "exception": RuntimeError("boom")},
    {"message": "Fatal error on SSL protocol", "transport": Transport(closing=True),
     "exception": ValueError("the handler is closed")},
], ids=["transport-open", "other-error", "other-exception-type"])
async def test_anything_else_goes_to_the_default_handler(
        caplog: pytest.LogCaptureFixture, context: dict[str, object]) -> None:
    report_loop_error(asyncio.get_running_loop(), context)
    assert [(r.name, r.levelname) for r in caplog.records] == [("asyncio", "ERROR")]
