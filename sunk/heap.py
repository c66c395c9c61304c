"""Short full garbage collections: what survived one is frozen, so the next walks only what
arrived since.

A full collection walks every object the collector tracks; with the caches of 11,000 Pods and
their jobs that took 0.2 s, 29 times while a benchmark filled them (``sunk_gc_pause_seconds``),
and the event loop (hook calls, dashboard pages, watches) stood still each time. Almost all of
it lives on: cached Pods, jobs and records, replaced one by one. So after each full collection
the survivors are frozen (``gc.freeze``: out of the collector's view, still freed by reference
counting), and the next full collection walks only the newer objects.

A frozen object that later becomes part of a reference cycle is not reclaimed while frozen, so
everything is unfrozen every :data:`REFRESH_SECONDS`, and the next full collection walks it all
once: at most one long pause in that time, and no garbage kept longer.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import Final

REFRESH_SECONDS: Final = 600.0
CHECK_SECONDS: Final = 1.0


class FreezeSurvivors:
    """Freezes what survived each full collection; unfreezes all every ``refresh`` seconds."""

    def __init__(self, refresh: float = REFRESH_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.refresh, self.clock = refresh, clock
        self._full_collections = gc.get_stats()[2]["collections"]
        self._unfrozen_at = clock()

    def check(self) -> None:
        """After a full collection since the last check, freeze its survivors (or, once per
        ``refresh``, unfreeze everything instead)."""
        collections = gc.get_stats()[2]["collections"]
        if collections == self._full_collections:
            return
        self._full_collections = collections
        if self.clock() - self._unfrozen_at >= self.refresh:
            gc.unfreeze()
            self._unfrozen_at = self.clock()
        else:
            gc.freeze()

    async def run(self, every: float = CHECK_SECONDS) -> None:
        """Forever: :meth:`check` every ``every`` seconds (objects made in between are frozen
        too: they would have been walked by the next full collection all the same)."""
        while True:
            await asyncio.sleep(every)
            self.check()
