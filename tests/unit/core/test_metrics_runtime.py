"""The scheduler's own pauses: garbage collections and a busy event loop (sunk.runtime.metrics)."""

from __future__ import annotations

import asyncio
import gc
import time

from prometheus_client import REGISTRY

from sunk.runtime import metrics


def _count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(f"{name}_count", labels) or 0.0


def test_every_collection_is_timed_by_generation_once() -> None:
    metrics.watch_gc()
    metrics.watch_gc()  # a second call adds no second callback
    before = _count("sunk_gc_pause_seconds", generation="2")
    gc.collect()
    assert _count("sunk_gc_pause_seconds", generation="2") == before + 1


async def test_a_blocked_loop_shows_as_lag() -> None:
    slow = REGISTRY.get_sample_value("sunk_event_loop_lag_seconds_bucket", {"le": "0.05"}) or 0
    total = _count("sunk_event_loop_lag_seconds")
    watcher = asyncio.create_task(metrics.watch_loop_lag(every=0.01))
    try:
        await asyncio.sleep(0.02)
        time.sleep(0.12)  # noqa: ASYNC251 - holds the loop, as a long piece of work would
        await asyncio.sleep(0.03)
    finally:
        watcher.cancel()
    assert _count("sunk_event_loop_lag_seconds") > total
    late = _count("sunk_event_loop_lag_seconds") - total - (
        (REGISTRY.get_sample_value("sunk_event_loop_lag_seconds_bucket", {"le": "0.05"}) or 0)
        - slow)
    assert late >= 1, "one timer fired more than 50 ms late"


def test_a_metrics_child_is_made_once_per_label_values_and_counts_in_the_metric() -> None:
    calls = metrics.child(metrics.SLURM_REQUESTS, "GET /test/{child}")
    assert metrics.child(metrics.SLURM_REQUESTS, "GET /test/{child}") is calls
    assert metrics.child(metrics.HOOK_CALLS, "test-child", "200") is not calls
    sample = ("sunk_slurm_requests_total", {"call": "GET /test/{child}"})
    before = REGISTRY.get_sample_value(*sample) or 0.0
    metrics.child(metrics.SLURM_REQUESTS, "GET /test/{child}").inc()
    assert REGISTRY.get_sample_value(*sample) == before + 1
