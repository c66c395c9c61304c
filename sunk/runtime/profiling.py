"""Profile the running scheduler on demand: SIGUSR1 starts cProfile, SIGUSR2 stops it and
writes the profile (pstats format) to ``$SUNK_PROFILE`` (default
``/tmp/sunk-scheduler-<pid>.prof``).

The profiler counts CPU time (``time.process_time``), not wall time: on a busy machine a
wall-clock sampler charges a call with the time the process waited for a core, which lands
on whatever call woke another process (a socket write). The benchmarks use it to profile one
phase of a run (``python -m benchmarks.scheduling --profile``).

Started with ``PYTHONTRACEMALLOC=<frames>``, SIGUSR2 also writes a tracemalloc snapshot of
where the memory in use was allocated, to the same path with ``.memory`` appended."""

from __future__ import annotations

import asyncio
import cProfile
import logging
import os
import signal
import time
import tracemalloc

log = logging.getLogger("sunk.runtime.profiling")


class OnDemandProfiler:
    def __init__(self, path: str | None = None) -> None:
        self.path = path or os.environ.get("SUNK_PROFILE") or (
            f"/tmp/sunk-scheduler-{os.getpid()}.prof")
        self._profile: cProfile.Profile | None = None

    def start(self) -> None:
        if self._profile is None:
            self._profile = cProfile.Profile(time.process_time)
            self._profile.enable()
            log.info("profiling started (CPU time); SIGUSR2 writes it to %s", self.path)

    def stop(self) -> None:
        if tracemalloc.is_tracing():  # started with PYTHONTRACEMALLOC: where memory went
            tracemalloc.take_snapshot().dump(self.path + ".memory")
            log.info("memory snapshot written to %s.memory", self.path)
        if self._profile is not None:
            self._profile.disable()
            self._profile.dump_stats(self.path)
            self._profile = None
            log.info("profile written to %s", self.path)

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_signal_handler(signal.SIGUSR1, self.start)
        loop.add_signal_handler(signal.SIGUSR2, self.stop)
