"""A work queue of object keys, as client-go's: each key is handled by one worker at a time,
a key added while it is being handled is handled again afterwards, and failures back off.
How long each key waited for a worker is told to ``observe_wait`` (client-go's
``workqueue_queue_duration_seconds``): a queue that grows behind busy workers shows there."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class WorkQueue:
    def __init__(self, *, base_delay: float = 0.5, max_delay: float = 60.0,
                 observe_wait: Callable[[float], None] | None = None) -> None:
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        #: Each queued key -> when it was queued (monotonic).
        self._queued: dict[str, float] = {}
        self._observe_wait = observe_wait
        self._active: set[str] = set()
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._timers: set[asyncio.TimerHandle] = set()
        self._base, self._max = base_delay, max_delay

    def __len__(self) -> int:
        return len(self._queued)

    def add(self, key: str) -> None:
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued[key] = time.monotonic()
            self._queue.put_nowait(key)

    def add_after(self, key: str, delay: float) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._timers.discard(handle)
            self.add(key)

        handle = loop.call_later(delay, fire)
        self._timers.add(handle)

    async def get(self) -> str:
        key = await self._queue.get()
        queued_at = self._queued.pop(key)
        if self._observe_wait is not None:
            self._observe_wait(time.monotonic() - queued_at)
        self._active.add(key)
        return key

    def done(self, key: str) -> None:
        self._active.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def failed(self, key: str) -> float:
        """Count a failure of ``key``; return how long to wait before the next try."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        return float(min(self._max, self._base * 2**n))

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def close(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
