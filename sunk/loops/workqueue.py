"""A work queue of object keys, as client-go's: each key is handled by one worker at a time,
a key added while it is being handled is handled again afterwards, and failures back off.
How long each key waited for a worker is told to ``observe_wait`` (client-go's
``workqueue_queue_duration_seconds``): a queue that grows behind busy workers shows there."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, *, base_delay: float = 0.5, max_delay: float = 60.0,
                 observe_wait: Callable[[float], None] | None = None) -> None:
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        #: Each queued key -> when it was queued (monotonic).
        self._queued: dict[K, float] = {}
        self._observe_wait = observe_wait
        self._active: set[K] = set()
        self._dirty: set[K] = set()
        self._failures: dict[K, int] = {}
        self._timers: set[asyncio.TimerHandle] = set()
        self._base, self._max = base_delay, max_delay

    def __len__(self) -> int:
        return len(self._queued)

    def add(self, key: K) -> None:
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued[key] = time.monotonic()
            self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._timers.discard(handle)
            self.add(key)

        handle = loop.call_later(delay, fire)
        self._timers.add(handle)

    async def get(self) -> K:
        key = await self._queue.get()
        queued_at = self._queued.pop(key)
        if self._observe_wait is not None:
            self._observe_wait(time.monotonic() - queued_at)
        self._active.add(key)
        return key

    def done(self, key: K) -> None:
        self._active.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def failed(self, key: K) -> float:
        """Count a failure of ``key``; return how long to wait before the next try."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        return float(min(self._max, self._base * 2**n))

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def close(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
