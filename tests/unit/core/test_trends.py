"""The trend recorder: what changed in the metrics between two samples, on plain numbers."""

from __future__ import annotations

import asyncio
import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from sunk.runtime.trends import (
    HistogramReading,
    Latency,
    Reading,
    Sources,
    TrendRecorder,
    histogram_delta,
    increase,
    latency,
    quantile,
    read,
    record,
)

INF = math.inf


def hist(*cumulative: tuple[float, float], total: float = 0.0) -> HistogramReading:
    """A histogram reading from (upper bound, cumulative count) pairs, ``+Inf`` last."""
    return HistogramReading(tuple(cumulative), cumulative[-1][1], total)


def recorder() -> TrendRecorder:
    """A recorder that is always given its readings."""
    return TrendRecorder(reader=Reading)


# -- counters ------------------------------------------------------------------------------------


def test_the_first_sample_is_only_a_baseline() -> None:
    r = recorder()
    assert r.sample(100.0, Reading(bound=50, submitted=60)) is None
    assert list(r.points) == []


def test_counter_increments_between_samples() -> None:
    r = recorder()
    r.sample(0.0, Reading(bound=5, submitted=7, rejected=1))
    first = r.sample(10.0, Reading(bound=10, submitted=13, rejected=1))
    second = r.sample(30.0, Reading(bound=17, submitted=13, rejected=4))
    assert first is not None and second is not None
    assert (first.at, first.seconds, first.bound, first.submitted, first.rejected) == (
        10.0, 10.0, 5, 6, 0)
    assert first.bound_per_minute == 30.0
    assert (second.seconds, second.bound, second.submitted, second.rejected) == (20.0, 7, 0, 3)
    assert second.bound_per_minute == 21.0
    assert list(r.points) == [first, second]


def test_a_counter_that_went_down_was_reset_and_all_of_it_is_new() -> None:
    assert increase(10, 14) == 4
    assert increase(10, 3) == 3
    assert increase(10, 0) == 0
    r = recorder()
    r.sample(0.0, Reading(bound=100, submitted=100))
    point = r.sample(10.0, Reading(bound=3, submitted=104))
    assert point is not None and point.bound == 3 and point.submitted == 4


# -- histograms ----------------------------------------------------------------------------------


def test_bucket_deltas_give_the_intervals_quantiles_and_mean() -> None:
    before = hist((1, 2), (2, 3), (5, 3), (INF, 3), total=3.0)
    # ten Pods bound in the interval, all of them between 2 and 5 seconds, 35 s in all
    after = hist((1, 2), (2, 3), (5, 13), (INF, 13), total=38.0)
    delta = histogram_delta(before, after)
    assert delta == hist((1, 0), (2, 0), (5, 10), (INF, 10), total=35.0)
    lat = latency(delta)
    assert lat.count == 10 and lat.mean == 3.5
    # linear within (2, 5]: rank 5 of 10 -> halfway, rank 9.9 -> 99 % of the way
    assert lat.p50 == pytest.approx(3.5)
    assert lat.p99 == pytest.approx(4.97)


def test_the_recorder_keeps_the_intervals_latency_not_the_whole_history() -> None:
    r = recorder()
    r.sample(0.0, Reading(latency=hist((1, 100), (10, 100), (INF, 100), total=50)))
    point = r.sample(10.0, Reading(latency=hist((1, 100), (10, 104), (INF, 104), total=74)))
    assert point is not None
    assert point.latency.count == 4 and point.latency.mean == 6.0
    assert point.latency.p50 == pytest.approx(5.5)  # the 100 fast ones are older
    idle = r.sample(20.0, Reading(latency=hist((1, 100), (10, 104), (INF, 104), total=74)))
    assert idle is not None and idle.latency == Latency()


@pytest.mark.parametrize(("q", "buckets", "expected"), [
    (0.5, [(1, 4), (2, 4), (INF, 4)], 0.5),         # first bucket: from 0
    (0.5, [(1, 0), (2, 4), (INF, 4)], 1.5),
    (1.0, [(1, 0), (2, 4), (INF, 4)], 2.0),
    (0.99, [(1, 1), (2, 1), (INF, 100)], 2.0),      # in +Inf: the highest finite bound
    (0.5, [(1, 0), (2, 0), (INF, 0)], None),         # nothing observed
    (0.5, [], None),
])
def test_quantiles_at_bucket_resolution(q: float, buckets: list[tuple[float, float]],
                                        expected: float | None) -> None:
    assert quantile(q, buckets) == expected


def test_a_histogram_that_went_down_was_reset() -> None:
    before = hist((1, 10), (INF, 12), total=30)
    after = hist((1, 1), (INF, 2), total=4)
    assert histogram_delta(before, after) == after
    # a bucket going down alone is a reset too
    assert histogram_delta(hist((1, 5), (INF, 6)), hist((1, 4), (INF, 7))) == hist((1, 4),
                                                                                    (INF, 7))
    # and so is a change of buckets
    assert histogram_delta(hist((1, 5), (INF, 6)), hist((2, 7), (INF, 8))) == hist((2, 7),
                                                                                    (INF, 8))


