"""The scheduler's memory: short full garbage collections (:class:`FreezeSurvivors`), and
memory freed after a big read given back to the system (:func:`give_back_free_memory`).

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
import ctypes
import gc
import logging
import time
from collections.abc import Callable
from typing import Final

log = logging.getLogger("sunk.runtime.heap")

REFRESH_SECONDS: Final = 600.0
CHECK_SECONDS: Final = 1.0
#: Objects allocated (and not yet freed) between two collections of the youngest generation;
#: Python's default is 700. Decoding one watch event or one answer makes hundreds, nearly all
#: freed by reference counting soon after: at 700 the collector walked them about 80 times in
#: a saturated run of 400 Pods, 0.17 ms of CPU a Pod.
YOUNG_COLLECTION_EVERY: Final = 10_000


def collect_young_less_often() -> None:
    """Young collections every :data:`YOUNG_COLLECTION_EVERY` allocations, the older
    generations' thresholds left as they are (so full collections, counted in young ones,
    are rarer too)."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)


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


def give_back_free_memory() -> None:
    """Return the C library's free memory to the system, after a big read is gone.

    Adopting 11,000 jobs reads Slurm's full listing, about 200 MB of JSON, in pieces that
    glibc's allocator keeps for reuse once freed: the scheduler's RSS stayed about 50 MiB above
    a run that never read it. ``malloc_trim(0)`` hands back the free pages. Elsewhere (another
    C library) this does nothing.
    """
    # The process's own symbols (libc among them): find_library would run ldconfig in a
    # subprocess, on the event loop.
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is None:
        return
    before = _resident_mib()
    trim(0)
    log.info("gave back %.0f MiB of freed memory", before - _resident_mib())


def _resident_mib() -> float:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * 4096 / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0
