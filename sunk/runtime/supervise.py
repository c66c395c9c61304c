"""Background loops that live as long as the process, and what the event loop reports of
errors no task awaited."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("sunk")


async def forever(what: str, loop: Callable[[], Awaitable[None]]) -> None:
    """Run a background loop for the life of the process: a bug or an outage the loop did not
    expect is logged and the loop starts again (backing off), never ending the scheduler."""
    delay = 1.0
    while True:
        started = time.monotonic()
        try:
            await loop()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed; starting it again in %.0fs", what, delay)
        else:
            log.error("%s stopped; starting it again in %.0fs", what, delay)
        if time.monotonic() - started > 60:
            delay = 1.0
        await asyncio.sleep(delay)
        delay = min(30.0, delay * 2)


def report_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's exception handler. uvloop's TLS protocol, still reading what a peer
    sent as it closed the connection, answers on the closed transport and reports "Fatal error
    on SSL protocol" with a traceback (RuntimeError: "unable to perform operation on
    <TCPTransport closed=True ...>; the handler is closed"; MagicStack/uvloop). Nothing is
    lost, the connection was closed already: one line at debug, not an error. Anything else
    goes to the loop's default handler."""
    exc = context.get("exception")
    transport = context.get("transport")
    closing = getattr(transport, "is_closing", None)
    if (isinstance(exc, RuntimeError) and "the handler is closed" in str(exc)
            and callable(closing) and closing()):
        log.debug("%s on a connection its peer had closed: %s", context.get("message"), exc)
        return
    loop.default_exception_handler(context)
