"""Background loops that live as long as the process."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

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
