"""The scheduler's own throughput and latency over the last hour, for the dashboard's plots.

Every :data:`INTERVAL` seconds :meth:`TrendRecorder.sample` reads the scheduler's own
Prometheus metrics (:mod:`sunk.runtime.metrics`) straight from the metric objects (``collect()``: no
HTTP, no walk of the whole registry, whose process collector would read ``/proc``) and keeps
what changed since the previous reading as one :class:`TrendPoint`: Pods bound, jobs submitted
and Pods rejected in the interval, and the latency of the Pods bound in it. The last hour of
points is kept in a ring (:data:`WINDOW` / :data:`INTERVAL` = 360 points, a few tens of kB).

Pure apart from the reading of the metric objects: the time is an argument, and a reading can
be given as plain data, so tests drive it with numbers. :func:`record` is the loop the scheduler
runs (one sample every 10 s: negligible).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from sunk.runtime import metrics

#: Seconds between two samples.
INTERVAL: Final = 10.0
#: How much history is kept (seconds).
WINDOW: Final = 3600.0


@dataclass(frozen=True, slots=True)
class HistogramReading:
    """A histogram's cumulative state: ``buckets`` are (upper bound, cumulative count) in
    increasing order, the last one ``+Inf``."""

    buckets: tuple[tuple[float, float], ...] = ()
    count: float = 0.0
    total: float = 0.0


@dataclass(frozen=True, slots=True)
class Reading:
    """The metrics' cumulative values at one moment."""

    bound: float = 0.0
    submitted: float = 0.0
    rejected: float = 0.0
    latency: HistogramReading = HistogramReading()
    gang_latency: HistogramReading = HistogramReading()


@dataclass(frozen=True, slots=True)
class Latency:
    """The observations of one histogram within one interval. ``p50`` and ``p99`` are
    approximations at the histogram's bucket resolution (linear within the bucket the quantile
    falls in, as Prometheus' ``histogram_quantile`` does; the highest finite bound when it falls
    in ``+Inf``); ``mean`` is exact. All None when nothing was observed in the interval."""

    count: float = 0.0
    mean: float | None = None
    p50: float | None = None
    p99: float | None = None


@dataclass(frozen=True, slots=True)
class TrendPoint:
    """What happened in the ``seconds`` up to ``at`` (Unix time)."""

    at: float
    seconds: float
    bound: float
    submitted: float
    rejected: float
    latency: Latency
    gang_latency: Latency

    @property
    def bound_per_minute(self) -> float:
        return self.bound * 60.0 / self.seconds


@dataclass(frozen=True, slots=True)
class Sources:
    """The metric objects a reading comes from (:mod:`sunk.runtime.metrics`; tests
    give their own)."""

    bound: Collector = metrics.PODS_BOUND
    submitted: Collector = metrics.JOBS_SUBMITTED
    rejected: Collector = metrics.PODS_REJECTED
    latency: Collector = metrics.BIND_LATENCY
    gang_latency: Collector = metrics.GANG_BIND_LATENCY


def _counter(collector: Collector) -> float:
    """A counter's value, summed over its label sets."""
    return sum(s.value for m in collector.collect() for s in m.samples
               if s.name.endswith("_total"))


def _histogram(collector: Collector) -> HistogramReading:
    """A histogram's buckets, count and sum, summed over its label sets."""
    buckets: dict[float, float] = {}
    count = total = 0.0
    families: Iterable[Metric] = collector.collect()
    for family in families:
        for s in family.samples:
            if s.name.endswith("_bucket"):
                le = float(s.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + s.value
            elif s.name.endswith("_count"):
                count += s.value
            elif s.name.endswith("_sum"):
                total += s.value
    return HistogramReading(tuple(sorted(buckets.items())), count, total)


def read(sources: Sources | None = None) -> Reading:
    """The metrics now."""
    src = sources or Sources()
    return Reading(bound=_counter(src.bound), submitted=_counter(src.submitted),
                   rejected=_counter(src.rejected), latency=_histogram(src.latency),
                   gang_latency=_histogram(src.gang_latency))


def increase(before: float, after: float) -> float:
    """How much a counter grew; a counter that went down was reset (a new process), so all of
    its value is new, as Prometheus' ``increase()`` counts it."""
    return after - before if after >= before else after


def histogram_delta(before: HistogramReading, after: HistogramReading) -> HistogramReading:
    """The observations between two readings. If any part went down (or the buckets changed)
    the histogram was reset, and all of ``after`` is new."""
    bounds_match = [le for le, _ in before.buckets] == [le for le, _ in after.buckets]
    reset = (not bounds_match or after.count < before.count
             or any(a < b for (_, b), (_, a) in zip(before.buckets, after.buckets, strict=False)))
    if reset:
        return after
    return HistogramReading(
        tuple((le, a - b) for (le, b), (_, a) in zip(before.buckets, after.buckets, strict=True)),
        after.count - before.count, max(0.0, after.total - before.total))


def quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of cumulative ``buckets`` (upper bound, count), at bucket resolution:
    linear within the bucket the rank falls in (from 0 for the first bucket); the highest finite
    bound if it falls in ``+Inf``. None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, cumulative in buckets:
        if cumulative >= rank and cumulative > below:
            if math.isinf(upper):
                return lower
            return lower + (upper - lower) * (rank - below) / (cumulative - below)
        if not math.isinf(upper):
            lower = upper
        below = cumulative
    return lower


def latency(delta: HistogramReading) -> Latency:
    if delta.count <= 0:
        return Latency()
    return Latency(count=delta.count, mean=delta.total / delta.count,
                   p50=quantile(0.5, delta.buckets), p99=quantile(0.99, delta.buckets))


class TrendRecorder:
    """The last ``window`` seconds of :class:`TrendPoint`, one per call of :meth:`sample`."""

    def __init__(self, *, interval: float = INTERVAL, window: float = WINDOW,
                 reader: Callable[[], Reading] = read) -> None:
        self.interval = interval
        self.window = window
        self.reader = reader
        self.points: deque[TrendPoint] = deque(maxlen=max(1, math.ceil(window / interval)))
        self._last: tuple[float, Reading] | None = None

    def sample(self, now: float, reading: Reading | None = None) -> TrendPoint | None:
        """Take a reading (``reading``, or the metrics now) at Unix time ``now`` and record
        what changed since the previous one; the first call only sets the baseline (None). A
        clock that went back (or stood still) starts over: the points it holds would lie."""
        current = self.reader() if reading is None else reading
        last, self._last = self._last, (now, current)
        if last is not None and now <= last[0]:
            self.points.clear()
            return None
        self._forget(now)
        if last is None:
            return None
        before = last[1]
        point = TrendPoint(
            at=now, seconds=now - last[0],
            bound=increase(before.bound, current.bound),
            submitted=increase(before.submitted, current.submitted),
            rejected=increase(before.rejected, current.rejected),
            latency=latency(histogram_delta(before.latency, current.latency)),
            gang_latency=latency(histogram_delta(before.gang_latency, current.gang_latency)))
        self.points.append(point)
        return point

    def _forget(self, now: float) -> None:
        """Drop the points older than the window (the ring's size alone would keep them when
        samples come late)."""
        while self.points and self.points[0].at <= now - self.window:
            self.points.popleft()


async def record(recorder: TrendRecorder, clock: Callable[[], float] = time.time) -> None:
    """Sample every ``recorder.interval`` seconds, for ever (``sunk.runtime.supervise.forever`` runs
    it)."""
    while True:
        recorder.sample(clock())
        await asyncio.sleep(recorder.interval)