def test_an_empty_interval_has_no_latency() -> None:
    assert latency(HistogramReading()) == Latency(0, None, None, None)


# -- the ring ------------------------------------------------------------------------------------


def test_the_ring_keeps_one_hour() -> None:
    r = recorder()
    assert r.points.maxlen == 360
    for i in range(500):
        r.sample(i * 10.0, Reading(bound=i))
    assert len(r.points) == 360
    assert r.points[0].at == 4990.0 - 3590.0 and r.points[-1].at == 4990.0


def test_points_older_than_the_window_go_even_when_samples_came_late() -> None:
    r = recorder()
    for t in (0.0, 10.0, 20.0, 3000.0):
        r.sample(t, Reading())
    assert [p.at for p in r.points] == [10.0, 20.0, 3000.0]
    r.sample(3615.0, Reading(bound=3))  # the window starts at 15: the point at 10 goes
    assert [p.at for p in r.points] == [20.0, 3000.0, 3615.0]
    assert r.points[-1].seconds == 615.0 and r.points[-1].bound == 3
    r.sample(6700.0, Reading(bound=3))  # from 3100 on
    assert [p.at for p in r.points] == [3615.0, 6700.0]


def test_a_clock_that_went_back_starts_over() -> None:
    r = recorder()
    for t in (100.0, 110.0, 120.0):
        r.sample(t, Reading())
    assert r.sample(50.0, Reading(bound=9)) is None
    assert list(r.points) == []
    point = r.sample(60.0, Reading(bound=10))
    assert point is not None and point.bound == 1


# -- reading prometheus_client's metrics ---------------------------------------------------------


def test_readings_come_from_the_metric_objects() -> None:
    registry = CollectorRegistry()
    bound = Counter("t_bound", "", registry=registry)
    submitted = Counter("t_submitted", "", ["result"], registry=registry)
    rejected = Counter("t_rejected", "", registry=registry)
    lat = Histogram("t_latency", "", buckets=(1, 5), registry=registry)
    gang = Histogram("t_gang", "", buckets=(1,), registry=registry)
    sources = Sources(bound=bound, submitted=submitted, rejected=rejected, latency=lat,
                      gang_latency=gang)
    r = TrendRecorder(reader=lambda: read(sources))
    assert r.sample(0.0) is None
    bound.inc(3)
    submitted.labels("ok").inc(2)
    submitted.labels("error").inc()
    for seconds in (0.5, 2, 3, 30):
        lat.observe(seconds)
    gang.observe(0.5)
    point = r.sample(10.0)
    assert point is not None
    assert (point.bound, point.submitted, point.rejected) == (3, 3, 0)
    assert point.latency.count == 4 and point.latency.mean == pytest.approx(35.5 / 4)
    assert point.latency.p50 == pytest.approx(1 + 4 * (2 - 1) / 2)  # rank 2 of 4 in (1, 5]
    assert point.latency.p99 == 5.0  # in +Inf
    assert point.gang_latency.count == 1 and point.gang_latency.p50 == pytest.approx(0.5)
    reading = read(sources)
    assert reading.latency.buckets == ((1.0, 1.0), (5.0, 3.0), (INF, 4.0))
    assert reading.latency.total == 35.5


def test_the_default_sources_are_the_schedulers_metrics() -> None:
    from sunk.runtime import metrics

    before = read()
    metrics.PODS_BOUND.inc()
    metrics.BIND_LATENCY.labels("team-a").observe(0.7)
    metrics.BIND_LATENCY.labels("team-b").observe(0.2)  # summed over namespaces
    after = read()
    assert increase(before.bound, after.bound) == 1
    assert latency(histogram_delta(before.latency, after.latency)).count == 2


def counting(calls: int) -> tuple[asyncio.Event, TrendRecorder]:
    """A recorder sampling every millisecond, whose reading counts the Pods bound, and an
    Event set once it has been read ``calls`` times."""
    enough = asyncio.Event()
    seen = 0

    def reader() -> Reading:
        nonlocal seen
        seen += 1
        if seen >= calls:
            enough.set()
        return Reading(bound=seen)

    return enough, TrendRecorder(interval=0.001, reader=reader)


async def test_the_loop_samples_every_interval_with_the_clock() -> None:
    times = iter(range(100, 200, 5))
    enough, r = counting(4)
    task = asyncio.create_task(record(r, clock=lambda: float(next(times))))
    try:
        await asyncio.wait_for(enough.wait(), 5)
    finally:
        task.cancel()
    assert [(p.at, p.seconds, p.bound) for p in r.points][:3] == [
        (105.0, 5.0, 1), (110.0, 5.0, 1), (115.0, 5.0, 1)]


async def test_the_dashboards_source_records_its_trends_in_the_background() -> None:
    from typing import Any, cast

    from sunk.wiring import DashboardSource

    enough, r = counting(3)
    source = DashboardSource(cast(Any, None), cast(Any, None), cast(Any, None), r)
    assert source.trends is r
    task = asyncio.create_task(source.record_trends())
    try:
        await asyncio.wait_for(enough.wait(), 5)
    finally:
        task.cancel()
    assert len(r.points) >= 1 and all(p.bound == 1 for p in r.points)
